"""Rule "attention": matmul(Q, K^T) -> [mul or div by a scalar constant] -> [add a mask] ->
Softmax(last axis) -> matmul(P, V) runs as one kernel (templates/attention.c.j2) that walks (batch x head, block
of query rows) and keeps only a block x T tile of the score matrix, in scratch, where the unfused kernels write
and read the [..., S, T] scores three or four times.

``match`` finds an instance at its first matmul. Legality, per instance:
* all float32 in the plain layout; Q [..., S, D], K^T [..., D, T], V [..., T, Dv] with one batch shape (no
  broadcast batch); the first matmul's output is a whole activation (no view of it anywhere);
* each intermediate (the scores, each scaled or masked step, the probabilities) is read, until next written,
  by the next member only (stacking.readers), so none is a graph output or read elsewhere; the scale is a
  constant splat (one value; after ``sources``: a broadcast read in place), the mul/div/add carry no fused
  activation; the mask broadcasts to [..., S, T] (read through stride 0 on its broadcast dims);
* the kernel runs where the second matmul ran: Q, K^T and the mask keep their bytes from their reader to it
  (no instruction in between that runs a kernel writes over them; the members and ``skip``ped broadcasts do
  not run); O overlaps neither V nor the mask (it may overlap K^T and Q: both are copied, K^T packed, for
  every head before any store); its scratch lies in memory the plan gives the kernel at that point (the
  second matmul's scratch, which ``planned_scratch`` sizes for it, the scores' or the probabilities' buffer:
  nothing else placed over them since), the packed K^T (and Q) part overlapping none of Q, K^T, V, mask and
  O, the threads' part none of Q, V, mask, O and the packed part;
* the cost rule ``fused_wins`` holds (measured: bench/bench_attention.py).
The replaced instructions (the first matmul, mul/div, add, Softmax) run no kernel.

Numerics: both products run on the GEMM of the unfused matmul kernels (templates/gemm.c.j2, glow_gemm_run_f32)
with the same K blocking, so each score and each output element sums in the unfused order; scale and mask are
applied one rounding each as the elementwise kernels do; the softmax row is the Softmax kernel's macro
(softmax_row.c.j2). The fused result is bit-equal to the unfused one. Linear in the code's length (each
matmul looks at the few readers of its output and at most MAX_SPAN instructions up to the second matmul).

Written positions only: with a mask that can add -inf (a KV cache of fixed capacity masks its unwritten slots so;
``_key_extent``), each row computes its keys up to its mask's last column that is not -inf, rounded up to the
softmax's lanes, found at run time by a scan of the mask from its end. The omitted scores are -inf, their
probabilities exp(-inf - max) / sum exactly 0: the row's max, its sum (the same terms in the same lanes, plus
zeros) and the products' sums (plus 0 * v terms) are unchanged, so the result stays bit-equal to the unfused
kernels' over all T keys, for finite K and V in the omitted slots (an inf or NaN there, which the unfused kernels
spread into the row as NaN, is not read). A finite mask value, however large (finfo.min), is computed: it decides a
row masked throughout. K^T and V are packed once per distinct head of keys and values (grouped-query heads
read one KV head's bytes). One query row (decode, ``_direct``): nothing is packed; heads that read the same keys
run together over 32-key blocks copied into an L1 tile, and P V reads V's rows in place, each sum in the GEMM's
order (bit-equal as well).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from math import prod

import numpy as np

from glow_core.errors import BackendError
from glow_core.fusion import FUSED_ACTIVATION
from glow_core.ir import PLAIN
from glow_core.memory import align_up
from glow_core.plan_queries import overlap as _overlap

from ..kernels.codegen import KernelCode, batch_offset, constant_value
from ..kernels.ew import reduce_parts
from ..kernels.gemm_blocking import GEMM_TILES, gemm_pack_width, gemm_scratch_bytes
from ..kernels.nn import ROW_LANES
from ..templates import template
from . import Group, Rule

#: Query rows per block: a multiple of both GEMM micro-tile heights (6 and 8), the tile at most TILE_BYTES.
ROW_QUANTUM = 24
TILE_BYTES = 256 * 1024
MAX_BLOCK = 96
#: At one thread fused only from this many keys T on (bench/bench_attention.py, 4 heads of 64: at T 128 and 197
#: fused / unfused is 1.00 and 1.05, the score matrix staying in L2; at 512 and beyond 0.47-0.75). With more
#: threads always (one parallel region instead of five: 0.70-0.74 at T 128 and 197).
MIN_KEYS = 256
#: Most instructions from the first matmul to the second (and from a scratch candidate's allocation to it) the
#: matcher looks at: linear in the code's length.
MAX_SPAN = 256
#: Most mask rows whose key extents the kernel keeps in a table on its stack (4 bytes each), found once for all
#: heads; a mask of more rows, or one per head, is scanned per row block.
EXTENT_TABLE = 8192
#: Values of the backend option ``attention``.
MODES = ("auto", "always", "never")


@dataclass(eq=False)
class Attention:
    """One fused instance: its instructions in program order (the second matmul last), the buffers the kernel
    reads and writes, the scale (op and value) and mask, the rows per block, and where in planned memory its
    scratch lies."""

    members: list
    q: object
    k: object
    v: object
    out: object
    scale: tuple | None
    mask: object | None
    block: int
    kpack: tuple  # (buffer, byte offset, bytes) of K^T packed
    work: tuple  # (buffer, byte offset, bytes) of the threads' parts
    copy_q: bool  # O overlaps Q: Q is copied with K^T before any store
    choice: str
    strided: "dict | None" = None  # operands read and O written through strides (rule "transposes")
    nan_zero: bool = False  # the probabilities' NaN (fully masked rows) replaced by 0, as Where(IsNaN(P), 0, P)
    mask_pick: "tuple | None" = None  # (a, b): the mask is a boolean condition, a added where true, else b
    folded_out: object = None  # the buffer O is then written to
    reads: "dict | None" = None  # operands q, k, v read in place from another buffer (rule "transposes")


def block_rows(s: int, t: int) -> int:
    """Query rows per block for S queries and T keys: at most the largest multiple of ROW_QUANTUM up to MAX_BLOCK
    whose tile fits TILE_BYTES, then evened out over the blocks S needs (rounded up to ROW_QUANTUM), at most S."""
    most = max(ROW_QUANTUM, min(MAX_BLOCK, TILE_BYTES // (4 * t) // ROW_QUANTUM * ROW_QUANTUM))
    even = -(-s // -(-s // most))
    return min(s, -(-even // ROW_QUANTUM) * ROW_QUANTUM)


def fused_wins(s: int, t: int, d: int, threads: int) -> bool:
    """The cost rule: fuse when the keys are many (the score matrix out of L2) or the kernel runs threaded (see
    MIN_KEYS)."""
    return t >= MIN_KEYS or threads > 1


def scratch_parts(nbh: int, s: int, t: int, d: int, dv: int, copy_q: bool) -> tuple[dict, int, int]:
    """The kernel's scratch: K^T of every head packed in the GEMM's panel layout and, with ``copy_q``, a copy of
    Q (``shared`` bytes, Q's copy at ``off["q"]``), and per thread the tile, V of its current head packed, and the
    GEMM's A panel. Returns (offsets: "q" in the shared part, the others inside a thread's part; the bytes of a
    thread's part; shared)."""
    w = gemm_pack_width("f32")
    blk = block_rows(s, t)
    pk = align_up(nbh * 4 * -(-t // w) * w * d)
    shared = pk + (align_up(nbh * 4 * s * d) if copy_q else 0)
    parts = [("tile", 4 * blk * t), ("pv", 4 * -(-dv // w) * w * t),
             ("gemm", max(gemm_scratch_bytes("f32", blk, t, d, True), gemm_scratch_bytes("f32", blk, dv, t, True)))]
    off, at = {"q": pk}, 0
    for name, n in parts:
        off[name] = at
        at = align_up(at + n)
    return off, at, shared


def planned_scratch(instr, threads: int) -> int:
    """Scratch bytes a batched float32 matmul of two activations gets planned so that, as the second matmul of an
    attention, the fused kernel's tiles and panels fit for ``threads`` threads (head dim D taken as V's Dv, the
    usual case: an instance with a larger D uses other planned memory or stays unfused); 0 for other matmuls."""
    if instr.op != "matmul" or len(instr.ins) != 2:
        return 0
    p, v = instr.ins
    if (p.type.rank < 3 or p.type.shape[:-2] != v.type.shape[:-2] or not (_f32(p) and _f32(v))
            or "constant" in (p.region, v.region)):
        return 0
    *batch, s, t = p.type.shape
    dv = v.type.shape[-1]
    _, per, shared = scratch_parts(prod(batch), s, t, dv, dv, True)
    return shared + threads * per


def _f32(b) -> bool:
    return b.type.dtype.name == "float32" and b.layout == PLAIN


ABSORBED = "computed in the fused attention kernel of a later matmul"


def match(fused, mm) -> "Group | None":
    """The fused instance starting at matmul ``mm`` (see the module doc), or None; a legal instance the cost
    rule keeps unfused gets a note on its second matmul. Option ``attention``: "auto" (the cost rule decides),
    "always" (wherever legal) or "never"."""
    mode = fused.options.get("attention", "auto")
    if mode not in MODES:
        raise BackendError(f"cpu backend: option attention={mode!r} is not one of {', '.join(MODES)}")
    if mode == "never" or mm.op != "matmul" or id(mm) in fused.taken:
        return None
    st = fused.state.get("attention")
    if st is None:  # the instructions that run no kernel so far (elided broadcasts) and their outputs' roots
        skip = set(fused.taken)
        st = fused.state["attention"] = (skip, {id(b.root) for i in fused.irf.code if id(i) in skip for b in i.outs})
    skip, elided = st
    inst = _match(mm, fused.index, fused.sources, skip, elided, fused.num_threads)
    if inst is None:
        return None
    *batch, s, d = inst.q.type.shape
    t = inst.k.type.shape[-1]
    if mode == "auto" and not fused_wins(s, t, d, fused.num_threads):
        fused.notes[id(inst.members[-1])] = f"attention not fused (cost rule: T {t} < {MIN_KEYS} keys at 1 thread)"
        return None
    rule = "always" if mode == "always" else f"cost rule: T {t} >= {MIN_KEYS}" if t >= MIN_KEYS else \
        f"cost rule: {fused.num_threads} threads"
    inst.choice = f"attention fused ({rule}): {inst.choice}"
    # its scratch lies in the members' buffers: every member's position touches all of them
    touches = [b for m in inst.members for b in fused.operands(m)]
    return Group("attention", inst.members, inst.members[-1], ABSORBED, touches, spread=True, data=inst)


def kernel(group, fused):
    """The fused kernel at the second matmul (its operands read or written through strides when the transposes
    rule folded some: ``Attention.strided``)."""
    a = group.data
    code, bufs = attention_call(a, fused.num_threads, a.strided, a.folded_out)
    return group.at, code, bufs


def _next(ins, cur, index):
    """The one instruction reading ``cur`` (ins's output) and its slot, or None."""
    if cur.kind != "activation" or cur.base is not None or id(cur) in index.viewed:
        return None
    rd = index.readers(cur, index.position(ins))
    if not rd or len(rd) != 1 or len(rd[0][1]) != 1:
        return None
    return rd[0][0], rd[0][1][0]


def _match(mm, index, sources, skip, elided, nt) -> "Attention | None":
    q, k = mm.ins
    (cur,) = mm.outs
    if FUSED_ACTIVATION in mm.attrs and mm.attrs[FUSED_ACTIVATION]:
        return None
    if not all(_f32(b) for b in (q, k, cur)) or q.type.rank < 3 or q.type.shape[:-2] != k.type.shape[:-2]:
        return None
    *batch, s, d = q.type.shape
    t = k.type.shape[-1]
    members, scale, mask, reads, mask_pick = [mm], None, None, [(q, mm), (k, mm)], None
    ins = mm
    step = _next(ins, cur, index)
    while step is not None:
        nxt, slot = step
        if nxt.op in ("mul", "div", "add") and not nxt.attrs.get(FUSED_ACTIVATION) and len(nxt.ins) == 2:
            other = 3 - slot  # operand slots: 0 the output, 1 and 2 the inputs
            ob = sources.get(id(nxt), {}).get(other, nxt.operands[other][0])
            (o,) = nxt.outs
            if o.type != cur.type or not _f32(o) or not _f32(ob) or mask is not None:
                return None
            if nxt.op in ("mul", "div"):
                vals = constant_value(ob).reshape(-1) if ob.region == "constant" else None
                if scale is not None or vals is None or (vals != vals[0]).any() or (nxt.op == "div" and slot != 1):
                    return None
                scale = (nxt.op, float(vals[0]))
            else:
                sel = _boolean_mask(ob, nxt, index, sources)
                if sel is not None:  # Where(cond, a, b) read only here: cond read in place, a or b added
                    sel_ins, cond, picks = sel
                    if _mask_strides(cond.type.shape, cur.type.shape) is None:
                        return None
                    members.insert(0, sel_ins)
                    mask, mask_pick = cond, picks
                    reads.append((cond, sel_ins))
                else:
                    if _mask_strides(ob.type.shape, cur.type.shape) is None:
                        return None
                    mask = ob
                    reads.append((ob, nxt))
            members.append(nxt)
            ins, cur = nxt, o
            step = _next(ins, cur, index)
            continue
        break
    if step is None:
        return None
    sm, _ = step
    if sm.op != "Softmax" or sm.attrs.get("axis", -1) not in (-1, cur.type.rank - 1):
        return None
    (pr,) = sm.outs
    if pr.type != cur.type or not _f32(pr):
        return None
    members.append(sm)
    zero_nan = _nan_to_zero(sm, pr, index, sources)
    if zero_nan is not None:  # torch's exporter: Where(IsNaN(P), 0, P) (fully masked rows give 0, not NaN)
        members += zero_nan
        pr = zero_nan[-1].outs[0]
        step = _next(zero_nan[-1], pr, index)
    else:
        step = _next(sm, pr, index)
    if step is None or step[0].op != "matmul" or step[1] != 1 or step[0].attrs.get(FUSED_ACTIVATION):
        return None
    mm2 = step[0]
    v = mm2.ins[1]
    (out,) = mm2.outs
    if not (_f32(v) and _f32(out)) or v.type.shape[:-1] != (*batch, t):
        return None
    dv = v.type.shape[-1]
    end = index.position(mm2)
    if end - index.position(mm) > MAX_SPAN:
        return None
    members.sort(key=index.position)
    inside = skip | {id(m) for m in members}
    if any(not index.unwritten(b, index.position(r), end, inside) for b, r in reads):
        return None
    copy_q = _overlap(out, q)
    _, per, shared = scratch_parts(prod(batch), s, t, d, dv, copy_q)
    if _overlap(out, v) or _overlap(out, mask):
        return None
    unused = {id(b.root) for m in members for b in m.outs} | elided
    owned = [c for c in (mm2.scratch, mm.outs[0].root, pr)
             if c is not None and _owned(c, index.touching(c)[0], end, index.instrs, unused)]
    # packed K^T: written while K^T is read, read while O is written; a thread's part: K^T is consumed by then.
    # Away from the output of a transpose reading O alone if it fits (O may then be written into it through
    # strides: strided_operands.py), else anywhere.
    merge = _next(mm2, out, index)
    merged = merge[0].outs[0] if merge is not None and merge[0].op == "transpose" else None
    for spare in ([merged], [None]):
        kpack = _place(owned, shared, [q, k, v, mask, out, *spare], [])
        work = _place(owned, nt * per, [q, v, mask, out, *spare], [kpack] if kpack else [])
        if kpack is not None and work is not None:
            break
    else:
        return None
    blk = block_rows(s, t)
    nan_zero = any(m.op == "select" for m in members[members.index(sm):])
    extra = (f", {scale[0]} by {scale[1]!r}" if scale else "") + (", mask" if mask is not None else "") + \
        (", NaN probabilities to 0" if nan_zero else "") + (", the mask a select of a boolean" if mask_pick else "")
    choice = (f"{prod(batch)} heads x {s} query rows split evenly over the threads in blocks of at most {blk}, a "
              f"{blk} x {t} score tile per thread (D {d}, Dv {dv}{extra}; gemm f32, K^T and V packed per head"
              f"{', Q copied: O overlaps it' if copy_q else ''})")
    return Attention(members + [mm2], q, k, v, out, scale, mask, blk, kpack, work, copy_q, choice, nan_zero=nan_zero,
                     mask_pick=mask_pick)


def _boolean_mask(mb, add, index, sources) -> "tuple | None":
    """(select, cond, (a, b)) when the mask ``mb`` the ``add`` reads is written by ``select(cond, a, b)`` with
    constant splats a and b (torch's exporter: Where(attention_mask, 0, -inf)) and read by that add only: the kernel
    then adds a or b by cond in place of the mask's bytes (the select runs no kernel)."""
    if mb.kind != "activation" or mb.base is not None or id(mb) in index.viewed:
        return None
    end = index.position(add)
    writer = None
    for i in index.touching(mb):
        if i >= end:
            break
        ins = index.instrs[i]
        if any(b is mb and kind != "in" for b, kind in ins.operands):
            writer = ins
    if writer is None or writer.op != "select" or writer.attrs.get(FUSED_ACTIVATION) or writer.outs[0] is not mb:
        return None
    rd = index.readers(mb, index.position(writer))
    if not rd or len(rd) != 1 or rd[0][0] is not add:
        return None
    srcs = sources.get(id(writer), {})
    cond = srcs.get(1, writer.operands[1][0])
    picks = []
    for slot in (2, 3):
        b = srcs.get(slot, writer.operands[slot][0])
        vals = constant_value(b).reshape(-1) if b.region == "constant" else None
        if vals is None or vals.size == 0 or not (vals == vals[0]).all() or b.type.dtype.name != "float32":
            return None
        picks.append(float(vals[0]))
    if cond.type.dtype.name != "bool" or cond.layout != PLAIN:
        return None
    return writer, cond, tuple(picks)


def _nan_to_zero(sm, pr, index, sources) -> "list | None":
    """[isnan, select] when the Softmax output ``pr`` is read only by ``isnan(pr)`` and ``select(that, 0, pr)``
    (torch's dynamo exporter after the softmax of scaled_dot_product_attention), the select's output of pr's
    type; else None."""
    if pr.kind != "activation" or pr.base is not None or id(pr) in index.viewed:
        return None
    rd = index.readers(pr, index.position(sm))
    if not rd or len(rd) != 2:
        return None
    by_op = {r.op: (r, slots) for r, slots in rd}
    if set(by_op) != {"isnan", "select"} or by_op["isnan"][1] != [1] or by_op["select"][1] != [3]:
        return None
    nan, sel = by_op["isnan"][0], by_op["select"][0]
    if index.position(nan) > index.position(sel) or sel.attrs.get(FUSED_ACTIVATION):
        return None
    step = _next(nan, nan.outs[0], index)
    if step is None or step[0] is not sel or step[1] != 1:
        return None
    zero = sources.get(id(sel), {}).get(2, sel.operands[2][0])
    vals = constant_value(zero).reshape(-1) if zero.region == "constant" else None
    if vals is None or vals.size == 0 or (vals != 0).any() or np.signbit(vals).any():
        return None
    (o,) = sel.outs
    if o.type != pr.type or not _f32(o):
        return None
    return [nan, sel]


def _c_float(v: float) -> str:
    v = float(np.float32(v))
    return ("INFINITY" if v > 0 else "(-INFINITY)") if np.isinf(v) else "NAN" if np.isnan(v) else float.hex(v) + "f"


def _mask_strides(mshape, shape) -> "list[int] | None":
    """Element strides of a mask of shape ``mshape`` read as ``shape`` (0 along broadcast dims), or None."""
    if len(mshape) > len(shape):
        return None
    mshape = (1,) * (len(shape) - len(mshape)) + tuple(mshape)
    strides, acc = [], 1
    for m, n in zip(reversed(mshape), reversed(shape)):
        if m not in (1, n):
            return None
        strides.append(acc if m == n and n > 1 else 0)
        acc *= m
    return strides[::-1]


def _place(owned, size, avoid, taken) -> "tuple | None":
    """(buffer, offset, size): the first aligned range of ``size`` bytes in one of the ``owned`` buffers that shares
    no byte with any of ``avoid`` nor with the ``taken`` (buffer, offset, size) ranges (a buffer the planner laid
    partly over Q, which the unfused program no longer reads at the second matmul, keeps the rest usable)."""
    for c in owned:
        busy = sorted([(b.address - c.address, b.address + b.size - c.address) for b in avoid if _overlap(c, b)] +
                      [(tb.address + toff - c.address, tb.address + toff + tsize - c.address)
                       for tb, toff, tsize in taken if tb.region == c.region])
        at = 0
        for lo, hi in busy:
            if at + size <= lo:
                break
            at = max(at, align_up(hi))
        if at + size <= c.size:
            return c, at, size
    return None


def _owned(c, start, end, instrs, unused) -> bool:
    """Whether the memory of ``c`` (allocated at ``start``) holds nothing another instruction needs at ``end``: no
    buffer but c's own and the ``unused`` ones (outputs of instructions that run no kernel) placed over it since
    (no for a buffer allocated more than 2 MAX_SPAN instructions before)."""
    if end - start > 2 * MAX_SPAN:
        return False
    for ins in instrs[start + 1:end + 1]:
        for b, _ in ins.operands:
            if b.root is not c.root and id(b.root) not in unused and _overlap(b, c):
                return False
    return True


def _direct(s: int, t: int, d: int, dv: int, nbh: int) -> "dict | None":
    """One query row (decode): the kernel runs without the packed K^T and V, heads that read the same keys and
    values together (``group`` at most: their score rows and a [d x W] key tile fit the thread's V panel space);
    None for more rows, or when not even one row fits."""
    w = gemm_pack_width("f32")
    room = -(-dv // w) * w * t - d * w
    if s != 1 or room < t:
        return None
    return dict(group=min(nbh, room // t))


def _key_extent(a: Attention, shape, mask_bh: str, mask_si: int, mask_sj: int) -> "dict | None":
    """How the kernel finds the key columns a row needs at run time, or None when it computes all T: with a mask
    that can add -inf (a float mask, or a boolean one picking -inf) and rows of at least ROW_LANES keys, the
    columns past a mask row's last one not -inf hold -inf scores, whose probabilities exp(-inf - max) / sum are
    exactly 0 (a row -inf throughout is NaN at every column, as over all T). ``masked``: the C test that column J of
    mask row ``mr`` adds -inf; ``heads`` and ``rows``: the distinct mask rows (1 along broadcast dims); ``table``:
    one mask for every head, its rows' extents found once into a table on the stack (else per row block)."""
    *batch, s, t = shape
    if a.mask is None or t < ROW_LANES:
        return None
    at = f"mr[J * {mask_sj}]"
    if a.mask_pick is None:
        masked = f"{at} == -INFINITY"
    else:
        ninf = [bool(np.isneginf(np.float32(v))) for v in a.mask_pick]
        masked = "1" if all(ninf) else f"{at} != 0" if ninf[0] else f"{at} == 0" if ninf[1] else None
    if masked is None:
        return None
    heads, rows = 1 if mask_bh == "0" else prod(batch), s if mask_si else 1
    return dict(masked=masked, heads=heads, rows=rows, table=heads == 1 and rows <= EXTENT_TABLE)


def attention_call(a: Attention, num_threads: int, strided=None, out=None) -> tuple[KernelCode, list]:
    """The fused kernel of ``a`` and its operand buffers in the order of its ``p`` (O, Q, K^T, V, [mask], scratch).
    ``strided``: {slot: (batch shape, batch strides, row stride, column stride)} of the operands q, k, v read and o
    written through strides (strided_operands.fold_transposes; O then lies in ``out``)."""
    *batch, s, d = a.q.type.shape
    t, dv = a.k.type.shape[-1], a.v.type.shape[-1]
    off, per, _ = scratch_parts(prod(batch), s, t, d, dv, a.copy_q)
    strided, choice = strided or {}, a.choice
    view = {}
    for name, (rows, cols) in (("q", (s, d)), ("k", (d, t)), ("v", (t, dv)), ("o", (s, dv))):
        if name in strided:
            bshape, bst, rs, cs = strided[name]
            view[name] = (batch_offset(bshape, bst, "bh"), rs, cs)
            choice += (f", {name} {'written' if name == 'o' else 'read'} through strides (batch {list(bst)}, rows "
                       f"{rs}, columns {cs})")
        else:
            view[name] = (f"bh * {rows * cols}", cols, 1)
    src = a.reads or {}
    bufs = [out if out is not None else a.out, src.get("q", a.q), src.get("k", a.k), src.get("v", a.v)] + \
        ([a.mask] if a.mask is not None else []) + \
        [a.kpack[0], a.work[0]]
    ptr = {name: f"p[{i}]" for i, name in enumerate(["o", "q", "k", "v"] + (["mask"] if a.mask is not None else []))}
    mask_bh, mask_si, mask_sj = "0", 0, 0
    if a.mask is not None:
        st = _mask_strides(a.mask.type.shape, (*batch, s, t))
        mask_bh, mask_si, mask_sj = batch_offset(batch, st[:-2], "bh"), st[-2], st[-1]
    keys = _key_extent(a, (*batch, s, t), mask_bh, mask_si, mask_sj)
    if keys:
        choice += f", each row's keys up to its mask's last column not -inf (at run time)"
    acc_t, init, update = reduce_parts("reduce_max", "float32")
    sum_t, _, _ = reduce_parts("reduce_sum", "float32")
    scale_op, scale = (a.scale[0], float.hex(float(np.float32(a.scale[1]))) + "f") if a.scale else ("", "")
    src = template("attention.c.j2").render(
        fn="GLOW_KERNEL_NAME", choice=choice, view=view, qread=(f"bh * {s * d}", d, 1) if a.copy_q else view["q"],
        nt=num_threads, o=ptr["o"], q=ptr["q"], k=ptr["k"], v=ptr["v"],
        mask=ptr.get("mask"), kpack=f"p[{len(bufs) - 2}] + {a.kpack[1]}", work=f"p[{len(bufs) - 1}] + {a.work[1]}",
        pnr=gemm_pack_width("f32"), per_thread=per, off=off,
        pk_floats=-(-t // gemm_pack_width("f32")) * gemm_pack_width("f32") * d, copy_q=a.copy_q,
        nbh=prod(batch), blk=a.block, s=s, t=t, d=d, dv=dv, scale_op=scale_op, scale=scale,
        mask_bh=mask_bh, mask_si=mask_si, mask_sj=mask_sj, lanes=ROW_LANES, max_t=acc_t, max_init=init,
        max_update=update, sum_t=sum_t, nan_zero=a.nan_zero, keys=keys, direct=_direct(s, t, d, dv, prod(batch)),
        kc=GEMM_TILES["f32"]["kc"],
        mask_pick=[_c_float(v) for v in a.mask_pick] if a.mask_pick else None)
    name = "glow_k_" + hashlib.sha1(src.encode()).hexdigest()[:20]
    return KernelCode(name, src.replace("GLOW_KERNEL_NAME", name), ("f32",), (), choice), bufs


RULE = Rule("attention", match, kernel)
