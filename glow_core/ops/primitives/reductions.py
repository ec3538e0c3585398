"""Reduction primitives: ``reduce_sum``, ``reduce_prod``, ``reduce_max``, ``reduce_min``, ``argmax``, ``argmin``."""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ...types import NUMERIC, TensorType
from ..registry import REQUIRED, primitive
from .checks import BOOL, accept, check_axes


def _reduce_rule(name, allowed):
    def rule(ts, axes, keepdims):
        x = ts[0]
        accept(name, x, allowed)
        check_axes(name, axes, x.rank)
        shape = tuple((1 if i in axes else s) for i, s in enumerate(x.shape) if keepdims or i not in axes)
        return [TensorType(x.dtype, shape)]
    return rule


def reduce_sum(x, axes, keepdims=1):
    return np.sum(x, axis=tuple(axes), keepdims=bool(keepdims), dtype=x.dtype)


def reduce_prod(x, axes, keepdims=1):
    return np.prod(x, axis=tuple(axes), keepdims=bool(keepdims), dtype=x.dtype)


def _lowest(dt):
    return -np.inf if dt.kind == "f" else (False if dt.kind == "b" else np.iinfo(dt).min)


def reduce_max(x, axes, keepdims=1):
    return np.max(x, axis=tuple(axes), keepdims=bool(keepdims), initial=_lowest(x.dtype))


def reduce_min(x, axes, keepdims=1):
    hi = np.inf if x.dtype.kind == "f" else (True if x.dtype.kind == "b" else np.iinfo(x.dtype).max)
    return np.min(x, axis=tuple(axes), keepdims=bool(keepdims), initial=hi)


REDUCE = {  # name: (accepted dtypes, reference kernel, tolerance class, doc)
    "reduce_sum": (NUMERIC, reduce_sum, "reduce", "Sum over `axes`."),
    "reduce_prod": (NUMERIC, reduce_prod, "reduce-prod", "Product over `axes`."),
    "reduce_max": (NUMERIC + BOOL, reduce_max, "reduce-exact",
                   "Maximum over `axes` (NaN propagates); empty reduction gives the dtype's lowest."),
    "reduce_min": (NUMERIC + BOOL, reduce_min, "reduce-exact",
                   "Minimum over `axes` (NaN propagates); empty reduction gives the dtype's highest."),
}
for _n, (_dt, _kernel, _tol, _doc) in REDUCE.items():
    primitive(_n, "reduce", ("x",), _dt, _reduce_rule(_n, _dt), _kernel, _doc, attrs={"axes": REQUIRED, "keepdims": 1},
              tolerance=_tol, exact=_tol == "reduce-exact", quantized="keep" if _tol == "reduce-exact" else "")


def _arg_rule(name):
    def rule(ts, axis, keepdims, select_last_index):
        x = ts[0]
        accept(name, x, NUMERIC)
        check_axes(name, [axis], x.rank)
        if x.shape[axis] == 0:
            raise ShapeError(f"{name}: axis {axis} of {x} is empty: there is no index to return (an axis of "
                             f"at least one element is accepted)")
        shape = tuple((1 if i == axis else s) for i, s in enumerate(x.shape) if keepdims or i != axis)
        return [TensorType("int64", shape)]
    return rule


def _arg(x, axis, keepdims, select_last_index, fn):
    if select_last_index:
        x = np.flip(x, axis)
    r = fn(x, axis=axis)
    if select_last_index:
        r = x.shape[axis] - 1 - r
    r = r.astype(np.int64)
    return np.expand_dims(r, axis) if keepdims else r


def argmax(x, axis, keepdims=1, select_last_index=0):
    return _arg(x, axis, keepdims, select_last_index, np.argmax)


def argmin(x, axis, keepdims=1, select_last_index=0):
    return _arg(x, axis, keepdims, select_last_index, np.argmin)


for _n, _kernel in (("argmax", argmax), ("argmin", argmin)):
    primitive(_n, "reduce", ("x",), NUMERIC, _arg_rule(_n), _kernel,
              f"Index (int64) of the {_n[3:]}imum along `axis`; ties pick the first index, or the last with "
              f"select_last_index=1.", attrs={"axis": REQUIRED, "keepdims": 1, "select_last_index": 0},
              tolerance="reduce-exact", exact=True)
