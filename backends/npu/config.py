"""``NpuConfig``: the reference NPU's parameters (a dataclass; ``NpuConfig.load(path)`` reads JSON).

Every part of the NPU reads its figures from here: the ISA's field checks (scratchpad sizes), the simulator's
timing (array size, vector lanes, DMA bandwidth and latency, clock) and the backend's tiling (capacities).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields

from glow_core.errors import GlowError

KIB = 1024


@dataclass(frozen=True)
class NpuConfig:
    """A scratchpad NPU: an int8 MAC array fed by DMA through three scratchpads.

    - ``mac_rows`` x ``mac_cols``: the weight-stationary MAC array; a GEMM retires one ``mac_rows``-deep slice of
      the reduction for ``mac_cols`` output columns of one row per cycle (8-bit operands minus their zero points,
      int32 accumulation);
    - ``vector_lanes``: int32 elements of one contiguous row the vector unit (VEC, REQ) processes per cycle;
    - ``input_spm_bytes``, ``weight_spm_bytes``, ``acc_spm_bytes``: the input (8-bit activations, also the
      staging of 8-bit results), weight (8-bit) and accumulator (int32) scratchpads;
    - ``dram_bytes``: device DRAM (the memory plan's three regions plus the packed weights must fit);
    - ``dma_bytes_per_cycle``, ``dma_latency_cycles``: the one DRAM port shared by loads and stores, and the
      latency of each transfer;
    - ``clock_hz``: converts cycles to seconds (traces)."""

    mac_rows: int = 16
    mac_cols: int = 16
    vector_lanes: int = 32
    input_spm_bytes: int = 256 * KIB
    weight_spm_bytes: int = 256 * KIB
    acc_spm_bytes: int = 256 * KIB
    dram_bytes: int = 1 << 30
    dma_bytes_per_cycle: int = 16
    dma_latency_cycles: int = 64
    clock_hz: float = 1.0e9

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
            if f.name != "clock_hz":
                ok = ok and float(v).is_integer()
            if f.name == "dma_latency_cycles":
                ok = isinstance(v, int) and v >= 0
            if not ok:
                raise GlowError(f"NpuConfig.{f.name} = {v!r}: expected a positive "
                                f"{'number' if f.name == 'clock_hz' else 'integer'}")
        for name in ("input_spm_bytes", "weight_spm_bytes", "acc_spm_bytes"):
            if getattr(self, name) % 64:
                raise GlowError(f"NpuConfig.{name} = {getattr(self, name)}: must be a multiple of 64 bytes")

    @classmethod
    def load(cls, path: "str | os.PathLike") -> "NpuConfig":
        """A config from a JSON object with any of the fields (the others keep their defaults)."""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            raise GlowError(f"NpuConfig.load({str(path)!r}): {e}") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: dict, where: str = "config") -> "NpuConfig":
        if not isinstance(data, dict):
            raise GlowError(f"{where}: an NPU config is a JSON object of fields, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise GlowError(f"{where}: unknown NpuConfig field(s) {unknown}; the fields are {sorted(known)}")
        return cls(**data)

    @classmethod
    def of(cls, value) -> "NpuConfig":
        """``value`` as a config: None (the defaults), an NpuConfig, a dict of fields or a JSON file's path."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            return cls.from_dict(value)
        if isinstance(value, (str, os.PathLike)):
            return cls.load(value)
        raise GlowError(f"npu_config= takes an NpuConfig, a dict of its fields or a JSON file's path, got "
                        f"{type(value).__name__}")

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def macs_per_cycle(self) -> int:
        return self.mac_rows * self.mac_cols
