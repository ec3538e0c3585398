"""Elementwise chains on the planned IR (the Glow paper's operator stacking): a DAG of elementwise instructions
over one iteration space runs as one loop that computes every member's value per element in registers.

``elementwise_chains(irf, fusable, sources)`` groups the instructions. A member M (an instruction for which
``fusable(instr)`` holds: one output, an activation no view aliases) joins the chain of its readers when the
value it writes is read, from M until its buffer is next written, only by instructions of that one chain, and
its output has the chain root's shape and layout (its dtype may differ: casts, predicates). The root, the chain's last instruction, writes the only
output; the members' outputs are never written (their memory stays planned and unused). The loop runs where the
root ran, so every buffer a member reads from outside the chain (``sources`` applied: a broadcast's source read
in place, stacking.py) must keep its bytes from the member to the root: no other instruction in between writes
over them, and the root's output meets them only at the same address with the same element size, read element
for element (in-place reuse). Reverse program order, each instruction looking at the readers of its own output
and at the instructions between it and its root (at most ``MAX_SPAN`` of them): linear in the code's length.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from glow_core.fusion import FUSED_ACTIVATION, FUSED_PARAMS
from glow_core.ir import PSEUDO

from . import broadcasts as stacking
from ..kernels.codegen import KernelInstr, Operand

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


def elementwise_chains(irf, fusable, sources) -> dict:
    """The chains of two or more instructions of ``irf``, by ``id`` of each member (the root included); see the
    module doc. ``sources``: id(instr) -> {slot: buffer read instead} (stacking.Elided.sources)."""
    instrs = irf.instrs
    pos, touches = stacking.positions(irf)
    viewed = {id(b.root) for b in irf.buffers if b.base is not None}
    chain_of: dict[int, Chain] = {}
    for ins in reversed(irf.code):
        if not fusable(ins):
            continue
        (out,) = ins.outs
        chain = None
        if out.kind == "activation" and out.base is None and id(out) not in viewed:
            readers = stacking.readers(instrs, touches[id(out)], pos[id(ins)], out)
            chain = _joined(readers, chain_of, ins, out, instrs, pos, sources)
            if chain is not None:
                for r, slots in readers:
                    chain.bound.update({(id(r), s): ins for s in slots})
        if chain is None:
            chain = Chain(ins)
        chain.members.insert(0, ins)
        chain_of[id(ins)] = chain
    return {k: c for k, c in chain_of.items() if len(c.members) > 1}


def _joined(readers, chain_of, ins, out, instrs, pos, sources) -> "Chain | None":
    """The chain ``ins`` joins (that of all its readers), or None."""
    if not readers:
        return None
    chain = chain_of.get(id(readers[0][0]))
    if chain is None or len(chain.members) >= MAX_MEMBERS or any(chain_of.get(id(r)) is not chain
                                                                  for r, _ in readers):
        return None
    root = chain.root
    (rout,) = root.outs
    if out.type.shape != rout.type.shape or out.layout != rout.layout:
        return None
    start, end = pos[id(ins)], pos[id(root)]
    if end - start > MAX_SPAN:
        return None
    members = {id(m) for m in chain.members}
    subst = sources.get(id(ins), {})
    for s, (b, kind) in enumerate(ins.operands):
        if kind == "in" and not _stable(subst.get(s, b), out, rout, instrs, start, end, members):
            return None
    return chain


def _stable(x, out, rout, instrs, start, end, members) -> bool:
    """Whether input ``x`` of a member at ``start`` (output ``out``) still holds its bytes when the root at
    ``end`` (output ``rout``) runs the loop, and the loop's stores to rout never overwrite an element of x it
    has still to read."""
    if x.region == "constant":
        return True
    lo, hi = x.address, x.address + x.size
    for ins in instrs[start + 1:end]:
        if ins.op in PSEUDO or id(ins) in members:
            continue
        for b, kind in ins.operands:
            if kind != "in" and b.region == x.region and b.address < hi and lo < b.address + b.size:
                return False
    if rout.region == x.region and rout.address < hi and lo < rout.address + rout.size:
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
