"""Rule "transposes": transposes folded into batched matmuls on the planned IR: a matmul reads an operand, or
writes its result, through strides instead of a transpose kernel copying it (the attention heads' split and merge
in transformers).

``match`` looks at every consumer M (``Consumer``: its operand slots that accept strides, the instruction reading
each, its result slot), in program order: each float32/float64 matmul the GEMM or the plain loops run (gemm and
naive modes; the GEMV and convert modes keep the copies) that no earlier rule took, with slots A, B and C; and each fused
attention (rule "attention", at its second matmul), with slots q, k (read by its first matmul), v and o (its
second matmul's), its result overlapping none of q, k, v, the mask and the byte ranges of its scratch. Memory is
checked against what each call really touches once the earlier groups apply (``Fused.touched``). Below, "M" is
the instruction reading the slot (or writing the result).

In-place read (A, B, or q, k, v of M; tried first): the operand is T = transpose(X, perm) and/or X (or the operand)
is a whole view of E = broadcast(S) (grouped-query attention's repeated key/value heads, the keys transposed:
torch's repeat_kv), T and E touched only by their writer and the next instruction of that chain; S is plain, not
moved by another fold, overlaps neither T, E nor what M writes (its result, scratch, a fused attention's scratch),
and no call from the chain's first instruction to M writes its bytes (a KV cache, a graph input, a constant, or an
activation the plan keeps). Then the chain runs no kernel and M reads S through strides: 0 along broadcast
axes, E's reshape to X regrouping axes (an axis that would need a stride S lacks refuses the fold; batch axes
keep each part's stride), permuted by perm (``_in_place_read``).
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

from glow_core.ir import PLAIN, PSEUDO, Buffer, Instr
from glow_core.plan_queries import Span, overlap as _overlap

from ..kernels.codegen import STRIDED, KernelInstr, kernel_code, row_strides
from ..kernels.elementwise import stacked
from ..kernels.matmul import matmul_plan
from . import Group, Rule


@dataclass
class _State:
    """The rule's working state over one function: the uses of memory outside the plan by the folds made so far
    (``spans``: (first, last position, buffer)) and the results written elsewhere (id(C) -> Y)."""

    spans: list = field(default_factory=list)
    results: dict = field(default_factory=dict)
    broadcasts_of: "dict | None" = None  # id(result) -> the broadcast writing it, made once per program


def _plain(b) -> bool:
    return b.layout == PLAIN and b.root.layout == PLAIN


def _strides(shape, perm) -> list[int]:
    """The element strides of transpose(tensor of ``shape``, perm)'s axes in the tensor's row-major memory."""
    st = row_strides(shape)
    return [st[p] for p in perm]


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


def _consumer(fused, ins):
    """(key, Consumer) when ``ins`` is one: a GEMM-mode matmul no rule took (key: the matmul), or the second
    matmul of a fused attention (key: its attention.Attention); else None."""
    g = fused.group_of(ins)
    if g is not None and g.rule == "attention" and g.at is ins:
        att = g.data
        first = att.members[0]
        return att, Consumer(ins, [("q", first, att.q), ("k", first, att.k), ("v", ins, att.v)], ("o", att.out),
                             [b for b in (att.q, att.k, att.v, att.mask) if b is not None] +
                             [Span(c.region, c.address + off, size) for c, off, size in (att.kpack, att.work)])
    if ins.op == "matmul" and id(ins) not in fused.taken and STRIDED not in ins.attrs and \
            ins.ins[0].type.dtype.name in FLOATS and matmul_plan(KernelInstr.of(ins)).mode in ("gemm", "naive"):
        return ins, Consumer(ins, [("a", ins, ins.ins[0]), ("b", ins, ins.ins[1])], ("c", ins.outs[0]),
                             [b for b, k in ins.operands if k != "out"])
    return None


def match(fused, ins) -> "Group | None":
    """The transposes consumer ``ins`` reads and writes through strides (see the module doc), or None."""
    found = _consumer(fused, ins)
    if found is None:
        return None
    key, con = found
    st = fused.state.setdefault("transposes", _State())
    if "writers" not in fused.state:
        fused.state["writers"] = {id(t.outs[0]): t for t in fused.irf.code if t.op == "transpose"}  # by id of T
    writer, index, taken = fused.state["writers"], fused.index, fused.taken

    def now(i) -> list:  # the buffers the call at i touches, the folds so far applied
        if id(i) in absorbed:
            return []
        return [st.results.get(id(b), fused.moved.get(id(b.root), b)) for b in fused.touched(i)]
    strided, members, claims, absorbed, reads = {}, [], [], {}, {}
    for name, reader, b in con.reads:
        got = _in_place_read(fused, st, con, reader, b)
        if got is not None:  # read the source of a transpose and/or broadcast where it lies
            chain, src, view = got
            st.spans.append((index.position(chain[0]), index.position(con.at), src))
            strided[name], reads[name] = view, src
            for m in chain:
                absorbed[id(m)] = f"folded: {con.at.name} reads {src.name} in place through strides"
                taken.add(id(m))
                members.append(m)
            continue
        tr = writer.get(id(b.root))
        got = tr is not None and id(tr) not in taken and _operand(index, tr, b, reader, taken, now)
        if got and not _clash(st.spans, index.position(got[0]), b):
            st.spans.append((index.position(got[0]), index.position(con.at), b))
            p, r = got
            strided[name] = _split(tr.outs[0].type.shape, _strides(tr.ins[0].type.shape, tr.attrs["perm"]))
            absorbed[id(tr)] = (f"folded: {con.at.name} reads its source through strides (written into this buffer "
                                f"by {p.name})")
            fused.moved[id(r)] = tr.outs[0]
            taken.update((id(tr), id(p)))
            members.append(tr)
            claims.append(p)
    name, c = con.result
    res = _result(index, con.at, c, con.avoid + list(reads.values()), taken)  # not over a source read in place
    if res is not None and not _clash(st.spans, index.position(con.at), res[1]):
        tr, y, strides = res
        st.spans.append((index.position(con.at), index.position(con.at), y))
        strided[name] = _split(c.type.shape, strides)
        st.results[id(c)] = y
        absorbed[id(tr)] = f"folded: {con.at.name} writes its result through strides"
        taken.add(id(tr))
        members.append(tr)
    if not strided:
        return None
    if isinstance(key, Instr):
        taken.add(id(key))
        slot = {1: "a", 2: "b"}
        ops = [(st.results.get(id(b), b) if k == "out" else _alias(b, reads[slot[i]]) if slot.get(i) in reads
                else b, k) for i, (b, k) in enumerate(key.operands)]
        one = Instr("matmul", ops, {**key.attrs, STRIDED: strided}, key.name)
        touches = [reads.get(slot.get(i), b) for i, (b, _) in enumerate(one.operands)]
        return Group("transposes", members + [key], key, absorbed, touches, claims=claims, data=one)
    key.strided, key.folded_out = strided, st.results.get(id(c), c)
    key.reads = reads
    return Group("transposes", members, None, absorbed, claims=claims)


def kernel(group, fused):
    """The matmul reading or writing through strides (a fused attention's folds are its own kernel's)."""
    one = group.data
    return one, kernel_code(KernelInstr.of(one), fused.num_threads), [b for b, _ in one.operands]


FLOATS = ("float32", "float64")


def _alias(b, src):
    """A buffer of ``b``'s type at ``src``'s address (the kernel reads ``src``'s bytes through strides as b)."""
    return Buffer(f"{b.name}@{src.name}", b.type, "view", base=src.root, view_offset=src.address - src.root.address,
                  layout=b.layout)


def _axes_of_reshape(axes, shape) -> "list | None":
    """Per axis of ``shape`` (a row-major reshape of a tensor whose axes are ``axes``: (size, element stride)), its
    (size, stride) parts, outer first; None when an axis would need a stride the source does not have."""
    src = [a for a in axes if a[0] != 1]
    out, i, rem, s = [], 0, 1, 0
    for d in shape:
        parts, need = [], d
        while need > 1:
            if rem == 1:
                if i == len(src):
                    return None
                (rem, s), i = src[i], i + 1
            if need % rem == 0:
                parts.append((rem, s))
                need, rem = need // rem, 1
            elif rem % need == 0:
                parts.append((need, s * (rem // need)))
                rem, need = rem // need, 1
            else:
                return None
        out.append(parts)
    return out if rem == 1 and i == len(src) else None


def _one_stride(parts) -> "int | None":
    """The element stride of an axis made of ``parts`` (outer first) when they form one stride, else None."""
    parts = [p for p in parts if p[0] != 1]
    if not parts:
        return 0
    for (n0, s0), (n1, s1) in zip(parts, parts[1:]):
        if s0 != n1 * s1:
            return None
    return parts[-1][1]


def _in_place_read(fused, st, con, reader, b):
    """(absorbed chain in program order, source buffer S, (batch shape, batch strides, row stride, column
    stride)) when the operand ``b`` of ``con`` (read by ``reader``) is T = transpose(X, perm) and/or X is a view
    of E = broadcast(S), and the consumer may read S's bytes in place through strides instead: the transpose and
    the broadcast run no kernel. Conditions: T (and E) a whole plain activation touched only by its writer and
    the next instruction of the chain, read there in one slot (as itself, or as a whole-size view keeping the
    last two axes); S plain, not moved by another fold, overlapping neither T, E nor what the consumer writes
    (its result, scratch or the fused attention's scratch), and no call between the chain's first instruction
    and the consumer writes a byte of S (the folds so far applied); a reshape of E needs no stride S lacks."""
    index, taken = fused.index, fused.taken
    instrs = index.instrs
    if st.broadcasts_of is None:
        st.broadcasts_of = {id(i.outs[0]): i for i in fused.irf.code if i.op == "broadcast"}
    if b.type.dtype.name not in FLOATS or not _plain(b):
        return None

    def only(buf, writer, user):  # buf: a whole plain activation touched by writer and user alone
        if buf.kind != "activation" or buf.base is not None or not _plain(buf) or id(buf) in fused.moved:
            return False
        near = [j for j in index.touching(buf) if instrs[j].op not in PSEUDO]
        return near == [index.position(writer), index.position(user)] and \
            [k for c, k in user.operands if c.root is buf] == ["in"]

    def whole_view(v, root, keep_last2):
        return v is root or (v.address == root.address and v.size == root.size and _plain(v) and
                             (not keep_last2 or v.type.shape[-2:] == root.type.shape[-2:]))
    chain, perm = [], None
    x = b
    tr = fused.state["writers"].get(id(b.root))  # the transposes by result, made by match
    if tr is not None and id(tr) not in taken and whole_view(b, tr.outs[0], True) and only(tr.outs[0], tr, reader):
        chain, perm, x = [tr], tr.attrs["perm"], tr.ins[0]
    first_user = chain[0] if chain else reader
    bc = st.broadcasts_of.get(id(x.root))
    if bc is not None and id(bc) not in taken and whole_view(x, bc.outs[0], False) and (
            chain or whole_view(b, bc.outs[0], True)) and only(bc.outs[0], bc, first_user):
        src = bc.ins[0]
        if not _plain(src) or src.type.dtype != b.type.dtype:
            return None
        e, ss = bc.outs[0].type.shape, list(src.type.shape)
        ss = [1] * (len(e) - len(ss)) + ss
        rs = row_strides(ss)
        axes = [(n, 0 if m == 1 and n != 1 else st_) for n, m, st_ in zip(e, ss, rs)]
        chain.insert(0, bc)
    elif chain:
        src = x
        axes = list(zip(x.type.shape, row_strides(x.type.shape)))
    else:
        return None
    if id(src.root) in fused.moved or id(src.root) in {id(v) for v in st.results}:
        return None
    parts = _axes_of_reshape(axes, x.type.shape)
    if parts is None:
        return None
    if perm is not None:
        parts = [parts[p] for p in perm]
    # b: T itself or a view of all of T regrouping its batch axes (the batches keep their row-major order)
    rs_, cs_ = _one_stride(parts[-2]), _one_stride(parts[-1])
    if rs_ is None or cs_ is None:
        return None
    batch = [p for ax in parts[:-2] for p in ax]
    if any(_overlap(src, c.outs[0]) for c in chain):
        return None
    lo, hi = index.position(chain[0]), index.position(con.at)
    writes = [bf for bf, k in con.at.operands if k != "in"] + [a for a in con.avoid if isinstance(a, Span)]
    if any(_overlap(src, w) for w in writes) or _clash(st.spans, lo, src):
        return None
    if not index.unwritten(src, lo, hi, {id(m) for m in chain}):
        return None
    return chain, src, (tuple(n for n, _ in batch), tuple(s for _, s in batch), rs_, cs_)


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


def _operand(index, tr, b, mm, taken, touched):
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
    instrs, at = index.instrs, index.position(tr)
    if [j for j in index.touching(t) if j > at and instrs[j].op not in PSEUDO] != [index.position(mm)]:
        return None
    if [k for c, k in mm.operands if c.root is t] != ["in"]:
        return None
    near = [j for j in index.touching(r) if instrs[j].op not in PSEUDO]
    if len(near) != 2 or near[1] != at:
        return None
    p = instrs[near[0]]
    if id(p) in taken or any(b.root is r and (b is not r or k != "out") for b, k in p.operands):
        return None
    if any(_overlap(b, t) and not _in_place(p, b, r, t) for b in touched(p) if b is not r):
        return None
    if not index.untouched(t, near[0], at, touched):
        return None
    return p, r


def _result(index, mm, c, avoid, taken):
    """(transpose, Y, strides of C's axes in Y) when ``mm`` may write its result ``c`` through strides into the
    output of the transpose that alone reads it, overlapping none of ``avoid``; else None (see the module doc)."""
    if c.kind != "activation" or c.base is not None or not _plain(c):
        return None
    instrs, at = index.instrs, index.position(mm)
    found = index.readers(c, at)
    if not found or len(found) != 1 or len(found[0][1]) != 1:
        return None
    tr = found[0][0]
    if tr.op != "transpose" or id(tr) in taken or tr.ins[0] is not c:
        return None
    if [j for j in index.touching(c) if instrs[j].op not in PSEUDO] != [at, index.position(tr)]:
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
    if any(ins.op not in PSEUDO for ins in instrs[at + 1:index.position(tr)]):
        return None
    return tr, y, st


RULE = Rule("transposes", match, kernel, option="transpose_folding")
