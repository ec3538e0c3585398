"""Data-movement primitives: reshape, transpose, broadcast, slice, concat, pad, copy; and the index
primitives gather, gather_nd, scatter_nd. They move or select elements without arithmetic, so they are
computed in the operands' own dtypes and accept every dtype (storage-only types included)."""
from __future__ import annotations

from math import prod

import numpy as np

from ...errors import GlowError
from ...types import ALL
from ..registry import REQUIRED, primitive
from .checks import INDEX, accept, check_indices, fail

MOVE = dict(tolerance="movement", movement=True, exact=True)
INDEXING = dict(tolerance="index", movement=True, exact=True)


def _reshape_rule(ts, shape):
    x = ts[0]
    if prod(shape) != x.numel or any(s < 0 for s in shape):
        fail("reshape", f"cannot reshape {x.shape} ({x.numel} elements) to {tuple(shape)}")
    return [x.with_shape(shape)]


def reshape(x, shape):
    return x.reshape(shape)


primitive("reshape", "movement", ("x",), ALL, _reshape_rule, reshape,
          "Same elements in row-major order, new static shape. Backends may implement it as a view.",
          attrs={"shape": REQUIRED}, **MOVE)


def _transpose_rule(ts, perm):
    x = ts[0]
    if sorted(perm) != list(range(x.rank)):
        fail("transpose", f"perm {list(perm)} is not a permutation of {x.rank} axes")
    return [x.with_shape(tuple(x.shape[p] for p in perm))]


def transpose(x, perm):
    return np.transpose(x, perm)


primitive("transpose", "movement", ("x",), ALL, _transpose_rule, transpose, "out.shape[i] = x.shape[perm[i]].",
          attrs={"perm": REQUIRED}, **MOVE)


def _broadcast_rule(ts, shape):
    x = ts[0]
    if len(shape) != x.rank or any(s != d and s != 1 for s, d in zip(x.shape, shape)):
        fail("broadcast", f"cannot broadcast {x.shape} to {tuple(shape)}: ranks must match and each dim be 1 "
                          f"or equal")
    return [x.with_shape(shape)]


def broadcast(x, shape):
    return np.broadcast_to(x, tuple(shape))


primitive("broadcast", "movement", ("x",), ALL, _broadcast_rule, broadcast,
          "Repeat size-1 dims to `shape` (same rank; each dim of x is 1 or equal).", attrs={"shape": REQUIRED},
          **MOVE)


def _slice_rule(ts, starts, ends, steps):
    x = ts[0]
    if not (len(starts) == len(ends) == len(steps) == x.rank) or 0 in steps:
        fail("slice", f"starts {starts}, ends {ends}, steps {steps} must give one non-zero step per axis of {x.shape}")
    shape = tuple(len(range(*slice(s, e if e >= 0 else None, st).indices(d)))
                  for s, e, st, d in zip(starts, ends, steps, x.shape))
    for s, d in zip(starts, x.shape):
        if d and not 0 <= s < d:
            fail("slice", f"start {s} out of range for dim of size {d}")
    return [x.with_shape(shape)]


def slice_(x, starts, ends, steps):
    return x[tuple(np.s_[s:(e if e >= 0 else None):st] for s, e, st in zip(starts, ends, steps))]


primitive("slice", "movement", ("x",), ALL, _slice_rule, slice_,
          "x[starts[i]:ends[i]:steps[i]] on every axis. Starts are in [0, dim); ends are in [0, dim] or -1 "
          "(meaning: through index 0 with a negative step).",
          attrs={"starts": REQUIRED, "ends": REQUIRED, "steps": REQUIRED}, **MOVE)


def _concat_rule(ts, axis):
    first = ts[0]
    for t in ts[1:]:
        if t.dtype != first.dtype or t.rank != first.rank or any(
                a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis):
            fail("concat", f"operands {[str(x) for x in ts]} differ outside axis {axis}")
    if not 0 <= axis < first.rank:
        fail("concat", f"axis {axis} out of range for rank {first.rank}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in ts)
    return [first.with_shape(shape)]


def concat(*xs, axis):
    return np.concatenate(xs, axis=axis)


primitive("concat", "movement", ("xs",), ALL, _concat_rule, concat, "Join operands along `axis`.",
          attrs={"axis": REQUIRED}, variadic=True, **MOVE)


def _pad_rule(ts, pads, value, interior):
    x = ts[0]
    n = x.rank
    if len(pads) != 2 * n or any(p < 0 for p in pads) or len(interior) != n or any(i < 0 for i in interior):
        fail("pad", f"pads {pads} / interior {interior} must be non-negative, 2 and 1 per axis of {x.shape}")
    shape = tuple(pads[i] + pads[i + n] + (s + max(s - 1, 0) * interior[i]) for i, s in enumerate(x.shape))
    return [x.with_shape(shape)]


def pad(x, pads, value=0.0, interior=None):
    n = x.ndim
    interior = interior or [0] * n
    shape = [pads[i] + pads[i + n] + s + max(s - 1, 0) * interior[i] for i, s in enumerate(x.shape)]
    out = np.full(shape, value, dtype=x.dtype) if x.dtype.kind != "b" else np.full(shape, bool(value))
    idx = tuple(np.s_[pads[i]:pads[i] + max(s - 1, 0) * (interior[i] + 1) + 1:interior[i] + 1] if s else np.s_[0:0]
                for i, s in enumerate(x.shape))
    out[idx] = x
    return out


primitive("pad", "movement", ("x",), ALL, _pad_rule, pad,
          "Constant padding: `pads` = begins + ends per axis, `interior` elements inserted between neighbours, "
          "all filled with `value`.", attrs={"pads": REQUIRED, "value": 0.0, "interior": REQUIRED}, **MOVE)


def copy(x):
    return np.array(x, copy=True)


primitive("copy", "movement", ("x",), ALL, lambda ts: [ts[0]], copy, "A copy of x (written by the IR generator "
          "when an output must land in its own buffer).", **MOVE)


# -- indexing ---------------------------------------------------------------------------------------------
def _gather_rule(ts, axis):
    x, idx = ts
    accept("gather", idx, INDEX)
    if not 0 <= axis < x.rank:
        fail("gather", f"axis {axis} out of range for rank {x.rank}")
    return [x.with_shape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])]


