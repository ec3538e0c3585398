"""Transposes folded into batched matmuls on the planned IR: a matmul reads an operand, or writes its result,
through strides instead of a transpose kernel copying it (the attention heads' split and merge in transformers).

``fold_transposes(irf, gemm, touched, skip, attended)`` looks at every consumer M (``Consumer``: its operand slots
that accept strides, the instruction reading each, its result slot): each matmul for which ``gemm(M)`` holds (the
GEMM kernel runs it: float32/float64 in gemm mode; the naive and convert modes keep the copies) and that is not in
``skip`` (instructions another pass took: elided broadcasts, fused adds, chain members, fused attention members),
with slots A, B and C; and each fused attention of ``attended`` (attention.Attention), with slots q, k (read by
its first matmul), v and o (its second matmul's), its result overlapping none of q, k, v, the mask and the byte
ranges of its scratch. Memory is checked against what each call really touches once those passes are applied
(``touched``, see touched_by). Below, "M" is the instruction reading the slot (or writing the result).

Operand fold (A or B of M): the operand is T = transpose(X, perm), where
  - T is a whole plain activation that only M touches after the transpose, reading it in one slot, as T or as a
    view of all of T with the same last two axes (batch axes regrouped: the batches keep their row-major order);
  - X is a whole-size view of (or is) R, a whole plain activation of T's size, and the instructions (not
    pseudo-instructions) touching R's memory are exactly two: its producer P, which writes R as an output without
    reading it, then the transpose; P is in no other fold and not in ``skip``;
  - between P and the transpose no call writes or reads T's bytes (the folds made so far applied), none of P's
    other operands (broadcasts read in place) overlaps them unless P is the elementwise loop reading exactly those
    bytes element for element (in-place reuse, as in a plain in-place add), and no earlier fold uses memory
    overlapping them outside the memory plan while P to M runs (``_clash``).
Then P writes R's bytes at T's address (``Folds.moved``), the transpose runs no kernel, and M reads T's memory
with X's row-major strides permuted by perm (a per-batch offset, a row stride and a column stride; B with a
column stride != 1 is packed by gemm.c.j2's transposed-B loop).
Result fold: M's output C is a whole plain activation read, from M until it is next written, only by
Y = transpose(C, perm) (C itself, one slot); the instructions touching C are exactly M and that transpose; the
permuted stride of C's last axis in Y is 1; Y (plain, not constant) overlaps neither M's inputs nor its scratch,
only pseudo-instructions lie between M and the transpose, and no earlier fold uses memory overlapping Y
outside the memory plan while M runs (``_clash``). Then M writes Y through strides (``ldc`` and a
per-batch offset) and the transpose runs no kernel.
Bit-exact: the same GEMM, packing the same values in the same order (the same sums in the same order); only the
addresses the packing reads and the micro-tiles store change (the fused attention packs K^T and V per head from
strided rows and runs its products on the same GEMM: attention.c.j2). Each consumer looks at the producer of each
operand and the reader of its output; each window check scans the instructions in between once: linear in the
code's length times the length of a window (a few instructions).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from glow_core.ir import PLAIN, PSEUDO, Instr

from ..kernels.codegen import STRIDED, row_strides, stacked
from .residual_int8 import _overlap
from .broadcasts import positions, readers


@dataclass
class Folds:
    """The folds of one IRFunction: the rewritten matmuls (by id of the original), the fused attentions' strided
    operands (by id of the attention.Attention: (the STRIDED dict, the buffer O is written to)), the folded
    transposes (by id, with what absorbed them) and the roots whose bytes their producer writes elsewhere
    (id(R) -> T)."""

    matmuls: dict = field(default_factory=dict)
    attentions: dict = field(default_factory=dict)
    transposes: dict = field(default_factory=dict)
    moved: dict = field(default_factory=dict)

    def address(self, b) -> tuple[str, int]:
        """(region, byte offset) where ``b``'s bytes live once the folds are applied."""
        t = self.moved.get(id(b.root))
        if t is None:
            return b.region, b.address
        return t.region, t.address + b.address - b.root.address


def _plain(b) -> bool:
    return b.layout == PLAIN and b.root.layout == PLAIN


