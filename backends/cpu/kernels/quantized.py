"""The quantized primitives in the CPU backend's code generation.

conv, matmul (with a constant second operand), rescale, add, mul, average pooling, 8-bit lookup tables and the
8-bit max pooling of quantized graphs (the float primitive ``max_pool`` keeps its input's parameters) run the
int8 engine's kernels (int8_engine: vpdpbusd register tiles, requantization in the epilogue); their weights are
packed, and their bias and zero-point terms folded into per-channel corrections, at compile time (derived
constants). A conv or matmul whose weight is computed at run time (a matmul of two activations) runs plain int32
loops (qconv_loops.c.j2, qmatmul_loops.c.j2); quantize and dequantize are
elementwise expressions. Everything follows glow_core/ops/primitives/quantized.py bit for bit: the multipliers
come from its ``multiplier`` helpers, and the kernels round half to even as its reference kernels do.

3-d convolutions and average pools run direct loops too (qconv_loops.c.j2, qavg_pool_loops.c.j2), and so do int16
convs and matmuls (the quantized-int16 profile), accumulating in int64 as the reference does; int16 add and mul
are the engine's elementwise kernels with int64 products. Other int16 primitives (average pooling, lookup tables)
are refused by ``supported``; the quantizer then keeps those nodes in float.
"""
from __future__ import annotations

import hashlib
from math import prod

import numpy as np

from glow_core.backend import NodeInfo, Unsupported
from glow_core.errors import BackendError
from glow_core.ops.primitives.quantized import ACC, multiplier, multipliers, qrange

from ..int8 import engine as E
from ..int8.common import c_float
from .codegen import BAKED, ScratchLayout, kernel, kernel_scratch
from .ctypes_map import ctype
from .window import pool

#: The quantized primitives the backend runs.
INT8_OPS = frozenset(("quantize", "dequantize", "rescale", "qconv", "qmatmul", "qadd", "qmul", "qavg_pool",
                      "lookup"))
_EIGHT = ("int8", "uint8")
#: Activation dtypes per primitive beyond _EIGHT: int16 convs and matmuls (direct loops, int64 accumulator) and
#: int16 add and mul (the engine's elementwise kernels).
_WIDE = {"qconv": ("int16",), "qmatmul": ("int16",), "qadd": ("int16",), "qmul": ("int16",)}


def supported(info: NodeInfo) -> "bool | Unsupported":
    """Whether the backend runs quantized primitive ``info`` (an Unsupported with the reason when not)."""
    op, ins, outs = info.op, info.in_dtypes, info.out_dtypes
    if op == "quantize":
        return ins[0] in ("float32", "float16", "bfloat16") and outs[0] in ("int8", "uint8", "int16")
    if op in ("dequantize", "rescale"):
        return True
    accepted = _EIGHT + _WIDE.get(op, ())
    if ins[0] not in accepted:
        return Unsupported(f"cpu backend: {op} on {ins[0]} (accepted: {', '.join(accepted)})")
    if op in ("qadd", "qmul"):
        return ins[1] in accepted or Unsupported(f"cpu backend: {op} with a {ins[1]} operand "
                                                 f"({', '.join(accepted)})")
    if op in ("qconv", "qavg_pool") and len(info.attrs.get("strides", ())) > 3:
        return Unsupported(f"cpu backend: {op} over {len(info.attrs['strides'])} spatial dims (1-d to 3-d)")
    return True


def _requant(attrs) -> E.Requant:
    return E.Requant(attrs["out_dtype"], int(attrs["out_offset"]), attrs.get("clamp_min"), attrs.get("clamp_max"))


def _window3(attrs, x_shape, out_shape, kernel) -> dict:
    """A 1-d, 2-d or 3-d window's geometry as 3-d (leading dims of size 1): sp, o, k, s, d, pad, pad_end."""
    n = len(kernel)
    lead = 3 - n
    pads = attrs["pads"]
    return dict(sp=[1] * lead + list(x_shape[2:]), o=[1] * lead + list(out_shape[2:]), k=[1] * lead + list(kernel),
                s=[1] * lead + list(attrs["strides"]), d=[1] * lead + list(attrs["dilations"]),
                pad=[0] * lead + list(pads[:n]), pad_end=[0] * lead + list(pads[n:]))


