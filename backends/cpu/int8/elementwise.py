"""Int8 kernels without a reduction over channels: rescale, add (two rescales fused), mul, lookup table, max and
average pooling. Plain C loops the compiler vectorizes; the planners check parameters and bake them in."""
from __future__ import annotations

import math

import numpy as np

from glow_core.backend import Unsupported
from glow_core.ops.primitives.quantized import multiplier

from ..templates import template
from .common import (QTYPES, Int8EngineError, Int8Kernel, QTarget, Requant, c_float, check_dtype, check_name,
                          check_offset, host_qtarget, threads_for)

#: Elementwise kernels count 64 "multiply-adds" per element against PARALLEL_MIN_MACS.
ELEMENT_WORK = 64
#: Most padded elements of an input row a max pooling kernel keeps on its stack.
MAX_POOL_ROW = 1 << 16
#: Operand and result dtypes of add and mul (int16 operands take int64 products).
BINARY_DTYPES = ("int8", "uint8", "int16")


def _f32(what: str, m) -> np.float32:
    v = np.float32(m)
    if not np.isfinite(v):
        raise Int8EngineError(f"int8 engine: {what} multiplier {m!r} must be finite")
    return v


def _size(shape) -> int:
    return math.prod(int(d) for d in shape)


def plan_qrescale(shape, *, x_dtype: str, x_offset: int, multiplier: float, y: Requant, num_threads: int = 1,
                  target: QTarget | None = None, name: str = "gq_rescale") -> Int8Kernel:
    """y = clamp(rint((float)(x - x_offset) * m) + y.offset) elementwise (kind "rescale")."""
    check_name(name)
    check_dtype("rescale input", x_dtype, tuple(QTYPES))
    check_dtype("rescale output", y.dtype, ("int8", "uint8", "int16", "int32"))
    check_offset("rescale input", x_offset, x_dtype)
    m = _f32("rescale", multiplier)
    flo, fhi = y.float_bounds()
    size = _size(shape)
    nt = threads_for(size * ELEMENT_WORK, num_threads)
    desc = (f"int8 rescale {x_dtype}->{y.dtype} of {size} elements (x {m!r} from offset {x_offset} to "
            f"{y.offset}), {nt} thread(s)")
    src = template("qelementwise.c.j2").render(
        op="rescale", name=name, describe=desc, lanes=(target or host_qtarget()).lanes, size=size,
        x_ctype=QTYPES[x_dtype][0], y_ctype=QTYPES[y.dtype][0], xoff=x_offset, m=c_float(m), flo=flo, fhi=fhi,
        yoff=y.offset, parallel=nt > 1, nt=nt)
    return Int8Kernel(name, "rescale", src, 0, desc, size)


def plan_qadd(shape, *, a_dtype: str, a_offset: int, a_multiplier: float, b_dtype: str, b_offset: int,
              b_multiplier: float, y: Requant, num_threads: int = 1, target: QTarget | None = None,
              name: str = "gq_add") -> Int8Kernel:
    """y = clamp(rint((a - ao) * ma + (b - bo) * mb) + y.offset) for a, b of one shape (kind "add"), in double
    with one rounding: the two rescales to the output's parameters (ma = scale_a / scale_y, mb likewise) fused
    with the add and a fused activation's clamp."""
    return _binary("add", shape, a_dtype, a_offset, b_dtype, b_offset, a_multiplier, b_multiplier, y, num_threads,
                   target, name)


def plan_qmul(shape, *, a_dtype: str, a_offset: int, b_dtype: str, b_offset: int, multiplier: float, y: Requant,
              num_threads: int = 1, target: QTarget | None = None, name: str = "gq_mul") -> Int8Kernel:
    """y = clamp(rint((double)((a - ao) * (b - bo)) * m) + y.offset), m = scale_a * scale_b / scale_y (kind
    "add": the same signature)."""
    return _binary("mul", shape, a_dtype, a_offset, b_dtype, b_offset, multiplier, multiplier, y, num_threads,
                   target, name)


