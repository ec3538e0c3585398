"""Rule "broadcasts" (operator stacking): a ``broadcast`` whose every reader is an elementwise kernel is not
materialized; the readers index its source in place (stride 0 along the broadcast dims).

Per broadcast instruction: its output B (an activation, no view of it) is read, from the broadcast until B is next
written, only as an input of instructions whose kernel is the elementwise loop (``kernels.elementwise.stacked``),
and its source S keeps its value over that window (a constant, or a buffer whose bytes nothing writes there, the
last reader included). Then the broadcast runs no kernel and each reader's operand is S itself (the group's
``sources``): its kernel sees an input of a smaller shape and reads it through the broadcast's index map
(kernels/elementwise.py). Linear in the code's length times the length of a broadcast's window (from it to its last
reader: a few instructions).
"""
from __future__ import annotations

from ..kernels.elementwise import stacked
from . import Group, Rule

ABSORBED = "not materialized: its elementwise readers index its source in place"


def match(fused, ins) -> "Group | None":
    if ins.op != "broadcast":
        return None
    (dst,), (src,) = ins.outs, ins.ins
    if dst.kind != "activation" or dst.base is not None:
        return None
    at = fused.index.position(ins)
    found = fused.index.readers(dst, at, stacked)
    if not found or not fused.index.unwritten(src, at, fused.index.position(found[-1][0]) + 1):
        return None
    return Group("broadcasts", [ins], None, ABSORBED, sources={id(r): {s: src for s in slots} for r, slots in found})


RULE = Rule("broadcasts", match, None)