def touched_by(elided, fused, chained, attended=None):
    """``touched(instr)``: the buffers the call at ``instr``'s position reads or writes once the other passes are
    applied: none for an elided broadcast (stacking.Elided), a fused add (Residual.add) or a chain member; a chain
    root's every member's (chains.Chain); the fused conv's (Residual.conv); every member's of a fused attention
    (attention.Attention, at each member: its kernel's scratch lies in the members' buffers); each with broadcast
    sources read in place."""
    attended = attended or {}

    def touched(ins) -> list:
        chain, res, att = chained.get(id(ins)), fused.get(id(ins)), attended.get(id(ins))
        if id(ins) in elided.broadcasts or (chain is not None and chain.root is not ins) or \
                (res is not None and res.add is ins):
            return []
        members = att.members if att is not None else \
            chain.members if chain is not None else [res.conv if res is not None else ins]
        return [elided.sources.get(id(m), {}).get(slot, b) for m in members for slot, (b, _) in enumerate(m.operands)]
    return touched


def _untouched(instrs, lo: int, hi: int, buf, touched) -> bool:
    """Whether no call strictly between positions lo and hi touches memory overlapping ``buf``."""
    return not any(_overlap(b, buf) for ins in instrs[lo + 1:hi] if ins.op not in PSEUDO for b in touched(ins))


def _strides(shape, perm) -> list[int]:
    """The element strides of transpose(tensor of ``shape``, perm)'s axes in the tensor's row-major memory."""
    st = row_strides(shape)
    return [st[p] for p in perm]


@dataclass
class Span:
    """Bytes of a region (part of a buffer: a fused kernel's scratch), as int8_fusion._overlap reads them."""

    region: str
    address: int
    size: int


@dataclass
class Consumer:
    """A kernel that reads operands and writes its result through strides: the matmul M, or a fused attention
    (attention.Attention) run at its second matmul ``at``. ``reads``: (slot, instruction reading it in the IR,
    buffer); ``result``: (slot, buffer ``at`` writes); ``avoid``: what a result written elsewhere must overlap none
    of (its inputs and scratch)."""

    at: Instr
    reads: list
    result: tuple
    avoid: list


def _consumers(irf, gemm, attended, taken):
    """The consumers of ``irf`` in program order: GEMM-mode matmuls not ``taken``, and fused attentions (their
    members are taken; the instance is looked at once, at its kernel's position)."""
    for ins in irf.code:
        att = attended.get(id(ins))
        if att is not None and att.members[-1] is ins:
            first = att.members[0]
            yield att, Consumer(ins, [("q", first, att.q), ("k", first, att.k), ("v", ins, att.v)],
                                ("o", att.out),
                                [b for b in (att.q, att.k, att.v, att.mask) if b is not None] +
                                [Span(c.region, c.address + off, size) for c, off, size in (att.kpack, att.work)])
        elif ins.op == "matmul" and id(ins) not in taken and STRIDED not in ins.attrs and gemm(ins):
            yield ins, Consumer(ins, [("a", ins, ins.ins[0]), ("b", ins, ins.ins[1])], ("c", ins.outs[0]),
                                [b for b, k in ins.operands if k != "out"])


def fold_transposes(irf, gemm, touched, skip=frozenset(), attended=None) -> Folds:
    """The transposes of ``irf`` folded into the matmuls and fused attentions (``attended``: attention_patterns'
    {id(member): Attention}) reading or writing them (see the module doc)."""
    instrs = irf.instrs
    pos, touches = positions(irf)
    writer = {id(ins.outs[0]): ins for ins in irf.code if ins.op == "transpose"}  # by id of T (a root)
    folds, taken, spans, results = Folds(), set(skip), [], {}

    def now(ins) -> list:  # touched(ins) with the folds made so far applied
        if id(ins) in folds.transposes:
            return []
        if id(ins) in folds.matmuls:
            return [b for b, _ in folds.matmuls[id(ins)].operands]
        return [results.get(id(b), folds.moved.get(id(b.root), b)) for b in touched(ins)]
    for key, con in _consumers(irf, gemm, attended or {}, taken):
        strided = {}
        for name, reader, b in con.reads:
            tr = writer.get(id(b.root))
            found = tr is not None and id(tr) not in taken and _operand(instrs, pos, touches, tr, b, reader, taken,
                                                                        now)
            if found and not _clash(spans, pos[id(found[0])], b):
                spans.append((pos[id(found[0])], pos[id(con.at)], b))
                p, r = found
                strided[name] = _split(tr.outs[0].type.shape, _strides(tr.ins[0].type.shape, tr.attrs["perm"]))
                folds.transposes[id(tr)] = (f"folded: {con.at.name} reads its source through strides (written into "
                                            f"this buffer by {p.name})")
                folds.moved[id(r)] = tr.outs[0]
                taken.update((id(tr), id(p)))
        name, c = con.result
        res = _result(instrs, pos, touches, con.at, c, con.avoid, taken)
        if res is not None and not _clash(spans, pos[id(con.at)], res[1]):
            tr, y, st = res
            spans.append((pos[id(con.at)], pos[id(con.at)], y))
            strided[name] = _split(c.type.shape, st)
            results[id(c)] = y
            folds.transposes[id(tr)] = f"folded: {con.at.name} writes its result through strides"
            taken.add(id(tr))
        if not strided:
            continue
        if isinstance(key, Instr):
            taken.add(id(key))
            operands = [(results.get(id(b), b) if k == "out" else b, k) for b, k in key.operands]
            folds.matmuls[id(key)] = Instr("matmul", operands, {**key.attrs, STRIDED: strided}, key.name)
        else:
            folds.attentions[id(key)] = (strided, results.get(id(c), c))
    return folds


