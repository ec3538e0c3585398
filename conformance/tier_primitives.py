"""Tier "primitives": every primitive x every dtype it accepts x shapes x attribute variants, one line each.

Elementwise kernels are flat loops: they get a scalar, an empty tensor, an odd size, a 4-d tensor, special
values (NaN, +-inf, -0.0, denormals, extremes, rounding ties) and, for a few dtypes, a size above the CPU
generator's parallel threshold at two threads. Windowed and accumulating primitives get variety instead: 60+
convolution geometries (every algorithm: direct 1x1, im2col + GEMM, depthwise, grouped, strided, dilated,
padded, 1-d/3-d, GEMM micro-tile edges, above the parallel threshold at 1 and 2 threads), 40+ matmul shapes
(across every micro-kernel and cache-block edge of the GEMM tile table, batched), 25+ pooling configurations,
reductions over every axis combination of a rank-4 tensor, arg-max/min with ties; special values into all of
them and integer extremes into integer accumulations. Thresholds and tiles are read from the CPU code
generator (``paths``). Storage-format casts are checked against the specification (``storage_formats``) over
every code of each format and every rounding boundary. The expectation is the reference interpreter's
kernel, or, when the backend under test is the interpreter, the independent oracles of ``oracles.py``.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np

from glow_core.ops.registry import PRIMITIVES
from glow_core.types import FLOATS, INTS, NUMERIC, dtype as gdtype

from . import oracles as O
from . import paths
from glow_conformance import storage_formats as SF
from .cases import profiles_for
from .primitive_cases import acc_specials, full_range, make_case, num_range, pairs, rand, specials, sprinkle
from .quantized_cases import cases as quantized_cases

#: The sizes of conformance.paths these tables were made with (the plugin re-imports this module for others).
PATHS_SIGNATURE = paths.signature()

BOOL = ("bool",)
MAIN = NUMERIC + BOOL
EW_SHAPES = [(), (0,), (17,), (2, 3, 4, 17)]
PAR = paths.thresholds()
LARGE = (7, PAR["elementwise"] // 7 + 3)  # above the elementwise parallel threshold
LARGE_DTYPES = ("float32", "float16", "float64", "int8", "int32", "bool")
DOMAIN = {"log": (0.01, 100), "sqrt": (0, 100), "reciprocal": (0.1, 10), "tan": (-1.3, 1.3), "asin": (-0.99, 0.99),
          "acos": (-0.99, 0.99), "atanh": (-0.99, 0.99), "acosh": (1, 10), "sinh": (-5, 5), "cosh": (-5, 5),
          "tanh": (-5, 5), "erf": (-3, 3)}


def _label(shape):
    return "x".join(map(str, shape)) if shape else "scalar"


# -- elementwise -------------------------------------------------------------------------------------------
def _ew_inputs(prim, dt, shape, rng, variant):
    p = PRIMITIVES[prim]
    nin = len(p.inputs)
    d = gdtype(dt)
    if variant == "specials":
        s = specials(dt)
        if nin == 1:
            return [s]
        a, b = pairs(s)
        if prim in ("div", "mod") and d.is_int:  # integer division by zero: the negative tier's run-time errors
            keep = b != 0
            a, b = a[keep], b[keep]
        if prim == "pow" and d.is_int:
            b = (np.abs(b.astype(np.int64)) % 5).astype(d.np)
        if prim in ("shl", "shr"):
            b = (b.astype(np.uint64) % np.uint64(d.itemsize * 8 + 3)).astype(d.np)
        return [a, b]
    if nin == 1:
        if prim in ("floor", "ceil", "round"):
            x = np.where(rng.random(shape) < 0.5, rng.integers(-20, 20, shape) / 2.0, rng.uniform(-10, 10, shape))
            return [np.asarray(x).astype(np.float32).astype(d.np) if d.itemsize < 4 else np.asarray(x, d.np)]
        if d.is_int and prim == "bitwise_not":
            return [full_range(dt, shape, rng)]
        lo, hi = DOMAIN.get(prim, (-10, 10))
        if prim == "reciprocal":
            x = rand(dt, shape, rng, lo, hi)
            return [np.where(rng.random(shape) < 0.5, -x, x).astype(x.dtype)]
        if prim in ("isnan", "isinf"):
            return [sprinkle(rand(dt, shape, rng), rng, 0.3)]
        return [rand(dt, shape, rng, lo, hi) if d.is_float else full_range(dt, shape, rng)]
    if d.is_bool:
        return [rand(dt, shape, rng), rand(dt, shape, rng)]
    if prim == "pow":
        if d.is_int:
            return [rand(dt, shape, rng, -4, 4), rand(dt, shape, rng, 0, 6)]
        return [rand(dt, shape, rng, 0.1, 4), rand(dt, shape, rng, -3, 3)]
    if prim in ("shl", "shr"):
        return [full_range(dt, shape, rng), rand(dt, shape, rng, 0, d.itemsize * 8 + 2)]
    if d.is_int:
        a, b = full_range(dt, shape, rng), full_range(dt, shape, rng)
        if prim in ("div", "mod"):
            b = np.where(b == 0, np.ones_like(b), b)
            small = rand(dt, shape, rng, -20, 20)  # small divisors too, so that quotients are not all 0/-1
            b = np.where(rng.random(shape) < 0.5, np.where(small == 0, np.ones_like(small), small), b)
        if prim in ("eq", "lt", "le", "gt", "ge"):
            b = np.where(rng.random(shape) < 0.3, a, b)  # equal operands too
        return [a, b]
    a = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-2, 2, shape))
    b = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-2, 2, shape))
    if prim in ("eq", "lt", "le", "gt", "ge", "max", "min"):
        b = np.where(rng.random(shape) < 0.3, a, b)
    if prim == "mod":
        b = np.where(rng.random(shape) < 0.5, 1, -1) * rng.uniform(0.5, 5, shape)
    cv = (lambda v: np.asarray(v).astype(np.float32).astype(d.np)) if d.itemsize < 4 else (
        lambda v: np.asarray(v).astype(d.np))
    return [cv(a), cv(b)]


def _ew_oracle(prim, arrays, attrs):
    if len(arrays) == 1:
        return O.unary(prim, arrays[0]), None
    if prim == "select":
        return np.where(*arrays), None
    return O.binary(prim, *arrays, **attrs), None


def elementwise_cases():
    out = []
    for prim, p in PRIMITIVES.items():
        if p.family != "elementwise" or prim not in O.ELEMENTWISE:  # others have their line in LINES
            continue
        for dt in (MAIN if prim == "select" else p.dtypes):
            for attrs in ([{"fmod": 0}, {"fmod": 1}] if prim == "mod" else [{}]):
                tag = f"fmod{attrs['fmod']}/" if attrs else ""
                oracle = (lambda a, at, prim=prim: _ew_oracle(prim, a, at))
                sizes = [(s, 1) for s in EW_SHAPES] + ([(LARGE, 2)] if dt in LARGE_DTYPES else [])
                for shape, threads in sizes:
                    if prim == "select":
                        def mk(rng, shape=shape, dt=dt):
                            return [rng.random(shape) < 0.5, rand(dt, shape, rng), rand(dt, shape, rng)]
                    else:
                        def mk(rng, prim=prim, dt=dt, shape=shape):
                            return _ew_inputs(prim, dt, shape, rng, "random")
                    out.append(make_case(prim, dt, f"{tag}{_label(shape)}", mk, attrs, oracle, threads=threads))
                if prim == "select":
                    out.append(make_case(prim, dt, "specials", lambda rng, dt=dt: [
                        rng.random(specials(dt).size) < 0.5, specials(dt), specials(dt)[::-1].copy()], {}, oracle))
                elif not (dt == "bool" and len(p.inputs) == 1 and prim != "not"):
                    out.append(make_case(prim, dt, f"{tag}specials",
                                         lambda rng, prim=prim, dt=dt: _ew_inputs(prim, dt, (), rng, "specials"),
                                         attrs, oracle))
    return out


# -- casts ---------------------------------------------------------------------------------------------------
CAST_DTYPES = FLOATS + INTS + BOOL


def cast_cases():
    out = []
    for src in CAST_DTYPES:
        for dst in CAST_DTYPES:
            for variant in ("random", "specials"):
                def mk(rng, src=src, dst=dst, variant=variant):
                    if variant == "specials":
                        s = specials(src)
                        if gdtype(dst).is_int and gdtype(src).is_float:
                            # the contract leaves float -> integer undefined at |x| >= 2**63 and for +-inf
                            s = s[~(np.abs(s.astype(np.float64)) >= 2.0 ** 63)]
                        return [s]
                    return [full_range(src, (3, 11), rng) if gdtype(src).is_int else rand(src, (3, 11), rng, -300, 300)]
                out.append(make_case("cast", src, f"to_{dst}/{variant}", mk, {"to": dst},
                                     lambda a, at: (O.cast(a[0], at["to"]), None),
                                     profiles=tuple(dict.fromkeys(profiles_for(src) + profiles_for(dst)))))
    by_size = {}
    for dt in FLOATS + INTS:
        by_size.setdefault(gdtype(dt).itemsize, []).append(dt)
    for group in by_size.values():
        for src in group:
            for dst in group:
                for shape in ((), (4, 33)):
                    def mk(rng, src=src, shape=shape):
                        raw = rng.integers(0, 256, size=int(np.prod(shape)) * gdtype(src).itemsize, dtype=np.uint8)
                        return [raw.view(gdtype(src).np).reshape(shape)]
                    out.append(make_case("bitcast", src, f"to_{dst}/{_label(shape)}", mk, {"to": dst},
                                         lambda a, at: (O.bitcast(a[0], at["to"]), None)))
    return out + storage_cases()


def _codes(st):
    """Every code of storage type ``st``, as an array of that type."""
    bits = SF.FLOAT_FORMATS[st].width if st in SF.FLOAT_FORMATS else SF.INT_FORMATS[st][0] if st in SF.INT_FORMATS \
        else 8
    return np.arange(1 << bits, dtype=np.uint8).view(gdtype(st).np)


def _boundaries(st, src):
    """Inputs of dtype ``src`` around every rounding boundary of float format ``st``: every value, every
    midpoint and the nearest ``src`` values on both sides of it, just past the largest value, +-inf, NaN,
    values below half the smallest subnormal; both signs."""
    vals = SF.decode(st, np.arange(1 << SF.FLOAT_FORMATS[st].width, dtype=np.uint8))
    fin = np.unique(np.abs(vals[np.isfinite(vals)]))
    top = fin[-1]
    step = top - fin[-2]
    mids = (fin[1:] + fin[:-1]) / 2
    extra = [top + step / 2, top + step / 4, top + step, 2 * top, 1e30 if src != "float16" else 6e4, fin[1] / 4,
             fin[1] / 2, np.inf, np.nan]
    base = np.concatenate([fin, mids, extra])
    t = gdtype(src).np
    x = base.astype(t)
    near = np.concatenate([np.nextafter(x, np.array(np.inf, t)), np.nextafter(x, np.array(0, t))])
    x = np.concatenate([x, near])
    return np.concatenate([x, -x])


def storage_cases():
    """Casts from every code of each storage-only type and to them from values around every rounding and
    saturation boundary, against ``storage_formats`` (the specification, on every backend)."""
    out = []
    spec = lambda a, at: (SF.cast(a[0], at["to"], at.get("saturate", 1), at.get("round_mode", "up")), None)  # noqa: E731
    prof = ("storage-formats",)
    for st in SF.STORAGE:
        undefined_big = st in ("float8e8m0", "float8e5m2")  # values >= 2**63 (and inf) to integers are undefined
        for to in ("float32", "float16", "bfloat16", "float64", "int32", "int8", "bool") + SF.STORAGE:
            if to == st:
                continue
            sats = (1, 0) if to.startswith("float8") else (1,)
            for sat in sats:
                def mk(rng, st=st, to=to):
                    x = _codes(st)
                    if gdtype(to).is_int and undefined_big:
                        x = x[~(np.abs(x.astype(np.float64)) >= 2.0 ** 63)]
                    if to == SF.E8M0:  # negative values and -0 to e8m0 are undefined
                        x = x[~np.signbit(x.astype(np.float64))]
                    return [x]
                attrs = {"to": to, "saturate": sat}
                out.append(make_case("cast", st, f"to_{to}/all_codes" + ("" if sat else "/saturate0"), mk, attrs,
                                     spec, profiles=prof, spec=True))
    for st in SF.FLOAT_FORMATS:
        for src in ("float32", "float16", "bfloat16", "float64"):
            for sat in ((1, 0) if st.startswith("float8") else (1,)):
                attrs = {"to": st, "saturate": sat}
                out.append(make_case("cast", src, f"to_{st}/boundaries" + ("" if sat else "/saturate0"),
                                     lambda rng, st=st, src=src: [_boundaries(st, src)], attrs, spec, profiles=prof,
                                     spec=True))
        out.append(make_case("cast", "int32", f"to_{st}/integers", lambda rng, st=st: [
            np.arange(-70000, 70001, 37, dtype=np.int32)], {"to": st}, spec, profiles=prof, spec=True))
    powers = np.ldexp(1.0, np.arange(-149, 128)).astype(np.float32)
    e8_inputs = np.concatenate([powers, powers * np.float32(1.5), np.nextafter(powers * np.float32(1.5), np.float32(0)),
                                np.nextafter(powers, np.float32(np.inf)), np.nextafter(powers, np.float32(0)),
                                np.array([0.0, np.inf, np.nan, 3.4e38], np.float32)])
    for src in ("float32", "float64", "float16"):
        for sat in (1, 0):
            for rm in ("up", "down", "nearest"):
                def mk(rng, src=src):
                    x = e8_inputs.astype(gdtype(src).np)
                    return [x[~np.signbit(x.astype(np.float64))]]
                out.append(make_case("cast", src, f"to_float8e8m0/{rm}/saturate{sat}", mk,
                                     {"to": SF.E8M0, "saturate": sat, "round_mode": rm}, spec, profiles=prof,
                                     spec=True))
    for st, (bits, signed) in SF.INT_FORMATS.items():
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        out.append(make_case("cast", "float32", f"to_{st}/in_range", lambda rng, lo=lo, hi=hi: [
            np.concatenate([np.arange(lo, hi + 1), np.arange(lo, hi) + 0.5, np.arange(lo + 1, hi + 1) - 0.25])
            .astype(np.float32)], {"to": st}, spec, profiles=prof, spec=True))
        for src in ("int8", "int32", "uint8"):
            out.append(make_case("cast", src, f"to_{st}/wraps", lambda rng, src=src: [full_range(src, (64,), rng)],
                                 {"to": st}, spec, profiles=prof, spec=True))
    return out


# -- matmul ------------------------------------------------------------------------------------------------
SMALL_MATMUL = [((1, 1), (1, 1)), ((3, 5), (5, 7)), ((8, 8), (8, 8)), ((16, 17), (17, 15)), ((1, 64), (64, 65)),
                ((65, 64), (64, 1)), ((1, 7), (7, 1)), ((7, 1), (1, 5)), ((2, 9, 33), (2, 33, 5)),
                ((2, 3, 4, 6), (2, 3, 6, 2)), ((2, 0), (0, 3)), ((0, 4), (4, 3)), ((33, 129), (129, 31)),
                ((3, 40, 50), (3, 50, 33)), ((2, 37, 53), (2, 53, 41))]


def _mm_label(sa, sb):
    return f"{'x'.join(map(str, sa))}@{'x'.join(map(str, sb))}"


def _matmul(dt, sa, sb, variant=None, threads=1, make=None, consts=()):
    mk = make or (lambda rng: [num_range(dt, rng, sa), num_range(dt, rng, sb)])
    return make_case("matmul", dt, variant or _mm_label(sa, sb), mk, {}, lambda a, at: O.matmul(*a),
                     n_of=lambda a, at: a[0].shape[-1], threads=threads, consts=consts)


def _matmul_specials(dt, sa, sb, tag, threads=1, consts=()):
    """NaN, +-inf, +-0 and denormals in A and B, about 0.3 per dot product (so most results stay finite and
    the non-finite ones mark the rows and columns that hold them, across the GEMM's tile edges)."""
    p = min(0.05, 0.3 / sa[-1])
    return _matmul(dt, sa, sb, f"specials/{tag}{_mm_label(sa, sb)}", threads, lambda rng: [
        sprinkle(num_range(dt, rng, sa), rng, p, acc_specials(dt)),
        sprinkle(num_range(dt, rng, sb), rng, p, acc_specials(dt))], consts)


def matmul_cases():
    out = []
    for dt in NUMERIC:
        for sa, sb in SMALL_MATMUL:
            out.append(_matmul(dt, sa, sb))
        if gdtype(dt).is_int:
            ext = specials(dt)
            out.append(_matmul(dt, (5, 9), (9, 4), "wraparound/5x9@9x4", make=lambda rng, dt=dt: [
                full_range(dt, (5, 9), rng), full_range(dt, (9, 4), rng)]))
            out.append(_matmul(dt, (6, 7), (7, 5), "extremes/6x7@7x5", make=lambda rng, ext=ext: [
                ext[rng.integers(0, ext.size, (6, 7))], ext[rng.integers(0, ext.size, (7, 5))]]))
        else:
            out.append(_matmul(dt, (9, 40), (40, 17), "specials/9x40@40x17", make=lambda rng, dt=dt: [
                sprinkle(num_range(dt, rng, (9, 40)), rng, 0.05, acc_specials(dt)),
                sprinkle(num_range(dt, rng, (40, 17)), rng, 0.05, acc_specials(dt))]))
    for dt, sfx in (("float32", "f32"), ("float64", "f64"), ("float16", "f32"), ("bfloat16", "f32")):
        shapes = paths.gemm_shapes(sfx)
        if dt in ("float16", "bfloat16"):
            shapes = shapes[::3]
        for m, k, n in shapes:
            out.append(_matmul(dt, (m, k), (k, n), f"gemm/{m}x{k}@{k}x{n}"))
        if dt in ("float16", "bfloat16"):  # through the float32 GEMM, B converted at run time or compile time
            m, k, n = shapes[0]
            out += [_matmul_specials(dt, (m, k), (k, n), tag, consts=c) for tag, c in (("gemm/", ()),
                                                                                      ("const_b/", (1,)))]
        m, k, n = shapes[-1]
        if dt in ("float32", "float64"):  # above the parallel threshold: the micro-kernel loop on two threads
            out.append(_matmul(dt, (m, k), (k, n), f"gemm/{m}x{k}@{k}x{n}", threads=2))
            out.append(_matmul(dt, (2, m, 40), (2, 40, n), f"gemm/batched/2x{m}x40@2x40x{n}", threads=2))
            # special values across the tile edges: B computed at run time and B packed at compile time
            out += [_matmul_specials(dt, (m, k), (k, n), "gemm/") for m, k, n in shapes[:-1:3]]
            packed = paths.packed_b_shapes(sfx)
            out += [_matmul_specials(dt, (m, k), (k, n), "packed_b/", consts=(1,)) for m, k, n in packed]
            out.append(_matmul_specials(dt, (m, k), (k, n), "gemm/", threads=2))
            pm, pk, pn = packed[-1]
            out.append(_matmul_specials(dt, (pm, pk), (pk, pn), "packed_b/", threads=2, consts=(1,)))
    # one row times a constant B (a decode step's x @ W: the float32 GEMV over B's packed panels)
    gemv = paths.gemv_shapes()
    out += [_matmul_specials("float32", (1, k), (k, n), "gemv/", consts=(1,)) for k, n in gemv]
    k, n = gemv[-1]
    out.append(_matmul("float32", (1, k), (k, n), f"gemv/1x{k}@{k}x{n}", threads=2, consts=(1,)))
    out.append(_matmul_specials("float32", (1, k), (k, n), "gemv/", threads=2, consts=(1,)))
    k, n = gemv[3]
    out.append(_matmul("float32", (3, 1, k), (3, k, n), f"gemv/batched/3x1x{k}@3x{k}x{n}", consts=(1,)))
    return out


# -- convolution ----------------------------------------------------------------------------------------------
def _conv_geometries():
    """name -> (x shape, w shape, strides, dilations, pads, group)."""
    z2, o2 = [0, 0, 0, 0], [1, 1, 1, 1]
    g = {
        # direct 1x1 (stride 1, no padding): the GEMM reads the input itself
        "1x1": ((1, 17, 5, 5), (33, 17, 1, 1), [1, 1], [1, 1], z2, 1),
        "1x1_batch2": ((2, 8, 7, 9), (16, 8, 1, 1), [1, 1], [1, 1], z2, 1),
        "1x1_1d": ((1, 12, 19), (7, 12, 1), [1], [1], [0, 0], 1),
        "1x1_3d": ((1, 5, 3, 4, 5), (6, 5, 1, 1, 1), [1, 1, 1], [1, 1, 1], [0] * 6, 1),
        "1x1_stride2": ((1, 6, 9, 9), (5, 6, 1, 1), [2, 2], [1, 1], z2, 1),
        "1x1_padded": ((1, 4, 5, 5), (3, 4, 1, 1), [1, 1], [1, 1], o2, 1),
        "1x1_grouped": ((1, 8, 6, 6), (8, 4, 1, 1), [1, 1], [1, 1], z2, 2),
        # im2col + GEMM
        "1d": ((1, 3, 11), (4, 3, 3), [1], [1], [0, 0], 1),
        "1d_k7_s3_pads": ((2, 3, 40), (4, 3, 7), [3], [1], [3, 3], 1),
        "1d_dilated": ((1, 2, 30), (3, 2, 3), [1], [4], [0, 0], 1),
        "2d_pad1": ((1, 3, 8, 8), (5, 3, 3, 3), [1, 1], [1, 1], o2, 1),
        "2d_c1_f4": ((1, 1, 9, 9), (4, 1, 3, 3), [1, 1], [1, 1], o2, 1),
        "2d_c33_f17": ((1, 33, 6, 6), (17, 33, 3, 3), [1, 1], [1, 1], o2, 1),
        "2d_65_channels": ((1, 65, 4, 4), (9, 65, 3, 3), [1, 1], [1, 1], o2, 1),
        "2d_stride2_asym_pads": ((2, 4, 9, 7), (6, 4, 3, 2), [2, 2], [1, 1], [0, 1, 1, 0], 1),
        "2d_dilation2": ((1, 2, 10, 10), (3, 2, 3, 3), [1, 1], [2, 2], z2, 1),
        "2d_dilation3_padded": ((1, 2, 15, 15), (3, 2, 3, 3), [1, 1], [3, 3], [3, 3, 3, 3], 1),
        "2d_stride_dilation_3x1": ((1, 2, 13, 11), (3, 2, 2, 3), [3, 1], [2, 3], [1, 0, 2, 1], 1),
        "2d_5x5_s2_p2": ((1, 3, 17, 17), (4, 3, 5, 5), [2, 2], [1, 1], [2, 2, 2, 2], 1),
        "2d_7x7_s2_p3_stem": ((1, 3, 24, 24), (8, 3, 7, 7), [2, 2], [1, 1], [3, 3, 3, 3], 1),
        "2d_1x5": ((1, 2, 7, 11), (3, 2, 1, 5), [1, 1], [1, 1], [0, 2, 0, 2], 1),
        "2d_5x1": ((1, 2, 11, 7), (3, 2, 5, 1), [1, 1], [1, 1], [2, 0, 2, 0], 1),
        "2d_stride_gt_kernel": ((1, 2, 13, 13), (3, 2, 2, 2), [3, 3], [1, 1], z2, 1),
        "2d_full_kernel": ((1, 1, 5, 5), (2, 1, 5, 5), [3, 3], [1, 1], [2, 2, 2, 2], 1),
        "2d_kernel_gt_input_padded": ((1, 2, 3, 3), (2, 2, 5, 5), [1, 1], [1, 1], [2, 2, 2, 2], 1),
        "2d_batch3": ((3, 4, 6, 5), (5, 4, 3, 3), [1, 1], [1, 1], [1, 0, 1, 0], 1),
        "2d_pads_end_only": ((1, 3, 6, 6), (2, 3, 3, 3), [1, 1], [1, 1], [0, 0, 2, 2], 1),
        "2d_pads_begin_only": ((1, 3, 6, 6), (2, 3, 3, 3), [1, 1], [1, 1], [2, 2, 0, 0], 1),
        "2d_8x20x20_to_16": ((1, 8, 20, 20), (16, 8, 3, 3), [1, 1], [1, 1], o2, 1),
        "3d": ((1, 2, 4, 5, 6), (3, 2, 2, 3, 2), [1, 2, 1], [1, 1, 2], [1, 0, 1, 0, 1, 1], 1),
        "3d_stride2": ((1, 2, 6, 6, 6), (3, 2, 3, 3, 3), [2, 2, 2], [1, 1, 1], [1] * 6, 1),
        "3d_1x3x3": ((1, 3, 4, 6, 6), (2, 3, 1, 3, 3), [1, 1, 1], [1, 1, 1], [0, 1, 1, 0, 1, 1], 1),
        "3d_1x1x1_strided_batch2": ((2, 3, 4, 4, 4), (5, 3, 1, 1, 1), [2, 2, 2], [1, 1, 1], [0] * 6, 1),
        "1d_stride_dilation_pads": ((2, 3, 25), (2, 3, 4), [2], [3], [2, 1], 1),
        "2d_3x2_stride_1x2": ((1, 3, 8, 9), (4, 3, 3, 2), [1, 2], [1, 1], [1, 0, 1, 1], 1),
        "2d_one_filter": ((1, 4, 6, 6), (1, 4, 3, 3), [1, 1], [1, 1], o2, 1),
        "2d_wide_input_strided": ((1, 2, 5, 13), (3, 2, 3, 3), [2, 1], [1, 1], o2, 1),
        "1x1_c64_f64": ((1, 64, 4, 4), (64, 64, 1, 1), [1, 1], [1, 1], z2, 1),
        # grouped (several channels per group)
        "2d_group2": ((1, 4, 7, 7), (6, 2, 3, 3), [1, 1], [1, 1], o2, 2),
        "2d_group3": ((1, 6, 7, 7), (9, 2, 3, 3), [1, 1], [1, 1], o2, 3),
        "2d_group4_strided_batch2": ((2, 8, 9, 9), (8, 2, 3, 3), [2, 2], [1, 1], o2, 4),
        "2d_group2_stride_dilation_batch2": ((2, 4, 9, 8), (6, 2, 3, 2), [2, 1], [1, 2], [1, 0, 2, 1], 2),
        "1d_group2": ((1, 4, 15), (6, 2, 3), [2], [1], [1, 1], 2),
        "3d_group2": ((1, 4, 4, 5, 5), (4, 2, 2, 2, 2), [1, 1, 1], [1, 1, 1], [0, 1, 1, 1, 0, 0], 2),
        "2d_channel_multiplier2": ((1, 3, 7, 7), (6, 1, 3, 3), [1, 1], [1, 1], o2, 3),
        # depthwise (group == C == F)
        "2d_depthwise": ((1, 6, 9, 9), (6, 1, 3, 3), [2, 2], [1, 1], o2, 6),
        "2d_depthwise_batch2_pad_past_kernel": ((2, 5, 6, 7), (5, 1, 3, 3), [1, 1], [1, 1], [3, 0, 1, 4], 5),
        "2d_depthwise_stride_dilation": ((1, 4, 11, 10), (4, 1, 3, 2), [2, 3], [2, 2], [0, 2, 1, 1], 4),
        "2d_depthwise_k5_s2": ((1, 5, 12, 12), (5, 1, 5, 5), [2, 2], [1, 1], [2, 2, 2, 2], 5),
        "2d_depthwise_1x1": ((1, 4, 5, 5), (4, 1, 1, 1), [1, 1], [1, 1], z2, 4),
        "2d_depthwise_kernel_gt_input": ((1, 3, 3, 3), (3, 1, 5, 5), [1, 1], [1, 1], [2, 2, 2, 2], 3),
        "2d_depthwise_dilation4": ((1, 2, 15, 15), (2, 1, 3, 3), [1, 1], [4, 4], [4, 4, 4, 4], 2),
        "1d_depthwise_dilated": ((1, 3, 17), (3, 1, 4), [1], [3], [2, 5], 3),
        "1d_depthwise_batch3": ((3, 4, 20), (4, 1, 3), [1], [1], [1, 1], 4),
        "3d_depthwise": ((1, 3, 4, 5, 6), (3, 1, 2, 3, 3), [1, 2, 1], [1, 1, 2], [1, 0, 1, 0, 1, 2], 3),
        "3d_depthwise_strided": ((1, 4, 5, 6, 7), (4, 1, 3, 3, 3), [2, 2, 2], [1, 1, 1], [1] * 6, 4),
        "2d_channel_multiplier3": ((1, 2, 6, 6), (6, 1, 3, 3), [1, 1], [1, 1], o2, 2),
        # one input channel or one filter per group (a filter fed at run time: the generic kernels)
        "1x1_c1_f4": ((1, 1, 6, 7), (4, 1, 1, 1), [1, 1], [1, 1], z2, 1),
        "1x1_group3_multiplier3": ((1, 3, 5, 5), (9, 1, 1, 1), [1, 1], [1, 1], z2, 3),
        "1x1_group4_one_filter_each": ((1, 8, 5, 6), (4, 2, 1, 1), [1, 1], [1, 1], z2, 4),
        "2d_group4_one_filter_each_strided": ((1, 8, 9, 9), (4, 2, 3, 3), [2, 2], [1, 1], o2, 4),
        "2d_c1_f1": ((1, 1, 7, 7), (1, 1, 3, 3), [1, 1], [1, 1], o2, 1),
    }
    mrs, nrs = paths.micro_edges("f32")  # GEMM micro-tile edges through conv: filters (M) and positions (N)
    for f, q in zip([m + d for m in mrs for d in (-1, 1)], [n + d for n in nrs for d in (-1, 1)]):
        g[f"1d_tile_f{f}_p{q}"] = ((1, 4, q + 2), (f, 4, 3), [1], [1], [0, 0], 1)
    c, k = 16, 3  # above the window threshold: the im2col loop runs on two threads
    side = paths.parallel_side(PAR["window"], c * k * k, 1)
    g["2d_parallel_im2col"] = ((1, c, side, side), (8, c, k, k), [1, 1], [1, 1], o2, 1)
    side = paths.parallel_side(PAR["window"], k * k, 8)
    g["2d_parallel_depthwise"] = ((1, 8, side, side), (8, 1, k, k), [1, 1], [1, 1], o2, 8)
    return g


CONV = _conv_geometries()
PARALLEL_CONV = ("2d_parallel_im2col", "2d_parallel_depthwise")
#: Constant-filter convs the CPU conv engine runs by each of its algorithms (Winograd F(2x2), F(4x4), direct,
#: 1x1 in place, depthwise; ``paths.engine_geometries``): special values at 1 and 2 threads.
ENGINE = {name: (xs, ws, st, [1] * len(st), pd, g) for name, (xs, ws, st, pd, g) in paths.engine_geometries().items()}
_DW, _DIRECT = paths.engine_parallel_macs(depthwise=True), paths.engine_parallel_macs()
_Z, _O = [0, 0, 0, 0], [1, 1, 1, 1]
#: Constant-filter convs with one input channel or one filter per group, one line each: every path the CPU conv
#: engine (conv_algorithms.py) takes there, against the interpreter. C/group = 1 is its depthwise kernel (one
#: filter per channel, or a channel multiplier: C = 1 and any M included), which copies its input per strip of
#: rows; 1x1 stride-1 windows are flattened into long rows (the copy must use the same rows: only the first row
#: was computed once), strided and padded ones subsampled by the copy; 20 channels leave a partial channel block
#: of 8 or 16. M/group = 1 is the direct kernel with one-lane input blocks (groups not aligned with channel
#: blocks: 1x1 reads x in place, padding takes a copy), M = 1 with few channels (all in one input block), with
#: flattened 1x1 rows, or with several blocks. name -> (x shape, w shape, strides, dilations, pads, group,
#: threads); the t2 lines pass the engine's OpenMP threshold (paths.engine_parallel_macs).
ENGINE_ONE_PER_GROUP = {
    "dw_c1_m1_1x1": ((1, 1, 3, 3), (1, 1, 1, 1), [1, 1], [1, 1], _Z, 1, 1),
    "dw_c1_m1_1x1_9x13": ((1, 1, 9, 13), (1, 1, 1, 1), [1, 1], [1, 1], _Z, 1, 1),
    "dw_c20_1x1_batch2": ((2, 20, 7, 9), (20, 1, 1, 1), [1, 1], [1, 1], _Z, 20, 1),
    "dw_c5_1x1_1d": ((1, 5, 23), (5, 1, 1), [1], [1], [0, 0], 5, 1),
    "dw_c6_1x1_stride2": ((1, 6, 9, 9), (6, 1, 1, 1), [2, 2], [1, 1], _Z, 6, 1),
    "dw_c4_1x1_padded": ((1, 4, 5, 6), (4, 1, 1, 1), [1, 1], [1, 1], _O, 4, 1),
    "dw_c17_3x3_dilated2": ((1, 17, 11, 10), (17, 1, 3, 3), [1, 1], [2, 2], [2, 2, 2, 2], 17, 1),
    "dw_c3_2x3_stride2_asym": ((1, 3, 9, 8), (3, 1, 2, 3), [2, 1], [1, 1], [0, 1, 1, 0], 3, 1),
    "mult_c1_m4_1x1": ((1, 1, 6, 7), (4, 1, 1, 1), [1, 1], [1, 1], _Z, 1, 1),
    "mult_c3_m9_1x1": ((1, 3, 3, 3), (9, 1, 1, 1), [1, 1], [1, 1], _Z, 3, 1),
    "mult_c3_m9_1x1_8x8": ((1, 3, 8, 8), (9, 1, 1, 1), [1, 1], [1, 1], _Z, 3, 1),
    "mult_c1_m5_3x3_pad1": ((1, 1, 8, 8), (5, 1, 3, 3), [1, 1], [1, 1], _O, 1, 1),
    "mult_c2_m6_1x1_stride2_batch2": ((2, 2, 7, 7), (6, 1, 1, 1), [2, 2], [1, 1], _Z, 2, 1),
    "mult_c10_m20_1x1_1d": ((1, 10, 17), (20, 1, 1), [1], [1], [0, 0], 10, 1),
    "grouped_c4_m2_1x1": ((1, 4, 6, 6), (2, 2, 1, 1), [1, 1], [1, 1], _Z, 2, 1),
    "grouped_c8_m4_3x3_pad1": ((1, 8, 7, 7), (4, 2, 3, 3), [1, 1], [1, 1], _O, 4, 1),
    "grouped_c12_m3_1x1_1d": ((1, 12, 19), (3, 4, 1), [1], [1], [0, 0], 3, 1),
    "grouped_c34_m17_1x1_stride2": ((1, 34, 9, 9), (17, 2, 1, 1), [2, 2], [1, 1], _Z, 17, 1),
    "one_filter_c3_3x3_pad1": ((1, 3, 9, 9), (1, 3, 3, 3), [1, 1], [1, 1], _O, 1, 1),
    "one_filter_c17_1x1": ((1, 17, 8, 8), (1, 17, 1, 1), [1, 1], [1, 1], _Z, 1, 1),
    "one_filter_c40_3x3_stride2": ((1, 40, 9, 9), (1, 40, 3, 3), [2, 2], [1, 1], _Z, 1, 1),
    # groups of whole channel blocks (16 + 16) from nchw: the direct kernel's own copy, of flattened 1x1 rows
    "grouped_aligned_c32_m32_1x1": ((1, 32, 5, 7), (32, 16, 1, 1), [1, 1], [1, 1], _Z, 2, 1),
    # 1x1 with padding at the end only: the padded copy's rows are the kernel's (not flattened for depthwise)
    "dw_c3_1x1_end_pads": ((1, 3, 4, 5), (3, 1, 1, 1), [1, 1], [1, 1], [0, 0, 1, 1], 3, 1),
    "mult_c1_m4_1x1_end_pad_w": ((1, 1, 9, 9), (4, 1, 1, 1), [1, 1], [1, 1], [0, 0, 0, 2], 1, 1),
    "mult_c3_m6_1x1_end_pad_h": ((1, 3, 4, 5), (6, 1, 1, 1), [1, 1], [1, 1], [0, 0, 2, 0], 3, 1),
    "grouped_c85_m5_1x1_1d_end_pad": ((1, 85, 1), (5, 17, 1), [1], [1], [0, 1], 5, 1),
    "grouped_c34_m17_1x1_end_pads": ((1, 34, 4, 5), (17, 2, 1, 1), [1, 1], [1, 1], [0, 0, 1, 1], 17, 1),
}
_S = paths.parallel_side(_DW, 1, 32)  # a 1x1 depthwise of 16 channels x2 past the threshold
ENGINE_ONE_PER_GROUP["mult_c16_m32_1x1_t2"] = ((1, 16, _S, _S + 1), (32, 1, 1, 1), [1, 1], [1, 1], _Z, 16, 2)
_S = paths.parallel_side(_DW, 1, 24)
ENGINE_ONE_PER_GROUP["dw_c24_1x1_t2"] = ((1, 24, _S, _S), (24, 1, 1, 1), [1, 1], [1, 1], _Z, 24, 2)
_S = paths.parallel_side(_DIRECT, 2 * 9, 16)
ENGINE_ONE_PER_GROUP["grouped_c32_m16_3x3_pad1_t2"] = ((1, 32, _S, _S), (16, 2, 3, 3), [1, 1], [1, 1], _O, 16, 2)
ALL_CONV = {**CONV, **ENGINE, **{name: line[:6] for name, line in ENGINE_ONE_PER_GROUP.items()}}
CONV_INT = ("1d", "1x1", "2d_pad1", "2d_stride2_asym_pads", "2d_dilation2", "2d_group2", "2d_depthwise",
            "2d_channel_multiplier2", "3d", "2d_batch3")


def _conv(dt, name, variant=None, make=None, threads=1, consts=()):
    xs, ws, st, dl, pd, g = ALL_CONV[name]
    attrs = {"strides": st, "dilations": dl, "pads": pd, "group": g}
    mk = make or (lambda rng: [num_range(dt, rng, xs, True), num_range(dt, rng, ws, True),
                               num_range(dt, rng, (ws[0],), True)])
    return make_case("conv", dt, variant or name, mk, attrs, lambda a, at: O.conv(*a, **at),
                     n_of=lambda a, at: int(np.prod(a[1].shape[1:])) + 1, threads=threads, consts=consts)


def _conv_specials(dt, name, threads=1, consts=()):
    """Special values (NaN, +-inf, -0.0, denormals) in the input; in the weights only without padding: a padded
    tap is 0 * w, which the contract does not settle for non-finite w (see conformance/README.md). About half a
    special value per window (so most results stay finite and the others mark where they are), at least 16 in x."""
    xs, ws, pads = ALL_CONV[name][0], ALL_CONV[name][1], ALL_CONV[name][4]
    p = min(0.16, max(0.5 / int(np.prod(ws[1:])), 16 / int(np.prod(xs))))
    return _conv(dt, name, f"specials/{'const_' if consts else ''}{name}", lambda rng: [
        sprinkle(num_range(dt, rng, xs), rng, p, acc_specials(dt)),
        num_range(dt, rng, ws) if any(pads) else sprinkle(num_range(dt, rng, ws), rng, p, acc_specials(dt)),
        num_range(dt, rng, (ws[0],))], threads, consts)


def conv_cases():
    out = []
    names = list(CONV)
    for dt in NUMERIC:
        d = gdtype(dt)
        chosen = names if dt in ("float32", "float64") else names[::3] if d.is_float else CONV_INT
        for name in chosen:
            out.append(_conv(dt, name))
        if dt in ("float32", "float64"):
            out += [_conv(dt, name, threads=2) for name in PARALLEL_CONV]
        for name in ("2d_pad1", "2d_depthwise", "1x1", "2d_depthwise_1x1", "2d_group2", "3d_stride2"):
            xs, ws = CONV[name][0], CONV[name][1]
            if d.is_float:
                out.append(_conv_specials(dt, name))
            elif name in ("2d_pad1", "2d_depthwise"):
                out.append(_conv(dt, name, f"extremes/{name}", lambda rng, dt=dt, xs=xs, ws=ws: [
                    full_range(dt, xs, rng), full_range(dt, ws, rng), full_range(dt, (ws[0],), rng)]))
        if dt in ("float32", "float64"):  # the generic kernels' parallel im2col and depthwise loops
            out += [_conv_specials(dt, name, threads=2) for name in PARALLEL_CONV]
        elif d.is_float:  # a constant filter converted to the accumulator type at compile time
            out.append(_conv_specials(dt, "2d_pad1", consts=(1, 2)))
    # constant filters (the CPU conv engine's float32 algorithms), 1 and 2 threads
    out += [_conv_specials("float32", name, threads, consts=(1, 2)) for name in ENGINE for threads in (1, 2)]
    out += [_conv_specials("float32", name, line[6], consts=(1, 2)) for name, line in ENGINE_ONE_PER_GROUP.items()]
    return out


# -- pooling ------------------------------------------------------------------------------------------------
def _pool_configs():
    """name -> (x shape, kernel, strides, dilations, pads)."""
    z2, o2 = [0, 0, 0, 0], [1, 1, 1, 1]
    p = {
        "1d_k3": ((1, 2, 11), [3], [1], [1], [0, 0]),
        "1d_k4s3_pads": ((1, 2, 9), [4], [3], [1], [2, 1]),
        "1d_dilated_padded": ((1, 2, 20), [3], [1], [3], [2, 2]),
        "1d_global": ((2, 3, 17), [17], [1], [1], [0, 0]),
        "2d_k1": ((1, 2, 5, 5), [1, 1], [1, 1], [1, 1], z2),
        "2d_k2s2": ((1, 3, 8, 8), [2, 2], [2, 2], [1, 1], z2),
        "2d_k3s1_same": ((1, 3, 7, 7), [3, 3], [1, 1], [1, 1], o2),
        "2d_k3s2_pad1": ((2, 2, 9, 7), [3, 3], [2, 2], [1, 1], o2),
        "2d_k3s3_tiles": ((1, 2, 9, 9), [3, 3], [3, 3], [1, 1], z2),
        "2d_stride_gt_kernel": ((1, 2, 11, 11), [2, 2], [3, 3], [1, 1], z2),
        "2d_asym_pads": ((1, 2, 6, 7), [3, 2], [1, 2], [1, 1], [0, 1, 2, 0]),
        "2d_end_pads_only": ((1, 2, 7, 7), [3, 3], [2, 2], [1, 1], [0, 0, 1, 1]),
        "2d_kernel_eq_input_padded": ((1, 1, 3, 3), [3, 3], [1, 1], [1, 1], o2),
        "2d_dilated": ((1, 1, 10, 10), [2, 3], [1, 1], [2, 2], o2),
        "2d_dilated_strided_asym": ((2, 3, 7, 8), [3, 2], [2, 2], [1, 2], [1, 0, 1, 1]),
        "2d_k3_dil2_pad2": ((1, 2, 9, 9), [3, 3], [1, 1], [2, 2], [2, 2, 2, 2]),
        "2d_1x5": ((1, 2, 6, 12), [1, 5], [1, 2], [1, 1], [0, 2, 0, 2]),
        "2d_5x1": ((1, 2, 12, 6), [5, 1], [2, 1], [1, 1], [2, 0, 2, 0]),
        "2d_batch3": ((3, 4, 8, 8), [2, 2], [2, 2], [1, 1], z2),
        "2d_global_65": ((1, 65, 6, 6), [6, 6], [1, 1], [1, 1], z2),
        "2d_65_channels_k3s2": ((1, 65, 5, 5), [3, 3], [2, 2], [1, 1], o2),
        "3d": ((1, 2, 5, 4, 6), [2, 2, 3], [1, 2, 1], [1, 1, 1], [0, 1, 0, 1, 1, 1]),
        "3d_k2s2": ((1, 2, 6, 6, 6), [2, 2, 2], [2, 2, 2], [1, 1, 1], [0] * 6),
        "3d_dilated_padded": ((1, 1, 7, 7, 7), [2, 2, 2], [1, 1, 1], [2, 2, 2], [1] * 6),
    }
    c, k = 4, 3  # above the window threshold: the plane loop runs on two threads
    side = paths.parallel_side(PAR["window"], k * k, c)
    p["2d_parallel"] = ((1, c, side, side), [k, k], [1, 1], [1, 1], o2)
    return p


POOL = _pool_configs()
POOL_FEW = ("1d_k3", "2d_k2s2", "2d_k3s2_pad1", "2d_asym_pads", "2d_dilated", "3d", "2d_global_65")


def pool_cases():
    out = []
    for prim, dts in (("max_pool", NUMERIC), ("avg_pool", FLOATS)):
        fn = O.max_pool if prim == "max_pool" else O.avg_pool
        for dt in dts:
            chosen = list(POOL) if dt in ("float32", "float64") else POOL_FEW
            for name in chosen:
                xs, k, st, dl, pd = POOL[name]
                for cip in ((0, 1) if prim == "avg_pool" and (dt == "float32" or name in POOL_FEW) else (None,)):
                    attrs = {"kernel": k, "strides": st, "dilations": dl, "pads": pd}
                    if cip is not None:
                        attrs["count_include_pad"] = cip
                    tag = name + ("" if cip is None else f"/cip{cip}")
                    for threads in ((1, 2) if name == "2d_parallel" else (1,)):
                        mk = (lambda rng, dt=dt, xs=xs: [num_range(dt, rng, xs)])
                        out.append(make_case(prim, dt, tag, mk, attrs, lambda a, at, fn=fn: fn(a[0], **at),
                                             n_of=lambda a, at: int(np.prod(at["kernel"])), threads=threads))
                    if gdtype(dt).is_float and name in ("2d_k3s2_pad1", "3d"):
                        sp = specials(dt) if prim == "max_pool" else acc_specials(dt)
                        out.append(make_case(prim, dt, f"specials/{tag}", lambda rng, dt=dt, xs=xs, sp=sp: [
                            sprinkle(num_range(dt, rng, xs), rng, 0.08, sp)], attrs, lambda a, at, fn=fn: fn(a[0], **at),
                            n_of=lambda a, at: int(np.prod(at["kernel"]))))
    return out


# -- reductions ----------------------------------------------------------------------------------------------
RANK4 = (3, 4, 5, 6)
ALL_AXES = [list(c) for r in range(5) for c in itertools.combinations(range(4), r)]  # every axis combination
FEW_AXES = [[0], [3], [1, 2], [0, 1, 2, 3]]
REDUCE_EXTRA = [((), [], 0), ((17,), [0], 1), ((4, 0, 3), [1], 1), ((2, 65, 9), [1], 0),
                ((2, 0), [0, 1], 0)]


def _reduce_input(prim, dt, shape, rng):
    if prim == "reduce_prod":
        return rand(dt, shape, rng, 0.5, 1.5) if gdtype(dt).is_float else full_range(dt, shape, rng)
    if gdtype(dt).is_float or gdtype(dt).is_bool:
        return rand(dt, shape, rng)
    return full_range(dt, shape, rng)  # integer sums wrap


def reduce_cases():
    out = []
    n_of = (lambda a, at: int(np.prod([a[0].shape[i] for i in at["axes"]])))
    big = (64, PAR["window"] // 64 + 3)  # above the window threshold: the kept loop runs on two threads
    for prim in ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min"):
        for dt in PRIMITIVES[prim].dtypes:
            full = dt in ("float32", "int32", "float64")
            variants = [(RANK4, axes, len(axes) % 2) for axes in (ALL_AXES if full else FEW_AXES)] + REDUCE_EXTRA
            for shape, axes, kd in variants:
                label = f"{_label(shape)}/axes{''.join(map(str, axes)) or '-'}/kd{kd}"
                out.append(make_case(prim, dt, label, lambda rng, dt=dt, shape=shape, prim=prim: [
                    _reduce_input(prim, dt, shape, rng)], {"axes": axes, "keepdims": kd},
                    lambda a, at, prim=prim: O.reduce(prim, a[0], **at), n_of=n_of))
            if gdtype(dt).is_float:
                # (5, 40) over its last axis: a contiguous run of 40 (the cpu's vector max and min)
                for shape, axes in ((RANK4, [1]), (RANK4, [0, 3]), (RANK4, [0, 1, 2, 3]), ((5, 40), [1])):
                    out.append(make_case(prim, dt, f"specials/{_label(shape)}/axes{''.join(map(str, axes))}",
                                         lambda rng, dt=dt, prim=prim, shape=shape: [sprinkle(
                                             _reduce_input(prim, dt, shape, rng), rng, 0.03,
                                             specials(dt) if prim in ("reduce_max", "reduce_min") else
                                             acc_specials(dt, products=prim == "reduce_prod"))],
                                         {"axes": axes, "keepdims": 1},
                                         lambda a, at, prim=prim: O.reduce(prim, a[0], **at), n_of=n_of))
            if dt in ("float32", "int32") and prim != "reduce_prod":
                for axes in ([1], [0]):
                    out.append(make_case(prim, dt, f"{_label(big)}/axes{axes[0]}/kd0", lambda rng, dt=dt, prim=prim: [
                        _reduce_input(prim, dt, big, rng)], {"axes": axes, "keepdims": 0},
                        lambda a, at, prim=prim: O.reduce(prim, a[0], **at), n_of=n_of, threads=2))
    for prim in ("argmax", "argmin"):
        for dt in NUMERIC:
            full = dt in ("float32", "int32")
            for axis in range(4):
                for kd, last in (((0, 0), (0, 1), (1, 0), (1, 1)) if full else ((1, 0), (0, 1))):
                    attrs = {"axis": axis, "keepdims": kd, "select_last_index": last}

                    def mk(rng, dt=dt):  # few distinct values: many ties
                        x = rand(dt, RANK4, rng, 0, 3)
                        return [np.round(x) if gdtype(dt).is_float else x]
                    out.append(make_case(prim, dt, f"{_label(RANK4)}/axis{axis}/kd{kd}/last{last}", mk, attrs,
                                         lambda a, at, prim=prim: O.arg(prim, a[0], **at)))
            if gdtype(dt).is_float:
                for last in (0, 1):
                    out.append(make_case(prim, dt, f"specials/{_label(RANK4)}/axis2/last{last}",
                                         lambda rng, dt=dt: [sprinkle(rand(dt, RANK4, rng), rng, 0.1)],
                                         {"axis": 2, "keepdims": 1, "select_last_index": last},
                                         lambda a, at, prim=prim: O.arg(prim, a[0], **at)))
    return out


# -- data movement and indexing --------------------------------------------------------------------------------
MOVE_DTYPES = MAIN + ("float8e4m3fn", "int4")


def _mv(dt, shape, rng):
    d = gdtype(dt)
    if d.is_bool or d.is_float and d.itemsize >= 2:
        return sprinkle(rand(dt, shape, rng), rng, 0.1) if d.is_float else rand(dt, shape, rng)
    if d.name in ("int4",) or d.itemsize == 1 and d.is_float:
        return rng.integers(-7, 7, size=shape).astype(np.float32).astype(d.np)
    return full_range(dt, shape, rng)


def _t(a, at):
    return np.transpose(a[0], at["perm"]).copy()


def _b(a, at):
    return np.broadcast_to(a[0], at["shape"]).copy()


#: One line per case: (primitive, variant, operand shapes, attributes, oracle). Each line is a case for every dtype
#: the primitive's record accepts (MOVE_DTYPES for the movement primitives), on seeded random operands; the oracle
#: ``(arrays, attrs) -> expected array`` is numpy written from the primitive's definition (None: the one in
#: DEFAULT_ORACLES). Adding a primitive adds its line here (see vendor_guide/adding_a_primitive.md).
LINES = [
    ("reshape", "6x4_to_2x3x4", [(6, 4)], {"shape": [2, 3, 4]}, lambda a, at: a[0].reshape(at["shape"])),
    ("reshape", "scalar_to_1x1", [()], {"shape": [1, 1]}, lambda a, at: a[0].reshape(at["shape"])),
    ("reshape", "0x5_to_5x0", [(0, 5)], {"shape": [5, 0]}, lambda a, at: a[0].reshape(at["shape"])),
    ("transpose", "2d", [(7, 9)], {"perm": [1, 0]}, _t),
    ("transpose", "3d_201", [(3, 5, 17)], {"perm": [2, 0, 1]}, _t),
    ("transpose", "4d_0213", [(2, 3, 4, 5)], {"perm": [0, 2, 1, 3]}, _t),
    ("transpose", "4d_3120", [(2, 3, 4, 5)], {"perm": [3, 1, 2, 0]}, _t),
    ("transpose", "4d_2031", [(2, 3, 4, 5)], {"perm": [2, 0, 3, 1]}, _t),
    ("transpose", "large_65x1031", [(65, 1031)], {"perm": [1, 0]}, _t),
    ("broadcast", "1_to_17", [(1,)], {"shape": [17]}, _b),
    ("broadcast", "row_3x1_to_3x9", [(3, 1)], {"shape": [3, 9]}, _b),
    ("broadcast", "col_1x9_to_5x9", [(1, 9)], {"shape": [5, 9]}, _b),
    ("broadcast", "middle_2x1x3_to_2x7x3", [(2, 1, 3)], {"shape": [2, 7, 3]}, _b),
    ("broadcast", "outer_1x4x1_to_3x4x65", [(1, 4, 1)], {"shape": [3, 4, 65]}, _b),
    ("broadcast", "to_zero_1x3_to_0x3", [(1, 3)], {"shape": [0, 3]}, _b),
    ("slice", "step1", [(10, 7)], {"starts": [2, 1], "ends": [9, 7], "steps": [1, 1]}, None),
    ("slice", "step3", [(17, 9)], {"starts": [1, 0], "ends": [17, 9], "steps": [3, 2]}, None),
    ("slice", "negative_step", [(9, 5)], {"starts": [8, 4], "ends": [-1, 0], "steps": [-1, -2]}, None),
    ("slice", "empty", [(6, 5)], {"starts": [3, 0], "ends": [3, 5], "steps": [1, 1]}, None),
    ("slice", "3d_last", [(2, 3, 65)], {"starts": [0, 1, 63], "ends": [2, 3, 65], "steps": [1, 1, 1]}, None),
    ("slice", "3d_mixed_steps", [(6, 7, 8)], {"starts": [1, 6, 0], "ends": [5, -1, 8], "steps": [2, -2, 3]}, None),
    ("concat", "axis0_2", [(2, 3), (5, 3)], {"axis": 0}, lambda a, at: np.concatenate(a, at["axis"])),
    ("concat", "axis1_3", [(2, 3), (2, 1), (2, 17)], {"axis": 1}, lambda a, at: np.concatenate(a, at["axis"])),
    ("concat", "axis2_zero_part", [(2, 3, 4), (2, 3, 0), (2, 3, 5)], {"axis": 2},
     lambda a, at: np.concatenate(a, at["axis"])),
    ("concat", "single", [(4, 4)], {"axis": 0}, lambda a, at: np.concatenate(a, at["axis"])),
    ("pad", "2d", [(3, 4)], {"pads": [1, 0, 2, 3], "value": 0.0, "interior": [0, 0]}, None),
    ("pad", "interior", [(3, 4)], {"pads": [0, 1, 1, 0], "value": 1.0, "interior": [1, 2]}, None),
    ("pad", "1d_value", [(17,)], {"pads": [5, 2], "value": 3.0, "interior": [0]}, None),
    ("pad", "zero_size", [(0, 3)], {"pads": [1, 1, 0, 2], "value": 1.0, "interior": [0, 0]}, None),
    ("pad", "3d", [(2, 3, 4)], {"pads": [0, 1, 2, 1, 0, 3], "value": 0.0, "interior": [0, 1, 0]}, None),
    ("pad", "negative_zero_value", [(2, 3)], {"pads": [1, 1, 1, 1], "value": -0.0, "interior": [0, 0]}, None),
    ("copy", "3x5x7", [(3, 5, 7)], {}, lambda a, at: a[0].copy()),
]


DEFAULT_ORACLES = {"slice": lambda a, at: O.slice_(a[0], **at), "pad": lambda a, at: O.pad(a[0], **at)}


def line_cases():
    out = []
    for prim, label, shapes, attrs, oracle in LINES:
        oracle = oracle or DEFAULT_ORACLES[prim]
        p = PRIMITIVES[prim]
        for dt in (MOVE_DTYPES if p.movement else p.dtypes):
            if prim == "pad" and dt in ("float8e4m3fn", "int4") and attrs.get("value"):
                continue
            if label == "negative_zero_value" and not gdtype(dt).is_float:
                continue
            out.append(make_case(prim, dt, label, lambda rng, dt=dt, shapes=shapes: [_mv(dt, s, rng) for s in shapes],
                                 attrs, lambda a, at, o=oracle: (o(a, at), None)))
    return out


def index_cases():
    out = []
    for dt in MAIN:
        for it in ("int64", "int32"):
            for label, xs, ish, axis in (("axis0", (7, 5), (4,), 0), ("axis1_2d_idx", (3, 9, 2), (2, 3), 1),
                                         ("last_scalar_idx", (4, 6), (), 1), ("axis0_65", (65, 3), (130,), 0)):
                def mk(rng, dt=dt, xs=xs, ish=ish, axis=axis, it=it):
                    idx = rng.integers(0, xs[axis], size=ish)
                    if np.size(idx) > 2:  # the first and last valid index
                        idx.reshape(-1)[:2] = [0, xs[axis] - 1]
                    return [_mv(dt, xs, rng), np.asarray(idx).astype(it)]
                out.append(make_case("gather", dt, f"{label}/{it}", mk, {"axis": axis},
                                     lambda a, at: (np.take(a[0], a[1], axis=at["axis"]), None)))
        for label, xs, ish, bd, it in (("k2", (4, 5, 3), (6, 2), 0, "int64"), ("k1", (7, 3), (2, 2, 1), 0, "int64"),
                                       ("batch1", (2, 5, 3), (2, 4, 1), 1, "int64"),
                                       ("k_full", (3, 4), (5, 2), 0, "int64"),
                                       ("batch1/int32", (2, 5, 6), (2, 3, 1), 1, "int32")):
            def mk(rng, dt=dt, xs=xs, ish=ish, bd=bd, it=it):
                k = ish[-1]
                idx = np.stack([rng.integers(0, xs[bd + j], size=ish[:-1]) for j in range(k)], -1).astype(it)
                return [_mv(dt, xs, rng), idx]
            out.append(make_case("gather_nd", dt, label, mk, {"batch_dims": bd},
                                 lambda a, at: (O.gather_nd(a[0], a[1], **at), None)))
        for red in (("none",) if dt == "bool" else ("none", "add", "mul", "max", "min")):
            def mk(rng, dt=dt, red=red):
                x = _mv(dt, (6, 4), rng)
                rows = rng.permutation(6)[:3] if red == "none" else rng.integers(0, 6, size=5)  # duplicates combine
                idx = rows.reshape(-1, 1).astype(np.int64)
                return [x, idx, _mv(dt, (idx.shape[0], 4), rng)]
            out.append(make_case("scatter_nd", dt, f"rows/{red}", mk, {"reduction": red},
                                 lambda a, at: (O.scatter_nd(*a, **at), None)))
    return out


# -- the gate's holes (issue 26): large outputs, subnormal results, accumulation stress, NaN in max/min -------
#: more than 64 Ki elements in one compute output: a tiling bug past 65536 elements shows in every dtype class
BIG = 65536 + 101
FLOAT_TYPES = ("float32", "float16", "bfloat16", "float64")


def _finfo(dt):
    from .checker import finfo
    return finfo(gdtype(dt).np)


def large_output_cases():
    """A compute output over 64 Ki elements for every dtype class: elementwise add (and bool and), matmul, conv,
    pooling, a reduction, a cast; the quantized ones in quantized_cases."""
    out = []
    for dt in NUMERIC:
        out.append(make_case("add", dt, f"large_{BIG}", lambda rng, dt=dt: [full_range(dt, (BIG,), rng)
                                                                          if gdtype(dt).is_int else
                                                                          rand(dt, (BIG,), rng),
                                                                          full_range(dt, (BIG,), rng)
                                                                          if gdtype(dt).is_int else
                                                                          rand(dt, (BIG,), rng)], {},
                             lambda a, at: (O.binary("add", *a), None)))
    out.append(make_case("and", "bool", f"large_{BIG}", lambda rng: [rand("bool", (BIG,), rng),
                                                                      rand("bool", (BIG,), rng)], {},
                         lambda a, at: (O.binary("and", *a), None)))
    for dt in FLOAT_TYPES + ("int8", "uint8", "int32", "int64"):
        out.append(_matmul(dt, (257, 6), (6, 260), f"large/257x6@6x260"))
    for dt in ("float32", "float16", "float64", "int8", "int32"):
        xs, ws = (2, 2, 132, 130), (2, 2, 3, 3)  # 2 x 2 x 130 x 128 = 66560 outputs
        out.append(make_case("conv", dt, "large/2x2x130x128", lambda rng, dt=dt, xs=xs, ws=ws: [
            num_range(dt, rng, xs, True), num_range(dt, rng, ws, True), num_range(dt, rng, (ws[0],), True)],
            {"strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0], "group": 1},
            lambda a, at: O.conv(*a, **at), n_of=lambda a, at: int(np.prod(a[1].shape[1:])) + 1))
    pool = {"kernel": [2, 2], "strides": [2, 2], "dilations": [1, 1], "pads": [0, 0, 0, 0]}
    for prim, dts in (("max_pool", ("float32", "float16", "int8", "uint8")), ("avg_pool", ("float32", "float16"))):
        fn = O.max_pool if prim == "max_pool" else O.avg_pool
        for dt in dts:
            out.append(make_case(prim, dt, "large/2x2x260x260_k2s2", lambda rng, dt=dt: [
                num_range(dt, rng, (2, 2, 260, 260))], pool, lambda a, at, fn=fn: fn(a[0], **at),
                n_of=lambda a, at: 4))
    for dt in ("float32", "float16", "int32"):
        out.append(make_case("reduce_sum", dt, f"large/{BIG}x3/axes1", lambda rng, dt=dt: [
            _reduce_input("reduce_sum", dt, (BIG, 3), rng)], {"axes": [1], "keepdims": 0},
            lambda a, at: O.reduce("reduce_sum", a[0], **at), n_of=lambda a, at: 3))
    for dst in ("float16", "int8", "bfloat16"):
        out.append(make_case("cast", "float32", f"to_{dst}/large_{BIG}", lambda rng: [rand("float32", (BIG,), rng,
                                                                                            -100, 100)],
                             {"to": dst}, lambda a, at: (O.cast(a[0], at["to"]), None)))
    return out


def subnormal_cases():
    """Results in the subnormal range of their type from matmul, conv, average and max pooling and sums (products
    of two values near sqrt(smallest normal)): a backend keeps them, or declares flushes_subnormals() and returns
    zeros of their sign, consistently."""
    out = []
    for dt in FLOAT_TYPES:
        tiny = float(_finfo(dt).tiny)
        s = float(np.sqrt(tiny))

        def scaled(rng, shape, k, dt=dt):
            return (rng.uniform(-1, 1, shape) * k).astype(np.float64).astype(np.float32 if gdtype(dt).itemsize < 4
                                                                              else np.float64).astype(gdtype(dt).np)
        out.append(_matmul(dt, (9, 16), (16, 7), "subnormal_results/9x16@16x7", make=lambda rng, s=s, sc=scaled: [
            sc(rng, (9, 16), s / 4), sc(rng, (16, 7), s / 4)]))
        out.append(make_case("conv", dt, "subnormal_results/2d_pad1_batch2", lambda rng, s=s, sc=scaled, dt=dt: [
            sc(rng, (2, 3, 6, 6), s / 6), sc(rng, (4, 3, 3, 3), s / 6), np.zeros(4, gdtype(dt).np)],
            {"strides": [1, 1], "dilations": [1, 1], "pads": [1, 1, 1, 1], "group": 1},
            lambda a, at: O.conv(*a, **at), n_of=lambda a, at: int(np.prod(a[1].shape[1:])) + 1))
        pool = {"kernel": [2, 2], "strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 1, 1]}
        for prim, fn in (("max_pool", O.max_pool), ("avg_pool", O.avg_pool)):
            out.append(make_case(prim, dt, "subnormal_results/2x3x5x5", lambda rng, tiny=tiny, sc=scaled: [
                sc(rng, (2, 3, 5, 5), tiny)], pool, lambda a, at, fn=fn: fn(a[0], **at), n_of=lambda a, at: 4))
        out.append(make_case("reduce_sum", dt, "subnormal_results/3x4x5x6/axes13", lambda rng, tiny=tiny, sc=scaled: [
            sc(rng, RANK4, tiny / 8)], {"axes": [1, 3], "keepdims": 1},
            lambda a, at: O.reduce("reduce_sum", a[0], **at), n_of=lambda a, at: 24))
    return out


def stress_cases():
    """Data that stresses accumulation, judged against the float64 reference by the sum of |terms|: long
    reductions, cancellation (the exact result far below the terms), mixed magnitudes (terms over 12 decades)."""
    out = []

    def cancel(rng, n, dt, cols):
        half = rng.uniform(-1, 1, (n // 2, cols))
        b = np.concatenate([half, -half * (1 + rng.uniform(-1e-3, 1e-3, half.shape))])  # pairs cancelling
        return b.astype(np.float32).astype(gdtype(dt).np)

    def mixed(rng, shape, dt):
        lo, hi = (-4, 4) if dt in ("float16",) else (-6, 6)
        return (rng.uniform(-1, 1, shape) * 10.0 ** rng.uniform(lo, hi, shape)).astype(np.float32).astype(
            gdtype(dt).np)
    for dt in ("float32", "float16", "bfloat16", "float64"):
        k = 8192 if dt in ("float32", "float64") else 2048
        out.append(_matmul(dt, (4, k), (k, 3), f"stress/long_k{k}", make=lambda rng, dt=dt, k=k: [
            rand(dt, (4, k), rng, 0.0, 1.0), rand(dt, (k, 3), rng, -1.0, 1.0)]))
        out.append(_matmul(dt, (6, 512), (512, 5), "stress/cancellation", make=lambda rng, dt=dt: [
            np.ones((6, 512), gdtype(dt).np) + rand(dt, (6, 512), rng, 0, 0.01), cancel(rng, 512, dt, 5)]))
        out.append(_matmul(dt, (6, 300), (300, 7), "stress/mixed_magnitudes", make=lambda rng, dt=dt: [
            mixed(rng, (6, 300), dt), mixed(rng, (300, 7), dt)]))
        for label, mk in ((f"stress/long/3x{k * 8}/axes1", lambda rng, dt=dt, k=k: [rand(dt, (3, k * 8), rng, 0, 1)]),
                          ("stress/cancellation/5x2048/axes1", lambda rng, dt=dt: [cancel(rng, 2048, dt, 5).T.copy()]),
                          ("stress/mixed_magnitudes/7x999/axes1", lambda rng, dt=dt: [mixed(rng, (7, 999), dt)])):
            out.append(make_case("reduce_sum", dt, label, mk, {"axes": [1], "keepdims": 0},
                                 lambda a, at: O.reduce("reduce_sum", a[0], **at),
                                 n_of=lambda a, at: int(a[0].shape[1])))
    for dt in ("float32", "float64"):
        out.append(_conv(dt, "2d_pad1", "stress/long_c256_3x3", lambda rng, dt=dt: [
            rand(dt, (2, 256, 5, 5), rng, 0, 1), rand(dt, (4, 256, 3, 3), rng, -1, 1), rand(dt, (4,), rng)]))
        out.append(_conv(dt, "2d_pad1", "stress/mixed_magnitudes", lambda rng, dt=dt: [
            mixed(rng, (1, 3, 8, 8), dt), mixed(rng, (5, 3, 3, 3), dt), rand(dt, (5,), rng)]))
    return out


def nan_max_min_cases():
    """NaN in either operand of elementwise max and min over a vectorized, threaded size (the specials cases
    take every pair of special values over a few hundred elements): NaN wins (the contract), wherever it is."""
    out = []
    for prim in ("max", "min"):
        for dt in ("float32", "float16", "bfloat16", "float64"):
            def mk(rng, dt=dt):
                a, b = rand(dt, LARGE, rng), rand(dt, LARGE, rng)
                a = np.where(rng.random(LARGE) < 0.05, np.nan, a).astype(a.dtype)
                b = np.where(rng.random(LARGE) < 0.05, np.nan, b).astype(b.dtype)
                return [a, b]
            out.append(make_case(prim, dt, f"nan/{_label(LARGE)}", mk, {},
                                 lambda a, at, prim=prim: (O.binary(prim, *a), None), threads=2))
    return out


@functools.lru_cache(maxsize=2)
def _all(lines):
    return tuple(elementwise_cases() + cast_cases() + matmul_cases() + conv_cases() + pool_cases() + reduce_cases()
                 + line_cases() + index_cases() + quantized_cases(CONV, SMALL_MATMUL, POOL) + large_output_cases()
                 + subnormal_cases() + stress_cases() + nan_max_min_cases())


def cases():
    return list(_all(len(LINES)))  # a line added at run time (tests/core/test_adding_a_primitive.py) makes new cases
from .quantized_cases import cases as quantized_cases


def uncovered() -> list[str]:
    """Registered primitives no case exercises (a new primitive needs its line in LINES)."""
    return sorted(set(PRIMITIVES) - {c.subject for c in cases()})


def counts() -> dict:
    """Distinct geometries per windowed/accumulating primitive (what the issue's variety is measured by)."""
    return {"conv geometries": len(CONV), "matmul shapes": len({(sa, sb) for sa, sb in SMALL_MATMUL}
                                                                | {(m, k, n) for s in ("f32", "f64")
                                                                   for m, k, n in paths.gemm_shapes(s)}),
            "pooling configurations": len(POOL), "rank-4 axis combinations": len(ALL_AXES)}

