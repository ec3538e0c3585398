"""Pooling ONNX ops: MaxPool (with Indices), AveragePool, LpPool, the global pools and MaxUnpool."""
from __future__ import annotations

from math import prod

import numpy as np

from ...errors import ShapeError
from ..registry import onnx_op
from .nn import conv_pads


def pool_geometry(b, x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode):
    """Kernel, strides, dilations and explicit pads; ceil_mode becomes extra end padding."""
    n = x.rank - 2
    if x.rank < 3:
        raise ShapeError(f"{b.where}: input {x.shape} must be [N, C, *spatial]")
    if not kernel_shape or len(kernel_shape) != n:
        raise ShapeError(f"{b.where}: kernel_shape {kernel_shape} must give one size per spatial dim of {x.shape}")
    k = list(kernel_shape)
    strides = list(strides or [1] * n)
    dilations = list(dilations or [1] * n)
    p = conv_pads(b, x.shape[2:], k, strides, dilations, pads, auto_pad)
    for i in range(n if not ceil_mode else 0):  # (ceil_mode: a window may reach past the end padding)
        if (k[i] - 1) * dilations[i] + 1 > x.shape[2 + i] + p[i] + p[i + n]:
            raise ShapeError(f"{b.where}: the window of kernel {k}, dilations {dilations} does not fit spatial dim "
                             f"{i} of {x.shape} with pads {p}: windows at most as large as the padded input are "
                             f"accepted")
    if ceil_mode:
        for i in range(n):
            eff = (k[i] - 1) * dilations[i] + 1
            span = x.shape[2 + i] + p[i] + p[i + n] - eff
            out = -(-span // strides[i]) + 1
            # the last window must start inside the input or the begin padding
            if (out - 1) * strides[i] >= x.shape[2 + i] + p[i]:
                out -= 1
            p[i + n] += max((out - 1) * strides[i] + eff - (x.shape[2 + i] + p[i] + p[i + n]), 0)
    return k, strides, dilations, p


def _window_tables(sp, out_sp, k, strides, dilations, p, storage_order):
    """For every (output position, kernel offset), flattened: the row-major input index (prod(sp) for
    padding) and the index in the requested storage order (row- or column-major)."""
    n = len(sp)
    grids = np.meshgrid(*[np.arange(d) for d in out_sp], *[np.arange(d) for d in k], indexing="ij")
    pos = [grids[i] * strides[i] - p[i] + grids[n + i] * dilations[i] for i in range(n)]
    inside = np.logical_and.reduce([(pos[i] >= 0) & (pos[i] < sp[i]) for i in range(n)])
    row = np.zeros(inside.shape, np.int64)
    col = np.zeros(inside.shape, np.int64)
    for i in range(n):
        row += pos[i] * prod(sp[i + 1:])
        col += pos[i] * prod(sp[:i])
    gather_idx = np.where(inside, row, prod(sp)).reshape(-1)
    store_idx = np.where(inside, col if storage_order else row, -1).reshape(-1)
    return gather_idx.astype(np.int64), store_idx.astype(np.int64)


@onnx_op("MaxPool")
def max_pool(b, x, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, pads=None,
             storage_order=0, strides=None):
    """Values: primitive `max_pool`. Indices: the windows gathered from the flattened spatial dims (plus one
    lowest-value slot standing for padding), `argmax` over each window, mapped back to flat input indices
    (row- or column-major) with a constant table and offset by (n * C + c) * prod(spatial)."""
    k, s, d, p = pool_geometry(b, x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    y = b.max_pool(x, kernel=k, strides=s, dilations=d, pads=p)
    N, C, sp = x.shape[0], x.shape[1], x.shape[2:]
    out_sp, K = y.shape[2:], prod(k)
    O, S = prod(out_sp), prod(sp)
    gidx, sidx = _window_tables(sp, out_sp, k, s, d, p, storage_order)
    if x.dtype.is_float:
        low = -np.inf
    else:
        low = np.iinfo(x.dtype.np).min
    flat = b.reshape_(x, (N, C, S))
    flat = b.concat(flat, b.scalar_like(low, flat, shape=(N, C, 1)), axis=2)
    win = b.reshape_(b.gather(flat, b.const(gidx), axis=2), (N, C, O, K))
    local = b.argmax(win, axis=3, keepdims=0, select_last_index=0)
    pos = b.binary("add", local, b.const(np.arange(O, dtype=np.int64) * K))
    idx = b.gather(b.const(sidx), pos, axis=0)
    base = (np.arange(N * C, dtype=np.int64) * S).reshape(N, C, 1)
    idx = b.binary("add", idx, b.const(base))
    return y, b.reshape_(idx, y.shape)


@onnx_op("AveragePool")
def average_pool(b, x, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                 kernel_shape=None, pads=None, strides=None):
    """Primitive `avg_pool` with explicit pads. count_include_pad=1: the pads become zeros (`pad`) that count,
    and only the ceil_mode extension is left to `avg_pool` (count_include_pad=0), which does not count it."""
    k, s, d, p = pool_geometry(b, x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    if count_include_pad:
        n = x.rank - 2
        k0, s0, d0, p0 = pool_geometry(b, x, kernel_shape, strides, dilations, pads, auto_pad, 0)
        x = b.pad(x, pads=[0, 0] + p0[:n] + [0, 0] + p0[n:], value=0.0, interior=[0] * x.rank)
        p = [0] * n + [p[n + i] - p0[n + i] for i in range(n)]
    return b.avg_pool(x, kernel=k, strides=s, dilations=d, pads=p, count_include_pad=0)


def _window_sum(b, x, k, s, d, p):
    """Sum over each window: a depthwise `conv` with an all-ones kernel."""
    C = x.shape[1]
    if C == 0:  # no channels: an empty result of the pooled shape (a group-0 conv has no meaning)
        return b.avg_pool(x, kernel=k, strides=s, dilations=d, pads=p, count_include_pad=0)
    w = b.const(np.ones((C, 1) + tuple(k), dtype=x.dtype.np))
    return b.conv(x, w, b.scalar_like(0, x, shape=(C,)), strides=s, dilations=d, pads=p, group=C)


def _pow_abs(b, x, p):
    """|x| ** p (x * x for p = 2)."""
    if p < 1:
        raise ShapeError(f"{b.where}: p = {p}; the Lp norm of a pool takes p >= 1")
    if p == 2:
        return b.mul(x, x)
    a = b.abs(x)
    return a if p == 1 else b.pow(a, b.scalar_like(p, a))


def _root(b, x, p):
    if p == 1:
        return x
    if p == 2:
        return b.sqrt(x)
    return b.pow(x, b.scalar_like(1.0 / p, x))


@onnx_op("LpPool")
def lp_pool(b, x, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, p=2, pads=None,
            strides=None):
    """(sum over the window of |x|^p)^(1/p): pow/abs, a depthwise all-ones `conv`, pow."""
    k, s, d, pd = pool_geometry(b, x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    return _root(b, _window_sum(b, _pow_abs(b, x, p), k, s, d, pd), p)


def _spatial(b, x):
    if x.rank < 3:
        raise ShapeError(f"{b.where}: input {x.shape} must be [N, C, *spatial]")
    return list(range(2, x.rank))


@onnx_op("GlobalAveragePool")
def global_average_pool(b, x):
    """reduce_sum over the spatial dims (kept) divided by their element count."""
    axes = _spatial(b, x)
    sm = b.reduce("reduce_sum", x, axes, keepdims=True)
    return b.div(sm, b.scalar_like(prod(x.shape[2:]), sm))


@onnx_op("GlobalMaxPool")
def global_max_pool(b, x):
    """reduce_max over the spatial dims (kept)."""
    return b.reduce("reduce_max", x, _spatial(b, x), keepdims=True)


@onnx_op("GlobalLpPool")
def global_lp_pool(b, x, *, p=2):
    """(reduce_sum of |x|^p over the spatial dims)^(1/p)."""
    return _root(b, b.reduce("reduce_sum", _pow_abs(b, x, p), _spatial(b, x), keepdims=True), p)


@onnx_op("MaxUnpool", const_inputs=(2,))
def max_unpool(b, x, indices, output_shape=None, *, kernel_shape=None, pads=None, strides=None):
    """Zeros of the inferred unpooled shape, flattened; `scatter_nd` of the values at their flat indices;
    reshape; zero `pad` at the ends up to output_shape when that is larger."""
    n = x.rank - 2
    strides = list(strides or [1] * n)
    pads = list(pads or [0] * (2 * n))
    inferred = x.shape[:2] + tuple((x.shape[2 + i] - 1) * strides[i] + kernel_shape[i] - pads[i] - pads[n + i]
                                   for i in range(n))
    shape = inferred
    if output_shape is not None:
        shape = tuple(int(v) for v in b.value_of(output_shape, "output_shape"))
        if len(shape) != x.rank or any(o < i for o, i in zip(shape, inferred)):
            raise ShapeError(f"{b.where}: output_shape {shape} must have rank {x.rank} and be at least {inferred}")
    if indices.shape != x.shape:
        raise ShapeError(f"{b.where}: indices {indices.shape} must have the shape of X {x.shape}")
    zeros = b.scalar_like(0, x, shape=(prod(inferred),))
    idx = b.reshape_(b.cast_(indices, "int64"), (x.type.numel, 1))
    out = b.scatter_nd(zeros, idx, b.reshape_(x, (x.type.numel,)), reduction="none")
    out = b.reshape_(out, inferred)
    if shape != inferred:
        out = b.pad(out, pads=[0] * x.rank + [o - i for o, i in zip(shape, inferred)], value=0.0,
                    interior=[0] * x.rank)
    return out
