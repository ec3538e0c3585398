"""Resize and Upsample, lowered into primitives.

Resizing is separable: the output along one axis is a fixed linear combination
of the input along that axis. Scales/sizes are compile-time constants, so the
per-axis combination is computed here in numpy as a weight matrix W (out x in)
following ONNX's definition (coordinate transformation, nearest rounding,
linear/cubic kernels, antialias, exclude_outside). Each resized axis then
becomes a ``gather`` (nearest: one source index per output index, exact for
every dtype) or a ``matmul`` by W (linear/cubic, computed in float32). For
tf_crop_and_resize, output positions mapped outside the input take
``extrapolation_value`` through a constant mask and ``select``.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from ..registry import onnx_op

CT_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
            "tf_crop_and_resize")


def _source_coords(ct, n_out, scale, n_in, roi):
    """Source coordinate of each output index along one axis (and the extrapolated mask)."""
    y = np.arange(n_out, dtype=np.float64)
    out_w = scale * n_in
    extra = None
    if ct == "align_corners":
        x = np.zeros(n_out) if out_w == 1 else y * (n_in - 1) / (out_w - 1)
    elif ct == "asymmetric":
        x = y / scale
    elif ct == "tf_crop_and_resize":
        x = (np.full(n_out, (roi[1] - roi[0]) * (n_in - 1) / 2) if out_w == 1
             else y * (roi[1] - roi[0]) * (n_in - 1) / (out_w - 1))
        x = x + roi[0] * (n_in - 1)
        extra = (x < 0) | (x > n_in - 1)
    elif ct == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if out_w == 1 else (y + 0.5) / scale - 0.5
    elif ct == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    else:  # half_pixel_symmetric
        offset = n_in / 2 * (1 - n_out / out_w)
        x = offset + (y + 0.5) / scale - 0.5
    return x, extra


def _kernel(mode, nearest_mode, antialias, a, scale):
    """coefficients(ratio) for ratio in (0, 1], per ONNX's Resize definition."""
    if mode == "nearest":
        def nearest(r):
            if float(r).is_integer():
                return np.array([0.0, 1.0])
            up = {"round_prefer_floor": r > 0.5, "round_prefer_ceil": r >= 0.5, "floor": False,
                  "ceil": True}[nearest_mode]
            return np.array([0.0, 1.0]) if up else np.array([1.0, 0.0])
        return nearest
    s = min(scale, 1.0) if antialias else 1.0
    if mode == "linear":
        start = int(np.floor(-1 / s) + 1)

        def linear(r):
            c = np.clip(1 - np.abs((np.arange(start, 2 - start) - r) * s), 0, 1)
            return c / c.sum()
        return linear

    def cubic_w(x):
        x = abs(x)
        if x <= 1:
            return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
        if x < 2:
            return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
        return 0.0
    start = int(np.floor(-2 / s) + 1)

    def cubic(r):
        c = np.array([cubic_w(s * (i - r)) for i in range(start, 2 - start)])
        return c / c.sum() if antialias else c
    return cubic


