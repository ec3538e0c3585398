"""Indexing and generator ONNX ops: Gather, GatherElements, GatherND, ScatterND, ScatterElements, Scatter,
TensorScatter, Where, Compress, ReverseSequence, OneHot, Trilu, EyeLike, ConstantOfShape, Range, Size.

Element-wise gathers and scatters lower to `gather_nd` / `scatter_nd` with full index grids: the grid of
the non-indexed axes is built in numpy at compile time, and the indexed axis is concatenated in at run
time. Negative indices are normalized with select(idx < 0, idx + dim, idx) (in numpy when constant).
"""
from __future__ import annotations

import numpy as np

from ...errors import MemoryLimitError, ShapeError
from ...types import MAX_RANK
from ...types import dtype as to_dtype
from ..registry import onnx_op
from .movement import ints

#: Most elements a Range or ConstantOfShape may produce (their values are compile-time constants).
MAX_CONSTANT_ELEMENTS = 1 << 31


def _index(b, idx, dim):
    """Indices as int64 in [0, dim): negative ones are counted from the end."""
    if idx.dtype.name not in ("int32", "int64"):
        raise ShapeError(f"{b.where}: indices of dtype {idx.dtype} are not accepted; accepted: int32, int64")
    if idx.is_const:
        a = np.asarray(idx.const).astype(np.int64)
        return b.const(np.where(a < 0, a + np.asarray(dim, np.int64), a), "int64")
    idx = b.cast_(idx, "int64")
    dims = b.const(np.broadcast_to(np.asarray(dim, np.int64), idx.shape).copy()) if np.ndim(dim) else \
        b.scalar_like(int(dim), idx)
    return b.select(b.lt(idx, b.scalar_like(0, idx)), b.add(idx, dims), idx)


def _grid(b, idx, axis, shape):
    """Full index grid [*shape, rank] for gather_nd/scatter_nd: arange on every axis, ``idx`` on ``axis``."""
    rank = len(shape)
    comps = []
    for a in range(rank):
        if a == axis:
            comps.append(b.reshape_(idx, tuple(shape) + (1,)))
        else:
            g = np.broadcast_to(np.arange(shape[a], dtype=np.int64).reshape(
                [-1 if i == a else 1 for i in range(rank)]), shape)
            comps.append(b.const(g.reshape(tuple(shape) + (1,))))
    return comps[0] if rank == 1 else b.concat(*comps, axis=rank)


@onnx_op("Gather")
def gather(b, x, indices, *, axis=0):
    """Primitive `gather` with negative indices normalized."""
    axis = b.norm_axis(axis, x.rank)
    return b.gather(x, _index(b, indices, x.shape[axis]), axis=axis)


@onnx_op("GatherElements")
def gather_elements(b, x, indices, *, axis=0):
    """`gather_nd` with an index grid: arange on every axis but `axis`, which takes `indices`."""
    axis = b.norm_axis(axis, x.rank)
    if indices.rank != x.rank:
        raise ShapeError(f"{b.where}: indices {indices.shape} must have the rank of data {x.shape}")
    idx = _index(b, indices, x.shape[axis])
    return b.gather_nd(x, _grid(b, idx, axis, indices.shape))


@onnx_op("GatherND")
def gather_nd(b, x, indices, *, batch_dims=0):
    """Primitive `gather_nd` with negative indices normalized per indexed axis."""
    if not 0 <= batch_dims < min(x.rank, indices.rank) or not 1 <= indices.shape[-1] <= x.rank - batch_dims:
        raise ShapeError(f"{b.where}: data {list(x.shape)}, indices {list(indices.shape)}, batch_dims {batch_dims}: "
                         f"batch_dims below both ranks and an index length (last dim of indices) of 1 to "
                         f"rank(data) - batch_dims are accepted")
    k = indices.shape[-1]
    dims = np.asarray(x.shape[batch_dims:batch_dims + k], np.int64)
    return b.gather_nd(x, _index(b, indices, dims), batch_dims=int(batch_dims))


@onnx_op("ScatterND")
def scatter_nd(b, x, indices, updates, *, reduction="none"):
    """Primitive `scatter_nd` with negative indices normalized."""
    if indices.rank < 1 or not 1 <= indices.shape[-1] <= x.rank:
        raise ShapeError(f"{b.where}: indices {indices.shape} for data {x.shape}: indices of rank >= 1 whose last "
                         f"dim is 1 to {x.rank} are accepted")
    k = indices.shape[-1]
    dims = np.asarray(x.shape[:k], np.int64)
    return b.scatter_nd(x, _index(b, indices, dims), updates, reduction=reduction or "none")


