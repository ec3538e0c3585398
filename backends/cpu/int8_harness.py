"""Standalone runner of int8 engine kernels (tests and bench/bench_int8.py): render, compile with the system C
compiler into a shared library (the backend's toolchain and cache), call through ctypes.

Not used by the backend itself (codegen places kernels in its own translation units)."""
from __future__ import annotations

import ctypes
import hashlib

import numpy as np

from .int8_common import Int8Kernel, QConstants
from .codegen import KernelCode
from .toolchain import build_kernels

FLAGS = ["-O3", "-march=native", "-fPIC", "-shared", "-fwrapv", "-fno-math-errno", "-fopenmp"]
#: Flags that force each C path of a 16- or 8-lane layout on this x86-64 host (tests).
PATH_FLAGS = {
    "native": [],
    "portable": ["-DGLOW_Q_PORTABLE"],
    "avxvnni": ["-mno-avx512f"],
    "avx2": ["-mno-avx512f", "-mno-avxvnni"],
}
#: The C parameter list of each kernel kind (all pointers).
SIGNATURES = {
    "conv": "const uint8_t *x, const int8_t *w, const int32_t *corr, const float *mult, void *y, uint8_t *s",
    "conv+add": "const uint8_t *x, const int8_t *w, const int32_t *corr, const float *mult, void *y, uint8_t *s, "
                "const void *b, void *yadd",
    "matmul": "const uint8_t *x, const int8_t *w, const int32_t *corr, const float *mult, void *y, uint8_t *s",
    "rescale": "const void *x, void *y",
    "add": "const void *a, const void *b, void *y",
    "lookup": "const void *x, const uint8_t *table, void *y",
    "pool": "const void *x, const float *mult, void *y",
}


def aligned(nbytes: int) -> np.ndarray:
    """A zeroed uint8 array of ``nbytes`` (at least 1) starting on a 64-byte boundary."""
    raw = np.zeros(max(nbytes, 1) + 64, np.uint8)
    off = -raw.ctypes.data % 64
    return raw[off:off + max(nbytes, 1)]


def compile_library(kernels: list[Int8Kernel], flags=None) -> ctypes.CDLL:
    """One shared library of the kernels with an exported ``<name>_entry`` wrapper each (built and cached by the
    backend's toolchain as one kernel unit)."""
    wrappers = []
    for k in kernels:
        params = SIGNATURES[k.kind]
        args = ", ".join(p.split("*")[-1].strip() for p in params.split(","))
        wrappers.append(f"GLOW_KERNEL void {k.name}_entry({params}) {{ {k.name}({args}); }}")
    text = "\n".join(k.source for k in kernels) + "\n" + "\n".join(wrappers) + "\n"
    unit = KernelCode("gq_unit_" + hashlib.sha1(text.encode()).hexdigest()[:20], text, (), (), "int8 harness")
    return ctypes.CDLL(build_kernels([unit], list(FLAGS if flags is None else flags)).paths[unit.name])


def entry(lib: ctypes.CDLL, kernel: Int8Kernel):
    fn = getattr(lib, kernel.name + "_entry")
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * len(SIGNATURES[kernel.kind].split(","))
    return fn


def _copy(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    buf = aligned(a.nbytes)
    buf[:a.nbytes] = a.reshape(-1).view(np.uint8)
    return buf


class GemmRunner:
    """A compiled conv or matmul kernel bound to its packed constants and scratch: ``prepare(x)`` copies the
    input, ``call()`` runs the kernel alone, ``result()`` returns the output as ``out_shape`` of ``out_dtype``."""

    def __init__(self, kernel: Int8Kernel, w: np.ndarray, bias, out_shape, out_dtype, lib=None):
        self.k = kernel
        self.fn = entry(lib or compile_library([kernel]), kernel)
        consts: QConstants = kernel.pack(w, bias)
        self.w, self.corr, self.mult = _copy(consts.weights), _copy(consts.corrections), _copy(consts.multipliers)
        self.scratch = aligned(kernel.scratch_bytes)
        self.out_shape, self.out_dtype = tuple(out_shape), np.dtype(out_dtype)
        self.y = aligned(int(np.prod(self.out_shape)) * self.out_dtype.itemsize)

    def prepare(self, x: np.ndarray):
        self.x = _copy(x)
        self.args = (self.x.ctypes.data, self.w.ctypes.data, self.corr.ctypes.data, self.mult.ctypes.data,
                     self.y.ctypes.data, self.scratch.ctypes.data)

    def call(self):
        self.fn(*self.args)

    def result(self) -> np.ndarray:
        n = int(np.prod(self.out_shape)) * self.out_dtype.itemsize
        return self.y[:n].view(self.out_dtype).reshape(self.out_shape).copy()

    def run(self, x: np.ndarray) -> np.ndarray:
        self.prepare(x)
        self.call()
        return self.result()


def run_simple(kernel: Int8Kernel, inputs: list[np.ndarray], out_shape, out_dtype, lib=None) -> np.ndarray:
    """Run an elementwise, lookup or pool kernel: ``inputs`` in the order of its signature's input pointers."""
    fn = entry(lib or compile_library([kernel]), kernel)
    bufs = [_copy(a) for a in inputs]
    out_dtype = np.dtype(out_dtype)
    y = aligned(int(np.prod(out_shape)) * out_dtype.itemsize)
    fn(*[b.ctypes.data for b in bufs], y.ctypes.data)
    return y[:int(np.prod(out_shape)) * out_dtype.itemsize].view(out_dtype).reshape(out_shape).copy()