def _tie_margin(ma: np.float32, mb: np.float32) -> str:
    """The distance from a half-integer within which the 16-lane add's float pass defers to its double pass (as a
    C float literal, "" when the float pass is off): 4 x the float pass's error bound of 2^-23 * 255 (|ma| + |mb|)
    for 8-bit operands, so F and the double sum round alike beyond it; off when that reaches 1/8 (multipliers
    past ~2^12: the float pass would mostly defer)."""
    margin = 2.0 ** -21 * 255 * (abs(float(ma)) + abs(float(mb)))
    return c_float(margin) if margin < 0.125 else ""


def _binary(op, shape, a_dtype, a_offset, b_dtype, b_offset, ma, mb, y, num_threads, target, name) -> Int8Kernel:
    check_name(name)
    for what, dt, off in ((f"{op} input a", a_dtype, a_offset), (f"{op} input b", b_dtype, b_offset)):
        check_dtype(what, dt, BINARY_DTYPES)
        check_offset(what, off, dt)
    check_dtype(f"{op} output", y.dtype, BINARY_DTYPES)
    ma, mb = _f32(f"{op} a", ma), _f32(f"{op} b", mb)
    lo, hi = y.bounds()
    size = _size(shape)
    nt = threads_for(size * ELEMENT_WORK, num_threads)
    desc = f"int8 {op} {a_dtype},{b_dtype}->{y.dtype} of {size} elements, requantization fused, {nt} thread(s)"
    src = template("qelementwise.c.j2").render(
        op=op, name=name, describe=desc, lanes=(target or host_qtarget()).lanes, size=size,
        a_ctype=QTYPES[a_dtype][0], b_ctype=QTYPES[b_dtype][0], y_ctype=QTYPES[y.dtype][0], aoff=a_offset,
        boff=b_offset, ma=c_float(ma), mb=c_float(mb), lo=lo, hi=hi, yoff=y.offset, parallel=nt > 1, nt=nt,
        itype="int64_t" if "int16" in (a_dtype, b_dtype) else "int32_t",
        simd16=op == "add" and {a_dtype, b_dtype, y.dtype} <= {"int8", "uint8"}, tie_margin=_tie_margin(ma, mb),
        a_cvt="cvtepi8" if a_dtype == "int8" else "cvtepu8", b_cvt="cvtepi8" if b_dtype == "int8" else "cvtepu8")
    return Int8Kernel(name, "add", src, 0, desc, size)


def plan_qlookup(shape, *, x_dtype: str, y_dtype: str, num_threads: int = 1, target: QTarget | None = None,
                 name: str = "gq_lookup") -> Int8Kernel:
    """y = table[x - min(x_dtype)] with a 256-entry table of y_dtype passed at run time (kind "lookup")."""
    check_name(name)
    check_dtype("lookup input", x_dtype, ("int8", "uint8"))
    check_dtype("lookup output", y_dtype, ("int8", "uint8"))
    size = _size(shape)
    nt = threads_for(size * ELEMENT_WORK, num_threads)
    desc = f"int8 lookup table {x_dtype}->{y_dtype} of {size} elements, {nt} thread(s)"
    src = template("qelementwise.c.j2").render(
        op="lookup", name=name, describe=desc, lanes=(target or host_qtarget()).lanes, size=size,
        xmin=QTYPES[x_dtype][1], flip=128 if x_dtype == "int8" else 0, parallel=nt > 1, nt=nt)
    return Int8Kernel(name, "lookup", src, 0, desc, size)


