"""Quantized primitives: ``quantize``, ``dequantize``, ``rescale``, ``qconv``, ``qmatmul``, ``qadd``, ``qmul``,
``qavg_pool`` and ``lookup``. Their reference kernels are the specification of Glow Kit's integer arithmetic
(vendor_guide/quantization.md explains it); the interpreter runs them.

The contract every quantized primitive follows:

- a quantized value q of scale s and offset o stands for the real number (q - o) * s; quantized dtypes are int8,
  uint8 and int16; biases and accumulators are int32 (int64 when the operands are int16);
- the attributes say how the primitive reads its operands (``x_scale``, ``x_offset``, ...) and give its result's
  quantized type (``out_scale``, ``out_offset``, ``out_dtype``); per-channel weight parameters are constant
  operands (float32 scales, int32 offsets) of length 1 (per tensor) or the channel count;
- rounding is half to even (numpy ``rint``, C ``nearbyintf`` in the default rounding mode), then saturation to the
  result dtype's range, narrowed by ``clamp_min`` / ``clamp_max`` (a fused activation) where the primitive has them;
- requantization has two modes, chosen by the attribute ``requant`` of every primitive that requantizes
  (``REQUANT_OPS``; set for a whole compilation by the compile option ``requant=``):
  - ``"float32"`` (the default, onnxruntime's MLAS): M = float32(in_scale * w_scale / out_scale), computed in
    float64 and rounded once; y = saturate(rint(float32(acc) * M) + out_offset), the product in float32: any
    IEEE-754 device reproduces it bit for bit (``requantize``);
  - ``"fixed_point"`` (TOSA RESCALE with scale32, TFLite's integer kernels): the real multiplier M, computed in
    float64 from the same scales, becomes an int32 multiplier m and a right shift (``fixed_point_multiplier``),
    and y = saturate(((acc * m + 2^(shift-1)) >> shift) + out_offset) in exact integer arithmetic
    (``apply_scale``): rounding half up, no float anywhere, so an integer-only device reproduces it bit for bit
    (``requantize_fixed``). The per-primitive formulas are in each kernel's docstring and in
    vendor_guide/quantization.md.
"""
from __future__ import annotations

import numpy as np

from ...errors import GlowError
from ...types import TensorType, dtype
from ..registry import REQUIRED, primitive
from .checks import accept, fail
from .linalg import _window_out, conv, window_sums

#: Quantized dtypes (activations, weights); accumulators are ACC[dtype].
QDTYPES = ("int8", "uint8", "int16")
ACC = {"int8": "int32", "uint8": "int32", "int16": "int64"}
#: Weights that go with activations of each dtype (uint8 weights are made int8 by the importer).
WEIGHTS = {"int8": ("int8",), "uint8": ("int8",), "int16": ("int16",)}


def qrange(dt) -> tuple[int, int]:
    """The integer range [qmin, qmax] of a quantized or accumulator dtype."""
    info = np.iinfo(dtype(dt).np)
    return int(info.min), int(info.max)


def multiplier(*scales, out_scale) -> np.float32:
    """The requantization multiplier prod(scales) / out_scale, computed in float64 and rounded once to float32."""
    m = 1.0
    for s in scales:
        m *= float(s)
    return np.float32(m / float(out_scale))


def real_multiplier(*scales, out_scale) -> float:
    """prod(scales) / out_scale in float64, not rounded: the real multiplier fixed-point requantization encodes."""
    m = 1.0
    for s in scales:
        m *= float(s)
    return m / float(out_scale)


#: The requantization modes (attribute ``requant`` of the primitives in ``REQUANT_OPS``).
REQUANT_MODES = ("float32", "fixed_point")
#: The primitives that requantize, and so take the attribute ``requant``.
REQUANT_OPS = ("rescale", "qconv", "qmatmul", "qadd", "qmul", "qavg_pool")
#: Right shifts a fixed-point multiplier may use (TOSA RESCALE's scale32 range).
SHIFT_RANGE = (2, 62)


