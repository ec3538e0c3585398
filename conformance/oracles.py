"""Independent oracles: what each primitive must return, written here in plain numpy/Python.

They are used when the backend under test is the reference interpreter itself (comparing the interpreter
with its own kernels would prove nothing). Floats are computed in float64 and rounded once to the result
type; integers in Python's unbounded ints (or uint64, which wraps modulo 2**64) and wrapped to the result
type. Each oracle returns (expected, magnitude): magnitude is the per-element sum of |terms| for the
accumulating families (None elsewhere), which scales their tolerance.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from glow_conformance.storage_formats import numeric_cast as cast  # noqa: F401 (the oracle of Cast)
from glow_conformance.storage_formats import wrap
from glow_core.types import dtype as gdtype

F64 = np.float64


def is_float(dt) -> bool:
    return gdtype(np.dtype(dt)).is_float


def _obj(a):
    return np.asarray(a).astype(object)


def fmap(fn):
    """Unary float oracle: fn in float64, rounded to the input type."""
    def o(x):
        with np.errstate(all="ignore"):
            return np.asarray(fn(x.astype(F64))).astype(x.dtype)
    return o


def _libm(name):
    """The C library's double function ``name`` (Python's math module), elementwise; NaN outside its domain,
    infinities where it overflows (IEEE results, not Python exceptions)."""
    f = getattr(math, name)

    def one(v):
        try:
            return f(v)
        except ValueError:  # poles are infinities; the rest of the domain errors NaN
            if name == "log" and v == 0:
                return -math.inf
            if name == "atanh" and abs(v) == 1:
                return math.copysign(math.inf, v)
            return math.nan
        except OverflowError:
            return math.copysign(math.inf, v) if name == "sinh" else math.inf
    vec = np.vectorize(one, otypes=[F64])
    return lambda x: vec(x) if x.size else x.astype(F64)


def _sigmoid(x):
    """1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) below: a few float64 roundings, no cancellation."""
    e = UNARY["exp"](-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


# float64 math from the C library (not numpy's own SIMD functions, which the interpreter runs): every result
# is computed in float64 and rounded once to the result type
UNARY = {
    "exp": _libm("exp"), "log": _libm("log"), "sqrt": np.sqrt, "reciprocal": lambda x: 1.0 / x,
    "sin": _libm("sin"), "cos": _libm("cos"), "tan": _libm("tan"), "asin": _libm("asin"), "acos": _libm("acos"),
    "atan": _libm("atan"), "sinh": _libm("sinh"), "cosh": _libm("cosh"), "asinh": _libm("asinh"),
    "acosh": _libm("acosh"), "atanh": _libm("atanh"), "tanh": _libm("tanh"),
    "sigmoid": lambda x: _sigmoid(x),
    "erf": _libm("erf"), "floor": np.floor, "ceil": np.ceil, "round": np.rint,
}


def unary(name, x):
    if name in UNARY:
        return fmap(UNARY[name])(x)
    if name in ("neg", "abs", "sign"):
        if is_float(x.dtype):
            return fmap({"neg": np.negative, "abs": np.abs, "sign": np.sign}[name])(x)
        f = {"neg": lambda v: -v, "abs": lambda v: abs(v), "sign": lambda v: (v > 0) - (v < 0)}[name]
        return wrap(np.frompyfunc(f, 1, 1)(_obj(x)), x.dtype)
    if name == "isnan":
        return np.isnan(x.astype(F64))
    if name == "isinf":
        return np.isinf(x.astype(F64))
    if name == "not":
        return ~x.astype(bool)
    if name == "bitwise_not":
        return wrap(np.frompyfunc(lambda v: ~v, 1, 1)(_obj(x)), x.dtype)
    raise KeyError(name)


def _tdiv(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_INT_BIN = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": _tdiv,
    "pow": lambda a, b: a ** b, "max": max, "min": min,
    "bitwise_and": lambda a, b: a & b, "bitwise_or": lambda a, b: a | b, "bitwise_xor": lambda a, b: a ^ b,
}
_FLOAT_BIN = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
              "max": np.maximum, "min": np.minimum}
_CMP = {"eq": np.equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}


#: The elementwise primitives these oracles define (``unary``, ``binary``; select is np.where).
ELEMENTWISE = (frozenset(UNARY) | frozenset(_INT_BIN) | frozenset(_FLOAT_BIN) | frozenset(_CMP)
               | {"neg", "abs", "sign", "isnan", "isinf", "not", "bitwise_not", "and", "or", "xor", "shl", "shr", "mod",
                  "select"})


def binary(name, a, b, fmod=0):
    dt = a.dtype
    if name in _CMP:
        if dt == bool:
            return _CMP[name](a, b)
        if is_float(dt):
            return _CMP[name](a.astype(F64), b.astype(F64))
        return np.asarray(np.frompyfunc(lambda x, y: bool(_CMP[name](x, y)), 2, 1)(_obj(a), _obj(b)),
                          dtype=bool).reshape(a.shape)
    if name in ("and", "or", "xor"):
        return {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[name](a, b)
    bits = dt.itemsize * 8
    if name == "shl":
        return wrap(np.frompyfunc(lambda x, s: (x << s) if s < bits else 0, 2, 1)(_obj(a), _obj(b)), dt)
    if name == "shr":
        return wrap(np.frompyfunc(lambda x, s: (x >> s) if s < bits else 0, 2, 1)(_obj(a), _obj(b)), dt)
    if name == "mod":
        if is_float(dt):
            with np.errstate(all="ignore"):
                return (np.fmod if fmod else np.mod)(a.astype(F64), b.astype(F64)).astype(dt)
        f = (lambda x, y: (abs(x) % abs(y)) * (1 if x >= 0 else -1)) if fmod else (lambda x, y: x % y)
        return wrap(np.frompyfunc(f, 2, 1)(_obj(a), _obj(b)), dt)
    if is_float(dt):
        with np.errstate(all="ignore"):
            return _FLOAT_BIN[name](a.astype(F64), b.astype(F64)).astype(dt)
    return wrap(np.frompyfunc(_INT_BIN[name], 2, 1)(_obj(a), _obj(b)), dt)


def bitcast(x, to):
    return np.ascontiguousarray(x).reshape(-1).view(gdtype(to).np).reshape(x.shape).copy()


def matmul(a, b):
    if is_float(a.dtype):
        e = np.einsum("...ik,...kj->...ij", a.astype(F64), b.astype(F64))
        m = np.einsum("...ik,...kj->...ij", np.abs(a.astype(F64)), np.abs(b.astype(F64)))
        return e.astype(a.dtype), m
    e = np.einsum("...ik,...kj->...ij", a.astype(np.uint64), b.astype(np.uint64))
    return e.astype(a.dtype), None


def _acc(dt):
    return F64 if is_float(dt) else np.uint64


def _pad_with(x, pads, value, acc):
    n = x.ndim - 2
    out = np.full(x.shape[:2] + tuple(x.shape[2 + i] + pads[i] + pads[i + n] for i in range(n)), value, acc)
    out[(slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + x.shape[2 + i]) for i in range(n))] = x
    return out


def _windows(xp, k, strides, dilations):
    n = len(k)
    out_sp = [(xp.shape[2 + i] - ((k[i] - 1) * dilations[i] + 1)) // strides[i] + 1 for i in range(n)]
    for off in itertools.product(*(range(kk) for kk in k)):
        sl = tuple(slice(o * d, o * d + s * (m - 1) + 1, s) for o, d, s, m in zip(off, dilations, strides, out_sp))
        yield off, (slice(None), slice(None)) + sl, out_sp


def conv(x, w, bias, strides, dilations, pads, group=1):
    acc = _acc(x.dtype)
    N, C = x.shape[:2]
    F = w.shape[0]
    cg, fg = C // group, F // group
    xp = _pad_with(x.astype(acc), pads, 0, acc)
    xa = np.abs(xp) if acc == F64 else None
    out = mag = None
    for off, sl, out_sp in _windows(xp, w.shape[2:], strides, dilations):
        if out is None:
            out = np.zeros((N, F) + tuple(out_sp), acc)
            mag = np.zeros_like(out) if acc == F64 else None
        patch = xp[sl]
        for g in range(group):
            wk = w[(slice(g * fg, (g + 1) * fg), slice(None)) + off].astype(acc)
            out[:, g * fg:(g + 1) * fg] += np.einsum("fc,nc...->nf...", wk, patch[:, g * cg:(g + 1) * cg])
            if mag is not None:
                mag[:, g * fg:(g + 1) * fg] += np.einsum("fc,nc...->nf...", np.abs(wk),
                                                         xa[sl][:, g * cg:(g + 1) * cg])
    shape = (1, F) + (1,) * (x.ndim - 2)
    out = out + bias.astype(acc).reshape(shape)
    if mag is not None:
        mag = mag + np.abs(bias.astype(acc)).reshape(shape)
    return out.astype(x.dtype), mag


def _lowest(dt):
    return -np.inf if is_float(dt) else (False if dt == bool else np.iinfo(dt).min)


def max_pool(x, kernel, strides, dilations, pads):
    wide = x.astype(F64) if is_float(x.dtype) else x
    xp = _pad_with(wide, pads, _lowest(x.dtype), wide.dtype)
    out = None
    for _, sl, _ in _windows(xp, kernel, strides, dilations):
        out = xp[sl].copy() if out is None else np.maximum(out, xp[sl])
    return out.astype(x.dtype), None


def avg_pool(x, kernel, strides, dilations, pads, count_include_pad=0):
    xp = _pad_with(x.astype(F64), pads, 0.0, F64)
    ones = _pad_with(np.ones((1, 1) + x.shape[2:]), pads, 1.0 if count_include_pad else 0.0, F64)
    s = m = c = None
    for _, sl, _ in _windows(xp, kernel, strides, dilations):
        if s is None:
            s, m, c = np.zeros_like(xp[sl]), np.zeros_like(xp[sl]), np.zeros_like(ones[sl])
        s += xp[sl]
        m += np.abs(xp[sl])
        c += ones[sl]
    with np.errstate(all="ignore"):
        return (s / c).astype(x.dtype), m / c


def reduce(name, x, axes, keepdims=1):
    ax, kd = tuple(axes), bool(keepdims)
    if name in ("reduce_max", "reduce_min"):
        if x.dtype == bool:
            r = (np.any if name == "reduce_max" else np.all)(x, axis=ax, keepdims=kd)
            return np.asarray(r), None
        wide = x.astype(F64) if is_float(x.dtype) else x
        if name == "reduce_max":
            r = np.max(wide, axis=ax, keepdims=kd, initial=_lowest(x.dtype))
        else:
            hi = np.inf if is_float(x.dtype) else np.iinfo(x.dtype).max
            r = np.min(wide, axis=ax, keepdims=kd, initial=hi)
        return np.asarray(r).astype(x.dtype), None
    acc = _acc(x.dtype)
    f = np.sum if name == "reduce_sum" else np.prod
    r = np.asarray(f(x.astype(acc), axis=ax, keepdims=kd, dtype=acc)).astype(x.dtype)
    mag = np.asarray(np.sum(np.abs(x.astype(F64)), axis=ax, keepdims=kd)) if acc == F64 else None
    return r, mag


def arg(name, x, axis, keepdims=1, select_last_index=0):
    """Index of the largest (smallest) element; ties: the first (the last with select_last_index); a NaN
    wins over every number (the first NaN, or the last)."""
    wide = x.astype(F64) if is_float(x.dtype) else x.astype(object)
    moved = np.moveaxis(wide, axis, -1)
    out = np.zeros(moved.shape[:-1], np.int64)
    for idx in np.ndindex(*moved.shape[:-1]):
        row = list(moved[idx])
        nans = [i for i, v in enumerate(row) if v != v]
        if nans:
            hits = nans
        else:
            best = max(row) if name == "argmax" else min(row)
            hits = [i for i, v in enumerate(row) if v == best]
        out[idx] = hits[-1] if select_last_index else hits[0]
    return (np.expand_dims(out, axis) if keepdims else out), None


def slice_(x, starts, ends, steps):
    idx = [list(range(*slice(s, None if e < 0 else e, st).indices(d))) for s, e, st, d in
           zip(starts, ends, steps, x.shape)]
    return x[np.ix_(*idx)] if x.ndim else x.copy()


def pad(x, pads, value=0.0, interior=None):
    n = x.ndim
    interior = interior or [0] * n
    shape = [pads[i] + pads[i + n] + s + max(s - 1, 0) * interior[i] for i, s in enumerate(x.shape)]
    out = np.full(shape, bool(value) if x.dtype == bool else value).astype(x.dtype)
    if x.size:
        out[np.ix_(*[pads[i] + np.arange(s) * (interior[i] + 1) for i, s in enumerate(x.shape)])] = x
    return out


def gather_nd(x, indices, batch_dims=0):
    k = indices.shape[-1]
    out_shape = indices.shape[:-1] + x.shape[batch_dims + k:]
    out = np.zeros(out_shape, x.dtype)
    for idx in np.ndindex(*indices.shape[:-1]):
        b = idx[:batch_dims]
        out[idx] = x[b + tuple(int(i) for i in indices[idx])]
    return out


def scatter_nd(x, indices, updates, reduction="none"):
    out = x.copy()
    comb = {"add": lambda o, u: o + u, "mul": lambda o, u: o * u, "max": np.maximum, "min": np.minimum}
    for idx in np.ndindex(*indices.shape[:-1]):
        t = tuple(int(i) for i in indices[idx])
        out[t] = updates[idx] if reduction == "none" else comb[reduction](out[t], updates[idx])
    return out