def avg_pool_multipliers(x_scale: float, out_scale: float, window: int) -> np.ndarray:
    """The table an average pool kernel reads: entry c = float32(x_scale / (out_scale * c)) computed in float64
    (the qavg_pool primitive's M[count]), entry 0 = 0 (a window wholly in the padding gives the output offset)."""
    t = np.zeros(window + 1, np.float32)
    t[1:] = [multiplier(x_scale, out_scale=float(out_scale) * c) for c in range(1, window + 1)]
    if not np.all(np.isfinite(t)):
        raise Int8EngineError(f"int8 engine: average pool multipliers of scales {x_scale!r} / {out_scale!r} must be "
                              f"finite")
    return t


def plan_qpool(op: str, x_shape, kernel, strides, dilations, pads, *, x_dtype: str, x_offset: int = 0,
               y: Requant | None = None, count_include_pad: int = 0, num_threads: int = 1,
               target: QTarget | None = None, name: str = "gq_pool"):
    """Max ("max": y keeps x's parameters, padding never wins; a window wholly in the padding gives the type's
    minimum; the max over the window's rows first, into one padded row, then over its columns) or average ("avg": S = sum of (x - x_offset) over
    the window's in-bounds positions, y = clamp(rint((float)S * mult[count]) + y.offset) with the table of
    ``avg_pool_multipliers``) pooling of an NCHW tensor (kind "pool"), or Unsupported(reason)."""
    check_name(name)
    if op not in ("max", "avg"):
        raise Int8EngineError(f"int8 engine: pool op {op!r}; accepted: max, avg")
    check_dtype("pool input", x_dtype, ("int8", "uint8"))
    check_offset("pool input", x_offset, x_dtype)
    x_shape = tuple(x_shape)
    if len(x_shape) not in (3, 4):
        return Unsupported(f"int8 engine: 1-d and 2-d pooling only (input {x_shape})")
    if len(x_shape) == 3:
        x_shape, kernel, strides = x_shape[:2] + (1,) + x_shape[2:], (1,) + tuple(kernel), (1,) + tuple(strides)
        dilations, pads = (1,) + tuple(dilations), (0, pads[0], 0, pads[1])
    n, c, h, w = x_shape
    kh, kw = kernel
    sh, sw = strides
    dh, dw = dilations
    pt, pl, pb, pr = pads
    oh, ow = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1, (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    if min(oh, ow, n, c) <= 0:
        return Unsupported(f"int8 engine: empty pooling of {x_shape}")
    if op == "max" and pl + w + pr > MAX_POOL_ROW:
        return Unsupported(f"int8 engine: max pooling rows of {pl + w + pr} padded elements (at most "
                           f"{MAX_POOL_ROW}: the kernel keeps one on its stack)")
    if op == "max":
        y = Requant(x_dtype, x_offset)
        flo = fhi = "0.0"
    else:
        if y is None:
            raise Int8EngineError("int8 engine: average pooling needs the output's Requant")
        check_dtype("pool output", y.dtype, ("int8", "uint8"))
        flo, fhi = y.float_bounds()
    size = n * c * oh * ow
    nt = threads_for(size * kh * kw * 4, num_threads)
    desc = (f"int8 {op} pool {x_dtype}->{y.dtype} {n}x{c}x{h}x{w} k{kh}x{kw} s{sh},{sw} -> {oh}x{ow}"
            f"{', count_include_pad' if op == 'avg' and count_include_pad else ''}, {nt} thread(s)")
    src = template("qpool.c.j2").render(
        op=op, name=name, describe=desc, lanes=(target or host_qtarget()).lanes, n=n, c=c, h=h, w=w, oh=oh, ow=ow,
        kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, pad_t=pt, pad_l=pl, pad_b=pb, pad_r=pr,
        include_pad=bool(count_include_pad), ctype=QTYPES[x_dtype][0], y_ctype=QTYPES[y.dtype][0],
        tmin=QTYPES[x_dtype][1], xoff=x_offset, flo=flo, fhi=fhi, yoff=y.offset, parallel=nt > 1, nt=nt)
    return Int8Kernel(name, "pool", src, 0, desc, size * kh * kw)
