"""Tensor-shaping ONNX ops: Reshape, Flatten, Constant, Identity, Shape."""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..registry import onnx_op


@onnx_op("Identity")
def identity(b, x):
    """The input itself."""
    return x


@onnx_op("Constant")
def constant(b, *, value=None, value_float=None, value_floats=None, value_int=None, value_ints=None,
             value_string=None, value_strings=None, sparse_value=None):
    """A constant from whichever value attribute is set."""
    if value is not None:
        return b.const(value)
    for v, dt in ((value_float, np.float32), (value_floats, np.float32), (value_int, np.int64),
                  (value_ints, np.int64)):
        if v is not None:
            return b.const(np.asarray(v, dtype=dt))
    raise ShapeError(f"{b.where}: Constant has no supported value attribute (string and sparse values are not "
                     f"supported)")


@onnx_op("Shape", shape_only=True)
def shape(b, x, *, start=0, end=None):
    """The static shape, as an int64 constant."""
    s = list(x.shape)
    return b.const(np.asarray(s[slice(start, end)], dtype=np.int64))


@onnx_op("Reshape", const_inputs=(1,))
def reshape(b, x, shape, *, allowzero=0):
    """Primitive `reshape` with 0 and -1 resolved."""
    target = [int(s) for s in np.asarray(b.value_of(shape, "shape")).reshape(-1)]
    if not allowzero and any(s == 0 for s in target[x.rank:]):
        raise ShapeError(f"{b.where}: shape {target[:16]} copies (0) a dimension beyond the rank {x.rank} of the "
                         f"input {x.shape}")
    out = []
    for i, s in enumerate(target):
        out.append(x.shape[i] if (s == 0 and not allowzero) else s)
    if out.count(-1) > 1:
        raise ShapeError(f"{b.where}: shape {target} has more than one -1")
    if -1 in out:
        known = int(np.prod([s for s in out if s != -1]))
        if known == 0 or x.type.numel % known:
            raise ShapeError(f"{b.where}: cannot reshape {x.shape} to {target}")
        out[out.index(-1)] = x.type.numel // known
    return b.reshape_(x, out)


@onnx_op("Flatten")
def flatten(b, x, *, axis=1):
    """Reshape to 2-D around `axis`."""
    axis = b.norm_axis(axis, x.rank + 1, "axis") if axis >= 0 else b.norm_axis(axis, x.rank, "axis")
    lead = int(np.prod(x.shape[:axis]))
    return b.reshape_(x, (lead, int(np.prod(x.shape[axis:]))))
