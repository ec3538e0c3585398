"""The {{ cookiecutter.vendor }} device's figures: the MAC array, the vector unit, the three scratchpads, DRAM and DMA.

Every other part reads them from here: the instruction set checks its fields against the scratchpad sizes, the
tiling fits tiles into the scratchpads, the simulator times the program with the array size, vector lanes, DMA
bandwidth and latency. ``glow_core.compile(model, "{{ cookiecutter.backend_name }}", npu_config=...)`` overrides
them for one model (an ``NpuConfig``, a dict of its fields or a JSON file's path: ``NpuConfig.load(path)``).

The fields are ``glow_npu.NpuConfig``'s (vendor_guide/npu.md, "the config"). A device with figures it lacks (a
second array, banked scratchpads) subclasses the dataclass and adds them.
"""
from __future__ import annotations

from glow_npu import NpuConfig

KIB = 1024

#: The device this backend compiles for. Put your chip's figures here.
CONFIG = NpuConfig(
    mac_rows=16,  # the weight-stationary MAC array: rows reduce (input channels x taps) ...
    mac_cols=16,  # ... columns are output channels: one row of results per cycle
    vector_lanes=32,  # int32 elements of one contiguous row the vector unit (VEC, REQ) takes per cycle
    input_spm_bytes=128 * KIB,  # INP: 8-bit activations, and 8-bit results waiting to be stored
    weight_spm_bytes=128 * KIB,  # WGT: 8-bit weights
    acc_spm_bytes=128 * KIB,  # ACC: int32 accumulators, vector operands, per-channel tables
    dram_bytes=1 << 30,  # device DRAM: the memory plan's three regions plus the packed weights
    dma_bytes_per_cycle=16,  # the one DRAM port, shared by loads and stores
    dma_latency_cycles=64,  # latency of each DMA transfer
    clock_hz=1.0e9,  # converts cycles to seconds in traces
)
