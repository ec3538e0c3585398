"""Kernels of the reductions: sum, prod, max, min over any axes (partial sums in lanes over a contiguous run; over
every spatial axis of an NCHWc input lane by lane), argmax and argmin."""
from __future__ import annotations

from math import prod

from glow_core.errors import BackendError
from glow_core.ir import PLAIN

from . import ew as kernels_ew
from .codegen import kernel, row_strides
from .ctypes_map import ctype


#: Partial sums of a reduce_sum over a contiguous run (``reduce``).
REDUCE_LANES = 8
#: Lanes of a float32 max or min over a contiguous run (one vector; runs shorter than this stay scalar).
EXTREME_LANES = 16


@kernel("reduce_sum", "reduce_prod", "reduce_max", "reduce_min")
def reduce(gen, ins, fn):
    x, out = ins.ins[0], ins.outs[0]
    axes = list(ins.attrs["axes"])
    dt = x.type.dtype.name
    ct = ctype(dt)
    op = ins.op
    if x.layout != PLAIN:
        return _reduce_blocked(gen, ins, fn)
    ist = row_strides(x.type.shape)
    kept = [(s, st) for i, (s, st) in enumerate(zip(x.type.shape, ist)) if i not in axes and s != 1]
    red = [(s, st) for i, (s, st) in enumerate(zip(x.type.shape, ist)) if i in axes and s != 1]
    acc_t, init, update = kernels_ew.reduce_parts(op, dt)
    if any(s == 0 for s, _ in red):  # an empty reduction: one loop of no iteration leaves the identity
        red = [(0, 0)]
    load_idx = " + ".join([f"o{i} * {st}" for i, (_, st) in enumerate(kept)] +
                          [f"r{i} * {st}" for i, (_, st) in enumerate(red)]) or "0"
    kst = row_strides([s for s, _ in kept])
    out_idx = " + ".join(f"o{i} * {st}" for i, st in enumerate(kst)) or "0"
    # A sum over one contiguous run of the input (e.g. a global average pool): LANES independent partial sums
    # (the compiler vectorizes them; one chain of dependent adds is latency-bound), combined pairwise.
    run = prod(s for s, _ in red)
    lanes = REDUCE_LANES if op == "reduce_sum" and run >= 2 * REDUCE_LANES and \
        [st for _, st in red] == row_strides([s for s, _ in red]) else 0
    if lanes:
        gen.choice = f"reduce_sum: {lanes} partial sums over runs of {run}"
    # A float32 max or min over one contiguous run: a vector of EXTREME_LANES maxima (the last vector, which may
    # overlap the one before it, first: max is idempotent), then the lanes by rotations. The result is the
    # serial one: an extreme is exact in any order, and a NaN, once taken, stays.
    vector = EXTREME_LANES if op in ("reduce_max", "reduce_min") and dt == "float32" and run >= EXTREME_LANES \
        and [st for _, st in red] == row_strides([s for s, _ in red]) else 0
    if vector:
        gen.choice = f"{op}: one vector of {vector} lanes over runs of {run}"
    return gen.t("reduce.c.j2",
        fn=fn, out_t=ct.storage, in_t=ct.storage, out_ptr=gen.ptr(out), in_ptr=gen.ptr(x), lanes=lanes,
        run=run, vector=vector, cmp="<" if op == "reduce_min" else ">", base=" + ".join(f"o{i} * {st}" for i, (_, st) in enumerate(kept)) or "0",
        load_q=f"({acc_t})" + ct.ld("src[q + l]"), load_t=f"({acc_t})" + ct.ld("src[q]"),
        parallel=gen.nt > 1 and len(kept) > 0, work=x.type.numel, kept=[s for s, _ in kept],
        red=[s for s, _ in red], acc_t=acc_t, init=init, load=f"({acc_t})" + ct.ld(f"in[{load_idx}]"),
        update=update, out_idx=out_idx, store=ct.st(f"({ct.compute})acc"))


def _reduce_blocked(gen, ins, fn):
    """A reduction over every spatial axis of an NCHWc input (layouts.SPATIAL_REDUCES), whose kernel sees the
    stored [N, C/cb, *spatial, cb] shape: per channel block, cb accumulators over the plane, lane by lane
    (one vector); the lanes past C are not stored (the output is plain [N, C, 1.., 1..])."""
    x, out = ins.ins[0], ins.outs[0]
    dt = x.type.dtype.name
    ct = ctype(dt)
    n, blocks, *spatial, cb = x.type.shape
    acc_t, init, update = kernels_ew.reduce_parts(ins.op, dt)
    plane = prod(spatial)
    gen.choice = f"{ins.op} over NCHWc: {cb} lanes of a channel block at once, over planes of {plane}"
    return gen.t("reduce_blocked.c.j2",
        fn=fn, out_t=ct.storage, in_t=ct.storage, out_ptr=gen.ptr(out), in_ptr=gen.ptr(x), rows=n * blocks,
        blocks=blocks, cb=cb, plane=plane, c=out.type.shape[1], acc_t=acc_t, init=init, update=update,
        load=f"({acc_t})" + ct.ld("src[q * %d + l]" % cb), store=ct.st(f"({ct.compute})acc"),
        parallel=gen.nt > 1 and n * blocks > 1, work=x.type.numel)


@kernel("argmax", "argmin")
def arg(gen, ins, fn):
    x, out = ins.ins[0], ins.outs[0]
    axis = ins.attrs["axis"]
    last = ins.attrs.get("select_last_index", 0)
    xs = x.type.shape
    ct = ctype(x.type.dtype.name)
    n = xs[axis]
    inner = prod(xs[axis + 1:])
    cmp = ">" if ins.op == "argmax" else "<"
    if n == 0:
        raise BackendError(f"cpu backend: {ins.op} over an empty axis")
    return gen.t("arg.c.j2",
        fn=fn, out_ptr=gen.ptr(out), in_ptr=gen.ptr(x), in_t=ct.storage, cmp_t=ct.compute,
        outer=prod(xs[:axis]), inner=inner, n=n, first=(n - 1) if last else 0,
        jexpr=f"{n - 1} - s" if last else "s", load_best=ct.ld(f"pv[({(n - 1) if last else 0}) * {inner}]"),
        load_v=ct.ld(f"pv[j * {inner}]"), better=f"v {cmp} best || v != v")
