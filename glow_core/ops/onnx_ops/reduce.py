"""Reductions: Reduce*, ArgMax/ArgMin, and the cumulative scans CumSum/CumProd."""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..registry import onnx_op

#: float16/bfloat16 compositions are computed in float32 and rounded once at the end.
_LOW = ("float16", "bfloat16")


def _wide(b, x, ints=True):
    """x in the type a multi-step composition computes in: float32 for low floats, float64 for ints
    (unless ``ints`` is false: integer arithmetic that wraps like the ONNX reference stays integer)."""
    if x.dtype.name in _LOW:
        return b.cast_(x, "float32")
    if x.dtype.is_int and ints:
        return b.cast_(x, "float64")
    return x


def _axes(b, x, axes_in, axes_attr, noop_with_empty_axes):
    """The sorted non-negative axes to reduce; [] when none are given and noop_with_empty_axes is set
    (composite reductions then still apply their elementwise steps, e.g. ReduceSumSquare squares)."""
    axes = b.value_of(axes_in, "axes") if axes_in is not None else axes_attr
    axes = [] if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    if not axes:
        return [] if noop_with_empty_axes else list(range(x.rank))
    out = sorted({b.norm_axis(a, x.rank, "axes entry") for a in axes})
    if len(out) != len(axes):
        raise ShapeError(f"{b.where}: axes {axes} name the same axis twice")
    return out


def _reducer(build):
    """Register-ready lowering: resolve axes (attribute or input), then ``build(b, x, axes, keepdims)``."""
    def lower(b, x, axes_in=None, *, axes=None, keepdims=1, noop_with_empty_axes=0):
        return build(b, x, _axes(b, x, axes_in, axes, noop_with_empty_axes), keepdims)
    lower.__doc__ = build.__doc__
    return lower


def _simple(prim):
    def build(b, x, axes, keepdims):
        return b.reduce(prim, x, axes, keepdims) if axes else x
    build.__doc__ = f"Primitive `{prim}` over the axes (attribute or input, per opset)."
    return build


for _op, _prim in {"ReduceSum": "reduce_sum", "ReduceProd": "reduce_prod",
                   "ReduceMax": "reduce_max", "ReduceMin": "reduce_min"}.items():
    onnx_op(_op, const_inputs=(1,))(_reducer(_simple(_prim)))


@onnx_op("ReduceMean", const_inputs=(1,))
@_reducer
def reduce_mean(b, x, axes, keepdims):
    """reduce_sum divided by the number of reduced elements (integers: truncating division)."""
    n = int(np.prod([x.shape[a] for a in axes]))
    if x.dtype.is_int:
        s = b.reduce("reduce_sum", x, axes, keepdims)
        return b.binary("div", s, b.scalar_like(n, s, shape=()))
    s = b.reduce("reduce_sum", _wide(b, x), axes, keepdims)
    return b.cast_(b.binary("div", s, b.scalar_like(n, s, shape=())), x.dtype)


@onnx_op("ReduceL1", const_inputs=(1,))
@_reducer
def reduce_l1(b, x, axes, keepdims):
    """reduce_sum of abs."""
    return b.reduce("reduce_sum", b.abs(x), axes, keepdims)


@onnx_op("ReduceSumSquare", const_inputs=(1,))
@_reducer
def reduce_sum_square(b, x, axes, keepdims):
    """reduce_sum of x * x (low floats computed in float32, cast back)."""
    w = _wide(b, x, ints=False)
    return b.cast_(b.reduce("reduce_sum", b.mul(w, w), axes, keepdims), x.dtype)


@onnx_op("ReduceL2", const_inputs=(1,))
@_reducer
def reduce_l2(b, x, axes, keepdims):
    """sqrt of reduce_sum of x * x, computed in float64 for float32 (its squares underflow below 1e-19 and overflow
    above 2e19, while the norm itself is representable), in float32 for float16 / bfloat16, cast back."""
    w = b.cast_(x, "float64") if x.dtype.name == "float32" else _wide(b, x)
    return b.cast_(b.sqrt(b.reduce("reduce_sum", b.mul(w, w), axes, keepdims)), x.dtype)


