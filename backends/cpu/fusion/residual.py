"""Rule "residual": an add right after a conv, of the conv's output C and a tensor B computed before it, runs in
the conv's epilogue (in registers, over the pixels each register tile has just computed) instead of as a kernel
and a pass over memory of its own. Float32: an ``add`` after a conv-engine ``conv``; int8: a ``qadd`` after an
int8-engine ``qconv`` with an 8-bit output.

A pair (conv C = conv(X, ...), Y = add(C, B) or add(B, C)) fuses when: only pseudo-instructions lie between the
two; C is a whole activation (no view of it, not a graph output) and, unless Y is C itself, nothing reads it
after the add; B is not C; Y and B lie apart from the conv's scratch; and, per kind:
* float32: B, C and Y have one type and one layout (no broadcast: an add whose operand a broadcast's source
  replaced is left alone); the add carries no attribute but its own fused activation; Y overlaps neither X nor
  C, and is either disjoint from B (the engine keeps partial sums in Y and reads B through a restrict pointer)
  or exactly B (a downsampling block's add, whose sum the memory plan puts over the shortcut: the engine then
  reads each residual from Y itself just before the same thread stores that position, ``Epilogue.in_place``);
  and the engine runs the fused conv with every step of its epilogue in registers (kernels.window.engine_conv). The
  fused instruction is the conv writing Y with B as a fourth input and attribute ``residual`` (the add's
  activation and parameters, ``in_place``).
* int8: B and Y are 8-bit; the qadd reads C with the conv's output scale and offset and has no private
  attribute; Y overlaps not the conv's input (unless Y is exactly it, in a batch of 1: the kernel transforms the
  whole image into scratch before any tile stores) and is either disjoint from C and B or exactly one of them;
  B is disjoint from C; the int8 engine runs the qconv. The fused qconv takes B and Y as extra operands and
  attribute ``residual`` (the qadd's attributes and C's input slot).
Bit-exact: C is rounded (float32) or requantized (int8) as the conv stores it, then added as the add kernel
does. Linear in the code's length (each conv looks at its next instruction; C's later readers are scanned
once).
"""
from __future__ import annotations

from glow_core.fusion import FUSED_ACTIVATION, FUSED_PARAMS
from glow_core.ir import Instr
from glow_core.plan_queries import overlap, same_bytes

from ..kernels.codegen import RESIDUAL, KernelInstr, kernel_code
from ..kernels.quantized import engine_conv as int8_engine_conv
from ..kernels.window import engine_conv
from . import Group, Rule

_EIGHT = ("int8", "uint8")
#: conv op -> (the add op it absorbs, the dtypes of C it takes)
KINDS = {"conv": ("add", ("float32",)), "qconv": ("qadd", _EIGHT)}


def match(fused, conv) -> "Group | None":
    kind = KINDS.get(conv.op)
    if kind is None or RESIDUAL in conv.attrs or id(conv) in fused.taken:
        return None
    (c,) = conv.outs
    if c.kind != "activation" or c.base is not None or c.type.dtype.name not in kind[1]:
        return None
    index = fused.index
    j = index.next_kernel(index.position(conv))
    add = index.instrs[j] if j < len(index.instrs) else None
    if add is None or add.op != kind[0] or id(add) in fused.taken:
        return None
    a_in, b_in = add.ins
    if (a_in is c) == (b_in is c):
        return None
    slot, b = (0, b_in) if a_in is c else (1, a_in)
    (y,) = add.outs
    scratch = conv.scratch
    if b.root is c or (scratch is not None and (overlap(y, scratch) or overlap(b, scratch))):
        return None
    one = (_float if conv.op == "conv" else _int8)(fused, conv, add, c, b, y, slot, j)
    if one is None:
        return None
    return Group("residual", [conv, add], conv, f"computed in the epilogue of the {conv.op} before it (residual add "
                 "fused)", [buf for buf, _ in one.operands], data=one)


def _float(fused, conv, add, c, b, y, slot, j) -> "Instr | None":
    if id(add) in fused.sources or not (b.type == c.type == y.type and b.layout == c.layout == y.layout):
        return None
    in_place = same_bytes(y, b)
    if overlap(y, conv.ins[0]) or (overlap(y, b) and not in_place):
        return None
    if y.root is not c and (overlap(y, c) or fused.index.read_later(j, c)):
        return None
    if set(add.attrs) - {FUSED_ACTIVATION, FUSED_PARAMS}:
        return None
    operands = [(y, "out") if k == "out" else (buf, k) for buf, k in conv.operands] + [(b, "in")]
    residual = {"activation": add.attrs.get(FUSED_ACTIVATION) or "",
                "params": dict(add.attrs.get(FUSED_PARAMS) or {}), "in_place": in_place}
    one = Instr("conv", operands, {**conv.attrs, RESIDUAL: residual}, conv.name)
    return one if engine_conv(KernelInstr.of(one), fused.num_threads) else None


def _int8(fused, conv, add, c, b, y, slot, j) -> "Instr | None":
    if {b.type.dtype.name, y.type.dtype.name} - set(_EIGHT):
        return None
    x = conv.ins[0]
    if overlap(y, x) and not (same_bytes(y, x) and x.type.shape[0] == 1):
        return None
    if overlap(b, c) or not _disjoint_or_same(y, c) or not _disjoint_or_same(y, b):
        return None
    cs, co = ("a_scale", "a_offset") if slot == 0 else ("b_scale", "b_offset")
    if add.attrs[cs] != conv.attrs["out_scale"] or add.attrs[co] != conv.attrs["out_offset"]:
        return None
    if any(k.startswith("_") for k in add.attrs) or (y.root is not c and fused.index.read_later(j, c)):
        return None
    if not int8_engine_conv(KernelInstr.of(conv), fused.num_threads):
        return None
    return Instr("qconv", list(conv.operands) + [(b, "in"), (y, "out")],
                 {**conv.attrs, RESIDUAL: {**add.attrs, "conv_slot": slot}}, conv.name)


def _disjoint_or_same(a, b) -> bool:
    return not overlap(a, b) or same_bytes(a, b)


def kernel(group, fused):
    """The conv with the add in its epilogue, at the conv's position."""
    one = group.data
    return one, kernel_code(KernelInstr.of(one), fused.num_threads), [b for b, _ in one.operands]


RULE = Rule("residual", match, kernel)
