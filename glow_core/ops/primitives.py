"""The primitive set: every backend implements exactly these.

Each ``primitive(...)`` call below is the single definition of one primitive:
its inputs, attributes (with defaults), accepted dtypes, shape/dtype rule and
documentation. The reference semantics are the numpy kernels of the same name
in ``glow_interpreter.kernels``; ``vendor_guide/primitives.md`` is generated
from this file.

Conventions every primitive follows:
- elementwise primitives take operands of identical shape and dtype (the
  lowering inserts ``broadcast`` explicitly);
- axes are non-negative and sorted; shapes and attributes are static;
- floating-point arithmetic on float16/bfloat16 is computed in float32 and
  rounded once to the result type.
"""
from __future__ import annotations

from math import prod

from ..errors import ShapeError
from ..types import ALL, FLOATS, INTS, NUMERIC, SIGNED, UNSIGNED, TensorType, dtype
from .registry import REQUIRED, primitive

BOOL = ("bool",)


def _err(name, msg):
    raise ShapeError(f"primitive '{name}': {msg}")


def _accept(name, t: TensorType, allowed):
    if t.dtype.name not in allowed:
        _err(name, f"dtype {t.dtype.name} is not accepted; accepted: {', '.join(allowed)}")


def _same(name, types):
    first = types[0]
    for t in types[1:]:
        if t.shape != first.shape or t.dtype != first.dtype:
            _err(name, f"operands must have identical type, got {', '.join(str(x) for x in types)}")


def _unary(name, allowed, out=None):
    def infer(ts):
        _accept(name, ts[0], allowed)
        return [TensorType(out or ts[0].dtype, ts[0].shape)]
    return infer


def _binary(name, allowed, out=None):
    def infer(ts):
        _same(name, ts)
        _accept(name, ts[0], allowed)
        return [TensorType(out or ts[0].dtype, ts[0].shape)]
    return infer


UNARY = {
    # name: (accepted dtypes, output dtype or None, doc)
    "neg": (NUMERIC, None, "Negation, -x (wraps for the most negative integer)."),
    "abs": (NUMERIC, None, "Absolute value |x| (wraps for the most negative integer)."),
    "sign": (NUMERIC, None, "-1, 0 or 1 by the sign of x; NaN stays NaN."),
    "exp": (FLOATS, None, "e**x."),
    "log": (FLOATS, None, "Natural logarithm; log(0) = -inf, log(x<0) = NaN."),
    "sqrt": (FLOATS, None, "Square root; sqrt(x<0) = NaN."),
    "reciprocal": (FLOATS, None, "1/x."),
    "sin": (FLOATS, None, "Sine."), "cos": (FLOATS, None, "Cosine."), "tan": (FLOATS, None, "Tangent."),
    "asin": (FLOATS, None, "Arc sine."), "acos": (FLOATS, None, "Arc cosine."),
    "atan": (FLOATS, None, "Arc tangent."), "sinh": (FLOATS, None, "Hyperbolic sine."),
    "cosh": (FLOATS, None, "Hyperbolic cosine."), "asinh": (FLOATS, None, "Inverse hyperbolic sine."),
    "acosh": (FLOATS, None, "Inverse hyperbolic cosine."), "atanh": (FLOATS, None, "Inverse hyperbolic tangent."),
    "tanh": (FLOATS, None, "Hyperbolic tangent."),
    "sigmoid": (FLOATS, None, "Logistic function 1/(1+exp(-x))."),
    "erf": (FLOATS, None, "Gauss error function."),
    "floor": (FLOATS, None, "Round toward -inf."), "ceil": (FLOATS, None, "Round toward +inf."),
    "round": (FLOATS, None, "Round to nearest, ties to even (IEEE roundTiesToEven)."),
    "isnan": (FLOATS, "bool", "True where x is NaN."),
    "isinf": (FLOATS, "bool", "True where x is +inf or -inf."),
    "not": (BOOL, None, "Logical negation."),
    "bitwise_not": (INTS, None, "Bitwise complement."),
}
for _n, (_dt, _out, _doc) in UNARY.items():
    primitive(_n, "elementwise", ("x",), _dt, _unary(_n, _dt, _out), _doc)

