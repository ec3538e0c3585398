"""Signal ops: DFT and STFT lowered to matmuls by constant DFT matrices; window and mel generators
fold to constants.

A DFT of length N along one axis is a matmul by the N x K cosine and sine
matrices (computed here in numpy), with the real and imaginary parts kept as
separate tensors and joined on the trailing axis of size 2. STFT gathers the
frames (a constant index matrix), multiplies by the window and applies the
same DFT. HannWindow, HammingWindow, BlackmanWindow and MelWeightMatrix only
depend on their (constant) scalar inputs and produce constants.
"""
from __future__ import annotations

import numpy as np

from ...errors import MemoryLimitError, ShapeError
from ...types import dtype
from ..registry import onnx_op
from .indexing import MAX_CONSTANT_ELEMENTS


def _split_complex(b, x):
    """(real, imag or None) of a [..., 1|2] tensor, each without the trailing axis."""
    c = x.shape[-1]
    if c not in (1, 2):
        raise ShapeError(f"{b.where}: the last axis must have size 1 (real) or 2 (complex), got {x.shape}")
    lead = x.shape[:-1]

    def part(i):
        return b.reshape_(b.slice(x, starts=[0] * (x.rank - 1) + [i], ends=list(lead) + [i + 1],
                                  steps=[1] * x.rank), lead)
    return part(0), (part(1) if c == 2 else None)


def _to_last(b, v, axis, n):
    """Move ``axis`` last, fit it to length n (slice or zero-pad) and flatten to (1, M, n)."""
    perm = [i for i in range(v.rank) if i != axis] + [axis]
    t = b.transpose_(v, perm)
    L = t.shape[-1]
    if L > n:
        t = b.slice(t, starts=[0] * t.rank, ends=list(t.shape[:-1]) + [n], steps=[1] * t.rank)
    elif L < n:
        t = b.pad(t, pads=[0] * t.rank + [0] * (t.rank - 1) + [n - L], value=0.0, interior=[0] * t.rank)
    lead = t.shape[:-1]
    return b.reshape_(t, (1, int(np.prod(lead)), n)), lead, perm


def dft_lower(b, x, axis, n=None, inverse=False, onesided=False):
    """DFT of a [..., 1|2] tensor along ``axis`` (an axis before the trailing complex axis)."""
    xr, xi = _split_complex(b, x)
    axis = b.norm_axis(axis, xr.rank)
    real_out = bool(inverse and onesided)
    explicit = n is not None
    if real_out:  # inverse of a one-sided spectrum: Hermitian reconstruction, real output
        K = xr.shape[axis]
        n = n if explicit else 2 * (K - 1)
    n = n if n is not None else xr.shape[axis]
    if n == 0 and not explicit and not onesided:  # an empty signal axis: an empty spectrum
        return b.const(np.zeros(xr.shape[:axis] + (0,) + xr.shape[axis + 1:] + (2,), x.dtype.np))
    if n < 1 or (real_out and K < 1):
        raise ShapeError(f"{b.where}: a transform of length {n} over an axis of {xr.shape[axis]} elements; a positive "
                         f"dft_length (or a non-empty signal axis) is accepted")
    dt = x.dtype.np
    if real_out:
        k = np.arange(K)
        w = np.where((k == 0) | (2 * k == n), 1.0, 2.0)  # each bin but DC and Nyquist stands for two
        theta = 2 * np.pi * np.outer(k, np.arange(n)) / n
        cos, sin = w[:, None] * np.cos(theta) / n, w[:, None] * np.sin(theta) / n
        m_r, lead, perm = _to_last(b, xr, axis, K)
        y = b.matmul(m_r, b.const(cos[None], dt))
        if xi is not None:
            m_i, _, _ = _to_last(b, xi, axis, K)
            y = b.sub(y, b.matmul(m_i, b.const(sin[None], dt)))
        parts = [y]
        K = n
    else:
        K = n // 2 + 1 if onesided else n
        theta = 2 * np.pi * np.outer(np.arange(n), np.arange(K)) / n
        s, scale = (1.0, 1.0 / n) if inverse else (-1.0, 1.0)
        cos, sin = np.cos(theta) * scale, np.sin(theta) * scale
        m_r, lead, perm = _to_last(b, xr, axis, n)
        yr = b.matmul(m_r, b.const(cos[None], dt))
        yi = b.matmul(m_r, b.const(s * sin[None], dt))
        if xi is not None:
            m_i, _, _ = _to_last(b, xi, axis, n)
            yr = b.add(yr, b.matmul(m_i, b.const(-s * sin[None], dt)))
            yi = b.add(yi, b.matmul(m_i, b.const(cos[None], dt)))
        parts = [yr, yi]
    inv = [int(i) for i in np.argsort(perm)]
    outs = [b.transpose_(b.reshape_(p, lead + (K,)), inv) for p in parts]
    outs = [b.reshape_(o, o.shape + (1,)) for o in outs]
    return outs[0] if len(outs) == 1 else b.concat(*outs, axis=outs[0].rank - 1)


@onnx_op("DFT", const_inputs=(1, 2))
def dft(b, x, dft_length=None, axis_input=None, *, axis=None, inverse=0, onesided=0):
    """Matmuls by constant cosine/sine matrices (axis: attribute before opset 20, input since)."""
    n = b.scalar_of(dft_length, "dft_length")
    if axis is None:  # opset 20: axis is an input, default -2 (counting the trailing complex axis)
        ax = int(b.scalar_of(axis_input, "axis", -2))
        ax = ax + x.rank if ax < 0 else ax
        if not 0 <= ax < x.rank - 1:
            raise ShapeError(f"{b.where}: axis {ax} must name a signal axis of {x.shape}, not the complex axis")
    else:
        ax = int(axis) % (x.rank - 1) if axis < 0 else int(axis)
    return dft_lower(b, x, ax, None if n is None else int(n), bool(inverse), bool(onesided))


