"""The quantized primitives' cases (profiles quantized-int8 and quantized-int16) and their integer oracles.

Cases are data: one line per parameter set or geometry, over the same geometries as the float primitives
(``tier_primitives`` passes its conv, matmul and pooling tables in): conv geometries x int8/uint8 inputs x per
tensor/per channel weights, matmul shapes, pooling windows, rescale between every pair of parameter sets,
saturation at both ends, offsets at the extremes of their dtype, fused clamps, the raw int32 accumulator.

The oracles implement the specification of glow_core/ops/primitives/quantized.py independently of its kernels:
integer arithmetic in int64 (convolution by kernel offset and einsum, not im2col and BLAS), round half to even
by floor and the parity of the tie (not numpy's rint), the int32 accumulator wrapped explicitly. On the reference
interpreter a case's expectation is its oracle, exactly; on any other backend the interpreter's kernel, within the
record's tolerance class (1 in the last place for requantized results).
"""
from __future__ import annotations

import numpy as np

from glow_core.ops.registry import PRIMITIVES

from . import oracles as O
from . import paths
from .cases import Case, case_seed
from .checker import compare
from .harness import backend_attrs, reference_primitive, run_primitive

F32 = np.float32
RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "int32": (-2 ** 31, 2 ** 31 - 1)}
ACC = {"int8": "int32", "uint8": "int32", "int16": "int64"}


# -- the oracles --------------------------------------------------------------------------------------------
def rne(v):
    """Round half to even: the floor, plus one above a half or at a half from an odd floor."""
    v = np.asarray(v, np.float64)
    f = np.floor(v)
    d = v - f
    return f + ((d > 0.5) | ((d == 0.5) & (np.mod(f, 2.0) == 1.0)))


def sat(y, dt, lo=None, hi=None):
    a, b = RANGE[dt]
    a, b = (a if lo is None else max(a, lo)), (b if hi is None else min(b, hi))
    return np.minimum(np.maximum(y, a), b).astype(dt)


def mult(*scales, out):
    """float32 of prod(scales) / out computed in float64."""
    return F32(np.prod([float(s) for s in scales]) / float(out))


