"""Reference kernels: the specification of every primitive, in plain numpy.

One function per primitive, named as the primitive, taking numpy arrays and the
primitive's attributes and returning a new array. They never write into their
inputs. ``run_primitive`` adds the one dtype rule shared by all of them:
float16/bfloat16/float8 operands are computed in float32 and rounded once.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from glow_core.errors import GlowError

_LOW_FLOATS = {np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(ml_dtypes.float8_e4m3fn),
               np.dtype(ml_dtypes.float8_e4m3fnuz), np.dtype(ml_dtypes.float8_e5m2),
               np.dtype(ml_dtypes.float8_e5m2fnuz), np.dtype(ml_dtypes.float4_e2m1fn)}

# -- elementwise unary ---------------------------------------------------------------------------
neg = np.negative
abs = np.abs  # noqa: A001
exp = np.exp
log = np.log
sqrt = np.sqrt
reciprocal = np.reciprocal
sin, cos, tan = np.sin, np.cos, np.tan
asin, acos, atan = np.arcsin, np.arccos, np.arctan
sinh, cosh, tanh = np.sinh, np.cosh, np.tanh
asinh, acosh, atanh = np.arcsinh, np.arccosh, np.arctanh
floor, ceil = np.floor, np.ceil
round = np.round  # noqa: A001  (numpy rounds half to even)
isnan, isinf = np.isnan, np.isinf
bitwise_not = np.invert


def sign(x):
    return np.sign(x)


def sigmoid(x):
    # Split by sign so that exp never overflows.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x):
    return _erf(x).astype(x.dtype) if x.size else x.copy()


def not_(x):
    return np.logical_not(x)


# -- elementwise binary ---------------------------------------------------------------------------
add, sub, mul = np.add, np.subtract, np.multiply
maximum, minimum = np.maximum, np.minimum
bitwise_and, bitwise_or, bitwise_xor = np.bitwise_and, np.bitwise_or, np.bitwise_xor
eq, lt, le, gt, ge = np.equal, np.less, np.less_equal, np.greater, np.greater_equal


def div(a, b):
    if a.dtype.kind in "iu":
        if np.any(b == 0):
            raise GlowError("div: integer division by zero")
        q = np.abs(a.astype(np.int64) if a.dtype.kind == "i" else a) // np.abs(
            b.astype(np.int64) if a.dtype.kind == "i" else b)
        return (np.sign(a) * np.sign(b) * q).astype(a.dtype) if a.dtype.kind == "i" else q.astype(a.dtype)
    return np.divide(a, b)


def mod(a, b, fmod=0):
    if a.dtype.kind in "iu" and np.any(b == 0):
        raise GlowError("mod: integer remainder by zero")
    return np.fmod(a, b) if fmod else np.mod(a, b)


def pow(a, b):  # noqa: A001
    if a.dtype.kind in "iu":
        return np.power(a.astype(np.int64), np.abs(b.astype(np.int64))).astype(a.dtype)
    return np.power(a, b)


def and_(a, b):
    return np.logical_and(a, b)


def or_(a, b):
    return np.logical_or(a, b)


def xor(a, b):
    return np.logical_xor(a, b)


def _shift(a, b, left):
    bits = a.dtype.itemsize * 8
    big = b >= bits
    bs = np.where(big, 0, b).astype(a.dtype)
    r = np.left_shift(a, bs) if left else np.right_shift(a, bs)
    return np.where(big, np.zeros_like(a), r).astype(a.dtype)


def shl(a, b):
    return _shift(a, b, True)


def shr(a, b):
    return _shift(a, b, False)


def select(cond, a, b):
    return np.where(cond, a, b)


# -- casts -----------------------------------------------------------------------------------------
def cast(x, to, saturate=1):
    from glow_core.types import dtype
    t = dtype(to).np
    src = x.dtype
    if t == np.bool_:
        return x.astype(np.float32 if src in _LOW_FLOATS else src) != 0
    if src in _LOW_FLOATS and t.kind in "iu":
        x = x.astype(np.float32)
        src = x.dtype
    if src.kind == "f" and t.kind in "iu":
        # Float to integer truncates toward zero; NaN/inf/out-of-range are undefined, map them to 0/limits.
        info = np.iinfo(t)
        with np.errstate(invalid="ignore"):
            y = np.trunc(x.astype(np.float64))
            y = np.where(np.isnan(y), 0, np.clip(y, info.min, info.max))
        return y.astype(t)
    if t in _LOW_FLOATS and t not in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        xf = x.astype(np.float32)
        if saturate:
            fi = ml_dtypes.finfo(t)
            xf = np.where(np.isinf(xf), np.sign(xf) * float(fi.max), xf)
            xf = np.clip(xf, float(fi.min), float(fi.max))
            xf = np.where(np.isnan(x.astype(np.float32)), np.float32("nan"), xf)
        return xf.astype(t)
    if src.kind in "iu" and t in _LOW_FLOATS:
        return x.astype(np.float64).astype(t)
    return x.astype(t)


def bitcast(x, to):
    from glow_core.types import dtype
    return np.ascontiguousarray(x).view(dtype(to).np)


# -- matmul / windows -----------------------------------------------------------------------------
def matmul(a, b):
    if a.dtype.kind in "iu":
        return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(a.dtype)
    return np.matmul(a, b)


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


def conv(x, w, bias, strides, dilations, pads, group=1):
    n = x.ndim - 2
    k = w.shape[2:]
    out_sp = _out_sp(x.shape[2:], k, strides, dilations, pads)
    acc = np.int64 if x.dtype.kind in "iu" else x.dtype
    xp = np.pad(x.astype(acc), [(0, 0), (0, 0)] + [(pads[i], pads[i + n]) for i in range(n)])
    win = _windows(xp, k, strides, dilations, out_sp)  # [N, C, *out, *k]
    N, C = x.shape[:2]
    F = w.shape[0]
    cg, fg = C // group, F // group
    outs = []
    for g in range(group):
        wg = win[:, g * cg:(g + 1) * cg]
        ww = w[g * fg:(g + 1) * fg].astype(acc)
        # contract over C and kernel dims
        wa = list(range(2 + n, 2 + 2 * n))
        r = np.tensordot(wg, ww, axes=([1] + wa, [1] + list(range(2, 2 + n))))  # [N, *out, fg]
        outs.append(np.moveaxis(r, -1, 1))
    y = np.concatenate(outs, axis=1) + bias.astype(acc).reshape((1, F) + (1,) * n)
    return y.astype(x.dtype)


def max_pool(x, kernel, strides, dilations, pads):
    n = x.ndim - 2
    out_sp = _out_sp(x.shape[2:], kernel, strides, dilations, pads)
    if x.dtype.kind == "f":
        low = -np.inf
    elif x.dtype.kind == "b":
        low = False
    else:
        low = np.iinfo(x.dtype).min
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + n]) for i in range(n)], constant_values=low)
    win = _windows(xp, kernel, strides, dilations, out_sp)
    return win.max(axis=tuple(range(2 + n, 2 + 2 * n))).astype(x.dtype)


def avg_pool(x, kernel, strides, dilations, pads, count_include_pad=0):
    n = x.ndim - 2
    out_sp = _out_sp(x.shape[2:], kernel, strides, dilations, pads)
    padw = [(0, 0), (0, 0)] + [(pads[i], pads[i + n]) for i in range(n)]
    xp = np.pad(x.astype(np.float64), padw)
    axes = tuple(range(2 + n, 2 + 2 * n))
    s = _windows(xp, kernel, strides, dilations, out_sp).sum(axis=axes)
    ones = np.pad(np.ones((1, 1) + x.shape[2:]), padw, constant_values=1 if count_include_pad else 0)
    cnt = _windows(ones, kernel, strides, dilations, out_sp).sum(axis=axes)
    return (s / cnt).astype(x.dtype)


# -- reductions -----------------------------------------------------------------------------------
def reduce_sum(x, axes, keepdims=1):
    return np.sum(x, axis=tuple(axes), keepdims=bool(keepdims), dtype=x.dtype)


def reduce_prod(x, axes, keepdims=1):
    return np.prod(x, axis=tuple(axes), keepdims=bool(keepdims), dtype=x.dtype)


def _lowest(dt):
    return -np.inf if dt.kind == "f" else (False if dt.kind == "b" else np.iinfo(dt).min)


def reduce_max(x, axes, keepdims=1):
    return np.max(x, axis=tuple(axes), keepdims=bool(keepdims), initial=_lowest(x.dtype))


def reduce_min(x, axes, keepdims=1):
    hi = np.inf if x.dtype.kind == "f" else (True if x.dtype.kind == "b" else np.iinfo(x.dtype).max)
    return np.min(x, axis=tuple(axes), keepdims=bool(keepdims), initial=hi)


def _arg(x, axis, keepdims, select_last_index, fn):
    if select_last_index:
        x = np.flip(x, axis)
    r = fn(x, axis=axis)
    if select_last_index:
        r = x.shape[axis] - 1 - r
    r = r.astype(np.int64)
    return np.expand_dims(r, axis) if keepdims else r


def argmax(x, axis, keepdims=1, select_last_index=0):
    return _arg(x, axis, keepdims, select_last_index, np.argmax)


def argmin(x, axis, keepdims=1, select_last_index=0):
    return _arg(x, axis, keepdims, select_last_index, np.argmin)


# -- data movement ----------------------------------------------------------------------------------
def reshape(x, shape):
    return x.reshape(shape)


def transpose(x, perm):
    return np.transpose(x, perm)


def broadcast(x, shape):
    return np.broadcast_to(x, tuple(shape))


def slice(x, starts, ends, steps):  # noqa: A001
    return x[tuple(np.s_[s:(e if e >= 0 else None):st] for s, e, st in zip(starts, ends, steps))]


def concat(*xs, axis):
    return np.concatenate(xs, axis=axis)


def pad(x, pads, value=0.0, interior=None):
    n = x.ndim
    interior = interior or [0] * n
    shape = [pads[i] + pads[i + n] + s + max(s - 1, 0) * interior[i] for i, s in enumerate(x.shape)]
    out = np.full(shape, value, dtype=x.dtype) if x.dtype.kind != "b" else np.full(shape, bool(value))
    idx = tuple(np.s_[pads[i]:pads[i] + max(s - 1, 0) * (interior[i] + 1) + 1:interior[i] + 1] if s else np.s_[0:0]
                for i, s in enumerate(x.shape))
    out[idx] = x
    return out


def _check_indices(name, idx, dim):
    if idx.size and (idx.min() < 0 or idx.max() >= dim):
        raise GlowError(f"{name}: index out of range [0, {dim}): found {int(idx.min())}..{int(idx.max())}")


def gather(x, indices, axis):
    _check_indices("gather", indices, x.shape[axis])
    return np.take(x, indices, axis=axis)


def gather_nd(x, indices, batch_dims=0):
    k = indices.shape[-1]
    bshape = x.shape[:batch_dims]
    nb = int(np.prod(bshape)) if batch_dims else 1
    xb = x.reshape((nb,) + x.shape[batch_dims:])
    ib = indices.reshape((nb, -1, k))
    for j in range(k):
        _check_indices("gather_nd", ib[..., j], x.shape[batch_dims + j])
    out = np.stack([xb[b][tuple(ib[b].T)] for b in range(nb)]) if nb else np.zeros((0,), x.dtype)
    return out.reshape(indices.shape[:-1] + x.shape[batch_dims + k:])


def scatter_nd(x, indices, updates, reduction="none"):
    out = x.copy()
    k = indices.shape[-1]
    idx = indices.reshape(-1, k)
    upd = updates.reshape((idx.shape[0],) + x.shape[k:])
    for j in range(k):
        _check_indices("scatter_nd", idx[:, j], x.shape[j])
    for i in range(idx.shape[0]):
        t = tuple(idx[i])
        if reduction == "none":
            out[t] = upd[i]
        elif reduction == "add":
            out[t] = out[t] + upd[i]
        elif reduction == "mul":
            out[t] = out[t] * upd[i]
        elif reduction == "max":
            out[t] = np.maximum(out[t], upd[i])
        elif reduction == "min":
            out[t] = np.minimum(out[t], upd[i])
        else:
            raise GlowError(f"scatter_nd: unknown reduction {reduction!r}; accepted: none, add, mul, max, min")
    return out


KERNELS = {name: fn for name, fn in globals().items() if callable(fn) and not name.startswith("_")}
KERNELS.update({"max": maximum, "min": minimum, "not": not_, "and": and_, "or": or_})
for _k in ("maximum", "minimum", "not_", "and_", "or_", "GlowError", "math", "np", "ml_dtypes"):
    KERNELS.pop(_k, None)


def run_primitive(name: str, arrays: list[np.ndarray], attrs: dict, out_dtypes=None) -> list[np.ndarray]:
    """Run primitive ``name``: low-precision floats are computed in float32, results cast to ``out_dtypes``."""
    fn = KERNELS[name]
    if name not in ("cast", "bitcast", "reshape", "transpose", "broadcast", "slice", "concat", "pad", "gather",
                    "gather_nd", "scatter_nd", "select"):
        arrays = [a.astype(np.float32) if a.dtype in _LOW_FLOATS else a for a in arrays]
    with np.errstate(all="ignore"):
        out = fn(*arrays, **attrs)
    outs = list(out) if isinstance(out, tuple) else [out]
    if out_dtypes is not None:
        outs = [np.asarray(o).astype(d, copy=False) if np.asarray(o).dtype != d else np.asarray(o)
                for o, d in zip(outs, out_dtypes)]
    return [np.asarray(o) for o in outs]


def copy(x):
    return np.array(x, copy=True)


KERNELS["copy"] = copy