@onnx_op("STFT", const_inputs=(1, 3))
def stft(b, signal, frame_step, window=None, frame_length=None, *, onesided=1):
    """Frames gathered by a constant index matrix, times the window, then the DFT of each frame."""
    step = int(b.scalar_of(frame_step, "frame_step"))
    fl = b.scalar_of(frame_length, "frame_length")
    fl = int(fl) if fl is not None else (window.shape[0] if window is not None else signal.shape[1])
    if signal.rank != 3 or step < 1 or not 1 <= fl <= signal.shape[1]:
        raise ShapeError(f"{b.where}: signal {signal.shape}, frame_step {step}, frame_length {fl}: a [batch, "
                         f"length, 1 or 2] signal, a positive step and a frame length in 1..length are accepted")
    n_frames = 1 + (signal.shape[1] - fl) // step
    idx = np.arange(n_frames)[:, None] * step + np.arange(fl)[None, :]
    frames = b.gather(signal, b.const(idx.astype(np.int64)), axis=1)  # [B, F, fl, c]
    if window is not None:
        w = b.reshape_(b.cast_(window, signal.dtype.name), (1, 1, fl, 1))
        frames = b.binary("mul", frames, w)
    return dft_lower(b, frames, 2, fl, False, bool(onesided))


def _window(b, size, output_datatype, periodic, coeffs, what):
    n = int(b.scalar_of(size, "size"))
    d = n if periodic else n - 1
    k = np.arange(n)
    w = sum(c * np.cos(2 * np.pi * i * k / d) for i, c in enumerate(coeffs)) if d else np.ones(n)
    return b.const(w, dtype(int(output_datatype)).name)


@onnx_op("HannWindow", const_inputs=(0,))
def hann_window(b, size, *, output_datatype=1, periodic=1):
    """A constant: 0.5 - 0.5 cos(2 pi n / N)."""
    return _window(b, size, output_datatype, periodic, (0.5, -0.5), "HannWindow")


@onnx_op("HammingWindow", const_inputs=(0,))
def hamming_window(b, size, *, output_datatype=1, periodic=1):
    """A constant: 25/46 - 21/46 cos(2 pi n / N)."""
    return _window(b, size, output_datatype, periodic, (25 / 46, -21 / 46), "HammingWindow")


@onnx_op("BlackmanWindow", const_inputs=(0,))
def blackman_window(b, size, *, output_datatype=1, periodic=1):
    """A constant: 0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)."""
    return _window(b, size, output_datatype, periodic, (0.42, -0.5, 0.08), "BlackmanWindow")


@onnx_op("MelWeightMatrix", const_inputs=(0, 1, 2, 3, 4))
def mel_weight_matrix(b, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz, *,
                      output_datatype=1):
    """A constant [dft_length // 2 + 1, num_mel_bins] of triangular mel filters (ONNX's definition)."""
    n_mel = int(b.scalar_of(num_mel_bins, "num_mel_bins"))
    n_dft = int(b.scalar_of(dft_length, "dft_length"))
    rate = int(b.scalar_of(sample_rate, "sample_rate"))
    lo = float(b.scalar_of(lower_edge_hertz, "lower_edge_hertz"))
    hi = float(b.scalar_of(upper_edge_hertz, "upper_edge_hertz"))
    if n_mel < 1 or n_dft < 1 or rate < 1 or not 0 <= lo <= hi <= rate / 2:
        raise ShapeError(f"{b.where}: num_mel_bins {n_mel}, dft_length {n_dft}, sample_rate {rate}, edges {lo}..{hi} "
                         f"Hz: positive counts and rate and 0 <= lower_edge_hertz <= upper_edge_hertz <= "
                         f"sample_rate / 2 are accepted")
    if (n_dft // 2 + 1) * n_mel > MAX_CONSTANT_ELEMENTS:
        raise MemoryLimitError(f"{b.where}: a [{n_dft // 2 + 1}, {n_mel}] matrix; at most {MAX_CONSTANT_ELEMENTS} "
                               f"elements fit a compile-time constant in host memory")
    lo_mel, hi_mel = (2595 * np.log1p(f / 700) / np.log(10) for f in (lo, hi))
    bins = np.arange(n_mel + 2) * ((hi_mel - lo_mel) / (n_mel + 2)) + lo_mel
    bins = (((n_dft + 1) * (700 * np.expm1(bins / 2595 * np.log(10)))) // rate).astype(np.int64)
    if bins[-1] > n_dft // 2:
        raise ShapeError(f"{b.where}: upper_edge_hertz {hi} falls in bin {bins[-1]} of a spectrum of {n_dft // 2 + 1} "
                         f"bins (dft_length {n_dft}, sample_rate {rate}); a lower edge or a longer dft is accepted")
    # column i: a triangle rising from bins[i] to 1 at bins[i + 1], falling to 0 at bins[i + 2]
    j = np.arange(n_dft // 2 + 1)[:, None]
    left, center, right = bins[:-2], bins[1:-1], bins[2:]
    with np.errstate(all="ignore"):
        rise = np.where(center > left, (j - left) / np.maximum(center - left, 1), 1.0)
        fall = (right - j) / np.maximum(right - center, 1)
    out = np.where((j >= left) & (j <= center), rise, np.where((j > center) & (j < right), fall, 0.0))
    return b.const(out, dtype(int(output_datatype)).name)
