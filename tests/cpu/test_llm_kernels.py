"""The CPU backend's language-model kernels (backends/cpu/kernels/llm.py): each op kept whole reaches its kernel
and matches the interpreter (the lowering) at 1 and 2 threads over the shapes that choose its paths; errors
for caches or positions out of range; a genai-style decoder layer (float32, int4, int8) generates the same
tokens as onnxruntime on the CPU backend with every op whole."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import glow_core
from glow_core.errors import GlowError
from glow_core.quantization import weight_only
from tests.core.test_onnxruntime_ops import decoder, generate, ort_run

MS = "com.microsoft"


def model(op, feeds, outs, attrs=None, inits=(), domain=MS, opset=23):
    node = helper.make_node(op, list(feeds) + [k for k, _ in inits], outs, domain=domain, **(attrs or {}))
    vis = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()]
    g = helper.make_graph([node], "g", vis, [helper.make_empty_tensor_value_info(o) for o in outs],
                          [numpy_helper.from_array(a, k) for k, a in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])


def against_interpreter(m, feeds, whole, atol=1e-6):
    want = glow_core.compile(m, "interpreter").run(feeds)
    for nt in (1, 2):
        cm = glow_core.compile(m, "cpu", num_threads=nt)
        assert [i.op for i in cm.last.ir.code] == [whole]
        got = cm.run(feeds)
        for k, w in want.items():
            np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=atol * max(1.0, float(np.abs(w).max())))


WEIGHTS = {"b4": (4, 128, 48, 32, False, False), "b4_tails_zp_bias": (4, 100, 37, 32, True, True),
           "b8_tails_zp": (8, 70, 21, 64, True, False), "b8_bs16_bias": (8, 256, 20, 16, False, True),
           "b4_threaded": (4, 512, 1030, 64, True, False),  # a GEMV above kernels.llm.PAR_MIN: threads fork
           "b4_tails_bias": (4, 100, 37, 32, False, True)}  # no zero points (folded into the GEMV's table), K tail


# GEMV passes of 1..8 rows (and remainders), dequantized panels + the packed GEMM above 16 rows
@pytest.mark.parametrize("m_rows, weights", [(m, w) for w in list(WEIGHTS)[:4] for m in (1, 5, 33)]
                         + [(m, "b4_tails_zp_bias") for m in (2, 3, 4, 8, 9, 16, 17)] + [(1, "b4_threaded")]
                         + [(m, "b4_tails_bias") for m in (1, 3)])
def test_matmul_nbits(m_rows, weights):
    bits, k, n, block, zp, bias = WEIGHTS[weights]
    r = np.random.default_rng(m_rows * k + n)
    kb = -(-k // block)
    inits = [("B", r.integers(0, 256, (n, kb, block * bits // 8), dtype=np.uint8)),
             ("s", r.uniform(-0.1, 0.1, (n, kb)).astype(np.float32))]
    names = ["a", "B", "s"]
    if zp:
        inits.append(("zp", r.integers(0, 256, (n, -(-kb * bits // 8)), dtype=np.uint8)))
    if bias:
        inits.append(("bias", r.uniform(-1, 1, n).astype(np.float32)))
    feeds = {"a": r.uniform(-1, 1, (m_rows, k)).astype(np.float32)}
    node = helper.make_node("MatMulNBits", names + (["zp"] if zp else [""] * bool(bias)) + (["", "bias"] if bias else []),
                            ["y"], domain=MS, K=k, N=n, bits=bits, block_size=block)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", 1, [m_rows, k])],
                          [helper.make_empty_tensor_value_info("y")], [numpy_helper.from_array(a, nm) for nm, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    against_interpreter(m, feeds, f"{MS}.MatMulNBits", atol=1e-5)


@pytest.mark.parametrize("rows, n", [(5, 40), (1536, 1024)])  # the second above kernels.llm.PAR_MIN: threads fork
def test_rms_norms(rows, n):
    r = np.random.default_rng(1)
    x, s, g, b = (r.uniform(-2, 2, sh).astype(np.float32) for sh in ((2, rows // 2 or 1, n), (rows // 2 or 1, n),
                                                                    (n,), (n,)))
    against_interpreter(model("RMSNormalization", {"x": x, "g": g}, ["y"], domain=""), {"x": x, "g": g},
                        "RMSNormalization")
    against_interpreter(model("SimplifiedLayerNormalization", {"x": x, "g": g}, ["y", "inv"], domain=""),
                        {"x": x, "g": g}, "SimplifiedLayerNormalization")
    f = {"x": x, "s": s, "g": g, "b": b}  # a skip of [S, hidden] broadcast over the batch
    against_interpreter(model("SkipSimplifiedLayerNormalization", f, ["y", "mean", "inv", "sum"]), f,
                        f"{MS}.SkipSimplifiedLayerNormalization")


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary(interleaved):
    r = np.random.default_rng(2)
    th = r.uniform(0, 6, (20, 8))
    cos, sin = np.cos(th).astype(np.float32), np.sin(th).astype(np.float32)
    x4 = r.uniform(-2, 2, (2, 4, 3, 16)).astype(np.float32)
    ids = r.integers(0, 20, (2, 3)).astype(np.int64)
    f = {"x": x4, "c": cos, "s": sin, "i": ids}
    against_interpreter(model("RotaryEmbedding", f, ["y"], {"interleaved": interleaved}, domain=""), f,
                        "RotaryEmbedding")
    x3 = r.uniform(-2, 2, (2, 3, 64)).astype(np.float32)
    f = {"x": x3, "i": np.array([4], np.int64), "c": cos, "s": sin}  # partial rotation, a start position
    against_interpreter(model("RotaryEmbedding", f, ["y"], {"interleaved": interleaved, "num_heads": 4,
                                                           "rotary_embedding_dim": 8}), f, f"{MS}.RotaryEmbedding")


def _gqa(s, past, seqlens, total, attrs=None, d=16, heads=4, kv=2, rotary=False):
    r = np.random.default_rng(3)
    f = {"q": r.uniform(-1, 1, (len(seqlens), s, heads * d)).astype(np.float32),
         "k": r.uniform(-1, 1, (len(seqlens), s, kv * d)).astype(np.float32),
         "v": r.uniform(-1, 1, (len(seqlens), s, kv * d)).astype(np.float32),
         "pk": r.uniform(-1, 1, (len(seqlens), kv, past, d)).astype(np.float32),
         "pv": r.uniform(-1, 1, (len(seqlens), kv, past, d)).astype(np.float32),
         "sk": np.array(seqlens, np.int32)}
    inits = [("tot", np.array(total, np.int32))]
    if rotary:
        th = r.uniform(0, 6, (max(past, total) + 2, d // 2))
        inits += [("cos", np.cos(th).astype(np.float32)), ("sin", np.sin(th).astype(np.float32))]
    return model("GroupQueryAttention", f, ["y", "pk_out", "pv_out"],
                 dict(attrs or {}, num_heads=heads, kv_num_heads=kv, do_rotary=int(rotary)), inits), f


@pytest.mark.parametrize("s, past, seqlens, total, attrs, rotary", [
    (5, 0, [4], 5, {}, True),  # a first prompt
    (1, 8, [5, 8], 9, {}, True),  # ragged decode, present grows by one
    (1, 16, [5, 8], 9, {"local_window_size": 3, "softcap": 0.5}, False),  # a cache of capacity 16
    (3, 6, [8], 9, {"smooth_softmax": 1, "rotary_interleaved": 1}, True),  # a chunk after a prefix
    (1, 1024, [1000], 1024, {"heads": 16, "d": 64}, True),  # above kernels.llm.PAR_MIN: threads fork
])
def test_group_query_attention(s, past, seqlens, total, attrs, rotary):
    dims = {k: attrs.pop(k) for k in ("heads", "d") if k in attrs}
    m, f = _gqa(s, past, seqlens, total, attrs, rotary=rotary, **dims)
    against_interpreter(m, f, f"{MS}.GroupQueryAttention")


def test_out_of_range_is_an_error_naming_the_instruction():
    m, f = _gqa(1, 8, [5, 8], 9)
    f["sk"] = np.array([5, 30], np.int32)  # past the cache of 9
    with pytest.raises(GlowError, match=r"GroupQueryAttention.*index out of range"):
        glow_core.compile(m, "cpu", num_threads=1).run(f)
    r = np.random.default_rng(4)
    f = {"x": r.uniform(-1, 1, (1, 2, 3, 16)).astype(np.float32), "c": np.ones((4, 8), np.float32),
         "s": np.zeros((4, 8), np.float32), "i": np.array([[0, 1, 4]], np.int64)}
    with pytest.raises(GlowError, match=r"RotaryEmbedding.*index out of range"):
        glow_core.compile(model("RotaryEmbedding", f, ["y"], domain=""), "cpu", num_threads=1).run(f)


@pytest.mark.parametrize("quantized", [None, (4, 32), (8, 64)])
def test_decoder_layer_generates_like_onnxruntime_on_cpu(quantized):
    cache = {}

    def model_of(past, s):
        if (past, s) not in cache:
            m = decoder(past=past, s=s)
            cache[past, s] = m if quantized is None else weight_only(m, *quantized)
        return cache[past, s]
    compiled = {}

    def run(m, f):
        key = id(m)
        if key not in compiled:
            compiled[key] = glow_core.compile(m, "cpu", num_threads=2)
        return compiled[key].run(f)
    want_ids, want_logits = generate(model_of, ort_run, [3, 17, 8, 42, 1], 6)
    got_ids, got_logits = generate(model_of, run, [3, 17, 8, 42, 1], 6)
    assert got_ids == want_ids
    for g, w in zip(got_logits, want_logits):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * np.abs(w).max())
    ops = {i.op for cm in compiled.values() for i in cm.last.ir.code}
    assert {f"{MS}.GroupQueryAttention", f"{MS}.SkipSimplifiedLayerNormalization",
            "SimplifiedLayerNormalization"} <= ops
    assert (f"{MS}.MatMulNBits" in ops) == (quantized is not None)


def nbits_model(weights: str, m_rows: int, seed: int, level: int):
    """A one-node MatMulNBits model of the ``WEIGHTS`` case (random codes, scales, zero points, bias), its input A
    (m_rows x K, uniform in [-1, 1]) and (codes, scales, zero points, bias, block) for a reference."""
    from glow_core.quantization.weight_only import pack
    bits, k, n, block, zp, bias = WEIGHTS[weights]
    r = np.random.default_rng(seed)
    kb = -(-k // block)
    q = r.integers(0, 1 << bits, (n, kb * block), dtype=np.uint8)
    s = r.uniform(-0.1, 0.1, (n, kb)).astype(np.float32)
    z = r.integers(0, 1 << bits, (n, kb), dtype=np.uint8) if zp else np.full((n, kb), 1 << (bits - 1), np.uint8)
    b = r.uniform(-1, 1, n).astype(np.float32) if bias else None
    inits = [("B", pack(q.reshape(n, kb, block), bits)), ("s", s)] + ([("zp", pack(z, bits))] if zp else []) \
        + ([("bias", b)] if bias else [])
    a = r.uniform(-1, 1, (m_rows, k)).astype(np.float32)
    ins = ["a", "B", "s"] + (["zp"] if zp else [""] * bias) + (["", "bias"] if bias else [])
    node = helper.make_node("MatMulNBits", ins, ["y"], domain=MS, K=k, N=n, bits=bits, block_size=block,
                            accuracy_level=level)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", 1, [m_rows, k])],
                          [helper.make_empty_tensor_value_info("y")], [numpy_helper.from_array(v, nm) for nm, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    return m, a, (q, s, z, b, block)


def a8_reference(a, q, s, zp, bias, block):
    """MatMulNBits with accuracy_level 4 on the cpu (templates/matmul_nbits_a8.c.j2), in numpy: each row of A per
    block of ``block`` along K (zero-padded) quantized to int8, q = rint(a * (127 / max |a|)) with the block's scale
    max |a| / 127; per block the exact integer sum of q * (w - zero point), times A's scale times W's scale,
    summed over the blocks in float32. q [N, K'] (W's unpacked values), s and zp [N, k_blocks]."""
    m, k = a.shape
    kb = s.shape[1]
    ap = np.zeros((m, kb * block), np.float32)
    ap[:, :k] = a
    blocks = ap.reshape(m, kb, block)
    amax = np.abs(blocks).max(axis=2)
    inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    qa = np.rint(blocks * inv[..., None]).astype(np.int64)
    qw = q[:, :kb * block].reshape(-1, kb, block).astype(np.int64) - zp.astype(np.int64)[..., None]
    isum = np.einsum("mbk,nbk->mnb", qa, qw)
    scale = (s[None, :, :] * (amax / np.float32(127))[:, None, :]).astype(np.float32)
    y = np.zeros((m, q.shape[0]), np.float32)
    for b in range(kb):
        y += isum[:, :, b].astype(np.float32) * scale[:, :, b]
    return y + (bias if bias is not None else 0)


# int8 activations (accuracy_level 4): passes of 8 rows and remainders, K tails, zero points or not, 2 threads
@pytest.mark.parametrize("m_rows, weights", [(1, "b4"), (2, "b4"), (16, "b4_tails_bias"), (1, "b8_tails_zp"), (11, "b4_tails_zp_bias"),
                                             (9, "b8_tails_zp"), (3, "b8_bs16_bias"), (9, "b4_threaded")])
def test_matmul_nbits_int8_activations(m_rows, weights):
    m, a, (q, s, z, b, block) = nbits_model(weights, m_rows, m_rows * WEIGHTS[weights][1] + WEIGHTS[weights][2] + 1,
                                            level=4)
    a[0, :min(a.shape[1], block)] = 0  # a block of zeros: scale 0, q 0
    want = a8_reference(a, q, s, z, b, block)
    exact = glow_core.compile(m, "interpreter").run({"a": a})["y"]
    assert np.abs(want - exact).max() > 1e-4 * np.abs(exact).max()  # the int8 arithmetic is not the float one
    for nt in (1, 2):
        cm = glow_core.compile(m, "cpu", num_threads=nt)
        assert [i.op for i in cm.last.ir.code] == [f"{MS}.MatMulNBits"]
        np.testing.assert_allclose(cm.run({"a": a})["y"], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_int8_activations_equal_onnxruntime_accuracy_level_4():
    """weight_only(accuracy_level=4) on the cpu equals onnxruntime's int8-activation kernels (its CompInt8) on the
    same file, where both differ from the float arithmetic (accuracy_level 0) by the quantization of A."""
    from tests.core.test_weight_only import mlp, ort_run
    model, feeds = mlp(seed=3, k=128, n=64, m=32)
    q4 = weight_only(model, 4, 32, True, accuracy_level=4)
    assert all(a.i == 4 for n in q4.graph.node if n.op_type == "MatMulNBits" for a in n.attribute
               if a.name == "accuracy_level")
    want4, want0 = ort_run(q4, feeds), ort_run(weight_only(model, 4, 32, True), feeds)
    for nt in (1, 2):
        got = glow_core.compile(q4, "cpu", num_threads=nt).run(feeds)
        for name, w4, w0 in zip(("y", "w3sq", "z"), want4, want0):
            if name == "w3sq":  # constant A: folded at compile time by the lowering (float arithmetic)
                continue
            scale = np.abs(w0).max()
            assert np.abs(w4 - w0).max() > 1e-3 * scale
            np.testing.assert_allclose(got[name], w4, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.skipif(__import__("platform").machine() not in ("x86_64", "AMD64"), reason="x86-64 -march flag")
@pytest.mark.parametrize("weights, level", [("b4_tails_bias", 0), ("b4_tails_bias", 4), ("b8_tails_zp", 4)])
def test_matmul_nbits_without_avx512(weights, level):
    """Built for x86-64-v3 (no AVX-512): the 4-bit table's mask-and-convert fallback and the exact portable u8 x s8
    dot product, against the interpreter (float A) and the int8 reference (accuracy_level 4)."""
    m, a, (q, s, z, b, block) = nbits_model(weights, 9, 7, level=level)
    want = a8_reference(a, q, s, z, b, block) if level == 4 else glow_core.compile(m, "interpreter").run({"a": a})["y"]
    got = glow_core.compile(m, "cpu", num_threads=1, cflags="-O2 -march=x86-64-v3 -fno-math-errno -fno-trapping-math"
                            ).run({"a": a})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_matmul_nbits_float_a_limbs_wide_range_and_non_finite():
    """The float-A GEMV (on AVX512-VNNI: A per block scaled by a power of two to an integer in int8 limbs, integer
    dot products) over blocks whose values span ten orders of magnitude, a block of zeros and one of subnormals,
    against the interpreter's float arithmetic; an infinity or a NaN in A makes the outputs non-finite, as there."""
    m, a, _ = nbits_model("b4_tails_bias", 2, 11, level=0)  # K 100 in blocks of 32: the last one a tail
    r = np.random.default_rng(5)
    a[0, :32] *= 10.0 ** r.integers(-8, 3, 32)
    a[0, 32:64] = 0
    a[1, 64:96] = a[1, 64:96] * 1e-39
    want = glow_core.compile(m, "interpreter").run({"a": a})["y"]
    for nt in (1, 2):
        got = glow_core.compile(m, "cpu", num_threads=nt).run({"a": a})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    for bad in (np.inf, np.nan):
        a2 = a.copy()
        a2[1, 40] = bad
        want = glow_core.compile(m, "interpreter").run({"a": a2})["y"]
        got = glow_core.compile(m, "cpu", num_threads=1).run({"a": a2})["y"]
        np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
        assert np.isfinite(got[0]).all() and not np.isfinite(got[1]).any()


