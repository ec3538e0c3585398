"""Elementwise ONNX ops: arithmetic, comparisons, logic, activations."""
from __future__ import annotations

from ..registry import onnx_op

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow",
           "Equal": "eq", "Less": "lt", "LessOrEqual": "le", "Greater": "gt", "GreaterOrEqual": "ge",
           "And": "and", "Or": "or", "Xor": "xor",
           "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}


def _binary(prim):
    def lower(b, x, y, **_):
        if prim == "pow" and x.dtype != y.dtype:
            y = b.cast_(y, x.dtype)
        return b.binary(prim, x, y)
    lower.__doc__ = f"Broadcast both operands, then primitive `{prim}`."
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
