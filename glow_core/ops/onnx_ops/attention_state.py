"""Stateful sequence-mixing ONNX ops: LinearAttention and CausalConvWithState.

LinearAttention is unrolled over the static sequence length: every step is a
few matmuls and elementwise primitives on a [B, H, d_k, d_v] state, computed in
float32 as ONNX's reference does. CausalConvWithState is a depthwise `conv`
over the input with the carried state (or zeros) concatenated in front.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..registry import onnx_op


def _slice_axis(b, x, axis, start, end):
    starts = [0] * x.rank
    ends = list(x.shape)
    starts[axis], ends[axis] = start, end
    return b.slice(x, starts=starts, ends=ends, steps=[1] * x.rank)


def _heads(b, x, heads):
    """[B, T, H*D] -> [B, H, T, D]."""
    if x.rank != 3 or heads <= 0 or x.shape[2] % heads:
        raise ShapeError(f"{b.where}: input {x.shape} must be [B, T, H*D] with H={heads} dividing the last dim")
    x = b.reshape_(x, (x.shape[0], x.shape[1], heads, x.shape[2] // heads))
    return b.transpose_(x, (0, 2, 1, 3))


@onnx_op("LinearAttention")
def linear_attention(b, query, key, value, past_state=None, decay=None, beta=None, *, chunk_size=64,
                     kv_num_heads=0, q_num_heads=0, scale=0.0, update_rule="gated_delta", **_):
    """Recurrence unrolled over T: state *= exp(decay_t) (gated), v_t = beta_t * (v_t - k_t @ state)
    (delta), state += k_t^T v_t (outer product by broadcast mul), o_t = scale * q_t @ state; K/V heads are
    repeated for GQA with reshape/broadcast."""
    rule = update_rule.decode() if isinstance(update_rule, bytes) else (update_rule or "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ShapeError(f"{b.where}: update_rule '{rule}' is not one of linear, gated, delta, gated_delta")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None) or delta != (beta is not None):
        raise ShapeError(f"{b.where}: update_rule '{rule}' {'needs' if gating else 'forbids'} decay and "
                         f"{'needs' if delta else 'forbids'} beta")
    if not q_num_heads or not kv_num_heads or q_num_heads % kv_num_heads:
        raise ShapeError(f"{b.where}: q_num_heads {q_num_heads} must be a positive multiple of kv_num_heads "
                         f"{kv_num_heads}")
    out_dt = query.dtype
    f32 = "float32"
    bsz, t, _ = query.shape
    hk, hq = kv_num_heads, q_num_heads
    q4 = b.cast_(_heads(b, query, hq), f32)
    k4 = b.cast_(_heads(b, key, hk), f32)
    v4 = b.cast_(_heads(b, value, hk), f32)
    dk, dv = q4.shape[3], v4.shape[3]
    g = r = None
    if decay is not None:
        if decay.shape[-1] == hk:
            g = b.transpose_(b.reshape_(decay, (bsz, t, hk, 1)), (0, 2, 1, 3))
        elif decay.shape[-1] == hk * dk:
            g = _heads(b, decay, hk)
        else:
            raise ShapeError(f"{b.where}: decay {decay.shape} last dim must be {hk} or {hk * dk}")
        g = b.exp(b.cast_(g, f32))  # [B, Hk, T, 1 or dk]
    if beta is not None:
        bl = beta.shape[-1]
        r = b.cast_(b.transpose_(b.reshape_(beta, (bsz, t, bl, 1)), (0, 2, 1, 3)), f32)  # [B, bl, T, 1]
    if past_state is not None:
        state_dt = past_state.dtype
        state = b.cast_(past_state, f32)
    else:
        state_dt = out_dt
        state = b.const(np.zeros((bsz, hk, dk, dv), dtype=np.float32))
    scale_val = float(scale) if scale else 1.0 / np.sqrt(dk)
    sc = b.const(np.asarray(scale_val, dtype=np.float32))
    grp = hq // hk
    outs = []
    for i in range(t):
        q_t = _slice_axis(b, q4, 2, i, i + 1)  # [B, Hq, 1, dk]
        k_t = _slice_axis(b, k4, 2, i, i + 1)  # [B, Hk, 1, dk]
        v_t = _slice_axis(b, v4, 2, i, i + 1)  # [B, Hk, 1, dv]
        if g is not None:
            g_t = b.transpose_(_slice_axis(b, g, 2, i, i + 1), (0, 1, 3, 2))  # [B, Hk, 1 or dk, 1]
            state = b.binary("mul", state, g_t)
        if r is not None:
            retrieved = b.matmul(k_t, state)  # [B, Hk, 1, dv]
            v_t = b.binary("mul", _slice_axis(b, r, 2, i, i + 1), b.sub(v_t, retrieved))
        state = b.binary("add", state, b.binary("mul", b.transpose_(k_t, (0, 1, 3, 2)), v_t))
        read = state
        if grp > 1:
            read = b.reshape_(b.broadcast_to(b.reshape_(state, (bsz, hk, 1, dk, dv)), (bsz, hk, grp, dk, dv)),
                              (bsz, hq, dk, dv))
        outs.append(b.binary("mul", b.matmul(q_t, read), sc))
    out = outs[0] if len(outs) == 1 else b.concat(*outs, axis=2)  # [B, Hq, T, dv]
    out = b.reshape_(b.transpose_(out, (0, 2, 1, 3)), (bsz, t, hq * dv))
    return b.cast_(out, out_dt), b.cast_(state, state_dt)


@onnx_op("CausalConvWithState")
def causal_conv_with_state(b, x, w, bias=None, past_state=None, *, activation="none", **_):
    """Concat the state (zeros when absent) before the input on the time axis, depthwise `conv`
    (group = channels), optional SiLU (x * sigmoid(x)); the new state is the last k-1 padded steps."""
    act = activation.decode() if isinstance(activation, bytes) else (activation or "none")
    if act not in ("none", "silu", "swish"):
        raise ShapeError(f"{b.where}: activation '{act}' is not one of none, silu, swish")
    if x.rank != 3 or w.rank != 3 or w.shape[2] < 1:
        raise ShapeError(f"{b.where}: input {x.shape} and weight {w.shape} must be rank 3 (a kernel of at least "
                         f"one step)")
    bsz, c, _ = x.shape
    k = w.shape[2]
    if past_state is None:
        past_state = b.const(np.zeros((bsz, c, k - 1), dtype=x.dtype.np))
    padded = b.concat(past_state, x, axis=2) if k > 1 else x
    if bias is None:
        bias = b.const(np.zeros(w.shape[0], dtype=x.dtype.np))
    y = b.conv(padded, w, bias, strides=[1], dilations=[1], pads=[0, 0], group=c)
    if act != "none":
        y32 = b.cast_(y, "float32")
        y = b.cast_(b.mul(y32, b.sigmoid(y32)), x.dtype)
    n = padded.shape[2]
    if k == 1:  # an empty state
        present = b.const(np.zeros((bsz, c, 0), dtype=x.dtype.np))
    else:
        present = _slice_axis(b, padded, 2, n - (k - 1), n)
    return y, present
