"""Extended ops kept whole with numpy kernels: sorting, selection and data-dependent shapes.

TopK sorts; NonZero, Unique and NonMaxSuppression have output shapes that
depend on input values, so the input that determines the shape is listed in
``const_inputs``: a model feeding it from a graph input is specialized to
that input's value (compiled per value), and the op folds to a constant.
RoiAlign samples at data-dependent coordinates on a per-roi grid of data-dependent
size; TfIdfVectorizer matches n-grams against a pool.

Each op's shape rule is written from its ONNX definition; the rules of the ops whose output shape depends
on input values ask the builder for those values (``b.value_of``: a run-time value asks for specialization).
"""
from __future__ import annotations

import numpy as np

from ...errors import InputError, ShapeError
from ...types import TensorType
from ..registry import extended_op


def _int(b, v, what):
    """A scalar operand's (constant) value as an int; an int attribute as itself."""
    return int(b.scalar_of(v, what) if hasattr(v, "type") else v)


def _topk_types(b, x, k=None, *, axis=-1, largest=1, sorted=1):
    """Values (x's dtype) and Indices (int64): x's shape with K along ``axis``."""
    if k is None:
        raise ShapeError(f"{b.where}: K is missing (the K input, or the k attribute before opset 10)")
    kk = _int(b, k, "K")
    ax = b.norm_axis(axis, x.rank)
    if not 0 <= kk <= x.shape[ax]:
        raise ShapeError(f"{b.where}: K={kk} is not in [0, {x.shape[ax]}] (the size of axis {axis} of {x.shape})")
    shape = x.shape[:ax] + (kk,) + x.shape[ax + 1:]
    return [TensorType(x.dtype, shape), TensorType("int64", shape)]


def _nonzero_types(b, x):
    """int64 [rank, number of non-zero elements]: the count comes from the value."""
    vals = b.value_of(x, "input (NonZero's output shape is its number of non-zero elements)")
    return [TensorType("int64", (x.rank, int(np.count_nonzero(vals))))]


def _unique_types(b, x, *, axis=None, sorted=1):
    """Y (x's dtype; the unique elements, or slices along ``axis``), indices, inverse_indices and counts
    (int64): the number of unique elements or slices comes from the value."""
    vals = _as_f32(np.asarray(b.value_of(x, "input (Unique's output shape is its number of unique values)")))
    if axis is None:
        n = np.unique(vals.reshape(-1)).size
        return [TensorType(x.dtype, (n,)), TensorType("int64", (n,)), TensorType("int64", (x.type.numel,)),
                TensorType("int64", (n,))]
    ax = b.norm_axis(axis, x.rank)
    n = np.unique(vals, axis=ax).shape[ax]
    y = x.shape[:ax] + (n,) + x.shape[ax + 1:]
    return [TensorType(x.dtype, y), TensorType("int64", (n,)), TensorType("int64", (x.shape[ax],)),
            TensorType("int64", (n,))]


def _nms_types(b, boxes, scores, *limits, center_point_box=0):
    """int64 [number of selected boxes, 3]: the number comes from the values of every input."""
    vals = [b.value_of(v, "input (NonMaxSuppression's output shape is its number of selected boxes)")
            for v in (boxes, scores) + limits]
    if boxes.rank != 3 or scores.rank != 3 or boxes.shape[2] != 4 or boxes.shape[:2] != (scores.shape[0],
                                                                                          scores.shape[2]):
        raise ShapeError(f"{b.where}: boxes {boxes.shape} must be [batch, boxes, 4] and scores {scores.shape} "
                         f"[batch, classes, boxes]")
    return [TensorType("int64", non_max_suppression(*vals, center_point_box=center_point_box).shape)]


def _roi_align_types(b, x, rois, batch_indices, *, output_height=1, output_width=1, sampling_ratio=0, **_):
    """x's dtype, [number of rois, C, output_height, output_width]."""
    if output_height < 1 or output_width < 1 or sampling_ratio < 0:
        raise ShapeError(f"{b.where}: output_height {output_height}, output_width {output_width}, sampling_ratio "
                         f"{sampling_ratio}: positive output sizes and a non-negative sampling ratio are accepted")
    if x.rank != 4 or rois.rank != 2 or rois.shape[1] != 4 or batch_indices.shape != (rois.shape[0],):
        raise ShapeError(f"{b.where}: X {x.shape} must be [N, C, H, W], rois {rois.shape} [num_rois, 4] and "
                         f"batch_indices {batch_indices.shape} [num_rois]")
    return [TensorType(x.dtype, (rois.shape[0], x.shape[1], output_height, output_width))]


def _tfidf_types(b, x, *, ngram_indexes, **_):
    """float32: [C] for a 1-D input, [N, C] for [N, ...], with C = max(ngram_indexes) + 1."""
    c = max(ngram_indexes) + 1
    if x.rank not in (1, 2):
        raise ShapeError(f"{b.where}: input {x.shape} must be 1-D or 2-D")
    return [TensorType("float32", (c,) if x.rank == 1 else (x.shape[0], c))]


