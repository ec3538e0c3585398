"""The low-level IR: instructions over buffers, with a static memory plan.

Buffers are *weights* (``const``: the constant region), *placeholders*
(``mutable``: the inputs and outputs, in the mutable region), *state*
(persistent placeholders, in the state region: their bytes live from one run to
the next and are shared by the functions of a module, a KV cache) or
*activations* (allocated by ``allocactivation`` and freed by
``deallocactivation``, placed in the activations region by the memory
allocator). A ``tensorview`` is a buffer that aliases another at a byte offset
without copying. Every instruction names its operands with ``@in``, ``@out`` or
``@inout``; a state updated in place (a primitive with an ``update_kernel``,
such as ``scatter_nd``) is its instruction's ``@inout`` operand 0.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import VerifyError
from .fusion import FUSED_ACTIVATION, FUSED_PARAMS
from .graph import Function, NameTable, Value
from .memory import ALIGNMENT, Allocation, Interval, align_up, allocate
from .ops.registry import get_op, get_primitive
from .types import TensorType

PSEUDO = ("allocactivation", "deallocactivation", "tensorview")
#: The plain (row-major, logical-order) layout every buffer has unless a layout pass (glow_core.layout) decides.
PLAIN = "nchw"


def stored_shape(shape, layout: str) -> tuple:
    """The shape of the memory holding a tensor of logical ``shape`` in ``layout``: PLAIN keeps it; "nchwc<cb>"
    is [N, ceil(C/cb), *spatial, cb] (channel blocks of cb lanes, the lanes past C padding)."""
    if layout == PLAIN:
        return tuple(shape)
    m = re.fullmatch(r"nchwc([1-9][0-9]*)", layout)
    if m is None or len(shape) < 3:
        raise VerifyError(f"layout {layout!r} of a tensor of shape {list(shape)}: accepted are {PLAIN!r} and "
                          f"'nchwc<cb>' (cb lanes per channel block) on tensors [N, C, *spatial]")
    cb = int(m.group(1))
    return (shape[0], -(-shape[1] // cb), *shape[2:], cb)

#: Backend annotations (attributes named _x) the dump shows: they change what the instruction computes.
SHOWN_ANNOTATIONS = (FUSED_ACTIVATION, FUSED_PARAMS)


@dataclass(eq=False)
class Buffer:
    """A named region of memory of one TensorType."""

    name: str
    type: TensorType
    kind: str  # "constant" | "mutable" | "state" | "activation" | "view"
    data: np.ndarray | None = None
    base: "Buffer | None" = None  # views: the buffer aliased
    view_offset: int = 0  # views: byte offset inside base
    io: str | None = None  # "input" | "output" for mutable buffers ("state" once ``state_as_io`` made one I/O)
    offset: int | None = None  # byte offset inside its region (root buffers)
    layout: str = PLAIN  # how the bytes hold the logical type: PLAIN or a blocked layout (see stored_shape)

    @property
    def size(self) -> int:
        if self.layout == PLAIN:
            return self.type.nbytes
        return int(np.prod(stored_shape(self.type.shape, self.layout))) * self.type.dtype.np.itemsize

    @property
    def root(self) -> "Buffer":
        b = self
        while b.base is not None:
            b = b.base
        return b

    @property
    def region(self) -> str:
        return self.root.kind

    @property
    def address(self) -> int:
        """Byte offset inside its region, following views to their root."""
        off, b = 0, self
        while b.base is not None:
            off += b.view_offset
            b = b.base
        return b.offset + off


@dataclass(eq=False)
class Instr:
    """One instruction: opcode (a primitive, extended op or pseudo-instruction), operands, attributes."""

    op: str
    operands: list[tuple[Buffer, str]]  # (buffer, "in" | "out" | "inout" | "scratch")
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    @property
    def outs(self) -> list[Buffer]:
        return [b for b, k in self.operands if k in ("out", "inout")]

    @property
    def ins(self) -> list[Buffer]:
        return [b for b, k in self.operands if k in ("in", "inout")]

    @property
    def scratch(self) -> "Buffer | None":
        """The instruction's scratch buffer (live only while it runs), if the backend asked for one."""
        return next((b for b, k in self.operands if k == "scratch"), None)