def fixed_point_multiplier(real: float) -> tuple[int, int]:
    """(m, shift) with real ~= m * 2^-shift, m a non-negative int32 (< 2^31) and 2 <= shift <= 62: TOSA's scale32
    derivation (MLIR's computeMultiplierAndShiftTosaScale32). real = q * 2^e with q in [0.5, 1) (frexp);
    m = round(q * 2^31) (half away from zero; 2^31 becomes 2^30 with e + 1); shift = 31 - e; a shift above 62
    shifts m right by the excess (at most 31) and becomes 62. A real multiplier of 2^29 or more has no such
    encoding (GlowError)."""
    real = float(real)
    if not (np.isfinite(real) and real >= 0.0):
        raise GlowError(f"requantization multiplier {real!r} must be a finite number >= 0")
    if real == 0.0:
        return 0, SHIFT_RANGE[1]
    q, e = np.frexp(real)
    m = int(np.floor(float(q) * 2.0 ** 31 + 0.5))  # q > 0: half away from zero
    if m == 1 << 31:
        m, e = m // 2, e + 1
    shift = 31 - int(e)
    if shift > SHIFT_RANGE[1]:
        m >>= min(31, shift - SHIFT_RANGE[1])
        shift = SHIFT_RANGE[1]
    if shift < SHIFT_RANGE[0]:
        raise GlowError(f"requantization multiplier {real!r} is too large for fixed-point requantization "
                        f"(it needs a right shift of {shift}; accepted: {SHIFT_RANGE[0]}..{SHIFT_RANGE[1]}, "
                        f"i.e. multipliers below 2^29)")
    return m, shift


def fixed_point_multipliers(reals) -> tuple[np.ndarray, np.ndarray]:
    """``fixed_point_multiplier`` of every element: (m as int64, shift as int64), arrays of reals' shape."""
    reals = np.asarray(reals, np.float64)
    pairs = [fixed_point_multiplier(r) for r in reals.reshape(-1)]
    m = np.array([p[0] for p in pairs], np.int64).reshape(reals.shape)
    sh = np.array([p[1] for p in pairs], np.int64).reshape(reals.shape)
    return m, sh


def apply_scale(value, m, shift) -> np.ndarray:
    """(value * m + 2^(shift - 1)) >> shift in exact integer arithmetic (an arithmetic shift: rounding half
    towards +infinity), as int64; m, shift broadcast against value (TOSA's apply_scale_32 without double
    rounding, its operand ranges widened: the product is exact whatever its size)."""
    v = np.asarray(value).astype(np.int64)
    m = np.asarray(m, np.int64)
    shift = np.asarray(shift, np.int64)
    big = v.size and float(np.abs(v).max()) * float(m.max(initial=0)) >= 2.0 ** 62
    if big:  # only int16 products reach here: Python integers, exact
        vo, mo, so = np.broadcast_arrays(v.astype(object), m.astype(object), shift.astype(object))
        out = [(a * b + (1 << (s - 1))) >> s for a, b, s in zip(vo.reshape(-1), mo.reshape(-1), so.reshape(-1))]
        return np.array(out, dtype=object).reshape(vo.shape).astype(np.int64)
    one = np.int64(1)
    return (v * m + (one << (shift - 1))) >> shift


def multipliers(scale, vector, out_scale) -> np.ndarray:
    """``multiplier(scale, v, out_scale=out_scale)`` for every v of a float32 vector (per-channel weights)."""
    return np.array([multiplier(scale, v, out_scale=out_scale) for v in np.asarray(vector).reshape(-1)], np.float32)


def saturate(y, out_offset, out_dtype, clamp_min=None, clamp_max=None):
    """y (rounded, float64) + out_offset, clamped to the dtype's range narrowed by clamp_min/clamp_max."""
    lo, hi = qrange(out_dtype)
    lo = lo if clamp_min is None else max(lo, int(clamp_min))
    hi = hi if clamp_max is None else min(hi, int(clamp_max))
    return np.clip(y + float(out_offset), lo, hi).astype(dtype(out_dtype).np)


def requantize(acc, m, out_offset, out_dtype, clamp_min=None, clamp_max=None):
    """saturate(rint(float32(acc) * m) + out_offset): the float32 product rounded half to even."""
    y = np.rint(np.asarray(acc).astype(np.float32) * np.asarray(m, np.float32))
    return saturate(y.astype(np.float64), out_offset, out_dtype, clamp_min, clamp_max)