BINARY = {
    "add": (NUMERIC, None, "a + b (integers wrap)."),
    "sub": (NUMERIC, None, "a - b (integers wrap)."),
    "mul": (NUMERIC, None, "a * b (integers wrap)."),
    "div": (NUMERIC, None, "a / b; integer division truncates toward zero; division by zero is undefined "
                           "for integers."),
    "pow": (NUMERIC, None, "a ** b."),
    "max": (NUMERIC, None, "Elementwise maximum; NaN if either operand is NaN."),
    "min": (NUMERIC, None, "Elementwise minimum; NaN if either operand is NaN."),
    "and": (BOOL, None, "Logical and."), "or": (BOOL, None, "Logical or."), "xor": (BOOL, None, "Logical xor."),
    "bitwise_and": (INTS, None, "Bitwise and."), "bitwise_or": (INTS, None, "Bitwise or."),
    "bitwise_xor": (INTS, None, "Bitwise xor."),
    "shl": (UNSIGNED, None, "a << b; shifts of the bit width or more give 0."),
    "shr": (UNSIGNED, None, "a >> b (logical); shifts of the bit width or more give 0."),
    "eq": (NUMERIC + BOOL, "bool", "a == b."),
    "lt": (NUMERIC, "bool", "a < b."), "le": (NUMERIC, "bool", "a <= b."),
    "gt": (NUMERIC, "bool", "a > b."), "ge": (NUMERIC, "bool", "a >= b."),
}
for _n, (_dt, _out, _doc) in BINARY.items():
    primitive(_n, "elementwise", ("a", "b"), _dt, _binary(_n, _dt, _out), _doc)

primitive("mod", "elementwise", ("a", "b"), NUMERIC, lambda ts, fmod: _binary("mod", NUMERIC)(ts),
          "Remainder. fmod=0: the sign of the divisor (Python %); fmod=1: the sign of the dividend (C fmod). "
          "Integer remainder by zero is undefined.", attrs={"fmod": 0})


def _select(ts):
    c, a, b = ts
    _accept("select", c, BOOL)
    _same("select", [a, b])
    if c.shape != a.shape:
        _err("select", f"condition shape {c.shape} must equal operand shape {a.shape}")
    return [a]


primitive("select", "elementwise", ("cond", "a", "b"), BOOL, _select, "cond ? a : b, elementwise.")


def _cast(ts, to, saturate, round_mode):
    if round_mode not in ("up", "down", "nearest"):
        _err("cast", f"round_mode {round_mode!r} is not accepted; accepted: up, down, nearest")
    return [TensorType(dtype(to), ts[0].shape)]


primitive("cast", "cast", ("x",), ALL, _cast,
          "Convert to dtype `to`, rounding to nearest-even for float targets. Float to integer truncates "
          "toward zero, NaN gives 0, out-of-range values wrap (64-bit targets clamp); integer to integer "
          "wraps (two's complement); to bool is x != 0; from bool gives 0/1. To the float8 types "
          "(e4m3fn, e4m3fnuz, e5m2, e5m2fnuz) saturate=1 clamps to the finite range (inf too; NaN stays "
          "NaN), saturate=0 overflows to inf or NaN. float4e2m1/float6 have no inf or NaN: out-of-range "
          "values clamp and NaN gives the largest value (ONNX's float4 table). "
          "To float8e8m0 (a power of two) the exponent rounds by `round_mode` (up, down, nearest); beyond "
          "2**127 or below 2**-127 (0 too) saturate=1 stops at the largest or smallest value and saturate=0 "
          "gives NaN; inf gives the largest value when saturating, else NaN; NaN gives NaN (negative values "
          "are undefined).",
          attrs={"to": REQUIRED, "saturate": 1, "round_mode": "up"})


