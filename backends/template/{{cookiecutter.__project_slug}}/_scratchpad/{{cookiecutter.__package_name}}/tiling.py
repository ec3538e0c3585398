"""Tiling and placement: how a job's loop nest is cut into tiles that fit the scratchpads, and where each tile's
buffers live in them. Both are Glow Kit's target-independent tools (vendor_guide/npu.md, "tiling"):

- ``glow_core.tiling.plan(loops, memories, buffers, cost, orders=, quanta=, sizes=, alignment=)`` tries tile
  sizes for every loop (``candidate_sizes``: the distinct ceil(extent / n), multiples of a quantum such as the
  array's width), drops the tilings whose buffers do not fit the memories (double-buffered ones count twice),
  asks ``cost`` for each tiling and loop order, and returns the candidates, cheapest first, the best one placed;
- ``glow_core.tiling.place(buffers, memories, alignment)`` gives every buffer slot an offset in its scratchpad
  with ``glow_core.memory.allocate`` (the allocator of the activations' memory plan): buffers whose phases do not
  overlap may share bytes, a memory over its capacity is a MemoryLimitError naming it.
"""
from __future__ import annotations

from glow_core.tiling import Tiling, plan

#: Bytes every scratchpad buffer is aligned to (a bank row of your scratchpads).
ALIGNMENT = 64


def memories(cfg) -> dict:
    """The scratchpads tiles may use, name -> bytes. Return less than the config's figures to keep bytes for
    something resident (a lookup table, a second program's tiles)."""
    return {"INP": cfg.input_spm_bytes, "WGT": cfg.weight_spm_bytes, "ACC": cfg.acc_spm_bytes}


def choose(job, cfg) -> Tiling:
    """The tiling of one job. The reference NPU's jobs (glow_npu.kernels) plan themselves (``job.plan()``: their
    loop orders, the array's quanta, their tile-size candidates); a job without ``plan`` (emitter.py's) is planned
    here from its ``loops``, ``buffers`` and ``cost`` (and ``orders`` / ``quanta`` when it has them)."""
    if hasattr(job, "plan"):
        return job.plan()
    return plan(job.loops, memories(cfg), job.buffers, job.cost, orders=getattr(job, "orders", None),
                quanta=getattr(job, "quanta", None), alignment=ALIGNMENT).best
