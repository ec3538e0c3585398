"""The one checker and its tolerance table.

``TOLERANCES`` is keyed by tolerance class: a primitive's class is named in its record
(``PrimitiveDef.tolerance``), ONNX-op cases use "op" and whole models "model". Integers, bool and data movement
are exact; elementwise
floats are bounded in ULPs of the result type; matmul, conv, pooling and reductions are bounded by
``k * n * eps * magnitude`` where ``n`` is the reduction length and ``magnitude`` the per-element sum of
|terms| (so the bound scales with what was accumulated, not with the result, which may cancel to ~0).
Everywhere: NaN must match NaN exactly, infinities must match in sign, and an absolute error below the
smallest normal number of the result type is accepted (flushing denormals to zero is allowed; the sign of
zero is not checked).
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from glow_core.types import dtype as gdtype

from .cases import CaseFailure


@dataclass(frozen=True)
class Tol:
    ulp: int = 0  # allowed ULP distance of the result type
    acc: float = 0.0  # allowed k in k * n * eps(accumulator) * magnitude
    rel: float = 0.0  # allowed relative error in units of n * eps(accumulator) (products)
    tensor_rel: float = 0.0  # allowed abs error in units of eps(result type) * max |expected| of the tensor


EXACT = Tol()
#: tolerance class -> Tol for float results (exact classes ignore dtype). Keep this the only place tolerances live.
TOLERANCES = {
    "movement": EXACT, "index": EXACT, "cast": EXACT, "compare": EXACT, "select": EXACT,
    "elementwise-exact": Tol(ulp=1),  # IEEE-exact ops (add, mul, div, sqrt, floor, ...): correctly rounded +-1
    "elementwise": Tol(ulp=4),  # transcendental: a few ULPs of float32/64; float16/bfloat16 see TIGHT below
    "matmul": Tol(ulp=1, acc=2.0), "conv": Tol(ulp=1, acc=2.0), "pool": Tol(ulp=1, acc=2.0),
    "reduce": Tol(ulp=1, acc=2.0), "reduce-prod": Tol(ulp=1, rel=2.0), "reduce-exact": EXACT,
    # ONNX ops lowered into several primitives (each rounding to the result type) and whole networks: ULPs of
    # the result type, or an absolute error relative to the tensor's largest value (cancellation near zero)
    "op": Tol(ulp=16, tensor_rel=16.0),
    "model": Tol(ulp=64, tensor_rel=64.0),
}
#: float16/bfloat16 math is computed in float32 and rounded once: at most 1 ULP of the result type.
TIGHT = {"float16": 1, "bfloat16": 1}

_BITS = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _eps_acc(dt: np.dtype) -> float:
    """Machine epsilon of the accumulator: float32 for 16-bit floats, else the type itself."""
    return float(np.finfo(np.float64 if dt == np.float64 else np.float32).eps)


def finfo(dt):
    return ml_dtypes.finfo(dt) if dt.name == "bfloat16" or "float8" in dt.name else np.finfo(dt)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|ordinal(a) - ordinal(b)| for floats of one type (+0 and -0 are 0 apart); float64 of the count."""
    ua = np.ascontiguousarray(a).view(_BITS[a.dtype.itemsize]).astype(np.uint64)
    ub = np.ascontiguousarray(b).view(_BITS[b.dtype.itemsize]).astype(np.uint64)
    sign = np.uint64(1) << np.uint64(a.dtype.itemsize * 8 - 1)
    ma, mb = ua & ~sign, ub & ~sign
    same = (ua & sign) == (ub & sign)
    near = np.where(ma >= mb, ma - mb, mb - ma).astype(np.float64)  # exact for small distances
    far = ma.astype(np.float64) + mb.astype(np.float64)
    return np.where(same, near, far)


def _v(x):
    return repr(x.item()) if hasattr(x, "item") else repr(x)


def _fmt_idx(idx, shape):
    return str(tuple(int(i) for i in np.unravel_index(idx, shape))) if shape else "()"


