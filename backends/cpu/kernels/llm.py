"""Whole-op kernels of the CPU backend for language models (kept whole by ``CPUBackend.should_lower``):

* com.microsoft.MatMulNBits (float32 A, 4- or 8-bit constant weights, no or uint8 zero points, optional bias):
  the weights are repacked at compile time into column groups of 16 (``pack_nbits``) and dequantized in
  registers, never as a float copy of W. M <= GEMV_ROWS (decode, small prefill blocks): per column group a 16-lane accumulator per
  row, per block the sum of a * (q - zero point) then times the block's scale; the threads (gemv_split) claim
  contiguous runs of column groups (guided, GEMV_CLAIM_GROUPS), so a decode step streams each weight byte once
  and a worker woken late does not hold the step for a whole half. 4-bit values become floats through a 16-entry table
  (one vpermps per 16 values on AVX-512, which ignores the index's high bits: no mask, no conversion), the
  default zero point 8 folded into it when there is no zero-point input. On AVX512-VNNI the same GEMVs run as
  integer dot products instead (A per block scaled by a power of two to an integer in byte limbs, LIMBS;
  templates/matmul_nbits_a8.c.j2). Larger M (prefill): per panel of PANEL_COLUMNS
  columns, the panel dequantized into the GEMM's packed layout (cache-sized, per thread) and the packed
  GEMM over it, the threads claiming panels one at a time (templates/matmul_nbits.c.j2, gemm.c.j2).

* RMS normalization, whichever op carries it: ONNX RMSNormalization, onnxruntime's SimplifiedLayerNormalization
  (and its inv_std_var) and com.microsoft.SkipSimplifiedLayerNormalization (the sum x + skip + bias, the
  normalization, the zero mean and inv_std_var): one pass per row (templates/rmsnorm.c.j2).

* Rotary embeddings, ONNX RotaryEmbedding and com.microsoft.RotaryEmbedding: one pass over the (batch,
  position, head) rows, the cos/sin row of each position gathered once (templates/rotary.c.j2).

* com.microsoft.GroupQueryAttention (float32, no attention_bias): the KV cache written in place when present is
  past's own buffer (else past copied once, zero-padded), then per query row the scores of its causal (and
  local-window) keys, softcap, softmax with an optional head sink, P V, all in one kernel (templates/gqa.c.j2).

Each computes what the lowering computes up to the order of its float32 roundings (the lowering dequantizes W
then multiplies); the lowering (the interpreter's reference) stays the specification.
"""
from __future__ import annotations

import os
from math import prod

import numpy as np

from .codegen import ScratchLayout, kernel, kernel_scratch
from .gemm_blocking import gemm_scratch_bytes

#: Threads the scratch of the kernels here is planned for (``scratch_bytes`` does not see the compile options; as
#: kernels.window.ENGINE_SCRATCH_THREADS): a kernel compiled for more threads uses at most that many.
ENGINE_SCRATCH_THREADS = os.cpu_count() or 1
#: Least work for which the kernels here fork threads: weights of a GEMV (multiply-adds), elements of a
#: normalization, rotation or attention pass. A parallel region costs microseconds, and on a busy machine a
#: descheduled thread holds the others at its barrier (bench/bench_llm_kernels.py at 2 threads): the small
#: per-token kernels of a decode step run on one thread.
PAR_MIN = {"gemv": 1 << 18, "rows": 1 << 20}