@dataclass
class MemoryPlan:
    """Sizes of the regions and the activation allocator's statistics.

    ``state_size`` is the state region's (persistent placeholders; 0 for a function without state).
    ``activations_size`` includes the scratch buffers: ``scratch_size`` bytes in all, at most ``scratch_peak``
    (aligned) live at once, as each lives only while its instruction runs. ``unscheduled_size`` is the
    activations size the node order before scheduling needs (None when the scheduler did not run)."""

    constant_size: int
    mutable_size: int
    activations_size: int
    alignment: int
    allocation: Allocation
    scratch_size: int = 0
    scratch_peak: int = 0
    unscheduled_size: int | None = None
    state_size: int = 0

    @property
    def peak(self) -> int:
        return self.activations_size


@dataclass
class IRFunction:
    """A compiled-for-a-backend function: buffers, instructions, memory plan and the graph it came from."""

    name: str
    buffers: list[Buffer]
    instrs: list[Instr]
    inputs: dict[str, Buffer]
    outputs: dict[str, Buffer]
    graph: Function | None = None
    plan: MemoryPlan | None = None
    layout_notes: list[str] = field(default_factory=list)  # the layout pass's decisions, for the dump
    #: Instructions the backend runs as one kernel (``Backend.instruction_groups``), each a list in code order:
    #: the memory plan keeps every activation a group names live over the whole group.
    groups: list[list[Instr]] = field(default_factory=list)
    #: Persistent placeholders by name (buffers of kind "state"): read at the start of a run as the previous run
    #: (of this function or another of its module) left them, updated in place.
    state: dict[str, Buffer] = field(default_factory=dict)

    @property
    def code(self) -> list[Instr]:
        """The instructions that compute (no pseudo-instructions)."""
        return [i for i in self.instrs if i.op not in PSEUDO]

    def constant_blob(self) -> bytes:
        """The constant region as bytes (weights at their planned offsets)."""
        blob = np.zeros(self.plan.constant_size, np.uint8)
        for b in self.buffers:
            if b.kind == "constant":
                raw = np.ascontiguousarray(b.data).reshape(-1).view(np.uint8)
                blob[b.offset:b.offset + raw.size] = raw
        return blob.tobytes()

    def dump(self) -> str:
        return dump_ir(self)


# -- generation ---------------------------------------------------------------------------------------
def state_updates(fn: Function) -> dict[str, list]:
    """State name -> the nodes that update it in place, in order: a chain from the state's placeholder to the value
    the function leaves in it, each node a primitive with an ``update_kernel`` whose input 0 is the previous value,
    read by nothing else (so no reader can see the update early). A state left unchanged has an empty chain; a
    state whose value is computed otherwise is absent (it is copied into the state after every other instruction).
    """
    if not fn.state:
        return {}
    users = fn.users()
    placeholders = {v.name: v for v in fn.inputs}
    final = dict(zip(fn.output_names, fn.outputs))
    chains = {}
    for name in fn.state:
        cur, end, chain = placeholders[name], final[name], []
        while cur is not end:
            readers = users.get(cur.id, [])
            if len(readers) != 1 or cur in fn.outputs:
                break
            n = readers[0]
            p = get_primitive(n.op)
            if p is None or p.update_kernel is None or n.inputs[0] is not cur or cur in n.inputs[1:]:
                break
            chain.append(n)
            cur = n.outputs[0]
        else:
            chains[name] = chain
    return chains