def compare(got, want, tolerance: str, describe: str, rerun: str, n: int = 1, magnitude=None, name: str = "output"):
    """Raise CaseFailure unless ``got`` matches ``want`` within tolerance class ``tolerance`` (see module doc)."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        raise CaseFailure(f"{describe}\n  {name}: got {got.dtype}{list(got.shape)}, expected "
                          f"{want.dtype}{list(want.shape)}\n  rerun: {rerun}")
    if got.size == 0:
        return
    dt = want.dtype
    tol = TOLERANCES[tolerance]
    is_float = gdtype(dt).is_float
    if not is_float or tol is EXACT:
        if is_float:
            gf, wf = got.astype(np.float64), want.astype(np.float64)
            bad = ~((gf == wf) | (np.isnan(gf) & np.isnan(wf)))
        else:
            bad = got != want
        if bad.any():
            flat = bad.reshape(-1)
            if dt.kind in "iu":
                diff = np.abs(got.astype(object) - want.astype(object)).reshape(-1)
                diff = np.where(flat, diff, 0)
                i = int(np.argmax(diff.astype(float)))
                extra = f", max abs error {int(diff[i])}"
            else:
                i = int(np.flatnonzero(flat)[0])
                extra = ""
                if is_float:
                    e = np.abs(got.astype(np.float64) - want.astype(np.float64)).reshape(-1)
                    u = ulp_distance(got, want).reshape(-1)
                    extra = (f", max abs error {np.nanmax(np.where(flat, e, 0)):.6g}, max ULP error "
                             f"{np.nanmax(np.where(flat, u, 0)):.6g}")
            g, w = got.reshape(-1)[i], want.reshape(-1)[i]
            raise CaseFailure(f"{describe}\n  {name}: {int(bad.sum())} of {got.size} elements differ (exact "
                              f"comparison); worst at index {_fmt_idx(i, got.shape)}: got {_v(g)}, expected {_v(w)}"
                              f"{extra}\n  rerun: {rerun}")
        return
    bad, abs_err, ulps, allowed = _float_bad(got, want, tol, n, magnitude)
    if bad.any():
        wf = want.astype(np.float64)
        rel = abs_err / np.maximum(np.abs(wf), np.finfo(np.float64).tiny)
        score = np.where(bad, np.nan_to_num(ulps, posinf=1e300), -1).reshape(-1)
        i = int(np.argmax(score))
        g, w = got.reshape(-1)[i], want.reshape(-1)[i]
        raise CaseFailure(
            f"{describe}\n  {name}: {int(bad.sum())} of {got.size} elements out of tolerance ({tolerance}: {tol}); "
            f"worst at index {_fmt_idx(i, got.shape)}: got {float(g)!r}, expected {float(w)!r}\n"
            f"  max abs error {np.nanmax(np.where(bad, abs_err, 0)):.6g}, max rel error "
            f"{np.nanmax(np.where(bad, rel, 0)):.6g}, max ULP error {np.nanmax(np.where(bad, ulps, 0)):.6g}, "
            f"allowed abs error there {float(allowed.reshape(-1)[i]):.6g}\n  rerun: {rerun}")


def _float_bad(got, want, tol, n, magnitude):
    dt = want.dtype
    gf, wf = got.astype(np.float64), want.astype(np.float64)
    nan_g, nan_w = np.isnan(gf), np.isnan(wf)
    ulps = ulp_distance(got, want)
    ulp_ok = TIGHT.get(dt.name, tol.ulp) if tol.ulp and not tol.tensor_rel else tol.ulp
    with np.errstate(all="ignore"):
        abs_err = np.abs(gf - wf)
        allowed = np.full(gf.shape, float(finfo(dt).tiny))
        if tol.acc and magnitude is not None:
            allowed = allowed + tol.acc * max(n, 1) * _eps_acc(dt) * np.asarray(magnitude, np.float64)
        if tol.rel:
            allowed = allowed + tol.rel * max(n, 1) * _eps_acc(dt) * np.abs(wf)
        if tol.tensor_rel:
            fin = np.abs(wf[np.isfinite(wf)])
            allowed = allowed + tol.tensor_rel * float(finfo(dt).eps) * (float(fin.max()) if fin.size else 0.0)
            if dt == np.float64:  # onnx.reference computes some float64 ops in float32: float32 ULPs there
                allowed = allowed + tol.ulp * float(np.finfo(np.float32).eps) * np.abs(wf)
        inf_mismatch = (np.isinf(gf) | np.isinf(wf)) & (gf != wf)
        ok = (ulps <= ulp_ok) | (abs_err <= allowed)
    ok = np.where(nan_g | nan_w, nan_g & nan_w, ok & ~inf_mismatch)
    abs_err = np.where(nan_g ^ nan_w, np.inf, abs_err)
    ulps = np.where(nan_g ^ nan_w, np.inf, ulps)
    return ~ok, abs_err, ulps, allowed
