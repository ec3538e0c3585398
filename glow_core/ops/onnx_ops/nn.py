"""Neural-network ONNX ops: convolution, pooling, dense layers."""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..registry import onnx_op


def conv_pads(b, x_sp, k, strides, dilations, pads, auto_pad):
    """Explicit begin+end pads for ONNX auto_pad / pads attributes."""
    n = len(x_sp)
    auto_pad = auto_pad or "NOTSET"
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        begins, ends = [], []
        for i in range(n):
            o = -(-x_sp[i] // strides[i])
            total = max((o - 1) * strides[i] + (k[i] - 1) * dilations[i] + 1 - x_sp[i], 0)
            small, big = total // 2, total - total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else big)
            ends.append(big if auto_pad == "SAME_UPPER" else small)
            out.append(o)
        return begins + ends
    if auto_pad == "VALID":
        return [0] * (2 * n)
    if auto_pad != "NOTSET":
        raise ShapeError(f"{b.where}: auto_pad '{auto_pad}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    return list(pads) if pads else [0] * (2 * n)


@onnx_op("Conv")
def conv(b, x, w, bias=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
         strides=None):
    """Primitive `conv` with explicit pads and a zero bias when none is given."""
    n = x.rank - 2
    k = list(kernel_shape or w.shape[2:])
    strides = list(strides or [1] * n)
    dilations = list(dilations or [1] * n)
    p = conv_pads(b, x.shape[2:], k, strides, dilations, pads, auto_pad)
    if bias is None:
        bias = b.const(np.zeros(w.shape[0], dtype=x.dtype.np))
    return b.conv(x, w, bias, strides=strides, dilations=dilations, pads=p, group=group)


@onnx_op("Gemm")
def gemm(b, a, bm, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    """alpha * op(A) @ op(B) + beta * C with transposes, matmul, mul and add."""
    if transA:
        a = b.transpose(a, perm=[1, 0])
    if transB:
        bm = b.transpose(bm, perm=[1, 0])
    y = b.matmul(a, bm)
    if alpha != 1.0:
        y = b.mul(y, b.scalar_like(alpha, y))
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = b.binary("mul", c, b.scalar_like(beta, c, shape=()))
        y = b.binary("add", y, c)
    return y


def _pool_geometry(b, x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode):
    n = x.rank - 2
    k = list(kernel_shape)
    strides = list(strides or [1] * n)
    dilations = list(dilations or [1] * n)
    p = conv_pads(b, x.shape[2:], k, strides, dilations, pads, auto_pad)
    if ceil_mode:
        for i in range(n):
            eff = (k[i] - 1) * dilations[i] + 1
            span = x.shape[2 + i] + p[i] + p[i + n] - eff
            out = -(-span // strides[i]) + 1
            # the last window must start inside the input or the begin padding
            if (out - 1) * strides[i] >= x.shape[2 + i] + p[i]:
                out -= 1
            p[i + n] += max((out - 1) * strides[i] + eff - (x.shape[2 + i] + p[i] + p[i + n]), 0)
    return k, strides, dilations, p


@onnx_op("MaxPool")
def max_pool(b, x, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, pads=None,
             storage_order=0, strides=None):
    """Primitive `max_pool` (the Indices output is not produced)."""
    k, s, d, p = _pool_geometry(b, x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    return b.max_pool(x, kernel=k, strides=s, dilations=d, pads=p)
