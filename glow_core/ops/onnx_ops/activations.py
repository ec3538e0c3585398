"""Activations: Relu and its relatives, Clip, Gelu/Mish/Swish, and Softmax/LogSoftmax/Hardmax.

Elementwise compositions on float16/bfloat16 are computed in float32 and rounded once at the end; the softmax
family computes in the input's dtype step by step (each primitive rounds), as the ONNX reference does.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ...errors import ShapeError
from ..registry import onnx_op

_LOW = ("float16", "bfloat16")


def _c(b, value, like):
    """A scalar constant of ``like``'s dtype (broadcast by ``b.binary``)."""
    return b.scalar_like(value, like, shape=())


def _float_op(body):
    """Lowering running ``body(b, x, **attrs)`` in float32 for low floats (float64 for ints), cast back."""
    @functools.wraps(body)  # the importer reads the attributes an op takes from its lowering's signature
    def lower(b, x, **attrs):
        if x.dtype.is_bool:
            raise ShapeError(f"{b.where}: bool input is not accepted; accepted: float and integer dtypes")
        w = b.cast_(x, "float32") if x.dtype.name in _LOW else (b.cast_(x, "float64") if x.dtype.is_int else x)
        return b.cast_(body(b, w, **attrs), x.dtype)
    return lower


def _mul(b, x, k):
    return x if k == 1.0 else b.binary("mul", x, _c(b, k, x))


def _expm1(b, x):
    return b.binary("sub", b.exp(x), _c(b, 1, x))


def _clamp01(b, x):
    return b.binary("min", b.binary("max", x, _c(b, 0, x)), _c(b, 1, x))


@onnx_op("Relu")
def relu(b, x):
    """max(x, 0)."""
    return b.binary("max", x, _c(b, 0, x))


@onnx_op("LeakyRelu")
@_float_op
def leaky_relu(b, x, *, alpha=0.01):
    """select(x < 0, alpha * x, x)."""
    return b.where_(b.binary("lt", x, _c(b, 0, x)), _mul(b, x, alpha), x)


@onnx_op("PRelu")
def prelu(b, x, slope):
    """select(x < 0, slope * x, x), slope broadcast to x."""
    slope = b.broadcast_to(b.cast_(slope, x.dtype), x.shape)
    return b.select(b.binary("lt", x, _c(b, 0, x)), b.mul(slope, x), x)


@onnx_op("Elu")
@_float_op
def elu(b, x, *, alpha=1.0):
    """select(x < 0, alpha * (exp(x) - 1), x)."""
    return b.where_(b.binary("lt", x, _c(b, 0, x)), _mul(b, _expm1(b, x), alpha), x)


