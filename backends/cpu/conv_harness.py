"""Standalone runner of conv engine kernels (tests and bench/bench_conv.py): render, compile with the system C
compiler into a shared library in a temporary directory, call through ctypes with numpy-packed weights.

Not used by the backend itself (codegen places kernels in its own translation units)."""
from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile

import numpy as np

from .conv_engine import ConvKernel
from .toolchain import ToolchainError, find_compiler

FLAGS = ["-O3", "-march=native", "-fPIC", "-shared", "-fno-math-errno", "-fopenmp"]


def _aligned(n_floats: int) -> np.ndarray:
    raw = np.zeros(n_floats + 16, dtype=np.float32)
    off = (-raw.ctypes.data % 64) // 4
    return raw[off:off + n_floats]


def compile_library(sources: list[str], entries: list[str], flags=None) -> ctypes.CDLL:
    """One shared library of ``sources`` with an exported ``<name>_entry`` wrapper per kernel name."""
    wrappers = [f"void {e}_entry(const float *x, const float *w, const float *b, float *y, uint8_t *s, "
                f"const float *r) {{ {e}(x, w, b, y, s, r); }}" for e in entries]
    text = "#include <stdint.h>\n" + "\n".join(sources) + "\n" + "\n".join(wrappers) + "\n"
    d = tempfile.mkdtemp(prefix="gce_")
    c, so = os.path.join(d, "k.c"), os.path.join(d, "k.so")
    with open(c, "w") as f:
        f.write(text)
    r = subprocess.run(find_compiler() + list(flags or FLAGS) + ["-o", so, c, "-lm"], capture_output=True, text=True)
    if r.returncode:
        raise ToolchainError(f"conv engine kernel failed to compile ({c}):\n{r.stderr[-4000:]}")
    return ctypes.CDLL(so)


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
        self.lib = lib or compile_library([kernel.source], [kernel.name])
        self.fn = getattr(self.lib, kernel.name + "_entry")
        self.fn.restype = None
        self.fn.argtypes = [ctypes.c_void_p] * 6
        packed = kernel.pack_weights(w)
        self.w = _aligned(max(packed.size, 1))
        self.w[:packed.size] = packed
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
            self.res = _aligned(rl.size)
            self.res[:] = rl.reshape(-1)
        self.args = (self.x.ctypes.data, self.w.ctypes.data, self.b.ctypes.data, self.y.ctypes.data,
                     self.scratch.ctypes.data, self.res.ctypes.data if self.res is not None else None)

    def call(self):
        self.fn(*self.args)

    def result(self) -> np.ndarray:
        return from_layout(self.y.reshape(self.y_shape), self.k.out_layout, self.k.geometry.filters)

    def run(self, x: np.ndarray, res: np.ndarray | None = None) -> np.ndarray:
        self.prepare(x, res)
        self.call()
        return self.result()
