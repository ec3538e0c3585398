"""Operator stacking on the planned IR: a ``broadcast`` whose every reader is an elementwise kernel is not
materialized; the readers index its source in place (stride 0 along the broadcast dims).

``read_in_place(irf, elementwise)`` decides per broadcast instruction: its output B (an activation, no view of
it anywhere) is read, from the broadcast until B is next written, only as an input of instructions for which
``elementwise(op)`` holds, and its source S keeps its value over that window (a constant, or a buffer whose
bytes nothing writes there). Then the broadcast runs no kernel and each reader's operand is S itself
(``Elided.sources``): its kernel sees an input of a smaller shape and reads it through the broadcast's index map
(codegen.k_elementwise). Linear in the code's length times the length of a broadcast's window (from it to its
last reader: a few instructions).
"""
from __future__ import annotations

from dataclasses import dataclass

from glow_core.ir import PSEUDO


@dataclass
class Elided:
    """The broadcasts not materialized (by ``id`` of the instruction) and, per reading instruction (``id``), the
    operand slots whose buffer is replaced by the broadcast's source."""

    broadcasts: set
    sources: dict  # id(instr) -> {slot: source buffer}


def positions(irf) -> tuple[dict, dict]:
    """({id(instr): its position in irf.instrs}, {id(root buffer): the ascending positions of the instructions
    touching any buffer of that root}), in one pass over the code."""
    pos = {id(ins): i for i, ins in enumerate(irf.instrs)}
    touches: dict[int, list] = {}
    for i, ins in enumerate(irf.instrs):
        for b, _ in ins.operands:
            lst = touches.setdefault(id(b.root), [])
            if not lst or lst[-1] != i:
                lst.append(i)
    return pos, touches


def read_in_place(irf, elementwise) -> Elided:
    """The broadcasts of ``irf`` whose readers all index the source directly (see the module doc)."""
    instrs = irf.instrs
    pos, touches = positions(irf)
    out = Elided(set(), {})
    for ins in irf.code:
        if ins.op != "broadcast":
            continue
        (dst,), (src,) = ins.outs, ins.ins
        if dst.kind != "activation" or dst.base is not None:
            continue
        found = readers(instrs, touches[id(dst)], pos[id(ins)], dst, elementwise)
        if not found or not _stable(instrs, pos[id(ins)], pos[id(found[-1][0])], src):
            continue
        out.broadcasts.add(id(ins))
        for r, slots in found:
            out.sources.setdefault(id(r), {}).update({s: src for s in slots})
    return out


def readers(instrs, touching, start, dst, accept=None):
    """[(instr, slots reading dst)] from ``start`` until dst is next written, or None when any use is not a plain
    read (a view of dst) or its instruction fails ``accept(op)`` (when given). ``touching``: the positions of the
    instructions with an operand in dst's root, ascending."""
    found = []
    for i in touching:
        if i <= start:
            continue
        ins = instrs[i]
        if ins.op == "deallocactivation":
            break
        slots = []
        writes = False
        for s, (b, kind) in enumerate(ins.operands):
            if b.root is not dst:
                continue
            if b is not dst:
                return None
            if kind == "in":
                slots.append(s)
            else:
                writes = True
        if slots:
            if accept is not None and not accept(ins.op):
                return None
            found.append((ins, slots))
        if writes:
            break
    return found


def _stable(instrs, start, end, src) -> bool:
    """Whether ``src`` holds the same value from ``start`` to ``end``: a constant, or a buffer whose bytes no
    instruction in between writes (an output or scratch operand overlapping them: the planner may give the
    memory of an activation freed in between to another)."""
    region = src.region
    if region == "constant":
        return True
    lo, hi = src.address, src.address + src.size
    for ins in instrs[start + 1:end + 1]:
        for b, kind in ins.operands:
            if kind != "in" and b.region == region and b.address < hi and lo < b.address + b.size:
                if ins.op not in PSEUDO:
                    return False
    return True
