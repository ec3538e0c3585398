"""The ops tier's cases of onnxruntime's LLM ops, onnxruntime's CPU kernels the oracle (onnx.reference does not
know them): com.microsoft MatMulNBits, GroupQueryAttention, RotaryEmbedding, SkipSimplifiedLayerNormalization,
and onnxruntime's ai.onnx SimplifiedLayerNormalization; and ONNX's Attention on an external cache (onnx
erratum #8068: bottom-right causal alignment from nonpad_kv_seqlen) and with fully masked rows (zeros).

Each table is data, one line per case; ``cases()`` turns every line into one case per dtype.
"""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from glow_core.types import dtype as gdtype

from .onnx_cases import ONNXRUNTIME, Init, one_node

MS = "com.microsoft"
F16 = ("float32", "float16")

# variant: (A shape, K, N, bits, block_size, zero points None | "uint8" | "float", bias, B constant)
MATMUL_NBITS = {
    "b4_bs32": ((3, 64), 64, 24, 4, 32, None, False, True),
    "b4_bs16_zp_uint8": ((3, 64), 64, 24, 4, 16, "uint8", False, True),
    "b4_bs64_zp_float_bias": ((2, 5, 128), 128, 20, 4, 64, "float", True, True),
    "b4_bs128_k_tail": ((4, 200), 200, 16, 4, 128, "uint8", False, True),  # K not a multiple of the block
    "b4_bs256": ((2, 256), 256, 12, 4, 256, None, True, True),
    "b4_bs32_odd_blocks_zp_uint8": ((3, 96), 96, 10, 4, 32, "uint8", False, True),  # 3 blocks: half a zp byte
    "b4_decode_m1": ((1, 1, 128), 128, 48, 4, 32, "uint8", False, True),
    "b4_runtime_weights": ((3, 64), 64, 8, 4, 32, "uint8", True, False),
    "b8_bs32": ((3, 64), 64, 24, 8, 32, None, False, True),
    "b8_bs64_zp_uint8_bias": ((2, 3, 128), 128, 16, 8, 64, "uint8", True, True),
    "b8_bs16_zp_uint8": ((5, 48), 48, 8, 8, 16, "uint8", False, True),  # (onnxruntime: no 8 bits with float zp)
    "b2_bs32_zp_uint8": ((3, 64), 64, 8, 2, 32, "uint8", False, True),
    # the CPU backend's MatMulNBits paths (backends/cpu/kernels/llm.py): GEMVs in passes of up to 8 rows,
    # K ending inside a packed word, N inside a 16-column group; dequantized panels for M > 16
    "b4_rows7_k_word_tail": ((7, 100), 100, 37, 4, 32, "uint8", True, True),
    "b8_rows6_k_word_tail": ((6, 70), 70, 21, 8, 64, None, False, True),
    "b4_prefill_m24": ((24, 256), 256, 150, 4, 32, "uint8", True, True),
    "b8_prefill_m17_k_tail": ((17, 200), 200, 40, 8, 128, None, True, True),
    # decode GEMVs with float A as int8 limbs on AVX512-VNNI: symmetric weights (no zero points), K ending inside
    # a block; 8 bits in one block of 256 with zero points and bias
    "b4_decode_m1_bs64_k_tail": ((1, 1, 200), 200, 40, 4, 64, None, False, True),
    "b8_decode_m1_bs256_zp_uint8_bias": ((1, 512), 512, 24, 8, 256, "uint8", True, True),
}

