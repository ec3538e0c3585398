"""Elementwise math beyond one primitive: variadic Max/Min/Sum/Mean, Mod, BitShift, IsInf; and Det."""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..registry import extended_op, onnx_op


def _variadic(prim):
    def lower(b, *xs):
        xs = [x for x in xs if x is not None]
        if not xs:
            raise ShapeError(f"{b.where}: needs at least one input")
        y = xs[0]
        for x in xs[1:]:
            y = b.binary(prim, y, x)
        return y
    lower.__doc__ = f"Left fold of primitive `{prim}` over the numpy-broadcast inputs."
    return lower


onnx_op("Max")(_variadic("max"))
onnx_op("Min")(_variadic("min"))
onnx_op("Sum")(_variadic("add"))


@onnx_op("Mean")
def mean(b, *xs):
    """Sum of the inputs (left fold of `add`, in float32 for float16/bfloat16) divided by their count."""
    xs = [x for x in xs if x is not None]
    if not xs:
        raise ShapeError(f"{b.where}: needs at least one input")
    low = xs[0].dtype.name in ("float16", "bfloat16")
    y = _variadic("add")(b, *[b.cast_(x, "float32") if low else x for x in xs])
    return b.cast_(b.binary("div", y, b.scalar_like(len(xs), y, shape=())), xs[0].dtype)


@onnx_op("Mod")
def mod(b, x, y, *, fmod=0):
    """Primitive `mod` on the broadcast operands (fmod=1: sign of the dividend, 0: sign of the divisor)."""
    if x.dtype != y.dtype:
        raise ShapeError(f"{b.where}: operand dtypes differ: {x.dtype} and {y.dtype}")
    return b.binary("mod", x, y, fmod=int(fmod))


_UNSIGNED_OF = {"int8": "uint8", "int16": "uint16", "int32": "uint32", "int64": "uint64"}


@onnx_op("BitShift")
def bit_shift(b, x, y, *, direction=None):
    """Primitives `shl`/`shr` on the bits as unsigned (a negative or too-large shift gives 0); a signed right
    shift is arithmetic: negative x is shifted as ~x and complemented back (sign bits fill, -1 at most)."""
    if direction not in ("LEFT", "RIGHT"):
        raise ShapeError(f"{b.where}: direction {direction!r} is not one of 'LEFT', 'RIGHT'")
    if x.dtype != y.dtype or not x.dtype.is_int:
        raise ShapeError(f"{b.where}: operands must share one integer dtype, got {x.dtype} and {y.dtype}")
    x, y = b.broadcast_all(x, y)
    prim = "shl" if direction == "LEFT" else "shr"
    u = _UNSIGNED_OF.get(x.dtype.name)
    if u is None:
        return b.emit(prim, x, y)
    yu = b.bitcast(y, to=u)
    if direction == "LEFT":
        return b.bitcast(b.shl(b.bitcast(x, to=u), yu), to=x.dtype.name)
    neg = b.lt(x, b.scalar_like(0, x))
    m = b.select(neg, b.bitwise_not(x), x)
    r = b.bitcast(b.shr(b.bitcast(m, to=u), yu), to=x.dtype.name)
    return b.select(neg, b.bitwise_not(r), r)


@onnx_op("IsInf")
def is_inf(b, x, *, detect_negative=1, detect_positive=1):
    """Primitive `isinf`, or `eq` with +inf / -inf when only one sign is detected."""
    if not x.dtype.is_float or not (detect_negative or detect_positive):
        return b.const(np.zeros(x.shape, dtype=bool))
    if detect_negative and detect_positive:
        return b.isinf(x)
    if detect_positive:
        return b.eq(x, b.scalar_like(np.inf, x))
    return b.eq(x, b.scalar_like(-np.inf, x))


def _det_types(b, x):
    """x's dtype, x's shape without its last two (square) axes."""
    if x.rank < 2 or x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"{b.where}: input {x.shape} must be [*, M, M] (square matrices)")
    return [x.type.with_shape(x.shape[:-2])]


@extended_op("Det", reason="determinant needs an LU factorisation with data-dependent pivoting, which has no "
                           "loop-free decomposition into the primitive set", shape_rule=_det_types)
def det(x):
    """numpy.linalg.det over the last two axes, computed in float64 and rounded to x's dtype."""
    return np.asarray(np.linalg.det(x.astype(np.float64))).astype(x.dtype)
