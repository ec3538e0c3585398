"""The one checker, its one tolerance table and the compliance modes.

``TOLERANCES`` maps a tolerance class to a ``Tol``, or to ``{dtype: Tol}`` with ``"*"`` for every other dtype.
A primitive's class is named in its record (``PrimitiveDef.tolerance``); an ONNX-op case names its class in
``tier_ops``; whole networks use ``model``. Each class is one TOSA-style compliance mode (``MODES``): EXACT,
ULP, DOT_PRODUCT, REDUCE_PRODUCT, and, where a plain allowance remains, ABS_ERROR, TENSOR or LSB with the reason
in ``PLAIN``. What a ``Tol`` means, element by element (``want`` expected, ``got`` returned, both of the result
type):

- ``bitwise``: the bit patterns are equal: -0.0 and +0.0 differ, any NaN matches any NaN (payload and sign of
  a NaN aside). Data movement, indexing, selection and exact casts.
- ``exact``: the values are equal (+0.0 == -0.0, NaN matches NaN). Integers and bool are always compared
  exactly, whatever the class, quantized results included (TOSA's EXACT).
- ``ulp=k``: at most k ULPs of the result type apart, counted in that type's own order (float16 in float16
  ULPs, bfloat16 in bfloat16 ULPs; subnormals on their uniform grid, where one ULP is the smallest subnormal;
  +0.0 and -0.0 are 0 ULPs apart).
- ``acc=k`` (DOT_PRODUCT: matmul, conv, average pooling, sums): ``|got - ref| <= k * n * eps(acc) * m +
  ulp(want)``, where ``ref`` is the float64 reference (``ref64``, when the caller gives it; else ``want``),
  ``n`` the reduction length, ``m`` the element's sum of |a * b| over the reduction (float64) and ``eps(acc)``
  the machine epsilon of the accumulator (float64 for float64, float32 otherwise); ``ulp(want)`` is the
  spacing of the result type at ``want`` (its final rounding). With ``ref64``, results in the accumulator's
  own type also pass TOSA's statistical tests over the tensor: with ``err = (got - ref) / (m * 2**-(M + 1))``
  (M the accumulator's mantissa bits) over the T elements with m > 0, ``|sum err| <= 2 sqrt(n T)`` and
  ``sum err**2 <= 0.4 n T`` (no bias, no excess spread).
- ``rel=k`` (REDUCE_PRODUCT, products): ``|got - want| <= k * n * eps(acc) * |want| + ulp(want)``.
- ``mag=k`` (ONNX compositions whose intermediates are larger than the result, e.g. ``exp(x) - 1``):
  ``|got - want| <= k * eps(type) * m + ulp(want)``, ``m`` the element's intermediate scale given by the caller
  (``max(1, |operands|)``).
  ``n`` is given by the caller: the reduction length for primitives, the largest operand's size for ONNX ops.
- ``tensor=k`` (whole networks and the ONNX ops listed as such in tier_ops): ``|got - want| <= k * eps(type) *
  max|want|`` over the tensor: the one allowance that is not per element.
- ``lsb=k``: integer results k apart (only against a foreign implementation: onnxruntime's int8 kernels).
An element passes when it meets any of its class's bounds. Special values (FP_SPECIAL), everywhere: NaN comes
back as NaN and only there, an infinity as the same infinity. Subnormals: a backend declaring
``flushes_subnormals()`` is judged against flushed expectations (computed from flushed operands by the caller,
``flush=True`` here: subnormal expected values become zeros of their sign); any other backend must return the
subnormals. Never both.

Every comparison appends its statistics to ``RECORD`` (the runner of a case empties it before and reports it
after): the compliance mode and the bound, the elements out of bound, the max abs error, mean abs error (MAE) and
SQNR against the float64 reference where there is one (DOT_PRODUCT; else the expected value), the max ULP error
against the expected value in the result type, and for DOT_PRODUCT the statistical test's sums.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from glow_core.types import dtype as gdtype

from .cases import CaseFailure
from .flows import FLOWS


@dataclass(frozen=True)
class Tol:
    bitwise: bool = False
    ulp: int = 0
    acc: float = 0.0
    rel: float = 0.0
    mag: float = 0.0
    tensor: float = 0.0
    lsb: int = 0  # integer results against a foreign implementation: allowed distance in units of the last place
    sqnr: float = 0.0  # a network under a reduced-precision recipe against the float32 one: the least SQNR in dB

    def __str__(self):
        parts = [f"{k}={getattr(self, k)}" for k in ("ulp", "acc", "rel", "mag", "tensor", "lsb", "sqnr")
                 if getattr(self, k)]
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
    # accumulations (DOT_PRODUCT): against the float64 reference, scaled by the sum of |terms|; 2 * n * eps is
    # TOSA's n * 2**-(M+1) times 4: Winograd's transforms and a float32-accumulated expectation stay inside
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
    # quantized primitives: exact (TOSA's EXACT) against the interpreter run in the backend's own requantization
    # arithmetic (the interpreter against the integer oracles written from the same specification: exactly)
    "quantized": EXACT, "quantized-reference": EXACT,
    # the interpreter's int8 network against onnxruntime's (the models tier's QDQ networks on the reference)
    "quantized-foreign": Tol(lsb=1),
    # a network under a flow's recipe on the reference interpreter, against the float32 network (flows.py)
    **{f"flow-{name}": Tol(sqnr=flow.sqnr_db) for name, flow in FLOWS.items() if flow.sqnr_db},
    # a converted network on another backend against the interpreter under the same recipe
    **{f"flow-agree-{name}": Tol(sqnr=flow.agreement_db) for name, flow in FLOWS.items() if flow.agreement_db},
}

#: tolerance class -> TOSA-style compliance mode
MODES = {
    **dict.fromkeys(("movement", "index", "select", "cast", "op-bitwise"), "EXACT (bit pattern)"),
    **dict.fromkeys(("compare", "reduce-exact", "elementwise-exact", "op-exact", "quantized",
                     "quantized-reference"), "EXACT"),
    **dict.fromkeys(("elementwise", "op-ulp"), "ULP"),
    **dict.fromkeys(("matmul", "conv", "pool", "reduce", "op-acc"), "DOT_PRODUCT"),
    **dict.fromkeys(("reduce-prod", "op-rel", "op-exp"), "REDUCE_PRODUCT"),
    "op-cancel": "ABS_ERROR", "op": "TENSOR", "model": "TENSOR", "quantized-foreign": "LSB",
    **{f"flow-{name}": "SQNR" for name in FLOWS}, **{f"flow-agree-{name}": "SQNR" for name in FLOWS},
}
#: classes where a plain allowance (not a per-element bound derived from the operation) remains, and why
PLAIN = {
    "op-cancel": "ONNX compositions whose intermediates exceed the result (exp(x) - 1, x - mean, log(sum) - x): "
                 "the cancellation is absolute, so each element gets 4 * eps * max(1, |operands|) besides its ULPs",
    "op": "Det (the error scales with the rows' norms, not the value), cubic Resize (negative weights: no sum of "
          "|terms|) and custom ops (no class in their record): a fraction of the tensor's largest value",
    "model": "whole networks: rounding compounds through layers with no per-element bound; 64 ULPs or 64 * eps * "
             "max|tensor|",
    "quantized-foreign": "the interpreter's int8 network against onnxruntime's: onnxruntime's kernels requantize "
                         "in their own arithmetic, so 1 in the last place (against the interpreter: EXACT)",
    **{f"flow-{name}": f"the reference interpreter running a network under flow {name}'s recipe has no bit-exact "
                       f"independent oracle: it is judged against the float32 network (ONNX's ReferenceEvaluator) "
                       f"by its signal-to-noise ratio, at least {flow.sqnr_db:g} dB (other backends: against the "
                       f"interpreter under the same recipe)" for name, flow in FLOWS.items() if flow.sqnr_db},
    **{f"flow-agree-{name}": flow.agreement_why or f"a network converted by flow {name} rounds every intermediate "
                             f"in its type and a backend may keep one wider (a fused epilogue): per-element bounds "
                             f"compound through layers, so it agrees with the interpreter under the same recipe by "
                             f"SQNR, at least {flow.agreement_db:g} dB" for name, flow in FLOWS.items()
       if flow.agreement_db},
}


def mode(cls: str) -> str:
    """The compliance mode of tolerance class ``cls``."""
    return MODES.get(cls, "TENSOR")


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


#: statistics of every output compared in the current case (see the module doc)
RECORD: list = []


def flush_subnormals(a):
    """``a`` with its subnormal floats replaced by zeros of their sign (FTZ/DAZ); other arrays unchanged."""
    a = np.asarray(a)
    if not gdtype(a.dtype).is_float or a.dtype.itemsize < 2:
        return a
    with np.errstate(all="ignore"):
        f = a.astype(np.float64)
        sub = (f != 0) & (np.abs(f) < float(finfo(a.dtype).tiny))
    if not sub.any():
        return a
    return np.where(sub, np.copysign(np.zeros_like(f), f), f).astype(a.dtype).reshape(a.shape)


def _num(x):
    """A float for the JSON report (None for NaN, "inf" for an infinity)."""
    x = float(x)
    return None if x != x else ("inf" if x == float("inf") else "-inf" if x == -float("inf") else x)


def _record(name, cls, tol, got, want, center, bad, n, extra=None):
    """Append the statistics of one compared output to RECORD; returns the record."""
    rec = {"output": name, "mode": mode(cls), "class": cls, "bound": _bound(cls, tol, n, center is not None),
           "elements": int(np.size(want)), "out_of_bound": int(np.count_nonzero(bad)) if bad is not None else 0}
    if cls in PLAIN:
        rec["plain"] = PLAIN[cls]
    w = np.asarray(want)
    c = w if center is None else np.asarray(center)
    g = np.asarray(got)
    if g.shape == w.shape and g.size:
        with np.errstate(all="ignore"):
            if gdtype(w.dtype).is_float:
                gf, cf = g.astype(np.float64).reshape(-1), c.astype(np.float64).reshape(-1)
                both = np.isfinite(gf) & np.isfinite(cf)
                err = np.abs(gf - cf)[both]
                ref = cf[both]
                rec["max_ulp"] = _num(np.nanmax(np.where(both, ulp_distance(g, w).reshape(-1), 0))) \
                    if w.dtype.itemsize >= 2 else None
                rec["specials_mismatched"] = int(np.count_nonzero(
                    ~both & ~((np.isnan(gf) & np.isnan(cf)) | (gf == cf))))
            else:
                ref = w.astype(np.float64).reshape(-1)  # (float64: statistics, not verdicts)
                err = np.abs(g.astype(np.float64).reshape(-1) - ref)
                rec["max_ulp"] = _num(err.max()) if err.size else 0.0
            rec["max_abs"] = _num(err.max()) if err.size else 0.0
            rec["mae"] = _num(err.mean()) if err.size else 0.0
            noise = float(np.sum(err * err))
            signal = float(np.sum(ref * ref))
            rec["sqnr_db"] = "inf" if noise == 0 else (_num(10 * np.log10(signal / noise)) if signal else "-inf")
    if extra:
        rec.update(extra)
    RECORD.append(rec)
    return rec


def _bound(cls, tol, n, with_ref):
    if tol.bitwise:
        return "bit-exact (-0.0 is not 0.0; any NaN matches any NaN)"
    if tol == EXACT:
        return "exact values"
    parts = []
    if tol.ulp:
        parts.append(f"<= {tol.ulp} ULP")
    if tol.acc:
        parts.append(f"|got - {'ref64' if with_ref else 'want'}| <= {tol.acc:g} * n * eps(acc) * sum|a*b| + ulp "
                     f"(n = {n})")
    if tol.rel:
        parts.append(f"|got - want| <= {tol.rel:g} * n * eps(acc) * |want| + ulp (n = {n})")
    if tol.mag:
        parts.append(f"|got - want| <= {tol.mag:g} * eps * max(1, |operands|) + ulp")
    if tol.tensor:
        parts.append(f"|got - want| <= {tol.tensor:g} * eps * max|want|")
    if tol.lsb:
        parts.append(f"<= {tol.lsb} in the last place")
    if tol.sqnr:
        against = "the interpreter" if "agree" in cls else "the float32 network"
        parts.append(f"SQNR >= {tol.sqnr:g} dB against {against}")
    return " or ".join(parts)


def compare(got, want, tolerance_class: str, describe: str, rerun: str, n: int = 1, magnitude=None,
            name: str = "output", ref64=None, flush: bool = False):
    """Raise CaseFailure unless ``got`` matches ``want`` within ``tolerance_class`` (see the module doc).
    ``n``: the reduction length (acc/rel); ``magnitude``: per-element float64 scale (acc/mag), or None;
    ``ref64``: the float64 reference of a DOT_PRODUCT result (``want`` is then its rounding); ``flush``: the
    backend declares that it flushes subnormals (the caller computed ``want`` from flushed operands)."""
    got = np.asarray(got)
    want = np.asarray(want)
    tol = tolerance(tolerance_class, want.dtype)
    if got.dtype != want.dtype or got.shape != want.shape:
        _record(name, tolerance_class, tol, got, want, None, None, n, {"out_of_bound": int(want.size) or 1})
        raise CaseFailure(f"{describe}\n  {name}: got {got.dtype}{list(got.shape)}, expected "
                          f"{want.dtype}{list(want.shape)}\n  rerun: {rerun}")
    is_float = gdtype(want.dtype).is_float
    center = None
    if is_float and ref64 is not None and tol.acc:
        center = np.asarray(ref64, np.float64).reshape(want.shape)
        with np.errstate(all="ignore"):
            want = center.astype(want.dtype)
    zeros = None
    if is_float and flush:
        flushed = flush_subnormals(want)
        zeros = (flushed != want) & ~np.isnan(want.astype(np.float64))  # subnormals expected as signed zeros
        if center is not None:  # a result flushed to zero is measured from that zero
            center = np.where(zeros, flushed.astype(np.float64), center)
        want = flushed
        if zeros.any():
            gz = got.astype(np.float64)[zeros]
            wrong = (gz != 0) | (np.signbit(gz) != np.signbit(want.astype(np.float64)[zeros]))
            if wrong.any():
                i = int(np.flatnonzero(zeros.reshape(-1))[np.flatnonzero(wrong)[0]])
                _record(name, tolerance_class, tol, got, want, center, None, n,
                        {"out_of_bound": int(wrong.sum())})
                raise CaseFailure(f"{describe}\n  {name}: {int(wrong.sum())} subnormal result(s) not flushed to a zero "
                                  f"of their sign, as a backend declaring flushes_subnormals() must (FTZ); first at "
                                  f"index {_fmt_idx(i, got.shape)}: got {_v(got.reshape(-1)[i])}, expected "
                                  f"{_v(want.reshape(-1)[i])}\n  rerun: {rerun}")
    if got.size == 0:
        _record(name, tolerance_class, tol, got, want, center, None, n)
        return
    if tol.sqnr:
        _sqnr_verdict(got, want, tol, tolerance_class, describe, rerun, name, n)
        return
    if not is_float:  # integers and bool: exact (or lsb apart from a foreign implementation)
        if tol.lsb:
            bad = np.abs(got.astype(object).reshape(-1) - want.astype(object).reshape(-1)) > tol.lsb
            bad = np.asarray(bad, bool).reshape(got.shape)
        else:
            bad = got != want
    elif tol.bitwise:
        bad = ~_equal_bits(got, want)
    elif tol == EXACT:
        gf, wf = got.astype(np.float64), want.astype(np.float64)
        bad = ~((gf == wf) | (np.isnan(gf) & np.isnan(wf)))
    else:
        _float_failure(got, want, tol, tolerance_class, n, magnitude, describe, rerun, name, center)
        return
    _record(name, tolerance_class, tol, got, want, None, bad, n)
    if bad.any():
        flat = bad.reshape(-1)
        extra = ""
        if want.dtype.kind in "iu":
            diff = np.where(flat, np.abs(got.astype(object).reshape(-1) - want.astype(object).reshape(-1)), 0)
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
                          f"class {tolerance_class}, mode {mode(tolerance_class)}); first at index "
                          f"{_fmt_idx(i, got.shape)}: got {_v(g)}, expected {_v(w)}{extra}"
                          + (" (subnormals flushed: the backend declares flushes_subnormals())" if flush else "")
                          + f"\n  rerun: {rerun}")


def _sqnr_verdict(got, want, tol, cls, describe, rerun, name, n):
    """A whole tensor's SQNR against ``want`` (float64), special values matched as everywhere."""
    gf, wf = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(all="ignore"):
        special = ~(np.isfinite(gf) & np.isfinite(wf))
        mismatched = special & ~((np.isnan(gf) & np.isnan(wf)) | (gf == wf))
    rec = _record(name, cls, tol, got, want, None, mismatched, n)
    q = rec.get("sqnr_db")
    low = q != "inf" and (q is None or q == "-inf" or q < tol.sqnr)
    if low:
        rec["out_of_bound"] = rec["elements"]
    if mismatched.any() or low:
        raise CaseFailure(f"{describe}\n  {name}: SQNR {q if isinstance(q, str) else f'{q:.2f}'} dB against "
                          f"{'the interpreter' if 'agree' in cls else 'the float32 network'}, at least {tol.sqnr:g} dB "
                          f"required (class {cls}, mode {mode(cls)})"
                          + (f"; {int(mismatched.sum())} special values differ" if mismatched.any() else "")
                          + f"\n  rerun: {rerun}")