def _geometry(attrs):
    return attrs["strides"], attrs["dilations"], attrs["pads"]


def _weight_params(ki):
    """A conv's or matmul's (multipliers [F], weight offsets [F], output Requant) from its constant weight
    scales and offsets (the multipliers are 1 and the Requant the accumulator's when the result is the
    accumulator)."""
    if 3 not in ki.values or 4 not in ki.values:
        raise BackendError(f"cpu backend: {ki.op} needs constant weight scales and offsets")
    a = ki.attrs
    f = ki.ins[1].type.shape[0 if ki.op == "qconv" else -1]
    ws = ki.values[3].reshape(-1)
    wo = np.broadcast_to(ki.values[4].reshape(-1).astype(np.int64), (f,))
    if a["out_dtype"] == ACC[ki.ins[0].type.dtype.name]:
        return np.ones(f, np.float32), wo, E.Requant(a["out_dtype"])
    xs = a["x_scale"] if ki.op == "qconv" else a["a_scale"]
    return np.broadcast_to(multipliers(xs, ws, a["out_scale"]), (f,)), wo, _requant(a)


def _residual(ki) -> "E.ResidualAdd | None":
    """A qconv's fused residual qadd (int8_fusion: attribute ``residual`` = the qadd's attributes and the conv
    output's input slot ``conv_slot``; B is the conv's input 5)."""
    r = ki.attrs.get("residual")
    if r is None:
        return None
    c, b = ("a", "b") if r["conv_slot"] == 0 else ("b", "a")
    return E.ResidualAdd(ki.ins[5].type.dtype.name, int(r[f"{b}_offset"]),
                         multiplier(r[f"{c}_scale"], out_scale=r["out_scale"]),
                         multiplier(r[f"{b}_scale"], out_scale=r["out_scale"]), _requant(r), r["conv_slot"])


_PLANS: dict = {}


def plan(ki, num_threads: int):
    """The int8 engine's kernel of instruction ``ki`` (memoized by its signature), or None when ``ki`` does not
    run on the engine (quantize, dequantize, wider lookup tables, 3-d windows, a weight computed at run time);
    BackendError when the engine declines it."""
    key = (ki.signature, num_threads)
    if key not in _PLANS:
        if len(_PLANS) > 4096:
            _PLANS.clear()
        _PLANS[key] = _plan(ki, num_threads)
    k = _PLANS[key]
    if k is not None and not k:
        raise BackendError(f"cpu backend: {ki.op}: {k.reason}")
    return k


