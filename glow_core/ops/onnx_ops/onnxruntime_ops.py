"""The ops onnxruntime defines for language models, lowered into primitives like ONNX's own.

com.microsoft contrib ops (registered as ``com.microsoft.<op>``; their attributes and defaults declared here,
as onnxruntime's docs/ContribOperators.md gives them): MatMulNBits, GroupQueryAttention,
SkipSimplifiedLayerNormalization, RotaryEmbedding. SimplifiedLayerNormalization is onnxruntime's extension
of the ai.onnx domain (it has no ONNX schema). Attention, rotation and RMS normalization reuse the pieces of
ONNX's Attention, RotaryEmbedding and RMSNormalization (``attention.sdpa``, ``attention.rotate``,
``normalization.mean``). onnxruntime's CPU kernels are the oracle (``conformance/tier_ops.py``).
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..registry import REQUIRED, onnx_op
from .attention import _band_allowed, _neg_inf_bias, rotate, sdpa
from .indexing import tensor_scatter
from .linalg import matmul
from .normalization import _check_float, _stash, mean

MS = "com.microsoft"
FLOATS = ("float32", "float16", "bfloat16")


def _float_input(b, x, what, accepted=FLOATS):
    if x.dtype.name not in accepted:
        raise ShapeError(f"{b.where}: {what} has dtype {x.dtype.name}; accepted: {', '.join(accepted)}")


def _refuse(b, what, value, default):
    """A ShapeError for an attribute or input this importer does not implement (set to anything but its
    default), naming it."""
    if value != default and value is not None:
        raise ShapeError(f"{b.where}: {what} = {value!r} is not supported; accepted: {default!r}")


# -- weights of N bits ----------------------------------------------------------------------------------------
def unpack_bits(b, packed, bits, count):
    """uint8 [..., n] holding ``8 // bits`` values per byte, the first in the low bits -> uint8 [..., count]
    (the first ``count`` values)."""
    per = 8 // bits
    if per == 1:
        vals = packed
    else:
        mask = b.scalar_like((1 << bits) - 1, packed, shape=())
        parts = []
        for i in range(per):
            v = packed if i == 0 else b.binary("shr", packed, b.scalar_like(i * bits, packed, shape=()))
            v = b.binary("bitwise_and", v, mask)
            parts.append(b.reshape_(v, v.shape + (1,)))
        vals = b.concat(*parts, axis=packed.rank)
        vals = b.reshape_(vals, packed.shape[:-1] + (packed.shape[-1] * per,))
    if vals.shape[-1] != count:
        vals = b.slice(vals, starts=[0] * vals.rank, ends=list(vals.shape[:-1]) + [count], steps=[1] * vals.rank)
    return vals


def dequantized_weight(b, packed, scales, zero_points, *, K, N, bits, block_size, dt):
    """The logical weight of MatMulNBits, [N, K] in dtype ``dt`` (computed in float32): for column block j of
    row n, (q - zero_point[n, j]) * scale[n, j]; q unpacked from B [N, k_blocks, blob] (low bits first), the
    zero point unpacked from packed uint8 [N, ceil(k_blocks * bits / 8)], given as floats [N, k_blocks], or
    2^(bits - 1) when absent."""
    kb = -(-K // block_size)
    blob = block_size * bits // 8
    if packed.dtype.name != "uint8" or packed.type.numel != N * kb * blob:
        raise ShapeError(f"{b.where}: B is {packed.type}; accepted: uint8 with N * k_blocks * blob_size = "
                         f"{N} * {kb} * {blob} elements ([N, k_blocks, blob_size])")
    if scales.type.numel != N * kb:
        raise ShapeError(f"{b.where}: scales {scales.type} must hold N * k_blocks = {N} * {kb} values")
    f32 = "float32"
    q = unpack_bits(b, b.reshape_(packed, (N, kb, blob)), bits, block_size)  # [N, kb, block]
    s = b.reshape_(b.cast_(scales, f32), (N, kb, 1))
    if zero_points is None:
        zp = b.const(np.full((1, 1, 1), 1 << (bits - 1), dtype=np.float32))
    elif zero_points.dtype.name == "uint8":
        zbytes = -(-kb * bits // 8)
        if zero_points.type.numel != N * zbytes:
            raise ShapeError(f"{b.where}: packed uint8 zero_points {zero_points.type} must hold N * ceil(k_blocks * "
                             f"bits / 8) = {N} * {zbytes} bytes")
        zp = b.reshape_(b.cast_(unpack_bits(b, b.reshape_(zero_points, (N, zbytes)), bits, kb), f32), (N, kb, 1))
    else:
        _float_input(b, zero_points, "zero_points", FLOATS + ("uint8",))
        if zero_points.type.numel != N * kb:
            raise ShapeError(f"{b.where}: zero_points {zero_points.type} must hold N * k_blocks = {N} * {kb} values")
        zp = b.reshape_(b.cast_(zero_points, f32), (N, kb, 1))
    w = b.binary("mul", b.binary("sub", b.cast_(q, f32), zp), s)
    w = b.reshape_(w, (N, kb * block_size))
    if kb * block_size != K:
        w = b.slice(w, starts=[0, 0], ends=[N, K], steps=[1, 1])
    return b.cast_(w, dt)


@onnx_op("MatMulNBits", domain=MS, attrs={"K": REQUIRED, "N": REQUIRED, "bits": 4, "block_size": REQUIRED,
                                          "accuracy_level": 0, "weight_prepacked": 0})
def matmul_nbits(b, a, packed, scales, zero_points=None, g_idx=None, bias=None, *, K, N, bits, block_size,
                 accuracy_level, weight_prepacked):
    """Y = A @ dequantized(B)^T (+ bias): B's N-bit values, block-wise along K with a scale and a zero point
    per block, unpacked with shr/bitwise_and, (q - zero_point) * scale in float32, transposed to [K, N] and
    a matmul (constant weights fold at compile time). accuracy_level (how onnxruntime may quantize A
    internally) is a license, not a semantics: ignored."""
    _float_input(b, a, "A")
    if bits not in (2, 4, 8):
        raise ShapeError(f"{b.where}: bits = {bits}; accepted: 2, 4, 8")
    if block_size < 16 or block_size & (block_size - 1):
        raise ShapeError(f"{b.where}: block_size = {block_size}; accepted: a power of two of at least 16")
    _refuse(b, "weight_prepacked", weight_prepacked, 0)
    if g_idx is not None:
        raise ShapeError(f"{b.where}: input g_idx (deprecated in onnxruntime) is not supported; leave it empty")
    if a.rank < 1 or a.shape[-1] != K:
        raise ShapeError(f"{b.where}: A {a.shape} must end in K = {K}")
    _float_input(b, scales, "scales")
    w = dequantized_weight(b, packed, scales, zero_points, K=K, N=N, bits=bits, block_size=block_size,
                           dt=a.dtype)
    y = matmul(b, a, b.transpose_(w, (1, 0)))
    if bias is not None:
        if bias.type.numel != N:
            raise ShapeError(f"{b.where}: bias {bias.type} must hold N = {N} values")
        y = b.binary("add", y, b.reshape_(b.cast_(bias, a.dtype), (N,)))
    return y


# -- normalization --------------------------------------------------------------------------------------------
def rms(b, x, scale, axis, epsilon, dt):
    """x / sqrt(mean(x^2 over the dims from ``axis`` on) + epsilon) (x already in its compute type), rounded to
    ``dt``, times ``scale``; also 1 / sqrt(...) with the dims kept."""
    ms = mean(b, b.mul(x, x), list(range(axis, x.rank)))
    inv = b.reciprocal(b.sqrt(b.add(ms, b.scalar_like(epsilon, ms))))
    y = b.cast_(b.binary("mul", x, inv), dt)
    return b.binary("mul", y, b.cast_(scale, dt)), inv


@onnx_op("SimplifiedLayerNormalization")
def simplified_layer_normalization(b, x, scale, *, axis=-1, epsilon=float(np.float32(1e-5)), stash_type=1):
    """onnxruntime's RMS normalization in the ai.onnx domain: RMSNormalization's lowering (16-bit floats in
    float32 with stash_type 1), with the second output inv_std_var (the normalized dims kept as 1; float32
    with stash_type 1)."""
    _check_float(b, x)
    axis = b.norm_axis(axis, x.rank)
    y, inv = rms(b, _stash(b, x, stash_type), scale, axis, epsilon, x.dtype)
    return y, b.cast_(inv, "float32") if stash_type == 1 else inv


@onnx_op("SkipSimplifiedLayerNormalization", domain=MS, attrs={"epsilon": float(np.float32(1e-12))})
def skip_simplified_layer_normalization(b, x, skip, gamma, bias=None, *, epsilon):
    """RMS normalization of input + skip (+ bias) over the last axis, in float32: outputs the normalized
    tensor * gamma, the mean (zeros: the simplified form has none; onnxruntime returns zeros), 1 / rms
    (float32, last dim kept as 1) and the sum input + skip + bias (rounded once to the input's type)."""
    _float_input(b, x, "input")
    if x.rank not in (2, 3):
        raise ShapeError(f"{b.where}: input {x.shape} must be 2-D or 3-D")
    f32 = "float32"
    s = b.binary("add", b.cast_(x, f32), b.cast_(skip, f32))
    if bias is not None:
        s = b.binary("add", s, b.cast_(bias, f32))
    y, inv = rms(b, s, gamma, x.rank - 1, epsilon, x.dtype)
    zeros = b.scalar_like(0, inv)
    return y, zeros, inv, b.cast_(s, x.dtype)


# -- rotary embedding -----------------------------------------------------------------------------------------
def _positions_cos_sin(b, cos_cache, sin_cache, position_ids, bsz, s):
    """cos and sin rows [B or 1, S, 1, cols] for positions ``position_ids`` (int64 Value [B, S])."""
    pos = b.cast_(position_ids, "int64")
    cos = b.gather(cos_cache, pos, axis=0)
    sin = b.gather(sin_cache, pos, axis=0)
    shape = (pos.shape[0], s, 1, cos_cache.shape[-1])
    return b.reshape_(cos, shape), b.reshape_(sin, shape)


@onnx_op("RotaryEmbedding", domain=MS, attrs={"interleaved": 0, "num_heads": 0, "rotary_embedding_dim": 0,
                                              "is_packed_batching": 0, "scale": 1.0})
def ms_rotary_embedding(b, x, position_ids, cos_cache, sin_cache, *, interleaved, num_heads, rotary_embedding_dim,
                        is_packed_batching, scale):
    """onnxruntime's RoPE: input [B, S, hidden] (heads of 2 * cos_cache's columns unless num_heads is given)
    or [B, N, S, H]; position_ids [B, S], or [1] (a start position: S consecutive positions for every batch);
    the rotation is ONNX RotaryEmbedding's (``attention.rotate``)."""
    _float_input(b, x, "input")
    _refuse(b, "is_packed_batching", is_packed_batching, 0)
    _refuse(b, "scale", scale, 1.0)
    if position_ids.dtype.name != "int64":
        raise ShapeError(f"{b.where}: position_ids has dtype {position_ids.dtype.name}; accepted: int64")
    if cos_cache.rank != 2 or sin_cache.shape != cos_cache.shape:
        raise ShapeError(f"{b.where}: cos_cache {cos_cache.shape} and sin_cache {sin_cache.shape} must be the same "
                         f"2-D shape (max_sequence_length, rotary_dim / 2)")
    orig = x.shape
    if x.rank == 3:
        head = (orig[2] // num_heads) if num_heads else 2 * cos_cache.shape[1]
        if not head or orig[2] % head:
            raise ShapeError(f"{b.where}: hidden size {orig[2]} is not a multiple of the head size {head}")
        x = b.reshape_(x, (orig[0], orig[1], orig[2] // head, head))
    elif x.rank == 4:
        x = b.transpose_(x, (0, 2, 1, 3))  # [B, S, N, H]
    else:
        raise ShapeError(f"{b.where}: input must be 3-D or 4-D, got {orig}")
    bsz, s, _, d = x.shape
    if position_ids.type.numel == 1 and (bsz, s) != (1, 1):
        start = b.reshape_(position_ids, (1, 1))
        position_ids = b.binary("add", start, b.const(np.arange(s, dtype=np.int64).reshape(1, s)))
    elif position_ids.shape != (bsz, s):
        raise ShapeError(f"{b.where}: position_ids {position_ids.shape} must be [{bsz}, {s}] or [1]")
    cos, sin = _positions_cos_sin(b, cos_cache, sin_cache, position_ids, bsz, s)
    r = rotate(b, x, cos, sin, rotary_embedding_dim or min(d, 2 * cos_cache.shape[1]), interleaved)
    return b.transpose_(r, (0, 2, 1, 3)) if len(orig) == 4 else b.reshape_(r, orig)


# -- grouped-query attention ----------------------------------------------------------------------------------
GQA_ATTRS = {"num_heads": REQUIRED, "kv_num_heads": REQUIRED, "scale": 0.0, "softcap": 0.0, "local_window_size": -1,
             "do_rotary": 0, "rotary_interleaved": 0, "smooth_softmax": 0, "causal": 1, "qk_output": 0,
             "sliding_window_cache": 0, "kv_cache_bit_width": 0, "k_quant_type": "NONE", "v_quant_type": "NONE",
             "qk_norm_epsilon": 1e-6, "q_norm_epsilon": None, "k_norm_epsilon": None}


def _heads(b, x, heads, what):
    """[B, S, heads * D] -> [B, S, heads, D]."""
    if x.rank != 3 or x.shape[2] % heads:
        raise ShapeError(f"{b.where}: {what} {x.shape} must be [batch, sequence, {heads} * head_size]")
    return b.reshape_(x, (x.shape[0], x.shape[1], heads, x.shape[2] // heads))


@onnx_op("GroupQueryAttention", domain=MS, attrs=GQA_ATTRS, const_inputs=(6,), in_place={1: 3, 2: 4})
def group_query_attention(b, query, key=None, value=None, past_key=None, past_value=None, seqlens_k=None,
                          total_sequence_length=None, cos_cache=None, sin_cache=None, position_ids=None,
                          attention_bias=None, head_sink=None, k_scale=None, v_scale=None, q_norm_weight=None,
                          k_norm_weight=None, query_seqlens=None, *, num_heads, kv_num_heads, scale, softcap,
                          local_window_size, do_rotary, rotary_interleaved, smooth_softmax, causal, qk_output,
                          sliding_window_cache, kv_cache_bit_width, k_quant_type, v_quant_type, **_):
    """Causal grouped-query attention with a KV cache, as onnxruntime's CPU kernel computes it.

    Per batch b, T = seqlens_k[b] + 1 keys are valid after this step; the S new tokens sit at positions
    P .. P + S - 1 with P = T - S (P = 0 for a first prompt, S == total_sequence_length). present (length
    max(total_sequence_length, past length)) is past, zero-padded, with the new K/V rows written at [P, P + S)
    (TensorScatter's lowering: a cache as long as present is updated, as onnxruntime does when past and present
    share a buffer; rows after P + S are the op's unspecified region, which onnxruntime's kernel zeroes
    otherwise); query row i attends key j iff j <= P + i (bottom-right causal alignment per batch) and, with a
    local window W, j > P + i - W. Rotary (do_rotary) rotates Q and K at positions P + i (or position_ids).
    The rest is attention.sdpa (+ attention_bias, head_sink or smooth_softmax as an extra softmax logit)."""
    _float_input(b, query, "query")
    dt = query.dtype
    for what, value_, default in (("causal", causal, 1), ("qk_output", qk_output, 0),
                                  ("sliding_window_cache", sliding_window_cache, 0),
                                  ("kv_cache_bit_width", kv_cache_bit_width, 0)):
        _refuse(b, what, value_, default)
    for what, value_ in (("k_quant_type", k_quant_type), ("v_quant_type", v_quant_type)):
        _refuse(b, what, value_.decode() if isinstance(value_, bytes) else value_, "NONE")
    for what, v_ in (("k_scale", k_scale), ("v_scale", v_scale), ("q_norm_weight", q_norm_weight),
                     ("k_norm_weight", k_norm_weight), ("query_seqlens", query_seqlens)):
        if v_ is not None:
            raise ShapeError(f"{b.where}: input {what} is not supported (quantized KV caches, per-head Q/K norms "
                             f"and right-padded query chunks are not); leave it empty")
    if seqlens_k is None or total_sequence_length is None:
        raise ShapeError(f"{b.where}: inputs seqlens_k and total_sequence_length are required")
    if num_heads <= 0 or kv_num_heads <= 0 or num_heads % kv_num_heads:
        raise ShapeError(f"{b.where}: num_heads {num_heads} must be a positive multiple of kv_num_heads "
                         f"{kv_num_heads}")
    if seqlens_k.dtype.name != "int32" or total_sequence_length.dtype.name != "int32":
        raise ShapeError(f"{b.where}: seqlens_k and total_sequence_length must be int32, got "
                         f"{seqlens_k.dtype.name} and {total_sequence_length.dtype.name}")
    total = int(b.scalar_of(total_sequence_length, "total_sequence_length"))

    # Q, K, V as [B, S, heads, D]
    if key is None:
        if value is not None or query.rank != 3 or query.shape[2] % (num_heads + 2 * kv_num_heads):
            raise ShapeError(f"{b.where}: packed QKV {query.shape} must be [batch, sequence, (num_heads + 2 * "
                             f"kv_num_heads) * head_size] with key and value absent")
        d = query.shape[2] // (num_heads + 2 * kv_num_heads)
        bsz, s = query.shape[:2]
        cuts = [0, num_heads * d, (num_heads + kv_num_heads) * d, query.shape[2]]
        q, k, v = (b.slice(query, starts=[0, 0, lo], ends=[bsz, s, hi], steps=[1, 1, 1])
                   for lo, hi in zip(cuts, cuts[1:]))
    elif value is None:
        raise ShapeError(f"{b.where}: key and value must both be given (or both absent for packed QKV)")
    else:
        q, k, v = query, key, value
    q = _heads(b, q, num_heads, "query")
    k = _heads(b, k, kv_num_heads, "key")
    v = _heads(b, v, kv_num_heads, "value")
    bsz, s, _, d = q.shape
    if k.shape[:2] != (bsz, s) or v.shape != k.shape or k.shape[3] != d:
        raise ShapeError(f"{b.where}: key {k.shape} and value {v.shape} must be [{bsz}, {s}, {kv_num_heads}, {d}]")
    if seqlens_k.shape != (bsz,):
        raise ShapeError(f"{b.where}: seqlens_k {seqlens_k.shape} must be [batch] = [{bsz}]")
    past_s = 0
    if (past_key is None) != (past_value is None):
        raise ShapeError(f"{b.where}: past_key and past_value must both be given or both absent")
    if past_key is not None:
        want = (bsz, kv_num_heads, past_key.shape[2] if past_key.rank == 4 else -1, d)
        if past_key.shape != want or past_value.shape != want:
            raise ShapeError(f"{b.where}: past_key {past_key.shape} and past_value {past_value.shape} must be "
                             f"[batch, kv_num_heads, past_sequence, head_size] = {want}")
        if past_key.dtype != dt or past_value.dtype != dt:
            raise ShapeError(f"{b.where}: past_key/past_value are {past_key.dtype.name}/{past_value.dtype.name}; "
                             f"accepted: the query's {dt.name} (quantized caches are not supported)")
        past_s = past_key.shape[2]
    first_prompt = s == total
    if s > 1 and not first_prompt and bsz != 1:
        raise ShapeError(f"{b.where}: a prompt of {s} tokens with past context (total_sequence_length {total}) "
                         f"needs batch size 1, got {bsz}")
    cap = max(total, past_s)  # the present length

    # P[b]: the position of the first new token
    if first_prompt:
        start = b.const(np.zeros((bsz,), dtype=np.int64))
    else:
        start = b.binary("sub", b.cast_(seqlens_k, "int64"), b.const(np.full((bsz,), s - 1, dtype=np.int64)))
    if do_rotary:
        if cos_cache is None or sin_cache is None:
            raise ShapeError(f"{b.where}: do_rotary needs cos_cache and sin_cache")
        if position_ids is None:
            position_ids = b.binary("add", b.reshape_(start, (bsz, 1)),
                                    b.const(np.arange(s, dtype=np.int64).reshape(1, s)))
        elif position_ids.shape != (bsz, s):
            raise ShapeError(f"{b.where}: position_ids {position_ids.shape} must be [{bsz}, {s}]")
        cos, sin = _positions_cos_sin(b, cos_cache, sin_cache, position_ids, bsz, s)
        rd = 2 * cos_cache.shape[1]
        q = rotate(b, q, cos, sin, rd, rotary_interleaved)
        k = rotate(b, k, cos, sin, rd, rotary_interleaved)

    # present: the cache (past, zero-padded to the present length) with the new rows written at [P, P + S)
    def present(new, past):
        shape = (bsz, kv_num_heads, cap, d)
        if past is None or not past_s:
            cache = b.const(np.zeros(shape, dtype=dt.np))
        elif past_s < cap:
            cache = b.pad(past, pads=[0, 0, 0, 0, 0, 0, cap - past_s, 0], value=0.0, interior=[0] * 4)
        else:
            cache = past
        return tensor_scatter(b, cache, b.transpose_(new, (0, 2, 1, 3)), start, axis=2)
    present_k, present_v = present(k, past_key), present(v, past_value)

    # the additive bias: causal from each batch's P, the local window, attention_bias
    hi = None if local_window_size is None or local_window_size < 0 else local_window_size - 1
    allowed = _band_allowed(b, s, cap, start, 0, hi)  # [B, 1, S, cap]
    bias = _neg_inf_bias(b, allowed, dt)
    if attention_bias is not None:
        ab = b.cast_(attention_bias, dt)
        if ab.rank != 4 or ab.shape[2] != s or ab.shape[3] > cap:
            raise ShapeError(f"{b.where}: attention_bias {ab.shape} must be [batch or 1, num_heads or 1, {s}, "
                             f"{total}]")
        if ab.shape[3] < cap:
            ab = b.pad(ab, pads=[0, 0, 0, 0, 0, 0, 0, cap - ab.shape[3]], value=0.0, interior=[0] * 4)
        bias = b.binary("add", bias, ab)
    sink = head_sink
    if sink is None and smooth_softmax:
        sink = b.const(np.zeros((1,), dtype=dt.np))
    if sink is not None and sink.type.numel not in (1, num_heads):
        raise ShapeError(f"{b.where}: head_sink {sink.shape} must be [num_heads] = [{num_heads}]")
    qh = b.transpose_(q, (0, 2, 1, 3))
    sc = float(scale) if scale else 1.0 / np.sqrt(d)
    y, _, _, _ = sdpa(b, qh, present_k, present_v, bias, sc, softcap,
                      sink=None if sink is None else b.reshape_(sink, (sink.type.numel,)))
    y = b.reshape_(b.transpose_(y, (0, 2, 1, 3)), (bsz, s, num_heads * d))
    return y, present_k, present_v