def float_verdict(got, want, tol: Tol, n=1, magnitude=None, center=None):
    """(bad mask, abs error, ULP error, allowed abs error) of a float comparison under ``tol``; ``center``: the
    float64 value the accumulation bound is measured from (the float64 reference; default ``want``)."""
    dt = want.dtype
    gf, wf = got.astype(np.float64), want.astype(np.float64)
    cf = wf if center is None else np.asarray(center, np.float64)
    nan_g, nan_w = np.isnan(gf), np.isnan(wf)
    ulps = ulp_distance(got, want)
    with np.errstate(all="ignore"):
        abs_err = np.abs(gf - wf)
        allowed = np.zeros(gf.shape)
        step = spacing(want)
        acc_err = abs_err
        if magnitude is not None and (tol.acc or tol.mag):
            m = np.broadcast_to(np.asarray(magnitude, np.float64), gf.shape)
            m = np.where(np.isfinite(m), m, 0.0)  # an overflowing magnitude gives no allowance
            k = tol.acc * max(n, 1) * eps_acc(dt) if tol.acc else tol.mag * float(finfo(dt).eps)
            allowed = allowed + k * m + step
            if tol.acc:
                acc_err = np.abs(gf - cf)
        if tol.rel:
            allowed = allowed + tol.rel * max(n, 1) * eps_acc(dt) * np.abs(wf) + step
        if tol.tensor:
            fin = np.abs(wf[np.isfinite(wf)])
            allowed = allowed + tol.tensor * float(finfo(dt).eps) * (float(fin.max()) if fin.size else 0.0)
        ok = (ulps <= tol.ulp) | (acc_err <= allowed) | ((abs_err <= allowed) & (center is None))
        inf_mismatch = (np.isinf(gf) | np.isinf(wf)) & (gf != wf)
    ok = np.where(nan_g | nan_w, nan_g & nan_w, ok & ~inf_mismatch)
    abs_err = np.where(nan_g ^ nan_w, np.inf, abs_err)
    ulps = np.where(nan_g ^ nan_w, np.inf, ulps)
    return ~ok, abs_err, ulps, allowed