def _plan(ki, num_threads: int):
    a = ki.attrs
    ins, out = ki.ins, ki.outs[0]
    x = ins[0]
    xd = x.type.dtype.name
    common = dict(num_threads=num_threads, name="GLOW_KERNEL_NAME_q")
    if ki.op in ("qconv", "qavg_pool") and x.type.rank > 4:
        return None
    if ki.op in BAKED:
        w = ins[1]
        if not w.const or xd not in _EIGHT:
            return None
        m, wo, y = _weight_params(ki)
        wargs = dict(w_dtype=w.type.dtype.name, w_offset=wo if len(set(wo.tolist())) > 1 else int(wo[0]),
                     multiplier=m if len(set(m.tolist())) > 1 else float(m[0]), y=y, **common)
        if ki.op == "qconv":
            return E.plan_qconv(x.type.shape, w.type.shape, *_geometry(a), a.get("group", 1), x_dtype=xd,
                                x_offset=int(a["x_offset"]), residual=_residual(ki), **wargs)
        return E.plan_qmatmul(x.type.shape, w.type.shape, a_dtype=xd, a_offset=int(a["a_offset"]), **wargs)
    if ki.op == "rescale":
        return E.plan_qrescale(x.type.shape, x_dtype=xd, x_offset=int(a["in_offset"]),
                               multiplier=multiplier(a["in_scale"], out_scale=a["out_scale"]), y=_requant(a),
                               **common)
    if ki.op in ("qadd", "qmul"):
        ab = dict(a_dtype=xd, a_offset=int(a["a_offset"]), b_dtype=ins[1].type.dtype.name,
                  b_offset=int(a["b_offset"]), y=_requant(a), **common)
        if ki.op == "qadd":
            return E.plan_qadd(x.type.shape, a_multiplier=multiplier(a["a_scale"], out_scale=a["out_scale"]),
                               b_multiplier=multiplier(a["b_scale"], out_scale=a["out_scale"]), **ab)
        return E.plan_qmul(x.type.shape, multiplier=multiplier(a["a_scale"], a["b_scale"], out_scale=a["out_scale"]),
                           **ab)
    if ki.op == "qavg_pool":
        return E.plan_qpool("avg", x.type.shape, a["kernel"], *_geometry(a), x_dtype=xd,
                            x_offset=int(a["x_offset"]), y=_requant(a),
                            count_include_pad=a.get("count_include_pad", 0), **common)
    if ki.op == "max_pool" and xd in _EIGHT and x.type.rank in (3, 4):
        return E.plan_qpool("max", x.type.shape, a["kernel"], *_geometry(a), x_dtype=xd, **common) or None
    if ki.op == "lookup" and out.type.dtype.name in _EIGHT:
        return E.plan_qlookup(x.type.shape, x_dtype=xd, y_dtype=out.type.dtype.name, **common)
    return None


def engine_conv(ki, num_threads: int) -> bool:
    """Whether qconv ``ki`` runs on the int8 engine with an 8-bit requantized output (a residual add may then be
    fused into it: int8_fusion)."""
    if ki.op != "qconv" or ki.outs[0].type.dtype.name not in _EIGHT:
        return False
    try:
        return plan(ki, num_threads) is not None
    except BackendError:
        return False


def scratch_bytes(ki) -> int:
    """The @scratch bytes of a quantized instruction (the engine's conv transform planes, matmul row panels)."""
    k = plan(ki, 1)
    return k.scratch_bytes if k is not None else 0


@kernel_scratch(*BAKED)
def quantized_scratch(ki) -> ScratchLayout:
    n = scratch_bytes(ki)
    return ScratchLayout({"int8": 0}, n) if n else ScratchLayout({}, 0)


def _engine(gen, ki, fn, call_args: list[str]) -> str:
    """The engine kernel's source and the GLOW_KERNEL wrapper calling it on ``call_args``."""
    k = plan(ki, gen.nt)
    gen.choice = k.describe
    return (k.source + f"\nGLOW_KERNEL int {fn}(uint8_t *const *p) {{\n  {fn}_q({', '.join(call_args)});\n"
            f"  return 0;\n}}\n")


def _weights(gen, ki, fn):
    """conv and matmul with a constant weight: packed weights, corrections and multipliers (derived)."""
    k = plan(ki, gen.nt)
    w, bias, ws, wo = ki.ins[1:5]
    tag = "int8 pack " + hashlib.sha1(k.source.encode()).hexdigest()

    def make(arrays):
        c = k.pack(arrays[0], arrays[1])
        return [c.weights, c.corrections, c.multipliers]
    wp, corr, mult = gen.derive_many((w.slot, bias.slot, ws.slot, wo.slot), make, tag, 3)
    residual = [gen.ptr(ki.ins[5]), gen.ptr(ki.outs[1])] if k.kind == "conv+add" else []
    return _engine(gen, ki, fn, [f"(const uint8_t *){gen.ptr(ki.ins[0])}", f"(const int8_t *){wp}",
                                 f"(const int32_t *){corr}", f"(const float *){mult}", gen.ptr(ki.outs[0]),
                                 f"(uint8_t *){gen.scratch_ptr() if k.scratch_bytes else '0'}", *residual])