@pytest.mark.skipif(__import__("platform").machine() not in ("x86_64", "AMD64"), reason="x86-64 -march flag")
@pytest.mark.parametrize("weights, m_rows", [("b4_tails_bias", 1), ("b4_tails_zp_bias", 3), ("b8_tails_zp", 2)])
def test_matmul_nbits_float_gemvs_avx512_without_vnni(weights, m_rows):
    """Built for Skylake-X (AVX-512, no VNNI): the float GEMVs (the 4-bit table by vpermps) where a VNNI machine
    runs the limbs, against the interpreter."""
    m, a, _ = nbits_model(weights, m_rows, 13, level=0)
    want = glow_core.compile(m, "interpreter").run({"a": a})["y"]
    got = glow_core.compile(m, "cpu", num_threads=1, cflags="-O2 -march=skylake-avx512 -fno-math-errno "
                            "-fno-trapping-math").run({"a": a})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("m_rows, level", [(1, 0), (3, 0), (33, 0), (1, 4)])
def test_matmul_nbits_same_bits_at_any_thread_count(m_rows, level):
    """The threads claim contiguous runs of column groups (GEMVs: limbs, float or int8 A) or whole column panels
    (the GEMM path) and never split a column's sum: 1, 2 and 3 threads give the same bits, and the interpreter's
    values; the split is in the kernel's choice (glowc dump)."""
    from glow_cpu.kernels.codegen import KernelInstr, kernel_code
    from glow_cpu.kernels.llm import GEMV_CLAIM_GROUPS, GEMV_ROWS, SCRATCH_THREADS, gemv_split
    m, a, _ = nbits_model("b4_threaded", m_rows, 17, level=level)  # K 512, N 1030: 65 groups, 9 panels
    want = glow_core.compile(m, "interpreter").run({"a": a})["y"]
    got = {}
    for nt in (1, 2, 3):
        cm = glow_core.compile(m, "cpu", num_threads=nt)
        got[nt] = cm.run({"a": a})["y"]
        choice = kernel_code(KernelInstr.of(cm.last.ir.code[0]), nt).choice
        used = gemv_split(65, m_rows, 512, nt) if m_rows <= GEMV_ROWS else min(nt, SCRATCH_THREADS)
        if used > 1:
            shown = (f"{used} threads claiming runs of >= {GEMV_CLAIM_GROUPS} (guided)"
                     if m_rows <= GEMV_ROWS else f"claimed one at a time by {used} threads")
            assert shown in choice, choice
            assert m_rows > GEMV_ROWS or (f"{used} threads claim contiguous runs of at least {GEMV_CLAIM_GROUPS} "
                                          "column groups (guided)") in cm.last.compiled.source  # glowc dump --source
    assert gemv_split(65, 1, 512, 3) == 2  # one row: 532,480 multiply-adds, two threads' worth of PAR_MIN
    for nt in (2, 3):
        np.testing.assert_array_equal(got[nt], got[1])
    if level == 0:
        np.testing.assert_allclose(got[1], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
