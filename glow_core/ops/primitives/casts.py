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
        return _to_e8m0(_cast_wide(x, src).astype(np.float64), saturate, round_mode)
    if src.name == "float8e8m0" or (src.np not in _NP_FLOATS and t not in _NP_FLOATS):
        # between two ml_dtypes types: through float32 (exact for <= 16-bit floats) or float64 (integers)
        x = x.astype(np.float32) if src.is_float and src.itemsize <= 2 else x.astype(np.float64)
    if dst.name in _FLOAT8 and saturate:
        fi = ml_dtypes.finfo(t)
        x = np.clip(x.astype(np.float64 if x.dtype == np.float64 else np.float32), float(fi.min), float(fi.max))
    if x.dtype == np.float64 and t not in _NP_FLOATS:
        x = _to_f32_odd(x)  # ml_dtypes goes through float32: round to odd first, so that it rounds only once
    if dst.name in ("float4e2m1", "float6e2m3", "float6e3m2"):  # no NaN in these: NaN (either sign) gives -0
        x = np.where(np.isnan(x), -0.0, x).astype(x.dtype)
    return x.astype(t)


def _to_f32_odd(x):
    """float64 -> float32 rounding to odd (truncate, then set the last bit when inexact): rounding that again to
    any format of at most 22 significant bits gives the correctly rounded float64 value."""
    with np.errstate(all="ignore"):
        y = x.astype(np.float32)
        over = np.abs(y.astype(np.float64)) > np.abs(x)
        y = np.where(over & np.isfinite(x), np.nextafter(y, np.float32(0)), y).astype(np.float32)
        inexact = np.isfinite(x) & (y.astype(np.float64) != x)
        return np.where(inexact, (y.view(np.uint32) | np.uint32(1)).view(np.float32), y)


def _cast_wide(x, src):
    """x as float64 (floats) or int64 (integers), for exact comparisons and re-rounding."""
    if src.is_float:
        return x.astype(np.float32 if src.itemsize <= 2 else np.float64)
    return x.astype(np.int64) if src.kind != "uint" or src.itemsize < 8 else x


def _to_e8m0(xf, saturate, round_mode):
    """float64 -> float8e8m0 (a power of two, 2**(code - 127); 0xFF is NaN), by ONNX's Cast table: the
    exponent of |x| rounds per `round_mode` (up: away from zero, down: towards zero, nearest: the nearer power,
    ties up); above 2**127 or below 2**-127 (0 included) gives the largest or smallest code when saturate=1,
    NaN otherwise; +inf gives the largest code when saturate=1, NaN otherwise; NaN gives NaN."""
    if round_mode not in ("up", "down", "nearest"):
        raise GlowError(f"cast: round_mode {round_mode!r} is not supported; accepted: up, down, nearest")
    x = np.abs(xf.astype(np.float64))  # exact: float32 subnormals become normal float64 values
    m, e = np.frexp(np.where(np.isfinite(x) & (x > 0), x, 1.0))  # x = m * 2**e, 0.5 <= m < 1
    e = e.astype(np.int64) - 1
    if round_mode == "up":
        e += m != 0.5
    elif round_mode == "nearest":
        e += m >= 0.75
    low, high = (0, 254) if saturate else (255, 255)
    code = np.where(e > 127, high, np.where(e < -127, low, e + 127))
    code = np.where(x == 0, low, code)
    code = np.where(np.isinf(x), 254 if saturate else 255, code)
    code = np.where(np.isnan(x), 255, code)
    return code.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)


primitive("cast", "cast", ("x",), ALL, _cast_rule, cast,
          "Convert to dtype `to`, rounding to nearest-even for float targets. Float to integer truncates "
          "toward zero, NaN gives 0, out-of-range values wrap (64-bit targets clamp); integer to integer "
          "wraps (two's complement); to bool is x != 0; from bool gives 0/1. To the float8 types "
          "(e4m3fn, e4m3fnuz, e5m2, e5m2fnuz) saturate=1 clamps to the finite range (inf too; NaN stays "
          "NaN), saturate=0 overflows to inf or NaN. float4e2m1/float6 have no inf or NaN: out-of-range "
          "values clamp and NaN gives -0 (as ONNX's node tests test_cast_*_to_FLOAT4E2M1 expect). "
          "To float8e8m0 (a power of two) the exponent rounds by `round_mode` (up, down, nearest); beyond "
          "2**127 or below 2**-127 (0 too) saturate=1 stops at the largest or smallest value and saturate=0 "
          "gives NaN; inf gives the largest value when saturating, else NaN; NaN gives NaN (negative values "
          "are undefined).",
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