def _loops(gen, ki, fn, template: str, **ctx) -> str:
    """A conv or matmul whose weight is computed at run time: plain int32 loops (``template``)."""
    x, w, bias = ki.ins[:3]
    out = ki.outs[0]
    m, wo, y = _weight_params(ki)
    acc = ACC[x.type.dtype.name]
    requant = y.dtype != acc
    flo, fhi = y.float_bounds() if requant else ("0.0", "0.0")
    why = "int16 operands" if acc == "int64" else "the weight is not constant, or 3-d"
    gen.choice = f"{acc} loops ({'requantized' if requant else f'{acc} result'}; {why})"
    return gen.t(template, acc_s=f"{acc}_t", acc_u=f"u{acc}_t",
                  fn=fn, x_t=ctype(x.type.dtype.name).storage, w_t=ctype(w.type.dtype.name).storage,
                  y_t=ctype(out.type.dtype.name).storage, x_ptr=gen.ptr(x), w_ptr=gen.ptr(w),
                  bias_ptr=gen.ptr(bias), y_ptr=gen.ptr(out), w_off=[str(int(v)) for v in wo],
                  mult=[c_float(v) for v in m], requant=requant, flo=flo, fhi=fhi, y_off=y.offset, **ctx)


@kernel("qconv")
def qconv(gen, ki, fn):
    if plan(ki, gen.nt) is not None:
        return _weights(gen, ki, fn)
    x, w = ki.ins[:2]
    a = ki.attrs
    g = _window3(a, x.type.shape, ki.outs[0].type.shape, w.type.shape[2:])
    return _loops(gen, ki, fn, "qconv_loops.c.j2", x_off=int(a["x_offset"]), n=x.type.shape[0],
                       c=x.type.shape[1], f=w.type.shape[0], cg=w.type.shape[1],
                       fg=w.type.shape[0] // a.get("group", 1), work=ki.outs[0].type.numel * prod(w.type.shape[1:]),
                       **g)


@kernel("qmatmul")
def qmatmul(gen, ki, fn):
    if plan(ki, gen.nt) is not None:
        return _weights(gen, ki, fn)
    a = ki.ins[0]
    m, k = a.type.shape[-2:]
    return _loops(gen, ki, fn, "qmatmul_loops.c.j2", a_off=int(ki.attrs["a_offset"]),
                       batch=prod(a.type.shape[:-2]), m=m, k=k, n=ki.ins[1].type.shape[-1])


@kernel("rescale")
def rescale(gen, ki, fn):
    return _engine(gen, ki, fn, [gen.ptr(ki.ins[0]), gen.ptr(ki.outs[0])])


@kernel("qadd", "qmul")
def qadd(gen, ki, fn):
    return _engine(gen, ki, fn, [gen.ptr(ki.ins[0]), gen.ptr(ki.ins[1]), gen.ptr(ki.outs[0])])


@kernel("qavg_pool")
def qavg_pool(gen, ki, fn):
    a = ki.attrs
    x, out = ki.ins[0], ki.outs[0]
    table = E.avg_pool_multipliers(a["x_scale"], a["out_scale"], prod(a["kernel"]))
    (mult,) = gen.derive_many((), lambda arrays: [table], "avg pool multipliers " + table.tobytes().hex(), 1)
    if plan(ki, gen.nt) is not None:
        return _engine(gen, ki, fn, [gen.ptr(x), f"(const float *){mult}", gen.ptr(out)])
    y = _requant(a)
    flo, fhi = y.float_bounds()
    gen.choice = "int32 loops over 3-d windows"
    return gen.t("qavg_pool_loops.c.j2",
                  fn=fn, x_t=ctype(x.type.dtype.name).storage, y_t=ctype(out.type.dtype.name).storage,
                  x_ptr=gen.ptr(x), y_ptr=gen.ptr(out), mult_ptr=mult, nc=prod(x.type.shape[:2]),
                  x_off=int(a["x_offset"]), include_pad=bool(a.get("count_include_pad", 0)), flo=flo, fhi=fhi,
                  y_off=y.offset, work=out.type.numel * prod(a["kernel"]),
                  **_window3(a, x.type.shape, out.type.shape, a["kernel"]))


