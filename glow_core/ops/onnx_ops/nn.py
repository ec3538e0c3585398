"""Neural-network ONNX ops: convolutions (Conv, ConvTranspose, Col2Im, DeformConv) and Dropout."""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..registry import extended_op, onnx_op


#: Largest kernel size, stride, dilation or pad of a window (2^31 - 1: C kernels index windows with int).
WINDOW_MAX = (1 << 31) - 1


def conv_pads(b, x_sp, k, strides, dilations, pads, auto_pad):
    """Explicit begin+end pads for ONNX auto_pad / pads attributes (the window attributes checked)."""
    n = len(x_sp)
    window = list(k) + list(strides) + list(dilations)
    if (len(k) != n or len(strides) != n or len(dilations) != n or (pads and len(pads) != 2 * n)
            or min(window, default=1) < 1 or min(pads or [0]) < 0 or max(window + list(pads or []), default=0)
            > WINDOW_MAX):
        raise ShapeError(f"{b.where}: kernel {list(k)}, strides {list(strides)}, dilations {list(dilations)}, pads "
                         f"{list(pads or [])} for {n} spatial dims: one kernel size, stride and dilation >= 1 per "
                         f"dim and 2 * {n} pads >= 0 are accepted, each at most {WINDOW_MAX}")
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
    if x.rank < 3 or w.rank != x.rank:
        raise ShapeError(f"{b.where}: input {x.shape} and weight {w.shape}: an [N, C, ...] input and a weight of "
                         f"the same rank are accepted")
    n = x.rank - 2
    k = list(kernel_shape or w.shape[2:])
    strides = list(strides or [1] * n)
    dilations = list(dilations or [1] * n)
    p = conv_pads(b, x.shape[2:], k, strides, dilations, pads, auto_pad)
    if bias is None:
        bias = b.const(np.zeros(w.shape[0], dtype=x.dtype.np))
    return b.conv(x, w, bias, strides=strides, dilations=dilations, pads=p, group=group)