def gather(x, indices, axis):
    check_indices("gather", indices, x.shape[axis])
    return np.take(x, indices, axis=axis)


primitive("gather", "index", ("x", "indices"), ALL, _gather_rule, gather,
          "out = take(x, indices, axis). Indices must lie in [0, dim); out-of-range indices are an error "
          "(the interpreter raises; a backend must not read outside x).", attrs={"axis": REQUIRED}, **INDEXING)


def _gather_nd_rule(ts, batch_dims):
    x, idx = ts
    accept("gather_nd", idx, INDEX)
    k = idx.shape[-1]
    if idx.rank < 1 or batch_dims + k > x.rank or idx.shape[:batch_dims] != x.shape[:batch_dims]:
        fail("gather_nd", f"indices {idx.shape} do not index data {x.shape} with batch_dims {batch_dims}")
    return [x.with_shape(idx.shape[:-1] + x.shape[batch_dims + k:])]


def gather_nd(x, indices, batch_dims=0):
    k = indices.shape[-1]
    bshape = x.shape[:batch_dims]
    nb = int(np.prod(bshape)) if batch_dims else 1
    xb = x.reshape((nb,) + x.shape[batch_dims:])
    ib = indices.reshape((nb, -1, k))
    for j in range(k):
        check_indices("gather_nd", ib[..., j], x.shape[batch_dims + j])
    out = np.stack([xb[b][tuple(ib[b].T)] for b in range(nb)]) if nb else np.zeros((0,), x.dtype)
    return out.reshape(indices.shape[:-1] + x.shape[batch_dims + k:])


primitive("gather_nd", "index", ("x", "indices"), ALL, _gather_nd_rule, gather_nd,
          "Gather slices of x addressed by the last axis of `indices` (ONNX GatherND semantics, indices "
          "already non-negative).", attrs={"batch_dims": 0}, **INDEXING)


def _scatter_nd_rule(ts, reduction):
    x, idx, upd = ts
    accept("scatter_nd", idx, INDEX)
    k = idx.shape[-1]
    if k > x.rank or upd.shape != idx.shape[:-1] + x.shape[k:] or upd.dtype != x.dtype:
        fail("scatter_nd", f"updates {upd} do not fit indices {idx} into data {x}")
    return [x]


def scatter_nd_update(x, indices, updates, reduction="none"):
    """scatter_nd applied to ``x`` itself (a state updated in place)."""
    k = indices.shape[-1]
    idx = indices.reshape(-1, k)
    upd = updates.reshape((idx.shape[0],) + x.shape[k:])
    for j in range(k):
        check_indices("scatter_nd", idx[:, j], x.shape[j])
    for i in range(idx.shape[0]):
        t = tuple(idx[i])
        if reduction == "none":
            x[t] = upd[i]
        elif reduction == "add":
            x[t] = x[t] + upd[i]
        elif reduction == "mul":
            x[t] = x[t] * upd[i]
        elif reduction == "max":
            x[t] = np.maximum(x[t], upd[i])
        elif reduction == "min":
            x[t] = np.minimum(x[t], upd[i])
        else:
            raise GlowError(f"scatter_nd: unknown reduction {reduction!r}; accepted: none, add, mul, max, min")


def scatter_nd(x, indices, updates, reduction="none"):
    out = x.copy()
    scatter_nd_update(out, indices, updates, reduction)
    return out


primitive("scatter_nd", "index", ("x", "indices", "updates"), ALL, _scatter_nd_rule, scatter_nd,
          "Copy of x with slices at `indices` replaced (reduction='none') or combined by add/mul/max/min. "
          "Updates are applied in index order. May update x in place (a persistent placeholder such as a KV "
          "cache: its output is then x's own buffer).", attrs={"reduction": "none"},
          update_kernel=scatter_nd_update, **INDEXING)