def requantize_fixed(acc, reals, out_offset, out_dtype, clamp_min=None, clamp_max=None):
    """saturate(apply_scale(acc, m, shift) + out_offset), (m, shift) = fixed_point_multiplier of each real
    multiplier (``reals`` broadcast against acc): the integer-only requantization."""
    m, sh = fixed_point_multipliers(reals)
    y = apply_scale(acc, m, sh)
    return saturate(y.astype(np.float64), out_offset, out_dtype, clamp_min, clamp_max)


def _check_requant(name, requant):
    if requant not in REQUANT_MODES:
        fail(name, f"requant {requant!r} is not accepted; accepted: {', '.join(REQUANT_MODES)}")


def _exact(*operands_and_terms):
    """The dtype in which an integer accumulation is exact: float64 (BLAS) while every partial sum stays below
    2**53, else int64. ``operands_and_terms``: (max |a|, max |b|, number of products, max |bias|)."""
    a, b, k, bias = operands_and_terms
    return np.float64 if a * b * k + bias < 2.0 ** 53 else np.int64


def _maxabs(x) -> float:
    return float(np.abs(x.astype(np.float64)).max()) if x.size else 0.0


def _per_channel(v, n, what, name):
    """A length-1 or length-n vector of parameters (what: 'w_scale', ...) of primitive ``name``."""
    if v.rank != 1 or v.shape[0] not in (1, n):
        fail(name, f"{what} must be a vector of length 1 (per tensor) or {n} (per channel), got shape {v.shape}")


def _check_scale(name, what, s):
    if not (isinstance(s, (int, float, np.floating)) and np.isfinite(s) and s > 0):
        fail(name, f"{what} must be a positive finite number, got {s!r}")


def _check_offset(name, what, o, dt):
    lo, hi = qrange(dt)
    if int(o) != o or not lo <= o <= hi:
        fail(name, f"{what} {o!r} must be an integer in [{lo}, {hi}] ({dt})")


def _out_type(name, shape, out_scale, out_offset, out_dtype, clamp_min=None, clamp_max=None, acc=None):
    """The result's quantized type (a plain accumulator type when out_dtype is the accumulator ``acc``)."""
    if out_dtype == acc:
        return TensorType(out_dtype, shape)
    if out_dtype not in QDTYPES:
        fail(name, f"out_dtype {out_dtype!r} is not accepted; accepted: {', '.join(QDTYPES)}"
                   + (f" or the accumulator {acc}" if acc else ""))
    _check_scale(name, "out_scale", out_scale)
    _check_offset(name, "out_offset", out_offset, out_dtype)
    lo, hi = qrange(out_dtype)
    cmin = lo if clamp_min is None else clamp_min
    cmax = hi if clamp_max is None else clamp_max
    if not lo <= cmin <= cmax <= hi:
        fail(name, f"clamp [{clamp_min}, {clamp_max}] must lie in [{lo}, {hi}] with clamp_min <= clamp_max")
    return TensorType(out_dtype, shape, float(out_scale), int(out_offset))


OUT = {"out_scale": REQUIRED, "out_offset": REQUIRED, "out_dtype": REQUIRED}
CLAMP = {"clamp_min": None, "clamp_max": None}
REQUANT = {"requant": "float32"}
Q = dict(tolerance="quantized", quantized="own")


# -- quantize / dequantize / rescale ---------------------------------------------------------------------------
def _quantize_rule(ts, scale, offset, dtype):
    accept("quantize", ts[0], ("float32", "float16", "bfloat16"))
    return [_out_type("quantize", ts[0].shape, scale, offset, dtype)]


def quantize(x, scale, offset, dtype):
    """saturate(rint(x / scale) + offset): the division in float32 (ONNX QuantizeLinear)."""
    return saturate(np.rint(x.astype(np.float32) / np.float32(scale)).astype(np.float64), offset, dtype)


primitive("quantize", "quantized", ("x",), ("float32", "float16", "bfloat16"), _quantize_rule, quantize,
          "q = saturate(rint(x / scale) + offset) as `dtype` (int8, uint8, int16), the division in float32, "
          "rint rounding half to even (ONNX QuantizeLinear). The result has the quantized type (dtype, scale, "
          "offset). NaN is undefined; infinities saturate.",
          attrs={"scale": REQUIRED, "offset": REQUIRED, "dtype": REQUIRED}, elementwise=True, **Q)