def state_outputs_in_place(fn: Function, chains: dict) -> dict[int, str]:
    """Outputs of kept-whole ops (``OpDef.in_place``) that are a state's final value computed over the state's own
    placeholder, read by nothing else: id(value) -> state name. Such an output is written in the state's buffer."""
    if not fn.state:
        return {}
    users = fn.users()
    placeholders = {v.name: v for v in fn.inputs}
    final = dict(zip(fn.output_names, fn.outputs))
    found = {}
    for name in fn.state:
        if name in chains:
            continue
        ph, end = placeholders[name], final[name]
        n = end.producer
        d = get_op(n.op) if n is not None else None
        if d is None or not d.in_place or get_primitive(n.op) is not None:
            continue
        i = n.outputs.index(end)
        j = d.in_place.get(i)
        readers = users.get(ph.id, [])
        if j is None or j >= len(n.inputs) or n.inputs[j] is not ph or len(readers) != 1 or \
                sum(v is ph for v in n.inputs) != 1 or ph in fn.outputs or \
                sum(v is end for v in fn.outputs) != 1:
            continue
        found[end.id] = name
    return found


def generate_ir(fn: Function, ident=None) -> IRFunction:
    """Low-level IR from a (lowered) graph Function: one instruction per node, views for reshapes. Each of
    ``fn.state`` is one buffer of kind "state": its input and its output; the nodes of ``state_updates`` write it
    in place (operand 0 ``@inout``), any other value left in a state is copied there at the end."""
    ident = ident or (lambda s: s)
    buffers: list[Buffer] = []
    names = NameTable()

    def new_buffer(name, type, kind, **kw):
        b = Buffer(names.unique(name), type, kind, **kw)
        buffers.append(b)
        return b

    vbuf: dict[int, Buffer] = {}
    inputs, outputs, states = {}, {}, {}
    for v in fn.inputs:
        if v.name in fn.state:
            vbuf[v.id] = states[v.name] = new_buffer(v.name, v.type, "state")
        else:
            vbuf[v.id] = inputs[v.name] = new_buffer(v.name, v.type, "mutable", io="input")
    missing = [nm for nm in fn.state if nm not in states or nm not in fn.output_names]
    if missing:
        raise VerifyError(f"function '{fn.name}': state {missing} must be both an input placeholder and an output")
    in_place = {}  # id(node) -> the state buffer it updates
    chains = state_updates(fn)
    for name, chain in chains.items():
        for n in chain:
            in_place[id(n)] = states[name]
    shared = state_outputs_in_place(fn, chains)  # id(value) -> state name
    out_ids = {}
    for nm, v in zip(fn.output_names, fn.outputs):
        if nm in fn.state:
            continue
        outputs[nm] = new_buffer(nm, v.type, "mutable", io="output")
        out_ids.setdefault(v.id, nm)
    instrs: list[Instr] = []
    claimed: set[int] = set()  # output buffers some instruction already writes
    for n in fn.nodes:
        for v in n.inputs:
            if v is not None and v.is_const and v.id not in vbuf:
                vbuf[v.id] = new_buffer(v.name, v.type, "constant", data=v.const)
        if n.op == "reshape" and n.inputs[0].id in vbuf:
            src = vbuf[n.inputs[0].id]
            out = n.outputs[0]
            view = new_buffer(out.name, out.type, "view", base=src)
            instrs.append(Instr("tensorview", [(view, "out"), (src, "in")], {"offset": 0, "type": str(out.type)},
                                n.name))
            vbuf[out.id] = view
            continue
        if id(n) in in_place:
            sb = in_place[id(n)]
            vbuf[n.outputs[0].id] = sb
            ins = [vbuf[v.id] for v in n.inputs[1:] if v is not None]
            instrs.append(Instr(n.op, [(sb, "inout")] + [(b, "in") for b in ins], dict(n.attrs), n.name))
            continue
        outs = []
        for v in n.outputs:
            if v.id in shared:
                b = states[shared[v.id]]
            elif v.id in out_ids and out_ids[v.id] in outputs and outputs[out_ids[v.id]].kind == "mutable" \
                    and id(outputs[out_ids[v.id]]) not in claimed:
                b = outputs[out_ids[v.id]]
            else:
                b = new_buffer(v.name, v.type, "activation")
            vbuf[v.id] = b
            outs.append(b)
        claimed.update(id(b) for b in outs)
        ins = [vbuf[v.id] if v is not None else None for v in n.inputs]
        instrs.append(Instr(n.op, [(b, "out") for b in outs] + [(b, "in") for b in ins if b is not None],
                            dict(n.attrs, _optional=[v is None for v in n.inputs]) if any(
                                v is None for v in n.inputs) else dict(n.attrs), n.name))
    # Outputs not yet written (placeholders, constants, views, duplicates) are copied.
    for nm, v in zip(fn.output_names, fn.outputs):
        dst = states[nm] if nm in fn.state else outputs[nm]
        if v.is_const and v.id not in vbuf:
            vbuf[v.id] = new_buffer(v.name, v.type, "constant", data=v.const)
        src = vbuf[v.id]
        if src is not dst:
            instrs.append(Instr("copy", [(dst, "out"), (src, "in")], {}, f"copy_{nm}"))
    irf = IRFunction(fn.name, buffers, instrs, inputs, outputs, fn, state=states)
    insert_deallocs(irf)
    return irf


