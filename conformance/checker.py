"""The one checker and its one tolerance table.

``TOLERANCES`` maps a tolerance class to a ``Tol``, or to ``{dtype: Tol}`` with ``"*"`` for every other dtype.
A primitive's class is named in its record (``PrimitiveDef.tolerance``); an ONNX-op case names its class in
``tier_ops``; whole networks use ``model``. What a ``Tol`` means, element by element (``want`` expected,
``got`` returned, both of the result type):

- ``bitwise``: the bit patterns are equal: -0.0 and +0.0 differ, any NaN matches any NaN (payload and sign of
  a NaN aside). Data movement, indexing, selection and exact casts.
- ``exact``: the values are equal (+0.0 == -0.0, NaN matches NaN). Integers and bool are always compared
  exactly, whatever the class.
- ``ulp=k``: at most k ULPs of the result type apart, counted in that type's own order (float16 in float16
  ULPs, bfloat16 in bfloat16 ULPs; subnormals on their uniform grid, where one ULP is the smallest subnormal;
  +0.0 and -0.0 are 0 ULPs apart).
- ``acc=k`` (accumulations): ``|got - want| <= k * n * eps(acc) * m + ulp(want)``, where ``n`` is the
  reduction length, ``m`` the element's sum of |terms| (computed in float64 by the caller) and ``eps(acc)``
  the machine epsilon of the accumulator of the reference (float64 for float64, float32 otherwise);
  ``ulp(want)`` is the spacing of the result type at ``want`` (its final rounding).
- ``rel=k`` (products): ``|got - want| <= k * n * eps(acc) * |want| + ulp(want)``.
- ``mag=k`` (ONNX compositions whose intermediates are larger than the result, e.g. ``exp(x) - 1``):
  ``|got - want| <= k * eps(type) * m + ulp(want)``, ``m`` the element's intermediate scale given by the caller
  (``max(1, |operands|)``).
  ``n`` is given by the caller: the reduction length for primitives, the largest operand's size for ONNX ops.
- ``tensor=k`` (whole networks and the ONNX ops listed as such in tier_ops): ``|got - want| <= k * eps(type) *
  max|want|`` over the tensor: the one allowance that is not per element.
An element passes when it meets any of its class's bounds. Everywhere: NaN comes back as NaN and only there,
an infinity as the same infinity. Subnormal rule: an element whose expected value is subnormal in the result
type may come back as a zero of the same sign (flush-to-zero hardware); no other value is flushed.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from glow_core.types import dtype as gdtype

from .cases import CaseFailure


@dataclass(frozen=True)
class Tol:
    bitwise: bool = False
    ulp: int = 0
    acc: float = 0.0
    rel: float = 0.0
    mag: float = 0.0
    tensor: float = 0.0
    lsb: int = 0  # quantized (integer) results: allowed distance in units of the last place

    def __str__(self):
        parts = [f"{k}={getattr(self, k)}" for k in ("ulp", "acc", "rel", "mag", "tensor", "lsb") if getattr(self, k)]
        return "bitwise" if self.bitwise else (", ".join(parts) or "exact")


BITWISE, EXACT = Tol(bitwise=True), Tol()
#: tolerance class -> Tol, or {dtype: Tol, "*": Tol}. The only place tolerances live.
TOLERANCES = {
    # data movement, indexing, selection and casts: bit-exact (-0.0 is not +0.0)
    "movement": BITWISE, "index": BITWISE, "select": BITWISE, "cast": BITWISE,
    # comparisons and logic (bool results), max/min/argmax/argmin and max pooling: exact values
    "compare": EXACT, "reduce-exact": EXACT,
    # IEEE-exact operations (add, sub, mul, div, sqrt, floor, round, ...) are correctly rounded; float16 and
    # bfloat16 computed in float32 and rounded once are too (float32 has more than 2p + 2 bits)
    "elementwise-exact": EXACT,
    # transcendental functions: a few ULPs of float32/float64; float16/bfloat16 computed in float32 and
    # rounded once: 1 ULP of their own
    "elementwise": {"float16": Tol(ulp=1), "bfloat16": Tol(ulp=1), "*": Tol(ulp=4)},
    # accumulations; max pooling has no magnitude and is held to exactness by ulp=0
    "matmul": Tol(acc=2.0), "conv": Tol(acc=2.0), "pool": Tol(acc=2.0), "reduce": Tol(acc=2.0),
    "reduce-prod": Tol(rel=2.0),
    # ONNX ops (one-node models, lowered into several primitives that each round to the result type)
    "op-ulp": {"float16": Tol(ulp=2), "bfloat16": Tol(ulp=2), "*": Tol(ulp=8)},
    "op-cancel": {"float16": Tol(ulp=2, mag=4.0), "bfloat16": Tol(ulp=2, mag=4.0), "*": Tol(ulp=8, mag=4.0)},
    "op-acc": {"float16": Tol(ulp=2, acc=4.0), "bfloat16": Tol(ulp=2, acc=4.0), "*": Tol(ulp=8, acc=4.0)},
    # products and quotients of positive sums (softmax, products, norms): relative to each element
    "op-rel": {"float16": Tol(ulp=2, rel=1.0), "bfloat16": Tol(ulp=2, rel=1.0), "*": Tol(ulp=8, rel=1.0)},
    # softmax: exp amplifies the rounding of x - max(x) by |x - max(x)| (up to 10 here), which a float16 or
    # bfloat16 lowering rounds in its own precision; a device computing in float32 is within 1 ULP of the exact
    # value: both must pass, so 16 ULP of the 16-bit result per element (float32 and wider as op-rel)
    "op-exp": {"float16": Tol(ulp=16, rel=1.0), "bfloat16": Tol(ulp=16, rel=1.0), "*": Tol(ulp=8, rel=1.0)},
    # the ops still judged against the tensor's largest value (see tier_ops.TENSOR_RELATIVE for why)
    "op": {"float16": Tol(ulp=4, tensor=4.0), "bfloat16": Tol(ulp=4, tensor=4.0), "*": Tol(ulp=16, tensor=16.0)},
    "op-exact": EXACT, "op-bitwise": BITWISE,
    # whole networks
    "model": Tol(ulp=64, tensor=64.0),
    # quantized primitives: a backend may differ from the interpreter by 1 in the last place of an integer result
    # (a fixed-point device rounds the requantization multiplier); the interpreter against the integer oracles
    # written from the same specification: exactly
    "quantized": Tol(lsb=1), "quantized-reference": EXACT,
}


def tolerance(cls: str, dt) -> Tol:
    """The Tol of class ``cls`` for results of dtype ``dt``; KeyError naming the known classes."""
    try:
        t = TOLERANCES[cls]
    except KeyError:
        raise KeyError(f"unknown tolerance class {cls!r}; known: {', '.join(sorted(TOLERANCES))}") from None
    if isinstance(t, dict):
        name = np.dtype(dt).name if not isinstance(dt, str) else dt
        return t.get(name, t["*"])
    return t


def eps_acc(dt) -> float:
    """Machine epsilon of the reference's accumulator for results of ``dt``: float64, else float32."""
    return float(np.finfo(np.float64 if np.dtype(dt) == np.float64 else np.float32).eps)