# variant: (batch, new tokens, heads, kv heads, head size, past length, seqlens_k, total_sequence_length, attrs,
#           extra inputs among "rotary", "position_ids", "attention_bias", "neginf_row", "head_sink", "packed")
GQA = {
    "prompt": (1, 5, 4, 2, 16, 0, [4], 5, {}, ()),
    "prompt_mha_b2": (2, 4, 2, 2, 8, 0, [3, 3], 4, {}, ()),
    "prompt_into_capacity": (1, 5, 4, 2, 16, 8, [4], 5, {}, ()),  # present keeps the cache's length
    "decode_b2_ragged": (2, 1, 4, 2, 16, 8, [5, 8], 9, {}, ()),
    "decode_in_capacity": (2, 1, 4, 2, 16, 16, [5, 8], 9, {}, ()),
    "chunk_bottom_right": (1, 3, 4, 2, 16, 6, [8], 9, {}, ()),  # queries at positions 6..8 of 9
    "chunk_local_window": (1, 3, 4, 1, 16, 6, [8], 9, {"local_window_size": 3}, ()),
    "chunk_softcap": (1, 3, 4, 2, 16, 6, [8], 9, {"softcap": 0.5}, ()),
    "chunk_scale": (1, 3, 4, 2, 16, 6, [8], 9, {"scale": 0.3}, ()),
    "chunk_rotary": (1, 3, 4, 2, 16, 6, [8], 9, {"do_rotary": 1}, ("rotary",)),
    "chunk_rotary_interleaved": (1, 3, 4, 2, 16, 6, [8], 9, {"do_rotary": 1, "rotary_interleaved": 1}, ("rotary",)),
    "chunk_rotary_position_ids": (1, 3, 4, 2, 16, 6, [8], 9, {"do_rotary": 1}, ("rotary", "position_ids")),
    "decode_rotary_partial": (2, 1, 4, 2, 32, 8, [5, 8], 9, {"do_rotary": 1}, ("rotary_partial",)),
    "prompt_rotary": (1, 6, 4, 2, 16, 0, [5], 6, {"do_rotary": 1}, ("rotary",)),
    "chunk_packed_qkv": (1, 3, 4, 2, 16, 6, [8], 9, {}, ("packed",)),
    "chunk_attention_bias_softcap": (1, 3, 4, 2, 16, 6, [8], 9, {"softcap": 0.5}, ("attention_bias",)),
    "chunk_fully_masked_row": (1, 3, 4, 2, 16, 6, [8], 9, {}, ("attention_bias", "neginf_row")),
    "chunk_head_sink": (1, 3, 4, 2, 16, 6, [8], 9, {}, ("head_sink",)),
    "chunk_smooth_softmax": (1, 3, 4, 2, 16, 6, [8], 9, {"smooth_softmax": 1}, ()),
    # LLaMA-like heads (64 features, 4 query heads per kv head): a decode step at the end of a 128-position
    # cache, a prefill of 16 tokens into it
    "decode_cache_128_d64_rotary": (1, 1, 8, 2, 64, 128, [127], 128, {"do_rotary": 1}, ("rotary",)),
    "prefill_16_into_cache_64_d64": (1, 16, 8, 2, 64, 64, [15], 16, {"do_rotary": 1}, ("rotary",)),
}
#: GQA lines without a float16 oracle: onnxruntime's float16 kernel returns NaN for a row with no key to attend,
#: its float32 kernel zeros (ONNX Attention's rule, which the lowering follows)
GQA_FLOAT32_ONLY = {"chunk_fully_masked_row"}

# variant: (input shape, position_ids "rows" | "start", cos/sin columns, attrs)
ROTARY = {
    "3d": ((2, 3, 32), "rows", 8, {}),
    "3d_interleaved": ((2, 3, 32), "rows", 8, {"interleaved": 1}),
    "3d_start_position": ((2, 3, 32), "start", 8, {}),
    "3d_num_heads": ((2, 3, 32), "rows", 4, {"num_heads": 4}),
    "3d_partial": ((2, 3, 32), "rows", 4, {"num_heads": 2, "rotary_embedding_dim": 8}),
    "4d": ((2, 4, 3, 8), "rows", 4, {}),
    "4d_partial_interleaved": ((2, 2, 3, 16), "start", 4, {"rotary_embedding_dim": 8, "num_heads": 2,
                                                           "interleaved": 1}),
}

# variant: (input shape, scale shape, attrs)
SIMPLIFIED_LN = {"last_axis": ((2, 3, 8), (8,), {}), "axis1": ((2, 3, 8), (3, 8), {"axis": 1, "epsilon": 1e-3})}
# variant: (input shape, skip shape, bias, attrs)
SKIP_SIMPLIFIED_LN = {"bias": ((2, 3, 8), (2, 3, 8), True, {}), "no_bias_eps": ((2, 3, 8), (2, 3, 8), False,
                                                                                {"epsilon": 1e-5}),
                      "skip_2d": ((2, 3, 16), (3, 16), True, {}), "input_2d": ((4, 16), (4, 16), False, {})}