@kernel("max_pool")
def max_pool(gen, ki, fn):
    """8-bit 1-d and 2-d max pooling on the int8 engine (rows, then columns); every other one generic."""
    if plan(ki, gen.nt) is None:
        return pool(gen, ki, fn)
    return _engine(gen, ki, fn, [gen.ptr(ki.ins[0]), "(const float *)0", gen.ptr(ki.outs[0])])


@kernel("lookup")
def lookup(gen, ki, fn):
    if plan(ki, gen.nt) is None:  # a wider table: an indexed load
        x, table, out = ki.ins[0], ki.ins[1], ki.outs[0]
        xt, ot = ctype(x.type.dtype.name).storage, ctype(out.type.dtype.name).storage
        gen.choice = f"lookup table of {out.type.dtype.name}"
        return gen.t("elementwise.c.j2",
                      fn=fn, decls=[f"{ot} *out = {gen.tptr(out)}", f"const {xt} *in0 = {gen.tptr(x, True)}",
                                    f"const {ot} *tab = {gen.tptr(table, True)}"],
                      loads=[], store=f"out[i] = tab[(int32_t)in0[i] - ({qrange(x.type.dtype.name)[0]})]",
                      n=out.type.numel, parallel=gen.nt > 1, checks=[], err=0)
    return _engine(gen, ki, fn, [gen.ptr(ki.ins[0]), f"(const uint8_t *){gen.ptr(ki.ins[1])}",
                                 gen.ptr(ki.outs[0])])


@kernel("quantize")
def quantize(gen, ki, fn):
    """saturate(rint(x / scale) + offset), the division in float32 (clamped before the conversion: the
    bounds are integers, so clamping and rounding commute)."""
    x, out = ki.ins[0], ki.outs[0]
    a = ki.attrs
    lo, hi = qrange(out.type.dtype.name)
    off = int(a["offset"])
    s = c_float(a["scale"])
    ct = ctype(x.type.dtype.name)
    ot = ctype(out.type.dtype.name).storage
    gen.choice = "quantize: float32 division, rint, saturate"
    return gen.t("elementwise.c.j2",
                  fn=fn, decls=[f"{ot} *out = {gen.tptr(out)}", f"const {ct.storage} *in0 = {gen.tptr(x, True)}"],
                  loads=[f"float f = rintf((float)({ct.ld('in0[i]')}) / {s})",
                         f"f = f < {float(lo - off)!r}f ? {float(lo - off)!r}f : f",
                         f"f = f > {float(hi - off)!r}f ? {float(hi - off)!r}f : f"],
                  store=f"out[i] = ({ot})((int32_t)f + {off})", n=out.type.numel, parallel=gen.nt > 1,
                  checks=[], err=0)


@kernel("dequantize")
def dequantize(gen, ki, fn):
    """float32(q - offset) * scale, the parameters per ``axis`` when they are vectors."""
    q, scale, offset = ki.ins
    out = ki.outs[0]
    qt = ctype(q.type.dtype.name).storage
    per = scale.type.numel > 1
    axis = ki.attrs.get("axis", 0)
    c = f"(i / {prod(q.type.shape[axis + 1:])}) % {scale.type.numel}" if per else "0"
    gen.choice = "dequantize" + (f" per axis {axis}" if per else "")
    return gen.t("elementwise.c.j2",
                  fn=fn, decls=[f"float *out = {gen.tptr(out)}", f"const {qt} *in0 = {gen.tptr(q, True)}",
                                f"const float *sc = {gen.tptr(scale, True)}",
                                f"const int32_t *of = {gen.tptr(offset, True)}"],
                  loads=[f"const int64_t c = {c}"],
                  store="out[i] = (float)((int64_t)in0[i] - (int64_t)of[c]) * sc[c]", n=out.type.numel,
                  parallel=gen.nt > 1, checks=[], err=0)
