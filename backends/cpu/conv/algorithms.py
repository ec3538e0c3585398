"""The conv engine's algorithms: direct register-blocked convolution (dense, grouped, few channels, strided,
dilated, transposed by phases), depthwise, and Winograd F(2x2) / F(4x4, 3x3). Each planner chooses blocking and
threading for one geometry, renders its template and returns a ConvKernel with the weight repacking."""
from __future__ import annotations

import dataclasses

import numpy as np

from glow_core.backend import Unsupported

from ..templates import template
from .geometry import (ConvEngineError, ConvGeometry, ConvKernel, SpatialDim, Target, align, c_float, flat_dim,
                            spatial_dims, subsampled)

#: Least multiply-adds for which a conv kernel runs as an OpenMP region (waking a thread costs microseconds).
PARALLEL_MIN_MACS = 1 << 19
#: Budget in bytes for the weight slab a register tile streams through per input-channel chunk (L1-resident).
SLAB_BYTES = 40 * 1024
#: Budget in bytes for the padded input rows of one channel block a depthwise strip copies (L1/L2-resident).
DW_STRIP_BYTES = 64 * 1024
#: Bytes of blocked output a direct conv's work item computes before converting them to nchw (L2-resident).
UNBLOCK_ITEM_BYTES = 512 * 1024


# -- direct convolution ------------------------------------------------------------------------------------------------
def _tile_cost(j: int, t: int, steps: int) -> float:
    """Estimated half-cycles of one register tile: per step max(FMAs, loads) (two of each per cycle), plus the
    accumulators' initialisation and store and a call overhead."""
    return steps * max(j * t, j + t) + 2 * j * t + 24