def dot_product_statistics(got, center, magnitude, n: int):
    """TOSA's dot-product statistics of a result in its accumulator's own type (float32, float64): with
    ``err = (got - ref) / (m * 2**-(M + 1))`` over the finite elements whose unit m * 2**-(M + 1) is at least 16
    of the type's smallest subnormal (below it, rounding to the subnormal grid is the error), (sum err,
    sum err**2, T) and the limits 2 sqrt(n T) and 0.4 n T."""
    gf = np.asarray(got, np.float64).reshape(-1)
    cf = np.asarray(center, np.float64).reshape(-1)
    m = np.broadcast_to(np.asarray(magnitude, np.float64), np.shape(center)).reshape(-1)
    fi = finfo(np.asarray(got).dtype)
    mant = int(fi.nmant)
    unit = m * 2.0 ** -(mant + 1)
    with np.errstate(all="ignore"):  # elements whose unit is below the subnormal grid are left out (its rounding)
        use = np.isfinite(gf) & np.isfinite(cf) & np.isfinite(m) & (unit >= 16 * float(fi.tiny) * float(fi.eps))
        err = (gf[use] - cf[use]) / (m[use] * 2.0 ** -(mant + 1))
    t = int(use.sum())
    return {"ks": int(n), "t": t, "err_sum": float(err.sum()), "err_sumsq": float((err * err).sum()),
            "limit_sum": 2.0 * float(np.sqrt(max(n, 1) * t)), "limit_sumsq": 0.4 * max(n, 1) * t,
            "max_err_ks": float(np.abs(err).max() / max(n, 1)) if t else 0.0}