def _bitcast(ts, to):
    t = dtype(to)
    if t.itemsize != ts[0].dtype.itemsize:
        _err("bitcast", f"cannot reinterpret {ts[0].dtype} as {t}: element sizes differ")
    return [TensorType(t, ts[0].shape)]


primitive("bitcast", "cast", ("x",), ALL, _bitcast, "Reinterpret the bits of each element as dtype `to` "
          "(same element size).", attrs={"to": REQUIRED})


def _matmul(ts):
    a, b = ts
    _accept("matmul", a, NUMERIC)
    if a.dtype != b.dtype:
        _err("matmul", f"operand dtypes differ: {a.dtype} and {b.dtype}")
    if a.rank < 2 or a.rank != b.rank or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        _err("matmul", f"expects [..., M, K] x [..., K, N] with equal batch dims, got {a.shape} x {b.shape}")
    return [TensorType(a.dtype, a.shape[:-1] + (b.shape[-1],))]


primitive("matmul", "matmul", ("a", "b"), NUMERIC, _matmul,
          "Batched matrix product: [..., M, K] x [..., K, N] -> [..., M, N], batch dims equal. "
          "Accumulates in the operand type (float16/bfloat16 in float32).")


def _window_out(name, in_sp, k, strides, dilations, pads):
    n = len(in_sp)
    if not (len(k) == len(strides) == len(dilations) == n and len(pads) == 2 * n):
        _err(name, f"kernel {k}, strides {strides}, dilations {dilations}, pads {pads} must match "
                   f"{n} spatial dims")
    out = []
    for i in range(n):
        eff = (k[i] - 1) * dilations[i] + 1
        span = in_sp[i] + pads[i] + pads[i + n] - eff
        if span < 0 or strides[i] < 1 or dilations[i] < 1:
            _err(name, f"window {eff} does not fit spatial dim {i} of size {in_sp[i]} with pads {pads}")
        out.append(span // strides[i] + 1)
    return tuple(out)


def _conv(ts, strides, dilations, pads, group):
    x, w, b = ts
    _accept("conv", x, NUMERIC)
    if x.dtype != w.dtype or b.dtype != x.dtype:
        _err("conv", f"input, filter and bias dtypes must agree, got {x.dtype}, {w.dtype}, {b.dtype}")
    if x.rank < 3 or w.rank != x.rank:
        _err("conv", f"input {x.shape} and filter {w.shape} must be [N, C, *spatial] and [F, C/group, *k]")
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        _err("conv", f"channels {x.shape[1]} do not match filter {w.shape} with group {group}")
    if b.shape != (w.shape[0],):
        _err("conv", f"bias shape {b.shape} must be ({w.shape[0]},)")
    sp = _window_out("conv", x.shape[2:], w.shape[2:], strides, dilations, pads)
    return [TensorType(x.dtype, (x.shape[0], w.shape[0]) + sp)]


primitive("conv", "conv", ("x", "w", "bias"), NUMERIC, _conv,
          "Grouped, strided, dilated, zero-padded N-d convolution (cross-correlation). x: [N, C, *S], "
          "w: [F, C/group, *K], bias: [F]. pads = begins + ends per spatial dim.",
          attrs={"strides": REQUIRED, "dilations": REQUIRED, "pads": REQUIRED, "group": 1})


def _pool(name):
    def infer(ts, kernel, strides, dilations, pads, **_):
        x = ts[0]
        _accept(name, x, NUMERIC)
        if x.rank < 3:
            _err(name, f"input {x.shape} must be [N, C, *spatial]")
        return [TensorType(x.dtype, x.shape[:2] + _window_out(name, x.shape[2:], kernel, strides, dilations, pads))]
    return infer


primitive("max_pool", "pool", ("x",), NUMERIC, _pool("max_pool"),
          "Max over each window; padded positions are ignored (never selected).",
          attrs={"kernel": REQUIRED, "strides": REQUIRED, "dilations": REQUIRED, "pads": REQUIRED})
primitive("avg_pool", "pool", ("x",), FLOATS, _pool("avg_pool"),
          "Mean over each window. count_include_pad=1 divides by the window size clipped to the padded "
          "input; 0 divides by the number of in-bounds elements.",
          attrs={"kernel": REQUIRED, "strides": REQUIRED, "dilations": REQUIRED, "pads": REQUIRED,
                 "count_include_pad": 0})


def _check_axes(name, axes, rank):
    if list(axes) != sorted(set(axes)) or any(a < 0 or a >= rank for a in axes):
        _err(name, f"axes {list(axes)} must be sorted, unique and in [0, {rank})")


def _reduce(name, allowed):
    def infer(ts, axes, keepdims):
        x = ts[0]
        _accept(name, x, allowed)
        _check_axes(name, axes, x.rank)
        shape = tuple((1 if i in axes else s) for i, s in enumerate(x.shape) if keepdims or i not in axes)
        return [TensorType(x.dtype, shape)]
    return infer


for _n, _doc in {"reduce_sum": "Sum over `axes`.", "reduce_prod": "Product over `axes`.",
                 "reduce_max": "Maximum over `axes` (NaN propagates); empty reduction gives the dtype's lowest.",
                 "reduce_min": "Minimum over `axes` (NaN propagates); empty reduction gives the dtype's highest."}.items():
    primitive(_n, "reduce", ("x",), NUMERIC + (BOOL if _n in ("reduce_max", "reduce_min") else ()),
              _reduce(_n, NUMERIC + BOOL), _doc, attrs={"axes": REQUIRED, "keepdims": 1})


def _arg(name):
    def infer(ts, axis, keepdims, select_last_index):
        x = ts[0]
        _accept(name, x, NUMERIC)
        _check_axes(name, [axis], x.rank)
        shape = tuple((1 if i == axis else s) for i, s in enumerate(x.shape) if keepdims or i != axis)
        return [TensorType("int64", shape)]
    return infer


for _n in ("argmax", "argmin"):
    primitive(_n, "reduce", ("x",), NUMERIC, _arg(_n),
              f"Index (int64) of the {_n[3:]}imum along `axis`; ties pick the first index, or the last with "
              f"select_last_index=1.", attrs={"axis": REQUIRED, "keepdims": 1, "select_last_index": 0})


def _reshape(ts, shape):
    x = ts[0]
    if prod(shape) != x.numel or any(s < 0 for s in shape):
        _err("reshape", f"cannot reshape {x.shape} ({x.numel} elements) to {tuple(shape)}")
    return [x.with_shape(shape)]


primitive("reshape", "movement", ("x",), ALL, _reshape,
          "Same elements in row-major order, new static shape. Backends may implement it as a view.",
          attrs={"shape": REQUIRED})


def _transpose(ts, perm):
    x = ts[0]
    if sorted(perm) != list(range(x.rank)):
        _err("transpose", f"perm {list(perm)} is not a permutation of {x.rank} axes")
    return [x.with_shape(tuple(x.shape[p] for p in perm))]


primitive("transpose", "movement", ("x",), ALL, _transpose, "out.shape[i] = x.shape[perm[i]].",
          attrs={"perm": REQUIRED})


def _broadcast(ts, shape):
    x = ts[0]
    if len(shape) != x.rank or any(s != d and s != 1 for s, d in zip(x.shape, shape)):
        _err("broadcast", f"cannot broadcast {x.shape} to {tuple(shape)}: ranks must match and each dim be 1 "
                          f"or equal")
    return [x.with_shape(shape)]


primitive("broadcast", "movement", ("x",), ALL, _broadcast,
          "Repeat size-1 dims to `shape` (same rank; each dim of x is 1 or equal).", attrs={"shape": REQUIRED})


def _slice(ts, starts, ends, steps):
    x = ts[0]
    if not (len(starts) == len(ends) == len(steps) == x.rank) or 0 in steps:
        _err("slice", f"starts {starts}, ends {ends}, steps {steps} must give one non-zero step per axis of {x.shape}")
    shape = tuple(len(range(*slice(s, e if e >= 0 else None, st).indices(d)))
                  for s, e, st, d in zip(starts, ends, steps, x.shape))
    for s, d in zip(starts, x.shape):
        if d and not 0 <= s < d:
            _err("slice", f"start {s} out of range for dim of size {d}")
    return [x.with_shape(shape)]


primitive("slice", "movement", ("x",), ALL, _slice,
          "x[starts[i]:ends[i]:steps[i]] on every axis. Starts are in [0, dim); ends are in [0, dim] or -1 "
          "(meaning: through index 0 with a negative step).",
          attrs={"starts": REQUIRED, "ends": REQUIRED, "steps": REQUIRED})


def _concat(ts, axis):
    first = ts[0]
    for t in ts[1:]:
        if t.dtype != first.dtype or t.rank != first.rank or any(
                a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis):
            _err("concat", f"operands {[str(x) for x in ts]} differ outside axis {axis}")
    if not 0 <= axis < first.rank:
        _err("concat", f"axis {axis} out of range for rank {first.rank}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in ts)
    return [first.with_shape(shape)]


primitive("concat", "movement", ("xs",), ALL, _concat, "Join operands along `axis`.",
          attrs={"axis": REQUIRED}, variadic=True)


def _pad(ts, pads, value, interior):
    x = ts[0]
    n = x.rank
    if len(pads) != 2 * n or any(p < 0 for p in pads) or len(interior) != n or any(i < 0 for i in interior):
        _err("pad", f"pads {pads} / interior {interior} must be non-negative, 2 and 1 per axis of {x.shape}")
    shape = tuple(pads[i] + pads[i + n] + (s + max(s - 1, 0) * interior[i]) for i, s in enumerate(x.shape))
    return [x.with_shape(shape)]


primitive("pad", "movement", ("x",), ALL, _pad,
          "Constant padding: `pads` = begins + ends per axis, `interior` elements inserted between neighbours, "
          "all filled with `value`.", attrs={"pads": REQUIRED, "value": 0.0, "interior": REQUIRED})


def _gather(ts, axis):
    x, idx = ts
    _accept("gather", idx, ("int32", "int64"))
    if not 0 <= axis < x.rank:
        _err("gather", f"axis {axis} out of range for rank {x.rank}")
    return [x.with_shape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])]


