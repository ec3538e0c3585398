"""What runs the compiled program: on day one Glow Kit's reference NPU simulator, functional (numpy, bit-exact)
and timed (the load, compute and store engines with their token queues, one DRAM port), vendor_guide/npu.md.

``Device(config).run(program, dram, functional=True, check_hazards=True)`` executes a program (decoded
instructions) over the device DRAM (a numpy uint8 array: the memory plan's regions and the packed constants,
changed in place) and returns ``glow_npu.sim.SimStats`` (cycles, busy cycles per engine, DRAM bytes, one event
per instruction for the trace). A scratchpad overflow, an out-of-bounds DMA, an illegal instruction, a hazard
the tokens do not order and a token deadlock are GlowErrors naming the pc.

Hooks, from the first change to the last:
- ``compute_cycles(insn)``: the compute engine's timing of GEMM, VEC and REQ: give it your array's and vector
  unit's (an output-stationary array, a slower multiplier...); the semantics stay the reference's;
- ``_gemm`` / ``_vec`` / ``_req`` / ``_load`` / ``_store``: an instruction's semantics (keep them the ISA's, or
  document yours in your ISA page);
- ``run``: replace it with your instruction-set simulator, an RTL co-simulation or the board's driver: copy
  ``dram`` to the device, run the program's binary (``encode`` in backend.py), copy the DRAM back, return the
  counters as a SimStats. The conformance suite then checks the device itself.
"""
from __future__ import annotations

from glow_npu.sim import Simulator


class Device(Simulator):
    """The {{ cookiecutter.vendor }} device, simulated (day one: the reference NPU's simulator)."""

    def compute_cycles(self, insn) -> int:
        # >>> YOUR COMPUTE ENGINE'S TIMING HERE (GEMM, VEC, REQ); the reference NPU's on day one. <<<
        return super().compute_cycles(insn)
