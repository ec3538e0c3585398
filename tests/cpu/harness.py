"""Standalone runners of the CPU backend's engine kernels for tests and benchmarks (tests/cpu/test_conv_engine.py,
test_int8_kernels.py, bench/bench_conv.py, bench/bench_int8.py): render, compile with the system C compiler into
a shared library (the backend's toolchain and cache), call through ctypes with numpy-packed constants. The
backend itself places kernels in its own translation units; this harness is not part of the package."""
from __future__ import annotations

import ctypes
import hashlib

import numpy as np

from glow_cpu.build.toolchain import build_kernels
from glow_cpu.conv.engine import ConvKernel, LayoutKernel
from glow_cpu.int8.common import Int8Kernel, QConstants
from glow_cpu.kernels.codegen import KernelCode

FLAGS = ["-O3", "-march=native", "-fPIC", "-shared", "-fwrapv", "-fno-math-errno", "-fopenmp"]
#: Flags that force each C path of a 16- or 8-lane int8 layout on this x86-64 host (tests).
PATH_FLAGS = {
    "native": [],
    "portable": ["-DGLOW_Q_PORTABLE"],
    "avxvnni": ["-mno-avx512f"],
    "avx2": ["-mno-avx512f", "-mno-avxvnni"],
}
#: The C parameter list of each int8 kernel kind (all pointers).
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


def _aligned(n_floats: int) -> np.ndarray:
    """A zeroed float32 array of ``n_floats`` starting on a 64-byte boundary."""
    return aligned(4 * n_floats).view(np.float32)[:n_floats]


def _wrapper(k) -> str:
    """The exported ``<name>_entry`` of a conv engine, layout or int8 engine kernel."""
    if isinstance(k, ConvKernel):
        return (f"GLOW_KERNEL void {k.name}_entry(const float *x, const float *w, const float *b, float *y, "
                f"uint8_t *s, const float *r, const float *wf) {{ {k.name}(x, w, b, y, s, r"
                f"{', wf' if k.reads_filter else ''}); }}")
    if isinstance(k, LayoutKernel):
        return f"GLOW_KERNEL void {k.name}_entry(const float *x, float *y) {{ {k.name}(x, y); }}"
    params = SIGNATURES[k.kind]
    args = ", ".join(p.split("*")[-1].strip() for p in params.split(","))
    return f"GLOW_KERNEL void {k.name}_entry({params}) {{ {k.name}({args}); }}"


def compile_library(kernels: list, flags=None) -> ctypes.CDLL:
    """One shared library of the kernels with an exported ``<name>_entry`` wrapper each, built by the backend's
    toolchain as one kernel unit (system C compiler, content-hash cache: an unchanged source compiles once)."""
    text = "\n".join(k.source for k in kernels) + "\n" + "\n".join(_wrapper(k) for k in kernels) + "\n"
    unit = KernelCode("glow_harness_" + hashlib.sha1(text.encode()).hexdigest()[:20], text, (), (), "harness")
    return ctypes.CDLL(build_kernels([unit], list(FLAGS if flags is None else flags)).paths[unit.name])


# -- the conv engine ------------------------------------------------------------------------------------------
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


# -- the int8 engine ------------------------------------------------------------------------------------------
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
