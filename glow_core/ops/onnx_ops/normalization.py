"""Normalization ONNX ops, lowered to reductions (reduce_sum over a count) and elementwise arithmetic."""
from __future__ import annotations

from math import prod

import numpy as np

from ...errors import ShapeError
from ..registry import onnx_op

_LOW_FLOATS = ("float16", "bfloat16")


def _check_float(b, x, what="X"):
    if x.dtype.np.kind not in "fV" and x.dtype.name not in _LOW_FLOATS:
        raise ShapeError(f"{b.where}: {what} has dtype {x.dtype.name}; accepted: floating-point types")


def mean(b, x, axes):
    """Mean over ``axes`` (kept as size-1 dims): reduce_sum divided by the element count."""
    s = b.reduce("reduce_sum", x, axes, keepdims=True)
    return b.div(s, b.scalar_like(prod(x.shape[a] for a in axes), s))


def moments(b, x, axes):
    """Mean and population variance over ``axes`` (kept), and the centred input x - mean."""
    m = mean(b, x, axes)
    d = b.binary("sub", x, m)
    return m, mean(b, b.mul(d, d), axes), d


def inv_std(b, var, epsilon):
    """1 / sqrt(var + epsilon)."""
    return b.reciprocal(b.sqrt(b.add(var, b.scalar_like(epsilon, var))))


def per_channel(b, v, rank):
    """A [C] parameter reshaped to [C, 1, ...] so that it broadcasts against [N, C, *spatial]."""
    return b.reshape_(v, (v.shape[0],) + (1,) * (rank - 2))


def _stash(b, x, stash_type):
    """Compute in float32 when stash_type asks for it (1) and x is a narrower float."""
    return b.cast_(x, "float32") if stash_type == 1 and x.dtype.name in _LOW_FLOATS else x


@onnx_op("BatchNormalization")
def batch_normalization(b, x, scale, bias, input_mean, input_var, *, epsilon=1e-5, momentum=0.9,
                        training_mode=0, **_):
    """(x - mean) / sqrt(var + epsilon) * scale + bias per channel. training_mode: batch statistics over all
    axes but 1, and running statistics input * momentum + batch * (1 - momentum) as extra outputs."""
    _check_float(b, x)
    if x.rank < 2:
        raise ShapeError(f"{b.where}: X {x.shape} must be [N, C, ...]")
    r = x.rank
    if training_mode:
        axes = [0] + list(range(2, r))
        m, var, d = moments(b, x, axes)
        y = b.binary("mul", d, inv_std(b, var, epsilon))
        m1 = b.reshape_(m, (x.shape[1],))
        v1 = b.reshape_(var, (x.shape[1],))
        mom = b.scalar_like(momentum, m1)
        one_m = b.scalar_like(1.0 - momentum, m1)
        run_mean = b.add(b.mul(b.cast_(input_mean, x.dtype), mom), b.mul(m1, one_m))
        run_var = b.add(b.mul(b.cast_(input_var, x.dtype), mom), b.mul(v1, one_m))
        outs = [run_mean, run_var]
    else:
        d = b.binary("sub", x, per_channel(b, b.cast_(input_mean, x.dtype), r))
        y = b.binary("mul", d, per_channel(b, inv_std(b, b.cast_(input_var, x.dtype), epsilon), r))
        outs = []
    y = b.binary("mul", y, per_channel(b, b.cast_(scale, x.dtype), r))
    y = b.binary("add", y, per_channel(b, b.cast_(bias, x.dtype), r))
    return [y] + outs


@onnx_op("InstanceNormalization")
def instance_normalization(b, x, scale, bias, *, epsilon=1e-5):
    """Per (n, c): (x - mean) / sqrt(var + epsilon) over the spatial dims, then * scale + bias per channel."""
    _check_float(b, x)
    if x.rank < 3:
        raise ShapeError(f"{b.where}: input {x.shape} must be [N, C, *spatial]")
    for what, v in (("scale", scale), ("B", bias)):
        if v.shape != (x.shape[1],):
            raise ShapeError(f"{b.where}: {what} of shape {v.shape} for an input {x.shape}; accepted: 1-D of the "
                             f"channel count, ({x.shape[1]},)")
    _, var, d = moments(b, x, list(range(2, x.rank)))
    y = b.binary("mul", d, inv_std(b, var, epsilon))
    y = b.binary("mul", y, per_channel(b, scale, x.rank))
    return b.binary("add", y, per_channel(b, bias, x.rank))


