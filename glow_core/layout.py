"""Layouts as a compiler decision: which activation lives in a blocked layout, and where conversions run.

A backend answers ``Backend.tensor_layout_requirements(instr)`` per instruction with a ``LayoutRequirement``
(or None: every operand plain). ``assign_layouts(irf, requirements)`` then, on the IR before buffer sharing:

* gives an instruction's output a blocked layout when the instruction can write it (``output``) and some reader
  takes it blocked (directly, or through layout-agnostic instructions whose inputs can all be blocked): one
  forward and one backward walk;
* keeps a layout-agnostic instruction (``agnostic``) blocked when all its inputs are activations in the same
  blocked layout (its output gets that layout);
* inserts a ``layout_convert`` instruction (attrs ``from``/``to``) wherever a reader needs a layout its operand
  is not in: a plain-only reader (gemm, pools, graph outputs through their copy) of a blocked buffer, or a
  blocked-only reader of a plain one. One conversion per (buffer, layout), shared by every reader.

Graph inputs and outputs (mutable buffers), constants, views and the buffers views alias (reshape, flatten)
stay plain: a producer whose output is reshaped writes it plain. Linear in the code's length.
The decisions are recorded in ``Buffer.layout`` (the memory plan sizes blocked buffers by their padded stored
shape, ``ir.stored_shape``) and ``IRFunction.layout_notes`` (shown by ``glowc dump``).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .graph import NameTable
from .ir import PLAIN, Buffer, Instr, IRFunction, insert_deallocs

#: The op of the conversions this pass inserts: ``layout_convert @out y, @in x {from: L1, to: L2}``.
LAYOUT_CONVERT = "layout_convert"


@dataclass(frozen=True)
class LayoutRequirement:
    """What one instruction accepts. ``inputs``: position in ``instr.ins`` -> layouts that input may be read in,
    preferred first (positions not named: PLAIN only). ``output``: layouts the (first) output may be written in,
    preferred first. ``agnostic``: the instruction computes the same on any layout as long as all its inputs and
    its output share it (elementwise over same-shape operands whose padding lanes stay finite, read as flat
    arrays; a channel concat whose inputs fill whole channel blocks); the backend answers it only then."""

    inputs: dict = field(default_factory=dict)
    output: tuple = (PLAIN,)
    agnostic: bool = False


def _eligible(b: Buffer, viewed: set) -> bool:
    return b.kind == "activation" and b.base is None and id(b) not in viewed


def _chosen(takers: "Counter | None") -> str:
    """The layout to write a buffer in: the blocked layout most of its readers take, if any does (a conversion
    for its plain-only readers costs what a blocked reader's own conversion of a plain input would, and lets the
    layout reach further)."""
    return takers.most_common(1)[0][0] if takers else PLAIN


def assign_layouts(irf: IRFunction, requirements) -> int:
    """Decide every activation's layout and insert the conversions (see the module doc); ``requirements(instr)``
    is the backend's hook. Returns the number of conversions inserted."""
    code = [i for i in irf.instrs if i.op not in ("allocactivation", "deallocactivation")]
    reqs = [None if ins.op == "tensorview" else requirements(ins) for ins in code]  # a view reads plain
    if all(r is None for r in reqs):
        return 0
    viewed = {id(b.base) for b in irf.buffers if b.base is not None}
    # Forward: the blocked layouts each buffer can be produced in (an agnostic instruction: those all its inputs
    # share). Backward: per buffer, the readers that would take it blocked (an agnostic reader counts when its
    # output is wanted blocked and can be).
    can: dict[int, set] = {}
    for ins, r in zip(code, reqs):
        out = ins.outs[0] if len(ins.outs) == 1 else None
        if r is None or out is None or not _eligible(out, viewed):
            continue
        if r.agnostic:
            if all(b.kind != "constant" for b in ins.ins) and ins.ins:
                can[id(out)] = set.intersection(*(can.get(id(b), set()) for b in ins.ins))
        else:
            can[id(out)] = {x for x in r.output if x != PLAIN}
    takers: dict[int, Counter] = {}
    for ins, r in zip(reversed(code), reversed(reqs)):
        out = ins.outs[0] if len(ins.outs) == 1 else None
        if r is not None and r.agnostic and out is not None:
            want = {x for x in can.get(id(out), ()) if _chosen(takers.get(id(out))) == x}
            for b in ins.ins:
                takers.setdefault(id(b), Counter()).update(want)
            continue
        for pos, b in enumerate(ins.ins):
            lays = r.inputs.get(pos, (PLAIN,)) if r is not None else (PLAIN,)
            takers.setdefault(id(b), Counter()).update(x for x in lays if x != PLAIN)
    names = NameTable(b.name for b in irf.buffers)
    converted: dict[tuple, Buffer] = {}
    out_code: list[Instr] = []

    def convert(b: Buffer, to: str) -> Buffer:
        key = (id(b), to)
        if key not in converted:
            c = Buffer(names.unique(f"{b.name}__{to}", ""), b.type, "activation", layout=to)
            irf.buffers.append(c)
            out_code.append(Instr(LAYOUT_CONVERT, [(c, "out"), (b, "in")], {"from": b.layout, "to": to},
                                  f"{c.name}_convert"))
            converted[key] = c
        return converted[key]

    def read_as(ins: Instr, accepts) -> None:
        """Every input of ``ins`` at position p is read in a layout of ``accepts(p)`` (converted to the first)."""
        pos, ops = 0, []
        for b, k in ins.operands:
            if k == "in":
                ok = accepts(pos)
                if b.layout not in ok:
                    b = convert(b, ok[0])
                pos += 1
            ops.append((b, k))
        ins.operands = ops

    for ins, r in zip(code, reqs):
        if r is None:
            read_as(ins, lambda p: (PLAIN,))
        elif r.agnostic:
            out, lays = ins.outs[0], {b.layout for b in ins.ins}
            blocked = (len(lays) == 1 and PLAIN not in lays and _eligible(out, viewed) and len(ins.outs) == 1
                       and all(b.kind != "constant" for b in ins.ins))
            if blocked:
                out.layout = lays.pop()
            else:
                read_as(ins, lambda p: (PLAIN,))
        else:
            read_as(ins, lambda p: tuple(r.inputs.get(p, (PLAIN,))))
            out = ins.outs[0] if ins.outs else None
            if out is not None and _eligible(out, viewed):
                lay = _chosen(takers.get(id(out)))
                out.layout = lay if lay in r.output else PLAIN
        out_code.append(ins)
    irf.instrs = out_code
    insert_deallocs(irf)
    convs = [i for i in out_code if i.op == LAYOUT_CONVERT]
    counts = Counter(b.layout for b in irf.buffers if b.layout != PLAIN and b.kind == "activation")
    irf.layout_notes = ([f"{n} activation(s) in {lay}" for lay, n in sorted(counts.items())]
                        + [f"{len(convs)} conversion(s)"]
                        + [f"{i.name}: {i.ins[0].name} {i.attrs['from']} -> {i.attrs['to']}" for i in convs])
    return len(convs)
