"""Questions a backend's post-plan passes (fusions, operator stacking) ask about a planned IRFunction: whether two
buffers share bytes, where each instruction stands, which instructions read a buffer until it is next written,
and whether a byte range keeps its value over a stretch of the code.

``PlanIndex(irf)`` scans the code once (positions, and per root buffer the positions of the instructions touching
it); each query then looks only at the instructions it names, so a pass asking a few per instruction stays
linear in the code's length. Pseudo-instructions (allocations, deallocations) never read or write data.
"""
from __future__ import annotations

from dataclasses import dataclass

from .ir import PSEUDO


@dataclass(frozen=True)
class Span:
    """Bytes of a memory region that are not a buffer of their own (a part of one: a fused kernel's scratch)."""

    region: str
    address: int
    size: int


def overlap(a, b) -> bool:
    """Whether buffers (or Spans) ``a`` and ``b`` share a byte; None shares none."""
    return (a is not None and b is not None and a.region == b.region and a.address < b.address + b.size
            and b.address < a.address + a.size)


def same_bytes(a, b) -> bool:
    """Whether ``a`` and ``b`` are exactly the same bytes (region, address, size)."""
    return a.region == b.region and a.address == b.address and a.size == b.size


class PlanIndex:
    """One scan of a planned IRFunction's code: instruction positions, the instructions touching each root
    buffer, the roots some view aliases."""

    def __init__(self, irf):
        self.instrs = irf.instrs
        self.pos = {id(ins): i for i, ins in enumerate(self.instrs)}
        self.touches: dict[int, list] = {}  # id(root) -> ascending positions of the instructions touching it
        for i, ins in enumerate(self.instrs):
            for b, _ in ins.operands:
                lst = self.touches.setdefault(id(b.root), [])
                if not lst or lst[-1] != i:
                    lst.append(i)
        self.viewed = {id(b.root) for b in irf.buffers if b.base is not None}

    def position(self, ins) -> int:
        return self.pos[id(ins)]

    def touching(self, b) -> list:
        """Ascending positions of the instructions with an operand in ``b``'s root."""
        return self.touches.get(id(b.root), [])

    def readers(self, dst, start: int, accept=None) -> "list | None":
        """[(instr, slots reading dst)] from position ``start`` until dst is next written or deallocated, or None
        when any use is not a plain read of dst itself (a view of it) or its instruction fails ``accept(op)``."""
        found = []
        for i in self.touching(dst):
            if i <= start:
                continue
            ins = self.instrs[i]
            if ins.op == "deallocactivation":
                break
            slots, writes = [], False
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

    def next_kernel(self, i: int) -> int:
        """The position of the first instruction after ``i`` that is not a pseudo-instruction (len when none)."""
        j = i + 1
        while j < len(self.instrs) and self.instrs[j].op in PSEUDO:
            j += 1
        return j

    def read_later(self, start: int, c) -> bool:
        """Whether any instruction after ``start`` reads ``c`` (or touches it through a view) before it is
        deallocated or written again."""
        for ins in self.instrs[start + 1:]:
            if ins.op == "deallocactivation" and any(b.root is c for b, _ in ins.operands):
                return False
            for b, kind in ins.operands:
                if b.root is c:
                    return kind == "in" or kind == "inout" or b is not c
        return False

    def unwritten(self, buf, start: int, end: int, skip=frozenset()) -> bool:
        """Whether no instruction strictly between positions ``start`` and ``end`` (not a pseudo-instruction, its
        id not in ``skip``) writes a byte of ``buf`` (an output, inout or scratch operand over it: the planner
        may give the memory of a buffer freed in between to another); constants never change."""
        if buf.region == "constant":
            return True
        for ins in self.instrs[start + 1:end]:
            if ins.op in PSEUDO or id(ins) in skip:
                continue
            if any(kind != "in" and overlap(b, buf) for b, kind in ins.operands):
                return False
        return True

    def untouched(self, buf, start: int, end: int, touched) -> bool:
        """Whether no instruction strictly between positions ``start`` and ``end`` reads or writes a byte of
        ``buf``, its operands as ``touched(instr)`` lists them (the buffers its call really uses once fusions are
        applied)."""
        return not any(overlap(b, buf) for ins in self.instrs[start + 1:end] if ins.op not in PSEUDO
                       for b in touched(ins))
