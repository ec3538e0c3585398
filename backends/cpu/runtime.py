"""Loading and running a compiled function: ctypes, three 64-byte aligned regions allocated once."""
from __future__ import annotations

import ctypes

import numpy as np

from glow_core.backend import CompiledFunction
from glow_core.errors import GlowError

from .codegen import ERR_KINDS


def aligned_bytes(n: int, align: int = 64) -> np.ndarray:
    """A zeroed uint8 array of ``n`` bytes (at least 1) starting on an ``align``-byte boundary."""
    raw = np.zeros(max(n, 1) + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + max(n, 1)]


class CPUFunction(CompiledFunction):
    """A compiled shared library bound to its memory regions."""

    def __init__(self, irf, lib_path: str, instrs, source: str = ""):
        self.irf = irf
        self.lib_path = lib_path
        self.source = source
        self._instrs = instrs
        # OMP_WAIT_POLICY is left to libgomp's default (spin briefly, then sleep): PASSIVE made every parallel
        # region pay a futex wake-up, and 2 threads ran ResNet-18 no faster than 1 (bench/bench_cpu.py).
        self.lib = ctypes.CDLL(lib_path)
        self.fn = self.lib.glow_run
        self.fn.restype = ctypes.c_int
        self.fn.argtypes = [ctypes.c_void_p] * 3
        plan = irf.plan
        self.constant = aligned_bytes(plan.constant_size)
        blob = irf.constant_blob()
        self.constant[:len(blob)] = np.frombuffer(blob, dtype=np.uint8)
        self.mutable = aligned_bytes(plan.mutable_size)
        self.activations = aligned_bytes(plan.activations_size)
        self._args = (self.constant.ctypes.data, self.mutable.ctypes.data, self.activations.ctypes.data)
        self._in = [(nm, self._view(b)) for nm, b in irf.inputs.items()]
        self._out = [(nm, self._view(b)) for nm, b in irf.outputs.items()]

    def _view(self, b):
        t = b.type
        off = b.address
        return self.mutable[off:off + t.nbytes].view(t.dtype.np).reshape(t.shape)

    def memory_regions(self):
        """The mutable and activations regions the generated code runs in, laid out as the plan says (the
        conformance suite guards every unplanned byte of them); the weights are not exposed."""
        return {"mutable": self.mutable, "activation": self.activations}

    def execute(self, inputs):
        for nm, v in self._in:
            v[...] = inputs[nm]
        rc = self.fn(*self._args)
        if rc:
            self.raise_error(rc)
        return {nm: v.copy() for nm, v in self._out}

    def raise_error(self, rc: int):
        idx, kind = divmod(rc, 8)
        ins = self._instrs[idx - 1] if 0 < idx <= len(self._instrs) else None
        what = ERR_KINDS.get(kind, f"error code {rc}")
        if ins is None:
            raise GlowError(f"cpu backend: generated code failed: {what}")
        raise GlowError(f"instruction '{ins.name}' ({ins.op}): {what}")