def _dequantize_rule(ts, axis):
    q, scale, offset = ts
    accept("dequantize", q, QDTYPES + ("int32",))
    accept("dequantize", scale, ("float32",))
    accept("dequantize", offset, ("int32",))
    if not 0 <= axis < max(q.rank, 1):
        fail("dequantize", f"axis {axis} out of range for rank {q.rank}")
    n = q.shape[axis] if q.rank else 1
    _per_channel(scale, n, "scale", "dequantize")
    if offset.shape != scale.shape:
        fail("dequantize", f"offset shape {offset.shape} must equal scale shape {scale.shape}")
    return [TensorType("float32", q.shape)]


def dequantize(q, scale, offset, axis):
    """float32(q - offset) * scale in float32, the parameters per `axis` when they are vectors of its length."""
    shape = [1] * q.ndim
    if scale.size > 1:
        shape[axis] = scale.size
    diff = q.astype(np.int64) - offset.astype(np.int64).reshape(shape)
    return diff.astype(np.float32) * scale.astype(np.float32).reshape(shape)


primitive("dequantize", "quantized", ("q", "scale", "offset"), QDTYPES + ("int32",), _dequantize_rule, dequantize,
          "float32(q - offset) * scale, both in float32 (ONNX DequantizeLinear). `scale` (float32) and `offset` "
          "(int32) are vectors of length 1 (per tensor) or q.shape[axis] (per axis).",
          attrs={"axis": 0}, tolerance="elementwise-exact", quantized="own")


def _rescale_rule(ts, in_scale, in_offset, out_scale, out_offset, out_dtype, requant):
    accept("rescale", ts[0], QDTYPES)
    _check_requant("rescale", requant)
    _check_scale("rescale", "in_scale", in_scale)
    _check_offset("rescale", "in_offset", in_offset, ts[0].dtype.name)
    return [_out_type("rescale", ts[0].shape, out_scale, out_offset, out_dtype)]


def rescale(x, in_scale, in_offset, out_scale, out_offset, out_dtype, requant="float32"):
    """float32: saturate(rint(float32(x - in_offset) * M) + out_offset), M = float32(in_scale / out_scale);
    fixed_point: saturate(apply_scale(x - in_offset, m, shift) + out_offset), (m, shift) of in_scale / out_scale
    (TOSA RESCALE)."""
    if requant == "fixed_point":
        return requantize_fixed(x.astype(np.int64) - int(in_offset), real_multiplier(in_scale, out_scale=out_scale),
                                out_offset, out_dtype)
    m = multiplier(in_scale, out_scale=out_scale)
    return requantize(x.astype(np.int64) - int(in_offset), m, out_offset, out_dtype)


primitive("rescale", "quantized", ("x",), QDTYPES, _rescale_rule, rescale,
          "Move between quantized types: saturate(rint(float32(x - in_offset) * M) + out_offset) with "
          "M = float32(in_scale / out_scale) computed in float64. requant=\"fixed_point\": saturate(apply_scale(x "
          "- in_offset, m, shift) + out_offset) with (m, shift) = fixed_point_multiplier(in_scale / out_scale) "
          "(TOSA RESCALE, scale32).",
          attrs={"in_scale": REQUIRED, "in_offset": REQUIRED, **OUT, **REQUANT}, elementwise=True, **Q)


# -- qconv / qmatmul -----------------------------------------------------------------------------------------
def _weights(name, x, w, bias, scale, offset, channels):
    accept(name, x, QDTYPES)
    accept(name, w, WEIGHTS[x.dtype.name])
    accept(name, bias, (ACC[x.dtype.name],))
    accept(name, scale, ("float32",))
    accept(name, offset, ("int32",))
    _per_channel(scale, channels, "weight scale", name)
    if offset.shape != scale.shape:
        fail(name, f"weight offset shape {offset.shape} must equal weight scale shape {scale.shape}")
    if bias.shape != (channels,):
        fail(name, f"bias shape {bias.shape} must be ({channels},)")


