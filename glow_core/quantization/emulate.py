"""Quantized primitives a backend refuses, computed with the primitives it has.

A backend without int8 kernels still runs a quantized model: ``emulate`` replaces each ``quantize``,
``dequantize``, ``rescale``, ``qconv`` and ``qmatmul`` node the backend refuses by integer and float32 primitives
that compute exactly what the quantized primitive's reference kernel computes (the same roundings in the same
order; ``requant="fixed_point"`` in int64 integer primitives), and folds the dequantization of constant weights that nothing fused.
"""
from __future__ import annotations

import numpy as np

from ..builder import Builder
from ..errors import UnsupportedOpError
from ..graph import Function
from ..ops.primitives.quantized import (ACC, fixed_point_multipliers, multiplier, multipliers, qrange,
                                        real_multiplier)


def _requantize(b: Builder, acc, m, out_offset, out_dtype, clamp_min=None, clamp_max=None):
    """saturate(rint(float32(acc) * m) + out_offset) as out_dtype (m: a float32 constant broadcastable to acc)."""
    lo, hi = qrange(out_dtype)
    lo = lo if clamp_min is None else max(lo, int(clamp_min))
    hi = hi if clamp_max is None else min(hi, int(clamp_max))
    y = b.round(b.binary("mul", b.cast_(acc, "float32"), b.const(np.asarray(m, np.float32))))
    y = b.binary("add", b.cast_(y, "float64"), b.const(np.float64(out_offset)))
    y = b.binary("min", b.binary("max", y, b.const(np.float64(lo))), b.const(np.float64(hi)))
    return b.cast_(y, out_dtype)


def _requantize_fixed(b: Builder, acc, reals, out_offset, out_dtype, clamp_min=None, clamp_max=None):
    """saturate(apply_scale(acc, m, shift) + out_offset) in int64 primitives, (m, shift) from the real multipliers
    ``reals`` (an array broadcastable to acc): (acc * m + 2^(shift-1)) >> shift is t - mod(t, 2^shift) divided
    exactly by 2^shift (mod with the divisor's sign: floor division)."""
    lo, hi = qrange(out_dtype)
    lo = lo if clamp_min is None else max(lo, int(clamp_min))
    hi = hi if clamp_max is None else min(hi, int(clamp_max))
    m, sh = fixed_point_multipliers(reals)
    pow2 = b.const(np.left_shift(np.int64(1), sh))
    t = b.binary("add", b.binary("mul", b.cast_(acc, "int64"), b.const(m)),
                 b.const(np.left_shift(np.int64(1), sh - 1)))
    y = b.binary("div", b.binary("sub", t, b.binary("mod", t, pow2)), pow2)
    y = b.binary("add", y, b.const(np.int64(out_offset)))
    y = b.binary("min", b.binary("max", y, b.const(np.int64(lo))), b.const(np.int64(hi)))
    return b.cast_(y, out_dtype)


def _shifted(b: Builder, x, offset, wide, shape=()):
    """x - offset in the integer type ``wide`` (offset: a constant, reshaped to ``shape``)."""
    return b.binary("sub", b.cast_(x, wide), b.reshape_(b.cast_(offset, wide), shape) if not isinstance(
        offset, (int, np.integer)) else b.const(np.asarray(offset, np.dtype(wide))))


def _scales(v, n: int, op: str) -> np.ndarray:
    """The constant weight scales of an emulated ``op`` as n values (a computed scale cannot be emulated)."""
    if v.const is None:
        raise UnsupportedOpError(f"{op}: the weight scales are computed at run time; emulating {op} in float needs "
                                 "them constant (an initializer or a value folded at compile time)")
    return np.broadcast_to(v.const, (n,))


def quantize(b, x, scale, offset, dtype):
    lo, hi = qrange(dtype)
    y = b.round(b.binary("div", x, b.const(np.float32(scale))))
    y = b.binary("add", b.cast_(y, "float64"), b.const(np.float64(offset)))
    return b.cast_(b.binary("min", b.binary("max", y, b.const(np.float64(lo))), b.const(np.float64(hi))), dtype)


def dequantize(b, q, scale, offset, axis):
    shape = tuple(scale.shape[0] if i == axis else 1 for i in range(q.rank)) if scale.shape[0] > 1 else ()
    diff = _shifted(b, q, offset, "int64", shape)
    return b.binary("mul", b.cast_(diff, "float32"), b.reshape_(scale, shape))


