"""Family builders of the graph generator: how to pick the operands and attributes of one op so that the node
is valid for its ONNX schema. Each builder is ``f(draft, op, recipe) -> (input names, attrs, n_outputs)``
or ``None`` when the current values offer nothing it can use; the per-op choices live in ``recipes.py``.
"""
from __future__ import annotations

import numpy as np
import onnx.defs
from onnx import numpy_helper

from glow_core.types import dtype as gdtype
from .recipes import F, I

INT_T = ("int32", "int64")


def _rank(d, lo=0, hi=4):
    return int(d.rng.integers(lo, hi + 1))


def _split_numel(rng, n, rank):
    """A random shape of ``rank`` dims whose product is ``n``."""
    dims = [1] * rank
    if rank == 0:
        return [] if n == 1 else None
    rem = n
    for i in range(rank - 1):
        divs = [k for k in range(1, rem + 1) if rem % k == 0] if rem else [0, 1]
        dims[i] = int(rng.choice(divs))
        rem = rem // dims[i] if dims[i] else rem
    dims[-1] = rem if all(dims[:-1]) else (0 if n == 0 else rem)
    return dims if int(np.prod(dims)) == n else None


def _variant(rng, shape):
    """A shape that broadcasts to ``shape`` (leading dims dropped, some dims set to 1)."""
    s = list(shape)
    drop = int(rng.integers(0, len(s) + 1)) if rng.random() < 0.4 else 0
    s = s[drop:]
    return [1 if rng.random() < 0.3 else x for x in s]


def _grow(rng, shape):
    """A shape that ``shape`` broadcasts to (1-dims widened, leading dims added)."""
    s = [int(rng.integers(2, 4)) if x == 1 and rng.random() < 0.5 else x for x in shape]
    if len(s) < 4 and rng.random() < 0.3:
        s = [int(rng.integers(1, 4))] + s
    return s


def unary(d, op, r):
    x = d.pick(r, min_rank=r.params.get("min_rank", 0), max_rank=r.params.get("max_rank", 4))
    return [x.name], {}, 1


def binary(d, op, r):
    a = d.pick(r)
    if r.params.get("unidirectional"):
        bshape = _variant(d.rng, a.shape)
    else:
        base = _grow(d.rng, a.shape) if d.rng.random() < 0.3 else list(a.shape)
        bshape = _variant(d.rng, base) if d.rng.random() < 0.6 else base
    if r.params.get("nonzero_rhs"):
        b = d.fresh(a.dtype, bshape, nonzero=True)
    elif r.params.get("shift"):
        b = d.fresh(a.dtype, bshape, domain=(0, gdtype(a.dtype).itemsize * 8 - 1), special=False)
    else:
        b = d.pick_like(a.dtype, bshape, r)
    attrs = {}
    if op == "Mod" and gdtype(a.dtype).is_float:
        attrs["fmod"] = 1
    names = [a.name, b.name]
    if not r.params.get("unidirectional") and not r.params.get("nonzero_rhs") and not r.params.get("shift") \
            and d.rng.random() < 0.5:
        names.reverse()
    return names, attrs, 1


def variadic(d, op, r):
    a = d.pick(r)
    names = [a.name]
    for _ in range(int(d.rng.integers(0, 3))):
        names.append(d.pick_like(a.dtype, _variant(d.rng, a.shape), r).name)
    d.rng.shuffle(names)
    return names, {}, 1


def where(d, op, r):
    x = d.pick(r)
    c = d.pick_like("bool", _variant(d.rng, x.shape), r)
    y = d.pick_like(x.dtype, _variant(d.rng, x.shape), r)
    return [c.name, x.name, y.name], {}, 1


def clip(d, op, r):
    x = d.pick(r)
    lo, hi = sorted(d.rng.uniform(-3, 3, 2))
    if not gdtype(x.dtype).is_float:
        lo, hi = int(lo), int(hi) + 1
    names = [x.name]
    choice = d.rng.integers(0, 4)
    if choice >= 1:
        names.append(d.const(np.asarray(lo, gdtype(x.dtype).np)) if choice != 2 else "")
    if choice >= 2:
        names.append(d.const(np.asarray(hi, gdtype(x.dtype).np)))
    return names, {}, 1


def reduce(d, op, r):
    x = d.pick(r)
    rank = len(x.shape)
    names = [x.name]
    if rank and d.rng.random() < 0.8:
        k = int(d.rng.integers(1, rank + 1))
        axes = d.rng.choice(rank, k, replace=False)
        axes = [int(a) - (rank if d.rng.random() < 0.3 else 0) for a in axes]
        names.append(d.const(np.asarray(axes, np.int64)))
    return names, {}, 1


def axis(d, op, r):
    x = d.pick(r, min_rank=r.params.get("min_rank", 0))
    return [x.name], {}, 1


def cumsum(d, op, r):
    x = d.pick(r, min_rank=1)
    ax = int(d.rng.integers(-len(x.shape), len(x.shape)))
    return [x.name, d.const(np.asarray(ax, d.rng.choice(INT_T)))], {}, 1