def _conv_transpose_pads(b, x_sp, k, strides, dilations, pads, auto_pad, output_padding, output_shape):
    """Begin+end pads of a ConvTranspose (ONNX semantics, auto_pad and output_shape included)."""
    n = len(x_sp)
    full = [strides[i] * (x_sp[i] - 1) + output_padding[i] + (k[i] - 1) * dilations[i] + 1 for i in range(n)]
    auto_pad = auto_pad or "NOTSET"
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise ShapeError(f"{b.where}: auto_pad '{auto_pad}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is None:
            output_shape = [x_sp[i] * strides[i] for i in range(n)]
        output_shape = list(output_shape)[-n:]
        total = [full[i] - output_shape[i] for i in range(n)]
        if auto_pad == "SAME_UPPER":
            return [t // 2 for t in total] + [t - t // 2 for t in total]
        return [t - t // 2 for t in total] + [t // 2 for t in total]
    if auto_pad == "VALID" or not pads:
        return [0] * (2 * n)
    return list(pads)


def conv_transpose_lowering(b, x, w, bias, strides, dilations, pads, output_padding, group):
    """Transposed convolution as: zeros inserted between inputs (pad `interior`), edge padding, and a stride-1
    `conv` with the kernel flipped and its in/out channel axes swapped per group; negative pads crop (slice)."""
    n = x.rank - 2
    k = w.shape[2:]
    C = x.shape[1]
    if w.shape[0] != C or C % group:
        raise ShapeError(f"{b.where}: weight {w.shape} must be [C={C}, M/group, *kernel] with group {group}")
    m_g = w.shape[1]
    # [C, M/g, *k] -> [g, C/g, M/g, *k] -> [g, M/g, C/g, *k] -> [M, C/g, *k], then flip spatial axes
    wt = b.reshape_(w, (group, C // group, m_g) + k)
    wt = b.transpose_(wt, [0, 2, 1] + list(range(3, 3 + n)))
    wt = b.reshape_(wt, (group * m_g, C // group) + k)
    wt = b.slice(wt, starts=[0, 0] + [d - 1 for d in k], ends=list(wt.shape[:2]) + [-1] * n,
                 steps=[1, 1] + [-1] * n)
    eff = [(k[i] - 1) * dilations[i] + 1 for i in range(n)]
    begin = [eff[i] - 1 - pads[i] for i in range(n)]
    end = [eff[i] - 1 - pads[n + i] + output_padding[i] for i in range(n)]
    xp = b.pad(x, pads=[0, 0] + [max(p, 0) for p in begin] + [0, 0] + [max(p, 0) for p in end],
               value=0.0, interior=[0, 0] + [s - 1 for s in strides])
    if bias is None:
        bias = b.const(np.zeros(group * m_g, dtype=x.dtype.np))
    y = b.conv(xp, wt, bias, strides=[1] * n, dilations=list(dilations), pads=[0] * (2 * n), group=group)
    if any(p < 0 for p in begin + end):
        starts = [0, 0] + [max(-p, 0) for p in begin]
        ends = list(y.shape[:2]) + [y.shape[2 + i] - max(-end[i], 0) for i in range(n)]
        y = b.slice(y, starts=starts, ends=ends, steps=[1] * (n + 2))
    return y


def conv_transpose_tiles(b, x, w, bias):
    """A transposed convolution whose windows tile the output (kernel = stride, no dilation, pads or output
    padding, one group: U-Net's and segmentation decoders' 2x2 stride-2 upsampling) as one `matmul`: every input
    position's C channels times W [C, M * prod(kernel)] give its output tile (batch 1: W^T times the input's [C,
    H * W] view, so the input is not transposed); the tiles' axes are then interleaved with the input's spatial
    axes ([N, M, H, kh, W, kw] -> [N, M, H * kh, W * kw]). Each output is the sum of C
    products, as the convolution's; no zeros are inserted or multiplied."""
    n = x.rank - 2
    N, C, sp, k = x.shape[0], x.shape[1], x.shape[2:], w.shape[2:]
    M = w.shape[1]
    if N == 1:  # W^T [M * prod(k), C] x X [C, prod(sp)]: no transpose of the input
        wt = b.transpose_(b.reshape_(w, (C, M * int(np.prod(k)))), [1, 0])
        y = b.matmul(wt, b.reshape_(x, (C, int(np.prod(sp)))))
        y = b.reshape_(y, (1, M) + k + sp)  # [1, M, *k, *sp] -> [1, M, sp0, k0, sp1, k1, ...]
        perm = [0, 1] + [a for i in range(n) for a in (2 + n + i, 2 + i)]
    else:
        rows = b.reshape_(b.transpose_(x, [0] + list(range(2, 2 + n)) + [1]), (N * int(np.prod(sp)), C))
        y = b.matmul(rows, b.reshape_(w, (C, M * int(np.prod(k)))))
        y = b.reshape_(y, (N,) + sp + (M,) + k)  # [N, *sp, M, *k] -> [N, M, sp0, k0, sp1, k1, ...]
        perm = [0, 1 + n] + [a for i in range(n) for a in (1 + i, 2 + n + i)]
    y = b.transpose_(y, perm)
    y = b.reshape_(y, (N, M) + tuple(sp[i] * k[i] for i in range(n)))
    if bias is not None:
        y = b.binary("add", y, b.reshape_(bias, (M,) + (1,) * n))
    return y


@onnx_op("ConvTranspose")
def conv_transpose(b, x, w, bias=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None):
    """Pads from auto_pad / output_shape, then `conv_transpose_lowering` (pad with interior + flipped conv); a
    float ConvTranspose whose kernel equals its stride (no dilation, pads or output padding, one group) is
    `conv_transpose_tiles` (one matmul and a transpose) instead."""
    n = x.rank - 2
    k = list(kernel_shape or w.shape[2:])
    strides = list(strides or [1] * n)
    dilations = list(dilations or [1] * n)
    output_padding = list(output_padding or [0] * n)
    p = _conv_transpose_pads(b, x.shape[2:], k, strides, dilations, pads, auto_pad, output_padding, output_shape)
    if (x.dtype.is_float and x.rank >= 3 and w.rank == x.rank and group == 1 and w.shape[0] == x.shape[1]
            and k == list(w.shape[2:]) == strides and dilations == [1] * n and p == [0] * (2 * n)
            and output_padding == [0] * n and (bias is None or bias.shape == (w.shape[1],))):
        return conv_transpose_tiles(b, x, w, bias)
    return conv_transpose_lowering(b, x, w, bias, strides, dilations, p, output_padding, group)


@onnx_op("Dropout", const_inputs=(1, 2))
def dropout(b, x, *optional, **_):
    """Inference (or ratio 0): the input itself and an all-true mask (a broadcast constant)."""
    ratio, training_mode = (list(optional) + [None, None])[:2]
    training = training_mode is not None and bool(np.asarray(b.value_of(training_mode, "training_mode")).any())
    r = float(np.asarray(b.value_of(ratio, "ratio")).reshape(-1)[0]) if ratio is not None else 0.0
    if training and r != 0.0:
        raise ShapeError(f"{b.where}: training-mode Dropout with ratio {r} is random and not supported; "
                         f"accepted: inference, or training_mode with ratio 0")
    mask = b.broadcast_to(b.reshape_(b.const(np.array(True)), (1,) * x.rank), x.shape)
    return x, mask


@onnx_op("Col2Im", const_inputs=(1, 2))
def col2im(b, x, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    """A grouped ConvTranspose (group = C) of the columns viewed as [N, C*K, *L] with a one-hot kernel
    [C*K, 1, *block] (each column row lands at its block offset); output_padding makes up the image size."""
    img = [int(v) for v in b.value_of(image_shape, "image_shape")]
    blk = [int(v) for v in b.value_of(block_shape, "block_shape")]
    n = len(img)
    strides = list(strides or [1] * n)
    dilations = list(dilations or [1] * n)
    pads = list(pads or [0] * (2 * n))
    if (len(strides) != n or len(dilations) != n or len(pads) != 2 * n or min(strides + dilations, default=1) < 1
            or min(blk + img, default=1) < 1):
        raise ShapeError(f"{b.where}: image_shape {img}, block_shape {blk}, strides {strides}, dilations "
                         f"{dilations}, pads {pads}: one positive entry per image dim is accepted (two pads)")
    K = int(np.prod(blk))
    if x.rank != 3 or len(blk) != n or x.shape[1] % K:
        raise ShapeError(f"{b.where}: input {x.shape} must be [N, C*prod(block_shape {blk}), L] for image "
                         f"shape {img}")
    C = x.shape[1] // K
    eff = [(blk[i] - 1) * dilations[i] + 1 for i in range(n)]
    L = [(img[i] + pads[i] + pads[n + i] - eff[i]) // strides[i] + 1 for i in range(n)]
    if int(np.prod(L)) != x.shape[2] or min(L) < 1:
        raise ShapeError(f"{b.where}: {x.shape[2]} columns do not match the {L} block positions of image {img}")
    cols = b.reshape_(x, (x.shape[0], C * K) + tuple(L))
    w = np.zeros((C, K, 1, K), dtype=x.dtype.np)
    w[:, np.arange(K), 0, np.arange(K)] = 1
    w = b.const(w.reshape((C * K, 1) + tuple(blk)))
    full = [strides[i] * (L[i] - 1) + eff[i] - pads[i] - pads[n + i] for i in range(n)]
    out_pad = [img[i] - full[i] for i in range(n)]
    return conv_transpose_lowering(b, cols, w, None, strides, dilations, pads, out_pad, C)


def _deform_conv_types(b, x, w, offset, bias=None, mask=None, *, dilations=None, group=1, kernel_shape=None,
                       offset_group=1, pads=None, strides=None):
    """x's dtype, [N, F, *out] with out the windowed size of Conv (kernel_shape, pads, strides, dilations);
    offset must be [N, offset_group * 2 * prod(kernel), *out]."""
    if x.rank != 4 or w.rank != 4 or x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise ShapeError(f"{b.where}: input {x.shape} and weights {w.shape} must be [N, C, H, W] and "
                         f"[F, C/group, kh, kw] with group {group} (only 2-D is supported)")
    k = list(kernel_shape or w.shape[2:])
    strides, dilations = list(strides or [1, 1]), list(dilations or [1, 1])
    pads = conv_pads(b, x.shape[2:], k, strides, dilations, pads, "NOTSET")
    out = tuple((x.shape[2 + i] + pads[i] + pads[i + 2] - ((k[i] - 1) * dilations[i] + 1)) // strides[i] + 1
                for i in range(2))
    want = (x.shape[0], (offset_group or 1) * 2 * k[0] * k[1]) + out
    if min(out) < 1 or offset.shape != want:
        raise ShapeError(f"{b.where}: offset {offset.shape} must be {want} for input {x.shape}, kernel {k}, "
                         f"pads {pads}, strides {strides} and dilations {dilations}")
    return [x.type.with_shape((x.shape[0], w.shape[0]) + out)]


@extended_op("DeformConv", reason="each output samples the input at data-dependent fractional positions "
             "(bilinear interpolation at learned offsets), which the primitive set has no gather for",
             shape_rule=_deform_conv_types)
def deform_conv(x, w, offset, bias=None, mask=None, *, dilations=None, group=1, kernel_shape=None,
                offset_group=1, pads=None, strides=None):
    """2-D deformable convolution: bilinear samples (zero outside the image) at the offset kernel positions,
    scaled by the mask, contracted with the weights per group."""
    if x.ndim != 4:
        raise ShapeError(f"DeformConv: input {x.shape} must be [N, C, H, W] (only 2-D is supported)")
    N, C, H, W_ = x.shape
    kh, kw = (kernel_shape or w.shape[2:])
    sh, sw = strides or [1, 1]
    dh, dw = dilations or [1, 1]
    pads = pads or [0, 0, 0, 0]
    G = offset_group or 1
    F = w.shape[0]
    eff = [(kh - 1) * dh + 1, (kw - 1) * dw + 1]
    oh, ow = [(size + pads[i] + pads[i + 2] - eff[i]) // st + 1 for i, (size, st) in enumerate(((H, sh), (W_, sw)))]
    want = {"W": (w, (F, C // max(group, 1), kh, kw)), "offset": (offset, (N, G * kh * kw * 2, oh, ow)),
            "mask": (mask, (N, G * kh * kw, oh, ow)), "B": (bias, (F,))}
    bad = [f"{nm} has shape {list(a.shape)}, expected {list(s)}" for nm, (a, s) in want.items()
           if a is not None and tuple(a.shape) != s]
    if C % max(group, 1) or C % G or F % max(group, 1) or min(oh, ow) < 1 or bad:
        raise ShapeError(f"DeformConv: input X {list(x.shape)} with kernel {[kh, kw]}, group {group} and "
                         f"offset_group {G}: " + ("; ".join(bad) or "C and the number of filters must be "
                                                  "divisible by group and offset_group, and the output non-empty"))
    off = offset.reshape(N, G, kh, kw, 2, oh, ow).astype(np.float64)
    m = (np.ones((N, G, kh, kw, oh, ow)) if mask is None else mask.reshape(N, G, kh, kw, oh, ow))
    base_h = (-pads[0] + sh * np.arange(oh))[None, :, None] + dh * np.arange(kh)[:, None, None]  # [kh, oh, 1]
    base_w = (-pads[1] + sw * np.arange(ow))[None, None, :] + dw * np.arange(kw)[:, None, None]  # [kw, 1, ow]
    ph = base_h[None, None, :, None] + off[:, :, :, :, 0]  # [N, G, kh, kw, oh, ow]
    pw = base_w[None, None, None, :] + off[:, :, :, :, 1]
    xg = x.reshape(N, G, C // G, H, W_).astype(np.float64)
    n_i = np.arange(N).reshape(N, 1, 1, 1, 1, 1)
    g_i = np.arange(G).reshape(1, G, 1, 1, 1, 1)
    h0, w0 = np.floor(ph), np.floor(pw)
    sampled = 0
    for hc, wh in ((h0, 1 - (ph - h0)), (h0 + 1, ph - h0)):
        for wc, ww in ((w0, 1 - (pw - w0)), (w0 + 1, pw - w0)):
            ok = (hc >= 0) & (hc < H) & (wc >= 0) & (wc < W_)
            hi = np.clip(hc, 0, H - 1).astype(np.int64)
            wi = np.clip(wc, 0, W_ - 1).astype(np.int64)
            vals = xg[n_i, g_i, :, hi, wi]  # [N, G, kh, kw, oh, ow, C/G]
            sampled = sampled + vals * (wh * ww * ok * m)[..., None]
    cols = np.moveaxis(sampled, -1, 2).reshape(N, C, kh, kw, oh, ow)
    cg, fg = C // group, F // group
    out = np.concatenate([np.einsum("nckluv,fckl->nfuv", cols[:, g * cg:(g + 1) * cg],
                                    w[g * fg:(g + 1) * fg].astype(np.float64)) for g in range(group)], axis=1)
    if bias is not None:
        out = out + bias.reshape(1, F, 1, 1)
    return out.astype(x.dtype)
