"""Cast and quantization ONNX ops: Cast, CastLike, BitCast, (De)QuantizeLinear, DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Everything lowers into primitives: `cast`/`bitcast` for conversions. With constant quantization parameters of
the shapes the quantized primitives take (per tensor, or per axis for weights), (De)QuantizeLinear become
`quantize` / `dequantize` and the integer and QLinear ops `qconv` / `qmatmul` (their semantics:
glow_core/ops/primitives/quantized.py). Otherwise (parameters computed at run time, blocked scales, float8
targets) quantization is div, round, add, clip (max/min) and cast, with per-axis and blocked scales and zero
points expanded by reshape/broadcast/slice, and the integer and QLinear ops widen their operands to int32,
subtract the zero points, run `matmul`/`conv` in int32 and (QLinear) requantize in float64.
"""
from __future__ import annotations

import numpy as np

from ...errors import GlowError, ShapeError, UnsupportedOpError
from ...types import dtype
from ..primitives.quantized import QDTYPES
from ..registry import onnx_op
from .linalg import batched_matmul
from .nn import conv_pads

#: Integer quantized types and their clip ranges.
_INT_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
               "uint4": (0, 15), "int4": (-8, 7), "uint2": (0, 3), "int2": (-2, 1)}
_FLOAT8 = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")
_FLOAT_Q = _FLOAT8 + ("float4e2m1", "float6e2m3", "float6e3m2")


def _to_dtype(b, to, what="to"):
    """The DType of an ONNX element-type code attribute."""
    try:
        return dtype(int(to))
    except (GlowError, TypeError, ValueError) as e:  # e.g. STRING: the message lists the accepted types
        raise UnsupportedOpError(f"{b.where}: {what}: {e}") from None


def _cast(b, x, to, saturate=1, round_mode="up"):
    to = dtype(to)
    if x.dtype == to:
        return x
    # saturate (opset 19) and round_mode (opset 24) are None for older opsets: ONNX's defaults then apply
    return b.cast(x, to=to.name, saturate=1 if saturate is None else int(saturate), round_mode=round_mode or "up")


@onnx_op("Cast")
def cast(b, x, *, to, saturate=1, round_mode="up", **_):
    """Primitive `cast` to `to` (saturate applies to float8 targets, round_mode to float8e8m0)."""
    return _cast(b, x, _to_dtype(b, to), saturate, round_mode)


@onnx_op("CastLike")
def cast_like(b, x, like, *, saturate=1, round_mode="up", **_):
    """Primitive `cast` to the element type of `like`."""
    return _cast(b, x, like.dtype, saturate, round_mode)


_SUB_BYTE_BITS = {"int4": 4, "uint4": 4, "float4e2m1": 4, "int2": 2, "uint2": 2, "float6e2m3": 6, "float6e3m2": 6}


def _bits(t):
    return _SUB_BYTE_BITS.get(t.name, 8 * t.itemsize)


@onnx_op("BitCast")
def bit_cast(b, x, *, to):
    """Primitive `bitcast`: the same bits read as `to` (bit widths must agree)."""
    t = _to_dtype(b, to)
    if _bits(t) != _bits(x.dtype):
        raise ShapeError(f"{b.where}: cannot bit-cast {x.dtype} ({_bits(x.dtype)} bits) to {t} ({_bits(t)} "
                         f"bits): the bit widths must agree")
    return x if t == x.dtype else b.bitcast(x, to=t.name)


