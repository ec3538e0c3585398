"""Reference kernels: the specification of every primitive, in plain numpy.

One function per primitive, named as the primitive, taking numpy arrays and the
primitive's attributes and returning a new array. They never write into their
inputs. ``run_primitive`` adds the one dtype rule shared by all of them:
float16/bfloat16/float8 operands are computed in float32 and rounded once.
"""
from __future__ import annotations

import itertools
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
        if a.dtype.kind == "u":
            return (a // b).astype(a.dtype)
        # |a| // |b| in uint64 (|int64 min| does not fit int64), negated (wrapping) when the signs differ
        q = np.abs(a.astype(np.int64)).astype(np.uint64) // np.abs(b.astype(np.int64)).astype(np.uint64)
        return np.where((a < 0) != (b < 0), -q, q).astype(np.int64).astype(a.dtype)
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
def cast(x, to, saturate=1, round_mode="up"):
    """The `cast` primitive (semantics in glow_core/ops/primitives.py); matches ONNX's reference Cast."""
    from glow_core.types import dtype
    src, dst = dtype(x.dtype), dtype(to)
    t = dst.np
    if src == dst and not (saturate and dst.name in _FLOAT8):  # float8e5m2 saturates its own infinities
        return x.copy()
    if dst.is_bool:
        return _cast_wide(x, src) != 0
    if src.is_bool:
        x, src = x.astype(np.uint8), dtype("uint8")
    if dst.is_int:
        if src.is_int:  # wraps (two's complement); through int64 so that ml_dtypes' int4/int2 wrap too
            return x.astype(np.int64).astype(t) if src.itemsize < 8 or dst.itemsize < 8 else x.astype(t)
        # Float to integer truncates toward zero; NaN gives 0; out-of-range wraps (64-bit targets clamp).
        y = np.trunc(x.astype(np.float64))
        y = np.where(np.isnan(y), 0.0, y)
        if dst.name == "uint64":
            return np.clip(y, 0.0, np.nextafter(2.0 ** 64, 0)).astype(t)
        return np.clip(y, -2.0 ** 63, np.nextafter(2.0 ** 63, 0)).astype(np.int64).astype(t)
    # dst is a float type
    if dst.name == "float8e8m0":
        return _to_e8m0(_cast_wide(x, src).astype(np.float64), saturate, round_mode)
    if src.name == "float8e8m0" or (src.np not in _NP_FLOATS and t not in _NP_FLOATS):
        # between two ml_dtypes types: through float32 (exact for <= 16-bit floats) or float64 (integers)
        x = x.astype(np.float32) if src.is_float and src.itemsize <= 2 else x.astype(np.float64)
    if dst.name in _FLOAT8 and saturate:
        fi = ml_dtypes.finfo(t)
        x = np.clip(x.astype(np.float64 if x.dtype == np.float64 else np.float32), float(fi.min), float(fi.max))
    if x.dtype == np.float64 and t not in _NP_FLOATS:
        x = _to_f32_odd(x)  # ml_dtypes goes through float32: round to odd first, so that it rounds only once
    if dst.name in ("float4e2m1", "float6e2m3", "float6e3m2"):  # no NaN in these: NaN gives the largest value
        x = np.where(np.isnan(x), float(ml_dtypes.finfo(t).max), x).astype(x.dtype)
    return x.astype(t)


_NP_FLOATS = {np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)}


def _to_f32_odd(x):
    """float64 -> float32 rounding to odd (truncate, then set the last bit when inexact): rounding that again to
    any format of at most 22 significant bits gives the correctly rounded float64 value."""
    with np.errstate(all="ignore"):
        y = x.astype(np.float32)
        over = np.abs(y.astype(np.float64)) > np.abs(x)
        y = np.where(over & np.isfinite(x), np.nextafter(y, np.float32(0)), y).astype(np.float32)
        inexact = np.isfinite(x) & (y.astype(np.float64) != x)
        return np.where(inexact, (y.view(np.uint32) | np.uint32(1)).view(np.float32), y)
_FLOAT8 = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")