def _in_place(p, b, r, t) -> bool:
    """Whether elementwise P may read input ``b`` while writing R's values at T: b is T's bytes exactly, read
    element for element (the elementwise loop's in-place reuse)."""
    return (stacked(p.op) and b.address == t.address and b.size == t.size and b.type.shape == r.type.shape
            and b.type.dtype == r.type.dtype and _plain(b))


def _clash(spans, lo: int, buf) -> bool:
    """Whether an accepted fold uses memory overlapping ``buf`` outside the memory plan at a position from ``lo``
    on. ``spans``: (first, last position, buffer) of each accepted fold's use, in ascending order of last."""
    for first, last, b in reversed(spans):
        if last < lo:
            return False
        if _overlap(b, buf):
            return True
    return False


def _split(shape, st) -> tuple:
    """(batch shape, batch strides, row stride, column stride) of an operand of ``shape`` with axis strides st."""
    return tuple(shape[:-2]), tuple(st[:-2]), st[-2], st[-1]


def _operand(instrs, pos, touches, tr, b, mm, taken, touched):
    """(producer P, root R) when transpose ``tr``'s output, read by ``mm`` as ``b`` (T or a view of it), may be
    read through strides from R's bytes moved to it; else None (see the module doc)."""
    (t,), (x,) = tr.outs, tr.ins
    r = x.root
    if t.kind != "activation" or t.base is not None or r.kind != "activation" or not (_plain(t) and _plain(x)):
        return None
    if x.address != r.address or not (x.size == r.size == t.size):
        return None
    if b is not t and not (b.address == t.address and b.size == t.size and b.type.shape[-2:] == t.type.shape[-2:]
                           and _plain(b)):
        return None
    if [j for j in touches[id(t)] if j > pos[id(tr)] and instrs[j].op not in PSEUDO] != [pos[id(mm)]]:
        return None
    if [k for c, k in mm.operands if c.root is t] != ["in"]:
        return None
    near = [j for j in touches[id(r)] if instrs[j].op not in PSEUDO]
    if len(near) != 2 or near[1] != pos[id(tr)]:
        return None
    p = instrs[near[0]]
    if id(p) in taken or any(b.root is r and (b is not r or k != "out") for b, k in p.operands):
        return None
    if any(_overlap(b, t) and not _in_place(p, b, r, t) for b in touched(p) if b is not r):
        return None
    if not _untouched(instrs, near[0], pos[id(tr)], t, touched):
        return None
    return p, r


def _result(instrs, pos, touches, mm, c, avoid, taken):
    """(transpose, Y, strides of C's axes in Y) when ``mm`` may write its result ``c`` through strides into the
    output of the transpose that alone reads it, overlapping none of ``avoid``; else None (see the module doc)."""
    if c.kind != "activation" or c.base is not None or not _plain(c):
        return None
    found = readers(instrs, touches[id(c)], pos[id(mm)], c)
    if not found or len(found) != 1 or len(found[0][1]) != 1:
        return None
    tr = found[0][0]
    if tr.op != "transpose" or id(tr) in taken or tr.ins[0] is not c:
        return None
    if [j for j in touches[id(c)] if instrs[j].op not in PSEUDO] != [pos[id(mm)], pos[id(tr)]]:
        return None
    (y,) = tr.outs
    if y.region == "constant" or not _plain(y):
        return None
    perm = tr.attrs["perm"]
    ystr = row_strides(y.type.shape)
    st = [0] * len(perm)
    for d, p in enumerate(perm):
        st[p] = ystr[d]
    if st[-1] != 1 or any(_overlap(y, b) for b in avoid):
        return None
    if any(ins.op not in PSEUDO for ins in instrs[pos[id(mm)] + 1:pos[id(tr)]]):
        return None
    return tr, y, st