def _as_f32(x):
    """Sort/compare ml_dtypes floats (bfloat16, float8: numpy kind 'V') through float32 (exact)."""
    return x.astype(np.float32) if x.dtype.kind == "V" else x


@extended_op("TopK", reason="a partial sort: no decomposition into the primitive set", shape_rule=_topk_types,
             const_inputs=(1,))
def topk(x, k=None, *, axis=-1, largest=1, sorted=1):
    """The k largest (or smallest) along axis; ties keep the lower index first."""
    kk = int(np.asarray(k).ravel()[0])  # the K input (opset >= 10) or the k attribute
    axis = axis % x.ndim
    n = x.shape[axis]
    key = _as_f32(x)
    if largest:
        flipped = np.flip(key, axis=axis)
        order = np.flip(np.argsort(flipped, axis=axis, kind="stable"), axis=axis)
        order = (n - 1) - order
    else:
        order = np.argsort(key, axis=axis, kind="stable")
    idx = np.take(order, np.arange(kk), axis=axis).astype(np.int64)
    return np.take_along_axis(x, idx, axis=axis), idx


@extended_op("NonZero", reason="output shape depends on input values", shape_rule=_nonzero_types,
             const_inputs=(0,))
def nonzero(x):
    """Indices of the non-zero elements, one row per dimension (int64)."""
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


@extended_op("Unique", reason="output shape depends on input values", shape_rule=_unique_types,
             const_inputs=(0,))
def unique(x, *, axis=None, sorted=1):
    """Unique elements (or slices along axis), first-occurrence indices, inverse indices and counts."""
    key = _as_f32(x)
    y, first, inverse, counts = np.unique(key, return_index=True, return_inverse=True, return_counts=True,
                                          axis=axis)
    inverse = inverse.reshape(-1)
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.argsort(order)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    y = np.take(x.reshape(-1) if axis is None else x, first, axis=0 if axis is None else axis)
    return y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)


def _iou(a, b, center):
    if center:
        a = np.array([a[0] - a[2] / 2, a[1] - a[3] / 2, a[0] + a[2] / 2, a[1] + a[3] / 2])
        b = np.array([b[0] - b[2] / 2, b[1] - b[3] / 2, b[0] + b[2] / 2, b[1] + b[3] / 2])
    a0, a2 = sorted((a[0], a[2]))
    a1, a3 = sorted((a[1], a[3]))
    b0, b2 = sorted((b[0], b[2]))
    b1, b3 = sorted((b[1], b[3]))
    ih = min(a2, b2) - max(a0, b0)
    iw = min(a3, b3) - max(a1, b1)
    if ih <= 0 or iw <= 0:
        return 0.0
    inter = ih * iw
    union = (a2 - a0) * (a3 - a1) + (b2 - b0) * (b3 - b1) - inter
    return inter / union if union > 0 else 0.0


@extended_op("NonMaxSuppression", reason="output shape depends on input values (a greedy data-dependent "
                                         "selection)", shape_rule=_nms_types, const_inputs=(0, 1, 2, 3, 4))
def non_max_suppression(boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None, *, center_point_box=0):
    """Greedy per (batch, class) selection by score, dropping boxes whose IoU with a kept box is too high."""
    for nm, v in (("max_output_boxes_per_class", max_output_boxes_per_class), ("iou_threshold", iou_threshold),
                  ("score_threshold", score_threshold)):
        if v is not None and np.asarray(v).size != 1:
            raise ShapeError(f"NonMaxSuppression: {nm} has {np.asarray(v).size} elements; one is accepted")
    max_out = 0 if max_output_boxes_per_class is None else int(np.asarray(max_output_boxes_per_class).ravel()[0])
    iou_t = 0.0 if iou_threshold is None else float(np.asarray(iou_threshold).ravel()[0])
    sc_t = None if score_threshold is None else float(np.asarray(score_threshold).ravel()[0])
    out = []
    for bi in range(scores.shape[0]):
        for ci in range(scores.shape[1]):
            s = scores[bi, ci].astype(np.float64)
            cand = [i for i in np.argsort(-s, kind="stable") if sc_t is None or s[i] > sc_t]
            kept = []
            for i in cand:
                if len(kept) >= max_out:
                    break
                if all(_iou(boxes[bi, i], boxes[bi, j], center_point_box) <= iou_t for j in kept):
                    kept.append(i)
            out += [[bi, ci, i] for i in kept]
    return np.array(out, dtype=np.int64).reshape(-1, 3)


def _bilinear(img, y, x):
    """(corner indices, weights) of one sample point, or None when it lies outside the image."""
    H, W = img.shape[-2:]
    if y < -1.0 or y > H or x < -1.0 or x > W:
        return None
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= H - 1:
        y0 = y1 = H - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= W - 1:
        x0 = x1 = W - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    hy, hx = 1 - ly, 1 - lx
    return [(y0, x0, hy * hx), (y0, x1, hy * lx), (y1, x0, ly * hx), (y1, x1, ly * lx)]