def axis_weights(n_in, n_out, scale, *, mode, ct, nearest_mode, antialias, a, exclude_outside, roi):
    """(W [n_out, n_in], extrapolated mask [n_out] or None) for one axis."""
    x, extra = _source_coords(ct, n_out, scale, n_in, roi)
    coeff = _kernel(mode, nearest_mode, antialias, a, scale)
    W = np.zeros((n_out, n_in))
    for i, xo in enumerate(x):
        xi = math.floor(xo)
        c = np.asarray(coeff(1.0 if xo == xi else xo - xi), dtype=np.float64)
        n = len(c)
        pad = int(np.ceil(n / 2))
        xp = xo + pad
        p = math.floor(xp)
        frac = xp - p
        if n % 2 == 0:
            off = -(n // 2) if frac == 0 else -(n // 2) + 1
        else:
            off = -((n - 1) // 2) + (0 if frac <= 0.5 else 1)
        idx = p + off + np.arange(n) - pad
        if exclude_outside:
            c = np.where((idx < 0) | (idx >= n_in), 0.0, c)
            c = c / (c.sum() or 1.0)
        for j, w in zip(np.clip(idx, 0, n_in - 1), c):
            W[i, j] += w
    return W, extra


def resize_axes(b, x, out_shape, scales, axes, *, mode, ct, nearest_mode="round_prefer_floor", antialias=0,
                a=-0.75, exclude_outside=0, roi=None, extrapolation_value=0.0):
    """Resize ``x`` along ``axes`` to ``out_shape`` (the shared core of Resize and Upsample)."""
    y = x
    mask = np.zeros(out_shape, dtype=bool)
    for ax in axes:
        n_in, n_out = x.shape[ax], out_shape[ax]
        r = None if roi is None else (roi[ax], roi[ax + x.rank])
        if (math.isclose(scales[ax], 1.0) and n_in == n_out
                and (r is None or (math.isclose(r[0], 0.0) and math.isclose(r[1], 1.0)))):
            continue
        W, extra = axis_weights(n_in, n_out, float(scales[ax]), mode=mode, ct=ct, nearest_mode=nearest_mode,
                                antialias=antialias, a=a, exclude_outside=exclude_outside, roi=r)
        if extra is not None:
            mask |= extra.reshape((1,) * ax + (n_out,) + (1,) * (x.rank - ax - 1))
        y = _apply_axis(b, y, ax, W, exact=(mode == "nearest"))
    if mask.any():
        y = b.where_(b.const(mask), b.scalar_like(extrapolation_value, y, ()), y)
    return y


def _apply_axis(b, x, ax, W, exact):
    """Combine ``x`` along axis ``ax`` with the rows of W (gather when W selects one source per row)."""
    if exact:
        return b.gather(x, b.const(W.argmax(axis=1).astype(np.int64)), axis=ax)
    dt = x.dtype
    xf = b.cast_(x, "float64" if dt.name == "float64" else "float32")
    perm = [i for i in range(x.rank) if i != ax] + [ax]
    t = b.transpose_(xf, perm)
    lead = t.shape[:-1]
    m = b.reshape_(t, (1, int(np.prod(lead)), x.shape[ax]))
    out = b.matmul(m, b.const(W.T[None], xf.dtype.name))
    out = b.reshape_(out, lead + (W.shape[0],))
    inv = list(np.argsort(perm))
    out = b.transpose_(out, inv)
    return b.cast_(out if dt.is_float else b.round(out), dt.name)


def _out_shape(b, x, scales, sizes, axes, policy):
    """(output shape, per-axis scale) from scales or sizes, per ONNX's rules."""
    r = x.rank
    full_scales = [1.0] * r
    if sizes is not None and sizes.size:
        sizes = [int(s) for s in sizes]
        if len(sizes) != len(axes):
            raise ShapeError(f"{b.where}: sizes has {len(sizes)} entries for {len(axes)} axes")
        out = list(x.shape)
        for ax, s in zip(axes, sizes):
            if s < 0 or (x.shape[ax] == 0 and s):
                raise ShapeError(f"{b.where}: sizes {sizes} for input shape {x.shape}: a size must be >= 0, and an "
                                 f"empty axis can only be resized to 0")
            out[ax] = s
            full_scales[ax] = s / x.shape[ax] if x.shape[ax] else 1.0
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                raise ShapeError(f"{b.where}: keep_aspect_ratio_policy '{policy}' is not one of stretch, "
                                 f"not_larger, not_smaller")
            pick = min if policy == "not_larger" else max
            sc = pick(full_scales[ax] for ax in axes)
            for ax in axes:
                full_scales[ax] = sc
                out[ax] = int(sc * x.shape[ax] + 0.5)
        return out, full_scales
    if scales is None or not scales.size:
        raise ShapeError(f"{b.where}: Resize needs either scales or sizes")
    if len(scales) != len(axes):
        raise ShapeError(f"{b.where}: scales has {len(scales)} entries for {len(axes)} axes")
    if not (np.isfinite(scales).all() and (scales > 0).all()):
        raise ShapeError(f"{b.where}: scales {list(scales)} must be finite and positive")
    out = list(x.shape)
    for ax, s in zip(axes, scales):
        full_scales[ax] = float(s)
        out[ax] = int(float(s) * x.shape[ax])
    return out, full_scales


@onnx_op("Resize", const_inputs=(1, 2, 3))
def resize(b, x, roi=None, scales=None, sizes=None, *, mode="nearest", coordinate_transformation_mode="half_pixel",
           nearest_mode="round_prefer_floor", cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0,
           antialias=0, axes=None, keep_aspect_ratio_policy="stretch", **_):
    """Per-axis weight matrices computed at compile time, applied with gather (nearest) or matmul."""
    if b.opset < 11:  # Resize-10: (X, scales), asymmetric coordinates, nearest rounds down
        scales, roi = roi, None
        coordinate_transformation_mode = "asymmetric"
        nearest_mode = "floor"
    if mode not in ("nearest", "linear", "cubic"):
        raise ShapeError(f"{b.where}: mode '{mode}' is not one of nearest, linear, cubic")
    ct = coordinate_transformation_mode
    if ct not in CT_MODES:
        raise ShapeError(f"{b.where}: coordinate_transformation_mode '{ct}' is not one of {', '.join(CT_MODES)}")
    axes = list(range(x.rank)) if axes is None else [b.norm_axis(int(a), x.rank) for a in axes]
    sc = b.value_of(scales, "scales")
    sz = b.value_of(sizes, "sizes")
    out, full_scales = _out_shape(b, x, None if sc is None else np.asarray(sc, dtype=np.float64).ravel(),
                                  None if sz is None else np.asarray(sz).ravel(), axes, keep_aspect_ratio_policy)
    if 0 in out:  # an empty result: nothing to interpolate
        return b.const(np.zeros(out, dtype=x.dtype.np))
    full_roi = None
    if ct == "tf_crop_and_resize":
        rv = np.asarray(b.value_of(roi, "roi"), dtype=np.float64).ravel()
        full_roi = [0.0] * x.rank + [1.0] * x.rank
        if len(rv) != 2 * len(axes):
            raise ShapeError(f"{b.where}: roi has {len(rv)} entries; expected 2 * {len(axes)}")
        for i, ax in enumerate(axes):
            full_roi[ax] = rv[i]
            full_roi[x.rank + ax] = rv[len(axes) + i]
    return resize_axes(b, x, tuple(out), full_scales, axes, mode=mode, ct=ct, nearest_mode=nearest_mode,
                       antialias=antialias, a=cubic_coeff_a, exclude_outside=exclude_outside, roi=full_roi,
                       extrapolation_value=extrapolation_value)


@onnx_op("Upsample", const_inputs=(1,))
def upsample(b, x, scales_input=None, *, mode="nearest", **attrs):
    """Resize with asymmetric coordinates; nearest takes floor(x / scale) (scales: input, or attribute < 9; the
    input is not named ``scales``, so that the attribute never binds to it)."""
    s = attrs.get("scales") if scales_input is None else b.value_of(scales_input, "scales")
    if s is None:
        raise ShapeError(f"{b.where}: Upsample needs scales")
    s = [float(v) for v in np.asarray(s).ravel()]
    if len(s) != x.rank or not all(np.isfinite(v) and v > 0 for v in s):
        raise ShapeError(f"{b.where}: scales {s} for rank {x.rank}: one finite positive scale per dim is accepted")
    mode = {"bilinear": "linear", "trilinear": "linear"}.get(mode, mode)
    out = tuple(int(v * d) for v, d in zip(s, x.shape))
    return resize_axes(b, x, out, s, list(range(x.rank)), mode=mode, ct="asymmetric", nearest_mode="floor")


@onnx_op("AffineGrid", const_inputs=(1,))
def affine_grid(b, theta, size, *, align_corners=0):
    """A constant base grid of normalized [x, (y, (z,)) 1] coordinates times theta^T (one matmul)."""
    sz = [int(s) for s in np.asarray(b.value_of(size, "size")).ravel()]
    spatial = sz[2:]
    D = len(spatial)
    if D not in (2, 3) or theta.shape != (sz[0], D, D + 1):
        raise ShapeError(f"{b.where}: theta {theta.shape} and size {sz} must be [N, 2, 3] with [N, C, H, W] "
                         f"or [N, 3, 4] with [N, C, D, H, W]")

    def lin(n):
        if align_corners:
            return np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1)
        return (np.arange(n) * 2.0 + 1) / n - 1
    mesh = np.meshgrid(*[lin(n) for n in spatial], indexing="ij")  # slowest axis first
    base = np.stack([m.ravel() for m in mesh[::-1]] + [np.ones(mesh[0].size)], axis=-1)  # [P, D+1] x first
    dt = theta.dtype.name
    base_v = b.broadcast_to(b.const(base[None], dt), (sz[0],) + base.shape)
    out = b.matmul(base_v, b.transpose_(theta, [0, 2, 1]))  # [N, P, D]
    return b.reshape_(out, (sz[0], *spatial, D))


def _reflect_v(b, p, lo, hi):
    """Reflect run-time coordinates ``p`` at the borders [lo, hi] until they fall inside."""
    rng = hi - lo
    if rng == 0:
        return b.scalar_like(lo, p)
    k = lambda v: b.scalar_like(v, p)  # noqa: E731
    out = p
    for below in (True, False):
        d = b.sub(k(lo), p) if below else b.sub(p, k(hi))
        n = b.floor(b.div(d, k(rng)))
        r = b.sub(d, b.mul(n, k(rng)))
        even = b.eq(b.mod(n, k(2.0)), k(0.0))
        near, far = (k(lo), k(hi)) if below else (k(hi), k(lo))
        inward = b.add(near, r) if below else b.sub(near, r)
        outward = b.sub(far, r) if below else b.add(far, r)
        out = b.select(b.lt(p, k(lo)) if below else b.gt(p, k(hi)), b.select(even, inward, outward), out)
    return out


def _cubic_taps(b, t, a=-0.75):
    k = lambda v: b.scalar_like(v, t)  # noqa: E731

    def far(u):  # a*u^3 - 5a*u^2 + 8a*u - 4a for 1 <= u < 2
        return b.sub(b.mul(b.add(b.mul(b.sub(b.mul(k(a), u), k(5 * a)), u), k(8 * a)), u), k(4 * a))

    def near(u):  # (a+2)*u^3 - (a+3)*u^2 + 1 for u <= 1
        return b.add(b.mul(b.mul(b.sub(b.mul(k(a + 2), u), k(a + 3)), u), u), k(1.0))
    one_t = b.sub(k(1.0), t)
    return [far(b.add(t, k(1.0))), near(t), near(one_t), far(b.add(one_t, k(1.0)))]


@onnx_op("GridSample")
def grid_sample(b, x, grid, *, mode="linear", padding_mode="zeros", align_corners=0):
    """Per spatial axis: grid coordinates denormalized (and clamped or reflected) elementwise, taps at
    floor/round with their weights; each combination of taps is a gather_nd over [N, *in, C], weighted and
    summed (2, 4 or 1 taps per axis for linear, cubic, nearest)."""
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if mode not in ("nearest", "linear", "cubic") or padding_mode not in ("zeros", "border", "reflection"):
        raise ShapeError(f"{b.where}: mode '{mode}' / padding_mode '{padding_mode}' not accepted; accepted: "
                         f"nearest, linear, cubic / zeros, border, reflection")
    dims = x.shape[2:]
    D = len(dims)
    if grid.rank != D + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != D:
        raise ShapeError(f"{b.where}: grid {grid.shape} must be [N, *out, {D}] for X {x.shape}")
    out_sp = grid.shape[:-1]
    xc = b.transpose_(b.cast_(x, "float32"), [0] + list(range(2, x.rank)) + [1])  # [N, *in, C]
    g = b.cast_(grid, "float32")
    taps = []
    for i, d in enumerate(dims):
        gi = _last(b, g, D - 1 - i)  # the grid lists coordinates x first: the last spatial axis
        k = lambda v: b.scalar_like(v, gi)  # noqa: E731
        if align_corners:
            p = b.mul(b.add(gi, k(1.0)), k((d - 1) / 2))
        else:
            p = b.div(b.sub(b.mul(b.add(gi, k(1.0)), k(float(d))), k(1.0)), k(2.0))
        if mode == "nearest":
            p = b.round(p)
        lo, hi = (0.0, d - 1.0) if align_corners else (-0.5, d - 0.5)
        if padding_mode == "border":
            outside = b.or_(b.lt(p, k(lo)), b.gt(p, k(hi)))
            p = b.select(outside, b.min(b.max(p, k(0.0)), k(d - 1.0)), p)
        elif padding_mode == "reflection":
            p = _reflect_v(b, p, lo, hi)
        if mode == "nearest":
            pts = [(p, None)]
        else:
            f = b.floor(p)
            t = b.sub(p, f)
            if mode == "linear":
                pts = [(f, b.sub(k(1.0), t)), (b.add(f, k(1.0)), t)]
            else:
                pts = list(zip([b.add(f, k(float(o))) for o in (-1, 0, 1, 2)], _cubic_taps(b, t)))
        axis_taps = []
        for pos, w in pts:
            valid = None
            if padding_mode == "zeros":
                valid = b.and_(b.ge(pos, k(0.0)), b.le(pos, k(d - 1.0)))
            elif padding_mode == "reflection":
                pos = _reflect_v(b, pos, lo, hi)
            idx = b.cast_(b.min(b.max(pos, k(0.0)), k(d - 1.0)), "int64")
            if valid is not None:
                vf = b.cast_(valid, "float32")
                w = vf if w is None else b.mul(w, vf)
            axis_taps.append((b.reshape_(idx, out_sp + (1,)), w))
        taps.append(axis_taps)
    acc = None
    for combo in np.ndindex(*[len(t) for t in taps]):
        chosen = [taps[ax][j] for ax, j in enumerate(combo)]
        idx = chosen[0][0] if D == 1 else b.concat(*[c[0] for c in chosen], axis=len(out_sp))
        vals = b.gather_nd(xc, idx, batch_dims=1)  # [N, *out, C]
        w = None
        for _, wk in chosen:
            w = wk if w is None else (w if wk is None else b.mul(w, wk))
        if w is not None:
            vals = b.binary("mul", vals, b.reshape_(w, out_sp + (1,)))
        acc = vals if acc is None else b.add(acc, vals)
    out = b.transpose_(acc, [0, D + 1] + list(range(1, D + 1)))
    return b.cast_(out, x.dtype.name)


def _last(b, g, j):
    """g[..., j] (the trailing axis removed)."""
    s = b.slice(g, starts=[0] * (g.rank - 1) + [j], ends=list(g.shape[:-1]) + [j + 1], steps=[1] * g.rank)
    return b.reshape_(s, g.shape[:-1])