def _float_failure(got, want, tol, cls, n, magnitude, describe, rerun, name, center=None):
    bad, abs_err, ulps, allowed = float_verdict(got, want, tol, n, magnitude, center)
    extra = None
    stats_fail = ""
    if center is not None and tol.acc and magnitude is not None and want.dtype in (np.float32, np.float64) \
            and not bad.any():
        extra = dot_product_statistics(got, center, magnitude, n)
        if abs(extra["err_sum"]) > extra["limit_sum"]:
            stats_fail = (f"biased: the errors sum to {extra['err_sum']:.4g} units of m * 2^-(M+1) over "
                          f"{extra['t']} elements, more than 2 sqrt(n T) = {extra['limit_sum']:.4g}")
        elif extra["err_sumsq"] > extra["limit_sumsq"]:
            stats_fail = (f"too spread: the squared errors sum to {extra['err_sumsq']:.4g} units over {extra['t']} "
                          f"elements, more than 0.4 n T = {extra['limit_sumsq']:.4g}")
        extra["statistics_pass"] = not stats_fail
    rec = _record(name, cls, tol, got, want, center, bad, n, extra)
    if stats_fail:
        rec["out_of_bound"] = rec["elements"]
        raise CaseFailure(f"{describe}\n  {name}: every element within the bound but the errors fail TOSA's "
                          f"dot-product statistics (class {cls}, mode {mode(cls)}, n = {n}): {stats_fail}\n"
                          f"  rerun: {rerun}")
    if not bad.any():
        return
    wf = want.astype(np.float64)
    with np.errstate(all="ignore"):
        rel = abs_err / np.maximum(np.abs(wf), np.finfo(np.float64).tiny)
    score = np.where(bad, np.nan_to_num(ulps, posinf=1e300), -1).reshape(-1)
    i = int(np.argmax(score))
    g, w = got.reshape(-1)[i], want.reshape(-1)[i]
    ref = "" if center is None else f" (float64 reference {float(np.asarray(center).reshape(-1)[i])!r})"
    raise CaseFailure(
        f"{describe}\n  {name}: {int(bad.sum())} of {got.size} elements out of tolerance (class {cls}: {tol}, "
        f"mode {mode(cls)}); worst at index {_fmt_idx(i, got.shape)}: got {float(g)!r}, expected {float(w)!r}{ref}"
        f"\n  max abs error {np.nanmax(np.where(bad, abs_err, 0)):.6g}, max rel error "
        f"{np.nanmax(np.where(bad, rel, 0)):.6g}, max ULP error {np.nanmax(np.where(bad, ulps, 0)):.6g}, "
        f"allowed abs error there {float(allowed.reshape(-1)[i]):.6g}\n  rerun: {rerun}")