@extended_op("RoiAlign", reason="samples at coordinates computed from the rois input (data-dependent gather)",
             shape_rule=_roi_align_types)
def roi_align(x, rois, batch_indices, *, mode="avg", output_height=1, output_width=1, sampling_ratio=0,
              spatial_scale=1.0, coordinate_transformation_mode="half_pixel"):
    """Average (or max) of bilinear samples on a regular grid in each output bin of each roi."""
    C = x.shape[1]
    off = 0.5 if coordinate_transformation_mode == "half_pixel" else 0.0
    bad = [int(b) for b in np.asarray(batch_indices).reshape(-1) if not 0 <= int(b) < x.shape[0]]
    if bad:
        raise InputError(f"RoiAlign: batch_indices {bad[:5]} are outside the batch of X (size {x.shape[0]}); "
                         f"accepted: 0 to {x.shape[0] - 1}")
    if not (np.isfinite(spatial_scale) and np.isfinite(np.asarray(rois, np.float64)).all()):
        raise InputError("RoiAlign: spatial_scale and the rois must be finite")
    out = np.zeros((rois.shape[0], C, output_height, output_width), dtype=np.float64)
    for r in range(rois.shape[0]):
        img = x[int(batch_indices[r])].astype(np.float64)
        x1, y1, x2, y2 = (float(v) * spatial_scale - off for v in rois[r])
        rw, rh = x2 - x1, y2 - y1
        if not off:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / output_height, rw / output_width
        gh = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rh / output_height))
        gw = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rw / output_width))
        count = max(gh * gw, 1)
        for ph in range(output_height):
            for pw in range(output_width):
                acc = np.zeros(C) if mode == "avg" else None
                for iy in range(gh):
                    yy = y1 + ph * bh + (iy + 0.5) * bh / gh
                    for ix in range(gw):
                        xx = x1 + pw * bw + (ix + 0.5) * bw / gw
                        pts = _bilinear(img, yy, xx)
                        vals = [np.zeros(C)] if pts is None else [w * img[:, a, c] for a, c, w in pts]
                        if mode == "avg":
                            acc += sum(vals)
                        else:
                            v = np.max(vals, axis=0)
                            acc = v if acc is None else np.maximum(acc, v)
                out[r, :, ph, pw] = acc / count if mode == "avg" else acc
    return out.astype(x.dtype)


@extended_op("TfIdfVectorizer", reason="n-gram matching against a pool: a data-dependent lookup with no "
                                       "decomposition into the primitive set", shape_rule=_tfidf_types)
def tfidf_vectorizer(x, *, max_gram_length, min_gram_length, max_skip_count, mode, ngram_counts, ngram_indexes,
                     pool_int64s=None, pool_strings=None, weights=None):
    """Counts of the pool's n-grams (with up to max_skip_count skipped items between elements) per row."""
    if pool_int64s is None:
        raise ShapeError("TfIdfVectorizer: string pools are not supported (string tensors)")
    pool = list(pool_int64s)
    starts = list(ngram_counts) + [len(pool)]
    grams = sum(len(range(starts[n - 1], starts[n], n)) for n in range(1, len(ngram_counts) + 1))
    decreasing = any(a > b for a, b in zip(starts, starts[1:]))
    if grams != len(ngram_indexes) or decreasing or min(ngram_indexes, default=0) < 0:
        raise ShapeError(f"TfIdfVectorizer: ngram_counts {list(ngram_counts)} split the pool of {len(pool)} into "
                         f"{grams} n-grams, but ngram_indexes has {len(ngram_indexes)} entries (one non-negative "
                         f"index per n-gram is required, with ngram_counts non-decreasing)")
    table, j = {}, 0
    for n in range(1, len(ngram_counts) + 1):
        for p in range(starts[n - 1], starts[n], n):
            table[tuple(pool[p:p + n])] = ngram_indexes[j]
            j += 1
    n_out = max(ngram_indexes) + 1
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    out = np.zeros((rows.shape[0], n_out), dtype=np.float32)
    # the pool has no n-gram longer than len(ngram_counts), and no window fits a skip of the row's length
    longest, widest = min(max_gram_length, len(ngram_counts)), min(max_skip_count, rows.shape[-1])
    for r, row in enumerate(rows.tolist()):
        for n in range(max(min_gram_length, 1), longest + 1):
            for skip in range(0, (widest if n > 1 else 0) + 1):
                step = skip + 1
                for i in range(len(row) - (n - 1) * step):
                    k = table.get(tuple(row[i:i + (n - 1) * step + 1:step]))
                    if k is not None:
                        out[r, k] += 1
    w = np.ones(n_out, dtype=np.float32) if weights is None else np.asarray(weights, dtype=np.float32)
    if mode == "IDF":
        out = np.minimum(out, 1) * w
    elif mode == "TFIDF":
        out = out * w
    return out.reshape(n_out) if x.ndim == 1 else out
