"""The instruction stream as a pipeline of steps, and its dependency tokens.

A kernel is written as a sequence of ``Step``s: the loads that bring one step's operands into the scratchpads,
the computation on them, and the stores of its results. ``Stream.program()`` turns the steps into the program,
each engine's instructions in step order, with the tokens of a double-buffered pipeline (VTA's scheme):

- step i's first load waits for step i-2's computation (pop compute->load), its last load releases step i's
  computation (push load->compute);
- step i's first compute instruction waits for its loads (pop load->compute) and for step i-2's stores (pop
  store->compute); its last one releases step i's stores (push compute->store) and step i+2's loads (push
  compute->load);
- step i's first store waits for its computation (pop compute->store), its last one releases step i+2's
  computation (push store->compute).

So a buffer written by step i's loads may be filled again at step i+2 (two slots: ``slot = content index % 2``
for a buffer whose content changes at most once per step), and a result buffer written at step i and stored by
step i's stores may be written again at step i+2. An engine with nothing to do in a step gets a no-op (zero
extents) that carries the tokens. ``barrier()`` appends three empty steps: every later load then starts after
every earlier store has ended (load(j) waits for compute(j-2), which waits for store(j-4)), which orders a layer's
reads of DRAM after the previous layer's writes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .isa import Insn


@dataclass
class Step:
    loads: list = field(default_factory=list)
    computes: list = field(default_factory=list)
    stores: list = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.loads or self.computes or self.stores)


class Stream:
    """Steps of the whole program, each instruction tagged with its layer (the IR instruction's name)."""

    def __init__(self):
        self.steps: list[Step] = []

    def add(self, step: Step, layer: str):
        for insn in step.loads + step.computes + step.stores:
            insn.layer = layer
        self.steps.append(step)

    def barrier(self):
        if self.steps and not all(s.empty() for s in self.steps[-3:]):
            self.steps += [Step(), Step(), Step()]

    def program(self) -> list[Insn]:
        out: list[Insn] = []
        for i, s in enumerate(self.steps):
            layer = next((x.layer for x in s.loads + s.computes + s.stores), "")
            loads = s.loads or [Insn("LOAD", layer)]
            comps = s.computes or [Insn("VEC", layer)]
            stores = s.stores or [Insn("STORE", layer)]
            if i >= 2:
                loads[0].pop_next = True
                comps[0].pop_next = True
            loads[-1].push_next = True
            comps[0].pop_prev = True
            comps[-1].push_prev = True
            comps[-1].push_next = True
            stores[0].pop_prev = True
            stores[-1].push_prev = True
            out += loads + comps + stores
        return out