# ONNX Attention (opset 24) on an external cache: variant: (batch, q heads, kv heads, queries, keys, head size,
# nonpad_kv_seqlen or None, is_causal, fully masked row of the bool mask)
ATTENTION_CACHE = {
    "external_cache_decode": (2, 4, 2, 1, 8, 16, [5, 8], 1, False),
    "external_cache_chunk_bottom_right": (2, 4, 2, 3, 8, 16, [5, 8], 1, False),
    "external_cache_shorter_than_block": (1, 4, 2, 3, 8, 16, [2], 1, False),  # rows with no key: zeros
    "external_cache_fully_masked_row": (1, 4, 4, 3, 8, 16, [6], 1, True),
    "fully_masked_row": (1, 4, 4, 3, 8, 16, None, 0, True),
}


def _f(r, d, shape, lo=-1.0, hi=1.0):
    return r.uniform(lo, hi, size=shape).astype(np.float32).astype(gdtype(d).np)


def _unpack(packed, bits, count):
    """uint8 [..., n] -> the first ``count`` values of ``bits`` each, low bits first (MatMulNBits' packing)."""
    per = 8 // bits
    vals = np.stack([(packed >> (i * bits)) & ((1 << bits) - 1) for i in range(per)], axis=-1)
    return vals.reshape(packed.shape[:-1] + (-1,))[..., :count]