def insert_deallocs(irf: IRFunction):
    """(Re)place every activation's allocactivation before its first use and deallocactivation after its
    last use (uses of views count as uses of their root). An activation named by an instruction group
    (``irf.groups``) is live at least from the group's first instruction to its last: the group runs as one
    kernel, which reads every input while it writes every output."""
    code = [i for i in irf.instrs if i.op not in ("allocactivation", "deallocactivation")]
    first, last = {}, {}
    for idx, ins in enumerate(code):
        for b, _ in ins.operands:
            r = b.root
            if r.kind == "activation":
                first.setdefault(id(r), (idx, r))
                last[id(r)] = (idx, r)
    if irf.groups:
        pos = {id(ins): idx for idx, ins in enumerate(code)}
        for group in irf.groups:
            at = [pos.get(id(ins)) for ins in group]
            if None in at:
                missing = group[at.index(None)]
                raise VerifyError(f"instruction group {[i.name for i in group]}: '{missing.name}' ({missing.op}) "
                                  f"is not an instruction of '{irf.name}'")
            lo, hi = min(at), max(at)
            for ins in group:
                for b, _ in ins.operands:
                    r = b.root
                    if r.kind == "activation":
                        first[id(r)] = min(first[id(r)], (lo, r), key=lambda t: t[0])
                        last[id(r)] = max(last[id(r)], (hi, r), key=lambda t: t[0])
    before: dict[int, list[Buffer]] = {}
    after: dict[int, list[Buffer]] = {}
    for idx, r in first.values():
        before.setdefault(idx, []).append(r)
    for idx, r in last.values():
        after.setdefault(idx, []).append(r)
    out = []
    for idx, ins in enumerate(code):
        for r in before.get(idx, []):
            out.append(Instr("allocactivation", [(r, "out")], {}, r.name))
        out.append(ins)
        for r in after.get(idx, []):
            out.append(Instr("deallocactivation", [(r, "out")], {}, r.name))
    irf.instrs = out
    live = {id(b) for i in out for b, _ in i.operands} | {id(b.base) for b in irf.buffers if b.base is not None}
    irf.buffers = [b for b in irf.buffers if id(b) in live or b.kind in ("mutable", "state")]


def attach_scratch(irf: IRFunction, scratch_bytes) -> int:
    """Give every instruction for which ``scratch_bytes(instr)`` is positive an ``@scratch`` operand: a uint8
    activation of that many bytes, live only during the instruction, planned with every other buffer.
    Returns the total scratch bytes requested."""
    names = NameTable(b.name for b in irf.buffers)
    total = 0
    for ins in irf.code:
        n = int(scratch_bytes(ins) or 0)
        if n <= 0 or ins.scratch is not None:
            continue
        buf = Buffer(names.unique(f"{ins.name}__scratch", ""), TensorType("uint8", (n,)), "activation")
        irf.buffers.append(buf)
        ins.operands.append((buf, "scratch"))
        total += n
    if total:
        insert_deallocs(irf)
    return total