def topk(d, op, r):
    x = d.pick(r, min_rank=1)
    ax = int(d.rng.integers(-len(x.shape), len(x.shape)))
    k = int(d.rng.integers(0, x.shape[ax] + 1))
    return [x.name, d.const(np.asarray([k], np.int64))], {"axis": ax}, 2


def transpose(d, op, r):
    x = d.pick(r)
    attrs = {} if d.rng.random() < 0.2 or not x.shape else {"perm": [int(p) for p in d.rng.permutation(len(x.shape))]}
    return [x.name], attrs, 1


def reshape(d, op, r):
    x = d.pick(r)
    n = int(np.prod(x.shape))
    for _ in range(10):
        s = _split_numel(d.rng, n, _rank(d, 0, 4))
        if s is not None:
            break
    else:
        return None
    attrs = {}
    if s and n and d.rng.random() < 0.3:
        s[int(d.rng.integers(0, len(s)))] = -1
    elif s and d.rng.random() < 0.2:
        i = int(d.rng.integers(0, min(len(s), len(x.shape)) or 1))
        if i < len(x.shape) and i < len(s) and s[i] == x.shape[i] and n:
            s[i] = 0
    if 0 in s and n == 0:
        attrs["allowzero"] = 1
    return [x.name, d.const(np.asarray(s, np.int64))], attrs, 1


def squeeze(d, op, r):
    x = d.pick(r)
    ones = [i for i, s in enumerate(x.shape) if s == 1]
    if ones and d.rng.random() < 0.7:
        k = int(d.rng.integers(1, len(ones) + 1))
        axes = [int(a) for a in d.rng.choice(ones, k, replace=False)]
        return [x.name, d.const(np.asarray(axes, np.int64))], {}, 1
    return [x.name], {}, 1


def unsqueeze(d, op, r):
    x = d.pick(r, max_rank=3)
    k = int(d.rng.integers(1, 3))
    new_rank = len(x.shape) + k
    axes = [int(a) for a in d.rng.choice(new_rank, k, replace=False)]
    axes = [a - new_rank if d.rng.random() < 0.3 else a for a in axes]
    return [x.name, d.const(np.asarray(axes, np.int64))], {}, 1


def slice_(d, op, r):
    x = d.pick(r, min_rank=1)
    rank = len(x.shape)
    k = int(d.rng.integers(1, rank + 1))
    axes = [int(a) for a in d.rng.choice(rank, k, replace=False)]
    starts, ends, steps = [], [], []
    for a in axes:
        n = x.shape[a]
        step = int(d.rng.choice([1, 1, 2, 3, -1, -2]))
        lo, hi = int(d.rng.integers(-n - 2, n + 3)), int(d.rng.integers(-n - 2, n + 3))
        if d.rng.random() < 0.15:
            hi = int(np.iinfo(np.int64).max if step > 0 else np.iinfo(np.int64).min)
        starts.append(lo)
        ends.append(hi)
        steps.append(step)
    names = [x.name, d.const(np.asarray(starts, np.int64)), d.const(np.asarray(ends, np.int64))]
    if d.rng.random() < 0.8 or any(s != 1 for s in steps) or axes != list(range(k)):
        names.append(d.const(np.asarray([a - rank if d.rng.random() < 0.3 else a for a in axes], np.int64)))
        if d.rng.random() < 0.8 or any(s != 1 for s in steps):
            names.append(d.const(np.asarray(steps, np.int64)))
    return names, {}, 1


def expand(d, op, r):
    x = d.pick(r)
    target = _grow(d.rng, x.shape)
    target = [1 if (t > 1 and d.rng.random() < 0.1) else t for t in target]  # bidirectional: 1 keeps x's dim
    return [x.name, d.const(np.asarray(target, np.int64))], {}, 1


def concat(d, op, r):
    x = d.pick(r, min_rank=1)
    ax = int(d.rng.integers(0, len(x.shape)))
    names = [x.name]
    for _ in range(int(d.rng.integers(0, 3))):
        s = list(x.shape)
        s[ax] = int(d.rng.integers(0, 4)) if d.rng.random() < 0.5 else s[ax]
        names.append(d.pick_like(x.dtype, s, r).name)
    d.rng.shuffle(names)
    return names, {"axis": ax - (len(x.shape) if d.rng.random() < 0.3 else 0)}, 1


def split(d, op, r):
    x = d.pick(r, min_rank=1)
    ax = int(d.rng.integers(0, len(x.shape)))
    n = x.shape[ax]
    if d.rng.random() < 0.5 and n >= 1:
        k = int(d.rng.integers(1, min(n, 4) + 1))
        return [x.name], {"axis": ax, "num_outputs": k}, k
    parts = []
    rem = n
    while rem > 0 and len(parts) < 3:
        p = int(d.rng.integers(0, rem + 1))
        parts.append(p)
        rem -= p
    parts.append(rem)
    return [x.name, d.const(np.asarray(parts, np.int64))], {"axis": ax}, len(parts)


def tile(d, op, r):
    x = d.pick(r)
    reps = d.rng.integers(1, 4, len(x.shape))
    return [x.name, d.const(np.asarray(reps, np.int64))], {}, 1


