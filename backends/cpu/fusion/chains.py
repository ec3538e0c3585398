"""Rule "chains" (the Glow paper's operator stacking): a DAG of elementwise instructions over one iteration space runs
as one loop that computes every member's value per element in registers.

The rule runs last instruction first. A member M (an instruction no earlier rule took whose kernel is the
elementwise loop, ``kernels.elementwise.chainable``: one output, an activation no view aliases) joins the chain of
its readers when the value it writes is read, from M until its buffer is next written, only by instructions of that
one chain, and its output has the chain root's shape and layout (its dtype may differ: casts, predicates). The root,
the chain's last instruction, writes the only output; the members' outputs are never written (their memory stays
planned and unused). The loop runs where the root ran, so every buffer a member reads from outside the chain (a
broadcast's source read in place: rule "broadcasts") must keep its bytes from the member to the root: no other
instruction in between writes over them, and the root's output meets them only at the same address with the same
element size, read element for element (in-place reuse). Reverse program order, each instruction looking at the
readers of its own output and at the instructions between it and its root (at most ``MAX_SPAN`` of them): linear in
the code's length.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from glow_core.fusion import FUSED_ACTIVATION, FUSED_PARAMS
from glow_core.plan_queries import overlap

from ..kernels.codegen import KernelInstr, Operand, kernel_code
from ..kernels.elementwise import chainable
from . import Group, Rule

#: Longest stretch of instructions a member may run ahead of its root (beyond it, it stays a kernel of its own).
MAX_SPAN = 64
#: Most members in one chain (the loop body's size, and the compiler's registers).
MAX_MEMBERS = 24


@dataclass(eq=False)
class Chain:
    """The members of one chain in program order (the root last) and, per member and input slot, the member
    whose value that slot reads (``bound[(id(instr), slot)]``); every other input is read from memory."""

    root: object
    members: list = field(default_factory=list)
    bound: dict = field(default_factory=dict)


ABSORBED = "computed in the elementwise chain loop of a later instruction"


def match(fused, ins) -> "Group | None":
    """The chain ``ins`` belongs to (its readers', grown by ins, or a new one), or None when ins cannot be in
    one; called last instruction first (chains of one member are dropped: Rule.least)."""
    if id(ins) in fused.taken or not chainable(ins):
        return None
    (out,) = ins.outs
    index = fused.index
    group = None
    if out.kind == "activation" and out.base is None and id(out) not in index.viewed:
        readers = index.readers(out, index.position(ins))
        group = _joined(readers, fused, ins, out)
        if group is not None:
            for r, slots in readers:
                group.data.bound.update({(id(r), s): ins for s in slots})
    if group is None:
        chain = Chain(ins)
        group = Group("chains", chain.members, ins, ABSORBED, data=chain)
    group.data.members.insert(0, ins)
    group.touches = [b for m in group.members for b in fused.operands(m)]
    return group


def kernel(group, fused):
    """The chain's loop at its root."""
    ki, bufs = chain_kernel(group.data, fused.sources)
    return group.at, kernel_code(ki, fused.num_threads), bufs


def _joined(readers, fused, ins, out) -> "Group | None":
    """The chain group ``ins`` joins (that of all its readers), or None."""
    if not readers:
        return None
    group = fused.group_of(readers[0][0])
    if group is None or group.rule != "chains" or len(group.members) >= MAX_MEMBERS or \
            any(fused.group_of(r) is not group for r, _ in readers):
        return None
    root = group.at
    (rout,) = root.outs
    if out.type.shape != rout.type.shape or out.layout != rout.layout:
        return None
    start, end = fused.index.position(ins), fused.index.position(root)
    if end - start > MAX_SPAN:
        return None
    members = {id(m) for m in group.members}
    sub = fused.sources.get(id(ins), {})
    for s, (b, kind) in enumerate(ins.operands):
        if kind == "in" and not _stable(sub.get(s, b), out, rout, fused.index, start, end, members):
            return None
    return group


def _stable(x, out, rout, index, start, end, members) -> bool:
    """Whether input ``x`` of a member at ``start`` (output ``out``) still holds its bytes when the root at
    ``end`` (output ``rout``) runs the loop, and the loop's stores to rout never overwrite an element of x it
    has still to read."""
    if not index.unwritten(x, start, end, members):
        return False
    if overlap(rout, x):
        return (rout.address == x.address and x.type.shape == out.type.shape and x.layout == out.layout
                and x.type.dtype.itemsize == rout.type.dtype.itemsize)
    return True


def chain_kernel(chain, sources) -> tuple[KernelInstr, list]:
    """The KernelInstr of ``chain`` (op ``elementwise_chain``: the root's output, then every input read from
    memory once, in order of first use) and the buffers of its operands. Its ``steps`` attribute holds one
    record per member: (op, attributes, input references ("in", k) or ("t", member), input dtypes, output
    dtype, fused activation, its parameters)."""
    index = {id(m): k for k, m in enumerate(chain.members)}
    root = KernelInstr.of(chain.root, sources.get(id(chain.root)))
    operands, bufs, seen = [(root.outs[0], "out")], [chain.root.outs[0]], {}
    steps = []
    for m in chain.members:
        ki = KernelInstr.of(m, sources.get(id(m)))
        subst = sources.get(id(m), {})
        refs = []
        for s, (b, kind) in enumerate(m.operands):
            if kind != "in":
                continue
            producer = chain.bound.get((id(m), s))
            if producer is not None:
                refs.append(("t", index[id(producer)]))
                continue
            b = subst.get(s, b)
            o = ki.operands[s][0]
            key = (id(b), o.type, o.layout)
            if key not in seen:
                seen[key] = len(bufs) - 1
                operands.append((Operand(len(bufs), o.type, o.const, o.layout), "in"))
                bufs.append(b)
            refs.append(("in", seen[key]))
        attrs = {k: v for k, v in m.attrs.items() if not k.startswith("_")}
        steps.append((m.op, attrs, tuple(refs), tuple(o.type.dtype.name for o in ki.ins),
                      ki.outs[0].type.dtype.name, m.attrs.get(FUSED_ACTIVATION),
                      dict(m.attrs.get(FUSED_PARAMS) or {})))
    return KernelInstr("elementwise_chain", {"steps": steps}, operands), bufs


RULE = Rule("chains", match, kernel, option="elementwise_chains", order="reverse", least=2)
