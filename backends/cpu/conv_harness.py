"""Standalone runner of conv engine kernels (tests and bench/bench_conv.py): render, compile with the system C
compiler into a shared library (the backend's toolchain and cache), call through ctypes with numpy-packed weights.

Not used by the backend itself (codegen places kernels in its own translation units)."""
from __future__ import annotations

import ctypes
import hashlib

import numpy as np

from .codegen import KernelCode
from .conv_engine import ConvKernel, LayoutKernel
from .toolchain import build_kernels

FLAGS = ["-O3", "-march=native", "-fPIC", "-shared", "-fno-math-errno", "-fopenmp"]


def _aligned(n_floats: int) -> np.ndarray:
    raw = np.zeros(n_floats + 16, dtype=np.float32)
    off = (-raw.ctypes.data % 64) // 4
    return raw[off:off + n_floats]


def compile_library(kernels: list, flags=None) -> ctypes.CDLL:
    """One shared library of ConvKernels / LayoutKernels with an exported ``<name>_entry`` wrapper per kernel,
    built by the backend's toolchain as one kernel unit (system C compiler, content-hash cache: an unchanged
    source compiles once)."""
    wrappers = [f"GLOW_KERNEL void {k.name}_entry(const float *x, const float *w, const float *b, float *y, "
                f"uint8_t *s, const float *r, const float *wf) {{ {k.name}(x, w, b, y, s, r"
                f"{', wf' if k.reads_filter else ''}); }}" if isinstance(k, ConvKernel) else
                f"GLOW_KERNEL void {k.name}_entry(const float *x, float *y) {{ {k.name}(x, y); }}"
                for k in kernels]
    text = "\n".join(k.source for k in kernels) + "\n" + "\n".join(wrappers) + "\n"
    code = KernelCode("gce_lib_" + hashlib.sha1(text.encode()).hexdigest()[:20], text, (), (), "conv engine harness")
    return ctypes.CDLL(build_kernels([code], list(flags or FLAGS)).paths[code.name])


def blocked(x: np.ndarray, cb: int) -> np.ndarray:
    """NCHW (or NCW) -> NCHWc with zero lanes past C (numpy, for tests and the bench)."""
    n, c = x.shape[:2]
    nb = -(-c // cb)
    xp = np.zeros((n, nb * cb) + x.shape[2:], np.float32)
    xp[:, :c] = x
    xp = xp.reshape((n, nb, cb) + x.shape[2:])
    return np.ascontiguousarray(np.moveaxis(xp, 2, -1))


def unblocked(y: np.ndarray, c: int) -> np.ndarray:
    """NCHWc -> NCHW keeping the first ``c`` channels."""
    y = np.moveaxis(y, -1, 2)
    return np.ascontiguousarray(y.reshape((y.shape[0], y.shape[1] * y.shape[2]) + y.shape[3:])[:, :c])


def to_layout(x: np.ndarray, layout: str, cb: int) -> np.ndarray:
    if layout == "nchwc":
        return blocked(x, cb)
    if layout == "nhwc":
        return np.ascontiguousarray(np.moveaxis(x, 1, -1))
    return np.ascontiguousarray(x, dtype=np.float32)


def from_layout(y: np.ndarray, layout: str, c: int) -> np.ndarray:
    if layout == "nchwc":
        return unblocked(y, c)
    if layout == "nhwc":
        return np.ascontiguousarray(np.moveaxis(y, -1, 1))
    return y


class ConvRunner:
    """A compiled ConvKernel bound to its packed weights, bias and scratch: ``run(x_nchw, res_nchw=None)`` takes
    and returns plain NCHW arrays (converting to the kernel's layouts outside the timed call), ``call()`` runs
    the kernel alone on the buffers set up by ``prepare``."""

    def __init__(self, kernel: ConvKernel, w: np.ndarray, bias: np.ndarray, lib: ctypes.CDLL | None = None):
        self.k = kernel
        self.lib = lib or compile_library([kernel])
        self.fn = getattr(self.lib, kernel.name + "_entry")
        self.fn.restype = None
        self.fn.argtypes = [ctypes.c_void_p] * 7
        packed = kernel.pack_weights(w)
        self.w = _aligned(max(packed.size, 1))
        self.w[:packed.size] = packed
        self.wf = np.ascontiguousarray(w, dtype=np.float32)  # the filter as an instruction holds it
        self.b = np.ascontiguousarray(bias, dtype=np.float32)
        self.scratch = _aligned(max(kernel.scratch_bytes // 4, 1))
        g = kernel.geometry
        self.out_shape = (g.batch, g.filters) + tuple(g.out_spatial)

    def prepare(self, x: np.ndarray, res: np.ndarray | None = None):
        k = self.k
        xl = to_layout(x, k.in_layout, k.cb)
        self.x = _aligned(xl.size)
        self.x[:] = xl.reshape(-1)
        self.x_shape = xl.shape
        yl = to_layout(np.zeros(self.out_shape, np.float32), k.out_layout, k.cb)
        self.y = _aligned(yl.size)
        self.y_shape = yl.shape
        self.res = None
        if res is not None:
            rl = to_layout(res, k.out_layout, k.cb)
            if k.epilogue.in_place:  # the kernel reads the residual from y
                self.y[:] = rl.reshape(-1)
            else:
                self.res = _aligned(rl.size)
                self.res[:] = rl.reshape(-1)
        self.args = (self.x.ctypes.data, self.w.ctypes.data, self.b.ctypes.data, self.y.ctypes.data,
                     self.scratch.ctypes.data, self.res.ctypes.data if self.res is not None else None,
                     self.wf.ctypes.data)

    def call(self):
        self.fn(*self.args)

    def result(self) -> np.ndarray:
        return from_layout(self.y.reshape(self.y_shape), self.k.out_layout, self.k.geometry.filters)

    def run(self, x: np.ndarray, res: np.ndarray | None = None) -> np.ndarray:
        self.prepare(x, res)
        self.call()
        return self.result()


def run_layout(kernel: LayoutKernel, x: np.ndarray, lib: ctypes.CDLL | None = None) -> np.ndarray:
    """Run a layout kernel on ``x`` (plain NCHW for nchw -> nchwc, blocked for nchwc -> nchw)."""
    lib = lib or compile_library([kernel])
    fn = getattr(lib, kernel.name + "_entry")
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * 2
    n, c = kernel.shape[:2]
    sp = tuple(kernel.shape[2:])
    nb = -(-c // kernel.cb)
    src = _aligned(x.size)
    src[:] = np.ascontiguousarray(x, np.float32).reshape(-1)
    out_shape = (n, nb) + sp + (kernel.cb,) if kernel.dst_layout == "nchwc" else tuple(kernel.shape)
    dst = _aligned(int(np.prod(out_shape)))
    dst[:] = np.nan
    fn(src.ctypes.data, dst.ctypes.data)
    return dst.reshape(out_shape)