def _choose_tile(target: Target, steps: int, cols: list, rows: list, nfb: int, jmax: int, forced=None):
    """(J, T) minimising the estimated time over every phase's rows of ``cols`` outputs."""
    best = None
    for j in range(1, jmax + 1):
        for t in range(1, 33):
            if (j * t + j) * target.regs_per_block + 1 > target.registers:
                break
            if forced and (j, t) != tuple(forced):
                continue
            full, tail = divmod(nfb, j)
            cost = 0.0
            for c, r in zip(cols, rows):
                per_row = sum(_tile_cost(jj, tt, steps) * cnt
                              for jj, jn in ((j, full), (tail, 1 if tail else 0)) if jn
                              for tt, cnt in ((t, c // t * jn), (c % t, jn if c % t else 0)) if cnt)
                cost += r * per_row
            if best is None or cost < best[0] - 1e-9:
                best = (cost, j, t)
    if best is None:
        raise ConvEngineError(f"conv engine: no register tile fits {forced}")
    return best[1], best[2]


def _imbalance(loads: list, nt: int) -> float:
    """Busiest thread's share of ``loads`` over the mean under OpenMP's static schedule (contiguous runs of
    items, the first len % nt threads one item more)."""
    q, r = divmod(len(loads), nt)
    start, worst = 0, 0
    for i in range(nt):
        n = q + (i < r)
        worst = max(worst, sum(loads[start:start + n]))
        start += n
    return worst * nt / max(sum(loads), 1)


def _row_blocks(units: list, rows: list, nt: int) -> int:
    """Row blocks per (phase, unit) for ``nt`` threads: the fewest (largest blocks, best weight reuse) whose
    static split is within 5% of even, else the most even. ``units`` are the relative works of the groups,
    ``rows`` the row counts of the phases."""
    if nt == 1:
        return 1
    best = None
    for rb in range(1, max(rows) + 1):
        loads = [u * len(range(b * -(-r // rb), min(r, (b + 1) * -(-r // rb)))) for r in rows for u in units
                 for b in range(rb)]
        imb = _imbalance(loads, nt)
        if imb <= 1.05 and len(loads) >= nt:
            return rb
        if best is None or imb < best[0] - 1e-9:
            best = (imb, rb)
    return best[1]


def _layout_strides(layout, cb, c, hw):
    """(block stride, pixel stride, lane stride, image size) of a [c, hw] activation in ``layout``."""
    nb = -(-c // cb)
    if layout == "nchwc":
        return hw * cb, cb, 1, nb * hw * cb
    if layout == "nhwc":
        return cb, c, 1, hw * c
    return cb * hw, 1, hw, c * hw


def _input_copy(dh: SpatialDim, dw: SpatialDim, c: int, in_layout: str, icb: int, cb: int, mult: int = 1,
                min_rows: int = 1, strips: bool = False):
    """(prep dict for conv_layout.prep or None, the (h, w) dims the kernel reads, image floats it reads). x is
    read as it is when it already has the kernel's blocking and needs no padding or subsampling; a kernel that
    reads whole rows with one tap sees them flattened into longer rows: into one row, or, when a thread split
    needs at least ``min_rows`` rows, into the fewest (h / k rows of k input rows, k dividing h) that give
    them (else rows as they are). A kernel copying the input per strip of its own rows (``strips``: depthwise)
    indexes the copy's rows by its own: with rows flattened, the copy is flattened too, which only a copy that
    adds no padding can be (one with padding keeps the rows)."""
    same = ((in_layout == "nchwc" and icb == cb) or (in_layout == "nchw" and icb == 1) or
            (in_layout == "nhwc" and icb == c))
    prep = None
    if not (same and mult == 1 and all(d.pad == 0 and d.sub == 1 and d.padded <= d.size for d in (dh, dw))):
        dh, dw = subsampled(dh), subsampled(dw)
        prep = dict(src_layout=in_layout, c=c, h=dh.size, w=dw.size, src_cb=c if in_layout == "nhwc" else cb,
                    nblk=-(-c * mult // icb), icb=icb, hp=dh.padded, wp=dw.padded, pt=dh.pad, pl=dw.pad,
                    sh=dh.sub, sw=dw.sub, mult=mult)
        dh = dataclasses.replace(dh, size=dh.padded)
        dw = dataclasses.replace(dw, size=dw.padded)
    relayout = prep is None or (prep["h"], prep["w"]) == (prep["hp"], prep["wp"])  # no padding in the copy
    if dh.trivial and dw.trivial and (relayout or not strips):
        k = max((k for k in range(1, dh.size + 1) if dh.size % k == 0 and dh.size // k >= min_rows), default=1)
        dh, dw = flat_dim(dh.size // k), flat_dim(k * dw.size)
        if prep and strips:  # the source's rows flattened as the kernel's (the same elements in the same order)
            prep.update(h=dh.size, w=dw.size, hp=dh.size, wp=dw.size)
    return prep, dh, dw, -(-c * mult // icb) * icb * dh.size * dw.size


def _as_slice(taps: list):
    """The kernel taps of a phase (an arithmetic sequence) as a slice: a view instead of a gather."""
    if not taps:
        return slice(0, 0)
    step = taps[1] - taps[0] if len(taps) > 1 else 1
    return slice(taps[0], taps[-1] + 1, step)


def _dense_input_block(c: int, cb: int, in_layout: str, flat: bool) -> int:
    """Input lanes per block of a dense conv: the layout's cb when its zero lanes waste at most a third of the
    work (no copy needed from nchwc); 1 for a ``flat`` conv (1x1, stride 1, no padding) on nchw, which then
    reads x in place (each channel plane a block: 1.1-1.8x faster than copying MobileNetV2's 1x1 inputs to
    nchwc, bench_conv); all channels in one block when fewer than cb (stems: each pixel's channels side by
    side, measured 1.2-1.8x faster than planar), else the largest of cb/2, cb/4 wasting <= 25%, else 1."""
    if in_layout == "nchwc" and -c % cb <= c / 3:
        return cb
    if in_layout == "nchw" and flat:
        return 1
    if c < cb:
        return c
    return next((b for b in (cb, cb // 2, cb // 4) if -c % b <= c / 4), 1)


def plan_direct(geom, target, epi, nt, in_layout, out_layout, name, force):
    """Register tiles of J filter blocks x T output pixels over channel-blocked input: dense and grouped convs,
    strided, dilated, few channels (narrow input blocks), 1x1 (rows flattened), transposed (one pass per output
    phase). Tile by the cost model, input-channel chunks sized for L1, row blocks for an even thread split."""
    cb = target.cb
    N, C, F, G = geom.batch, geom.channels, geom.filters, geom.group
    cg, fg = C // G, F // G
    dh, dw = spatial_dims(geom)
    nfb = -(-F // cb)
    # input blocking: cb lanes (dense, or groups aligned with blocks), 1 (few or unaligned channels), all (nhwc)
    if "nhwc" in (in_layout, out_layout):
        if G != 1 or in_layout != out_layout or F % cb or dh.step != 1 or dw.step != 1:
            return Unsupported(f"conv engine: nhwc is for dense, non-transposed convs with filters a multiple of "
                               f"{cb}, in and out")
        icb, per_group = C, nfb
    elif G == 1:
        flat = all(d.trivial for d in (dh, dw))
        icb, per_group = int(force.get("icb", _dense_input_block(C, cb, in_layout, flat))), nfb
    elif cg % cb == 0 and fg % cb == 0:
        icb, per_group = cb, fg // cb
    else:
        icb, per_group = 1, nfb
    aligned = icb != 1 or G == 1
    if not aligned and epi.in_place and out_layout != "nchw":
        return Unsupported("conv engine: groups across channel blocks may run twice (a non-finite input: see "
                           "conv_direct.c.j2), which a residual in y's own memory does not allow")
    parallel = nt > 1 and geom.macs >= PARALLEL_MIN_MACS
    few_groups = parallel and -(-nfb // min(4, per_group)) < 4 * nt  # too few work items without row blocks
    # an item converting its own output rows to nchw does so while they are in L2: row blocks that bound them
    unblock_rb = 1
    if out_layout == "nchw" and len(dh.phases) * len(dw.phases) == 1:
        unblock_rb = -(-min(4, per_group) * cb * 4 * dh.out * dw.out // UNBLOCK_ITEM_BYTES)
    prep, dh, dw, ximg = _input_copy(dh, dw, C, in_layout, icb, cb,
                                     min_rows=max(4 * nt if few_groups else 1, unblock_rb))
    scratch = align(ximg * 4) if prep else 0
    if prep:
        prep["offset"] = 0
    kmax = max(len(p[0]) for p in dh.phases) * max(len(p[0]) for p in dw.phases)
    span = cg if G > 1 and aligned else (C if aligned else min(C, (-(-cb // fg) + 1) * cg))
    jmax = min(4, per_group) if aligned else 1
    cols = [pw[3] for _ in dh.phases for pw in dw.phases]
    rows = [ph[3] for ph in dh.phases for _ in dw.phases]
    j, t = _choose_tile(target, kmax * span, cols, rows, nfb, jmax, force.get("tile"))
    # filter-block groups: [first block, J, first input block, input blocks, weight units before it]
    groups, units = [], 0
    for base in range(0, nfb, per_group):
        for fb0 in range(base, min(base + per_group, nfb), j):
            jj = min(j, base + per_group - fb0, nfb - fb0)
            if not aligned:
                g_lo, g_hi = fb0 * cb // fg, (min(F, (fb0 + jj) * cb) - 1) // fg
                cin0, ncin = g_lo * cg, (g_hi - g_lo + 1) * cg
            elif G > 1:
                cin0, ncin = (fb0 * cb // fg) * cg // cb, cg // cb
            else:
                cin0, ncin = 0, -(-C // icb)
            groups.append([fb0, jj, cin0, ncin, units])
            units += ncin * jj
    hp, wp = dh.size, dw.size
    xrow = wp * icb
    phases = [(ph, pw) for ph in dh.phases for pw in dw.phases]
    rblocks = _row_blocks([g[1] for g in groups], [ph[3] for ph, _ in phases], nt if parallel else 1)
    rblocks = int(force.get("rblocks", max(rblocks, min(unblock_rb, max(ph[3] for ph, _ in phases)))))
    ptable, taps, wtotal = [], [], 0
    for ph, pw in phases:
        kh_n, kw_n = len(ph[0]), len(pw[0])
        ptable.append([kh_n, kw_n, ph[1], pw[1], ph[2], pw[2], ph[3], pw[3], -(-ph[3] // rblocks), wtotal,
                       len(taps)])
        taps += [a * dh.sub_dil * xrow + b * dw.sub_dil * icb for a in range(kh_n) for b in range(kw_n)]
        wtotal += units * kh_n * kw_n * icb * cb
    chunk = int(force.get("chunk", max(1, SLAB_BYTES // (kmax * icb * j * cb * 4))))
    if epi.in_place and out_layout != "nchw":  # y holds the residual: no partial sums there, one chunk
        chunk = max([chunk] + [g[3] for g in groups])
    oh, ow = dh.out, dw.out
    yfb, ypx, _, yimg = _layout_strides("nhwc" if out_layout == "nhwc" else "nchwc", cb, F, oh * ow)
    unblock = None
    if out_layout == "nchw":  # each item converts its own rows when it alone writes them (one phase)
        unblock = dict(offset=scratch, hw=oh * ow, inline=len(phases) == 1)
        scratch += align(nfb * oh * ow * cb * 4)
    rfb, rpx, rlane, rimg = _layout_strides(out_layout, cb, F, oh * ow)
    if epi.in_place and not unblock and (rfb, rpx, rlane) != (yfb, ypx, 1):
        raise ConvEngineError(f"conv engine: an in-place residual needs y's own strides, not {(rfb, rpx, rlane)}")
    ukernels = sorted({(g[1], tt) for g in groups for p in ptable
                       for tt in (min(t, p[7]), p[7] % t) if tt > 0})
    how = "nhwc" if in_layout == "nhwc" else ("nchwc" if icb == cb else f"{icb}-lane input blocks")
    desc = (f"direct {how}, tile {j} blocks x {t} px, chunk {chunk}, {rblocks} row block(s), "
            f"{len(phases)} phase(s), {'padded copy' if prep else 'reads x'}, {in_layout}->{out_layout}, "
            f"{nt if parallel else 1} thread(s){', epilogue looped' if epi.looped else ''}")
    src = template("conv_direct.c.j2").render(
        name=name, describe=desc, cb=cb, nt=nt, parallel=parallel, batch=N, prep=prep, unblock=unblock, f=F,
        ukernels=[dict(j=a, t=b) for a, b in ukernels], groups=groups, phases=ptable, taps=taps or [0],
        items=len(phases) * len(groups) * rblocks, rblocks=rblocks, chunk=chunk, tile=t, ostep=dh.step,
        sh=dh.stride, sw=dw.stride, icb=icb, xcb=hp * wp * icb, xrow=xrow, ximg=ximg, yfb=yfb, ypx=ypx,
        ypix=ypx * dw.step, yimg=yimg, ow_full=ow, rfb=rfb, rpx=rpx, rpix=rpx * dw.step, rlane=rlane, rimg=rimg,
        # the residual: res, or in place y itself (read by the register tiles through yp when they store y)
        res_base="" if not epi.residual or (epi.in_place and not unblock) else ("y" if epi.in_place else "res"),
        res_src="yp" if epi.in_place and not unblock else "rp", epi=epi.c_steps(cb),
        epi_looped=epi.looped, masked=None if aligned else dict(cg=cg, fg=fg))
    ktaps = [(ph[0], pw[0]) for ph, pw in phases]
    kshape = (1,) * (2 - len(geom.kernel)) + tuple(geom.kernel)

    def pack(w):
        """[F, C/group, *k] -> per phase, per filter-block group: [input block][kh][kw][lane in][J][cb], from the
        dense [F, C] expansion (zero outside each filter's group, past F and past C)."""
        w = np.asarray(w, dtype=np.float32).reshape((F, cg) + kshape)
        nslots = max(g[2] + g[3] for g in groups) * icb
        dense = np.zeros((nfb * cb, nslots) + kshape, np.float32)
        for g in range(G):
            dense[g * fg:(g + 1) * fg, g * cg:(g + 1) * cg] = w[g * fg:(g + 1) * fg]
        parts = []
        for th, tw in ktaps:
            taps = dense[:, :, _as_slice(th)][:, :, :, _as_slice(tw)]
            for fb0, jj, cin0, ncin, _ in groups:
                blk = taps[fb0 * cb:(fb0 + jj) * cb, cin0 * icb:(cin0 + ncin) * icb]
                blk = blk.reshape(jj, cb, ncin, icb, len(th), len(tw)).transpose(2, 4, 5, 3, 0, 1)
                parts.append(blk.ravel())
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    return ConvKernel(name, src, scratch, pack, "conv engine: " + desc, "direct", in_layout, out_layout, cb, geom,
                      epi, wtotal, dict(tile=(j, t), chunk=chunk, rblocks=rblocks, icb=icb, phases=len(phases)))


def plan_depthwise(geom, target, epi, nt, in_layout, out_layout, name, force):
    """One filter per (input channel, multiplier): lanes are channels, no reduction across lanes."""
    cb = target.cb
    N, C, F = geom.batch, geom.channels, geom.filters
    mult = F // C
    dh, dw = spatial_dims(geom)
    if in_layout == "nhwc" or out_layout == "nhwc":
        return Unsupported("conv engine: depthwise runs on nchw / nchwc only")
    parallel = nt > 1 and geom.macs >= PARALLEL_MIN_MACS // 4
    prep, dh, dw, ximg = _input_copy(dh, dw, C, in_layout, cb, cb, mult, min_rows=4 * nt if parallel else 1,
                                     strips=True)
    (kh_taps, xoff_h, _, oh), = dh.phases
    (kw_taps, xoff_w, _, ow), = dw.phases
    kh, kw = len(kh_taps), len(kw_taps)
    if xoff_h or xoff_w:  # a one-tap dim read in place at an offset: only with copies, never here
        return Unsupported("conv engine: depthwise input offset")
    nfb = -(-F // cb)
    regs = target.registers // target.regs_per_block - 3
    t = int(force.get("tile", min(ow, regs, max(range(4, regs + 1), key=lambda t: (ow / (-(-ow // t) * t), t)))))
    tiles = [t] + ([ow % t] if ow % t else [])
    rblocks = int(force.get("rblocks", _row_blocks([1] * nfb, [oh], nt if parallel else 1)))
    rows = -(-oh // rblocks)
    # strips of output rows whose padded input rows (one channel block) fit DW_STRIP_BYTES: copied per item
    xrow_bytes = dw.size * cb * 4
    strip = int(force.get("strip", max(1, min(rows, ((DW_STRIP_BYTES // xrow_bytes) - (kh - 1) * dh.sub_dil - 1)
                                               // dh.stride + 1))))
    scratch = 0
    if prep:
        prep["offset"] = 0
        prep["bytes"] = align(((strip - 1) * dh.stride + (kh - 1) * dh.sub_dil + 1) * xrow_bytes)
        scratch = prep["bytes"] * (nt if parallel else 1)
    yfb, _, _, yimg = _layout_strides("nchwc", cb, F, oh * ow)
    unblock = None
    if out_layout == "nchw":
        unblock = dict(offset=scratch, hw=oh * ow)
        scratch += align(nfb * oh * ow * cb * 4)
    rfb, rpx, rlane, rimg = _layout_strides(out_layout, cb, F, oh * ow)
    desc = (f"depthwise nchwc{f' x{mult} channels' if mult > 1 else ''}, tile {t} px, {rblocks} row block(s), "
            f"strips of {strip} row(s), {'padded copy per strip' if prep else 'reads x'}, {in_layout}->{out_layout}, "
            f"{nt if parallel else 1} thread(s){', epilogue looped' if epi.looped else ''}")
    src = template("conv_depthwise.c.j2").render(
        name=name, describe=desc, cb=cb, nt=nt, parallel=parallel, batch=N, prep=prep, unblock=unblock, f=F,
        tiles=tiles, tile=t, kh=kh, kw=kw, dh=dh.sub_dil, dw=dw.sub_dil, sh=dh.stride, sw=dw.stride,
        xrow=dw.size * cb, xcb=dh.size * dw.size * cb, ximg=ximg, oh=oh, ow=ow, nfb=nfb, rblocks=rblocks,
        rows=rows, strip=strip, yfb=yfb, yimg=yimg, rfb=rfb, rpx=rpx, rpix=rpx, rlane=rlane, rimg=rimg,
        residual=epi.residual, epi=epi.c_steps(cb), epi_looped=epi.looped)
    kshape = (1,) * (2 - len(geom.kernel)) + tuple(geom.kernel)

    def pack(w):
        """[F, 1, *k] -> [F/cb][kh][kw][cb], zero lanes past F."""
        w = np.asarray(w, dtype=np.float32).reshape((F,) + kshape)[:, kh_taps][:, :, kw_taps]
        out = np.zeros((nfb * cb, kh, kw), np.float32)
        out[:F] = w
        return np.ascontiguousarray(out.reshape(nfb, cb, kh, kw).transpose(0, 2, 3, 1)).ravel()

    return ConvKernel(name, src, scratch, pack, "conv engine: " + desc, "depthwise", in_layout, out_layout, cb,
                      geom, epi, nfb * cb * kh * kw, dict(tile=t, rblocks=rblocks, strip=strip))


# -- Winograd F(m x m, 3 x 3) ------------------------------------------------------------------------------------
#: m -> (B^T, G, A^T) for 3x3 kernels (Lavin & Gray), points 0, +-1, +-2 and infinity for m = 4.
WINOGRAD = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
        np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                  [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], np.float64)),
}
#: Bytes of transformed input and output one work item keeps (L2-resident between the three stages).
WINOGRAD_ITEM_BYTES = 1536 * 1024
#: Larger transformed weights stream from memory once per tile batch: the direct kernel then wins.
WINOGRAD_MAX_WEIGHT_BYTES = 16 << 20
#: (m, least output side) in order of preference: F(m x m) on maps at least that large (``winograd_choice``).
WINOGRAD_LEAST_SIDE = ((4, 24), (2, 12))
#: Fewest input channels and filters for Winograd (``winograd_choice``).
WINOGRAD_MIN_CHANNELS = 16


def _lincomb(row) -> str:
    """C expression of sum(row[k] * @k) with ``@`` standing for the operand prefix; 1 and -1 as +/-."""
    terms = []
    for k, c in enumerate(row):
        if c == 0:
            continue
        mag = abs(c)
        t = f"@{k}" if mag == 1 else f"{c_float(mag)} * @{k}"
        terms.append(("- " if c < 0 else ("+ " if terms else "")) + t)
    return " ".join(terms).replace("+ -", "- ") if terms else "0.0f * @0"


def winograd_fits(geom: ConvGeometry) -> bool:
    return (len(geom.spatial) == 2 and geom.kernel == (3, 3) and geom.strides == (1, 1) and geom.dilations == (1, 1)
            and geom.group == 1 and all(u == 1 for u in geom.input_dilation))


def winograd_choice(geom: ConvGeometry):
    """Measured on ResNet-18's 3x3 layers (bench/bench_conv.py): F(4x4) wins on maps of 24+ (1.7-1.9x the
    direct kernel at 56x56 and 28x28), F(2x2) on 12+ (1.2x at 14x14 with 256 channels), the direct kernel below
    (7x7: its weights are read once instead of 16/9 or 4 times as many transformed ones). Not below 16 channels
    in or out: F(4x4)'s rounding error grows with the dynamic range inside a tile, and few channels do not
    average it out (tests/cpu/test_conv_engine.py measures it against the conformance bound)."""
    oh, ow = geom.out_spatial
    if geom.channels < WINOGRAD_MIN_CHANNELS or geom.filters < WINOGRAD_MIN_CHANNELS:
        return None
    for m, least in WINOGRAD_LEAST_SIDE:
        a = m + 2
        if min(oh, ow) >= least and a * a * geom.channels * geom.filters * 4 <= WINOGRAD_MAX_WEIGHT_BYTES:
            return f"winograd{m}"
    return None


def _tile_batch(tiles: int, cap: int, nt: int) -> int:
    """Tiles per work item: batches of at most ``cap`` tiles (their transformed data stays in L2), as equal as
    possible, and so many that the static split over ``nt`` threads is within 10% of even."""
    for k in range(1, tiles + 1):
        tb = -(-tiles // (k * nt))
        loads = [min(tb, tiles - i) for i in range(0, tiles, tb)]
        if tb <= cap and (nt == 1 or (len(loads) >= nt and _imbalance(loads, nt) <= 1.1)):
            return tb
    return 1


def plan_winograd(geom, target, epi, nt, in_layout, out_layout, name, force, m):
    """F(m x m, 3x3): per batch of output tiles, input transform, one GEMM per position (the direct kernel's
    register tiles with tiles as pixels), output transform with the epilogue. Weights transformed in float64; the
    tiles whose outputs are not all finite are recomputed by the direct formula from the filter as the instruction
    holds it (the kernel's seventh argument: ``ConvKernel.reads_filter``)."""
    cb = target.cb
    if in_layout == "nhwc" or out_layout == "nhwc":
        return Unsupported("conv engine: winograd runs on nchw / nchwc only")
    BT, _, AT = WINOGRAD[m]
    a = m + 2
    N, C, F = geom.batch, geom.channels, geom.filters
    oh, ow = geom.out_spatial
    tiles_h, tiles_w = -(-oh // m), -(-ow // m)
    tiles = tiles_h * tiles_w
    dh, dw = spatial_dims(geom)
    dh = dataclasses.replace(dh, padded=max(dh.padded, tiles_h * m + 2))
    dw = dataclasses.replace(dw, padded=max(dw.padded, tiles_w * m + 2))
    prep, dh, dw, ximg = _input_copy(dh, dw, C, in_layout, cb, cb)
    ncb, nfb = -(-C // cb), -(-F // cb)
    j, t = _choose_tile(target, ncb * cb, [min(tiles, 28)], [1], nfb, min(4, nfb), force.get("tile"))
    per_tile = a * a * (ncb + nfb) * cb * 4
    parallel = nt > 1 and geom.macs >= PARALLEL_MIN_MACS
    tb = _tile_batch(tiles, max(1, WINOGRAD_ITEM_BYTES // per_tile), nt if parallel else 1)
    tb = int(force.get("tb", tb))
    t = min(t, tb)
    batches = -(-tiles // tb)
    groups, units = [], 0
    for fb0 in range(0, nfb, j):
        jj = min(j, nfb - fb0)
        groups.append([fb0, jj, 0, ncb, units])
        units += ncb * jj
    scratch = 0
    if prep:
        prep["offset"] = 0
        scratch = align(ximg * 4)
    work_bytes = align(per_tile * tb)
    work_offset = scratch
    scratch += work_bytes * (nt if parallel else 1)
    unblock = None
    if out_layout == "nchw":
        unblock = dict(offset=scratch, hw=oh * ow)
        scratch += align(nfb * oh * ow * cb * 4)
    yfb, _, _, yimg = _layout_strides("nchwc", cb, F, oh * ow)
    rfb, rpx, rlane, rimg = _layout_strides(out_layout, cb, F, oh * ow)
    last = tiles - (batches - 1) * tb
    ukernels = sorted({(g[1], tt) for g in groups for tt in (min(t, last), last % t if last > t else 0,
                                                             min(t, tb), tb % t if tb > t else 0) if tt > 0})
    desc = (f"winograd F({m}x{m},3x3) nchwc, {tiles} tiles in {batches} batch(es) of {tb}, GEMM tile {j} blocks "
            f"x {t} tiles, {'padded copy' if prep else 'reads x'}, {in_layout}->{out_layout}, "
            f"{nt if parallel else 1} thread(s)")
    src = template("conv_winograd.c.j2").render(
        name=name, describe=desc, cb=cb, nt=nt, parallel=parallel, batch=N, prep=prep, unblock=unblock, f=F, m=m,
        a=a, bt_rows=[_lincomb(r) for r in BT], at_rows=[_lincomb(r) for r in AT], ukernels=[
            dict(j=x, t=y) for x, y in ukernels], groups=groups, tb=tb, tile=t, tiles=tiles, tiles_w=tiles_w,
        batches=batches, c=C, ncb=ncb, nfb=nfb, vpos=ncb * tb * cb, mpos=nfb * tb * cb, wpos=units * cb * cb,
        xrow=dw.size * cb, xcb=dh.size * dw.size * cb, ximg=ximg, oh=oh, ow=ow, work_offset=work_offset,
        work_bytes=work_bytes, yfb=yfb, yimg=yimg, rfb=rfb, rpx=rpx, rpix=rpx, rlane=rlane, rimg=rimg,
        residual=epi.residual, epi=epi.c_steps(cb))
    G_ = WINOGRAD[m][1]

    def pack(w):
        """U = G g G^T per (filter, channel) in float64, then per position the 1x1 blocking of the direct kernel:
        [pos][filter-block group][input block][lane in][J][cb]."""
        w = np.asarray(w, dtype=np.float64).reshape(F, C, 3, 3)
        with np.errstate(invalid="ignore"):  # non-finite weights: those tiles take the direct formula
            u = np.matmul(np.matmul(G_, w), G_.T).transpose(2, 3, 0, 1).reshape(a * a, F, C)  # G w G^T per (f, c)
        full = np.zeros((a * a, nfb * cb, ncb * cb), np.float64)
        full[:, :F, :C] = u
        parts = []
        for pos in range(a * a):
            for fb0, jj, _, _, _ in groups:
                blk = full[pos, fb0 * cb:(fb0 + jj) * cb].reshape(jj, cb, ncb, cb)  # [J, lane out, cb, lane in]
                parts.append(blk.transpose(2, 3, 0, 1).ravel())
        return np.concatenate(parts).astype(np.float32)

    return ConvKernel(name, src, scratch, pack, "conv engine: " + desc, f"winograd{m}", in_layout, out_layout, cb,
                      geom, epi, a * a * units * cb * cb, dict(tile=(j, t), tb=tb, m=m), reads_filter=True)