def _qconv_rule(ts, strides, dilations, pads, group, x_scale, x_offset, out_scale, out_offset, out_dtype,
                clamp_min, clamp_max, requant):
    x, w, bias, ws, wo = ts
    _check_requant("qconv", requant)
    if x.rank < 3 or w.rank != x.rank:
        fail("qconv", f"input {x.shape} and filter {w.shape} must be [N, C, *spatial] and [F, C/group, *k]")
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        fail("qconv", f"channels {x.shape[1]} do not match filter {w.shape} with group {group}")
    _weights("qconv", x, w, bias, ws, wo, w.shape[0])
    _check_scale("qconv", "x_scale", x_scale)
    _check_offset("qconv", "x_offset", x_offset, x.dtype.name)
    sp = _window_out("qconv", x.shape[2:], w.shape[2:], strides, dilations, pads)
    return [_out_type("qconv", (x.shape[0], w.shape[0]) + sp, out_scale, out_offset, out_dtype, clamp_min, clamp_max,
                      ACC[x.dtype.name])]


def _epilogue(acc, x, w_scale, x_scale, out_scale, out_offset, out_dtype, clamp_min, clamp_max, channel_axis,
              requant="float32"):
    """The accumulator wrapped to its dtype, then (unless out_dtype is that dtype) requantized per channel."""
    acc_dt = ACC[x.dtype.name]
    acc = acc.astype(np.int64).astype(dtype(acc_dt).np)
    if out_dtype == acc_dt:
        return acc
    shape = [1] * acc.ndim
    shape[channel_axis] = np.size(w_scale)
    if requant == "fixed_point":
        reals = np.array([real_multiplier(x_scale, v, out_scale=out_scale) for v in np.asarray(w_scale).reshape(-1)])
        return requantize_fixed(acc, reals.reshape(shape), out_offset, out_dtype, clamp_min, clamp_max)
    m = multipliers(x_scale, w_scale, out_scale)
    return requantize(acc, m.reshape(shape), out_offset, out_dtype, clamp_min, clamp_max)


def qconv(x, w, bias, w_scale, w_offset, strides, dilations, pads, group, x_scale, x_offset, out_scale, out_offset,
          out_dtype, clamp_min=None, clamp_max=None, requant="float32"):
    """sum (x - x_offset) * (w - w_offset[f]) + bias[f] in the accumulator (wrapping), then requantized with
    M[f] = float32(x_scale * w_scale[f] / out_scale) (fixed_point: apply_scale with the (m, shift) of
    x_scale * w_scale[f] / out_scale). Zero padding is the real 0 (the value x_offset)."""
    f = w.shape[0]
    xs = x.astype(np.int64) - int(x_offset)
    ws = w.astype(np.int64) - w_offset.astype(np.int64).reshape((-1,) + (1,) * (w.ndim - 1))
    acc_t = _exact(_maxabs(xs), _maxabs(ws), int(np.prod(w.shape[1:])), _maxabs(bias))
    acc = conv(xs.astype(acc_t), ws.astype(acc_t), bias.astype(acc_t), strides, dilations, pads, group)
    return _epilogue(acc, x, np.broadcast_to(w_scale, (f,)), x_scale, out_scale, out_offset, out_dtype, clamp_min,
                     clamp_max, 1, requant)


GEOMETRY = {"strides": REQUIRED, "dilations": REQUIRED, "pads": REQUIRED, "group": 1}
primitive("qconv", "quantized", ("x", "w", "bias", "w_scale", "w_offset"), QDTYPES, _qconv_rule, qconv,
          "Quantized convolution (geometry as `conv`). acc[n, f, ...] = sum (x - x_offset) * (w - w_offset[f]) + "
          "bias[f] in int32 (int64 for int16 x; overflow wraps); y = saturate(rint(float32(acc) * M[f]) + "
          "out_offset) clamped to [clamp_min, clamp_max], M[f] = float32(x_scale * w_scale[f] / out_scale) in "
          "float64. w: int8 (int16 with int16 x); bias: int32 (int64) of scale x_scale * w_scale[f], offset 0; "
          "w_scale (float32) and w_offset (int32): length 1 or F. out_dtype equal to the accumulator dtype "
          "returns acc itself (ConvInteger). requant=\"fixed_point\": y = saturate(apply_scale(acc, m[f], shift[f]) + "
          "out_offset), (m[f], shift[f]) = fixed_point_multiplier(x_scale * w_scale[f] / out_scale).",
          attrs={**GEOMETRY, "x_scale": REQUIRED, "x_offset": REQUIRED, **OUT, **CLAMP, **REQUANT}, **Q)


