"""Kernels of the windowed primitives: conv (float32 with a constant filter on the conv engine, conv/; else
depthwise per plane, direct GEMM for 1x1, im2col + GEMM, or im2col + plain loops for integers), the layout
conversions the layout pass places (the engine's NCHW <-> NCHWc kernels), and average pooling (max_pool: the
int8 family's, quantized.py, which takes both)."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from math import prod

from glow_core.backend import Unsupported
from glow_core.errors import BackendError
from glow_core.fusion import FUSED_ACTIVATION, FUSED_PARAMS
from glow_core.ir import PLAIN, stored_shape
from glow_core.layout import LAYOUT_CONVERT
from glow_core.types import dtype as to_dtype

from ..conv.engine import ConvGeometry, Epilogue, layout_kernel, plan_conv, refusal
from . import ew as kernels_ew
from .codegen import MEMO_LIMIT, RESIDUAL, ScratchLayout, accumulator, c_comment, kernel, kernel_scratch, row_strides
from .ctypes_map import ctype
from .gemm_blocking import gemm_scratch_bytes
from .matmul import gemm_name


@dataclass(frozen=True)
class ConvPlan:
    """The algorithm of one conv and its scratch: depthwise (direct per plane), direct GEMM (1x1, stride 1, no
    pad: the input is the GEMM's B), im2col + GEMM (float), or im2col + plain loops (integers)."""

    algo: str
    direct: bool
    native: bool  # computes in its own dtype (float32/float64)
    fast: bool  # GEMM
    convert_w: bool  # weights converted to the accumulator type
    w_derived: bool  # ... at compile time (a constant weight)
    acc_t: str
    acc_np: str
    scratch: ScratchLayout


#: Threads the conv engine's scratch is planned for (``scratch_bytes`` does not see the compile options): a
#: kernel compiled for more threads whose plan needs more scratch than that runs its conv single-threaded.
ENGINE_SCRATCH_THREADS = os.cpu_count() or 1


def _engine_steps(act, params) -> "tuple | None":
    """The conv engine's epilogue steps of one fused activation (glow_core.fusion): () for none; relu and clip,
    whose selects equal the lowered max/min bit for bit, sigmoid and silu, whose vector gce_sigmoid is the
    elementwise glow_sigmoidf operation for operation, and hard_sigmoid and hard_swish (the mul rounded before
    the add, then the clip's selects); None for the others (tanh, leaky_relu)."""
    if not act:
        return ()
    if act in ("relu", "sigmoid", "silu"):
        return (act,)
    for name, keys in (("clip", ("min", "max")), ("hard_sigmoid", ("alpha", "beta")),
                       ("hard_swish", ("alpha", "beta"))):
        if act == name and all(isinstance(params.get(k), (int, float)) and params[k] == params[k] for k in keys):
            return ((name,) + tuple(params[k] for k in keys),)
    return None


def _engine_epilogue(attrs) -> "Epilogue | None":
    """The conv engine's in-register epilogue of a conv: its fused activation, then a fused residual add
    (RESIDUAL, fusion/residual.py) and that add's activation. Without a residual, an activation the engine lacks is left
    out (``_engine_conv`` applies it after the engine with the elementwise expression, so that a fused result
    equals the unfused one exactly, as glow_core.fusion requires); with one, None when any step is not in it (its
    ``in_place``: the residual is planned in the output's own memory, Epilogue.in_place)."""
    steps = _engine_steps(attrs.get(FUSED_ACTIVATION), attrs.get(FUSED_PARAMS) or {})
    res = attrs.get(RESIDUAL)
    if res is None:
        return Epilogue(steps or ())
    after = _engine_steps(res["activation"], res["params"])
    if steps is None or after is None:
        return None
    return Epilogue(steps + ("residual",) + after, in_place=res["in_place"])


_ENGINE_MEMO: dict = {}


def engine_layout(layout: str) -> str:
    """The conv engine's name of a buffer layout (glow_core.ir.stored_shape's 'nchwc<cb>' is its 'nchwc')."""
    return "nchwc" if layout.startswith("nchwc") else layout


def engine_conv(ki, num_threads: int):
    """The conv engine's kernel (backends/cpu/conv/engine.py) for a float32 ``conv`` with a constant filter,
    reading and writing the layouts of its operands (from plain NCHW the kernel converts to its blocked layout
    inside, through its scratch), or a falsy Unsupported naming why the generic kernel (``conv_plan``) computes
    it."""
    x, w, _ = ki.ins[:3]
    out = ki.outs[0]
    key = (ki.signature[:2] + tuple(s for s in ki.signature[2] if s[0] != "scratch"), num_threads)
    if key in _ENGINE_MEMO:
        return _ENGINE_MEMO[key]
    epilogue = _engine_epilogue(ki.attrs)
    if x.type.dtype.name != "float32" or not w.const:
        plan = Unsupported("conv engine: float32 convolutions with a constant filter only")
    elif epilogue is None:
        plan = Unsupported("conv engine: a fused residual add needs every activation in the epilogue's registers")
    else:
        a = ki.attrs
        geom = ConvGeometry.from_conv(x.type.shape, w.type.shape, a["strides"], a["dilations"], a["pads"],
                                      a.get("group", 1))
        plan = plan_conv(geom, epilogue=epilogue, num_threads=num_threads,
                         in_layout=engine_layout(x.layout), out_layout=engine_layout(out.layout))
        if plan and plan.geometry.out_spatial != tuple(out.type.shape[2:]):
            raise BackendError(f"cpu backend: conv engine output {plan.geometry.out_spatial} disagrees with the "
                               f"instruction's {out.type.shape}")
    if len(_ENGINE_MEMO) >= MEMO_LIMIT:
        _ENGINE_MEMO.clear()
    _ENGINE_MEMO[key] = plan
    return plan


def engine_takes(ki) -> bool:
    """Whether the conv engine runs conv ``ki`` on plain or blocked layouts with no residual in its epilogue (what
    the layout pass asks: it plans nothing, ``conv.engine.refusal``), as ``engine_conv`` would answer."""
    x, w = ki.ins[:2]
    if x.type.dtype.name != "float32" or not w.const or _engine_epilogue(ki.attrs) is None:
        return False
    a = ki.attrs
    geom = ConvGeometry.from_conv(x.type.shape, w.type.shape, a["strides"], a["dilations"], a["pads"],
                                  a.get("group", 1))
    return refusal(geom) is None


def conv_plan(ki) -> ConvPlan:
    x, w = ki.ins[:2]
    out = ki.outs[0]
    dt = x.type.dtype.name
    group = ki.attrs.get("group", 1)
    C, F = x.type.shape[1], w.type.shape[0]
    cg, fg = C // group, F // group
    ck, p = cg * prod(w.type.shape[2:]), prod(out.type.shape[2:])
    native = dt in ("float32", "float64")
    fast = ctype(dt).is_float
    acc_t, acc_np = accumulator(dt)
    item = to_dtype(acc_np).itemsize
    if native and cg == 1 and fg == 1:
        return ConvPlan("depthwise direct", False, True, False, False, False, acc_t, acc_np, ScratchLayout({}, 0))
    st, pads = ki.attrs["strides"], ki.attrs["pads"]
    direct = native and all(k == 1 for k in w.type.shape[2:]) and all(s == 1 for s in st) and not any(pads)
    convert_w = not native
    w_derived = convert_w and w.const
    parts = []
    if convert_w and not w_derived:
        parts.append(("wc", item * F * ck))
    if not native:
        parts.append(("oc", item * fg * p))
    if fast:
        parts.append(("gemm", gemm_scratch_bytes("f64" if dt == "float64" else "f32", fg, p, ck)))
    if not direct:  # last: an im2col write past its end leaves the @scratch operand (memory checkers see it)
        parts.append(("col", item * ck * p))
    algo = ("direct" if direct else "im2col") + (f" + gemm {'f64' if dt == 'float64' else 'f32'}" if fast else
                                                 f" + loops in {acc_t}")
    if convert_w:
        algo += f", weights in {acc_np}" + (" (prepared at compile time)" if w_derived else "")
    return ConvPlan(algo, direct, native, fast, convert_w, w_derived, acc_t, acc_np, ScratchLayout.of(parts))


def _input_index(dims, istr) -> str:
    """The C expression of the input element a window reads: output position o, kernel offset k per dim."""
    return " + ".join(f"(o{i} * {d['s']} + k{i} * {d['dil']} - {d['p']}) * {istr[i]}"
                      for i, d in enumerate(dims)) or "0"


def _valid_ranges(dims):
    """For every kernel offset k of each window dim, the output range [lo[k], hi[k]) whose input index
    o * s + k * dil - p lies inside the unpadded input: loops over it need no bounds checks, and outputs
    outside it read padding. (A bounds check per element instead, ``in ? x[i] : 0``, was miscompiled by GCC
    12's loop vectorizer with AVX2/AVX-512: dilated convolutions whose windows reach far into the padding
    returned memory that was never written; conformance case ops/Conv/float32/fuzz_dilated_window_in_padding.)"""
    for d in dims:
        los, his = [], []
        for k in range(d["k"]):
            shift = k * d["dil"] - d["p"]
            los.append(min(d["o"], max(0, -(shift // d["s"]))))  # ceil(-shift / s)
            his.append(max(0, min(d["o"], (d["size"] - 1 - shift) // d["s"] + 1)))
        d.update(lo=los, hi=his)


def _window_dims(ins, x, out, kernel):
    n = x.type.rank - 2
    st, dil, pads = ins.attrs["strides"], ins.attrs["dilations"], ins.attrs["pads"]
    return [dict(o=out.type.shape[2 + i], k=kernel[i], s=st[i], dil=dil[i], p=pads[i], size=x.type.shape[2 + i])
            for i in range(n)]


@kernel("conv")
def conv(gen, ins, fn):
    engine = engine_conv(ins, gen.nt)
    if engine:
        return _engine_conv(gen, ins, fn, engine)
    if RESIDUAL in ins.attrs:
        raise BackendError(f"cpu backend: a conv with a fused residual add runs on the conv engine only, which "
                           f"does not take it: {engine.reason}")
    x, w, bias = ins.ins
    out = ins.outs[0]
    dt = x.type.dtype.name
    ct = ctype(dt)
    plan = conv_plan(ins)
    gen.choice = plan.algo
    group = ins.attrs.get("group", 1)
    kernel = w.type.shape[2:]
    dims = _window_dims(ins, x, out, kernel)
    if plan.algo == "depthwise direct":
        return _depthwise(gen, fn, x, w, bias, out, dims)
    N, C = x.type.shape[:2]
    F = w.type.shape[0]
    cg, fg = C // group, F // group
    kk = prod(kernel)
    acc_t = plan.acc_t
    gemm = ""
    if plan.fast:
        gemm = gemm_name("f64" if dt == "float64" else "f32", None)
        gen.gemms.add(gemm)
    istr = row_strides(x.type.shape[2:])
    ost = row_strides(out.type.shape[2:])
    kst = row_strides(kernel)
    kidx = " + ".join(f"k{i} * {s}" for i, s in enumerate(kst)) or "0"
    pidx = " + ".join(f"o{i} * {s}" for i, s in enumerate(ost)) or "0"
    xidx = _input_index(dims, istr)
    _valid_ranges(dims)
    store = ct.st(f"({ct.compute})(drow[q] + bv)")
    epi = gen.epilogue(dt)
    scratch = gen.scratch_ptr() if plan.scratch.total else ""
    wc_ptr = gen.derive(w, plan.acc_np) if plan.w_derived else ""
    return gen.t("conv.c.j2",
                  fn=fn, choice=gen.choice, t=ct.storage, acc_t=acc_t, out_ptr=gen.ptr(out), x_ptr=gen.ptr(x),
                  w_ptr=gen.ptr(w), b_ptr=gen.ptr(bias), direct=plan.direct, convert_w=plan.convert_w,
                  native=plan.native, ck=cg * kk, p=prod(out.type.shape[2:]), f=F, fg=fg, cg=cg, c=C, batch=N,
                  group=group, in_size=prod(x.type.shape[2:]), dims=dims, kk=kk, kidx=kidx, pidx=pidx,
                  load_x=f"({acc_t})" + ct.ld(f"xc[{xidx}]"), load_w=f"({acc_t})" + ct.ld("w[i]"),
                  load_bias=f"({acc_t})" + ct.ld("bias[g * %d + f]" % fg), fast=plan.fast, gemm=gemm,
                  store=store, epi=epi or "v", scratch=scratch, off=plan.scratch.offsets, wc_ptr=wc_ptr)


def _engine_conv(gen, ins, fn, engine):
    """A conv by the conv engine: its kernel, called with the filter repacked at compile time (and the
    instruction's own filter when the kernel reads it: ConvKernel.reads_filter)."""
    have = ins.scratch.size if ins.scratch is not None else 0
    if engine.scratch_bytes > have:  # planned for fewer threads (ENGINE_SCRATCH_THREADS)
        engine = engine_conv(ins, 1)
        if engine.scratch_bytes > have:
            raise BackendError(f"cpu backend: the conv engine needs {engine.scratch_bytes} bytes of scratch, "
                               f"the instruction has {have}")
    x, w, bias = ins.ins[:3]
    out = ins.outs[0]
    act = ins.attrs.get(FUSED_ACTIVATION)
    res = ins.attrs.get(RESIDUAL)
    gen.choice = engine.describe
    post = None
    if act and engine.epilogue.steps:
        gen.choice += f", {act} fused in registers"
    elif act:
        post = gen.epilogue("float32")
        gen.choice += " after the conv"
    if res is not None:
        gen.choice += ", residual add" + (f" + {res['activation']}" if res["activation"] else "") + \
            " fused in registers" + (" (the residual read from the output's own memory)" if res["in_place"] else "")
    return gen.t("conv_engine_call.c.j2",
                  fn=fn, engine=engine.source, engine_fn=engine.name, choice=c_comment(gen.choice, 400),
                  x_ptr=gen.ptr(x), b_ptr=gen.ptr(bias), out_ptr=gen.ptr(out),
                  w_ptr=gen.derive(w, "float32", key="conv-engine " + engine.name, make=engine.pack_weights),
                  scratch=gen.ptr(ins.scratch) if engine.scratch_bytes else "0", post=post,
                  res_ptr=f"(const float *)({gen.ptr(ins.ins[3])})" if res and not res["in_place"] else "0",
                  wf_ptr=gen.ptr(w) if engine.reads_filter else "",
                  n=prod(stored_shape(out.type.shape, out.layout)))


@kernel(LAYOUT_CONVERT)
def layout_convert(gen, ins, fn):
    """A conversion the layout pass placed (glow_core.layout): the conv engine's NCHW <-> NCHWc kernel."""
    x, out = ins.ins[0], ins.outs[0]
    key = repr((x.type.shape, x.layout, out.layout, gen.nt))
    name = "gce_layout_" + hashlib.sha1(key.encode()).hexdigest()[:16]
    kern = layout_kernel(x.type.shape, engine_layout(x.layout), engine_layout(out.layout),
                         num_threads=gen.nt, name=name)
    gen.choice = kern.describe
    return (f"{kern.source}\n/* {c_comment(kern.describe)} */\nGLOW_KERNEL int {fn}(uint8_t *const *p) {{\n"
            f"  {name}((const float *)({gen.ptr(x)}), (float *)({gen.ptr(out)}));\n  return 0;\n}}\n")


def _depthwise(gen, fn, x, w, bias, out, dims):
    """One filter per channel (group == C == F): a direct convolution per (n, c) plane, the inner loops over
    the output range of each kernel offset that reads the unpadded input (``_valid_ranges``)."""
    ct = ctype(x.type.dtype.name)
    _valid_ranges(dims)
    n = len(dims)
    istr = row_strides(x.type.shape[2:])
    ost = row_strides(out.type.shape[2:])
    kst = row_strides(w.type.shape[2:])
    xidx = _input_index(dims, istr)
    epi = gen.epilogue(x.type.dtype.name)
    return gen.t("depthwise.c.j2",
                  fn=fn, choice=gen.choice, t=ct.storage, out_ptr=gen.ptr(out), x_ptr=gen.ptr(x),
                  w_ptr=gen.ptr(w), b_ptr=gen.ptr(bias), dims=dims, nc=prod(x.type.shape[:2]),
                  c=x.type.shape[1], kk=prod(w.type.shape[2:]), in_size=prod(x.type.shape[2:]),
                  out_size=prod(out.type.shape[2:]), work=out.type.numel * prod(w.type.shape[2:]),
                  kidx=" + ".join(f"k{i} * {kst[i]}" for i in range(n)) or "0",
                  oidx=" + ".join(f"o{i} * {ost[i]}" for i in range(n)) or "0", xidx=xidx, epi=epi)


@kernel("avg_pool")
def pool(gen, ins, fn):
    x, out = ins.ins[0], ins.outs[0]
    dt = x.type.dtype.name
    ct = ctype(dt)
    dims = _window_dims(ins, x, out, ins.attrs["kernel"])
    # NCHWc (glow_core.layout; x and out share it): plane nc is lane nc % cb of channel block nc / cb; the kernel
    # walks each block's positions once, the cb lanes of a position contiguous (innermost)
    cb = stored_shape(x.type.shape, x.layout)[-1] if x.layout != PLAIN else 1
    istr = [s * cb for s in row_strides(x.type.shape[2:])]
    ost = [s * cb for s in row_strides(out.type.shape[2:])]
    xidx = " + ".join(f"i{i} * {s}" for i, s in enumerate(istr)) or "0"
    oidx = " + ".join(f"o{i} * {s}" for i, s in enumerate(ost)) or "0"
    if ins.op == "max_pool":
        acc_t, init, update = kernels_ew.reduce_parts("reduce_max", dt)
        store = ct.st(f"({ct.compute})acc")
    else:
        acc_t, init, update = "double", "0.0", "acc += v"
        div = float(prod(ins.attrs["kernel"])) if ins.attrs.get("count_include_pad", 0) else "(double)cnt"
        store = ct.st(f"({ct.compute})(acc / {div})")
    return gen.t("pool.c.j2",
        fn=fn, t=ct.storage, out_ptr=gen.ptr(out), in_ptr=gen.ptr(x),
        work=out.type.numel * prod(ins.attrs["kernel"]), nc=prod(stored_shape(x.type.shape, x.layout)[:2]) * cb,
        in_size=prod(x.type.shape[2:]), out_size=prod(out.type.shape[2:]), cb=cb, dims=dims, acc_t=acc_t,
        init=init,
        load=f"({acc_t})" + ct.ld(f"xp[{xidx}{' + l' if cb > 1 else ''}]"), update=update, out_idx=oidx,
        store=store, xidx=xidx, vmax=ins.op == "max_pool" and dt == "float32" and cb > 1)


@kernel_scratch("conv")
def conv_scratch(ki) -> ScratchLayout:
    """The conv engine's (input copy, output blocks; planned for ENGINE_SCRATCH_THREADS), else im2col columns,
    converted weights and outputs, the GEMM's panels."""
    engine = engine_conv(ki, ENGINE_SCRATCH_THREADS)
    if engine:
        return ScratchLayout.of([("engine", engine.scratch_bytes)] if engine.scratch_bytes else [])
    return conv_plan(ki).scratch