# -- IR passes ------------------------------------------------------------------------------------------
def live_ranges(irf: IRFunction) -> dict[int, tuple[int, int, Buffer]]:
    """id(root activation) -> (first index, last index, buffer), views counted as their root."""
    rng: dict[int, list] = {}
    for idx, ins in enumerate(irf.instrs):
        for b, _ in ins.operands:
            r = b.root
            if r.kind == "activation":
                if id(r) not in rng:
                    rng[id(r)] = [idx, idx, r]
                rng[id(r)][1] = idx
    return {k: tuple(v) for k, v in rng.items()}


def _code(irf):
    return [i for i in irf.instrs if i.op not in ("allocactivation", "deallocactivation")]


class _Uses:
    """Which instructions name each buffer (by identity) and which views each buffer is the base of, built once
    so that a pass replaces a buffer in O(its uses) instead of rewriting every instruction."""

    def __init__(self, code: list[Instr], buffers: list[Buffer]):
        self.instrs: dict[int, dict[Instr, None]] = {}
        self.views: dict[int, list[Buffer]] = {}
        for ins in code:
            for b, _ in ins.operands:
                self.instrs.setdefault(id(b), {})[ins] = None
        for b in buffers:
            if b.base is not None:
                self.views.setdefault(id(b.base), []).append(b)

    def of(self, buf: Buffer) -> list[Instr]:
        return list(self.instrs.get(id(buf), ()))

    def drop(self, ins: Instr):
        """Forget a removed instruction."""
        for b, _ in ins.operands:
            self.instrs.get(id(b), {}).pop(ins, None)

    def replace(self, old: Buffer, new: Buffer):
        """Every operand naming ``old`` names ``new``; views of ``old`` become views of ``new``."""
        into = self.instrs.setdefault(id(new), {})
        for ins in self.instrs.pop(id(old), ()):
            ins.operands = [(new if b is old else b, k) for b, k in ins.operands]
            into[ins] = None
        for v in self.views.pop(id(old), ()):
            v.base = new
            self.views.setdefault(id(new), []).append(v)


def _dead(ins: Instr, readers: dict) -> bool:
    return bool(ins.outs) and all(b.root.kind == "activation" and not readers.get(id(b.root)) for b in ins.outs)


def remove_dead_allocations(irf: IRFunction) -> int:
    """Drop instructions whose outputs are never read (and so their activations), transitively: an instruction
    is dead when every buffer it writes is an activation that no remaining instruction reads. Returns the count
    removed. One walk: each root counts its readers, and a root whose count drops to zero re-checks its writers."""
    code = _code(irf)
    readers: dict[int, int] = {}  # id(root) -> instructions reading it
    writers: dict[int, list[Instr]] = {}  # id(root) -> instructions writing it
    for ins in code:
        for r in {id(b.root) for b in ins.ins}:
            readers[r] = readers.get(r, 0) + 1
        for b in ins.outs:
            writers.setdefault(id(b.root), []).append(ins)
    dead: set[Instr] = set()
    work = [ins for ins in code if _dead(ins, readers)]
    while work:
        ins = work.pop()
        if ins in dead:
            continue
        dead.add(ins)
        for r in {id(b.root) for b in ins.ins}:
            readers[r] -= 1
            if readers[r] == 0:
                work.extend(w for w in writers.get(r, ()) if w not in dead and _dead(w, readers))
    if dead:
        irf.instrs = [i for i in irf.instrs if i not in dead]
    insert_deallocs(irf)
    return len(dead)