def _nbits_magnitude(model, feeds):
    """|A| @ |W|^T (+ |bias|) in float64, W dequantized from the model's operands by the contrib op's definition."""
    node = model.graph.node[0]
    at = {a.name: a.i for a in node.attribute}
    vals = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer} | feeds
    ins = list(node.input) + [""] * 6
    k, n, bits, bs = at["K"], at["N"], at.get("bits", 4), at["block_size"]
    kb = -(-k // bs)
    q = _unpack(vals[ins[1]].reshape(n, kb, -1), bits, bs).astype(np.float64)
    scale = vals[ins[2]].astype(np.float64).reshape(n, kb, 1)
    zp = vals.get(ins[3]) if ins[3] else None
    if zp is None:
        z = np.float64(1 << (bits - 1))
    elif zp.dtype == np.uint8:
        z = _unpack(zp.reshape(n, -1), bits, kb).astype(np.float64).reshape(n, kb, 1)
    else:
        z = zp.astype(np.float64).reshape(n, kb, 1)
    w = ((q - z) * scale).reshape(n, kb * bs)[:, :k]
    m = np.abs(vals[ins[0]].astype(np.float64)) @ np.abs(w).T
    if ins[5]:
        m = m + np.abs(vals[ins[5]].astype(np.float64))
    return {model.graph.output[0].name: m}


def _matmul_nbits(r, d, a_shape, k, n, bits, bs, zp, bias, const):
    kb = -(-k // bs)
    w = r.integers(0, 256, (n, kb, bs * bits // 8), dtype=np.uint8)
    ops = [_f(r, d, a_shape), w, _f(r, d, (n, kb), 0.01, 0.1)]
    if zp == "uint8":
        ops.append(r.integers(0, 256, (n, -(-kb * bits // 8)), dtype=np.uint8))
    elif zp == "float":
        ops.append(_f(r, d, (n, kb), 0, (1 << bits) - 1))
    else:
        ops.append(None)
    if bias:
        ops += [None, _f(r, d, (n,))]
    ops = [o if o is None or not const or i == 0 else Init(o) for i, o in enumerate(ops)]
    while ops[-1] is None:
        ops.pop()
    return one_node("MatMulNBits", ops, {"K": k, "N": n, "bits": bits, "block_size": bs}, domain=MS)


def _gqa(r, d, bsz, s, h, hk, hd, past, seqlens, total, attrs, extra):
    packed = "packed" in extra
    if packed:
        ops = [_f(r, d, (bsz, s, (h + 2 * hk) * hd)), None, None]
    else:
        ops = [_f(r, d, (bsz, s, h * hd)), _f(r, d, (bsz, s, hk * hd)), _f(r, d, (bsz, s, hk * hd))]
    caches = [_f(r, d, (bsz, hk, past, hd)) for _ in "kv"]
    for b, n in enumerate(seqlens):  # a cache holds zeros after its tokens (the rows the op leaves unspecified)
        for c in caches:
            c[b, :, 0 if s == total else n + 1 - s:] = 0
    ops += caches + [np.array(seqlens, np.int32), Init(np.array(total, np.int32))]
    cols = hd // 2 if "rotary" in extra else hd // 4 if "rotary_partial" in extra else 0
    if cols:
        theta = r.uniform(0, 6, (max(total, past) + 4, cols))
        ops += [np.cos(theta).astype(gdtype(d).np), np.sin(theta).astype(gdtype(d).np)]
    else:
        ops += [None, None]
    ops.append(r.integers(0, total, (bsz, s)).astype(np.int64) if "position_ids" in extra else None)
    bias = None
    if "attention_bias" in extra:
        bias = _f(r, d, (bsz, h, s, total), -2, 2)
        if "neginf_row" in extra:
            bias[0, 1, s - 1, :] = -np.inf
    ops.append(bias)
    ops.append(_f(r, d, (h,)) if "head_sink" in extra else None)
    while ops[-1] is None:
        ops.pop()
    return one_node("GroupQueryAttention", ops, dict(attrs, num_heads=h, kv_num_heads=hk), n_out=3, domain=MS)


def _rotary(r, d, shape, pos, cols, attrs):
    bsz, s = (shape[0], shape[2]) if len(shape) == 4 else shape[:2]
    theta = r.uniform(0, 6, (s + 8, cols))
    ids = np.array([3], np.int64) if pos == "start" else r.integers(0, s + 8, (bsz, s)).astype(np.int64)
    return one_node("RotaryEmbedding", [_f(r, d, shape, -2, 2), ids, np.cos(theta).astype(gdtype(d).np),
                                        np.sin(theta).astype(gdtype(d).np)], attrs, domain=MS)


def _attention_cache(r, d, bsz, hq, hk, sq, t, hd, nonpad, causal, masked_row):
    mask = None
    if masked_row:
        mask = np.ones((bsz, hq, sq, t), bool)
        mask[0, 1, sq - 1, :] = False
    ops = [_f(r, d, (bsz, hq, sq, hd)), _f(r, d, (bsz, hk, t, hd)), _f(r, d, (bsz, hk, t, hd)), mask, None, None]
    if nonpad is not None:
        ops.append(np.array(nonpad, np.int64))
    while ops[-1] is None:
        ops.pop()
    return one_node("Attention", ops, {"is_causal": causal}, opset=24)


def cases():
    """(op, variant, dtypes, build(rng, dt) -> (model, feeds), oracle, magnitude) of every line above."""
    out = []
    for v, args in MATMUL_NBITS.items():
        out.append((f"{MS}.MatMulNBits", v, F16, lambda r, d, a=args: _matmul_nbits(r, d, *a), ONNXRUNTIME,
                    _nbits_magnitude))
    for v, args in GQA.items():
        dts = ("float32",) if v in GQA_FLOAT32_ONLY else F16
        out.append((f"{MS}.GroupQueryAttention", v, dts, lambda r, d, a=args: _gqa(r, d, *a), ONNXRUNTIME, None))
    for v, args in ROTARY.items():
        out.append((f"{MS}.RotaryEmbedding", v, F16, lambda r, d, a=args: _rotary(r, d, *a), ONNXRUNTIME, None))
    for v, (xs, ss, attrs) in SIMPLIFIED_LN.items():
        out.append(("SimplifiedLayerNormalization", v, F16 + ("float64",), lambda r, d, xs=xs, ss=ss, at=attrs:
                    one_node("SimplifiedLayerNormalization", [_f(r, d, xs, -2, 2), _f(r, d, ss, -2, 2)], at,
                             n_out=2, opset=17), ONNXRUNTIME, None))
    for v, (xs, ks, bias, attrs) in SKIP_SIMPLIFIED_LN.items():
        out.append((f"{MS}.SkipSimplifiedLayerNormalization", v, F16, lambda r, d, xs=xs, ks=ks, bias=bias, at=attrs:
                    one_node("SkipSimplifiedLayerNormalization", [_f(r, d, xs, -2, 2), _f(r, d, ks, -2, 2),
                                                                  _f(r, d, xs[-1:], -2, 2)]
                             + ([_f(r, d, xs[-1:])] if bias else []), at, n_out=4, domain=MS), ONNXRUNTIME, None))
    for v, args in ATTENTION_CACHE.items():
        out.append(("Attention", v, ("float32",), lambda r, d, a=args: _attention_cache(r, d, *a), ONNXRUNTIME, None))
    return out
