"""Elementwise ONNX ops that map to one primitive: arithmetic, comparisons, logic, unary math."""
from __future__ import annotations

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


def _binary(prim):
    def lower(b, x, y, *, broadcast=None, axis=None, **_):
        y = _legacy_broadcast(b, x, y, broadcast, axis)
        if prim == "pow" and x.dtype != y.dtype:
            if x.dtype.is_int and y.dtype.is_float:  # as numpy: in float64, truncated back to the base type
                return b.cast_(b.binary("pow", b.cast_(x, "float64"), b.cast_(y, "float64")), x.dtype)
            y = b.cast_(y, x.dtype)
        return b.binary(prim, x, y)
    lower.__doc__ = (f"Broadcast both operands (numpy rules; before opset 7 `axis` aligns B), then primitive "
                     f"`{prim}`." + (" Pow with mixed types: an integer base with a float exponent is computed "
                                     "in float64 and cast back; otherwise the exponent is cast to the base type."
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