primitive("gather", "index", ("x", "indices"), ALL, _gather,
          "out = take(x, indices, axis). Indices must lie in [0, dim); out-of-range indices are an error "
          "(the interpreter raises; a backend must not read outside x).", attrs={"axis": REQUIRED})


def _gather_nd(ts, batch_dims):
    x, idx = ts
    _accept("gather_nd", idx, ("int32", "int64"))
    k = idx.shape[-1]
    if idx.rank < 1 or batch_dims + k > x.rank or idx.shape[:batch_dims] != x.shape[:batch_dims]:
        _err("gather_nd", f"indices {idx.shape} do not index data {x.shape} with batch_dims {batch_dims}")
    return [x.with_shape(idx.shape[:-1] + x.shape[batch_dims + k:])]


primitive("gather_nd", "index", ("x", "indices"), ALL, _gather_nd,
          "Gather slices of x addressed by the last axis of `indices` (ONNX GatherND semantics, indices "
          "already non-negative).", attrs={"batch_dims": 0})


def _scatter_nd(ts, reduction):
    x, idx, upd = ts
    _accept("scatter_nd", idx, ("int32", "int64"))
    k = idx.shape[-1]
    if k > x.rank or upd.shape != idx.shape[:-1] + x.shape[k:] or upd.dtype != x.dtype:
        _err("scatter_nd", f"updates {upd} do not fit indices {idx} into data {x}")
    return [x]


primitive("scatter_nd", "index", ("x", "indices", "updates"), ALL, _scatter_nd,
          "Copy of x with slices at `indices` replaced (reduction='none') or combined by add/mul/max/min. "
          "Updates are applied in index order.", attrs={"reduction": "none"})

primitive("copy", "movement", ("x",), ALL, lambda ts: [ts[0]], "A copy of x (written by the IR generator when an "
          "output must land in its own buffer).")