@onnx_op("LayerNormalization")
def layer_normalization(b, x, scale, bias=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    """Moments over the dims from ``axis`` on (in float32 with stash_type 1), normalize, * scale + bias.
    Extra outputs: the mean and 1/std (kept dims)."""
    _check_float(b, x)
    axis = b.norm_axis(axis, x.rank)
    xs = _stash(b, x, stash_type)
    m, var, d = moments(b, xs, list(range(axis, x.rank)))
    inv = inv_std(b, var, epsilon)
    y = b.cast_(b.binary("mul", d, inv), x.dtype)
    y = b.binary("mul", y, scale)
    if bias is not None:
        y = b.binary("add", y, bias)
    return y, m, inv


@onnx_op("RMSNormalization")
def rms_normalization(b, x, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """x / sqrt(mean(x^2 over the dims from ``axis`` on) + epsilon) * scale."""
    _check_float(b, x)
    axis = b.norm_axis(axis, x.rank)
    xs = _stash(b, x, stash_type)
    ms = mean(b, b.mul(xs, xs), list(range(axis, x.rank)))
    y = b.cast_(b.binary("mul", xs, inv_std(b, ms, epsilon)), x.dtype)
    return b.binary("mul", y, scale)


@onnx_op("GroupNormalization")
def group_normalization(b, x, scale, bias, *, epsilon=1e-5, num_groups=None, stash_type=1):
    """Reshape to [N, G, rest], moments over rest, normalize, reshape back, * scale + bias per channel
    (per-group scale/bias of opset 18 are repeated to the channels)."""
    _check_float(b, x)
    if x.rank < 2:
        raise ShapeError(f"{b.where}: input {list(x.shape)} has no channel axis; [N, C, ...] is accepted")
    N, C = x.shape[:2]
    G = int(num_groups)
    if G <= 0 or C % G:
        raise ShapeError(f"{b.where}: num_groups {G} must divide the {C} channels")
    xs = _stash(b, x, stash_type)
    g = b.reshape_(xs, (N, G, x.type.numel // (N * G)))
    _, var, d = moments(b, g, [2])
    y = b.cast_(b.reshape_(b.binary("mul", d, inv_std(b, var, epsilon)), x.shape), x.dtype)
    params = []
    for v in (scale, bias):
        if v.shape == (G,) and G != C:
            v = b.reshape_(b.broadcast_to(b.reshape_(v, (G, 1)), (G, C // G)), (C,))
        if v.shape != (C,):
            raise ShapeError(f"{b.where}: scale and bias must have shape ({C},), got {v.shape}")
        params.append(per_channel(b, b.cast_(v, x.dtype), x.rank))
    return b.binary("add", b.binary("mul", y, params[0]), params[1])


@onnx_op("LpNormalization")
def lp_normalization(b, x, *, axis=-1, p=2):
    """x / norm along ``axis``: sum |x| (p=1) or sqrt(sum x^2) (p=2); 0 where the norm is 0. Computed as y / norm(y)
    of y = x / m, m the largest magnitude along the axis (then 1 <= norm(y)^p <= n: the squares of float32 underflow
    below 1e-19 and overflow above 2e19, its sums near 3e38), and float16 / bfloat16 in float32 (a float16 6e-8 is
    one of their rounding steps)."""
    _check_float(b, x)
    axis = b.norm_axis(axis, x.rank)
    if p not in (1, 2):
        raise ShapeError(f"{b.where}: p={p}; accepted: 1 or 2")
    xs = b.cast_(x, "float32") if x.dtype.name in _LOW_FLOATS else x
    m = b.reduce("reduce_max", b.abs(xs), [axis], keepdims=True)
    zero = b.binary("eq", m, b.scalar_like(0, m, shape=()))
    one = b.scalar_like(1, m, shape=())
    y = b.binary("div", xs, b.where_(zero, one, m))
    norm = b.reduce("reduce_sum", b.abs(y), [axis], keepdims=True) if p == 1 else \
        b.sqrt(b.reduce("reduce_sum", b.mul(y, y), [axis], keepdims=True))
    out = b.where_(zero, b.scalar_like(0, y, shape=()), b.binary("div", y, b.where_(zero, one, norm)))
    return b.cast_(out, x.dtype)


@onnx_op("MeanVarianceNormalization")
def mean_variance_normalization(b, x, *, axes=None):
    """(x - mean) / (sqrt(var) + 1e-9) over ``axes`` (default [0, 2, 3])."""
    _check_float(b, x)
    axes = [b.norm_axis(a, x.rank, "axes") for a in (axes if axes is not None else [0, 2, 3])]
    _, var, d = moments(b, x, axes)
    std = b.sqrt(var)
    return b.binary("div", d, b.add(std, b.scalar_like(1e-9, std)))


@onnx_op("LRN")
def lrn(b, x, *, alpha=1e-4, beta=0.75, bias=1.0, size=None):
    """x / (bias + alpha / size * square_sum) ** beta, square_sum over a window of channels: x^2 viewed as
    [N, 1, C, rest] and summed by an all-ones [size, 1] `conv` with (size-1)//2 and size//2 zero pads."""
    _check_float(b, x)
    if x.rank < 3 or not size or size < 1:
        raise ShapeError(f"{b.where}: input {x.shape} must be [N, C, *spatial] and size ({size}) positive")
    if x.type.numel == 0:  # nothing to normalize
        return b.const(np.zeros(x.shape, dtype=x.dtype.np))
    N, C = x.shape[:2]
    sq = b.reshape_(b.mul(x, x), (N, 1, C, x.type.numel // (N * C)))
    # the window's reach on either side, cut at C (a wider one sums no more channels)
    lo, hi = min((size - 1) // 2, C), min(size - 1 - (size - 1) // 2, C)
    w = b.const(np.ones((1, 1, lo + hi + 1, 1), dtype=x.dtype.np))
    ssum = b.conv(sq, w, b.scalar_like(0, x, shape=(1,)), strides=[1, 1], dilations=[1, 1],
                  pads=[lo, 0, hi, 0], group=1)
    ssum = b.reshape_(ssum, x.shape)
    den = b.add(b.scalar_like(bias, ssum), b.mul(ssum, b.scalar_like(alpha / size, ssum)))
    return b.div(x, b.pow(den, b.scalar_like(beta, den)))
