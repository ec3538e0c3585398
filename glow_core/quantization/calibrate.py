"""Calibration: the real range a tensor is quantized over, from its profile statistics.

- ``minmax``: the observed [min, max];
- ``percentile``: the [PERCENTILE_LOW, PERCENTILE_HIGH] quantiles of the histogram (outliers clip);
- ``entropy``: the range whose quantization loses the least information, as TensorRT, Glow and onnxruntime
  calibrate: over the histogram of |x|, every threshold T from the quantized bin count upwards is tried; the
  reference distribution P is the histogram cut at T with the clipped tail added to its last bin, Q is P merged
  into as many bins as the integer range has levels (on the nonzero bins) and expanded back; the T with the
  smallest KL divergence D(P || Q) wins, and the range is [max(min, -T), min(max, T)].
"""
from __future__ import annotations

import numpy as np

from ..errors import GlowError

CALIBRATIONS = ("minmax", "entropy", "percentile")
PERCENTILE_LOW, PERCENTILE_HIGH = 0.01, 99.99


def check(calibration: str):
    if calibration not in CALIBRATIONS:
        raise GlowError(f"calibration {calibration!r} is not accepted; accepted: {', '.join(CALIBRATIONS)}")


def calibrated_range(stats, calibration: str, levels: int = 256) -> tuple[float, float]:
    """[lo, hi] to quantize tensor ``stats`` (a TensorStats) over; ``levels``: the integer range's size."""
    if stats.min > stats.max:  # never finite: nothing to calibrate
        return 0.0, 0.0
    if calibration == "minmax" or stats.counts.sum() <= 0:
        return stats.min, stats.max
    edges = np.linspace(stats.lo, stats.hi, len(stats.counts) + 1)
    if calibration == "percentile":
        cum = np.concatenate([[0.0], np.cumsum(stats.counts)]) / stats.counts.sum()
        lo = float(np.interp(PERCENTILE_LOW / 100, cum, edges))
        hi = float(np.interp(PERCENTILE_HIGH / 100, cum, edges))
        return (stats.min if stats.min >= 0 else lo), hi
    t = kl_threshold(_abs_histogram(stats.counts, edges), max(stats.max, -stats.min),
                     levels // 2 if stats.min < 0 else levels - 1)
    return max(stats.min, -t), min(stats.max, t)


def _abs_histogram(counts, edges):
    """The histogram of |x| over [0, max |x|] with as many bins, from the histogram over ``edges``."""
    amax = max(abs(edges[0]), abs(edges[-1]))
    new = np.linspace(0.0, amax, len(counts) + 1)
    cum = np.concatenate([[0.0], np.cumsum(counts)])
    pos = np.diff(np.interp(new, edges, cum))  # mass in [new_i, new_i+1]
    neg = np.diff(np.interp(-new, edges, cum)) * -1  # mass in [-new_i+1, -new_i]
    return pos + neg


def kl_threshold(hist, amax: float, levels: int) -> float:
    """The |x| threshold minimizing D(P || Q) over a histogram of |x| on [0, amax] (see module doc)."""
    hist = np.asarray(hist, np.float64)
    n = len(hist)
    width = amax / n
    if amax <= 0 or n <= levels:
        return amax
    best, best_t = np.inf, amax
    for i in range(levels, n + 1, max(1, (n - levels) // 256)):
        p = hist[:i].copy()
        p[-1] += hist[i:].sum()
        nonzero = p > 0
        group = np.arange(i) * levels // i  # the quantized bin each histogram bin merges into
        sums = np.bincount(group, weights=hist[:i], minlength=levels)
        used = np.bincount(group, weights=nonzero, minlength=levels)
        q = np.where(nonzero, sums[group] / np.maximum(used[group], 1), 0.0)
        ps, qs = p.sum(), q.sum()
        if ps <= 0 or qs <= 0:
            continue
        pn, qn = p / ps, q / qs
        mask = pn > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            kl = float(np.sum(pn[mask] * np.log(pn[mask] / np.where(qn[mask] > 0, qn[mask], 1e-12))))
        if kl < best:
            best, best_t = kl, (i + 0.5) * width
    return min(best_t, amax)