def share_buffers(irf: IRFunction) -> int:
    """In-place reuse: an elementwise instruction writes into an input activation whose life ends there
    (same byte size and dtype, not aliased by a view: the buffer keeps its type). Returns the number of buffers shared.

    One walk in order with the live ranges computed once: sharing ``out`` into ``b`` at instruction i only
    extends ``b``'s life to ``out``'s end, which no instruction before i can use."""
    code = _code(irf)
    first, last = {}, {}
    for idx, ins in enumerate(code):
        for b, _ in ins.operands:
            first.setdefault(id(b.root), idx)
            last[id(b.root)] = idx
    viewed = {id(b.root) for b in irf.buffers if b.kind == "view"}
    uses = _Uses(code, irf.buffers)
    gone: set[int] = set()
    for idx, ins in enumerate(code):
        p = get_primitive(ins.op)
        if p is None or not p.inplace or len(ins.outs) != 1:
            continue
        out = ins.outs[0]
        # ``out`` must start its life here: after an earlier share it may also hold a value written before.
        if out.kind != "activation" or id(out) in viewed or first.get(id(out)) != idx:
            continue
        for b, kind in ins.operands:
            if (kind == "in" and b.kind == "activation" and b is not out and id(b) not in viewed
                    and last.get(id(b)) == idx and b.size == out.size
                    and b.type.dtype == out.type.dtype and b.layout == out.layout):
                uses.replace(out, b)
                last[id(b)] = last[id(out)]
                gone.add(id(out))
                break
    if gone:
        irf.buffers = [x for x in irf.buffers if id(x) not in gone]
    insert_deallocs(irf)
    return len(gone)


def eliminate_copies(irf: IRFunction) -> int:
    """A copy from an activation written once and read only by the copy into an output: the writer writes
    the output directly. Returns the number of copies removed."""
    code = _code(irf)
    uses = _Uses(code, irf.buffers)
    writers: dict[int, dict[Instr, None]] = {}  # id(buffer) -> instructions writing it
    readers: dict[int, dict[Instr, None]] = {}  # id(root) -> instructions reading it
    for ins in code:
        for b in ins.outs:
            writers.setdefault(id(b), {})[ins] = None
        for b in ins.ins:
            readers.setdefault(id(b.root), {})[ins] = None
    removed: set[Instr] = set()
    gone: set[int] = set()
    for ins in code:
        if ins.op != "copy":
            continue
        dst, src = ins.operands[0][0], ins.operands[1][0]
        if src.kind != "activation" or dst.kind != "mutable" or src.type.shape != dst.type.shape:
            continue
        if len(writers.get(id(src), ())) != 1 or list(readers.get(id(src), ())) != [ins] or uses.views.get(id(src)):
            continue
        if any(i is not ins for i in uses.of(dst)):
            continue
        removed.add(ins)
        uses.drop(ins)
        writers.get(id(dst), {}).pop(ins, None)
        readers[id(src)].pop(ins)
        for w in writers.pop(id(src)):
            writers.setdefault(id(dst), {})[w] = None
        uses.replace(src, dst)
        gone.add(id(src))
    if removed:
        irf.instrs = [i for i in irf.instrs if i not in removed]
        irf.buffers = [b for b in irf.buffers if id(b) not in gone]
    insert_deallocs(irf)
    return len(removed)


# -- memory planning --------------------------------------------------------------------------------------
def plan_memory(irf: IRFunction, alignment: int = ALIGNMENT, capacity: int | None = None) -> MemoryPlan:
    """Offsets in the constant, mutable, state and activations regions (all ``alignment``-aligned). The state
    region holds the persistent placeholders in name order (``share_regions`` places a module's together)."""
    const_off = mut_off = state_off = 0
    for b in irf.buffers:
        if b.kind == "constant":
            b.offset = const_off
            const_off = align_up(const_off + b.size, alignment)
    placed = set()
    for b in list(irf.inputs.values()) + list(irf.outputs.values()):
        if id(b) in placed:  # a state made input and output (state_as_io)
            continue
        placed.add(id(b))
        b.offset = mut_off
        mut_off = align_up(mut_off + max(b.size, 1), alignment)
    for name in sorted(irf.state):
        b = irf.state[name]
        b.offset = state_off
        state_off = align_up(state_off + max(b.size, 1), alignment)
    rng = live_ranges(irf)
    ivs = [Interval(r.name, r.size, s, e) for s, e, r in rng.values()]
    by_name = {r.name: r for _, _, r in rng.values()}
    alloc = allocate(ivs, alignment, capacity)
    for k, off in alloc.offsets.items():
        by_name[k].offset = off
    for b in irf.buffers:
        if b.kind == "view":
            b.offset = None
    scratch = [ins.scratch.size for ins in irf.code if ins.scratch is not None]
    irf.plan = MemoryPlan(const_off, mut_off, alloc.peak, alignment, alloc, sum(scratch),
                          max((align_up(n, alignment) for n in scratch), default=0), state_size=state_off)
    return irf.plan


