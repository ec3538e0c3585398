"""Kernels of matmul: the packed, cache-blocked GEMM (gemm.c.j2 variants, B packed at compile time when it is a
constant, operands read or the result written through strides: fusion rule "transposes"), the float32 GEMV of a
one-row product with constant B (a decode step's x @ W: gemv.c.j2, B in the GEMM's packed panels, streamed once),
float16/bfloat16 through converted float32 operands, and plain loops (small or integer products)."""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from math import prod

from glow_core.fusion import FUSED_ACTIVATION
from glow_core.types import dtype as to_dtype

from . import ew as kernels_ew
from .codegen import STRIDED, ScratchLayout, accumulator, batch_offset, kernel, kernel_scratch
from .ctypes_map import ctype
from .gemm_blocking import GEMM_TILES, gemm_pack_width, gemm_scratch_bytes, pack_b
from ..templates import PARALLEL_MIN_WORK, template


#: The GEMV's choices (gemv.c.j2). Its columns sum in the GEMM's order (blocks of GEMM_TILES kc rows), so a
#: one-row product is bit-identical to the same row in a GEMM (one independent multiply-add chain per vector: a
#: stream from memory does not wait on their latency). ``prefetch_rows``: rows of the panel ahead of the one read
#: that the loop asks the cache for (0: the hardware prefetcher alone); ``min_weights_per_thread``: weights
#: (multiply-adds) below which a thread is not worth its fork and barrier: one thread streams a decode step's
#: weights near the memory's bandwidth, and on a busy machine a descheduled thread holds the others at the barrier
#: for a time slice (bench/bench_llm.py, 2 threads, libgomp's default wait policy, load 4 on 2 cores: 2M weights
#: per thread 1.08x onnxruntime's decode, 256K 0.21x; with OMP_WAIT_POLICY=passive the same within noise): of a
#: 125 M LLaMA only the lm_head forks. ``vector_floats``: floats per vector (GCC vector extension: one AVX-512
#: register, two AVX2 or four SSE/NEON ones).
#: Multiply-adds from which a float product takes the packed GEMM (and a one-row product with a constant B the GEMV,
#: summing in the GEMM's order): below, the plain loops.
GEMM_MIN_WORK = 32768
GEMV = {"prefetch_rows": 32, "min_weights_per_thread": 1 << 21, "vector_floats": 16}
#: Threads whose scratch a batch-split product plans (as kernels.window.ENGINE_SCRATCH_THREADS): a kernel compiled
#: for more threads splits its batches over at most that many.
SCRATCH_THREADS = os.cpu_count() or 1


@dataclass(frozen=True)
class MatmulPlan:
    """gemm (float32/float64), gemv (float32, one row, constant B), convert (float16/bfloat16 through a float32
    GEMM) or naive (small or integer). ``batch_split``: the threads (at most; the kernel takes min(this, its own))
    that split the batches, each a contiguous range with its own copy of the scratch (``scratch`` holds them all,
    ``stride`` bytes apart), every product then on one thread (1: the batches in turn, each GEMM splitting its own
    columns over the threads)."""

    mode: str
    sfx: str
    acc_t: str
    b_derived: bool
    scratch: ScratchLayout
    batch_split: int = 1
    stride: int = 0


def batch_split(mode: str, batch: int, m: int, n: int, k: int, threads: int) -> int:
    """Threads a batched product splits its batches over: the threads (at most one per batch) when its products
    are too small to split (below PARALLEL_MIN_WORK["gemm"], where the GEMM runs on one thread, or the plain
    loops, which never split) and together worth a fork (at least PARALLEL_MIN_WORK["gemm"]); else 1. Swin's
    shifted-window attention (192 products of 49 x 49 x 32), diffusers' mid-block attention (8 of 64 x 64 x 32).
    Each product is computed as on one thread: the result does not depend on the thread count."""
    if batch < 2 or threads < 2 or mode not in ("gemm", "naive"):
        return 1
    small = mode == "naive" or m * n * k <= PARALLEL_MIN_WORK["gemm"]
    return min(threads, batch) if small and batch * m * n * k >= PARALLEL_MIN_WORK["gemm"] else 1