def wrap(acc, dt):
    """Two's complement wrap of an int64 accumulator to ``dt``."""
    bits = {"int32": 32, "int64": 64}[dt]
    if bits == 64:
        return acc.astype(np.int64)
    return ((acc.astype(np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)


def requant(acc, m, offset, dt, lo=None, hi=None):
    """saturate(rne(float32(acc) * m) + offset): float32(acc) by way of the exact float64."""
    prod = acc.astype(np.float64).astype(F32) * np.asarray(m, F32)
    return sat(rne(prod.astype(np.float64)) + offset, dt, lo, hi)


def o_quantize(a, at):
    return sat(rne((a[0].astype(F32) / F32(at["scale"])).astype(np.float64)) + at["offset"], at["dtype"])


def o_dequantize(a, at):
    q, s, o = a
    shape = [1] * q.ndim
    if s.size > 1:
        shape[at["axis"]] = s.size
    return (q.astype(np.int64) - o.astype(np.int64).reshape(shape)).astype(F32) * s.astype(F32).reshape(shape)


def o_rescale(a, at):
    return requant(a[0].astype(np.int64) - at["in_offset"], mult(at["in_scale"], out=at["out_scale"]),
                   at["out_offset"], at["out_dtype"])


def _per_channel_mult(at, scale_key, w_scale, n):
    return np.array([mult(at[scale_key], s, out=at["out_scale"]) for s in np.broadcast_to(w_scale, (n,))], F32)


def o_qconv(a, at):
    x, w, bias, ws, wo = a
    f = w.shape[0]
    xs = x.astype(np.int64) - at["x_offset"]
    wsh = w.astype(np.int64) - np.broadcast_to(wo.astype(np.int64), (f,)).reshape((f,) + (1,) * (w.ndim - 1))
    acc = O.conv(xs, wsh, bias.astype(np.int64), at["strides"], at["dilations"], at["pads"], at["group"])[0]
    acc = wrap(acc, ACC[x.dtype.name])
    if at["out_dtype"] == ACC[x.dtype.name]:
        return acc
    m = _per_channel_mult(at, "x_scale", ws, f).reshape((1, f) + (1,) * (x.ndim - 2))
    return requant(acc, m, at["out_offset"], at["out_dtype"], at.get("clamp_min"), at.get("clamp_max"))


def o_qmatmul(a, at):
    x, y, bias, bs, bo = a
    n = y.shape[-1]
    acc = np.einsum("...ik,...kj->...ij", x.astype(np.int64) - at["a_offset"],
                    y.astype(np.int64) - np.broadcast_to(bo.astype(np.int64), (n,))) + bias.astype(np.int64)
    acc = wrap(acc, ACC[x.dtype.name])
    if at["out_dtype"] == ACC[x.dtype.name]:
        return acc
    return requant(acc, _per_channel_mult(at, "a_scale", bs, n), at["out_offset"], at["out_dtype"],
                   at.get("clamp_min"), at.get("clamp_max"))


def o_qadd(a, at):
    ma, mb = float(mult(at["a_scale"], out=at["out_scale"])), float(mult(at["b_scale"], out=at["out_scale"]))
    y = (a[0].astype(np.int64) - at["a_offset"]) * ma + (a[1].astype(np.int64) - at["b_offset"]) * mb
    return sat(rne(y) + at["out_offset"], at["out_dtype"], at.get("clamp_min"), at.get("clamp_max"))


def o_qmul(a, at):
    m = float(mult(at["a_scale"], at["b_scale"], out=at["out_scale"]))
    p = (a[0].astype(np.int64) - at["a_offset"]) * (a[1].astype(np.int64) - at["b_offset"])
    return sat(rne(p.astype(np.float64) * m) + at["out_offset"], at["out_dtype"], at.get("clamp_min"),
               at.get("clamp_max"))


def o_qavg_pool(a, at):
    x = a[0].astype(np.int64) - at["x_offset"]
    k, st, dl, pd = at["kernel"], at["strides"], at["dilations"], at["pads"]
    xp = O._pad_with(x, pd, 0, np.int64)
    ones = O._pad_with(np.ones((1, 1) + x.shape[2:], np.int64), pd, 1 if at["count_include_pad"] else 0, np.int64)
    acc = cnt = None
    for _, sl, _ in O._windows(xp, k, st, dl):
        acc = xp[sl].copy() if acc is None else acc + xp[sl]
        cnt = ones[sl].copy() if cnt is None else cnt + ones[sl]
    m = np.vectorize(lambda c: mult(at["x_scale"], out=float(at["out_scale"]) * c), otypes=[F32])(cnt)
    return requant(wrap(acc, "int32"), m, at["out_offset"], at["out_dtype"])


def o_lookup(a, at):
    x, table = a
    return table[x.astype(np.int64) - RANGE[x.dtype.name][0]]


ORACLES = {"quantize": o_quantize, "dequantize": o_dequantize, "rescale": o_rescale, "qconv": o_qconv,
           "qmatmul": o_qmatmul, "qadd": o_qadd, "qmul": o_qmul, "qavg_pool": o_qavg_pool, "lookup": o_lookup}


# -- operands -------------------------------------------------------------------------------------------------
def ints(dt, shape, rng):
    lo, hi = RANGE[dt]
    x = rng.integers(lo, hi, size=shape, endpoint=True)
    flat = x.reshape(-1)
    if flat.size >= 2:  # both ends of the range, always
        flat[0], flat[-1] = lo, hi
    return x.astype(dt)


def offset(dt, rng, extreme=None):
    lo, hi = RANGE[dt]
    if extreme is not None:
        return lo if extreme == "low" else hi
    return int(rng.integers(max(lo, -20), min(hi, 20) if dt != "uint8" else 200, endpoint=True))


def case(prim, dt, variant, make, consts=(), profiles=None, threads=1):
    """A case: ``make(rng)`` -> (operands, attributes); ``consts``: operand indices that are constants; compiled
    for ``threads`` threads."""
    case_id = f"primitives/{prim}/{dt}/{variant}" + (f"/t{threads}" if threads != 1 else "")
    tol = PRIMITIVES[prim].tolerance

    def run(ctx):
        seed = case_seed(case_id, ctx.seed)
        arrays, attrs = make(np.random.default_rng(seed))
        attrs = backend_attrs(ctx.backend, prim, attrs)
        shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in arrays)
        desc = (f"primitive {prim} dtype {dt}: operands {shapes}, attributes {attrs}, seed {seed}"
                + (f", num_threads {threads}" if threads != 1 else ""))
        got = run_primitive(ctx, prim, arrays, attrs, desc, ctx.rerun(case_id), threads, consts=consts)
        want = [ORACLES[prim](arrays, attrs)] if ctx.is_reference else reference_primitive(prim, arrays, attrs)
        for i, (g, w) in enumerate(zip(got, want)):
            compare(g, np.asarray(w), "quantized-reference" if ctx.is_reference else tol, desc, ctx.rerun(case_id),
                    name=f"output y{i}")
    prof = profiles or (("quantized-int16",) if "int16" in dt else ("quantized-int8",))
    # make/attrs in the float cases' form (tier_negative builds refusal cases from them)
    seed0 = case_seed(case_id, 0)
    return Case(case_id, "primitives", prim, dt, run, prof, {"variant": variant, "tolerance": tol,
                                                             "make": lambda rng: make(rng)[0],
                                                             "attrs": make(np.random.default_rng(seed0))[1]})


# (dtype, scale, offset) parameter sets: offsets at both extremes, scales large and small
PARAMS = [("int8", 0.05, -3), ("int8", 0.013, -128), ("int8", 0.2, 127), ("uint8", 0.02, 0), ("uint8", 0.03, 255),
          ("uint8", 0.1, 128), ("int16", 0.0007, 5), ("int16", 0.00011, -32768)]


def _label(p):
    return f"{p[0]}_s{p[1]:g}_o{p[2]}"


def quantize_cases():
    out = []
    for dt, s, o in PARAMS:
        lo, hi = RANGE[dt]
        span = (hi - lo) * s

        def mk(rng, dt=dt, s=s, o=o, span=span):  # values well beyond both ends: saturation
            return [rng.uniform(-1.5 * span, 1.5 * span, (5, 33)).astype(F32)], {"scale": s, "offset": o, "dtype": dt}
        out.append(case("quantize", "float32", f"to_{_label((dt, s, o))}", mk))

    def ties(rng):  # x / scale exactly k + 0.5: rounding half to even
        k = rng.integers(-200, 200, (64,))
        return [((k + 0.5) * 0.25).astype(F32)], {"scale": 0.25, "offset": 1, "dtype": "int8"}
    out.append(case("quantize", "float32", "ties_to_even", ties))
    return out


def dequantize_cases():
    out = []
    for dt in ("int8", "uint8", "int16", "int32"):
        def per_tensor(rng, dt=dt):
            return [ints(dt, (3, 17), rng), np.array([0.037], F32), np.array([offset(dt, rng)], np.int32)], {"axis": 0}

        def per_axis(rng, dt=dt):  # axis 1 as long as the last: parameters along the wrong axis still fit
            return [ints(dt, (2, 5, 5), rng), rng.uniform(0.001, 0.1, 5).astype(F32),
                    np.array([offset(dt, rng) for _ in range(5)], np.int32)], {"axis": 1}
        out += [case("dequantize", dt, "per_tensor", per_tensor, consts=(1, 2)),
                case("dequantize", dt, "per_axis1", per_axis, consts=(1, 2))]
    return out


def rescale_cases():
    out = []
    for pin in PARAMS[::2] + PARAMS[1:2]:
        for pout in PARAMS:
            def mk(rng, pin=pin, pout=pout):
                return [ints(pin[0], (4, 37), rng)], {"in_scale": pin[1], "in_offset": pin[2], "out_scale": pout[1],
                                                      "out_offset": pout[2], "out_dtype": pout[0]}
            out.append(case("rescale", pin[0], f"{_label(pin)}_to_{_label(pout)}", mk))
    return out


def _weights(rng, shape, channels, per_channel, extreme=False):
    w = ints("int8", shape, rng)
    n = channels if per_channel else 1
    scales = rng.uniform(0.002, 0.05, n).astype(F32)
    offs = np.array([(-128 if i % 2 else 127) if extreme else int(rng.integers(-5, 5, endpoint=True))
                     for i in range(n)], np.int32)
    return w, scales, offs


def engine_conv_geometries() -> dict:
    """name -> (geometry as the float tier's, threads): the CPU int8 engine's paths the float geometries do not
    reach: input rows of at least 16 positions (the conv transform's 16-position blocks at stride 1 and 2, with
    scalar heads and tails), one of them at 2 threads past the engine's threading threshold."""
    o2 = [1, 1, 1, 1]
    rows = paths.int8_parallel_conv_rows(16, 16, 9, 48)
    return {"2d_rows40_s1": (((1, 8, 5, 40), (6, 8, 3, 3), [1, 1], [1, 1], o2, 1), 1),
            "2d_rows70_s2": (((1, 4, 7, 70), (5, 4, 3, 3), [2, 2], [1, 1], o2, 1), 1),
            "2d_rows48_parallel": (((1, 16, rows, 48), (16, 16, 3, 3), [1, 1], [1, 1], o2, 1), 2)}


def qconv_cases(geometries):
    out = []
    variants = [(dt, pc) for dt in ("int8", "uint8") for pc in (False, True)]
    lines = [(name, geo, 1, variants) for name, geo in geometries.items()]
    lines += [(name, geo, threads, [("int8", True), ("uint8", False)])
              for name, (geo, threads) in engine_conv_geometries().items()]
    for name, (xs, ws, st, dl, pd, g), threads, kinds in lines:
        for dt, pc in kinds:
            def mk(rng, xs=xs, ws=ws, st=st, dl=dl, pd=pd, g=g, dt=dt, pc=pc):
                w, s, o = _weights(rng, ws, ws[0], pc)
                x = ints(dt, xs, rng)
                k = int(np.prod(ws[1:]))
                attrs = {"strides": st, "dilations": dl, "pads": pd, "group": g, "x_scale": 0.02,
                         "x_offset": offset(dt, rng), "out_scale": float(0.02 * 0.03 * np.sqrt(k) * 40),
                         "out_offset": offset(dt, rng), "out_dtype": dt}
                return [x, w, rng.integers(-3000, 3000, ws[0]).astype(np.int32), s, o], attrs
            out.append(case("qconv", dt, f"{name}/{'per_channel' if pc else 'per_tensor'}", mk, consts=(1, 2, 3, 4),
                            threads=threads))
    xs, ws, st, dl, pd, g = geometries["2d_pad1"]
    specials = {
        "offsets_at_extremes": dict(x_off="low", w_extreme=True, out_off="high"),
        "saturate_both_ends": dict(out_scale=1e-4),
        "fused_relu_clamp": dict(clamp=True),
        "int32_accumulator": dict(acc=True),
        "ties_multiplier_half": dict(ties=True),  # x_scale * w_scale / out_scale = 0.5: rounding ties
    }
    for label, sp in specials.items():
        for dt in ("int8", "uint8"):
            def mk(rng, dt=dt, sp=sp):
                w, s, o = _weights(rng, ws, ws[0], True, sp.get("w_extreme", False))
                attrs = {"strides": st, "dilations": dl, "pads": pd, "group": g, "x_scale": 0.05,
                         "x_offset": offset(dt, rng, sp.get("x_off")), "out_scale": sp.get("out_scale", 0.5),
                         "out_offset": offset(dt, rng, sp.get("out_off")), "out_dtype": ACC[dt] if sp.get("acc") else dt}
                if sp.get("clamp"):
                    attrs.update(clamp_min=attrs["out_offset"], clamp_max=attrs["out_offset"] + 40)
                if sp.get("ties"):
                    s[:] = 0.5
                    attrs.update(x_scale=0.25, out_scale=0.25)
                    w = (w // 8).astype(np.int8)  # small sums: the half-integer products stay in range
                return [ints(dt, xs, rng), w, rng.integers(-50000, 50000, ws[0]).astype(np.int32), s, o], attrs
            out.append(case("qconv", dt, f"2d_pad1/{label}", mk, consts=(1, 2, 3, 4)))

    def mk16(rng):
        w = ints("int16", ws, rng)
        attrs = {"strides": st, "dilations": dl, "pads": pd, "group": g, "x_scale": 0.001, "x_offset": 7,
                 "out_scale": 0.3, "out_offset": -11, "out_dtype": "int16"}
        return [ints("int16", xs, rng), w, rng.integers(-10 ** 9, 10 ** 9, ws[0]).astype(np.int64),
                rng.uniform(1e-4, 1e-3, ws[0]).astype(F32), np.zeros(ws[0], np.int32)], attrs
    out.append(case("qconv", "int16", "2d_pad1/per_channel", mk16, consts=(1, 2, 3, 4)))
    return out


def qmatmul_cases(shapes):
    out = []
    for sa, sb in shapes:
        label = f"{'x'.join(map(str, sa))}@{'x'.join(map(str, sb))}"
        # (a dtype, b dtype, per column, b constant): a constant b is the CPU int8 engine's prepacked GEMM, its
        # non-zero weight offsets the per-row input sums (a b computed at run time takes plain int32 loops)
        for da, db, pc, cb in (("int8", "int8", True, False), ("uint8", "int8", False, False),
                               ("uint8", "uint8", True, False), ("int8", "uint8", False, False),
                               ("uint8", "uint8", True, True), ("int8", "int8", False, True)):
            def mk(rng, sa=sa, sb=sb, da=da, db=db, pc=pc):
                n = sb[-1]
                k = max(sa[-1], 1)
                nn = n if pc else 1
                attrs = {"a_scale": 0.03, "a_offset": offset(da, rng), "out_scale": float(0.03 * 0.02 * np.sqrt(k) * 60),
                         "out_offset": offset(da, rng), "out_dtype": da}
                return [ints(da, sa, rng), ints(db, sb, rng), rng.integers(-2000, 2000, n).astype(np.int32),
                        rng.uniform(0.005, 0.05, nn).astype(F32),
                        np.array([offset(db, rng) for _ in range(nn)], np.int32)], attrs
            out.append(case("qmatmul", da, f"{label}/b_{db}{'_const' if cb else ''}/"
                            f"{'per_column' if pc else 'per_tensor'}", mk, consts=(1, 2, 3, 4) if cb else (2, 3, 4)))

    def mk_extreme(rng, acc=False):
        attrs = {"a_scale": 0.1, "a_offset": -128, "out_scale": 1e-3, "out_offset": 127,
                 "out_dtype": "int32" if acc else "int8", "clamp_min": None if acc else -100}
        return [ints("int8", (9, 33), rng), ints("int8", (33, 7), rng), np.zeros(7, np.int32),
                np.full(7, 0.1, F32), np.array([-128, 127, 0, -128, 127, 0, 1], np.int32)], attrs
    out.append(case("qmatmul", "int8", "9x33@33x7/extremes_saturate_clamp", mk_extreme, consts=(2, 3, 4)))
    out.append(case("qmatmul", "int8", "9x33@33x7/int32_accumulator", lambda r: mk_extreme(r, True), consts=(2, 3, 4)))
    return out


def binary_cases():
    out = []
    pairs = [(PARAMS[0], PARAMS[3], PARAMS[0]), (PARAMS[1], PARAMS[2], PARAMS[4]), (PARAMS[5], PARAMS[4], PARAMS[1]),
             (PARAMS[6], PARAMS[0], PARAMS[7]), (PARAMS[3], PARAMS[3], PARAMS[5])]
    for prim in ("qadd", "qmul"):
        for pa, pb, po in pairs:
            shapes = (((7,), 1), ((3, 5, 7), 1), ((2, 3, 4, 17), 1), ((paths.int8_parallel_elements(),), 2))
            for shape, threads in shapes:
                def mk(rng, pa=pa, pb=pb, po=po, shape=shape, prim=prim):
                    out_scale = po[1] * (1 if prim == "qadd" else 40)
                    return [ints(pa[0], shape, rng), ints(pb[0], shape, rng)], {
                        "a_scale": pa[1], "a_offset": pa[2], "b_scale": pb[1], "b_offset": pb[2], "out_scale": out_scale,
                        "out_offset": po[2], "out_dtype": po[0]}
                label = f"{_label(pa)}_{_label(pb)}_to_{_label(po)}/{'x'.join(map(str, shape))}"
                out.append(case(prim, pa[0], label, mk, threads=threads))

        def clamp(rng, prim=prim):
            return [ints("int8", (65,), rng), ints("int8", (65,), rng)], {
                "a_scale": 0.05, "a_offset": 0, "b_scale": 0.07, "b_offset": 3, "out_scale": 0.04, "out_offset": -128,
                "out_dtype": "int8", "clamp_min": -128, "clamp_max": 20}
        out.append(case(prim, "int8", "fused_relu_clamp/65", clamp))
    return out


def qavg_pool_cases(geometries):
    out = []
    for name, (xs, k, st, dl, pd) in geometries.items():
        for dt in ("int8", "uint8"):
            for cip in (0, 1):
                def mk(rng, xs=xs, k=k, st=st, dl=dl, pd=pd, dt=dt, cip=cip):
                    return [ints(dt, xs, rng)], {"kernel": k, "strides": st, "dilations": dl, "pads": pd,
                                                 "count_include_pad": cip, "x_scale": 0.04,
                                                 "x_offset": offset(dt, rng), "out_scale": 0.03,
                                                 "out_offset": offset(dt, rng), "out_dtype": dt}
                out.append(case("qavg_pool", dt, f"{name}/cip{cip}", mk))
    return out


def lookup_cases():
    out = []
    for dt in ("int8", "uint8"):
        for tdt in ("int8", "uint8", "int16"):
            def mk(rng, dt=dt, tdt=tdt):
                return [ints(dt, (4, 65), rng), ints(tdt, (256,), rng)], {"out_scale": 0.01, "out_offset": 0}
            out.append(case("lookup", dt, f"table_{tdt}/4x65", mk, consts=(1,)))
    return out


def cases(conv_geometries, matmul_shapes, pool_geometries):
    """Every quantized case, over the float primitives' conv geometries, matmul shapes and pooling windows."""
    mm = [(a, b) for a, b in matmul_shapes if len(a) >= 2 and 0 not in a + b]
    return (quantize_cases() + dequantize_cases() + rescale_cases() + qconv_cases(conv_geometries)
            + qmatmul_cases(mm) + binary_cases() + qavg_pool_cases(pool_geometries) + lookup_cases())