@onnx_op("ReduceLogSum", const_inputs=(1,))
@_reducer
def reduce_log_sum(b, x, axes, keepdims):
    """log of reduce_sum (computed in float32/float64, cast back)."""
    return b.cast_(b.log(b.reduce("reduce_sum", _wide(b, x), axes, keepdims)), x.dtype)


@onnx_op("ReduceLogSumExp", const_inputs=(1,))
@_reducer
def reduce_log_sum_exp(b, x, axes, keepdims):
    """m + log(reduce_sum(exp(x - m))) with m the (finite) maximum, for range safety."""
    w = _wide(b, x)
    m = b.reduce("reduce_max", w, axes, True)
    m = b.select(b.isinf(m), b.scalar_like(0, m), m)  # all -inf (or empty) rows: shift by 0
    s = b.reduce("reduce_sum", b.exp(b.binary("sub", w, m)), axes, True)
    y = b.add(b.log(s), m)
    if not keepdims:
        y = b.reshape_(y, [d for i, d in enumerate(x.shape) if i not in axes])
    return b.cast_(y, x.dtype)


def _arg(prim):
    def lower(b, x, *, axis=0, keepdims=1, select_last_index=0):
        if x.dtype.is_bool:
            x = b.cast_(x, "uint8")
        ax = b.norm_axis(axis, x.rank)
        out = tuple(1 if i == ax else d for i, d in enumerate(x.shape) if keepdims or i != ax)
        if x.rank and x.shape[ax] == 0 and 0 in out:  # an empty axis, and no index to return either
            return b.const(np.zeros(out, np.int64))
        return b.emit(prim, x, axis=ax, keepdims=int(bool(keepdims)), select_last_index=int(bool(select_last_index)))
    lower.__doc__ = f"Primitive `{prim}` (bool input compared as uint8)."
    return lower


onnx_op("ArgMax")(_arg("argmax"))
onnx_op("ArgMin")(_arg("argmin"))


def _flip(b, x, axis):
    """x reversed along ``axis`` (a slice with step -1)."""
    n = x.shape[axis]
    starts = [n - 1 if i == axis else 0 for i in range(x.rank)]
    ends = [-1 if i == axis else d for i, d in enumerate(x.shape)]
    steps = [-1 if i == axis else 1 for i in range(x.rank)]
    return b.slice(x, starts=starts, ends=ends, steps=steps)


def _shift(b, x, axis, k, identity):
    """x shifted by k along ``axis``: k ``identity`` values in front, the last k elements dropped."""
    n = x.shape[axis]
    head = b.slice(x, starts=[0] * x.rank, ends=[n - k if i == axis else d for i, d in enumerate(x.shape)],
                   steps=[1] * x.rank)
    pads = [k if i == axis else 0 for i in range(x.rank)] + [0] * x.rank
    return b.pad(head, pads=pads, value=float(identity), interior=[0] * x.rank)


def _scan(prim, identity):
    def lower(b, x, axis, *, exclusive=0, reverse=0):
        if x.rank < 1:
            raise ShapeError(f"{b.where}: a scalar input has no axis to scan; inputs of rank >= 1 are accepted")
        ax = b.norm_axis(int(b.scalar_of(axis, "axis")), x.rank)
        n = x.shape[ax]
        if x.dtype.is_bool:
            raise ShapeError(f"{b.where}: bool input is not accepted; accepted: numeric dtypes")
        y = _flip(b, x, ax) if reverse and n > 1 else x
        if exclusive and n:
            y = _shift(b, y, ax, 1, identity)
        k = 1
        while k < n:  # Hillis-Steele scan: log2(n) shifted combines
            y = b.emit(prim, y, _shift(b, y, ax, k, identity))
            k *= 2
        return _flip(b, y, ax) if reverse and n > 1 else y
    lower.__doc__ = (f"Inclusive scan by log2(n) steps of y = {prim}(y, y shifted by 2**i along axis, "
                     f"padded with {identity}); exclusive shifts once more, reverse flips around it "
                     f"(slices and pads only, exact for integers).")
    return lower


onnx_op("CumSum", const_inputs=(1,))(_scan("add", 0))
onnx_op("CumProd", const_inputs=(1,))(_scan("mul", 1))