def pad(d, op, r):
    x = d.pick(r, min_rank=1)
    mode = r.params["modes"][int(d.rng.integers(0, len(r.params["modes"])))]
    rank = len(x.shape)
    pads = []
    for side in range(2):
        for a in range(rank):
            n = x.shape[a]
            if mode in ("reflect",):
                hi = max(0, n - 1)
            elif mode in ("edge", "wrap"):
                hi = 3 if n else 0
            else:
                hi = 3
            lo = -n if mode in (None, "constant") and d.rng.random() < 0.2 else 0
            pads.append(int(d.rng.integers(lo, hi + 1)))
    names = [x.name, d.const(np.asarray(pads, np.int64))]
    if mode in (None, "constant") and d.rng.random() < 0.5:
        names.append(d.const(np.asarray(d.rng.uniform(-3, 3), gdtype(x.dtype).np)))
    attrs = {} if mode is None else {"mode": mode}
    return names, attrs, 1


def _indices(d, lo_hi_n, shape):
    n = lo_hi_n
    return d.rng.integers(-n, n, size=shape).astype(d.rng.choice(INT_T)) if n else np.zeros(shape, np.int64)


def gather(d, op, r):
    x = d.pick(r, min_rank=1)
    ax = int(d.rng.integers(0, len(x.shape)))
    if x.shape[ax] == 0:
        return None
    ishape = [int(v) for v in d.rng.integers(1, 4, _rank(d, 0, 2))]
    return [x.name, d.const(_indices(d, x.shape[ax], ishape))], {"axis": ax}, 1


def gather_elements(d, op, r):
    x = d.pick(r, min_rank=1)
    ax = int(d.rng.integers(0, len(x.shape)))
    if x.shape[ax] == 0:
        return None
    ishape = [int(d.rng.integers(1, s + 1)) if s else 0 for s in x.shape]
    ishape[ax] = int(d.rng.integers(1, 4))
    return [x.name, d.const(_indices(d, x.shape[ax], ishape))], {"axis": ax}, 1


def gather_nd(d, op, r):
    x = d.pick(r, min_rank=1)
    k = int(d.rng.integers(1, len(x.shape) + 1))
    if any(s == 0 for s in x.shape[:k]):
        return None
    lead = [int(v) for v in d.rng.integers(1, 4, _rank(d, 0, 2))]
    idx = np.stack([d.rng.integers(-s, s, lead) for s in x.shape[:k]], axis=-1).astype(np.int64)
    return [x.name, d.const(idx)], {}, 1


def scatter_elements(d, op, r):
    x = d.pick(r, min_rank=1)
    ax = int(d.rng.integers(0, len(x.shape)))
    n = x.shape[ax]
    if n == 0:
        return None
    ishape = [int(d.rng.integers(1, s + 1)) if s else 0 for s in x.shape]
    k = int(d.rng.integers(1, n + 1))
    ishape[ax] = k
    line = d.rng.permutation(n)[:k]  # distinct along the axis: no write order to depend on
    idx = np.broadcast_to(line.reshape([-1 if i == ax else 1 for i in range(len(x.shape))]), ishape)
    upd = d.pick_like(x.dtype, ishape, r)
    return [x.name, d.const(np.ascontiguousarray(idx).astype(np.int64)), upd.name], {"axis": ax}, 1


def scatter_nd(d, op, r):
    x = d.pick(r, min_rank=1)
    k = int(d.rng.integers(1, len(x.shape) + 1))
    cells = int(np.prod(x.shape[:k]))
    if cells == 0:
        return None
    m = int(d.rng.integers(1, min(cells, 4) + 1))
    flat = d.rng.choice(cells, m, replace=False)
    idx = np.stack(np.unravel_index(flat, x.shape[:k]), axis=-1).astype(np.int64)
    upd = d.pick_like(x.dtype, [m] + list(x.shape[k:]), r)
    return [x.name, d.const(idx), upd.name], {}, 1


def depth_to_space(d, op, r):
    b = int(d.rng.integers(1, 3))
    x = d.fresh_or(r, [int(d.rng.integers(1, 3)), b * b * int(d.rng.integers(1, 3)), int(d.rng.integers(1, 4)),
                       int(d.rng.integers(1, 4))], lambda s: len(s) == 4 and s[1] % (b * b) == 0)
    return [x.name], {"blocksize": b}, 1


def space_to_depth(d, op, r):
    b = int(d.rng.integers(1, 3))
    x = d.fresh_or(r, [1, int(d.rng.integers(1, 3)), b * int(d.rng.integers(1, 3)), b * int(d.rng.integers(1, 3))],
                   lambda s: len(s) == 4 and s[2] % b == 0 and s[3] % b == 0)
    return [x.name], {"blocksize": b}, 1


def shape(d, op, r):
    x = d.pick(r)
    attrs = {}
    if x.shape and d.rng.random() < 0.4:
        attrs["start"] = int(d.rng.integers(-len(x.shape) - 1, len(x.shape) + 1))
    if x.shape and d.rng.random() < 0.4:
        attrs["end"] = int(d.rng.integers(-len(x.shape) - 1, len(x.shape) + 1))
    return [x.name], attrs, 1


