"""Loss ONNX ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

The class picked by each target is selected with a one-hot comparison
(eq against an iota over classes, select, reduce_sum), so targets equal to an
out-of-range ignore_index never index out of bounds. Weights are picked the same
way; ignored positions get weight 0.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..registry import onnx_op

_REDUCTIONS = ("none", "sum", "mean")


def _nll(b, logp, target, weight, ignore_index, reduction):
    """The NLL loss of log-probabilities ``logp`` [N, C, d...] at ``target`` [N, d...]."""
    red = reduction.decode() if isinstance(reduction, bytes) else (reduction or "mean")
    if red not in _REDUCTIONS:
        raise ShapeError(f"{b.where}: reduction '{red}' is not one of {', '.join(_REDUCTIONS)}")
    if logp.rank < 2 or target.shape != (logp.shape[0],) + logp.shape[2:]:
        raise ShapeError(f"{b.where}: input {logp.shape} must be [N, C, d...] and target {target.shape} "
                         f"[N, d...]")
    if target.dtype.name not in ("int32", "int64"):
        raise ShapeError(f"{b.where}: target dtype {target.dtype} is not accepted; accepted: int32, int64")
    dt = logp.dtype
    n, c = logp.shape[:2]
    tshape = target.shape
    t = b.cast_(target, "int64")
    t3 = b.reshape_(t, (n, 1) + tshape[1:])
    classes = b.const(np.arange(c, dtype=np.int64).reshape((1, c) + (1,) * (len(tshape) - 1)))
    onehot = b.binary("eq", t3, classes)  # [N, C, d...]
    zero = b.const(np.zeros((), dtype=dt.np))
    picked = b.reduce("reduce_sum", b.where_(onehot, logp, zero), [1], keepdims=False)  # [N, d...]
    loss = b.neg(picked)
    keep = None
    if ignore_index is not None:
        keep = b.binary("eq", t, b.const(np.asarray(ignore_index, dtype=np.int64)))
        keep = b.not_(keep)
        loss = b.where_(keep, loss, zero)
    w = None
    if weight is not None:
        if weight.shape != (c,):
            raise ShapeError(f"{b.where}: weight {weight.shape} must be [{c}]")
        wv = b.reshape_(b.cast_(weight, dt), (1, c) + (1,) * (len(tshape) - 1))
        w = b.reduce("reduce_sum", b.where_(onehot, wv, zero), [1], keepdims=False)
        if keep is not None:
            w = b.where_(keep, w, zero)
        loss = b.mul(loss, w)
    elif keep is not None:
        w = b.where_(keep, b.const(np.ones(tshape, dtype=dt.np)), zero)
    if red == "none":
        return loss
    axes = list(range(loss.rank))
    total = b.reduce("reduce_sum", loss, axes, keepdims=False)
    if red == "sum":
        return total
    if w is not None:
        return b.div(total, b.reduce("reduce_sum", w, axes, keepdims=False))
    # Builder.const makes 0-d arrays 1-d (np.ascontiguousarray): reshape back to a scalar
    return b.div(total, b.reshape_(b.scalar_like(float(loss.type.numel), total, shape=(1,)), ()))


@onnx_op("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(b, x, target, weight=None, *, ignore_index=None, reduction="mean", **_):
    """-x[n, target[n, d], d], weighted and reduced (see module doc)."""
    return _nll(b, x, target, weight, ignore_index, reduction)


@onnx_op("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(b, scores, labels, weight=None, *, ignore_index=None, reduction="mean", **_):
    """log(softmax(scores, axis=1)) with reduce_max/sub/exp/reduce_sum/div/log, then the NLL loss; the
    second output is the log-probabilities."""
    if scores.rank < 2:
        raise ShapeError(f"{b.where}: scores {scores.shape} must be [N, C, d...]")
    m = b.reduce("reduce_max", scores, [1], keepdims=True)
    e = b.exp(b.binary("sub", scores, m))
    s = b.reduce("reduce_sum", e, [1], keepdims=True)
    logp = b.log(b.binary("div", e, s))
    return _nll(b, logp, labels, weight, ignore_index, reduction), logp
