"""Accumulating primitives: ``matmul``, and the windowed ones: ``conv``, ``max_pool``, ``avg_pool``."""
from __future__ import annotations

import itertools
import math

import numpy as np

from ...types import FLOATS, NUMERIC, TensorType
from ..registry import REQUIRED, primitive
from .checks import accept, fail


# -- matmul ------------------------------------------------------------------------------------------------
def _matmul_rule(ts):
    a, b = ts
    accept("matmul", a, NUMERIC)
    if a.dtype != b.dtype:
        fail("matmul", f"operand dtypes differ: {a.dtype} and {b.dtype}")
    if a.rank < 2 or a.rank != b.rank or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        fail("matmul", f"expects [..., M, K] x [..., K, N] with equal batch dims, got {a.shape} x {b.shape}")
    return [TensorType(a.dtype, a.shape[:-1] + (b.shape[-1],))]


def matmul(a, b):
    if a.dtype.kind in "iu":
        return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(a.dtype)
    return np.matmul(a, b)


primitive("matmul", "matmul", ("a", "b"), NUMERIC, _matmul_rule, matmul,
          "Batched matrix product: [..., M, K] x [..., K, N] -> [..., M, N], batch dims equal. "
          "Accumulates in the operand type (float16/bfloat16 in float32).", tolerance="matmul")