NBITS = "com.microsoft.MatMulNBits"
#: Rows up to which MatMulNBits runs as register-dequantizing GEMVs (above: dequantized panels + packed GEMM; at
#: 16 rows, a prefill block, the GEMVs took 0.55-0.65 of the panels' time, at 32 about 1.2: bench_llm_kernels).
GEMV_ROWS = 16
#: Rows per pass of the GEMV path (each weight vector unpacked once for them).
GEMV_PASS = 8
#: Columns of W dequantized per GEMM panel (a multiple of the GEMM's 32-column panels; the panel is
#: K x PANEL_COLUMNS floats per thread).
PANEL_COLUMNS = 128
SCRATCH_THREADS = ENGINE_SCRATCH_THREADS
#: MatMulNBits' accuracy_level that licenses int8 activations (onnxruntime's: A quantized per block to int8).
INT8_ACCURACY = 4
#: Rows from which a node with accuracy_level INT8_ACCURACY runs on int8 activations (templates/
#: matmul_nbits_a8.c.j2): all, as onnxruntime does (decode too: a fraction of the float GEMV's instructions).
A8_MIN_ROWS = 1
#: Rows per pass of the int8 path (each word of W unpacked once for them).
A8_PASS = 8
#: Float A on AVX512-VNNI (the GEMV path, M <= GEMV_ROWS): A per block scaled exactly by a power of two to an
#: integer and split into LIMBS[bits] byte limbs of LIMB_BITS[bits] bits, the dot products u8 x s8 (vpdpbusd,
#: 64 multiply-adds an instruction, where the float path's table, shift and FMA take 3 instructions per 16).
#: 4-bit weights: 3 limbs of 8 bits, A to 23 bits (an error at most 2^-23 of the power of two above its block's
#: largest |a|, float32's own precision); 8-bit weights (not signed bytes): 4 limbs of 7 bits, 28 bits.
LIMBS = {4: 3, 8: 4}
LIMB_BITS = {4: 8, 8: 7}
#: Integer accumulators of a pass of the limb path (rows x limbs x 2 for 4 bits, within the 32 vector registers).
LIMB_ACCUMULATORS = 16
#: The ISA the limb path needs (a preprocessor test: without it the float GEMVs run).
LIMB_ISA = "defined(__AVX512VNNI__) && defined(__AVX512BW__)"
#: Bytes ahead of its loads the integer dot-product paths (limbs, int8 A) prefetch the weights (0: the hardware
#: prefetchers alone). A 125 M int4 decode step, 1 thread, load 6-8: 26 ms without, 23 at 512, 16-18 at 2048,
#: 14 at 4096 and 8192 (bench/README.md).
WEIGHT_PREFETCH = 4096
#: Least column groups of 16 a thread claims at a time in a GEMV split (guided: each claim half of what is left
#: per thread, never under this): a thread the scheduler woke late (a worker asleep after the serial kernels
#: between two GEMVs) finds the rest of the columns taken by the one that came first, so the step does not wait
#: on its whole half. Each claim is a contiguous run of the packed weights (one prefetched stream); every column's
#: sum is the same whichever thread makes it, so results are the same bits at any thread count.
GEMV_CLAIM_GROUPS = 4