@onnx_op("ScatterElements", "Scatter")
def scatter_elements(b, x, indices, updates, *, axis=0, reduction="none"):
    """`scatter_nd` with an index grid: arange on every axis but `axis`, which takes `indices`."""
    axis = b.norm_axis(axis, x.rank)
    if indices.shape != updates.shape or indices.rank != x.rank:
        raise ShapeError(f"{b.where}: indices {indices.shape} and updates {updates.shape} must have one shape "
                         f"of the rank of data {x.shape}")
    idx = _index(b, indices, x.shape[axis])
    return b.scatter_nd(x, _grid(b, idx, axis, indices.shape), updates, reduction=reduction or "none")


@onnx_op("TensorScatter")
def tensor_scatter(b, cache, update, write_indices=None, *, axis=-2, mode="linear"):
    """`scatter_nd` of `update` into `cache` at write_indices[batch] + arange(seq) along `axis`
    (modulo the cache length in circular mode)."""
    axis = b.norm_axis(axis, cache.rank)
    if axis == 0:
        raise ShapeError(f"{b.where}: axis must not be the batch axis 0")
    seq = update.shape[axis]
    shape = update.shape
    ar = b.const(np.broadcast_to(np.arange(seq, dtype=np.int64).reshape(
        [-1 if i == axis else 1 for i in range(cache.rank)]), shape).copy())
    if write_indices is None:
        pos = ar
    else:
        wi = b.reshape_(b.cast_(write_indices, "int64"), (shape[0],) + (1,) * (cache.rank - 1))
        pos = b.add(b.broadcast_to(wi, shape), ar)
    if mode == "circular":
        pos = b.mod(pos, b.scalar_like(cache.shape[axis], pos))
    return b.scatter_nd(cache, _grid(b, pos, axis, shape), update)


@onnx_op("Where")
def where(b, cond, x, y):
    """Primitive `select` on numpy-broadcast operands."""
    return b.where_(cond, x, y)


@onnx_op("Compress", const_inputs=(1,))
def compress(b, x, condition, *, axis=None):
    """`gather` of the positions where the (constant) condition is true (on the flattened input when no
    axis)."""
    cond = np.asarray(b.value_of(condition, "condition")).reshape(-1).astype(bool)
    if axis is None:
        x, axis = b.reshape_(x, (x.type.numel,)), 0
    axis = b.norm_axis(axis, x.rank)
    keep = np.nonzero(cond[:x.shape[axis]])[0].astype(np.int64)
    return b.gather(x, b.const(keep), axis=axis)


@onnx_op("ReverseSequence")
def reverse_sequence(b, x, sequence_lens, *, batch_axis=1, time_axis=0):
    """`gather_nd` with an index grid whose time component is (t < len ? len - 1 - t : t)."""
    shape = x.shape
    if x.rank < 2 or sorted((batch_axis, time_axis)) != [0, 1] or sequence_lens.shape != (shape[batch_axis],):
        raise ShapeError(f"{b.where}: input {list(shape)}, batch_axis {batch_axis}, time_axis {time_axis}, "
                         f"sequence_lens {list(sequence_lens.shape)}: an input of rank >= 2, the axes 0 and 1 (one "
                         f"each) and one length per batch entry are accepted")
    t = b.const(np.broadcast_to(np.arange(shape[time_axis], dtype=np.int64).reshape(
        [-1 if i == time_axis else 1 for i in range(x.rank)]), shape).copy())
    lens = b.reshape_(b.cast_(sequence_lens, "int64"), [shape[batch_axis] if i == batch_axis else 1
                                                          for i in range(x.rank)])
    lens = b.broadcast_to(lens, shape)
    rev = b.sub(b.sub(lens, b.scalar_like(1, lens)), t)
    return b.gather_nd(x, _grid(b, b.select(b.lt(t, lens), rev, t), time_axis, shape))