def matmul_plan(ki) -> MatmulPlan:
    a, b = ki.ins
    dt = a.type.dtype.name
    m, k = a.type.shape[-2:]
    n = b.type.shape[-1]
    big = m * n * k >= GEMM_MIN_WORK
    acc_t, acc_np = accumulator(dt)
    if dt == "float32" and m == 1 and big and b.const and not ki.attrs.get(STRIDED):  # as a GEMM of more rows
        return MatmulPlan("gemv", "f32", acc_t, True, ScratchLayout.of([]))
    if dt in ("float16", "bfloat16") and big:
        parts = [("ca", 4 * m * k)] + ([] if b.const else [("cb", 4 * k * n)]) + \
                [("cc", 4 * m * n), ("gemm", gemm_scratch_bytes("f32", m, n, k))]
        return MatmulPlan("convert", "f32", "float", b.const, ScratchLayout.of(parts))
    if dt in ("float32", "float64") and big:
        mode, sfx = "gemm", "f32" if dt == "float32" else "f64"
        parts = [("gemm", gemm_scratch_bytes(sfx, m, n, k, packed_b=b.const))]
    else:
        mode, sfx = "naive", ""
        parts = [("row", to_dtype(acc_np).itemsize * n)]
        given = ki.attrs.get(STRIDED) or {}
        if "b" in given and given["b"][3] != 1:  # B by columns: 16-column blocks copied k-major, summed in vectors
            parts.append(("tile", to_dtype(acc_np).itemsize * k * max(16, n - n % 16)))
    one = ScratchLayout.of(parts)
    split = batch_split(mode, prod(a.type.shape[:-2]), m, n, k, SCRATCH_THREADS)
    whole = ScratchLayout(one.offsets, one.total * split) if split > 1 else one
    return MatmulPlan(mode, sfx, acc_t, mode == "gemm" and b.const, whole, split, one.total)


_GEMMS: dict[str, str] = {}


def gemm_name(sfx: str, activation: str | None) -> str:
    return f"{sfx}_{activation}" if activation else sfx


def gemm_source(name: str) -> str:
    """The C of GEMM variant ``name`` ("f32", "f64", or with a fused activation: "f32_relu", ...)."""
    if name not in _GEMMS:
        sfx, _, act = name.partition("_")
        tl = GEMM_TILES[sfx]
        dt = "float64" if sfx == "f64" else "float32"
        epi = kernels_ew.activation(act, dt, "v", {p: f"e{i}" for i, p in enumerate(kernels_ew.ACTIVATION_PARAMS[
            act])}) if act else None
        _GEMMS[name] = template("gemm.c.j2").render(name=name, sfx=sfx, epi=epi, pnr=gemm_pack_width(sfx), **tl)
    return _GEMMS[name]