def gemv_split(groups: int, m: int, k: int, num_threads: int) -> int:
    """Threads a MatMulNBits GEMV of ``groups`` column groups forks: at most one per group and per
    PAR_MIN["gemv"] multiply-adds (the k and v projections of a 125 M decode step stay on one)."""
    return max(1, min(num_threads, groups, groups * 16 * m * k // PAR_MIN["gemv"]))


def _t(gen, name: str, **ctx) -> str:
    """Template ``name`` rendered for ``kernel`` with this module's thresholds (PAR_MIN as ``par_min_llm``)."""
    return gen.t(name, par_min_llm=PAR_MIN, **ctx)


def _inputs(node_or_ki) -> dict:
    """MatMulNBits' operands by name (missing optional ones absent): a graph node's inputs (None marks a
    missing one) or a KernelInstr's (``_optional`` marks the missing ones)."""
    names = ("a", "b", "scales", "zero_points", "g_idx", "bias")
    ins = list(node_or_ki.inputs) if hasattr(node_or_ki, "outputs") else None
    if ins is not None:
        return {n: v for n, v in zip(names, ins) if v is not None}
    missing = node_or_ki.attrs.get("_optional") or []
    present = [n for i, n in enumerate(names) if i >= len(missing) or not missing[i]]
    return dict(zip(present, node_or_ki.ins))


def _nbits_whole(node) -> bool:
    at = node.attrs
    v = _inputs(node)
    zp = v.get("zero_points")
    return (at.get("bits") in (4, 8) and not at.get("weight_prepacked") and "g_idx" not in v
            and v["a"].dtype.name == "float32" and v["a"].type.numel > 0 and v["scales"].dtype.name == "float32"
            and all(v[k].is_const for k in ("b", "scales")) and (zp is None or (zp.is_const and zp.dtype.name ==
                                                                                 "uint8"))
            and ("bias" not in v or v["bias"].dtype.name == "float32"))


def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    per = 8 // bits
    vals = np.stack([(packed >> (i * bits)) & ((1 << bits) - 1) for i in range(per)], axis=-1)
    return vals.reshape(packed.shape[:-1] + (-1,))[..., :count].astype(np.uint8)


def pack_nbits(arrays, k: int, n: int, bits: int, block: int) -> list[np.ndarray]:
    """B [N, k_blocks, blob], scales [N, k_blocks] (and packed zero points) -> the kernel's layout: w
    [groups][k_blocks * block / per][16] uint32 words (per = 32 / bits; word j of row-group r holds rows
    r * per .. of column 16 g + j, the first in the low bits; rows past K zero), scales [groups][k_blocks][16]
    float32 and zero points [groups][k_blocks][16] uint8 (columns past N zero)."""
    kb = -(-k // block)
    groups = -(-n // 16)
    per = 32 // bits
    q = _unpack(arrays[0].reshape(n, kb, -1), bits, block).reshape(n, kb * block).astype(np.uint32)
    q[:, k:] = 0
    qp = np.zeros((groups * 16, kb * block), np.uint32)
    qp[:n] = q
    qg = qp.reshape(groups, 16, kb * block // per, per)
    words = np.zeros(qg.shape[:3], np.uint32)
    for i in range(per):
        words |= qg[..., i] << np.uint32(i * bits)
    sc = np.zeros((groups * 16, kb), np.float32)
    sc[:n] = arrays[1].reshape(n, kb)
    out = [np.ascontiguousarray(words.transpose(0, 2, 1)),
           np.ascontiguousarray(sc.reshape(groups, 16, kb).transpose(0, 2, 1))]
    if len(arrays) > 2:
        z = np.zeros((groups * 16, kb), np.uint8)
        z[:n] = _unpack(arrays[2].reshape(n, -1), bits, kb)
        out.append(np.ascontiguousarray(z.reshape(groups, 16, kb).transpose(0, 2, 1)))
    return out


def _nbits_dims(ki) -> tuple[int, int, int]:
    v = _inputs(ki)
    return prod(v["a"].type.shape[:-1]), int(ki.attrs["K"]), int(ki.attrs["N"])


def _panel_bytes(k: int) -> int:
    return -(-4 * k * PANEL_COLUMNS // 64) * 64


def _thread_bytes(m: int, k: int) -> int:
    return _panel_bytes(k) + -(-gemm_scratch_bytes("f32", m, PANEL_COLUMNS, k, packed_b=True) // 64) * 64


def _int8_activations(ki) -> bool:
    m, _, _ = _nbits_dims(ki)
    return int(ki.attrs.get("accuracy_level", 0)) == INT8_ACCURACY and m >= A8_MIN_ROWS


def _a8_bytes(m: int, k: int, block: int, limbs: int = 1) -> tuple[int, int]:
    """The int8 path's quantized A (m rows x limbs of the blocks' padded length, 64-byte rounded) and its total
    scratch (plus a float scale per row and block and an int32 sum per row, block and limb)."""
    kb = -(-k // block)
    aq = -(-m * limbs * kb * block // 64) * 64
    return aq, aq + m * kb * 4 * (1 + limbs)


def _limbs(ki) -> bool:
    """Whether a float-A GEMV also gets the limb path (under LIMB_ISA): blocks of whole 16-value vectors."""
    m, _, _ = _nbits_dims(ki)
    return m <= GEMV_ROWS and int(ki.attrs["block_size"]) % 16 == 0 and not _int8_activations(ki)


def nbits_scratch_bytes(ki) -> int:
    """The GEMM path's per-thread dequantized panel and the GEMM's A panel, for SCRATCH_THREADS threads; the
    int8 path's quantized A."""
    m, k, _ = _nbits_dims(ki)
    if _int8_activations(ki):
        return _a8_bytes(m, k, int(ki.attrs["block_size"]))[1]
    if _limbs(ki):
        return _a8_bytes(m, k, int(ki.attrs["block_size"]), LIMBS[int(ki.attrs.get("bits", 4))])[1]
    return 0 if m <= GEMV_ROWS else SCRATCH_THREADS * _thread_bytes(m, k)


def k_matmul_nbits(gen, ki, fn) -> str:
    v = _inputs(ki)
    m, k, n = _nbits_dims(ki)
    bits, block = int(ki.attrs.get("bits", 4)), int(ki.attrs["block_size"])
    kb = -(-k // block)
    zp = "zero_points" in v
    slots = [v[x].slot for x in ("b", "scales", "zero_points") if x in v]
    ptrs = gen.derive_many(slots, lambda arrays: pack_nbits(arrays, k, n, bits, block),
                              f"matmul_nbits {bits} bits, block {block}", 3 if zp else 2)
    groups = -(-n // 16)
    gemm = m > GEMV_ROWS
    per = 32 // bits
    threads = gemv_split(groups, m, k, gen.nt)
    split = (f", {threads} threads claiming runs of >= {GEMV_CLAIM_GROUPS} (guided)"
             if threads > 1 else ", one thread")  # early in each choice: a bundle's call comments keep 160 chars
    if _int8_activations(ki):
        gen.choice = (f"matmul_nbits {bits}-bit weights, block {block}: {m} row(s), {groups} column groups of 16{split}; "
                      f"accuracy_level {INT8_ACCURACY}: A quantized to int8 per row and block, rows in passes of up "
                      f"to {A8_PASS} as u8 x s8 dot products")
        return _t(gen, "matmul_nbits_a8.c.j2", fn=fn, a=gen.ptr(v["a"]), y=gen.ptr(ki.outs[0]), w=ptrs[0],
                  sc=ptrs[1], zp=ptrs[2] if zp else None, bias=gen.ptr(v["bias"]) if "bias" in v else None, m=m, k=k,
                  n=n, bits=bits, bs=block, kb_n=kb, words=kb * block // per, groups=groups, rpass=min(A8_PASS, m),
                  prefetch=WEIGHT_PREFETCH, threads=threads, claim=GEMV_CLAIM_GROUPS,
                  scratch=gen.scratch_ptr(), aq_bytes=_a8_bytes(m, k, block)[0])
    ctx = dict(fn=fn, a=gen.ptr(v["a"]), y=gen.ptr(ki.outs[0]), w=ptrs[0], sc=ptrs[1],
               zp=ptrs[2] if zp else None, bias=gen.ptr(v["bias"]) if "bias" in v else None, m=m, k=k, n=n,
               bits=bits, bs=block, kb_n=kb, words=kb * block // per, k_full=k // per * per, groups=groups,
               rpass=GEMV_PASS, gemm=gemm, threads=threads, claim=GEMV_CLAIM_GROUPS)
    if gemm:
        gen.gemms.add("f32")
        nt = min(gen.nt, SCRATCH_THREADS)
        gen.choice = (f"matmul_nbits {bits}-bit weights, block {block}: {m} rows, panels of {PANEL_COLUMNS} "
                         f"columns dequantized into the packed GEMM's layout"
                         + (f", the {-(-n // PANEL_COLUMNS)} panels claimed one at a time by {nt} threads (dynamic)"
                            if nt > 1 else ""))
        return _t(gen, "matmul_nbits.c.j2", **ctx, scratch=gen.scratch_ptr(), panels=-(-n // PANEL_COLUMNS),
                        panel=PANEL_COLUMNS, panel_bytes=_panel_bytes(k), thread_bytes=_thread_bytes(m, k)
                        ).replace(f"num_threads({gen.nt})", f"num_threads({nt})")
    if not _limbs(ki):
        gen.choice = (f"matmul_nbits {bits}-bit weights, block {block}: {m} row(s), {groups} column groups of 16{split}; "
                      "GEMVs dequantizing in registers")
        return _t(gen, "matmul_nbits.c.j2", **ctx)
    limbs, lw = LIMBS[bits], LIMB_BITS[bits]
    rpass = min(m, max(1, LIMB_ACCUMULATORS // (limbs * (2 if bits == 4 else 1))))
    gen.choice = (f"matmul_nbits {bits}-bit weights, block {block}: {m} row(s), {groups} column groups of 16{split}; "
                  f"on AVX512-VNNI A per block scaled by a power of two to integers within 2^{lw * (limbs - 1) + 6} in "
                  f"{limbs} limbs of {lw} bits, u8 x s8 dot products in passes of {rpass} row(s) (else GEMVs "
                  "dequantizing in registers)")
    exact = _t(gen, "matmul_nbits_a8.c.j2", fn=f"{fn}_limbs", linkage="static", limbs=limbs, limb_bits=lw, a=ctx["a"],
               y=ctx["y"],
               w=ptrs[0], sc=ptrs[1], zp=ctx["zp"], bias=ctx["bias"], m=m, k=k, n=n, bits=bits, bs=block, kb_n=kb,
               words=ctx["words"], groups=groups, rpass=rpass, scratch=gen.scratch_ptr(), prefetch=WEIGHT_PREFETCH,
               threads=threads, claim=GEMV_CLAIM_GROUPS, aq_bytes=_a8_bytes(m, k, block, limbs)[0])
    return (f"#if {LIMB_ISA}\n{exact}#endif\n"
            + _t(gen, "matmul_nbits.c.j2", **ctx, limbs_fn=f"{fn}_limbs", limb_isa=LIMB_ISA))


RMS_OPS = ("RMSNormalization", "SimplifiedLayerNormalization", "com.microsoft.SkipSimplifiedLayerNormalization")
#: Partial sums per RMS normalization row (double lanes, so the pass vectorizes; as kernels_nn.ROW_LANES).
ROW_LANES = 16


def _trailing(shape) -> tuple:
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def _rms_axis(node_or_ki) -> int:
    x = node_or_ki.inputs[0] if hasattr(node_or_ki, "outputs") else node_or_ki.ins[0]
    rank = len(x.type.shape)
    if node_or_ki.op.startswith("com.microsoft."):
        return rank - 1
    axis = node_or_ki.attrs.get("axis", -1)
    return axis + rank if axis < 0 else axis


def _rms_whole(node) -> bool:
    x = node.inputs[0]
    axis = _rms_axis(node)
    if not 0 <= axis < x.rank or node.attrs.get("stash_type", 1) != 1:
        return False
    norm = x.shape[axis:]
    params = [v for v in node.inputs[1:] if v is not None]
    if node.op.startswith("com.microsoft."):
        skip, gamma = params[0], params[1:]
        if skip.dtype.name != "float32" or skip.type.numel == 0 or x.type.numel % skip.type.numel \
                or skip.shape[-1] != x.shape[-1] or skip.shape != x.shape[-skip.rank:]:
            return False
        params = gamma
    return all(v.dtype.name == "float32" and _trailing(v.shape) == _trailing(norm) for v in params)


def k_rmsnorm(gen, ki, fn) -> str:
    x = ki.ins[0]
    axis = _rms_axis(ki)
    rows, n = prod(x.type.shape[:axis]), prod(x.type.shape[axis:])
    outs = list(ki.outs)
    skip_op = ki.op.startswith("com.microsoft.")
    if skip_op:
        skip, scale = ki.ins[1], ki.ins[2]
        bias = ki.ins[3] if len(ki.ins) > 3 else None
        y, mean, inv, total = (outs + [None] * 4)[:4]
    else:
        skip, scale, bias = None, ki.ins[1], None
        y, inv = (outs + [None])[:2]
        mean = total = None
    eps = float.hex(float(np.float32(ki.attrs.get("epsilon", 1e-5))))
    gen.choice = (f"rms normalization whole: {rows} rows of {n}, one kernel"
                     + (" (x + skip" + (" + bias" if bias else "") + " first)" if skip else "")
                     + f", sum of squares in {ROW_LANES} double lanes")
    return _t(gen, "rmsnorm.c.j2", fn=fn, x=gen.ptr(x), scale=gen.ptr(scale),
                    skip=gen.ptr(skip) if skip else None, bias=gen.ptr(bias) if bias else None,
                    skip_rows=(skip.type.numel // n) if skip else 1, y=gen.ptr(y),
                    inv=gen.ptr(inv) if inv else None, mean=gen.ptr(mean) if mean else None,
                    sum=gen.ptr(total) if total else None, rows=rows, n=n, eps=eps, lanes=ROW_LANES)


ROPE_OPS = ("RotaryEmbedding", "com.microsoft.RotaryEmbedding")


def _rope_operands(node_or_ki) -> dict:
    """x, cos, sin and position ids (or None) of either RotaryEmbedding, by name."""
    ins = list(node_or_ki.inputs) if hasattr(node_or_ki, "outputs") else None
    if ins is None:  # a KernelInstr: the missing optional input (ONNX's position_ids) is the last one
        ins = list(node_or_ki.ins) + [None]
    if node_or_ki.op.startswith("com.microsoft."):
        return {"x": ins[0], "ids": ins[1], "cos": ins[2], "sin": ins[3]}
    return {"x": ins[0], "cos": ins[1], "sin": ins[2], "ids": ins[3] if len(ins) > 3 else None}


def _rope_geometry(node_or_ki) -> dict | None:
    """(b, s, h, d, rd, heads_first) of a RotaryEmbedding, None when this kernel does not run it."""
    v = _rope_operands(node_or_ki)
    at = node_or_ki.attrs
    x, cos = v["x"].type.shape, v["cos"].type.shape
    ms = node_or_ki.op.startswith("com.microsoft.")
    if len(x) == 4:
        b, h, s, d = x
    elif len(x) == 3:
        heads = at.get("num_heads") or (x[2] // (2 * cos[-1]) if ms and cos[-1] else 0)
        if not heads or x[2] % heads:
            return None
        b, s, h, d = x[0], x[1], heads, x[2] // heads
    else:
        return None
    rd = at.get("rotary_embedding_dim") or (min(d, 2 * cos[-1]) if ms else d)
    if rd % 2 or not 0 < rd <= d or cos[-1] < rd // 2 or v["sin"].type.shape != cos:
        return None
    return dict(b=b, s=s, h=h, d=d, rd=rd, half=rd // 2, heads_first=len(x) == 4, cols=cos[-1])


def _rope_whole(node) -> bool:
    v = _rope_operands(node)
    if node.attrs.get("is_packed_batching") or node.attrs.get("scale", 1.0) != 1.0:
        return False
    if not all(v[k].dtype.name == "float32" for k in ("x", "cos", "sin")) or _rope_geometry(node) is None:
        return False
    g = _rope_geometry(node)
    ids, cos = v["ids"], v["cos"].shape
    if ids is None:
        return len(cos) == 3 and cos[:2] == (g["b"], g["s"])
    if ids.dtype.name != "int64" or len(cos) != 2:
        return False
    return ids.shape == (g["b"], g["s"]) or (node.op.startswith("com.microsoft.") and ids.type.numel == 1)


def k_rotary(gen, ki, fn) -> str:
    v = _rope_operands(ki)
    g = _rope_geometry(ki)
    ids = v["ids"]
    start = ids is not None and ids.type.numel == 1 and g["b"] * g["s"] > 1
    interleaved = bool(ki.attrs.get("interleaved", 0))
    gen.choice = (f"rotary embedding whole: {g['b'] * g['s']} positions x {g['h']} heads, {g['rd']} of {g['d']} "
                     f"features rotated ({'interleaved' if interleaved else 'halves'})")
    return _t(gen, "rotary.c.j2", fn=fn, x=gen.ptr(v["x"]), cos=gen.ptr(v["cos"]), sin=gen.ptr(v["sin"]),
                    y=gen.ptr(ki.outs[0]), ids=gen.ptr(ids) if ids is not None else None,
                    n_ids=ids.type.numel if ids is not None else 0, start=start,
                    max_pos=v["cos"].type.shape[0], interleaved=interleaved, **g)


GQA = "com.microsoft.GroupQueryAttention"
GQA_INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length", "cos_cache",
              "sin_cache", "position_ids", "attention_bias", "head_sink", "k_scale", "v_scale", "q_norm_weight",
              "k_norm_weight", "query_seqlens")


def _named(node_or_ki, names) -> dict:
    """A node's or KernelInstr's operands by name (missing optional ones absent)."""
    if hasattr(node_or_ki, "outputs"):
        return {n: v for n, v in zip(names, node_or_ki.inputs) if v is not None}
    missing = node_or_ki.attrs.get("_optional") or []
    present = [n for i, n in enumerate(names[:max(len(missing), len(node_or_ki.ins))])
               if i >= len(missing) or not missing[i]]
    return dict(zip(present, node_or_ki.ins))


def _gqa_geometry(node_or_ki) -> dict | None:
    v = _named(node_or_ki, GQA_INPUTS)
    at = node_or_ki.attrs
    h, hk = int(at["num_heads"]), int(at["kv_num_heads"])
    q = v["query"].type.shape
    if len(q) != 3 or h <= 0 or hk <= 0 or h % hk:
        return None
    packed = "key" not in v
    d = q[2] // (h + 2 * hk) if packed else q[2] // h
    b, s = q[0], q[1]
    total = v["total_sequence_length"]
    if not total.const:
        return None
    past_s = v["past_key"].type.shape[2] if "past_key" in v else 0
    return dict(b=b, s=s, h=h, hk=hk, d=d, packed=packed, past_s=past_s,
                q_stride=q[2], kv_stride=q[2] if packed else hk * d)


def _gqa_whole(node) -> bool:
    v = _named(node, GQA_INPUTS)
    at = node.attrs
    if (len(node.outputs) != 3 or at.get("causal", 1) != 1 or at.get("qk_output", 0) or at.get("sliding_window_cache", 0)
            or at.get("kv_cache_bit_width", 0) or any(x in v for x in GQA_INPUTS[10:11] + GQA_INPUTS[12:])
            or not v["total_sequence_length"].is_const):
        return False
    floats = [v[x] for x in ("query", "key", "value", "past_key", "past_value", "cos_cache", "sin_cache",
                             "head_sink") if x in v]
    if not all(x.dtype.name == "float32" for x in floats) or (at.get("do_rotary") and "cos_cache" not in v):
        return False
    return node.outputs[1].type is not None and _gqa_geometry(node) is not None


def k_gqa(gen, ki, fn) -> str:
    v = _named(ki, GQA_INPUTS)
    at = ki.attrs
    g = _gqa_geometry(ki)
    b, s, h, hk, d = g["b"], g["s"], g["h"], g["hk"], g["d"]
    cap = ki.outs[1].type.shape[2]
    scale = float(at.get("scale") or 0.0) or 1.0 / np.sqrt(d)
    q = gen.ptr(v["query"])
    if g["packed"]:
        key = f"(const float *)({q}) + {h * d}"
        val = f"(const float *)({q}) + {(h + hk) * d}"
    else:
        key, val = gen.ptr(v["key"]), gen.ptr(v["value"])
    rotary = bool(at.get("do_rotary", 0))
    cols = v["cos_cache"].type.shape[1] if rotary else 0
    sink = "head_sink" in v
    window = int(at.get("local_window_size", -1) or -1)
    softcap = float(at.get("softcap", 0.0) or 0.0)
    lanes = 16
    nt = min(gen.nt, ENGINE_SCRATCH_THREADS) if s > 1 else gen.nt
    gen.choice = (f"group query attention whole: {b} x {h} heads ({hk} kv heads) x {s} query rows over a cache "
                     f"of {cap}, present written in place when it is past's buffer"
                     + (", keys transposed per kv head" if s > 1 else ", dot products per key")
                     + (", rotary" if rotary else "") + (f", window {window}" if window > 0 else ""))
    return _t(gen, "gqa.c.j2", fn=fn, q=q, k=key, v=val, past="past_key" in v,
                    scratch=gen.scratch_ptr() if s > 1 else None,
                    pk=gen.ptr(v["past_key"]) if "past_key" in v else None,
                    pv=gen.ptr(v["past_value"]) if "past_value" in v else None, seqlens=gen.ptr(v["seqlens_k"]),
                    rotary=rotary, cos=gen.ptr(v["cos_cache"]) if rotary else None,
                    sin=gen.ptr(v["sin_cache"]) if rotary else None,
                    ids=gen.ptr(v["position_ids"]) if rotary and "position_ids" in v else None,
                    max_pos=v["cos_cache"].type.shape[0] if rotary else 0, cols=cols, half=cols, rd=2 * cols,
                    interleaved=bool(at.get("rotary_interleaved", 0)),
                    sink=gen.ptr(v["head_sink"]) if sink else ("zero" if at.get("smooth_softmax") else None),
                    sink_heads=v["head_sink"].type.numel if sink else 1,
                    y=gen.ptr(ki.outs[0]), yk=gen.ptr(ki.outs[1]), yv=gen.ptr(ki.outs[2]),
                    b=b, s=s, h=h, hk=hk, d=d, past_s=g["past_s"], cap=cap, total=gen.ptr(v["total_sequence_length"]),
                    q_stride=g["q_stride"], kv_stride=g["kv_stride"], window=window if window > 0 else 0,
                    softcap=float.hex(float(np.float32(softcap))) if softcap > 0 else None,
                    scale=float.hex(float(np.float32(scale))), lanes=lanes, d_main=d // lanes * lanes
                    ).replace(f"num_threads({gen.nt})", f"num_threads({nt})")


def gqa_scratch_bytes(ki) -> int:
    """A block of queries (S > 1): per thread its kv head's keys transposed, [head size][present length]."""
    g = _gqa_geometry(ki)
    return 0 if g["s"] == 1 else ENGINE_SCRATCH_THREADS * g["d"] * ki.outs[1].type.shape[2] * 4


#: op -> whether a node of it is kept whole (kernels/nn.py keeps_whole)
WHOLE = {NBITS: _nbits_whole, **dict.fromkeys(RMS_OPS, _rms_whole), **dict.fromkeys(ROPE_OPS, _rope_whole),
         GQA: _gqa_whole}
#: op -> the input dtypes its kernel takes, by position (is_op_supported)
DTYPES = {NBITS: ("float32", "uint8", "float32")}
kernel(NBITS)(k_matmul_nbits)
kernel(*RMS_OPS)(k_rmsnorm)
kernel(*ROPE_OPS)(k_rotary)
kernel(GQA)(k_gqa)


@kernel_scratch(NBITS, GQA)
def llm_scratch(ki) -> ScratchLayout:
    return ScratchLayout.of([("nn", (nbits_scratch_bytes if ki.op == NBITS else gqa_scratch_bytes)(ki))])
