"""A *simulated* {{ cookiecutter.vendor }} device: its memory regions, the DMA between host and device, and
kernel launches.

Everything the real driver will do is here, in plain Python, so the bring-up can start before silicon:

* ``alloc(region, size)``: reserve a device memory region. Glow Kit plans three regions per compiled
  function (see ``glow_core.ir.MemoryPlan``): *constant* (weights, copied once at load time), *mutable*
  (graph inputs and outputs, copied at every run) and *activations* (intermediate tensors; never leave the
  device). Offsets inside each region come from the memory plan; the device only needs base addresses.
* ``copy_in`` / ``copy_out``: DMA host -> device and device -> host. Every transfer is counted in
  ``stats`` so you can see what crosses the bus.
* ``view``: how a kernel sees a tensor: a typed window onto device memory at (region, offset).
* ``launch``: run one kernel. This is where a real driver queues a command buffer.

Replace the bytearrays by your driver's buffers (mmap'ed BARs, a simulator's memory, ...) and keep the
interface: the backend in backend.py only talks to the device through these methods.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class DeviceStats:
    """What crossed the bus and what ran: reset with ``SimulatedDevice.stats = DeviceStats()``."""

    bytes_in: int = 0
    bytes_out: int = 0
    transfers: int = 0
    launches: int = 0
    by_op: dict = field(default_factory=dict)


class DeviceMemoryError(Exception):
    """An access outside a device region (a bug in a kernel or in the memory plan)."""


class SimulatedDevice:
    """Device memory as byte buffers, explicit DMA, counted kernel launches."""

    def __init__(self, name: str = "{{ cookiecutter.backend_name }}0"):
        self.name = name
        self.regions: dict[str, bytearray] = {}
        self.stats = DeviceStats()

    # -- memory ------------------------------------------------------------------------------------------
    def alloc(self, region: str, size: int) -> None:
        """Reserve ``size`` bytes for ``region`` (zero-filled, as device memory after a reset)."""
        self.regions[region] = bytearray(size)

    def _check(self, region: str, offset: int, nbytes: int) -> bytearray:
        mem = self.regions.get(region)
        if mem is None:
            raise DeviceMemoryError(f"{self.name}: region '{region}' is not allocated")
        if offset < 0 or offset + nbytes > len(mem):
            raise DeviceMemoryError(f"{self.name}: access [{offset}, {offset + nbytes}) outside region "
                                    f"'{region}' of {len(mem)} bytes")
        return mem

    def copy_in(self, region: str, offset: int, data: bytes | memoryview | np.ndarray) -> None:
        """DMA host -> device: write ``data`` at ``offset`` of ``region``."""
        if isinstance(data, np.ndarray):  # any dtype (bfloat16, float8, int4...), any shape (empty too): bytes
            data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        raw = memoryview(data)
        mem = self._check(region, offset, raw.nbytes)
        mem[offset:offset + raw.nbytes] = raw
        self.stats.bytes_in += raw.nbytes
        self.stats.transfers += 1

    def copy_out(self, region: str, offset: int, dtype, shape) -> np.ndarray:
        """DMA device -> host: a new host array read from ``offset`` of ``region``."""
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        mem = self._check(region, offset, nbytes)
        out = np.frombuffer(bytes(mem[offset:offset + nbytes]), dtype=dt).reshape(shape).copy()
        self.stats.bytes_out += nbytes
        self.stats.transfers += 1
        return out

    def view(self, region: str, offset: int, dtype, shape) -> np.ndarray:
        """A typed, writable window onto device memory (what a kernel reads and writes)."""
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        mem = self._check(region, offset, count * dt.itemsize)
        return np.frombuffer(mem, dtype=dt, count=count, offset=offset).reshape(shape)

    # -- execution ----------------------------------------------------------------------------------------
    def launch(self, op: str, kernel, inputs, attrs, out_dtypes):
        """Run one kernel on device memory. A real driver would enqueue it and return at once."""
        self.stats.launches += 1
        self.stats.by_op[op] = self.stats.by_op.get(op, 0) + 1
        return kernel(inputs, attrs, out_dtypes)
