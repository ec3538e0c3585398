"""Data-movement ONNX ops: Transpose, Squeeze, Unsqueeze, Concat, Split, Slice, Expand, Tile, Pad,
CenterCropPad, DepthToSpace, SpaceToDepth.

Everything lowers to the movement primitives (slice, concat, transpose, reshape, broadcast, pad,
gather); every input that determines an output shape is a constant (``const_inputs``).
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..registry import onnx_op


def ints(v) -> list[int]:
    """A constant (array, list or scalar) as a list of Python ints."""
    return [int(i) for i in np.asarray(v).reshape(-1)]


def norm_axes(b, axes, rank, what="axes") -> list[int]:
    """Axes made non-negative and checked against ``rank``; a repeated axis is an error."""
    out = [b.norm_axis(int(a), rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise ShapeError(f"{b.where}: {what} {list(axes)} repeat an axis")
    return out


def slice_axes(b, x, spec):
    """x sliced with ONNX semantics: ``spec`` maps axis -> (start, end, step); negative indices count from the
    end, then starts clamp to [0, n] and ends to [0, n] (positive steps) or to [0, n-1] and [-1, n-1]
    (negative steps). Unlike Python's slices, a start below -n with a negative step clamps to 0, not -1."""
    starts, ends, steps = [0] * x.rank, list(x.shape), [1] * x.rank
    for ax, (s, e, st) in spec.items():
        if st == 0:
            raise ShapeError(f"{b.where}: slice step 0 on axis {ax}; steps must be non-zero")
        n = x.shape[ax]
        s, e = (s + n if s < 0 else s), (e + n if e < 0 else e)
        lo, hi = (0, n) if st > 0 else (0, n - 1)
        s, e = min(max(s, lo), hi), min(max(e, lo if st > 0 else -1), hi)
        r = range(s, e, st) if n else range(0)
        if len(r) == 0:
            starts[ax], ends[ax], steps[ax] = 0, 0, 1
        else:
            stop = r[-1] + r.step
            starts[ax], ends[ax], steps[ax] = r.start, (stop if stop >= 0 else -1), r.step
    if starts == [0] * x.rank and ends == list(x.shape) and steps == [1] * x.rank:
        return x
    return b.slice(x, starts=starts, ends=ends, steps=steps)


@onnx_op("Transpose")
def transpose(b, x, *, perm=None):
    """Primitive `transpose` (default perm reverses the axes)."""
    perm = list(range(x.rank))[::-1] if perm is None else [int(p) for p in perm]
    return b.transpose_(x, perm)


def _axes_input(b, axes_in, axes_attr):
    """Squeeze/Unsqueeze axes: an attribute before opset 13, a constant input from 13 on."""
    if b.opset >= 13:
        return None if axes_in is None else ints(b.value_of(axes_in, "axes"))
    return None if axes_attr is None else ints(axes_attr)


@onnx_op("Squeeze", const_inputs=(1,))
def squeeze(b, x, axes_in=None, *, axes=None):
    """Reshape dropping the listed size-1 axes (all size-1 axes when none are given)."""
    ax = _axes_input(b, axes_in, axes)
    if ax is None:
        ax = [i for i, s in enumerate(x.shape) if s == 1]
    ax = norm_axes(b, ax, x.rank)
    for a in ax:
        if x.shape[a] != 1:
            raise ShapeError(f"{b.where}: cannot squeeze axis {a} of shape {x.shape}: its size is not 1")
    return b.reshape_(x, [s for i, s in enumerate(x.shape) if i not in ax])


@onnx_op("Unsqueeze", const_inputs=(1,))
def unsqueeze(b, x, axes_in=None, *, axes=None):
    """Reshape inserting size-1 axes at the listed output positions."""
    ax = _axes_input(b, axes_in, axes)
    if ax is None:
        raise ShapeError(f"{b.where}: Unsqueeze needs axes")
    rank = x.rank + len(ax)
    ax = norm_axes(b, ax, rank)
    dims = iter(x.shape)
    return b.reshape_(x, [1 if i in ax else next(dims) for i in range(rank)])


@onnx_op("Concat")
def concat(b, *xs, axis=0):
    """Primitive `concat` (inputs of dtype/rank mismatch are rejected by the primitive). Concat-1's schema gives
    `axis` no default value; its documentation says 1."""
    xs = [x for x in xs if x is not None]
    if not xs:
        raise ShapeError(f"{b.where}: Concat needs at least one input")
    axis = b.norm_axis(1 if axis is None else axis, xs[0].rank)
    return xs[0] if len(xs) == 1 else b.concat(*xs, axis=axis)


