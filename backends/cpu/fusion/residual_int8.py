"""Residual fusion on the planned IR: a ``qadd`` that adds an int8 engine conv's output to a tensor computed
before it runs in the conv's epilogue, over the pixels each register tile has just stored (still in L1), instead
of as a kernel (and a parallel region) of its own.

``fuse_residuals(irf, engine_conv)`` picks every pair (conv C = qconv(...), Y = qadd(C, B) or qadd(B, C)) where:
``engine_conv(conv)`` holds (the int8 engine runs it, with an 8-bit output), only pseudo-instructions lie between
the two, C is a whole activation (no view of it) with no reader after the qadd (unless the qadd writes Y into C
itself), the qadd reads C with the conv's output scale and offset, and the memory plan lets the epilogue write Y
while the conv still reads: Y overlaps neither the conv's scratch nor its input (unless Y is exactly the input
of a batch of 1: the kernel transforms the whole image into scratch before any tile stores), and Y is either
disjoint from C and B or exactly one of them (element for element in place); B is disjoint from C and the
scratch.
Bit-exact: C is still requantized and stored as the qconv primitive defines it, then the qadd kernel's own
arithmetic (codegen_int8) reads it back. Linear in the code's length (each conv looks at its next few
instructions; each C's later readers are scanned once).
"""
from __future__ import annotations

from dataclasses import dataclass

from glow_core.ir import PSEUDO, Instr

_EIGHT = ("int8", "uint8")


@dataclass(frozen=True)
class Residual:
    """A fused pair: the conv instruction as its kernel sees it (``conv``: the qconv's operands, then B "in" and
    Y "out", with attribute ``residual``), and the qadd it absorbs."""

    conv: Instr
    add: Instr


def _overlap(a, b) -> bool:
    """Whether buffers ``a`` and ``b`` share a byte (None shares none)."""
    return (a is not None and b is not None and a.region == b.region and a.address < b.address + b.size
            and b.address < a.address + a.size)


def _same(a, b) -> bool:
    return a.region == b.region and a.address == b.address and a.size == b.size


def _disjoint_or_same(a, b) -> bool:
    return not _overlap(a, b) or _same(a, b)


def _read_later(instrs, start: int, c) -> bool:
    """Whether any instruction after ``start`` touches C before it is deallocated or written again."""
    for ins in instrs[start + 1:]:
        if ins.op == "deallocactivation" and any(b.root is c for b, _ in ins.operands):
            return False
        for b, kind in ins.operands:
            if b.root is c:
                return kind == "in" or kind == "inout" or b is not c
    return False


def next_add(instrs, i: int, c, op: str):
    """(position, instruction, slot of C, other operand) when the first instruction after position ``i`` that is
    not a pseudo-instruction is an ``op`` with C as exactly one of its two inputs; else None."""
    j = i + 1
    while j < len(instrs) and instrs[j].op in PSEUDO:
        j += 1
    if j == len(instrs) or instrs[j].op != op:
        return None
    add = instrs[j]
    a_in, b_in = add.ins
    if (a_in is c) == (b_in is c):
        return None
    return (j, add, 0, b_in) if a_in is c else (j, add, 1, a_in)


def fuse_residuals(irf, engine_conv) -> dict:
    """{id(conv instr) or id(qadd instr): Residual} for every fusible pair of ``irf`` (see the module doc)."""
    instrs = irf.instrs
    pos = {id(ins): i for i, ins in enumerate(instrs)}
    out: dict = {}
    for conv in irf.code:
        if conv.op != "qconv" or id(conv) in out:
            continue
        (c,) = conv.outs
        if c.kind != "activation" or c.base is not None or c.type.dtype.name not in _EIGHT:
            continue
        found = next_add(instrs, pos[id(conv)], c, "qadd")
        if found is None:
            continue
        j, add, slot, b = found
        (y,) = add.outs
        if b.root is c or {b.type.dtype.name, y.type.dtype.name} - set(_EIGHT):
            continue
        x, scratch = conv.ins[0], conv.scratch
        if _overlap(y, x) and not (_same(y, x) and x.type.shape[0] == 1):
            continue
        if scratch is not None and (_overlap(y, scratch) or _overlap(b, scratch)):
            continue
        if _overlap(b, c) or not _disjoint_or_same(y, c) or not _disjoint_or_same(y, b):
            continue
        cs, co = ("a_scale", "a_offset") if slot == 0 else ("b_scale", "b_offset")
        if add.attrs[cs] != conv.attrs["out_scale"] or add.attrs[co] != conv.attrs["out_offset"]:
            continue
        if any(k.startswith("_") for k in add.attrs) or (y.root is not c and _read_later(instrs, j, c)):
            continue
        if not engine_conv(conv):
            continue
        fused = Instr("qconv", list(conv.operands) + [(b, "in"), (y, "out")],
                      {**conv.attrs, "residual": {**add.attrs, "conv_slot": slot}}, conv.name)
        out[id(conv)] = out[id(add)] = Residual(fused, add)
    return out