def _cast_wide(x, src):
    """x as float64 (floats) or int64 (integers), for exact comparisons and re-rounding."""
    if src.is_float:
        return x.astype(np.float32 if src.itemsize <= 2 else np.float64)
    return x.astype(np.int64) if src.kind != "uint" or src.itemsize < 8 else x


def _to_e8m0(xf, saturate, round_mode):
    """float64 -> float8e8m0 (a power of two, 2**(code - 127); 0xFF is NaN), by ONNX's Cast table: the
    exponent of |x| rounds per `round_mode` (up: away from zero, down: towards zero, nearest: the nearer power,
    ties up); above 2**127 or below 2**-127 (0 included) gives the largest or smallest code when saturate=1,
    NaN otherwise; +inf gives the largest code when saturate=1, NaN otherwise; NaN gives NaN."""
    if round_mode not in ("up", "down", "nearest"):
        raise GlowError(f"cast: round_mode {round_mode!r} is not supported; accepted: up, down, nearest")
    x = np.abs(xf.astype(np.float64))  # exact: float32 subnormals become normal float64 values
    m, e = np.frexp(np.where(np.isfinite(x) & (x > 0), x, 1.0))  # x = m * 2**e, 0.5 <= m < 1
    e = e.astype(np.int64) - 1
    if round_mode == "up":
        e += m != 0.5
    elif round_mode == "nearest":
        e += m >= 0.75
    low, high = (0, 254) if saturate else (255, 255)
    code = np.where(e > 127, high, np.where(e < -127, low, e + 127))
    code = np.where(x == 0, low, code)
    code = np.where(np.isinf(x), 254 if saturate else 255, code)
    code = np.where(np.isnan(x), 255, code)
    return code.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)


def bitcast(x, to):
    from glow_core.types import dtype
    return np.ascontiguousarray(x).view(dtype(to).np).reshape(x.shape).copy()  # ascontiguousarray makes 0-d 1-d


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


def max_pool(x, kernel, strides, dilations, pads):
    """The running maximum over one strided slice per kernel offset (padding never wins)."""
    n = x.ndim - 2
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


#: Primitives that only move or reinterpret data: computed in the operands' own dtype.
_NO_UPCAST = {"cast", "bitcast", "reshape", "transpose", "broadcast", "slice", "concat", "pad", "gather",
              "gather_nd", "scatter_nd", "select", "copy"}


def bind_primitive(name: str, attrs: dict, in_dtypes, out_dtypes):
    """A callable running primitive ``name`` with fixed attributes on arrays of ``in_dtypes``.

    The one dtype rule shared by all kernels: low-precision float operands (float16, bfloat16, float8) are
    computed in float32 and the results rounded once to ``out_dtypes``.
    """
    fn = KERNELS[name]
    upcast = name not in _NO_UPCAST and any(np.dtype(d) in _LOW_FLOATS for d in in_dtypes)
    out_dtypes = [np.dtype(d) for d in out_dtypes]

    def run(*arrays):
        if upcast:
            arrays = [a.astype(np.float32) if a.dtype in _LOW_FLOATS else a for a in arrays]
        out = fn(*arrays, **attrs)
        outs = out if isinstance(out, tuple) else (out,)
        return [o if o.dtype == d else o.astype(d) for o, d in zip(map(np.asarray, outs), out_dtypes)]
    return run


def run_primitive(name: str, arrays: list[np.ndarray], attrs: dict, out_dtypes=None) -> list[np.ndarray]:
    """Run primitive ``name`` once (see ``bind_primitive``); ``out_dtypes`` defaults to the kernel's own."""
    with np.errstate(all="ignore"):
        if out_dtypes is None:
            out = KERNELS[name](*[a.astype(np.float32) if (a.dtype in _LOW_FLOATS and name not in _NO_UPCAST)
                                  else a for a in arrays], **attrs)
            return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]
        return bind_primitive(name, attrs, [a.dtype for a in arrays], out_dtypes)(*arrays)


def copy(x):
    return np.array(x, copy=True)


KERNELS["copy"] = copy