@onnx_op("Split", const_inputs=(1,))
def split(b, x, split_in=None, *, axis=0, split=None, num_outputs=None):
    """One `slice` per output along `axis` (sizes from `split`, else equal parts, the last smaller). Split-1's
    schema gives `axis` no default value and documents none; Split-2 and later default to 0, as used here."""
    axis = b.norm_axis(0 if axis is None else axis, x.rank)
    d = x.shape[axis]
    sizes = ints(b.value_of(split_in, "split")) if split_in is not None else (
        ints(split) if split is not None else None)
    if sizes is None:
        n = int(num_outputs) if num_outputs is not None else b.n_outputs
        if num_outputs is not None and n != b.n_outputs:
            raise ShapeError(f"{b.where}: num_outputs is {n} but the node has {b.n_outputs} outputs")
        if num_outputs is None and d % n:
            raise ShapeError(f"{b.where}: dim {d} does not split into {n} equal parts")
        chunk = -(-d // n)
        sizes = [min(chunk, max(d - i * chunk, 0)) for i in range(n)]
    if sum(sizes) != d or any(s < 0 for s in sizes):
        raise ShapeError(f"{b.where}: split sizes {sizes} do not add up to dim {d} of axis {axis}")
    outs, start = [], 0
    for s in sizes:
        outs.append(slice_axes(b, x, {axis: (start, start + s, 1)}))
        start += s
    return outs


@onnx_op("Slice", const_inputs=(1, 2, 3, 4))
def slice_(b, x, starts_in=None, ends_in=None, axes_in=None, steps_in=None, *, starts=None, ends=None, axes=None):
    """Primitive `slice` with ONNX clamping (starts/ends/axes attributes before opset 10, inputs after)."""
    if b.opset >= 10:
        starts, ends = ints(b.value_of(starts_in, "starts")), ints(b.value_of(ends_in, "ends"))
        axes = None if axes_in is None else ints(b.value_of(axes_in, "axes"))
        steps = None if steps_in is None else ints(b.value_of(steps_in, "steps"))
    else:
        starts, ends, axes, steps = ints(starts), ints(ends), None if axes is None else ints(axes), None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeError(f"{b.where}: starts {starts}, ends {ends}, axes {axes}, steps {steps} differ in length")
    axes = norm_axes(b, axes, x.rank)
    return slice_axes(b, x, {a: (s, e, st) for a, s, e, st in zip(axes, starts, ends, steps)})


@onnx_op("Expand", const_inputs=(1,))
def expand(b, x, shape):
    """numpy broadcast of x against `shape`."""
    target = b.broadcast_shapes(x.shape, tuple(ints(b.value_of(shape, "shape"))))
    return b.broadcast_to(x, target)


@onnx_op("Tile", const_inputs=(1,))
def tile(b, x, repeats):
    """Reshape to [1, d0, 1, d1, ...], broadcast to [r0, d0, r1, d1, ...], reshape to [r0*d0, ...]."""
    reps = ints(b.value_of(repeats, "repeats"))
    if len(reps) != x.rank or any(r < 0 for r in reps):
        raise ShapeError(f"{b.where}: repeats {reps} must give one non-negative count per axis of {x.shape}")
    inter = [v for s in x.shape for v in (1, s)]
    big = [v for r, s in zip(reps, x.shape) for v in (r, s)]
    y = b.broadcast_to(b.reshape_(x, inter), big)
    return b.reshape_(y, [r * s for r, s in zip(reps, x.shape)])


def pad_array(b, x, pads, mode="constant", value=None):
    """Pad x by ``pads`` (begins + ends, possibly negative) in an ONNX Pad mode; value is a scalar Value."""
    n = x.rank
    begins, ends = pads[:n], pads[n:]
    x = slice_axes(b, x, {i: (max(-begins[i], 0), x.shape[i] - max(-ends[i], 0), 1)
                          for i in range(n) if begins[i] < 0 or ends[i] < 0})
    pb, pe = [max(p, 0) for p in begins], [max(p, 0) for p in ends]
    if not any(pb) and not any(pe):
        return x
    if mode == "constant":
        if value is None:
            return b.pad(x, pads=pb + pe, value=0.0, interior=[0] * n)
        if value.is_const:
            v = np.asarray(value.const).reshape(-1)
            fill = v[0].item() if v.size else 0
            return b.pad(x, pads=pb + pe, value=fill, interior=[0] * n)
        y = b.pad(x, pads=pb + pe, value=0.0, interior=[0] * n)
        mask = b.pad(b.const(np.ones(x.shape, bool)), pads=pb + pe, value=False, interior=[0] * n)
        return b.where_(mask, y, b.reshape_(b.cast_(value, x.dtype), ()))
    np_mode = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}.get(mode)
    if np_mode is None:
        raise ShapeError(f"{b.where}: pad mode '{mode}' is not supported; accepted: constant, reflect, edge, wrap")
    for i in range(n):
        if pb[i] or pe[i]:
            if x.shape[i] == 0:
                raise ShapeError(f"{b.where}: cannot pad an empty axis {i} in mode '{mode}'")
            idx = np.pad(np.arange(x.shape[i]), (pb[i], pe[i]), mode=np_mode)
            x = b.gather(x, b.const(idx, "int64"), axis=i)
    return x


