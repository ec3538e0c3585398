"""Transformer ONNX ops: Attention, RotaryEmbedding, SwiGLU, lowered into primitives.

The softmax used here is written directly with primitives (reduce_max, sub,
exp, reduce_sum, div) so that this family does not depend on other families'
lowerings. A row whose logits are all -inf softmaxes to zeros, as in ONNX's
reference implementation.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ...types import dtype
from ..registry import onnx_op

FLOAT_NAMES = ("float32", "float16", "bfloat16", "float64")


def softmax_last(b, x):
    """Softmax over the last axis; all--inf rows give zeros instead of NaN."""
    ax = [x.rank - 1]
    m = b.reduce("reduce_max", x, ax, keepdims=True)
    neg_inf = b.scalar_like(-np.inf, m)
    zero = b.scalar_like(0, m)
    m = b.select(b.eq(m, neg_inf), zero, m)
    e = b.exp(b.binary("sub", x, m))
    s = b.reduce("reduce_sum", e, ax, keepdims=True)
    s = b.select(b.eq(s, b.scalar_like(0, s)), b.scalar_like(1, s), s)
    return b.binary("div", e, s)


def _heads_4d(b, x, heads, what):
    """[B, S, H*D] -> [B, H, S, D]."""
    if heads is None or heads <= 0 or x.shape[2] % heads:
        raise ShapeError(f"{b.where}: 3-D {what} {x.shape} needs a num_heads attribute dividing its last dim")
    x = b.reshape_(x, (x.shape[0], x.shape[1], heads, x.shape[2] // heads))
    return b.transpose_(x, (0, 2, 1, 3))


def _neg_inf_bias(b, allowed, dt):
    """0 where ``allowed`` (bool Value) holds, -inf elsewhere, in dtype ``dt``."""
    zero = b.const(np.zeros(allowed.shape, dtype=dt.np))
    ninf = b.const(np.full(allowed.shape, -np.inf, dtype=dt.np))
    return b.select(allowed, zero, ninf)


def _band_allowed(b, sq, skv, offset, lo, hi):
    """Bool mask: lo <= (i + offset) - j <= hi (bounds of None are open). offset is int or int64 Value [B]."""
    i = np.arange(sq).reshape(sq, 1)
    j = np.arange(skv).reshape(1, skv)
    if isinstance(offset, (int, np.integer)):
        diff = i + int(offset) - j
        ok = np.ones((sq, skv), dtype=bool)
        if lo is not None:
            ok &= diff >= lo
        if hi is not None:
            ok &= diff <= hi
        return b.const(ok)
    off = b.reshape_(b.cast_(offset, "int64"), (offset.shape[0], 1, 1))
    diff = b.binary("add", off, b.const((i - j).astype(np.int64)))
    ok = None
    for bound, prim in ((lo, "ge"), (hi, "le")):
        if bound is None:
            continue
        c = b.binary(prim, diff, b.const(np.full((1, 1, 1), bound, dtype=np.int64)))
        ok = c if ok is None else b.and_(ok, c)
    if ok is None:
        ok = b.const(np.ones((1, sq, skv), dtype=bool))
    return b.reshape_(ok, (ok.shape[0], 1, sq, skv))


def repeat_kv_heads(b, q, k, v):
    """Grouped-query attention: K and V [B, Hk, T, D] with each head repeated for the Hq // Hk query heads it
    serves (query head i reads key/value head i // (Hq // Hk)), by reshape/broadcast."""
    hq, hk = q.shape[1], k.shape[1]
    if hq == hk:
        return k, v
    if not hk or hq % hk or v.shape[1] != hk:
        raise ShapeError(f"{b.where}: {hq} query heads are not a multiple of {hk} key/value heads")
    r = hq // hk

    def rep(x):
        x = b.reshape_(x, (x.shape[0], hk, 1) + x.shape[2:])
        x = b.broadcast_to(x, (x.shape[0], hk, r) + x.shape[3:])
        return b.reshape_(x, (x.shape[0], hq) + x.shape[3:])
    return rep(k), rep(v)


def sdpa(b, q, k, v, bias, scale, softcap=0.0, softmax_precision=None, sink=None):
    """Scaled dot-product attention on [B, H, S, D] heads (K/V heads repeated for GQA): Q scaled by ``scale``
    (float32/64; 16-bit floats: Q and K each by sqrt(scale), ONNX's definition), QK^T, softcap (tanh(x / cap) * cap), + ``bias`` (additive, -inf where
    masked), softmax (optionally in ``softmax_precision``; ``sink``, a Value [H] or 0-d, adds exp(sink - max)
    to each row's denominator as a logit no value reads), rows whose bias is -inf everywhere give zeros, P V.
    Returns (y, qk, qk + bias, p) with p before its cast to the inputs' dtype."""
    dt = q.dtype
    k, v = repeat_kv_heads(b, q, k, v)
    kt = b.transpose_(k, (0, 1, 3, 2))
    if dt.name in ("float32", "float64"):
        # Q times ``scale`` and K^T as it is (ONNX's reference scales both by sqrt(scale): the same up to
        # roundings): a backend's matmul reads K^T, the repeated heads of a KV cache, in place, where a scaled copy
        # of the keys would be written at every run (the whole cache at every decode step).
        qk = b.matmul(b.binary("mul", q, b.const(np.asarray([scale]).astype(dt.np))), kt)
    else:  # 16-bit floats as the reference: each operand by sqrt(scale), so Q K^T stays in range
        scv = b.const(np.asarray([np.sqrt(scale)]).astype(dt.np))  # shape (1,), broadcast by b.binary
        qk = b.matmul(b.binary("mul", q, scv), b.binary("mul", kt, scv))
    if softcap is not None and softcap > 0:
        cap = b.const(np.asarray(softcap, dtype=dt.np))
        qk = b.binary("mul", b.tanh(b.binary("div", qk, cap)), cap)
    with_bias = b.binary("add", qk, bias)
    x = with_bias
    if softmax_precision is not None:
        x = b.cast_(x, dtype(int(softmax_precision)))
    if sink is None:
        p = softmax_last(b, x)
    else:
        col = b.reshape_(b.cast_(sink, x.dtype), (1, sink.type.numel, 1, 1))
        col = b.broadcast_to(col, x.shape[:-1] + (1,))
        p = softmax_last(b, b.concat(x, col, axis=x.rank - 1))
        p = b.slice(p, starts=[0] * p.rank, ends=list(x.shape), steps=[1] * p.rank)
    bias_max = b.reduce("reduce_max", bias, [bias.rank - 1], keepdims=True)
    all_masked = b.eq(bias_max, b.scalar_like(-np.inf, bias_max))
    p = b.where_(all_masked, b.scalar_like(0, p, shape=()), p)
    pc = b.cast_(p, dt)
    # p may be broadcast-shaped (mask with extra dims); matmul needs equal batch dims
    shape = b.broadcast_shapes(pc.shape[:-2], v.shape[:-2])
    pc = b.broadcast_to(pc, shape + pc.shape[-2:])
    v = b.broadcast_to(v, shape + v.shape[-2:])
    return b.matmul(pc, v), qk, with_bias, p


@onnx_op("Attention")
def attention(b, q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *,
              scale=None, is_causal=0, q_num_heads=None, kv_num_heads=None, softmax_precision=None,
              softcap=0.0, qk_matmul_output_mode=0, left_window_size=-1, right_window_size=-1, **_):
    """Scaled dot-product attention with matmul, an additive -inf bias (mask, causal band, padding),
    a primitive softmax and matmul; 3-D inputs are split into heads by reshape/transpose and GQA
    repeats K/V heads by reshape/broadcast."""
    if not (q.rank == k.rank == v.rank) or q.rank not in (3, 4):
        raise ShapeError(f"{b.where}: Q, K, V must all be 3-D or all 4-D, got {q.shape}, {k.shape}, {v.shape}")
    if q.dtype.name not in FLOAT_NAMES:
        raise ShapeError(f"{b.where}: Q dtype {q.dtype} is not accepted; accepted: {', '.join(FLOAT_NAMES)}")
    dt = q.dtype
    rank3 = q.rank == 3
    if rank3:
        q = _heads_4d(b, q, q_num_heads, "Q")
        k = _heads_4d(b, k, kv_num_heads, "K")
        v = _heads_4d(b, v, kv_num_heads, "V")
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[3])
    if past_key is not None:
        k = b.concat(b.cast_(past_key, dt), k, axis=2)
    if past_value is not None:
        v = b.concat(b.cast_(past_value, dt), v, axis=2)
    present_k, present_v = k, v
    sq, skv = q.shape[2], k.shape[2]
    bsz = q.shape[0]

    # the additive bias
    bias = b.const(np.zeros((sq, skv), dtype=dt.np))
    mask = attn_mask
    if mask is not None:
        pad = skv - mask.shape[-1]
        if pad > 0:
            fill = False if mask.dtype.name == "bool" else -np.inf
            mask = b.pad(mask, pads=[0] * mask.rank + [0] * (mask.rank - 1) + [pad], value=float(fill),
                         interior=[0] * mask.rank)
        if mask.dtype.name == "bool":
            mask = _neg_inf_bias(b, mask, dt)
        else:
            mask = b.cast_(mask, dt)
    if past_key is not None:
        offset = past_key.shape[2]
    elif nonpad_kv_seqlen is not None:
        offset = b.binary("sub", b.cast_(nonpad_kv_seqlen, "int64"),
                          b.const(np.full(nonpad_kv_seqlen.shape, sq, dtype=np.int64)))
    else:
        offset = 0
    if is_causal:
        base = bias if mask is None else mask
        if left_window_size >= 0 or right_window_size >= 0:
            base = b.binary("add", bias, base)
        bias = b.binary("add", base, _neg_inf_bias(b, _band_allowed(b, sq, skv, offset, 0, None), dt))
    elif mask is not None:
        bias = b.binary("add", bias, mask)
    if left_window_size >= 0 or right_window_size >= 0:
        lo = -right_window_size if right_window_size >= 0 else None
        hi = left_window_size if left_window_size >= 0 else None
        bias = b.binary("add", bias, _neg_inf_bias(b, _band_allowed(b, sq, skv, offset, lo, hi), dt))
    if nonpad_kv_seqlen is not None:
        lens = b.reshape_(b.cast_(nonpad_kv_seqlen, "int64"), (bsz, 1, 1, 1))
        ok = b.binary("lt", b.const(np.arange(skv, dtype=np.int64).reshape(1, 1, 1, skv)), lens)
        bias = b.binary("add", bias, _neg_inf_bias(b, ok, dt))

    y, qk, with_bias, p = sdpa(b, q, k, v, bias, scale, softcap, softmax_precision)
    qk_out = p if qk_matmul_output_mode == 3 else with_bias if qk_matmul_output_mode == 2 else qk
    qk_out = b.cast_(qk_out, dt)
    if rank3:
        y = b.transpose_(y, (0, 2, 1, 3))
        y = b.reshape_(y, (y.shape[0], y.shape[1], y.shape[2] * y.shape[3]))
    return y, present_k, present_v, qk_out