@onnx_op("OneHot", const_inputs=(1,))
def one_hot(b, indices, depth, values, *, axis=-1):
    """eq(indices at `axis`, arange(depth)) selects values[1] (on) or values[0] (off)."""
    d = int(np.asarray(b.value_of(depth, "depth")).reshape(-1)[0])
    rank = indices.rank + 1
    axis = b.norm_axis(axis, rank)
    idx = indices if indices.dtype.name in ("int32", "int64") else b.cast_(indices, "int64")
    idx = b.cast_(idx, "int64")
    idx = b.select(b.lt(idx, b.scalar_like(0, idx)), b.add(idx, b.scalar_like(d, idx)), idx)
    out_shape = indices.shape[:axis] + (d,) + indices.shape[axis:]
    idx = b.broadcast_to(b.reshape_(idx, indices.shape[:axis] + (1,) + indices.shape[axis:]), out_shape)
    ar = b.const(np.arange(d, dtype=np.int64).reshape([-1 if i == axis else 1 for i in range(rank)]))
    mask = b.eq(idx, b.broadcast_to(ar, out_shape))
    off = b.slice(values, starts=[0], ends=[1], steps=[1])
    on = b.slice(values, starts=[1], ends=[2], steps=[1])
    return b.where_(mask, b.reshape_(on, ()), b.reshape_(off, ()))


@onnx_op("Trilu", const_inputs=(1,))
def trilu(b, x, k=None, *, upper=1):
    """`select` between x and zeros with a constant triangular mask over the last two axes."""
    kv = None if k is None else np.asarray(b.value_of(k, "k"))
    if x.rank < 2 or (kv is not None and kv.size != 1):
        raise ShapeError(f"{b.where}: input {x.shape}, k of shape {None if kv is None else kv.shape}: an input of "
                         f"rank >= 2 and a scalar k are accepted")
    kk = 0 if kv is None else int(kv.reshape(-1)[0])
    n, m = x.shape[-2:]
    ones = np.ones((n, m), bool)
    mask = np.triu(ones, kk) if upper else np.tril(ones, kk)
    return b.where_(b.const(mask), x, b.scalar_like(0, x, shape=()))


@onnx_op("EyeLike", shape_only=True)
def eye_like(b, x, *, dtype=None, k=0):
    """A constant identity-like matrix of x's shape (dtype: an ONNX element type, default x's)."""
    dt = x.dtype if dtype is None else to_dtype(int(dtype))
    return b.const(np.eye(x.shape[0], x.shape[1], int(k)).astype(dt.np))


@onnx_op("ConstantOfShape", const_inputs=(0,))
def constant_of_shape(b, shape, *, value=None):
    """A constant filled with `value` (float32 0 by default)."""
    s = ints(b.value_of(shape, "shape"))
    if min(s, default=0) < 0:
        raise ShapeError(f"{b.where}: shape {s[:8]} has a negative dim; non-negative dims are accepted")
    if len(s) > MAX_RANK:
        raise ShapeError(f"{b.where}: shape of rank {len(s)} ({s[:8]}...); ranks up to {MAX_RANK} are accepted")
    if float(np.prod(s, dtype=np.float64)) > MAX_CONSTANT_ELEMENTS:
        raise MemoryLimitError(f"{b.where}: shape {s[:8]}: more elements than the {MAX_CONSTANT_ELEMENTS} a "
                               f"compile-time constant may hold in host memory")
    v = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return b.const(np.full(s, v[0], dtype=v.dtype))


@onnx_op("Range", const_inputs=(0, 1, 2))
def range_(b, start, limit, delta, *, stash_type=None):
    """A constant: numpy arange(start, limit, delta) in the input type (low-precision floats computed in
    `stash_type`, float64 otherwise)."""
    s, l, d = (b.scalar_of(v, n) for v, n in ((start, "start"), (limit, "limit"), (delta, "delta")))
    if d == 0 or not np.isfinite([s, l, d]).all():
        raise ShapeError(f"{b.where}: start {s}, limit {l}, delta {d}: finite values and a non-zero delta are "
                         f"accepted")
    count = max(0.0, np.ceil((float(l) - float(s)) / float(d)))
    if count > MAX_CONSTANT_ELEMENTS:
        raise MemoryLimitError(f"{b.where}: start {s}, limit {l}, delta {d} make {count:.0f} elements; at most "
                               f"{MAX_CONSTANT_ELEMENTS} fit a compile-time constant in host memory")
    dt = start.dtype.np
    if count == 0:  # (numpy's arange fails on a length below -2^63 instead of giving none)
        return b.const(np.zeros(0, dt))
    if start.dtype.is_float:
        comp = np.float64
        if stash_type is not None and start.dtype.name in ("float16", "bfloat16"):
            comp = np.float32 if int(stash_type) == 1 else np.float64
        out = np.arange(comp(s), float(l), float(d), dtype=comp)
    else:
        out = np.arange(int(s), int(l), int(d))
    return b.const(out.astype(dt))


@onnx_op("Size", shape_only=True)
def size(b, x):
    """The static element count, as an int64 constant."""
    return b.const(np.asarray(x.type.numel, np.int64))