def trilu(d, op, r):
    x = d.pick(r, min_rank=2)
    names = [x.name]
    if d.rng.random() < 0.6:
        names.append(d.const(np.asarray(int(d.rng.integers(-3, 4)), np.int64)))
    return names, {}, 1


def cast(d, op, r):
    to = str(d.rng.choice(F + I + ("bool",)))
    src = str(d.rng.choice(r.dtypes))
    if gdtype(src).is_float and not gdtype(to).is_float and to != "bool":
        info = np.iinfo(gdtype(to).np)  # float -> int outside the range is undefined in ONNX: stay inside it
        x = d.fresh(src, d.shape(), domain=(max(info.min, -100), min(info.max, 100)), special=False)
    else:
        x = d.pick(r, dtypes=(src,))
    if op == "CastLike":
        return [x.name, d.const(np.zeros([1], gdtype(to).np))], {}, 1
    return [x.name], {"to": gdtype(to).onnx}, 1


castlike = cast


def reverse_sequence(d, op, r):
    x = d.pick(r, min_rank=2)
    batch_axis = int(d.rng.integers(0, 2))
    time_axis = 1 - batch_axis
    lens = d.rng.integers(0 if x.shape[time_axis] == 0 else 1, x.shape[time_axis] + 1, x.shape[batch_axis])
    return [x.name, d.const(lens.astype(np.int64))], {"batch_axis": batch_axis, "time_axis": time_axis}, 1


def compress(d, op, r):
    x = d.pick(r, min_rank=1)
    if d.rng.random() < 0.6:
        ax = int(d.rng.integers(0, len(x.shape)))
        cond = d.rng.random(int(d.rng.integers(0, x.shape[ax] + 1))) < 0.5
        return [x.name, d.const(cond)], {"axis": ax}, 1
    cond = d.rng.random(int(d.rng.integers(0, int(np.prod(x.shape)) + 1))) < 0.5
    return [x.name, d.const(cond)], {}, 1


def constant_of_shape(d, op, r):
    s = d.shape()
    dt = gdtype(str(d.rng.choice(r.dtypes)))
    return [d.const(np.asarray(s, np.int64))], {"value": numpy_helper.from_array(
        np.asarray([d.rng.uniform(-3, 3)]).astype(dt.np), "value")}, 1


def range_(d, op, r):
    dt = gdtype(str(d.rng.choice(r.dtypes)))
    start = d.rng.uniform(-5, 5)
    delta = d.rng.choice([-2, -1, 0.5, 1, 2, 3]) if dt.is_float else d.rng.choice([-2, -1, 1, 2, 3])
    limit = start + delta * d.rng.integers(0, 8)
    vals = [np.asarray(v).astype(dt.np) for v in (start, limit, delta)]
    return [d.const(v) for v in vals], {}, 1


def onehot(d, op, r):
    x = d.pick(r, dtypes=("int32", "int64"), max_rank=2)
    depth = int(d.rng.integers(1, 6))
    vals = np.asarray(d.rng.uniform(-3, 3, 2)).astype(gdtype(str(d.rng.choice(r.dtypes))).np)
    ax = int(d.rng.integers(-len(x.shape) - 1, len(x.shape) + 1))
    return [x.name, d.const(np.asarray(depth, np.int64)), d.const(vals)], {"axis": ax}, 1


def center_crop_pad(d, op, r):
    x = d.pick(r, min_rank=1)
    s = [int(d.rng.integers(1, n + 3)) for n in x.shape]
    return [x.name, d.const(np.asarray(s, np.int64))], {}, 1


def unique(d, op, r):
    x = d.pick(r, max_rank=2)
    attrs = {} if d.rng.random() < 0.5 else {"sorted": 0}
    return [x.name], attrs, 4


def _window(d, spatial, pool=False):
    """Kernel, strides, dilations, pads and input sizes of one windowed op (every output dim >= 1)."""
    ks, st, dl, pads_b, pads_e, sizes = [], [], [], [], [], []
    for _ in range(spatial):
        k = int(d.rng.integers(1, 6))
        s = int(d.rng.choice([1, 1, 2, 3]))
        dil = int(d.rng.choice([1, 1, 2, 3]))
        ext = (k - 1) * dil + 1
        hi = k - 1 if pool else 4
        pb, pe = int(d.rng.integers(0, hi + 1)), int(d.rng.integers(0, hi + 1))
        n = int(d.rng.integers(max(1, ext - pb - pe), max(1, ext - pb - pe) + 6))
        ks.append(k), st.append(s), dl.append(dil), pads_b.append(pb), pads_e.append(pe), sizes.append(n)
    return ks, st, dl, pads_b + pads_e, sizes