def _qmatmul_rule(ts, a_scale, a_offset, out_scale, out_offset, out_dtype, clamp_min, clamp_max, requant):
    a, b, bias, bs, bo = ts
    _check_requant("qmatmul", requant)
    if a.rank < 2 or a.rank != b.rank or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        fail("qmatmul", f"expects [..., M, K] x [..., K, N] with equal batch dims, got {a.shape} x {b.shape}")
    accept("qmatmul", a, QDTYPES)
    if a.dtype.name != "int16":
        accept("qmatmul", b, ("int8", "uint8"))
    _weights("qmatmul", a, TensorType(WEIGHTS[a.dtype.name][0], b.shape), bias, bs, bo, b.shape[-1])
    _check_scale("qmatmul", "a_scale", a_scale)
    _check_offset("qmatmul", "a_offset", a_offset, a.dtype.name)
    return [_out_type("qmatmul", a.shape[:-1] + (b.shape[-1],), out_scale, out_offset, out_dtype, clamp_min,
                      clamp_max, ACC[a.dtype.name])]


def qmatmul(a, b, bias, b_scale, b_offset, a_scale, a_offset, out_scale, out_offset, out_dtype, clamp_min=None,
            clamp_max=None, requant="float32"):
    """sum_k (a - a_offset) * (b - b_offset[n]) + bias[n] in the accumulator, then requantized per column n."""
    n = b.shape[-1]
    xs = a.astype(np.int64) - int(a_offset)
    ys = b.astype(np.int64) - b_offset.astype(np.int64)
    acc_t = _exact(_maxabs(xs), _maxabs(ys), a.shape[-1], _maxabs(bias))
    acc = np.matmul(xs.astype(acc_t), ys.astype(acc_t)) + bias.astype(acc_t)
    return _epilogue(acc, a, np.broadcast_to(b_scale, (n,)), a_scale, out_scale, out_offset, out_dtype, clamp_min,
                     clamp_max, acc.ndim - 1, requant)


primitive("qmatmul", "quantized", ("a", "b", "bias", "b_scale", "b_offset"), QDTYPES, _qmatmul_rule, qmatmul,
          "Quantized batched matrix product [..., M, K] x [..., K, N]: acc = sum_k (a - a_offset) * (b - "
          "b_offset[n]) + bias[n] in int32 (int64 for int16 a), requantized as `qconv` with M[n] = "
          "float32(a_scale * b_scale[n] / out_scale). b: int8 or uint8 (int16 with int16 a), a weight or "
          "an activation; b_scale, b_offset: length 1 or N. requant=\"fixed_point\" as `qconv`'s.",
          attrs={"a_scale": REQUIRED, "a_offset": REQUIRED, **OUT, **CLAMP, **REQUANT}, **Q)


# -- elementwise arithmetic ------------------------------------------------------------------------------------
def _binary_rule(name):
    def rule(ts, a_scale, a_offset, b_scale, b_offset, out_scale, out_offset, out_dtype, clamp_min, clamp_max,
             requant):
        a, b = ts
        _check_requant(name, requant)
        accept(name, a, QDTYPES)
        accept(name, b, QDTYPES)
        if a.shape != b.shape:
            fail(name, f"operands must have the same shape, got {a.shape} and {b.shape}")
        for what, s, o, t in (("a", a_scale, a_offset, a), ("b", b_scale, b_offset, b)):
            _check_scale(name, f"{what}_scale", s)
            _check_offset(name, f"{what}_offset", o, t.dtype.name)
        return [_out_type(name, a.shape, out_scale, out_offset, out_dtype, clamp_min, clamp_max)]
    return rule


def qadd_shift(a_dtype, b_dtype) -> int:
    """The left shift L of fixed-point qadd's operands: 20 for 8-bit operands, 15 when one is int16 (TFLite's)."""
    return 15 if "int16" in (dtype(a_dtype).name, dtype(b_dtype).name) else 20


