"""Elementwise primitives: unary and binary math, comparisons, logic, bit operations, mod and select.

One table line per primitive: accepted dtypes, output dtype (None: the operand's), reference kernel,
conformance tolerance class and documentation. Operands have identical shape and dtype (the lowering
inserts ``broadcast``); every primitive here is data-parallel and may run in place.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import GlowError
from ...types import FLOATS, INTS, NUMERIC, UNSIGNED, TensorType
from ..registry import primitive
from .checks import BOOL, accept, fail, same


def _unary_rule(name, allowed, out=None):
    def rule(ts):
        accept(name, ts[0], allowed)
        return [TensorType(out or ts[0].dtype, ts[0].shape)]
    return rule


def _binary_rule(name, allowed, out=None):
    def rule(ts):
        same(name, ts)
        accept(name, ts[0], allowed)
        return [TensorType(out or ts[0].dtype, ts[0].shape)]
    return rule


# -- reference kernels that are more than one numpy ufunc ------------------------------------------------
def sigmoid(x):
    e = np.exp(-np.abs(x))  # split by sign so that exp never overflows
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x):
    return _erf(x).astype(x.dtype) if x.size else x.copy()


def div(a, b):
    if a.dtype.kind in "iu":
        if np.any(b == 0):
            raise GlowError("div: integer division by zero")
        if a.dtype.kind == "u":
            return (a // b).astype(a.dtype)
        # |a| // |b| in uint64 (|int64 min| does not fit int64), negated (wrapping) when the signs differ
        q = np.abs(a.astype(np.int64)).astype(np.uint64) // np.abs(b.astype(np.int64)).astype(np.uint64)
        return np.where((a < 0) != (b < 0), -q, q).astype(np.int64).astype(a.dtype)
    return np.divide(a, b)


def pow_(a, b):
    if a.dtype.kind in "iu":
        return np.power(a.astype(np.int64), np.abs(b.astype(np.int64))).astype(a.dtype)
    return np.power(a, b)


def _shift(a, b, left):
    bits = a.dtype.itemsize * 8
    big = b >= bits
    bs = np.where(big, 0, b).astype(a.dtype)
    r = np.left_shift(a, bs) if left else np.right_shift(a, bs)
    return np.where(big, np.zeros_like(a), r).astype(a.dtype)


def shl(a, b):
    return _shift(a, b, True)


def shr(a, b):
    return _shift(a, b, False)


def mod(a, b, fmod=0):
    if a.dtype.kind in "iu" and np.any(b == 0):
        raise GlowError("mod: integer remainder by zero")
    return np.fmod(a, b) if fmod else np.mod(a, b)


def select(cond, a, b):
    return np.where(cond, a, b)


# IEEE-exact float ops: correctly rounded (tolerance class elementwise-exact); the rest are transcendental.
EXACT, TRANSCENDENTAL, COMPARE = "elementwise-exact", "elementwise", "compare"

UNARY = {
    # name: (accepted dtypes, output dtype or None, reference kernel, tolerance class, doc)
    "neg": (NUMERIC, None, np.negative, EXACT, "Negation, -x (wraps for the most negative integer)."),
    "abs": (NUMERIC, None, np.abs, EXACT, "Absolute value |x| (wraps for the most negative integer)."),
    "sign": (NUMERIC, None, np.sign, EXACT, "-1, 0 or 1 by the sign of x; NaN stays NaN."),
    "exp": (FLOATS, None, np.exp, TRANSCENDENTAL, "e**x."),
    "log": (FLOATS, None, np.log, TRANSCENDENTAL, "Natural logarithm; log(0) = -inf, log(x<0) = NaN."),
    "sqrt": (FLOATS, None, np.sqrt, EXACT, "Square root; sqrt(x<0) = NaN."),
    "reciprocal": (FLOATS, None, np.reciprocal, EXACT, "1/x."),
    "sin": (FLOATS, None, np.sin, TRANSCENDENTAL, "Sine."),
    "cos": (FLOATS, None, np.cos, TRANSCENDENTAL, "Cosine."),
    "tan": (FLOATS, None, np.tan, TRANSCENDENTAL, "Tangent."),
    "asin": (FLOATS, None, np.arcsin, TRANSCENDENTAL, "Arc sine."),
    "acos": (FLOATS, None, np.arccos, TRANSCENDENTAL, "Arc cosine."),
    "atan": (FLOATS, None, np.arctan, TRANSCENDENTAL, "Arc tangent."),
    "sinh": (FLOATS, None, np.sinh, TRANSCENDENTAL, "Hyperbolic sine."),
    "cosh": (FLOATS, None, np.cosh, TRANSCENDENTAL, "Hyperbolic cosine."),
    "asinh": (FLOATS, None, np.arcsinh, TRANSCENDENTAL, "Inverse hyperbolic sine."),
    "acosh": (FLOATS, None, np.arccosh, TRANSCENDENTAL, "Inverse hyperbolic cosine."),
    "atanh": (FLOATS, None, np.arctanh, TRANSCENDENTAL, "Inverse hyperbolic tangent."),
    "tanh": (FLOATS, None, np.tanh, TRANSCENDENTAL, "Hyperbolic tangent."),
    "sigmoid": (FLOATS, None, sigmoid, TRANSCENDENTAL, "Logistic function 1/(1+exp(-x))."),
    "erf": (FLOATS, None, erf, TRANSCENDENTAL, "Gauss error function."),
    "floor": (FLOATS, None, np.floor, EXACT, "Round toward -inf."),
    "ceil": (FLOATS, None, np.ceil, EXACT, "Round toward +inf."),
    "round": (FLOATS, None, np.round, EXACT, "Round to nearest, ties to even (IEEE roundTiesToEven)."),
    "isnan": (FLOATS, "bool", np.isnan, COMPARE, "True where x is NaN."),
    "isinf": (FLOATS, "bool", np.isinf, COMPARE, "True where x is +inf or -inf."),
    "not": (BOOL, None, np.logical_not, COMPARE, "Logical negation."),
    "bitwise_not": (INTS, None, np.invert, COMPARE, "Bitwise complement."),
}

BINARY = {
    "add": (NUMERIC, None, np.add, EXACT, "a + b (integers wrap)."),
    "sub": (NUMERIC, None, np.subtract, EXACT, "a - b (integers wrap)."),
    "mul": (NUMERIC, None, np.multiply, EXACT, "a * b (integers wrap)."),
    "div": (NUMERIC, None, div, EXACT, "a / b; integer division truncates toward zero; division by zero is "
                                       "undefined for integers."),
    "pow": (NUMERIC, None, pow_, TRANSCENDENTAL, "a ** b."),
    "max": (NUMERIC, None, np.maximum, EXACT, "Elementwise maximum; NaN if either operand is NaN."),
    "min": (NUMERIC, None, np.minimum, EXACT, "Elementwise minimum; NaN if either operand is NaN."),
    "and": (BOOL, None, np.logical_and, COMPARE, "Logical and."),
    "or": (BOOL, None, np.logical_or, COMPARE, "Logical or."),
    "xor": (BOOL, None, np.logical_xor, COMPARE, "Logical xor."),
    "bitwise_and": (INTS, None, np.bitwise_and, COMPARE, "Bitwise and."),
    "bitwise_or": (INTS, None, np.bitwise_or, COMPARE, "Bitwise or."),
    "bitwise_xor": (INTS, None, np.bitwise_xor, COMPARE, "Bitwise xor."),
    "shl": (UNSIGNED, None, shl, COMPARE, "a << b; shifts of the bit width or more give 0."),
    "shr": (UNSIGNED, None, shr, COMPARE, "a >> b (logical); shifts of the bit width or more give 0."),
    "eq": (NUMERIC + BOOL, "bool", np.equal, COMPARE, "a == b."),
    "lt": (NUMERIC, "bool", np.less, COMPARE, "a < b."),
    "le": (NUMERIC, "bool", np.less_equal, COMPARE, "a <= b."),
    "gt": (NUMERIC, "bool", np.greater, COMPARE, "a > b."),
    "ge": (NUMERIC, "bool", np.greater_equal, COMPARE, "a >= b."),
}

for _n, (_dt, _out, _kernel, _tol, _doc) in UNARY.items():
    primitive(_n, "elementwise", ("x",), _dt, _unary_rule(_n, _dt, _out), _kernel, _doc, tolerance=_tol,
              elementwise=True, exact=_tol == COMPARE)
for _n, (_dt, _out, _kernel, _tol, _doc) in BINARY.items():
    primitive(_n, "elementwise", ("a", "b"), _dt, _binary_rule(_n, _dt, _out), _kernel, _doc, tolerance=_tol,
              elementwise=True, exact=_tol == COMPARE)

primitive("mod", "elementwise", ("a", "b"), NUMERIC, lambda ts, fmod: _binary_rule("mod", NUMERIC)(ts), mod,
          "Remainder. fmod=0: the sign of the divisor (Python %); fmod=1: the sign of the dividend (C fmod). "
          "Integer remainder by zero is undefined.", attrs={"fmod": 0}, tolerance=TRANSCENDENTAL, elementwise=True)


def _select_rule(ts):
    c, a, b = ts
    accept("select", c, BOOL)
    same("select", [a, b])
    if c.shape != a.shape:
        fail("select", f"condition shape {c.shape} must equal operand shape {a.shape}")
    return [a]


primitive("select", "elementwise", ("cond", "a", "b"), BOOL, _select_rule, select, "cond ? a : b, elementwise.",
          tolerance="select", elementwise=True, movement=True, exact=True)
