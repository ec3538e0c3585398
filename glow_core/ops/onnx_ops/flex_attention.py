"""FlexAttention (domain ai.onnx.preview): attention with score_mod / prob_mod subgraphs.

Lowered like Attention: matmul of the scaled Q and K^T, the score_mod subgraph
inlined on the scores, a primitive softmax (in float32 for 16-bit inputs, as
ONNX's reference does), the prob_mod subgraph inlined on the probabilities, and
a matmul with V. K/V heads are repeated for grouped-query attention.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ...graph import split_outer
from ...types import dtype
from ..registry import onnx_op


def _softmax(b, x):
    ax = [x.rank - 1]
    m = b.reduce("reduce_max", x, ax, keepdims=True)
    e = b.exp(b.binary("sub", x, m))
    return b.binary("div", e, b.reduce("reduce_sum", e, ax, keepdims=True))


def _mod(b, g, x, outer, tag):
    if g is None:
        return x
    outs = b.inline(g, [x] + outer, tag)
    if len(outs) != 1 or outs[0].shape != x.shape:
        raise ShapeError(f"{b.where}: {tag[:-1]} must produce one tensor of shape {x.shape}")
    return b.cast_(outs[0], x.dtype)


@onnx_op("FlexAttention")
def flex_attention(b, *inputs, scale=None, score_mod=None, prob_mod=None, softmax_precision=None, **attrs):
    """softmax(score_mod((Q*sqrt(s)) @ (K*sqrt(s))^T)) -> prob_mod -> @ V, with matmul, the inlined
    subgraphs and a primitive softmax."""
    (q, k, v, *_), outer = split_outer(inputs, attrs)
    if not q.rank == k.rank == v.rank == 4:
        raise ShapeError(f"{b.where}: Q {q.shape}, K {k.shape}, V {v.shape} must be rank 4")
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk:
        if hq % hk:
            raise ShapeError(f"{b.where}: {hq} query heads are not a multiple of {hk} key/value heads")
        r = hq // hk

        def rep(x):
            x = b.broadcast_to(b.reshape_(x, (x.shape[0], hk, 1) + x.shape[2:]), (x.shape[0], hk, r) + x.shape[2:])
            return b.reshape_(x, (x.shape[0], hq) + x.shape[3:])
        k, v = rep(k), rep(v)
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[3])
    sc = b.const(np.asarray([np.sqrt(np.float32(scale))]).astype(q.dtype.np))
    scores = b.matmul(b.binary("mul", q, sc), b.binary("mul", b.transpose_(k, (0, 1, 3, 2)), sc))
    if softmax_precision is not None:
        cdt = dtype(int(softmax_precision))
    else:
        cdt = dtype("float32") if q.dtype.itemsize < 4 else q.dtype
    scores = _mod(b, score_mod, b.cast_(scores, cdt), outer, "score_mod_")
    probs = _mod(b, prob_mod, _softmax(b, scores), outer, "prob_mod_")
    y = b.matmul(probs, b.cast_(v, cdt))
    return b.cast_(y, v.dtype)