def qadd_multipliers(a_scale, b_scale, out_scale, shift) -> tuple[float, float, float]:
    """Fixed-point qadd's real multipliers (Ma', Mb', Mo'): each operand to the common scale 2 * max(a_scale,
    b_scale) / 2^L, then the sum to out_scale (TFLite's int8 add)."""
    twice = 2.0 * max(float(a_scale), float(b_scale))
    return float(a_scale) / twice, float(b_scale) / twice, twice / (2.0 ** shift * float(out_scale))


def qadd(a, b, a_scale, a_offset, b_scale, b_offset, out_scale, out_offset, out_dtype, clamp_min=None,
         clamp_max=None, requant="float32"):
    """rint((a - a_offset) * Ma + (b - b_offset) * Mb) in float64 (exact products, one rounding of the sum).
    fixed_point: A = apply_scale((a - a_offset) << L, Ma'), B likewise, y = apply_scale(A + B, Mo') (see
    ``qadd_shift``, ``qadd_multipliers``)."""
    if requant == "fixed_point":
        sh = qadd_shift(a.dtype, b.dtype)
        ra, rb, ro = qadd_multipliers(a_scale, b_scale, out_scale, sh)
        ta = apply_scale((a.astype(np.int64) - int(a_offset)) << sh, *fixed_point_multiplier(ra))
        tb = apply_scale((b.astype(np.int64) - int(b_offset)) << sh, *fixed_point_multiplier(rb))
        y = apply_scale(ta + tb, *fixed_point_multiplier(ro))
        return saturate(y.astype(np.float64), out_offset, out_dtype, clamp_min, clamp_max)
    ma = np.float64(multiplier(a_scale, out_scale=out_scale))
    mb = np.float64(multiplier(b_scale, out_scale=out_scale))
    y = (a.astype(np.float64) - a_offset) * ma + (b.astype(np.float64) - b_offset) * mb
    return saturate(np.rint(y), out_offset, out_dtype, clamp_min, clamp_max)


def qmul(a, b, a_scale, a_offset, b_scale, b_offset, out_scale, out_offset, out_dtype, clamp_min=None,
         clamp_max=None, requant="float32"):
    """rint(float64((a - a_offset) * (b - b_offset)) * M), M = float32(a_scale * b_scale / out_scale).
    fixed_point: apply_scale of the exact integer product with the (m, shift) of a_scale * b_scale / out_scale."""
    prod = (a.astype(np.int64) - int(a_offset)) * (b.astype(np.int64) - int(b_offset))
    if requant == "fixed_point":
        return requantize_fixed(prod, real_multiplier(a_scale, b_scale, out_scale=out_scale), out_offset, out_dtype,
                                clamp_min, clamp_max)
    m = np.float64(multiplier(a_scale, b_scale, out_scale=out_scale))
    return saturate(np.rint(prod.astype(np.float64) * m), out_offset, out_dtype, clamp_min, clamp_max)


BINARY_ATTRS = {"a_scale": REQUIRED, "a_offset": REQUIRED, "b_scale": REQUIRED, "b_offset": REQUIRED, **OUT, **CLAMP,
                **REQUANT}
primitive("qadd", "quantized", ("a", "b"), QDTYPES, _binary_rule("qadd"), qadd,
          "Quantized a + b (operands of one shape, any quantized dtypes): y = saturate(rint((a - a_offset) * Ma + "
          "(b - b_offset) * Mb) + out_offset), Ma = float32(a_scale / out_scale), Mb = float32(b_scale / "
          "out_scale), the products and the sum in float64 (the products are exact, so fusing them into an FMA "
          "changes nothing). requant=\"fixed_point\" (TFLite's int8 add): with L = 20 (15 when an operand is int16), "
          "T = 2 * max(a_scale, b_scale), A = apply_scale((a - a_offset) << L, fp(a_scale / T)), B likewise, y = "
          "saturate(apply_scale(A + B, fp(T / (2^L * out_scale))) + out_offset), fp = fixed_point_multiplier.",
          attrs=BINARY_ATTRS, elementwise=True, **Q)
primitive("qmul", "quantized", ("a", "b"), QDTYPES, _binary_rule("qmul"), qmul,
          "Quantized a * b: y = saturate(rint(float64((a - a_offset) * (b - b_offset)) * M) + out_offset), the "
          "integer product exact, M = float32(a_scale * b_scale / out_scale). requant=\"fixed_point\": "
          "saturate(apply_scale(product, m, shift) + out_offset), (m, shift) of a_scale * b_scale / out_scale.",
          attrs=BINARY_ATTRS,
          elementwise=True, **Q)