def gemv_threads(k: int, n: int, num_threads: int) -> int:
    """Threads a GEMV of B[k, n] forks: at most one per panel and per GEMV["min_weights_per_thread"] weights."""
    panels = -(-n // gemm_pack_width("f32"))
    return max(1, min(num_threads, panels, k * n // GEMV["min_weights_per_thread"]))


def _gemv(gen, ins, fn, plan):
    a, b = ins.ins
    k = a.type.shape[-1]
    n = b.type.shape[-1]
    w = gemm_pack_width("f32")
    panels = -(-n // w)
    threads = gemv_threads(k, n, gen.nt)
    pf, kc = GEMV["prefetch_rows"], GEMM_TILES["f32"]["kc"]
    bp_ptr = gen.derive(b, "", f"gemm panels {plan.sfx}", functools.partial(pack_b, sfx=plan.sfx))
    gen.choice = (f"gemv f32: b packed at compile time in {panels} panel(s) of {w} columns x {k} rows, each streamed "
                  f"once; each column summed in the GEMM's order (blocks of {kc} rows)"
                  + (f", prefetch {pf} rows ahead" if pf else "")
                  + (f"; {threads} threads split the panels" if threads > 1 else "; one thread"))
    epi = gen.epilogue("float32")
    return gen.t("gemv.c.j2", fn=fn, choice=gen.choice, out_ptr=gen.ptr(ins.outs[0]), a_ptr=gen.ptr(a),
                 bp_ptr=bp_ptr, batch=prod(a.type.shape[:-2]), k=k, n=n, w=w, vl=GEMV["vector_floats"],
                 panels=panels, kc=kc, prefetch=pf, threads=threads, epi=epi or "v")


@kernel("matmul")
def matmul(gen, ins, fn):
    a, b = ins.ins
    out = ins.outs[0]
    dt = a.type.dtype.name
    ct = ctype(dt)
    m, k = a.type.shape[-2:]
    n = b.type.shape[-1]
    plan = matmul_plan(ins)
    if plan.mode == "gemv":
        return _gemv(gen, ins, fn, plan)
    mode, acc_t = plan.mode, plan.acc_t
    scratch = gen.scratch_ptr()
    batch = prod(a.type.shape[:-2])
    split = min(plan.batch_split, batch_split(mode, batch, m, n, k, gen.nt))
    gen.choice = {"gemm": f"gemm {plan.sfx}" + (" (b packed at compile time)" if plan.b_derived else ""),
                   "naive": f"loops in {acc_t}",
                   "convert": "gemm f32 on converted operands" + (
                       " (b prepared at compile time)" if plan.b_derived else "")}[mode]
    epi = gen.epilogue(dt)
    gemm, cb_ptr, bp_ptr = "", "", ""
    if mode == "gemm":
        gemm = gemm_name(plan.sfx, ins.attrs.get(FUSED_ACTIVATION))
        if plan.b_derived:
            bp_ptr = gen.derive(b, "", f"gemm panels {plan.sfx}", functools.partial(pack_b, sfx=plan.sfx))
    elif mode == "convert":
        gemm = gemm_name(plan.sfx, None)
        cb_ptr = gen.derive(b, "float32") if plan.b_derived else ""
    if gemm:
        gen.gemms.add(gemm)
    if mode == "convert":
        load_a, load_b = ct.ld(f"a[bt * {m * k} + i]"), ct.ld(f"b[bt * {k * n} + i]")
        store_c = ct.st("cc[i]")
    else:
        load_a = f"({acc_t})" + ct.ld(f"a[bt * {m * k} + i * {k} + kk]")
        load_b = f"({acc_t})" + ct.ld("brow[j]")
        store_c = ct.st(f"({ct.compute})row[j]")
    e0, e1 = gen.epilogue_args(dt) if mode == "gemm" else ("0", "0")
    strided = _strided_operands(gen, ins, m, n, k) if mode in ("gemm", "naive") else None
    if split > 1:
        gen.choice += f"; {split} threads split the {batch} products, each on one thread"
    if mode == "naive" and strided:  # per batch: ab, bb, cb at the batch's offsets; B by rows, or by columns
        load_a = f"({acc_t})" + ct.ld(f"ab[i * {strided['lda']} + kk * {strided['csa']}]")
        load_b = f"({acc_t})" + ct.ld(f"brow[j * {strided['csb']}]" if strided["csb"] == 1 else
                                      f"bb[kk * {strided['ldb']} + (j0 + jj) * {strided['csb']}]")
    return gen.t("matmul.c.j2", strided=strided,
                  fn=fn, choice=gen.choice, out_t=ct.storage, in_t=ct.storage, out_ptr=gen.ptr(out),
                  a_ptr=gen.ptr(a), b_ptr=gen.ptr(b), mode=mode, batch=batch, m=m, n=n, k=k, split=split,
                  stride=plan.stride, gemm_nt=1 if split > 1 else gen.nt,
                  gemm=gemm, acc_t=acc_t, load_a=load_a, load_b=load_b, store_c=store_c, epi=epi or "v", e0=e0,
                  e1=e1, scratch=scratch, off=plan.scratch.offsets, cb_ptr=cb_ptr, bp_ptr=bp_ptr,
                  bp_size=k * -(-n // gemm_pack_width(plan.sfx or "f32")) * gemm_pack_width(plan.sfx or "f32"))


def _strided_operands(gen, ins, m, n, k) -> "dict | None":
    """The GEMM's per-batch offsets (C expressions in ``bt``), row and column strides of A, B and C when the
    matmul reads or writes some of them through strides (attribute STRIDED, strided_operands.py)."""
    given = ins.attrs.get(STRIDED)
    if not given:
        return None
    out = {}
    for name, (rows, cols) in (("a", (m, k)), ("b", (k, n)), ("c", (m, n))):
        if name in given:
            bshape, bst, rs, cs = given[name]
            off = batch_offset(bshape, bst)
            gen.choice += (f", {name} {'written' if name == 'c' else 'read'} through strides (batch "
                            f"{list(bst)}, rows {rs}, columns {cs})")
        else:
            off, rs, cs = f"bt * {rows * cols}", cols, 1
        out.update({name + "_off": off, "ld" + name: rs, "cs" + name: cs})
    return out


@kernel_scratch("matmul")
def matmul_scratch(ki) -> ScratchLayout:
    """The GEMM's packed panels, converted operands, or the naive loops' row (the GEMV needs none)."""
    return matmul_plan(ki).scratch
