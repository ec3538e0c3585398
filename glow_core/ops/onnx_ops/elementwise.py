"""Elementwise ONNX ops that map to one primitive: arithmetic, comparisons, logic, unary math."""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..registry import onnx_op

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow",
           "Equal": "eq", "Less": "lt", "LessOrEqual": "le", "Greater": "gt", "GreaterOrEqual": "ge",
           "And": "and", "Or": "or", "Xor": "xor",
           "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}


def _legacy_broadcast(b, x, y, broadcast, axis):
    """Before opset 7, broadcast=1 with `axis` aligns y's dims with x's starting at `axis`."""
    if broadcast and axis is not None and y.rank:
        ax = b.norm_axis(axis, x.rank)
        if ax + y.rank > x.rank:
            raise ShapeError(f"{b.where}: operand B {y.shape} does not fit A {x.shape} from axis {axis}")
        y = b.reshape_(y, y.shape + (1,) * (x.rank - ax - y.rank))
    return y


#: Float powers by these constant exponents lower to products (x * x, (x * x) * x): what exporters write for
#: squares and cubes (T5's and LLaMA's RMS norms, GPT-2's tanh GELU), which every backend then computes, fuses and
#: vectorizes as multiplications (the GELU patterns of glow_core.fusion match the cube as products).
POW_AS_PRODUCTS = (2, 3)


def _splat_exponent(b, x, y):
    """The exponent of ``pow(x, y)`` from POW_AS_PRODUCTS when ``y`` is a constant of equal elements that does
    not widen x's shape and x is a float; else None."""
    if not (x.dtype.is_float and y.is_const and y.const.size) or b.broadcast_shapes(x.shape, y.shape) != x.shape:
        return None
    flat = np.asarray(y.const).reshape(-1)
    k = flat[0]
    if not np.all(flat == k) or not np.isfinite(k) or float(k) not in POW_AS_PRODUCTS:
        return None
    return int(k)


def _binary(prim):
    def lower(b, x, y, *, broadcast=None, axis=None, **_):
        y = _legacy_broadcast(b, x, y, broadcast, axis)
        if prim == "pow" and (k := _splat_exponent(b, x, y)) is not None:
            sq = b.mul(x, x)
            return sq if k == 2 else b.mul(sq, x)
        if prim == "pow" and x.dtype != y.dtype:
            if x.dtype.is_int and y.dtype.is_float:  # as numpy: in float64, truncated back to the base type
                return b.cast_(b.binary("pow", b.cast_(x, "float64"), b.cast_(y, "float64")), x.dtype)
            y = b.cast_(y, x.dtype)
        return b.binary(prim, x, y)
    lower.__doc__ = (f"Broadcast both operands (numpy rules; before opset 7 `axis` aligns B), then primitive "
                     f"`{prim}`." + (" Pow with mixed types: an integer base with a float exponent is computed "
                                     "in float64 and cast back; otherwise the exponent is cast to the base type. "
                                     "A float base with a constant exponent of 2 or 3 (every element) is "
                                     "`mul(x, x)` or `mul(mul(x, x), x)`."
                                     if prim == "pow" else ""))
    return lower


for _op, _prim in _BINARY.items():
    onnx_op(_op)(_binary(_prim))

_UNARY = {"Neg": "neg", "Abs": "abs", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
          "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan",
          "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
          "Tanh": "tanh", "Sigmoid": "sigmoid", "Erf": "erf", "Floor": "floor", "Ceil": "ceil", "Round": "round",
          "Sign": "sign", "IsNaN": "isnan", "Not": "not", "BitwiseNot": "bitwise_not"}


def _unary(prim):
    def lower(b, x, **_):
        return b.unary(prim, x)
    lower.__doc__ = f"Primitive `{prim}`."
    return lower


for _op, _prim in _UNARY.items():
    onnx_op(_op)(_unary(_prim))