@onnx_op("Selu")
@_float_op
def selu(b, x, *, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    """gamma * select(x <= 0, alpha * (exp(x) - 1), x)."""
    return _mul(b, b.where_(b.binary("le", x, _c(b, 0, x)), _mul(b, _expm1(b, x), alpha), x), gamma)


@onnx_op("Celu")
@_float_op
def celu(b, x, *, alpha=1.0):
    """max(x, 0) + min(0, alpha * (exp(x / alpha) - 1))."""
    if not alpha:
        raise ShapeError(f"{b.where}: alpha = 0 divides by zero; a non-zero alpha is accepted")
    neg = _mul(b, _expm1(b, _mul(b, x, 1.0 / alpha)), alpha)
    return b.add(b.binary("max", x, _c(b, 0, x)), b.binary("min", neg, _c(b, 0, x)))


@onnx_op("ThresholdedRelu")
@_float_op
def thresholded_relu(b, x, *, alpha=1.0):
    """select(x > alpha, x, 0)."""
    return b.where_(b.binary("gt", x, _c(b, alpha, x)), x, _c(b, 0, x))


@onnx_op("HardSigmoid")
@_float_op
def hard_sigmoid(b, x, *, alpha=0.2, beta=0.5):
    """min(max(alpha * x + beta, 0), 1)."""
    return _clamp01(b, b.binary("add", _mul(b, x, alpha), _c(b, beta, x)))


@onnx_op("HardSwish")
@_float_op
def hard_swish(b, x):
    """x * min(max(x / 6 + 0.5, 0), 1)."""
    return b.mul(x, _clamp01(b, b.binary("add", _mul(b, x, 1.0 / 6.0), _c(b, 0.5, x))))


def _softplus(b, x):
    # max(x, 0) + log(1 + exp(-|x|)): never overflows
    t = b.log(b.binary("add", b.exp(b.neg(b.abs(x))), _c(b, 1, x)))
    return b.add(b.binary("max", x, _c(b, 0, x)), t)


@onnx_op("Softplus")
@_float_op
def softplus(b, x):
    """log(1 + exp(x)) as max(x, 0) + log(1 + exp(-|x|))."""
    return _softplus(b, x)


@onnx_op("Softsign")
@_float_op
def softsign(b, x):
    """x / (1 + |x|)."""
    return b.div(x, b.binary("add", b.abs(x), _c(b, 1, x)))


@onnx_op("Shrink")
@_float_op
def shrink(b, x, *, bias=0.0, lambd=0.5):
    """select(x < -lambd, x + bias, select(x > lambd, x - bias, 0))."""
    hi = b.where_(b.binary("gt", x, _c(b, lambd, x)), b.binary("sub", x, _c(b, bias, x)), _c(b, 0, x))
    return b.where_(b.binary("lt", x, _c(b, -lambd, x)), b.binary("add", x, _c(b, bias, x)), hi)


@onnx_op("Gelu")
@_float_op
def gelu(b, x, *, approximate="none"):
    """(0.5 * x) * (1 + erf(x / sqrt 2)); approximate='tanh': (0.5 * x) * (1 + tanh(sqrt(2/pi) * (x + 0.044715
    x^3)))."""
    if approximate == "tanh":
        inner = b.add(x, _mul(b, b.mul(b.mul(x, x), x), 0.044715))
        t = b.tanh(_mul(b, inner, math.sqrt(2.0 / math.pi)))
    elif approximate in ("none", None):
        t = b.erf(_mul(b, x, 1.0 / math.sqrt(2.0)))
    else:
        raise ShapeError(f"{b.where}: approximate '{approximate}' is not one of 'none', 'tanh'")
    return b.mul(_mul(b, x, 0.5), b.binary("add", t, _c(b, 1, t)))  # halved first: no overflow for x near max


@onnx_op("Mish")
@_float_op
def mish(b, x):
    """x * tanh(softplus(x))."""
    return b.mul(x, b.tanh(_softplus(b, x)))


@onnx_op("Swish")
@_float_op
def swish(b, x, *, alpha=1.0):
    """x * sigmoid(alpha * x)."""
    return b.mul(x, b.sigmoid(_mul(b, x, alpha)))


@onnx_op("Clip")
def clip(b, x, lo=None, hi=None, **attrs):
    """min(max(x, lo), hi); bounds are inputs from opset 11, attributes min/max before."""
    if b.opset < 11:
        lo = None if attrs.get("min") is None else _c(b, attrs["min"], x)
        hi = None if attrs.get("max") is None else _c(b, attrs["max"], x)
    for v in (lo, hi):
        if v is not None and (v.dtype != x.dtype or v.type.numel != 1):
            raise ShapeError(f"{b.where}: bounds must be scalars of the input's dtype {x.dtype}, got {v.type}")
    y = x
    if lo is not None:
        y = b.binary("max", y, b.reshape_(lo, ()))
    if hi is not None:
        y = b.binary("min", y, b.reshape_(hi, ()))
    return y


# -- softmax family -------------------------------------------------------------------------------------
def _per_axis(body):
    """Apply ``body(b, x, axis)``: before opset 13 on x flattened to 2-D at ``axis`` (axis 1), else per axis."""
    def lower(b, x, *, axis=None):
        if axis is None:
            axis = 1 if b.opset < 13 else -1
        ax = b.norm_axis(axis, x.rank)
        if b.opset >= 13:
            return body(b, x, ax)
        lead = int(np.prod(x.shape[:ax]))
        y = body(b, b.reshape_(x, (lead, int(np.prod(x.shape[ax:])))), 1)
        return b.reshape_(y, x.shape)
    lower.__doc__ = body.__doc__ + " Before opset 13 the input is flattened to 2-D at `axis`."
    return lower


def _shifted(b, x, axis):
    # in x's own dtype: each primitive rounds to it, as the ONNX reference does for float16/bfloat16
    return b.binary("sub", x, b.reduce("reduce_max", x, [axis], True))


@onnx_op("Softmax")
@_per_axis
def softmax(b, x, axis):
    """e = exp(x - max(x)); e / sum(e) along axis."""
    e = b.exp(_shifted(b, x, axis))
    return b.binary("div", e, b.reduce("reduce_sum", e, [axis], True))


@onnx_op("LogSoftmax")
@_per_axis
def log_softmax(b, x, axis):
    """s = x - max(x); s - log(sum(exp(s))) along axis."""
    s = _shifted(b, x, axis)
    return b.binary("sub", s, b.log(b.reduce("reduce_sum", b.exp(s), [axis], True)))


@onnx_op("Hardmax")
@_per_axis
def hardmax(b, x, axis):
    """1 where the index equals argmax along axis (first maximum), else 0: eq with an iota constant, cast."""
    if x.shape[axis] == 0:  # an empty axis: the output, of x's shape, is empty too
        return b.const(np.zeros(x.shape, dtype=x.dtype.np))
    idx = b.argmax(x, axis=axis, keepdims=1)
    iota = b.const(np.arange(x.shape[axis], dtype=np.int64).reshape(
        [x.shape[axis] if i == axis else 1 for i in range(x.rank)]))
    return b.cast_(b.binary("eq", idx, iota), x.dtype)