@onnx_op("Pad", const_inputs=(1, 3))
def pad(b, x, pads_in=None, value_in=None, axes_in=None, *, mode="constant", pads=None, paddings=None,
        value=0.0):
    """Primitive `pad` (constant mode) or one `gather` per axis with numpy-built indices (other modes);
    negative pads `slice`."""
    if b.opset >= 11:
        p = ints(b.value_of(pads_in, "pads"))
        axes = None if axes_in is None else norm_axes(b, ints(b.value_of(axes_in, "axes")), x.rank)
    else:
        p, axes = ints(pads if pads is not None else paddings), None
        value_in = b.const(np.asarray(value, dtype=x.dtype.np))
    if axes is not None:
        if len(p) != 2 * len(axes):
            raise ShapeError(f"{b.where}: pads {p} must have 2 entries per axis of {axes}")
        full = [0] * (2 * x.rank)
        for j, a in enumerate(axes):
            full[a], full[a + x.rank] = p[j], p[j + len(axes)]
        p = full
    if len(p) != 2 * x.rank:
        raise ShapeError(f"{b.where}: pads {p} must have 2 entries per axis of {x.shape}")
    return pad_array(b, x, p, mode, value_in)


@onnx_op("CenterCropPad", const_inputs=(1,))
def center_crop_pad(b, x, shape, *, axes=None):
    """Per axis: centred `slice` when the target is smaller, centred zero `pad` when larger."""
    target = ints(b.value_of(shape, "shape"))
    axes = list(range(x.rank)) if axes is None else norm_axes(b, ints(axes), x.rank)
    if len(target) != len(axes):
        raise ShapeError(f"{b.where}: shape {target} must have one entry per axis of {axes}")
    pads = [0] * (2 * x.rank)
    for a, t in zip(axes, target):
        d = x.shape[a]
        if t < d:
            pads[a], pads[a + x.rank] = -((d - t) // 2), -(d - t - (d - t) // 2)
        else:
            pads[a], pads[a + x.rank] = (t - d) // 2, t - d - (t - d) // 2
    return pad_array(b, x, pads)


@onnx_op("DepthToSpace")
def depth_to_space(b, x, *, blocksize, mode="DCR"):
    """reshape -> transpose -> reshape (DCR or CRD channel order)."""
    n, c, h, w = x.shape
    bs = int(blocksize)
    if c % (bs * bs):
        raise ShapeError(f"{b.where}: channels {c} not divisible by blocksize**2 = {bs * bs}")
    if mode == "DCR":
        y = b.transpose_(b.reshape_(x, (n, bs, bs, c // bs ** 2, h, w)), (0, 3, 4, 1, 5, 2))
    else:
        y = b.transpose_(b.reshape_(x, (n, c // bs ** 2, bs, bs, h, w)), (0, 1, 4, 2, 5, 3))
    return b.reshape_(y, (n, c // bs ** 2, h * bs, w * bs))


@onnx_op("SpaceToDepth")
def space_to_depth(b, x, *, blocksize, mode="DCR"):
    """reshape -> transpose -> reshape (DCR or CRD channel order)."""
    if x.rank != 4 or int(blocksize) < 1:
        raise ShapeError(f"{b.where}: input {x.shape} and blocksize {blocksize}: a 4-D input and a blocksize >= 1 "
                         f"are accepted")
    n, c, h, w = x.shape
    bs = int(blocksize)
    if h % bs or w % bs:
        raise ShapeError(f"{b.where}: spatial dims {h}x{w} not divisible by blocksize {bs}")
    perm = (0, 3, 5, 1, 2, 4) if (mode or "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
    y = b.transpose_(b.reshape_(x, (n, c, h // bs, bs, w // bs, bs)), perm)
    return b.reshape_(y, (n, c * bs * bs, h // bs, w // bs))