# -- average pooling, lookup tables ----------------------------------------------------------------------------
def _qavg_pool_rule(ts, kernel, strides, dilations, pads, count_include_pad, x_scale, x_offset, out_scale,
                    out_offset, out_dtype, requant):
    x = ts[0]
    _check_requant("qavg_pool", requant)
    accept("qavg_pool", x, QDTYPES)
    if x.rank < 3:
        fail("qavg_pool", f"input {x.shape} must be [N, C, *spatial]")
    _check_scale("qavg_pool", "x_scale", x_scale)
    _check_offset("qavg_pool", "x_offset", x_offset, x.dtype.name)
    sp = _window_out("qavg_pool", x.shape[2:], kernel, strides, dilations, pads)
    return [_out_type("qavg_pool", x.shape[:2] + sp, out_scale, out_offset, out_dtype)]


def qavg_pool(x, kernel, strides, dilations, pads, count_include_pad, x_scale, x_offset, out_scale, out_offset,
              out_dtype, requant="float32"):
    """acc = sum of (x - x_offset) over the window (int32); y = saturate(rint(float32(acc) * M[count]) +
    out_offset), M[count] = float32(x_scale / (out_scale * count)) in float64, count as `avg_pool` divides by.
    fixed_point: apply_scale with the (m, shift) of x_scale / (out_scale * count)."""
    acc, cnt = window_sums(x.astype(np.int64) - int(x_offset), kernel, strides, dilations, pads, count_include_pad)
    if requant == "fixed_point":
        counts, where = np.unique(np.asarray(cnt).reshape(-1), return_inverse=True)
        reals = np.array([real_multiplier(x_scale, out_scale=float(out_scale) * c) for c in counts])
        return requantize_fixed(acc.astype(np.int64).astype(np.int32), reals[where].reshape(np.shape(cnt)),
                                out_offset, out_dtype)
    m = np.array([multiplier(x_scale, out_scale=float(out_scale) * c) for c in cnt.reshape(-1)], np.float32)
    return requantize(acc.astype(np.int64).astype(np.int32), m.reshape(cnt.shape), out_offset, out_dtype)


primitive("qavg_pool", "quantized", ("x",), QDTYPES, _qavg_pool_rule, qavg_pool,
          "Quantized mean over each window (geometry and count_include_pad as `avg_pool`): acc = sum of "
          "(x - x_offset) over the window in int32, y = saturate(rint(float32(acc) * M) + out_offset) with "
          "M = float32(x_scale / (out_scale * count)) computed in float64 for the window's divisor count. "
          "requant=\"fixed_point\": saturate(apply_scale(acc, m, shift) + out_offset), (m, shift) of x_scale / "
          "(out_scale * count).",
          attrs={"kernel": REQUIRED, "strides": REQUIRED, "dilations": REQUIRED, "pads": REQUIRED,
                 "count_include_pad": 0, "x_scale": REQUIRED, "x_offset": REQUIRED, **OUT, **REQUANT}, **Q)


def _lookup_rule(ts, out_scale, out_offset):
    x, table = ts
    accept("lookup", x, ("int8", "uint8"))
    accept("lookup", table, QDTYPES)
    if table.shape != (256,):
        fail("lookup", f"table shape {table.shape} must be (256,)")
    return [_out_type("lookup", x.shape, out_scale, out_offset, table.dtype.name)]


def lookup(x, table, out_scale, out_offset):
    """table[x - qmin]: entry 0 belongs to the dtype's lowest value."""
    return table[x.astype(np.int64) - qrange(x.dtype)[0]]


primitive("lookup", "quantized", ("x", "table"), ("int8", "uint8"), _lookup_rule, lookup,
          "y = table[x - qmin(x)]: a 256-entry table (a constant computed at compile time, e.g. quantize(f("
          "dequantize(q))) for a unary f such as sigmoid) indexed by the 8-bit input. The result has the table's "
          "dtype and the quantized type (out_scale, out_offset).",
          attrs={"out_scale": REQUIRED, "out_offset": REQUIRED}, tolerance="index", exact=True, quantized="own")
