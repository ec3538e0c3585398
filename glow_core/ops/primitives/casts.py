"""Cast primitives: ``cast`` (value conversion between every dtype) and ``bitcast`` (reinterpretation)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ...errors import GlowError
from ...types import ALL, TensorType, dtype
from ..registry import REQUIRED, primitive
from .checks import fail

_NP_FLOATS = {np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)}
_FLOAT8 = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")


def _cast_rule(ts, to, saturate, round_mode):
    if round_mode not in ("up", "down", "nearest"):
        fail("cast", f"round_mode {round_mode!r} is not accepted; accepted: up, down, nearest")
    return [TensorType(dtype(to), ts[0].shape)]


def cast(x, to, saturate=1, round_mode="up"):
    """Matches ONNX's reference Cast."""
    src, dst = dtype(x.dtype), dtype(to)
    t = dst.np
    if src == dst and not (saturate and dst.name in _FLOAT8):  # float8e5m2 saturates its own infinities
        return x.copy()
    if dst.is_bool:
        return _cast_wide(x, src) != 0
    if src.is_bool:
        x, src = x.astype(np.uint8), dtype("uint8")
    if dst.is_int:
        if src.is_int:  # wraps (two's complement); through int64 so that ml_dtypes' int4/int2 wrap too
            return x.astype(np.int64).astype(t) if src.itemsize < 8 or dst.itemsize < 8 else x.astype(t)
        # Float to integer truncates toward zero; NaN gives 0; out-of-range wraps (64-bit targets clamp).
        y = np.trunc(x.astype(np.float64))
        y = np.where(np.isnan(y), 0.0, y)
        if dst.name == "uint64":
            return np.clip(y, 0.0, np.nextafter(2.0 ** 64, 0)).astype(t)
        return np.clip(y, -2.0 ** 63, np.nextafter(2.0 ** 63, 0)).astype(np.int64).astype(t)
    # dst is a float type
    if dst.name == "float8e8m0":
        return _to_e8m0(_cast_wide(x, src).astype(np.float32), saturate, round_mode)
    if src.name == "float8e8m0" or (src.np not in _NP_FLOATS and t not in _NP_FLOATS):
        # between two ml_dtypes types: through float32 (exact for <= 16-bit floats) or float64 (integers)
        x = x.astype(np.float32) if src.is_float and src.itemsize <= 2 else x.astype(np.float64)
    if dst.name in _FLOAT8 and saturate:
        fi = ml_dtypes.finfo(t)
        x = np.clip(x.astype(np.float64 if x.dtype == np.float64 else np.float32), float(fi.min), float(fi.max))
    return x.astype(t)


def _cast_wide(x, src):
    """x as float64 (floats) or int64 (integers), for exact comparisons and re-rounding."""
    if src.is_float:
        return x.astype(np.float32 if src.itemsize <= 2 else np.float64)
    return x.astype(np.int64) if src.kind != "uint" or src.itemsize < 8 else x


def _to_e8m0(xf, saturate, round_mode):
    """float32 -> float8e8m0 (a biased power-of-two exponent): NaN/inf give NaN (0xFF); the exponent of |x|
    is rounded by the fraction per `round_mode` (up: any fraction rounds up; down: truncate; nearest: ties
    up), saturating at 2**127 when saturate=1."""
    bits = xf.view(np.uint32)
    e = ((bits >> 23) & 0xFF).astype(np.int32)
    frac = bits & 0x7FFFFF
    special = e == 0xFF
    if round_mode == "up":
        inc = frac > 0
    elif round_mode == "down":
        inc = np.zeros(e.shape, bool)
    elif round_mode == "nearest":
        g, r, s = (frac & 0x400000) > 0, (frac & 0x200000) > 0, (frac & 0x1FFFFF) > 0
        inc = g & (r | s | (e > 0))
    else:
        raise GlowError(f"cast: round_mode {round_mode!r} is not supported; accepted: up, down, nearest")
    if saturate:
        inc &= e != 0xFE
    e = np.where(special, 0xFF, np.minimum(e + inc, 0xFF))
    return e.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)


primitive("cast", "cast", ("x",), ALL, _cast_rule, cast,
          "Convert to dtype `to`, rounding to nearest-even for float targets. Float to integer truncates "
          "toward zero, NaN gives 0, out-of-range values wrap (64-bit targets clamp); integer to integer "
          "wraps (two's complement); to bool is x != 0; from bool gives 0/1. To the float8 types "
          "(e4m3fn, e4m3fnuz, e5m2, e5m2fnuz) saturate=1 clamps to the finite range (inf too; NaN stays "
          "NaN), saturate=0 overflows to inf or NaN. float4e2m1/float6 have no inf or NaN: out-of-range "
          "values clamp (NaN is undefined). "
          "To float8e8m0 (a power of two) the exponent rounds by `round_mode` (up, down, nearest), NaN/inf "
          "give NaN, and saturate=1 stops at 2**127.",
          attrs={"to": REQUIRED, "saturate": 1, "round_mode": "up"}, tolerance="cast", elementwise=True,
          inplace=False, movement=True, exact=True)


def _bitcast_rule(ts, to):
    t = dtype(to)
    if t.itemsize != ts[0].dtype.itemsize:
        fail("bitcast", f"cannot reinterpret {ts[0].dtype} as {t}: element sizes differ")
    return [TensorType(t, ts[0].shape)]


def bitcast(x, to):
    return np.ascontiguousarray(x).view(dtype(to).np).reshape(x.shape).copy()  # ascontiguousarray makes 0-d 1-d


primitive("bitcast", "cast", ("x",), ALL, _bitcast_rule, bitcast, "Reinterpret the bits of each element as dtype "
          "`to` (same element size).", attrs={"to": REQUIRED}, tolerance="cast", elementwise=True, inplace=False,
          movement=True, exact=True)