def finfo(dt):
    dt = np.dtype(dt)
    return np.finfo(dt) if dt in (np.float16, np.float32, np.float64) else ml_dtypes.finfo(dt)


def _bits(dt):
    """(unsigned view dtype, sign bit) of float dtype ``dt``."""
    dt = np.dtype(dt)
    width = finfo(dt).bits
    view = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize]
    return view, np.uint64(1) << np.uint64(width - 1)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|ordinal(a) - ordinal(b)| for floats of one type (+0 and -0 are 0 apart); float64 of the count."""
    view, sign = _bits(a.dtype)
    ua = np.ascontiguousarray(a).view(view).astype(np.uint64)
    ub = np.ascontiguousarray(b).view(view).astype(np.uint64)
    ma, mb = ua & ~sign, ub & ~sign
    same = (ua & sign) == (ub & sign)
    near = np.where(ma >= mb, ma - mb, mb - ma).astype(np.float64)
    far = ma.astype(np.float64) + mb.astype(np.float64)
    return np.where(same, near, far)


def spacing(want: np.ndarray) -> np.ndarray:
    """The distance from |want| to the next larger value of its type, as float64 (inf at the largest value)."""
    with np.errstate(all="ignore"):
        a = np.abs(want.astype(np.float64)).astype(want.dtype)
        view, _ = _bits(want.dtype)
        nxt = (np.ascontiguousarray(a).view(view) + view(1)).view(want.dtype)
        return np.abs(nxt.astype(np.float64) - a.astype(np.float64))


def _v(x):
    return repr(x.item()) if hasattr(x, "item") else repr(x)


def _fmt_idx(idx, shape):
    return str(tuple(int(i) for i in np.unravel_index(idx, shape))) if shape else "()"


def _equal_bits(got, want):
    view, _ = _bits(want.dtype)
    gf, wf = got.astype(np.float64), want.astype(np.float64)
    same = np.ascontiguousarray(got).view(view) == np.ascontiguousarray(want).view(view)
    return same | (np.isnan(gf) & np.isnan(wf))


def compare(got, want, tolerance_class: str, describe: str, rerun: str, n: int = 1, magnitude=None,
            name: str = "output"):
    """Raise CaseFailure unless ``got`` matches ``want`` within ``tolerance_class`` (see the module doc).
    ``n``: the reduction length (acc/rel); ``magnitude``: per-element float64 scale (acc/mag), or None."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        raise CaseFailure(f"{describe}\n  {name}: got {got.dtype}{list(got.shape)}, expected "
                          f"{want.dtype}{list(want.shape)}\n  rerun: {rerun}")
    tol = tolerance(tolerance_class, want.dtype)
    if got.size == 0:
        return
    is_float = gdtype(want.dtype).is_float
    if not is_float:  # quantized results (8/16/32-bit) may be allowed lsb: int64 holds the difference
        bad = (np.abs(got.astype(np.int64) - want.astype(np.int64)) > tol.lsb) if tol.lsb else got != want
    elif tol.bitwise:
        bad = ~_equal_bits(got, want)
    elif tol == EXACT:
        gf, wf = got.astype(np.float64), want.astype(np.float64)
        bad = ~((gf == wf) | (np.isnan(gf) & np.isnan(wf)))
    else:
        _float_failure(got, want, tol, tolerance_class, n, magnitude, describe, rerun, name)
        return
    if bad.any():
        flat = bad.reshape(-1)
        extra = ""
        if want.dtype.kind in "iu":
            diff = np.where(flat, np.abs(got.astype(object) - want.astype(object)).reshape(-1), 0)
            i = int(np.argmax(diff.astype(float)))
            extra = f", max abs error {int(diff[i])}"
        else:
            i = int(np.flatnonzero(flat)[0])
            if is_float:
                with np.errstate(all="ignore"):
                    e = np.abs(got.astype(np.float64) - want.astype(np.float64)).reshape(-1)
                extra = f", max abs error {np.nanmax(np.where(flat, e, 0)):.6g}"
                if want.dtype.itemsize >= 2:
                    u = ulp_distance(got, want).reshape(-1)
                    extra += f", max ULP error {np.nanmax(np.where(flat, u, 0)):.6g}"
        g, w = got.reshape(-1)[i], want.reshape(-1)[i]
        how = "bit-exact comparison: -0.0 is not 0.0" if tol.bitwise and is_float else "exact comparison"
        raise CaseFailure(f"{describe}\n  {name}: {int(bad.sum())} of {got.size} elements differ ({how}, "
                          f"class {tolerance_class}); first at index {_fmt_idx(i, got.shape)}: got {_v(g)}, "
                          f"expected {_v(w)}{extra}\n  rerun: {rerun}")