@onnx_op("RotaryEmbedding")
def rotary_embedding(b, x, cos_cache, sin_cache, position_ids=None, *, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0, **_):
    """Rotate pairs of the first rotary_embedding_dim features: gather cos/sin rows by position_ids,
    split halves (or even/odd lanes when interleaved) with slice/reshape, mul/sub/add, concat back."""
    orig_shape = x.shape
    if x.rank == 3:
        if not num_heads:
            raise ShapeError(f"{b.where}: 3-D input {x.shape} needs num_heads")
        x = b.reshape_(x, (x.shape[0], x.shape[1], num_heads, x.shape[2] // num_heads))
    elif x.rank == 4:
        x = b.transpose_(x, (0, 2, 1, 3))  # [B, S, H, D]
    else:
        raise ShapeError(f"{b.where}: input must be 3-D or 4-D, got {x.shape}")
    bsz, s, h, d = x.shape
    rd = rotary_embedding_dim or d
    if position_ids is not None:
        cos = b.gather(cos_cache, b.cast_(position_ids, "int64"), axis=0)  # [B, S, rd/2]
        sin = b.gather(sin_cache, b.cast_(position_ids, "int64"), axis=0)
    else:
        cos, sin = cos_cache, sin_cache
    cos = b.reshape_(cos, (cos.shape[-3] if cos.rank == 3 else 1, s, 1, cos.shape[-1]))
    sin = b.reshape_(sin, (sin.shape[-3] if sin.rank == 3 else 1, s, 1, sin.shape[-1]))
    r = rotate(b, x, cos, sin, rd, interleaved)
    if len(orig_shape) == 4:
        return b.transpose_(r, (0, 2, 1, 3))
    return b.reshape_(r, orig_shape)


def rotate(b, x, cos, sin, rd, interleaved):
    """RoPE on x [B, S, H, D]: the first ``rd`` features rotated in pairs (halves, or even/odd lanes when
    ``interleaved``) by the angles whose cos and sin are given [B or 1, S, 1, >= rd/2] (their first rd/2
    columns are used), the rest passed through: slice/reshape, mul/sub/add, concat back."""
    bsz, s, h, d = x.shape
    half = rd // 2
    if rd % 2 or not 0 < rd <= d or cos.shape[-1] < half:
        raise ShapeError(f"{b.where}: rotary dimension {rd} must be even, at most the head size {d}, and the "
                         f"cos/sin caches (last dim {cos.shape[-1]}) must hold rd/2 = {half} columns")
    cos = b.slice(cos, starts=[0, 0, 0, 0], ends=list(cos.shape[:3]) + [half], steps=[1] * 4)
    sin = b.slice(sin, starts=[0, 0, 0, 0], ends=list(sin.shape[:3]) + [half], steps=[1] * 4)
    cos, sin = b.cast_(cos, x.dtype), b.cast_(sin, x.dtype)
    rot = b.slice(x, starts=[0, 0, 0, 0], ends=[bsz, s, h, rd], steps=[1] * 4)
    if interleaved:
        x1 = b.slice(rot, starts=[0, 0, 0, 0], ends=[bsz, s, h, rd], steps=[1, 1, 1, 2])
        x2 = b.slice(rot, starts=[0, 0, 0, 1], ends=[bsz, s, h, rd], steps=[1, 1, 1, 2])
    else:
        x1 = b.slice(rot, starts=[0, 0, 0, 0], ends=[bsz, s, h, half], steps=[1] * 4)
        x2 = b.slice(rot, starts=[0, 0, 0, half], ends=[bsz, s, h, rd], steps=[1] * 4)
    r1 = b.binary("sub", b.binary("mul", cos, x1), b.binary("mul", sin, x2))
    r2 = b.binary("add", b.binary("mul", sin, x1), b.binary("mul", cos, x2))
    if interleaved:
        r = b.concat(b.reshape_(r1, r1.shape + (1,)), b.reshape_(r2, r2.shape + (1,)), axis=4)
        r = b.reshape_(r, (bsz, s, h, rd))
    else:
        r = b.concat(r1, r2, axis=3)
    if rd < d:
        r = b.concat(r, b.slice(x, starts=[0, 0, 0, rd], ends=[bsz, s, h, d], steps=[1] * 4), axis=3)
    return r


@onnx_op("SwiGLU")
def swiglu(b, a, gate=None, *, alpha=1.0, **_):
    """Swish(A, alpha) * B = A * sigmoid(alpha * A) * B with mul and sigmoid."""
    s = b.sigmoid(b.binary("mul", a, b.scalar_like(alpha, a, shape=())))
    y = b.mul(a, s)
    return y if gate is None else b.binary("mul", y, gate)