def rescale(b, x, in_scale, in_offset, out_scale, out_offset, out_dtype, requant="float32"):
    if requant == "fixed_point":
        return _requantize_fixed(b, _shifted(b, x, int(in_offset), "int32"),
                                 np.float64(real_multiplier(in_scale, out_scale=out_scale)), out_offset, out_dtype)
    return _requantize(b, _shifted(b, x, int(in_offset), "int32"), multiplier(in_scale, out_scale=out_scale),
                       out_offset, out_dtype)


def _reals(x_scale, scales, out_scale) -> np.ndarray:
    return np.array([real_multiplier(x_scale, s, out_scale=out_scale) for s in scales], np.float64)


def qconv(b, x, w, bias, w_scale, w_offset, strides, dilations, pads, group, x_scale, x_offset, out_scale,
          out_offset, out_dtype, clamp_min=None, clamp_max=None, requant="float32"):
    acc_t = ACC[x.dtype.name]
    wshape = (-1,) + (1,) * (w.rank - 1)
    wo = w_offset if w_offset.shape[0] == w.shape[0] else b.broadcast_to(w_offset, (w.shape[0],))
    acc = b.conv(_shifted(b, x, int(x_offset), acc_t), _shifted(b, w, wo, acc_t, (w.shape[0],) + wshape[1:]),
                 b.cast_(bias, acc_t), strides=strides, dilations=dilations, pads=pads, group=group)
    if out_dtype == acc_t:
        return acc
    if requant == "fixed_point":
        reals = _reals(x_scale, _scales(w_scale, w.shape[0], "qconv"), out_scale)
        return _requantize_fixed(b, acc, reals.reshape((1, -1) + (1,) * (x.rank - 2)), out_offset, out_dtype,
                                 clamp_min, clamp_max)
    m = multipliers(x_scale, _scales(w_scale, w.shape[0], "qconv"), out_scale)
    return _requantize(b, acc, m.reshape((1, -1) + (1,) * (x.rank - 2)), out_offset, out_dtype, clamp_min,
                       clamp_max)


def qmatmul(b, a, bm, bias, b_scale, b_offset, a_scale, a_offset, out_scale, out_offset, out_dtype, clamp_min=None,
            clamp_max=None, requant="float32"):
    acc_t = ACC[a.dtype.name]
    n = bm.shape[-1]
    acc = b.matmul(_shifted(b, a, int(a_offset), acc_t), _shifted(b, bm, b_offset, acc_t, (n,) if b_offset.shape[0]
                                                                    > 1 else ()))
    acc = b.binary("add", acc, b.cast_(bias, acc_t))
    if out_dtype == acc_t:
        return acc
    if requant == "fixed_point":
        return _requantize_fixed(b, acc, _reals(a_scale, _scales(b_scale, n, "qmatmul"), out_scale), out_offset,
                                 out_dtype, clamp_min, clamp_max)
    return _requantize(b, acc, multipliers(a_scale, _scales(b_scale, n, "qmatmul"), out_scale), out_offset,
                       out_dtype, clamp_min, clamp_max)


EMULATIONS = {"quantize": quantize, "dequantize": dequantize, "rescale": rescale, "qconv": qconv,
              "qmatmul": qmatmul}


def emulate(fn: Function, ask) -> list[tuple[str, str, str]]:
    """Replace the quantized nodes ``ask`` refuses (see module doc); returns (node, op, reason) of each.
    A dequantization of constants becomes a constant whether or not the backend runs it."""
    done = []
    old = fn.nodes
    fn.nodes = []
    replace = {}
    for n in old:
        n.inputs = [None if v is None else replace.get(v.id, v) for v in n.inputs]
        const = n.op == "dequantize" and all(v.is_const for v in n.inputs)
        why = None if const else (ask(n) if n.op in EMULATIONS else None)
        if not const and why is None:
            fn.nodes.append(n)
            continue
        attrs = {k: a for k, a in n.attrs.items() if not k.startswith("_")}
        b = Builder(fn, where=f"node '{n.name}' ({n.op})", fold=True, name=n.name)
        start = len(fn.nodes)
        out = EMULATIONS[n.op](b, *n.inputs, **attrs)
        for m in fn.nodes[start:]:
            m.origin = n.source
        replace[n.outputs[0].id] = out
        if not const:
            done.append((n.source[0], n.op, why))
    fn.outputs = [replace.get(v.id, v) for v in fn.outputs]
    return done
