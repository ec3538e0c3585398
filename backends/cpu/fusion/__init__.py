"""The CPU backend's one fusion stage on the planned IR: declared rules, each finding groups of instructions that
run as one kernel, in one ordered table (``RULES``), run by ``fuse``.

A ``Rule`` is ``(name, match, kernel)``: ``match(fused, instr) -> Group | None`` is asked about every instruction
in program order (``order="reverse"``: last first), after the rules before it in the table; ``kernel(group,
fused) -> (instr, KernelCode, buffers)`` renders the group's call at its ``at`` instruction (None: ``at`` keeps
its own kernel, with the group's operand changes). Every other member is absorbed: its call runs the one stub
kernel (``STUB``), its comment saying where it is computed. ``fuse`` keeps one taken set (every member of every
group, and what a group ``claims`` without absorbing: an instruction whose output it moves), so no instruction
is in two groups; a rule checks memory against what each call really touches once the groups before it apply
(``Fused.touched``: a Group says what its call reads and writes).

The rules, in order (their modules hold the legality rules):
  broadcasts  a broadcast read only by elementwise kernels is not materialized (readers index its source)
  attention   matmul -> [scale] -> [mask] -> Softmax -> matmul as one tiled kernel
  residual    an add (float) or qadd (int8) right after a conv runs in the conv's epilogue
  chains      a DAG of elementwise instructions as one loop (grown from its root, last first)
  transposes  transposes folded into the matmuls and fused attentions reading or writing them through strides

Adding a fusion: one rule (a module here with ``match`` and ``kernel``, one line in ``RULES``), one template
(templates/), one conformance line that reaches it (backends/cpu/README.md, "Adding a fusion").
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from glow_core.plan_queries import PlanIndex

from ..kernels.codegen import KernelCode

#: The kernel of every absorbed instruction: its group's kernel computes it elsewhere.
STUB = KernelCode("glow_k_absorbed", "GLOW_KERNEL int glow_k_absorbed(uint8_t *const *p) { (void)p; return 0; }\n",
                  (), (), "")


@dataclass(eq=False)
class Group:
    """Instructions that run as one kernel: ``members`` (program order), the one whose position runs the kernel
    (``at``; None: no kernel, e.g. an elided broadcast), what each absorbed member's listing says (``absorbed``:
    one text, or per member by id), the buffers the call at ``at`` reads and writes (``touches``; at every
    member's position when ``spread``: a kernel whose scratch lies in its members' buffers), operand slots it
    makes other instructions read from another buffer (``sources``: id(instr) -> {slot: buffer}), instructions it
    claims without absorbing them (``claims``), and the rule's own record (``data``)."""

    rule: str
    members: list
    at: object
    absorbed: "str | dict"
    touches: list = field(default_factory=list)
    spread: bool = False
    sources: dict = field(default_factory=dict)
    claims: list = field(default_factory=list)
    data: object = None

    def listing(self, ins) -> str:
        return self.absorbed if isinstance(self.absorbed, str) else self.absorbed[id(ins)]


@dataclass(frozen=True)
class Rule:
    """One fusion: ``match(fused, instr) -> Group | None`` and ``kernel(group, fused) -> (instr, KernelCode,
    buffers)`` (None: the group's ``at`` runs its own kernel); ``option``: the Program flag that turns it off;
    ``order``: "forward" or "reverse"; ``least``: fewest members a group keeps (a rule that grows its groups one
    member at a time drops the smaller ones when it is done)."""

    name: str
    match: Callable
    kernel: "Callable | None"
    option: str = ""
    order: str = "forward"
    least: int = 1


class Fused:
    """The fusion stage's state and result for one planned IRFunction: the groups (by id of each member), the
    operand substitutions of broadcast sources, per-instruction notes for the listing, the rules' own state, and
    the addresses of buffers a rule moved (``moved``: id(root) -> the buffer whose bytes it now writes)."""

    def __init__(self, irf, num_threads: int, options: dict):
        self.irf, self.num_threads, self.options = irf, num_threads, options
        self.index = PlanIndex(irf)
        self.groups: dict[int, Group] = {}  # id(member) -> its group
        self.taken: set = set()
        self.sources: dict = {}  # id(instr) -> {slot: buffer read instead}
        self.notes: dict = {}  # id(instr) -> text appended to its kernel's listing
        self.state: dict = {}  # rule name -> that rule's working state
        self.moved: dict = {}  # id(root buffer) -> the buffer at whose address its writer now writes it

    def add(self, g: Group):
        for m in g.members:
            self.groups[id(m)] = g
        self.taken.update(id(m) for m in g.members + g.claims)
        for i, slots in g.sources.items():
            self.sources.setdefault(i, {}).update(slots)

    def group_of(self, ins) -> "Group | None":
        return self.groups.get(id(ins))

    def operands(self, ins) -> list:
        """``ins``'s operand buffers as its own kernel reads them (broadcast sources in place)."""
        sub = self.sources.get(id(ins), {})
        return [sub.get(slot, b) for slot, (b, _) in enumerate(ins.operands)]

    def touched(self, ins) -> list:
        """The buffers the call at ``ins``'s position reads or writes once the groups so far apply."""
        g = self.groups.get(id(ins))
        if g is None:
            return self.operands(ins)
        return g.touches if (ins is g.at or g.spread) else []

    def address(self, b) -> tuple[str, int]:
        """(region, byte offset) where ``b``'s bytes live once the groups apply (a moved root's at its new place)."""
        t = self.moved.get(id(b.root))
        if t is None:
            return b.region, b.address
        return t.region, t.address + b.address - b.root.address


def fuse(irf, num_threads: int, options: dict) -> Fused:
    """Every rule of ``RULES`` whose option is on, in order, over ``irf``'s code (see the module doc)."""
    fused = Fused(irf, num_threads, options)
    for rule in RULES:
        if rule.option and not options.get(rule.option, True):
            continue
        found = []
        for ins in (irf.code if rule.order == "forward" else reversed(irf.code)):
            g = rule.match(fused, ins)
            if g is not None:
                if not found or found[-1] is not g:
                    found.append(g)
                fused.add(g)
        for g in {id(g): g for g in found}.values():
            if len(g.members) < rule.least:
                for m in g.members:
                    fused.groups.pop(id(m), None)
                    fused.taken.discard(id(m))
    return fused


def stub(group: Group, ins) -> KernelCode:
    """The stub kernel of absorbed ``ins``, its listing saying where it is computed."""
    return replace(STUB, choice=group.listing(ins))


from . import attention, broadcasts, chains, residual, transposes  # noqa: E402  (the rules import Group, Rule)

#: The rules in the order they run.
RULES = (broadcasts.RULE, attention.RULE, residual.RULE, chains.RULE, transposes.RULE)
RULE = {r.name: r for r in RULES}