def _content_key(data: np.ndarray) -> tuple:
    raw = np.ascontiguousarray(data)
    return raw.dtype.str, raw.shape, hashlib.blake2b(raw.reshape(-1).view(np.uint8), digest_size=20).digest()


def share_regions(functions: list[IRFunction], alignment: int = ALIGNMENT) -> dict:
    """Place the constants and the state of functions compiled together for one device (a module: a generator's
    prefill and decode) in one constant region and one state region, as Glow's Module holds the Constants its
    Functions share: equal weights (same dtype, shape and bytes) get one offset and one array, every state name
    one offset (the same type in every function, or a VerifyError). Each function's plan then gives the shared
    regions' sizes. Returns statistics: the shared regions' sizes and the constant bytes placed once instead of
    several times."""
    keys: dict[int, tuple] = {}  # id(array) -> content key (arrays shared by imports hash once)
    placed: dict[tuple, tuple[int, np.ndarray]] = {}
    const_off = saved = 0
    for irf in functions:
        for b in irf.buffers:
            if b.kind != "constant":
                continue
            key = keys.get(id(b.data))
            if key is None:
                key = keys[id(b.data)] = _content_key(b.data)
            if key in placed:
                b.offset, b.data = placed[key]
                saved += b.size
            else:
                placed[key] = (const_off, b.data)
                b.offset = const_off
                const_off = align_up(const_off + b.size, alignment)
    types: dict[str, TensorType] = {}
    for irf in functions:
        for name, b in irf.state.items():
            t = types.setdefault(name, b.type)
            if (t.dtype, t.shape) != (b.type.dtype, b.type.shape):
                raise VerifyError(f"state '{name}' is {t} in one function and {b.type} in '{irf.name}': the "
                                  f"functions of a module share it, so its type must be the same")
    offsets, state_off = {}, 0
    for name in sorted(types):
        offsets[name] = state_off
        state_off = align_up(state_off + max(types[name].nbytes, 1), alignment)
    for irf in functions:
        for name, b in irf.state.items():
            b.offset = offsets[name]
        irf.plan.constant_size = const_off
        irf.plan.state_size = state_off
    return {"constant_size": const_off, "state_size": state_off, "constant_bytes_shared": saved,
            "state_offsets": offsets, "state_types": types}


def state_as_io(irf: IRFunction):
    """Make every state buffer an ordinary placeholder, an input and an output under its name (io "state"), and
    plan the memory again: for a backend without persistent state (``Backend.compile_functions``' default), the
    host then passes the state in and out around each run."""
    for name, b in irf.state.items():
        b.kind, b.io = "mutable", "state"
        irf.inputs[name] = irf.outputs[name] = b
    irf.state = {}
    plan_memory(irf, irf.plan.alignment if irf.plan else ALIGNMENT)


def verify_ir(irf: IRFunction):
    """Every read buffer is written before (or is a weight/input); activations are allocated when used."""
    written = {id(b) for b in irf.buffers if b.kind in ("constant", "state") or b.io in ("input", "state")}
    alive = set()
    for idx, ins in enumerate(irf.instrs):
        if ins.op == "allocactivation":
            alive.add(id(ins.operands[0][0]))
            continue
        if ins.op == "deallocactivation":
            alive.discard(id(ins.operands[0][0]))
            continue
        for b, k in ins.operands:
            r = b.root
            if r.kind == "activation" and id(r) not in alive:
                raise VerifyError(f"instruction {idx} ({ins.op} '{ins.name}') uses '{r.name}' outside its lifetime")
            if k in ("in", "inout") and id(r) not in written and ins.op != "tensorview":
                raise VerifyError(f"instruction {idx} ({ins.op} '{ins.name}') reads '{b.name}' before it is written")
        for b, k in ins.operands:
            if k in ("out", "inout"):
                written.add(id(b.root))


