"""glow_npu: the reference NPU, a scratchpad accelerator inside the kit (config, ISA, simulator, backend).

- ``NpuConfig`` (config.py): the array, vector unit, scratchpads, DRAM and DMA figures; ``NpuConfig.load(path)``;
- the instruction set (isa.py, documented in vendor_guide/npu_isa.md): binary encoding, assembler, disassembler;
- the simulator (sim.py): functional (bit-exact numpy) and timed (three engines, token queues, one DRAM port);
- the backend (backend.py, entry point ``npu``): quantized conv, matmul, elementwise, pooling and requantization
  tiled into the scratchpads (kernels.py, with glow_core.tiling), everything else on its fallback ``cpu``.
"""
from .config import NpuConfig

__all__ = ["NpuConfig"]