def conv(d, op, r):
    if d.rng.random() < r.params.get("paths", 0.0):
        return conv_paths(d, op, r)
    spatial = int(d.rng.choice([1, 2, 2, 2, 3]))
    ks, st, dl, pads, sizes = _window(d, spatial)
    g = int(d.rng.choice([1, 1, 1, 2, 3]))
    cg, fg, n = int(d.rng.integers(1, 4)), int(d.rng.integers(1, 4)), int(d.rng.integers(1, 3))
    if d.rng.random() < 0.2:  # depthwise
        cg, fg = 1, 1
    dt = str(d.rng.choice(r.dtypes))
    x = d.fresh_or(r, [n, g * cg] + sizes, lambda s: False, dtype=dt)
    # finite weights: whether the zeros of the padding times an infinite weight give NaN (im2col + GEMM, as
    # onnxruntime) or add nothing (the interpreter) is left open by the specification
    w = d.pick_like(dt, [g * fg, cg] + ks, r, special=False)
    names = [x.name, w.name]
    if d.rng.random() < 0.5:
        names.append(d.pick_like(dt, [g * fg], r).name)
    attrs = {"group": g} if g > 1 or d.rng.random() < 0.3 else {}
    if d.rng.random() < 0.8:
        attrs["kernel_shape"] = ks
    for k, v, default in (("strides", st, 1), ("dilations", dl, 1)):
        if any(x != default for x in v) or d.rng.random() < 0.3:
            attrs[k] = v
    if d.rng.random() < 0.15:
        attrs["auto_pad"] = str(d.rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    elif any(pads) or d.rng.random() < 0.3:
        attrs["pads"] = pads
    return names, attrs, 1


#: Channel structures of ``conv_paths``: (input channels per group, filters per group), None where it draws a
#: count. Each is a path of the CPU conv engine (depthwise, channel multiplier, direct with one-lane or
#: block-aligned input groups, few-channel stems) at C/group = 1 or M/group = 1, or a dense conv around them.
CONV_STRUCTURES = {"depthwise": (1, 1), "multiplier": (1, None), "one filter per group": (None, 1),
                   "one channel": (1, None), "one filter": (None, 1), "dense": (None, None), "aligned groups": (8, 8)}


def conv_paths(d, op, r):
    """A Conv with a constant filter (the CPU conv engine takes only those: a filter fed at run time takes the
    generic kernels) whose geometry is drawn from the engine's paths: one input channel or one filter per group
    (``CONV_STRUCTURES``), group counts across a channel block (8 and 16 lanes), pointwise windows (1x1, stride 1,
    no padding: the engine flattens their rows into one) in a third of them, else strides, dilations and
    padding, 1-d and 2-d; its input is sometimes an existing value (another conv's output: the engine then reads
    the blocked layout)."""
    from .generator import MAX_NUMEL
    rng = d.rng
    dt = "float32" if rng.random() < 0.8 or "float32" not in r.dtypes else str(rng.choice(r.dtypes))
    kind = str(rng.choice(list(CONV_STRUCTURES)))
    cg, fg = CONV_STRUCTURES[kind]
    known = [v for v in d.values if v.dtype == dt and len(v.shape) in (3, 4) and min(v.shape) >= 1
             and v.shape[1] <= 40 and not v.special]
    x = known[int(rng.integers(0, len(known)))] if known and rng.random() < 0.4 else None
    if x is not None:  # the channel count is the input's: a structure that divides it
        n, c, sizes = x.shape[0], x.shape[1], list(x.shape[2:])
        divs = [g for g in range(1, c + 1) if c % g == 0]
        g = {"depthwise": c, "multiplier": c, "one channel": c, "one filter": 1, "dense": 1}.get(kind) or \
            int(rng.choice([g for g in divs if (kind != "aligned groups" or (c // g) % 8 == 0)] or [1]))
        cg = c // g
    else:
        n = int(rng.choice([1, 1, 2]))
        g = 1 if kind in ("one channel", "one filter", "dense") else \
            2 if kind == "aligned groups" else int(rng.choice([1, 2, 3, 5, 8, 16, 17]))
        cg = cg or int(rng.choice([1, 2, 3, 4, 9, 17]))
        c, sizes = g * cg, None
    fg = fg or int(rng.choice([1, 2, 3, 4, 7, 16, 20]))
    spatial = len(sizes) if sizes else int(rng.choice([1, 2, 2]))
    ks, st, dl, pads_b, pads_e = [], [], [], [], []
    pointwise = rng.random() < 0.35  # 1x1, stride 1, no padding: rows the engine flattens into one
    for i in range(spatial):
        k = 1 if pointwise else int(rng.choice([1, 1, 2, 3]))
        s, dil = (1, 1) if pointwise else (int(rng.choice([1, 1, 2, 3])), int(rng.choice([1, 1, 2])) if k > 1 else 1)
        pb, pe = (int(rng.integers(0, k + 1)), int(rng.integers(0, k + 1))) if not pointwise and rng.random() < 0.4 \
            else (0, 0)
        if sizes is not None and (k - 1) * dil + 1 > sizes[i] + pb + pe:  # an existing input too small: one tap
            k, dil = 1, 1
        ks.append(k), st.append(s), dl.append(dil), pads_b.append(pb), pads_e.append(pe)
    least = [max(1, (k - 1) * dil + 1 - pb - pe) for k, dil, pb, pe in zip(ks, dl, pads_b, pads_e)]
    if sizes is None:
        sizes = [lo + int(rng.integers(0, 9 if spatial == 1 else 7)) for lo in least]
    out = [(size + pb + pe - (k - 1) * dil - 1) // s + 1
           for size, k, dil, pb, pe, s in zip(sizes, ks, dl, pads_b, pads_e, st)]
    if min(out) < 1 or n * g * fg * int(np.prod(out)) > MAX_NUMEL:
        return None
    if x is None:
        x = d.fresh(dt, [n, c] + sizes, r.domain, special=False)
    w = (rng.standard_normal([g * fg, cg] + ks) / np.sqrt(cg * int(np.prod(ks)))).astype(gdtype(dt).np)
    names = [x.name, d.const(w)]
    u = rng.random()
    if u < 0.5:
        names.append(d.const(rng.uniform(-1, 1, g * fg).astype(gdtype(dt).np)))
    elif u < 0.7:
        names.append(d.pick_like(dt, [g * fg], r).name)
    attrs = {"group": g} if g > 1 or rng.random() < 0.3 else {}
    if rng.random() < 0.8:
        attrs["kernel_shape"] = ks
    for key, v in (("strides", st), ("dilations", dl)):
        if any(x_ != 1 for x_ in v) or rng.random() < 0.3:
            attrs[key] = v
    if any(pads_b + pads_e) or rng.random() < 0.3:
        attrs["pads"] = pads_b + pads_e
    return names, attrs, 1


def conv_transpose(d, op, r):
    spatial = int(d.rng.choice([1, 2, 2]))
    ks = [int(d.rng.integers(1, 4)) for _ in range(spatial)]
    st = [int(d.rng.choice([1, 2, 3])) for _ in range(spatial)]
    dl = [int(d.rng.choice([1, 1, 2])) for _ in range(spatial)]
    sizes = [int(d.rng.integers(1, 5)) for _ in range(spatial)]
    pads = [int(d.rng.integers(0, k)) for k in ks] * 2
    g = int(d.rng.choice([1, 1, 2]))
    cg, fg = int(d.rng.integers(1, 3)), int(d.rng.integers(1, 3))
    dt = str(d.rng.choice(r.dtypes))
    x = d.fresh_or(r, [1, g * cg] + sizes, lambda s: False, dtype=dt)
    w = d.pick_like(dt, [g * cg, fg] + ks, r, special=False)
    names = [x.name, w.name]
    if d.rng.random() < 0.5:
        names.append(d.pick_like(dt, [g * fg], r).name)
    attrs = {"group": g, "strides": st, "dilations": dl, "pads": pads}
    if d.rng.random() < 0.3:
        attrs["output_padding"] = [int(d.rng.integers(0, min(s, dd) if min(s, dd) else 1)) if s > 1 else 0
                                   for s, dd in zip(st, dl)]
    return names, attrs, 1


def pool(d, op, r):
    spatial = int(d.rng.choice([1, 2, 2, 3]))
    ks, st, dl, pads, sizes = _window(d, spatial, pool=True)
    dt = str(d.rng.choice(r.dtypes))
    x = d.fresh_or(r, [int(d.rng.integers(1, 3)), int(d.rng.integers(1, 4))] + sizes, lambda s: False, dtype=dt)
    attrs = {"kernel_shape": ks}
    if any(v != 1 for v in st) or d.rng.random() < 0.3:
        attrs["strides"] = st
    if any(pads):
        attrs["pads"] = pads
    if op == "MaxPool" and any(v != 1 for v in dl):
        attrs["dilations"] = dl
    if op != "LpPool" and d.rng.random() < 0.3:
        attrs["ceil_mode"] = 1
    if op == "AveragePool" and d.rng.random() < 0.4:
        attrs["count_include_pad"] = 1
    if op == "LpPool" and d.rng.random() < 0.5:
        attrs["p"] = int(d.rng.choice([1, 3]))
    return [x.name], attrs, 1


def matmul(d, op, r):
    dt = str(d.rng.choice(r.dtypes))
    m, k, n = (int(d.rng.integers(1, 9)) for _ in range(3))
    batch = [int(v) for v in d.rng.integers(1, 4, _rank(d, 0, 2))]
    ashape = batch + [m, k] if d.rng.random() < 0.85 else [k]
    bshape = (_variant(d.rng, batch) + [k, n]) if d.rng.random() < 0.85 else [k]
    if len(ashape) == 1 and len(bshape) == 1:
        bshape = [k, n]
    a = d.pick_like(dt, ashape, r)
    b = d.pick_like(dt, bshape, r)
    return [a.name, b.name], {}, 1


def gemm(d, op, r):
    dt = str(d.rng.choice(r.dtypes))
    m, k, n = (int(d.rng.integers(1, 9)) for _ in range(3))
    ta, tb = int(d.rng.integers(0, 2)), int(d.rng.integers(0, 2))
    a = d.pick_like(dt, [k, m] if ta else [m, k], r)
    b = d.pick_like(dt, [n, k] if tb else [k, n], r)
    names = [a.name, b.name]
    if d.rng.random() < 0.6:
        names.append(d.pick_like(dt, _variant(d.rng, [m, n]), r).name)
    attrs = {k_: v for k_, v in (("transA", ta), ("transB", tb)) if v}
    if d.rng.random() < 0.3:
        attrs["alpha"] = float(d.rng.choice([0.5, 2.0, -1.0]))
    if d.rng.random() < 0.3:
        attrs["beta"] = float(d.rng.choice([0.0, 0.5, 2.0]))
    return names, attrs, 1


EINSUM = ("ij,jk->ik", "bij,bjk->bik", "ij->ji", "ii->i", "ij->", "i,i->", "ij,j->i", "bhqd,bhkd->bhqk", "ijk->kji",
          "ij,ij->ij", "i,j->ij", "...ij,...jk->...ik")


def einsum(d, op, r):
    eq = str(d.rng.choice(EINSUM))
    dt = str(d.rng.choice(r.dtypes))
    sizes = {c: int(d.rng.integers(1, 5)) for c in "bhijkqd"}
    lhs = eq.split("->")[0].split(",")
    names = []
    for term in lhs:
        s = ([2] if term.startswith("...") else []) + [sizes[c] for c in term.replace("...", "")]
        names.append(d.pick_like(dt, s, r).name)
    return names, {"equation": eq}, 1


def _channels(d, r, min_rank=2):
    dt = str(d.rng.choice(r.dtypes))
    x = d.pick(r, dtypes=(dt,), min_rank=min_rank)
    if len(x.shape) < min_rank or x.shape[1] == 0:
        return None, None
    return x, dt


def batchnorm(d, op, r):
    x, dt = _channels(d, r)
    if x is None:
        return None
    c = x.shape[1]
    np_dt = gdtype(dt).np
    ins = [x.name] + [d.const(a.astype(np_dt)) for a in (d.rng.uniform(0.5, 2, c), d.rng.uniform(-1, 1, c),
                                                           d.rng.uniform(-1, 1, c), d.rng.uniform(0.2, 2, c))]
    return ins, {}, 1


def channel_norm(d, op, r):
    x, dt = _channels(d, r, min_rank=3)
    if x is None:
        return None
    c = x.shape[1]
    np_dt = gdtype(dt).np
    attrs = {}
    if op == "GroupNormalization":
        divs = [k for k in range(1, c + 1) if c % k == 0]
        attrs["num_groups"] = int(d.rng.choice(divs))
    return [x.name, d.const(d.rng.uniform(0.5, 2, c).astype(np_dt)), d.const(d.rng.uniform(-1, 1, c).astype(np_dt))], \
        attrs, 1


def layernorm(d, op, r):
    x = d.pick(r, min_rank=1)
    ax = int(d.rng.integers(-len(x.shape), len(x.shape)))
    s = x.shape[ax:] if ax >= 0 else x.shape[len(x.shape) + ax:]
    np_dt = gdtype(x.dtype).np
    names = [x.name, d.const(d.rng.uniform(0.5, 2, s).astype(np_dt))]
    if op == "LayerNormalization" and d.rng.random() < 0.6:
        names.append(d.const(d.rng.uniform(-1, 1, s).astype(np_dt)))
    return names, {"axis": ax}, 1


def mvn(d, op, r):
    x = d.pick(r, min_rank=1)
    k = int(d.rng.integers(1, len(x.shape) + 1))
    axes = sorted(int(a) for a in d.rng.choice(len(x.shape), k, replace=False))
    return [x.name], {"axes": axes}, 1


def lrn(d, op, r):
    x, dt = _channels(d, r, min_rank=3)
    if x is None:
        return None
    return [x.name], {"size": int(d.rng.choice([1, 3, 5]))}, 1


def dft(d, op, r):
    """DFT over a signal axis of a real ([..., 1]) or complex ([..., 2]) input: ``axis`` and ``dft_length`` as
    scalars (the specification takes nothing else), the axis in [-r, -2] or [0, r - 2]."""
    rng = d.rng
    if d.opset < 20:  # axis an attribute before: drawn by the generic family's schema then
        return None
    dt = str(rng.choice([t for t in r.dtypes if d.dtypes is None or t in d.dtypes] or list(r.dtypes)))
    known = [v for v in d.values if v.dtype == dt and 3 <= len(v.shape) <= 4 and v.shape[-1] in (1, 2)
             and min(v.shape) >= 1 and not (r.finite and v.special)]
    x = known[int(rng.integers(0, len(known)))] if known and rng.random() < 0.5 else \
        d.fresh(dt, [int(rng.integers(1, 3)), int(rng.integers(1, 9)), int(rng.choice([1, 2]))], r.domain,
                special=not r.finite)
    rank = len(x.shape)
    ax = int(rng.choice(list(range(-rank, -1)) + list(range(0, rank - 1))))
    attrs = {}
    if rng.random() < 0.4:
        attrs["inverse"] = 1
    if x.shape[-1] == 1 and "inverse" not in attrs and rng.random() < 0.4:
        attrs["onesided"] = 1
    n = x.shape[ax]
    length = d.const(np.asarray(int(rng.integers(1, 2 * n + 2)), np.int64)) if rng.random() < 0.4 else ""
    return [x.name, length, d.const(np.asarray(ax, np.int64))], attrs, 1


def quantize(d, op, r):
    """(De)QuantizeLinear with scale and zero point of one of the specification's granularities: per tensor
    (a scalar), per axis (1-D of the axis' length) or blocked (the input's shape with ceil(D / block_size) on the
    axis), the zero point of the scale's shape."""
    rng = d.rng
    if op == "QuantizeLinear":
        x = d.pick(r, dtypes=tuple(t for t in ("float32", "float16") if t in r.dtypes))
        qdt = str(rng.choice(["uint8", "int8"]))
        sdt = "float32" if rng.random() < 0.8 or x.dtype == "float32" else x.dtype
    else:
        x = d.pick(r, dtypes=("int8", "uint8", "int32"))
        qdt, sdt = x.dtype, str(rng.choice(["float32", "float32", "float16"]))
    shape, rank = list(x.shape), len(x.shape)
    kind = str(rng.choice(["tensor", "axis", "block"])) if rank and min(shape) >= 1 else "tensor"
    attrs = {}
    if kind == "tensor":
        sshape = []
        if rank and rng.random() < 0.3:  # unused for a per-tensor scale, even out of range
            attrs["axis"] = int(rng.integers(-rank - 2, rank + 2))
    else:
        ax = int(rng.integers(-rank, rank))
        if ax != 1 or rng.random() < 0.5:
            attrs["axis"] = ax
        if kind == "axis":
            sshape = [shape[ax]]
        else:
            bs = int(rng.integers(1, shape[ax] + 2))
            attrs["block_size"] = bs
            sshape = list(shape)
            sshape[ax] = -(-shape[ax] // bs)
    scale = rng.uniform(0.02, 1.0, sshape).astype(gdtype(sdt).np)
    names = [x.name, d.const(scale)]
    if qdt != "int32" and rng.random() < 0.7:
        lo, hi = (0, 255) if qdt == "uint8" else (-128, 127)
        names.append(d.const(rng.integers(lo, hi + 1, sshape).astype(gdtype(qdt).np)))
    elif op == "QuantizeLinear" and qdt == "int8" and d.opset >= 21:
        attrs["output_dtype"] = int(gdtype("int8").onnx)
    return names, attrs, 1


def generic(d, op, r):
    """Operands from ONNX's schema: each type variable bound to one dtype, shapes random, no attributes."""
    try:
        schema = onnx.defs.get_schema(op, d.opset)
    except onnx.defs.SchemaError:
        return None
    if any(a.required for a in schema.attributes.values()):
        return None
    allowed = {tc.type_param_str: [t[len("tensor("):-1] for t in tc.allowed_type_strs if t.startswith("tensor(")]
               for tc in schema.type_constraints}
    names_of = {"float": "float32", "double": "float64", "float16": "float16"}
    bound = {}
    names = []
    for formal in schema.inputs:
        if formal.option == formal.option.Optional and d.rng.random() < 0.5:
            names.append("")
            continue
        cands = [names_of.get(t, t) for t in allowed.get(formal.type_str, [formal.type_str[len("tensor("):-1]])]
        cands = [t for t in cands if t in F + I + ("bool",)]
        if not cands:
            return None
        dt = bound.setdefault(formal.type_str, str(d.rng.choice(cands)))
        names.append(d.pick(r, dtypes=(dt,)).name)
        if formal.option == formal.option.Variadic:
            break
    while names and names[-1] == "":
        names.pop()
    return names, {}, len([o for o in schema.outputs if o.option != o.option.Optional]) or 1


FAMILIES = {
    "unary": unary, "binary": binary, "variadic": variadic, "where": where, "clip": clip, "reduce": reduce,
    "axis": axis, "cumsum": cumsum, "topk": topk, "transpose": transpose, "reshape": reshape, "squeeze": squeeze,
    "unsqueeze": unsqueeze, "slice": slice_, "expand": expand, "concat": concat, "split": split, "tile": tile,
    "pad": pad, "gather": gather, "gather_elements": gather_elements, "gather_nd": gather_nd,
    "scatter_elements": scatter_elements, "scatter_nd": scatter_nd, "depth_to_space": depth_to_space,
    "space_to_depth": space_to_depth, "shape": shape, "trilu": trilu, "cast": cast, "castlike": castlike,
    "reverse_sequence": reverse_sequence, "compress": compress, "constant_of_shape": constant_of_shape,
    "range": range_, "onehot": onehot, "center_crop_pad": center_crop_pad, "unique": unique, "conv": conv,
    "conv_paths": conv_paths, "conv_transpose": conv_transpose, "pool": pool, "matmul": matmul, "gemm": gemm,
    "einsum": einsum, "batchnorm": batchnorm, "channel_norm": channel_norm, "layernorm": layernorm, "mvn": mvn,
    "lrn": lrn, "dft": dft, "quantize": quantize, "generic": generic,
}