# -- text form -----------------------------------------------------------------------------------------------
def _users(irf):
    users: dict[int, list[str]] = {}
    code_idx = 0
    for ins in irf.instrs:
        for b, k in ins.operands:
            users.setdefault(id(b), []).append(f"@{k} {code_idx}")
        code_idx += 1
    return users


def dump_ir(irf: IRFunction) -> str:
    """Glow's text form: a ``declare { ... }`` block of weights/placeholders, then numbered ``code``."""
    users = _users(irf)
    lines = [f"function {irf.name}", "declare {"]
    total = 0
    for b in irf.buffers:
        if b.kind not in ("constant", "mutable", "state"):
            continue
        total += b.size
        u = ", ".join(users.get(id(b), []))
        cm = {"constant": "const", "mutable": "mutable", "state": "state"}[b.kind]
        lines.append(f"  %{b.name} = WeightVar {b.type} {cm} // size: {b.size} // Users: {u}")
    lines.append("")
    lines.append(f"  ; size = {total} bytes")
    lines.append("}")
    lines.append("")
    lines.append("code {")
    for idx, ins in enumerate(irf.instrs):
        if ins.op == "allocactivation":
            b = ins.operands[0][0]
            u = ", ".join(users.get(id(b), []))
            lay = f", Layout: {b.layout}" if b.layout != PLAIN else ""
            lines.append(f"  {idx} %{b.name} = allocactivation  {{ Ty: {b.type}{lay}}} // size: {b.size} // Users: {u}")
            continue
        if ins.op == "deallocactivation":
            lines.append(f"  {idx} %dealloc_{ins.operands[0][0].name} = deallocactivation @out "
                         f"%{ins.operands[0][0].name}")
            continue
        if ins.op == "tensorview":
            v, src = ins.operands[0][0], ins.operands[1][0]
            lines.append(f"  {idx} %{v.name} = tensorview @in %{src.name} {{ Ty: {v.type}, Offsets: [0] }}")
            continue
        ops = ", ".join(f"@{k} %{b.name}" for b, k in ins.operands)
        attrs = ", ".join(f"{k}: {_fmt_attr(v)}" for k, v in ins.attrs.items()
                          if not k.startswith("_") or k in SHOWN_ANNOTATIONS)
        lines.append(f"  {idx} %{ins.name} = {ins.op} {ops}" + (f" {{ {attrs} }}" if attrs else ""))
    lines.append("}")
    lines.extend(f"; layout: {n}" for n in irf.layout_notes)
    lines.extend(f"; group: {' + '.join('%' + i.name for i in g)} (one kernel; its buffers live over all of it)"
                 for g in irf.groups)
    if irf.plan is not None:
        p = irf.plan
        lines.append("")
        notes = ([f"scratch {p.scratch_size} B in all, {p.scratch_peak} B at most at once"] if p.scratch_size else [])
        notes += [f"before scheduling {p.unscheduled_size} B"] if p.unscheduled_size is not None else []
        notes += [f"lower bound {p.allocation.lower_bound} B", f"efficiency {p.allocation.efficiency:.2f}",
                  f"strategy {p.allocation.strategy}"]
        state = f"state {p.state_size} B, " if p.state_size else ""
        lines.append(f"; memory: constant {p.constant_size} B, mutable {p.mutable_size} B, {state}activations "
                     f"{p.activations_size} B ({', '.join(notes)}), alignment {p.alignment}")
    return "\n".join(lines)


def _fmt_attr(v):
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_fmt_attr(x)}" for k, x in v.items()) + "}"
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v)
