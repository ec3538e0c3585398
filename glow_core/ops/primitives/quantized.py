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
- requantization (``requantize``): M = float32(in_scale * w_scale / out_scale), computed in float64 and rounded
  once; y = saturate(rint(float32(acc) * M) + out_offset), the product in float32 (as onnxruntime's MLAS does):
  any IEEE-754 device reproduces it bit for bit.
"""
from __future__ import annotations

import numpy as np

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


def _rescale_rule(ts, in_scale, in_offset, out_scale, out_offset, out_dtype):
    accept("rescale", ts[0], QDTYPES)
    _check_scale("rescale", "in_scale", in_scale)
    _check_offset("rescale", "in_offset", in_offset, ts[0].dtype.name)
    return [_out_type("rescale", ts[0].shape, out_scale, out_offset, out_dtype)]


def rescale(x, in_scale, in_offset, out_scale, out_offset, out_dtype):
    m = multiplier(in_scale, out_scale=out_scale)
    return requantize(x.astype(np.int64) - int(in_offset), m, out_offset, out_dtype)


primitive("rescale", "quantized", ("x",), QDTYPES, _rescale_rule, rescale,
          "Move between quantized types: saturate(rint(float32(x - in_offset) * M) + out_offset) with "
          "M = float32(in_scale / out_scale) computed in float64.",
          attrs={"in_scale": REQUIRED, "in_offset": REQUIRED, **OUT}, elementwise=True, **Q)


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
                clamp_min, clamp_max):
    x, w, bias, ws, wo = ts
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


def _epilogue(acc, x, w_scale, x_scale, out_scale, out_offset, out_dtype, clamp_min, clamp_max, channel_axis):
    """The accumulator wrapped to its dtype, then (unless out_dtype is that dtype) requantized per channel."""
    acc_dt = ACC[x.dtype.name]
    acc = acc.astype(np.int64).astype(dtype(acc_dt).np)
    if out_dtype == acc_dt:
        return acc
    m = multipliers(x_scale, w_scale, out_scale)
    shape = [1] * acc.ndim
    shape[channel_axis] = m.size
    return requantize(acc, m.reshape(shape), out_offset, out_dtype, clamp_min, clamp_max)


def qconv(x, w, bias, w_scale, w_offset, strides, dilations, pads, group, x_scale, x_offset, out_scale, out_offset,
          out_dtype, clamp_min=None, clamp_max=None):
    """sum (x - x_offset) * (w - w_offset[f]) + bias[f] in the accumulator (wrapping), then requantized with
    M[f] = float32(x_scale * w_scale[f] / out_scale). Zero padding is the real 0 (the value x_offset)."""
    f = w.shape[0]
    xs = x.astype(np.int64) - int(x_offset)
    ws = w.astype(np.int64) - w_offset.astype(np.int64).reshape((-1,) + (1,) * (w.ndim - 1))
    acc_t = _exact(_maxabs(xs), _maxabs(ws), int(np.prod(w.shape[1:])), _maxabs(bias))
    acc = conv(xs.astype(acc_t), ws.astype(acc_t), bias.astype(acc_t), strides, dilations, pads, group)
    return _epilogue(acc, x, np.broadcast_to(w_scale, (f,)), x_scale, out_scale, out_offset, out_dtype, clamp_min,
                     clamp_max, 1)


GEOMETRY = {"strides": REQUIRED, "dilations": REQUIRED, "pads": REQUIRED, "group": 1}
primitive("qconv", "quantized", ("x", "w", "bias", "w_scale", "w_offset"), QDTYPES, _qconv_rule, qconv,
          "Quantized convolution (geometry as `conv`). acc[n, f, ...] = sum (x - x_offset) * (w - w_offset[f]) + "
          "bias[f] in int32 (int64 for int16 x; overflow wraps); y = saturate(rint(float32(acc) * M[f]) + "
          "out_offset) clamped to [clamp_min, clamp_max], M[f] = float32(x_scale * w_scale[f] / out_scale) in "
          "float64. w: int8 (int16 with int16 x); bias: int32 (int64) of scale x_scale * w_scale[f], offset 0; "
          "w_scale (float32) and w_offset (int32): length 1 or F. out_dtype equal to the accumulator dtype "
          "returns acc itself (ConvInteger).",
          attrs={**GEOMETRY, "x_scale": REQUIRED, "x_offset": REQUIRED, **OUT, **CLAMP}, **Q)


def _qmatmul_rule(ts, a_scale, a_offset, out_scale, out_offset, out_dtype, clamp_min, clamp_max):
    a, b, bias, bs, bo = ts
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
            clamp_max=None):
    """sum_k (a - a_offset) * (b - b_offset[n]) + bias[n] in the accumulator, then requantized per column n."""
    n = b.shape[-1]
    xs = a.astype(np.int64) - int(a_offset)
    ys = b.astype(np.int64) - b_offset.astype(np.int64)
    acc_t = _exact(_maxabs(xs), _maxabs(ys), a.shape[-1], _maxabs(bias))
    acc = np.matmul(xs.astype(acc_t), ys.astype(acc_t)) + bias.astype(acc_t)
    return _epilogue(acc, a, np.broadcast_to(b_scale, (n,)), a_scale, out_scale, out_offset, out_dtype, clamp_min,
                     clamp_max, acc.ndim - 1)


primitive("qmatmul", "quantized", ("a", "b", "bias", "b_scale", "b_offset"), QDTYPES, _qmatmul_rule, qmatmul,
          "Quantized batched matrix product [..., M, K] x [..., K, N]: acc = sum_k (a - a_offset) * (b - "
          "b_offset[n]) + bias[n] in int32 (int64 for int16 a), requantized as `qconv` with M[n] = "
          "float32(a_scale * b_scale[n] / out_scale). b: int8 or uint8 (int16 with int16 a), a weight or "
          "an activation; b_scale, b_offset: length 1 or N.",
          attrs={"a_scale": REQUIRED, "a_offset": REQUIRED, **OUT, **CLAMP}, **Q)


# -- elementwise arithmetic ------------------------------------------------------------------------------------
def _binary_rule(name):
    def rule(ts, a_scale, a_offset, b_scale, b_offset, out_scale, out_offset, out_dtype, clamp_min, clamp_max):
        a, b = ts
        accept(name, a, QDTYPES)
        accept(name, b, QDTYPES)
        if a.shape != b.shape:
            fail(name, f"operands must have the same shape, got {a.shape} and {b.shape}")
        for what, s, o, t in (("a", a_scale, a_offset, a), ("b", b_scale, b_offset, b)):
            _check_scale(name, f"{what}_scale", s)
            _check_offset(name, f"{what}_offset", o, t.dtype.name)
        return [_out_type(name, a.shape, out_scale, out_offset, out_dtype, clamp_min, clamp_max)]
    return rule


def qadd(a, b, a_scale, a_offset, b_scale, b_offset, out_scale, out_offset, out_dtype, clamp_min=None,
         clamp_max=None):
    """rint((a - a_offset) * Ma + (b - b_offset) * Mb) in float64 (exact products, one rounding of the sum)."""
    ma = np.float64(multiplier(a_scale, out_scale=out_scale))
    mb = np.float64(multiplier(b_scale, out_scale=out_scale))
    y = (a.astype(np.float64) - a_offset) * ma + (b.astype(np.float64) - b_offset) * mb
    return saturate(np.rint(y), out_offset, out_dtype, clamp_min, clamp_max)


def qmul(a, b, a_scale, a_offset, b_scale, b_offset, out_scale, out_offset, out_dtype, clamp_min=None,
         clamp_max=None):
    """rint(float64((a - a_offset) * (b - b_offset)) * M), M = float32(a_scale * b_scale / out_scale)."""
    m = np.float64(multiplier(a_scale, b_scale, out_scale=out_scale))
    prod = (a.astype(np.int64) - int(a_offset)) * (b.astype(np.int64) - int(b_offset))
    return saturate(np.rint(prod.astype(np.float64) * m), out_offset, out_dtype, clamp_min, clamp_max)


BINARY_ATTRS = {"a_scale": REQUIRED, "a_offset": REQUIRED, "b_scale": REQUIRED, "b_offset": REQUIRED, **OUT, **CLAMP}
primitive("qadd", "quantized", ("a", "b"), QDTYPES, _binary_rule("qadd"), qadd,
          "Quantized a + b (operands of one shape, any quantized dtypes): y = saturate(rint((a - a_offset) * Ma + "
          "(b - b_offset) * Mb) + out_offset), Ma = float32(a_scale / out_scale), Mb = float32(b_scale / "
          "out_scale), the products and the sum in float64 (the products are exact, so fusing them into an FMA "
          "changes nothing).", attrs=BINARY_ATTRS, elementwise=True, **Q)
primitive("qmul", "quantized", ("a", "b"), QDTYPES, _binary_rule("qmul"), qmul,
          "Quantized a * b: y = saturate(rint(float64((a - a_offset) * (b - b_offset)) * M) + out_offset), the "
          "integer product exact, M = float32(a_scale * b_scale / out_scale).", attrs=BINARY_ATTRS,
          elementwise=True, **Q)


# -- average pooling, lookup tables ----------------------------------------------------------------------------
def _qavg_pool_rule(ts, kernel, strides, dilations, pads, count_include_pad, x_scale, x_offset, out_scale,
                    out_offset, out_dtype):
    x = ts[0]
    accept("qavg_pool", x, QDTYPES)
    if x.rank < 3:
        fail("qavg_pool", f"input {x.shape} must be [N, C, *spatial]")
    _check_scale("qavg_pool", "x_scale", x_scale)
    _check_offset("qavg_pool", "x_offset", x_offset, x.dtype.name)
    sp = _window_out("qavg_pool", x.shape[2:], kernel, strides, dilations, pads)
    return [_out_type("qavg_pool", x.shape[:2] + sp, out_scale, out_offset, out_dtype)]


def qavg_pool(x, kernel, strides, dilations, pads, count_include_pad, x_scale, x_offset, out_scale, out_offset,
              out_dtype):
    """acc = sum of (x - x_offset) over the window (int32); y = saturate(rint(float32(acc) * M[count]) +
    out_offset), M[count] = float32(x_scale / (out_scale * count)) in float64, count as `avg_pool` divides by."""
    acc, cnt = window_sums(x.astype(np.int64) - int(x_offset), kernel, strides, dilations, pads, count_include_pad)
    m = np.array([multiplier(x_scale, out_scale=float(out_scale) * c) for c in cnt.reshape(-1)], np.float32)
    return requantize(acc.astype(np.int64).astype(np.int32), m.reshape(cnt.shape), out_offset, out_dtype)


primitive("qavg_pool", "quantized", ("x",), QDTYPES, _qavg_pool_rule, qavg_pool,
          "Quantized mean over each window (geometry and count_include_pad as `avg_pool`): acc = sum of "
          "(x - x_offset) over the window in int32, y = saturate(rint(float32(acc) * M) + out_offset) with "
          "M = float32(x_scale / (out_scale * count)) computed in float64 for the window's divisor count.",
          attrs={"kernel": REQUIRED, "strides": REQUIRED, "dilations": REQUIRED, "pads": REQUIRED,
                 "count_include_pad": 0, "x_scale": REQUIRED, "x_offset": REQUIRED, **OUT}, **Q)


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
