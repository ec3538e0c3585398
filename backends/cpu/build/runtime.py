"""Loading and running a compiled function: the kernel libraries through ctypes, the mutable and activations
regions allocated once (64-byte aligned), and a table of (kernel, operand addresses) that the libraries'
``glow_run_table`` walks. Weights are not copied into a constant region: their operand addresses point into
the IR's own arrays (the constant region is virtual, laid out as a bundle's weights file lays it out), so the
functions of a module, whose plans share one array per weight (``ir.share_regions``), read the weights once. A
state region (persistent placeholders) is the module's: allocated once and passed to each of its functions."""
from __future__ import annotations

import bisect
import ctypes
import os

import numpy as np

from glow_core.backend import CompiledFunction
from glow_core.errors import GlowError

from ..kernels.codegen import ERR_KINDS

_LIBS: dict[str, ctypes.CDLL] = {}

#: libgomp's spin count (GOMP_SPINCOUNT) between parallel regions, set before the first kernel library loads
#: libgomp when the user set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT. libgomp's own default (300,000 spins,
#: milliseconds) made a loaded 2-core machine 4-7x slower at 2 threads than at 1: a worker spinning at a barrier
#: holds the core its descheduled partner needs. A thousand spins (tens of microseconds) keep a worker warm
#: between the back-to-back regions of a model's kernels and give the core up soon when it is contended
#: (backends/cpu/README.md, "OpenMP wait policy").
GOMP_SPINCOUNT = "1000"


def omp_environment() -> None:
    """Give libgomp the spin count above unless the user chose a wait policy or spin count (read once, when
    libgomp loads: a process that loaded libgomp before keeps its settings)."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = GOMP_SPINCOUNT


def load_library(path: str) -> ctypes.CDLL:
    """The library at ``path`` (links resolved), loaded once per process."""
    real = os.path.realpath(path)
    lib = _LIBS.get(real)
    if lib is None:
        if not _LIBS:
            omp_environment()
        lib = _LIBS[real] = ctypes.CDLL(real)
    return lib


def aligned_bytes(n: int, align: int = 64) -> np.ndarray:
    """A zeroed uint8 array of ``n`` bytes (at least 1) starting on an ``align``-byte boundary."""
    raw = np.zeros(max(n, 1) + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + max(n, 1)]


class CPUFunction(CompiledFunction):
    """A compiled function bound to its memory regions: every operand address is computed once, here."""

    def __init__(self, program, build, state: np.ndarray | None = None):
        irf = program.irf
        self.irf = irf
        self.program = program
        self.build = build  # toolchain.Build: which kernels were compiled, in how many shards
        self.libs = {name: load_library(path) for name, path in build.paths.items()}
        plan = irf.plan
        self.mutable = aligned_bytes(plan.mutable_size)
        self.activations = aligned_bytes(plan.activations_size)
        self.state = aligned_bytes(plan.state_size) if state is None else state
        self._weights = program.constant_parts()  # kept alive: kernels read them in place
        starts = [off for off, _ in self._weights]
        base = {"mutable": self.mutable.ctypes.data, "activation": self.activations.ctypes.data,
                "state": self.state.ctypes.data}

        def address(region, off):
            if region != "constant":
                return base[region] + off
            part_off, raw = self._weights[bisect.bisect_right(starts, off) - 1]
            return raw.ctypes.data + off - part_off
        calls = program.calls
        kernel = {name: ctypes.cast(lib[name], ctypes.c_void_p).value for name, lib in self.libs.items()}
        self._fns = np.array([kernel[c.code.name] for c in calls], dtype=np.uint64)
        self._ops = np.array([address(r, off) for c in calls for r, off in c.ptrs] or [0], dtype=np.uint64)
        self._starts = np.cumsum([0] + [len(c.ptrs) for c in calls[:-1]], dtype=np.int64)
        self._run = self._run_timed = None
        if calls:
            lib = self.libs[calls[0].code.name]
            self._run, self._run_timed = lib.glow_run_table, lib.glow_run_table_timed
            for fn, n_args in ((self._run, 3), (self._run_timed, 4)):
                fn.restype = ctypes.c_int
                fn.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * n_args
            self._args = (len(calls), self._fns.ctypes.data, self._ops.ctypes.data, self._starts.ctypes.data)
            self._ns = np.zeros(2 * len(calls), dtype=np.int64)
        self._in = [(nm, self._view(b)) for nm, b in irf.inputs.items()]
        self._out = [(nm, self._view(b)) for nm, b in irf.outputs.items()]

    @property
    def source(self) -> str:
        """The whole function as one C translation unit (as a bundle writes it)."""
        return self.program.source()

    def _view(self, b):
        t = b.type
        off = b.address
        return self.mutable[off:off + t.nbytes].view(t.dtype.np).reshape(t.shape)

    def memory_regions(self):
        """The mutable and activations regions the generated code runs in, laid out as the plan says (the
        conformance suite guards every unplanned byte of them), and the state region when the function has state;
        the weights are not exposed."""
        regions = {"mutable": self.mutable, "activation": self.activations}
        return {**regions, "state": self.state} if self.irf.state else regions

    def execute(self, inputs):
        for nm, v in self._in:
            v[...] = inputs[nm]
        if self._run is not None:
            rc = self._run(*self._args)
            if rc:
                self.raise_error(rc)
        return {nm: v.copy() for nm, v in self._out}

    def placeholders(self):
        """Views of the inputs and outputs in the mutable region."""
        return dict(self._in + self._out)

    def run_placeholders(self):
        if self._run is not None:
            rc = self._run(*self._args)
            if rc:
                self.raise_error(rc)

    def execute_timed(self, inputs):
        """A run through ``glow_run_table_timed``: the same kernels, a monotonic clock read around each call."""
        for nm, v in self._in:
            v[...] = inputs[nm]
        timings = []
        if self._run_timed is not None:
            rc = self._run_timed(*self._args, self._ns.ctypes.data)
            if rc:
                self.raise_error(rc)
            ns = self._ns.tolist()
            timings = [(c.instr, ns[2 * i] * 1e-9, (ns[2 * i + 1] - ns[2 * i]) * 1e-9)
                       for i, c in enumerate(self.program.calls)]
        return {nm: v.copy() for nm, v in self._out}, timings

    def compile_spans(self):
        """The C compiler's run, when this compilation ran it (all kernels cached: none)."""
        return [("c-compiler", self.build.start, self.build.seconds)] if self.build.compiled else []

    def raise_error(self, rc: int):
        idx, kind = divmod(rc, 8)
        calls = self.program.calls
        ins = calls[idx - 1].instr if 0 < idx <= len(calls) else None
        what = ERR_KINDS.get(kind, f"error code {rc}")
        if ins is None:
            raise GlowError(f"cpu backend: generated code failed: {what}")
        raise GlowError(f"instruction '{ins.name}' ({ins.op}): {what}")
