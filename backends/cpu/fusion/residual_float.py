"""Float residual fusion on the planned IR: an ``add`` of a float32 conv-engine conv's output and a tensor computed
before it runs in the conv's epilogue (in registers, before the store), so the add is not a pass of its own.

``fuse_float_residuals(irf, engine_conv, skip)`` picks every pair (conv C = conv(X, W, bias), Y = add(C, B) or
add(B, C), the add's own fused activation included) where: only pseudo-instructions lie between the two; C is a
whole activation (no view, not a graph output) with no reader after the add (unless Y is C itself: the usual
in-place add); B, C and Y have one type and one layout (no broadcast; the add is not in ``skip``, the adds whose
operands stacking.read_in_place replaced); the engine kernel's no-alias contract holds: Y overlaps neither X nor
the conv's scratch, B not the scratch, and Y is either disjoint from B (partial sums are kept in Y, the residual
is read through a restrict pointer) or exactly B (same region, address, size, type and layout: element i of B is
element i of Y). The latter is a downsampling block's add, whose sum the memory plan puts over the main branch's
output: the engine then reads the residual from Y itself (``in_place``, conv_engine's Epilogue.in_place: each
position read just before the same thread stores it, once). And ``engine_conv`` (codegen.engine_conv on the fused
instruction) says the engine runs the conv with every step of the epilogue in registers (the direct kernel only,
when in place). The fused instruction is the conv writing Y with B as a fourth input and attribute ``residual`` =
the add's fused activation ({"activation": name or "", "params": {...}, "in_place": Y is B}), applied after the
conv's own activation and the addition.
Bit-exact: the conv's float32 result (bias included, its own activation applied) is rounded as the conv stores
it, then added to B in float32 as the add kernel does (addition commutes), then the add's activation. Linear in
the code's length.
"""
from __future__ import annotations

from glow_core.fusion import FUSED_ACTIVATION, FUSED_PARAMS
from glow_core.ir import Instr

from .residual_int8 import Residual, _overlap, _read_later, _same, next_add

#: The attribute of a conv instruction carrying its fused residual add (the add's activation and parameters).
RESIDUAL = "residual"


def fuse_float_residuals(irf, engine_conv, skip=frozenset()) -> dict:
    """{id(conv instr) or id(add instr): Residual} for every fusible float pair of ``irf`` (see the module doc)."""
    instrs = irf.instrs
    pos = {id(ins): i for i, ins in enumerate(instrs)}
    out: dict = {}
    for conv in irf.code:
        if conv.op != "conv" or RESIDUAL in conv.attrs:
            continue
        (c,) = conv.outs
        if c.kind != "activation" or c.base is not None or c.type.dtype.name != "float32":
            continue
        found = next_add(instrs, pos[id(conv)], c, "add")
        if found is None or id(found[1]) in skip:
            continue
        j, add, _, b = found
        (y,) = add.outs
        if not (b.type == c.type == y.type and b.layout == c.layout == y.layout) or b.root is c:
            continue
        x, scratch = conv.ins[0], conv.scratch
        in_place = _same(y, b)
        if _overlap(y, x) or (_overlap(y, b) and not in_place) or (scratch is not None and (_overlap(y, scratch)
                                                                                             or _overlap(b, scratch))):
            continue
        if y.root is not c and (_overlap(y, c) or _read_later(instrs, j, c)):
            continue
        extra = set(add.attrs) - {FUSED_ACTIVATION, FUSED_PARAMS}
        if extra:
            continue
        operands = [(y, "out") if k == "out" else (buf, k) for buf, k in conv.operands] + [(b, "in")]
        residual = {"activation": add.attrs.get(FUSED_ACTIVATION) or "",
                    "params": dict(add.attrs.get(FUSED_PARAMS) or {}), "in_place": in_place}
        fused = Instr("conv", operands, {**conv.attrs, RESIDUAL: residual}, conv.name)
        if not engine_conv(fused):
            continue
        out[id(conv)] = out[id(add)] = Residual(fused, add)
    return out