# -- windows -----------------------------------------------------------------------------------------------
def _window_out(name, in_sp, k, strides, dilations, pads):
    n = len(in_sp)
    if not (len(k) == len(strides) == len(dilations) == n and len(pads) == 2 * n):
        fail(name, f"kernel {k}, strides {strides}, dilations {dilations}, pads {pads} must match "
                   f"{n} spatial dims")
    out = []
    for i in range(n):
        eff = (k[i] - 1) * dilations[i] + 1
        span = in_sp[i] + pads[i] + pads[i + n] - eff
        if span < 0 or strides[i] < 1 or dilations[i] < 1:
            fail(name, f"window {eff} does not fit spatial dim {i} of size {in_sp[i]} with pads {pads}")
        out.append(span // strides[i] + 1)
    return tuple(out)


def _windows(xp, k, strides, dilations, out_sp):
    """All window positions of padded x as an array [N, C, *out_sp, *k] (a strided view)."""
    n = len(k)
    s = xp.strides
    shape = xp.shape[:2] + tuple(out_sp) + tuple(k)
    st = s[:2] + tuple(s[2 + i] * strides[i] for i in range(n)) + tuple(s[2 + i] * dilations[i] for i in range(n))
    return np.lib.stride_tricks.as_strided(xp, shape, st, writeable=False)


def _out_sp(sp, k, strides, dilations, pads):
    n = len(sp)
    return tuple((sp[i] + pads[i] + pads[i + n] - ((k[i] - 1) * dilations[i] + 1)) // strides[i] + 1
                 for i in range(n))


def _pad_spatial(x, pads, value):
    """x [N, C, *sp] padded by ``pads`` (begins then ends) with ``value`` (np.pad is slow on small arrays)."""
    n = x.ndim - 2
    if not any(pads):
        return x
    out = np.full(x.shape[:2] + tuple(x.shape[2 + i] + pads[i] + pads[i + n] for i in range(n)), value, x.dtype)
    out[np.s_[:, :] + tuple(np.s_[pads[i]:pads[i] + x.shape[2 + i]] for i in range(n))] = x
    return out


def _offset_slices(off, strides, dilations, out_sp):
    """Slices of the padded spatial dims that kernel offset ``off`` reads for every output position."""
    return tuple(np.s_[o * d:o * d + s * (m - 1) + 1:s] for o, d, s, m in zip(off, dilations, strides, out_sp))


def _conv_rule(ts, strides, dilations, pads, group):
    x, w, b = ts
    accept("conv", x, NUMERIC)
    if x.dtype != w.dtype or b.dtype != x.dtype:
        fail("conv", f"input, filter and bias dtypes must agree, got {x.dtype}, {w.dtype}, {b.dtype}")
    if x.rank < 3 or w.rank != x.rank:
        fail("conv", f"input {x.shape} and filter {w.shape} must be [N, C, *spatial] and [F, C/group, *k]")
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        fail("conv", f"channels {x.shape[1]} do not match filter {w.shape} with group {group}")
    if b.shape != (w.shape[0],):
        fail("conv", f"bias shape {b.shape} must be ({w.shape[0]},)")
    sp = _window_out("conv", x.shape[2:], w.shape[2:], strides, dilations, pads)
    return [TensorType(x.dtype, (x.shape[0], w.shape[0]) + sp)]


def conv(x, w, bias, strides, dilations, pads, group=1):
    """im2col, then one batched matrix product and the bias.

    The columns hold, for every input channel c and kernel offset k, the padded input as seen through that
    offset at every output position (one strided slice copy per offset): cols [N, C, K, *out], C-major like
    w's [F, C/group, *k]. Then w [group, F/group, C/group * K] @ cols [N, group, C/group * K, P] is the
    output [N, F, P] directly."""
    n = x.ndim - 2
    k = tuple(w.shape[2:])
    out_sp = _out_sp(x.shape[2:], k, strides, dilations, pads)
    acc = np.int64 if x.dtype.kind in "iu" else x.dtype
    N, C = x.shape[:2]
    F = w.shape[0]
    K = math.prod(k)
    if min(out_sp + (N, F), default=1) <= 0:
        return np.zeros((N, F) + out_sp, x.dtype)
    xp = _pad_spatial(x.astype(acc, copy=False), pads, 0)
    cols = np.empty((N, C, K) + out_sp, dtype=acc)
    for j, off in enumerate(itertools.product(*(range(kk) for kk in k))):
        cols[:, :, j] = xp[np.s_[:, :] + _offset_slices(off, strides, dilations, out_sp)]
    cols = cols.reshape(N, group, C // group * K, math.prod(out_sp))
    y = np.matmul(w.astype(acc, copy=False).reshape(group, F // group, C // group * K), cols)
    y = y.reshape((N, F) + out_sp)
    y += bias.astype(acc, copy=False).reshape((F,) + (1,) * n)
    return y.astype(x.dtype, copy=False)


primitive("conv", "conv", ("x", "w", "bias"), NUMERIC, _conv_rule, conv,
          "Grouped, strided, dilated, zero-padded N-d convolution (cross-correlation). x: [N, C, *S], "
          "w: [F, C/group, *K], bias: [F]. pads = begins + ends per spatial dim.",
          attrs={"strides": REQUIRED, "dilations": REQUIRED, "pads": REQUIRED, "group": 1}, tolerance="conv")


def _pool_rule(name):
    def rule(ts, kernel, strides, dilations, pads, **_):
        x = ts[0]
        accept(name, x, NUMERIC)
        if x.rank < 3:
            fail(name, f"input {x.shape} must be [N, C, *spatial]")
        return [TensorType(x.dtype, x.shape[:2] + _window_out(name, x.shape[2:], kernel, strides, dilations, pads))]
    return rule


def max_pool(x, kernel, strides, dilations, pads):
    """The running maximum over one strided slice per kernel offset (padding never wins)."""
    out_sp = _out_sp(x.shape[2:], kernel, strides, dilations, pads)
    if x.dtype.kind == "f":
        low = -np.inf
    elif x.dtype.kind == "b":
        low = False
    else:
        low = np.iinfo(x.dtype).min
    if min(out_sp, default=1) <= 0:
        return np.zeros(x.shape[:2] + out_sp, x.dtype)
    xp = _pad_spatial(x, pads, low)
    out = None
    for off in itertools.product(*(range(kk) for kk in kernel)):
        v = xp[np.s_[:, :] + _offset_slices(off, strides, dilations, out_sp)]
        out = v.copy() if out is None else np.maximum(out, v, out=out)
    return out.astype(x.dtype, copy=False)


def window_sums(x, kernel, strides, dilations, pads, count_include_pad):
    """(sum over each window in float64, padding adding 0; the window's divisor: its in-bounds element count,
    or with count_include_pad=1 its size clipped to the padded input) of average pooling."""
    n = x.ndim - 2
    out_sp = _out_sp(x.shape[2:], kernel, strides, dilations, pads)
    padw = [(0, 0), (0, 0)] + [(pads[i], pads[i + n]) for i in range(n)]
    xp = np.pad(x.astype(np.float64), padw)
    axes = tuple(range(2 + n, 2 + 2 * n))
    s = _windows(xp, kernel, strides, dilations, out_sp).sum(axis=axes)
    ones = np.pad(np.ones((1, 1) + x.shape[2:]), padw, constant_values=1 if count_include_pad else 0)
    return s, _windows(ones, kernel, strides, dilations, out_sp).sum(axis=axes)


def avg_pool(x, kernel, strides, dilations, pads, count_include_pad=0):
    s, cnt = window_sums(x, kernel, strides, dilations, pads, count_include_pad)
    return (s / cnt).astype(x.dtype)


WINDOW = {"kernel": REQUIRED, "strides": REQUIRED, "dilations": REQUIRED, "pads": REQUIRED}
primitive("max_pool", "pool", ("x",), NUMERIC, _pool_rule("max_pool"), max_pool,
          "Max over each window; padded positions are ignored (never selected).", attrs=WINDOW,
          tolerance="reduce-exact", quantized="keep")
primitive("avg_pool", "pool", ("x",), FLOATS, _pool_rule("avg_pool"), avg_pool,
          "Mean over each window. count_include_pad=1 divides by the window size clipped to the padded "
          "input; 0 divides by the number of in-bounds elements.", attrs=dict(WINDOW, count_include_pad=0),
          tolerance="pool")