# -- quantization parameters ----------------------------------------------------------------------
def _param(b, v, shape, axis, block_size, what):
    """Scale or zero point `v` made numpy-broadcastable to `shape`: per-tensor (scalar or one element),
    per-axis (1-D along `axis`) or blocked (same rank, each element repeated `block_size` times along
    `axis`, the last block possibly cut short)."""
    if v is None:
        return None
    if v.rank == 0:
        return v
    if v.type.numel == 1 and not block_size:
        return b.reshape_(v, ())
    rank = len(shape)
    if not block_size:
        if axis >= rank or v.rank != 1 or v.shape[0] != shape[axis]:
            raise ShapeError(f"{b.where}: {what} of shape {v.shape} must be a scalar, or 1-D of the length of "
                             f"input dim {axis} for per-axis quantization (the input is {tuple(shape)}, the other "
                             f"parameter per-tensor or per-axis alike)")
        return b.reshape_(v, tuple(shape[axis] if i == axis else 1 for i in range(rank)))
    nb = -(-shape[axis] // block_size)
    if block_size < 0 or v.rank != rank or v.shape[axis] != nb or any(
            v.shape[i] != shape[i] for i in range(rank) if i != axis):
        raise ShapeError(f"{b.where}: {what} of shape {v.shape} does not block input {tuple(shape)} with "
                         f"block_size {block_size} on axis {axis}; expected dim {axis} = {nb}, others equal")
    v = b.reshape_(v, v.shape[:axis + 1] + (1,) + v.shape[axis + 1:])
    v = b.broadcast_to(v, v.shape[:axis + 1] + (block_size,) + v.shape[axis + 2:])
    full = list(shape)
    full[axis] = nb * block_size
    v = b.reshape_(v, full)
    if full[axis] != shape[axis]:
        v = b.slice(v, starts=[0] * rank, ends=list(shape), steps=[1] * rank)
    return v


def _axis(b, axis, x, scale, block_size):
    """The normalized quantization axis (ignored, and so unchecked, for per-tensor parameters)."""
    if scale.type.numel == 1 and not block_size:
        return 0
    return b.norm_axis(axis, x.rank)


def _clip(b, x, lo, hi):
    return b.binary("min", b.binary("max", x, b.scalar_like(lo, x, ())), b.scalar_like(hi, x, ()))


def _acc_float(x):
    return "float64" if x.dtype.name == "float64" else "float32"


@onnx_op("QuantizeLinear")
def quantize_linear(b, x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0,
                    precision=0, **_):
    """y = saturate(round(x / scale) + zero_point): div (in `precision` if given), round (ties to even),
    add and clip via max/min in float32 (float64 for float64 input), cast. Float targets:
    cast(x / scale + zero_point) with `saturate` for float8 (whose zero point must be 0 and is ignored)."""
    axis = _axis(b, axis, x, y_scale, block_size)
    out = y_zero_point.dtype if y_zero_point is not None else (
        _to_dtype(b, output_dtype, "output_dtype") if output_dtype else dtype("uint8"))
    if output_dtype and y_zero_point is not None and _to_dtype(b, output_dtype) != out:
        raise ShapeError(f"{b.where}: output_dtype {_to_dtype(b, output_dtype)} differs from the zero point "
                         f"type {out}")
    if out.name not in _INT_RANGES and out.name not in _FLOAT_Q:
        raise ShapeError(f"{b.where}: cannot quantize to {out}; accepted: "
                         f"{', '.join(list(_INT_RANGES) + list(_FLOAT_Q))}")
    params = _const_params(y_scale, y_zero_point, 1)
    if params is not None and out.name in QDTYPES and x.dtype.name == "float32" and not precision:
        return b.quantize(x, scale=float(params[0][0]), offset=int(params[1][0]), dtype=out.name)
    scale = _param(b, y_scale, x.shape, axis, block_size, "y_scale")
    zp = _param(b, y_zero_point, x.shape, axis, block_size, "y_zero_point")
    if precision:
        p = _to_dtype(b, precision, "precision")
        x, scale = b.cast_(x, p), b.cast_(scale, p)
    elif scale.dtype != x.dtype and scale.dtype.name in ("float32", "float16", "bfloat16") and x.dtype.is_float:
        x = b.cast_(x, scale.dtype)  # opset 23: the division is in the scale's type unless precision says otherwise
    elif scale.dtype != x.dtype:
        scale = b.cast_(scale, x.dtype)
    q = b.binary("div", x, scale)
    acc = _acc_float(q)
    if out.name in _INT_RANGES:
        q = b.cast_(b.round(q), acc)
        if zp is not None:
            q = b.binary("add", q, b.cast_(zp, acc))
        lo, hi = _INT_RANGES[out.name]
        return b.cast_(_clip(b, q, lo, hi), out)
    if zp is not None and out.name not in _FLOAT8:
        q = b.binary("add", b.cast_(q, acc), b.cast_(zp, acc))
    return _cast(b, q, out, saturate)


@onnx_op("DequantizeLinear")
def dequantize_linear(b, x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0, **_):
    """y = (x - zero_point) * scale: cast to float32, sub, mul, cast to output_dtype (default: the scale
    type). float8 zero points must be zero and are ignored."""
    axis = _axis(b, axis, x, x_scale, block_size)
    out = _to_dtype(b, output_dtype, "output_dtype") if output_dtype else x_scale.dtype
    params = None if block_size else _const_params(x_scale, x_zero_point, x.shape[axis] if x.rank else 1)
    if params is not None and x.dtype.name in QDTYPES + ("int32",) and out.name == "float32":
        return b.dequantize(x, b.const(params[0]), b.const(params[1]), axis=axis)
    acc = "float64" if "float64" in (out.name, x_scale.dtype.name) else "float32"
    scale = _param(b, x_scale, x.shape, axis, block_size, "x_scale")
    zp = _param(b, x_zero_point, x.shape, axis, block_size, "x_zero_point")
    y = b.cast_(x, acc)
    if zp is not None and x.dtype.name not in _FLOAT8:
        y = b.binary("sub", y, b.cast_(zp, acc))
    y = b.binary("mul", y, b.cast_(scale, acc))
    return b.cast_(y, out)


@onnx_op("DynamicQuantizeLinear")
def dynamic_quantize_linear(b, x):
    """uint8 quantization with scale = (max(x, 0) - min(x, 0)) / 255 (1/255 when that range is 0) and
    zero point round(clip(-min / scale, 0, 255)): reduce_max/min, arithmetic, then as QuantizeLinear."""
    axes = list(range(x.rank))
    xf = b.cast_(x, "float32")
    zero = b.const(np.float32(0))
    hi = b.max(b.reduce("reduce_max", xf, axes, keepdims=False), zero)
    lo = b.min(b.reduce("reduce_min", xf, axes, keepdims=False), zero)
    rng = b.sub(hi, lo)
    rng = b.select(b.eq(rng, zero), b.const(np.float32(1)), rng)
    scale = b.div(rng, b.const(np.float32(255)))
    zp = b.round(_clip(b, b.sub(zero, b.div(lo, scale)), 0, 255))
    y = b.binary("add", b.round(b.binary("div", xf, scale)), zp)
    y = b.cast_(_clip(b, y, 0, 255), "uint8")
    return y, b.cast_(scale, x.dtype), b.cast_(zp, "uint8")


# -- integer matmul / conv -------------------------------------------------------------------------
def _widen(b, v, zp, zp_shape=None):
    """v - zp in int32 (zp reshaped to `zp_shape` when it is 1-D; an N-D zp, e.g. MatMulInteger's [D1, D2, 1, N] for
    b of [D1, D2, K, N], broadcasts as it is)."""
    v = b.cast_(v, "int32")
    if zp is None:
        return v
    zp = b.cast_(zp, "int32")
    if zp.rank == 1 and zp.type.numel == 1:
        zp = b.reshape_(zp, ())
    elif zp.rank == 1 and zp_shape is not None:
        zp = _reshape_neg(b, zp, zp_shape)
    return b.binary("sub", v, zp)


def _matmul_int(b, a, a_zp, bm, b_zp):
    """(a - a_zp) @ (b - b_zp) in int32; 1-D zero points are per row of a and per column of b."""
    if a.rank < 1 or bm.rank < 1:
        raise ShapeError(f"{b.where}: operands must have rank >= 1, got {a.shape} and {bm.shape}")
    x = _widen(b, a, a_zp, (-1, 1) if a.rank >= 2 else None)
    y = _widen(b, bm, b_zp, (1, -1) if bm.rank >= 2 else None)
    x = b.reshape_(x, (1,) + x.shape) if x.rank == 1 else x
    y = b.reshape_(y, y.shape + (1,)) if y.rank == 1 else y
    out = batched_matmul(b, x, y)
    shape = list(out.shape)
    if bm.rank == 1:
        shape.pop(-1)
    if a.rank == 1:
        shape.pop(-2 if bm.rank != 1 else -1)
    return b.reshape_(out, shape)


def _conv_int(b, x, x_zp, w, w_zp, bias, auto_pad, dilations, group, kernel_shape, pads, strides):
    """conv of (x - x_zp) and (w - w_zp) in int32; a 1-D w_zp is per output channel."""
    if x.rank < 3 or w.rank != x.rank:
        raise ShapeError(f"{b.where}: input {x.shape} and filter {w.shape} must be [N, C, *spatial] and "
                         f"[F, C/group, *kernel]")
    n = x.rank - 2
    xi = _widen(b, x, x_zp)
    wi = _widen(b, w, w_zp, (-1,) + (1,) * (n + 1))
    k = list(kernel_shape or w.shape[2:])
    strides = list(strides or [1] * n)
    dilations = list(dilations or [1] * n)
    p = conv_pads(b, x.shape[2:], k, strides, dilations, pads, auto_pad)
    bias = b.cast_(bias, "int32") if bias is not None else b.const(np.zeros(w.shape[0], np.int32))
    return b.conv(xi, wi, bias, strides=strides, dilations=dilations, pads=p, group=group or 1)


def _reshape_neg(b, v, shape):
    """reshape_ that resolves a single -1."""
    if -1 in shape:
        rest = int(np.prod([s for s in shape if s != -1]))
        shape = tuple(v.type.numel // rest if s == -1 else s for s in shape)
    return b.reshape_(v, shape)


@onnx_op("MatMulInteger")
def matmul_integer(b, a, bm, a_zero_point=None, b_zero_point=None):
    """Primitive `qmatmul` with the int32 accumulator as result, when the zero points are constants (per tensor
    for a, per tensor or column for b) and a has rank >= 2; else an int32 matmul of the zero-point-shifted
    operands (cast to int32, sub, matmul)."""
    q = _qmatmul(b, a, None, a_zero_point, bm, None, b_zero_point, None, None)
    return q if q is not None else _matmul_int(b, a, a_zero_point, bm, b_zero_point)


@onnx_op("ConvInteger")
def conv_integer(b, x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
    """Primitive `qconv` with the int32 accumulator as result, when the zero points are constants (per tensor
    for x, per tensor or channel for w); else an int32 conv of the zero-point-shifted operands (cast to int32,
    sub, conv)."""
    geometry = (auto_pad, dilations, group, kernel_shape, pads, strides)
    q = _qconv(b, x, None, x_zero_point, w, None, w_zero_point, None, None, None, geometry)
    return q if q is not None else _conv_int(b, x, x_zero_point, w, w_zero_point, None, *geometry)


def _requantize(b, acc, multiplier, y_zp, out):
    """saturate(round(acc * multiplier + y_zp)) as `out`, computed in float64 (exact for the int32
    accumulator and the multiplier, as ONNX's reference does)."""
    y = b.binary("mul", b.cast_(acc, "float64"), b.cast_(multiplier, "float64"))
    if y_zp is not None:
        y = b.binary("add", y, b.cast_(y_zp, "float64"))
    if not out.is_int:
        raise UnsupportedOpError(f"{b.where}: requantizing to {out} (the y_zero_point type) is not supported; "
                                 f"accepted: integer output types (int8, uint8, ...)")
    info = np.iinfo(out.np)
    return b.cast_(_clip(b, b.round(y), int(info.min), int(info.max)), out)


def _scalar_or(b, v, shape):
    if v.type.numel == 1:
        return b.reshape_(v, ())
    return _reshape_neg(b, v, shape)


@onnx_op("QLinearMatMul")
def qlinear_matmul(b, a, a_scale, a_zero_point, bm, b_scale, b_zero_point, y_scale, y_zero_point=None):
    """Primitive `qmatmul` when the scales and zero points are constants (per tensor, b's per tensor or column)
    and a has rank >= 2. Else an int32 matmul of the shifted operands, then requantize by a_scale * b_scale /
    y_scale (computed in the scale type) plus y_zero_point, rounded and clipped to the output type."""
    q = _qmatmul(b, a, a_scale, a_zero_point, bm, b_scale, b_zero_point, y_scale, y_zero_point)
    if q is not None:
        return q
    acc = _matmul_int(b, a, a_zero_point, bm, b_zero_point)
    sa = _scalar_or(b, a_scale, (-1, 1))
    sb = _scalar_or(b, b_scale, (1, -1))
    mult = b.binary("div", b.binary("mul", sa, b.cast_(sb, sa.dtype)), b.cast_(_scalar_or(b, y_scale, (-1,)),
                                                                            sa.dtype))
    out = y_zero_point.dtype if y_zero_point is not None else a.dtype
    return _requantize(b, acc, mult, y_zero_point, out)


@onnx_op("QLinearConv")
def qlinear_conv(b, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, bias=None, *,
                 auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    """Primitive `qconv` when the scales and zero points are constants (per tensor, w's per tensor or channel).
    Else an int32 conv of the shifted operands plus the int32 bias, then requantize by x_scale * w_scale /
    y_scale (w_scale per output channel when 1-D) plus y_zero_point."""
    geometry = (auto_pad, dilations, group, kernel_shape, pads, strides)
    q = _qconv(b, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, bias, geometry)
    if q is not None:
        return q
    acc = _conv_int(b, x, x_zero_point, w, w_zero_point, bias, *geometry)
    sw = _scalar_or(b, w_scale, (1, -1) + (1,) * (x.rank - 2))
    mult = b.binary("div", b.binary("mul", b.cast_(_scalar_or(b, x_scale, ()), sw.dtype), sw),
                    b.cast_(_scalar_or(b, y_scale, ()), sw.dtype))
    out = y_zero_point.dtype if y_zero_point is not None else x.dtype
    return _requantize(b, acc, mult, y_zero_point, out)


# -- the quantized primitives: constant quantization parameters ----------------------------------------------
def _const_params(scale, zp, n):
    """(float32 scales, int32 offsets) as 1-D arrays of length 1 or n when ``scale`` (None: 1.0, for the integer
    ops) and ``zp`` (None: 0) are constants of that many elements (a scalar or a vector); None otherwise."""
    if (scale is not None and not scale.is_const) or (zp is not None and not zp.is_const):
        return None
    if scale is not None and (scale.dtype.name != "float32" or scale.rank > 1):
        return None
    z = None if zp is None else np.asarray(zp.const).astype(np.int32).reshape(-1)
    s = np.asarray(scale.const, np.float32).reshape(-1) if scale is not None else \
        np.ones(1 if z is None else z.size, np.float32)
    z = np.zeros(s.shape, np.int32) if z is None else z
    if (zp is not None and zp.rank > 1) or s.size not in (1, n) or z.size != s.size:
        return None
    return (s, z) if np.all(np.isfinite(s) & (s > 0)) else None


def _int8_weights(b, w, zp):
    """uint8 weights and their offsets as int8 (both shifted by -128: w - zp is unchanged)."""
    if w.dtype.name != "uint8":
        return w, zp
    w8 = b.cast_(b.binary("sub", b.cast_(w, "int32"), b.const(np.int32(128))), "int8")
    return w8, (zp - 128).astype(np.int32)


def _qout(y_scale, y_zp, fallback_dtype):
    """(out_scale, out_offset, out_dtype) of a requantized result: y_scale and y_zp constant scalars."""
    p = _const_params(y_scale, y_zp, 1)
    if p is None:
        return None
    out = y_zp.dtype.name if y_zp is not None else fallback_dtype
    return (float(p[0][0]), int(p[1][0]), out) if out in QDTYPES else None


def _qconv(b, x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias, geometry):
    """`qconv` for QLinearConv (scales given) or ConvInteger (scales None: the int32 accumulator), or None when
    the parameters are not constants of the shapes qconv takes."""
    auto_pad, dilations, group, kernel_shape, pads, strides = geometry
    if x.dtype.name not in ("int8", "uint8") or w.dtype.name not in ("int8", "uint8") or x.rank < 3 or \
            w.rank != x.rank:
        return None
    xp, wp = _const_params(x_scale, x_zp, 1), _const_params(w_scale, w_zp, w.shape[0])
    out = (1.0, 0, "int32") if x_scale is None else _qout(y_scale, y_zp, x.dtype.name)
    if xp is None or wp is None or out is None or (bias is not None and (bias.dtype.name != "int32" or
                                                                          bias.shape != (w.shape[0],))):
        return None
    w8, w_off = _int8_weights(b, w, wp[1])
    n = x.rank - 2
    k = list(kernel_shape or w.shape[2:])
    strides = list(strides or [1] * n)
    dilations = list(dilations or [1] * n)
    p = conv_pads(b, x.shape[2:], k, strides, dilations, pads, auto_pad)
    bias = bias if bias is not None else b.const(np.zeros(w.shape[0], np.int32))
    return b.qconv(x, w8, bias, b.const(wp[0]), b.const(w_off), strides=strides, dilations=dilations, pads=p,
                   group=group or 1, x_scale=float(xp[0][0]), x_offset=int(xp[1][0]), out_scale=out[0],
                   out_offset=out[1], out_dtype=out[2])


def _qmatmul(b, a, a_scale, a_zp, bm, b_scale, b_zp, y_scale, y_zp):
    """`qmatmul` for QLinearMatMul (scales given) or MatMulInteger (scales None), or None (see _qconv)."""
    if a.dtype.name not in ("int8", "uint8") or bm.dtype.name not in ("int8", "uint8") or a.rank < 2 or bm.rank < 2:
        return None
    ap, bp = _const_params(a_scale, a_zp, 1), _const_params(b_scale, b_zp, bm.shape[-1])
    out = (1.0, 0, "int32") if a_scale is None else _qout(y_scale, y_zp, a.dtype.name)
    if ap is None or bp is None or out is None:
        return None
    batch = b.broadcast_shapes(a.shape[:-2], bm.shape[:-2])
    x = b.broadcast_to(a, batch + a.shape[-2:])
    y = b.broadcast_to(bm, batch + bm.shape[-2:])
    bias = b.const(np.zeros(bm.shape[-1], np.int32))
    return b.qmatmul(x, y, bias, b.const(bp[0]), b.const(bp[1]), a_scale=float(ap[0][0]), a_offset=int(ap[1][0]),
                     out_scale=out[0], out_offset=out[1], out_dtype=out[2])