def float_verdict(got, want, tol: Tol, n=1, magnitude=None):
    """(bad mask, abs error, ULP error, allowed abs error) of a float comparison under ``tol``."""
    dt = want.dtype
    gf, wf = got.astype(np.float64), want.astype(np.float64)
    nan_g, nan_w = np.isnan(gf), np.isnan(wf)
    ulps = ulp_distance(got, want)
    with np.errstate(all="ignore"):
        abs_err = np.abs(gf - wf)
        allowed = np.zeros(gf.shape)
        step = spacing(want)
        if magnitude is not None and (tol.acc or tol.mag):
            m = np.broadcast_to(np.asarray(magnitude, np.float64), gf.shape)
            m = np.where(np.isfinite(m), m, 0.0)  # an overflowing magnitude gives no allowance
            k = tol.acc * max(n, 1) * eps_acc(dt) if tol.acc else tol.mag * float(finfo(dt).eps)
            allowed = allowed + k * m + step
        if tol.rel:
            allowed = allowed + tol.rel * max(n, 1) * eps_acc(dt) * np.abs(wf) + step
        if tol.tensor:
            fin = np.abs(wf[np.isfinite(wf)])
            allowed = allowed + tol.tensor * float(finfo(dt).eps) * (float(fin.max()) if fin.size else 0.0)
        ok = (ulps <= tol.ulp) | (abs_err <= allowed)
        subnormal = (wf != 0) & (np.abs(wf) < float(finfo(dt).tiny))
        flushed = subnormal & (gf == 0) & (np.signbit(gf) == np.signbit(wf))
        inf_mismatch = (np.isinf(gf) | np.isinf(wf)) & (gf != wf)
    ok = np.where(nan_g | nan_w, nan_g & nan_w, (ok | flushed) & ~inf_mismatch)
    abs_err = np.where(nan_g ^ nan_w, np.inf, abs_err)
    ulps = np.where(nan_g ^ nan_w, np.inf, ulps)
    return ~ok, abs_err, ulps, allowed


def _float_failure(got, want, tol, cls, n, magnitude, describe, rerun, name):
    bad, abs_err, ulps, allowed = float_verdict(got, want, tol, n, magnitude)
    if not bad.any():
        return
    wf = want.astype(np.float64)
    with np.errstate(all="ignore"):
        rel = abs_err / np.maximum(np.abs(wf), np.finfo(np.float64).tiny)
    score = np.where(bad, np.nan_to_num(ulps, posinf=1e300), -1).reshape(-1)
    i = int(np.argmax(score))
    g, w = got.reshape(-1)[i], want.reshape(-1)[i]
    raise CaseFailure(
        f"{describe}\n  {name}: {int(bad.sum())} of {got.size} elements out of tolerance (class {cls}: {tol}); "
        f"worst at index {_fmt_idx(i, got.shape)}: got {float(g)!r}, expected {float(w)!r}\n"
        f"  max abs error {np.nanmax(np.where(bad, abs_err, 0)):.6g}, max rel error "
        f"{np.nanmax(np.where(bad, rel, 0)):.6g}, max ULP error {np.nanmax(np.where(bad, ulps, 0)):.6g}, "
        f"allowed abs error there {float(allowed.reshape(-1)[i]):.6g}\n  rerun: {rerun}")
