"""Int8 convolution: geometry -> transform planes, register tiles, thread split; weight packing at compile time.

Algorithm (every 2-d conv, grouped and depthwise included): per image the input is rewritten into scratch as
"planes" of dwords, 4 consecutive channels of one position as unsigned bytes (int8 + 128), one plane per stride
phase (row mod sh, column mod sw), spatial padding filled with the input offset. An output pixel (oh, ow) is
virtual pixel q = oh * Wh + ow of a plane row pitch Wh, and every kernel tap reads dword q + delta(tap) of one
plane: a vector of lanes virtual pixels is one unaligned load, multiplied (vpdpbusd) by a broadcast dword of 4
weights of one output channel. Virtual pixels with ow >= OW are computed and dropped at the store. A register
tile is mr output channels x nv vectors, accumulated over the whole window; the epilogue adds the per-channel
correction and requantizes before the only store.

With x_u = x + 128 (int8) or x (uint8) and xo' its offset, acc = sum (x - xo)(w - wo) + bias expands into
sum x_u w - wo * sum x_u - xo' * sum w + K xo' wo + bias: all but the first two terms are the per-channel int32
correction (compile time); the second exists only when a weight offset is non-zero (per-pixel sums of the
transformed input, one pass). int32 arithmetic wraps, so the sum is exact whenever the true value fits int32.
"""
from __future__ import annotations

import numpy as np

from glow_core.backend import Unsupported

from ..templates import template
from .common import (QTYPES, Int8EngineError, Int8Kernel, QConstants, QTarget, Requant, ResidualAdd, WeightTerms,
                          check_weighted, host_qtarget, threads_for)
from .elementwise import ELEMENT_WORK, plan_qadd

#: Cycles of one vpdpbusd and of one load (throughput on the development machine: about 0.24 ns per zmm vpdpbusd
#: in a good tile, loads 2 per cycle) and per tile outside the K loop (epilogue, call); the tile chooser's model.
DP_CYCLES, LOAD_CYCLES, TILE_OVERHEAD = 0.75, 0.5, 40.0
#: Registers a tile leaves free: accumulators + input vectors + broadcast weights <= registers - TILE_SPARE.
#: Measured (bench/bench_int8.py, ResNet-18 3x3 convs): 8x2, 6x3, 4x4 and 12x1 tiles run at 250-290 GMAC/s,
#: 5x4, 9x2 and 16x1 (one or two registers more) at 90-160: GCC spills.
TILE_SPARE = 5
#: Most pixel vectors of a conv tile (a matmul's, whose vectors are packed rows, may take 8). Measured
#: (bench/bench_int8.py geometries, AVX-512 VNNI): the 3ch x 6 vectors tile the model ties with 6x3 ran at
#: 650-690 us on ResNet-18's 3x3 convs at 56, 28 and 14 pixels against 415-435 for 6x3 and 8x2 (every tap's
#: vector loads straddle cache lines: six of them per tap saturate the load ports).
MAX_NV = 4
#: Chunks per thread of a parallel conv's transform rows and register tiles, handed out dynamically: on a shared
#: machine a static half per thread made every barrier wait out a preempted thread's whole share.
DYNAMIC_CHUNKS = 8
#: Least groups per thread for a grouped conv to run group by group (each group's transform, then its tiles, in
#: one thread while the group's planes are in cache) rather than the whole transform, a barrier, then all tiles.
BY_GROUP_MIN = 4
#: Largest column stride of a depthwise conv whose kernel rows are packed in dwords (the transform's 16-byte
#: shuffle builds 4 dwords from bytes [0, 3 * stride + 4)).
KWPACK_MAX_STRIDE = 4
#: AMX (tdpbsud) blocks: ma (2, or 1 for at most 16 output channels) weight tiles of 16 output channels x 2 input
#: tiles of 16 virtual pixels (2 ma C tiles), over K chunks of kc 4-channel blocks of one tap, kc the largest divisor
#: of the blocks <= AMX_MAX_KC (one tile configuration per conv). Taken when kc >= AMX_MIN_KC (a tdpbsud of 16
#: channels still does 4x the multiply-adds of the VNNI tile's cycle) and the output channels padded to 16 ma
#: waste at most a quarter of the work.
AMX_MAX_KC, AMX_MIN_KC = 16, 4
#: Least pixel vectors in a chunk of a 1x1 conv split by pixels (a chunk is a multiple of the tile's vectors).
PXSPLIT_MIN_VECTORS = 4
#: Least chunks per thread for a 1x1 conv to split by pixels (fewer: the channel blocks share out instead).
PXSPLIT_MIN_CHUNKS = 4
#: Lanes of a direct depthwise vector (int32 accumulators of one zmm) and the bytes of input one vpermb (64) or
#: vpermt2b (128) gathers them from; the last byte of the window is the padding (masked out of the loads).
DW_LANES, DW_WINDOWS = 16, (64, 128)


def plan_dw_direct(h, w, oh, ow, kh, kw, sh, sw, dh, pt, pl):
    """The direct depthwise conv's tables (AVX512-VBMI), or None when a vector's input does not fit 127 bytes.

    No transform: per channel and vector of 16 output pixels, each kernel row i is one masked load of the
    channel's NCHW bytes from ``off[v, i]`` (``mask`` over the bytes some lane reads, the rest the padding
    value) and one byte permutation (``idx`` rows, deduplicated) building each lane's dword of the row's kw taps,
    then vpdpbusd with the channel's packed row i. Lanes are consecutive output pixels ("flat": stores of 16
    contiguous bytes) or, when a vector crossing output rows would read too far, vectors within one output row
    ("rows": ceil(ow / 16) vectors a row). Returns the layout, window and counts, and the tables as C initializers
    (off, m1, m2, ref, idx, yoff, ymask)."""
    for layout in ("flat", "rows"):
        if layout == "flat":
            nvec = -(-oh * ow // DW_LANES)
            p = np.arange(nvec * DW_LANES).reshape(nvec, DW_LANES)
            live = p < oh * ow
            r, col = p // ow, p % ow
        else:
            per = -(-ow // DW_LANES)
            nvec = oh * per
            v = np.arange(nvec)[:, None]
            col = (v % per) * DW_LANES + np.arange(DW_LANES)[None, :]
            r = np.broadcast_to(v // per, col.shape)
            live = col < ow
        # [nvec, 16 lanes, kh rows, 4 bytes]
        ih = (r * sh)[:, :, None, None] + (np.arange(kh) * dh)[None, None, :, None] - pt
        iw = (col * sw)[:, :, None, None] + np.arange(4)[None, None, None, :] - pl
        ok = (live[:, :, None, None] & (ih >= 0) & (ih < h) & (iw >= 0) & (iw < w)
              & (np.arange(4) < kw)[None, None, None, :])
        flat = np.where(ok, ih * w + iw, -1)
        any_ = ok.any(axis=(1, 3))  # [nvec, kh]
        lo = np.where(any_, np.where(ok, flat, np.iinfo(np.int64).max).min(axis=(1, 3)), 0)
        span = np.where(any_, flat.max(axis=(1, 3)) - lo + 1, 0)
        window = next((wd for wd in DW_WINDOWS if span.max() <= wd - 1), None)
        if window is None:
            continue
        idx = np.where(ok, flat - lo[:, None, :, None], window - 1)  # [nvec, 16, kh, 4]
        idx = idx.transpose(0, 2, 1, 3).reshape(nvec * kh, 64).astype(np.uint8)
        seen: dict[bytes, int] = {}
        ref = np.array([seen.setdefault(r.tobytes(), len(seen)) for r in idx])
        rows = np.frombuffer(b"".join(seen), np.uint8).reshape(-1, 64)
        span = span.reshape(-1)
        v = np.arange(nvec)
        yoff = v * DW_LANES if layout == "flat" else (v // per) * ow + (v % per) * DW_LANES
        ymask = (live.astype(np.int64) << np.arange(DW_LANES)).sum(axis=1)

        def masks(bits):
            return ", ".join(f"0x{(1 << int(b)) - 1:x}ull" for b in bits)

        return dict(layout=layout, window=window, nvec=nvec, n=nvec * kh, nidx=len(rows),
                    off=", ".join(map(str, lo.reshape(-1).tolist())), m1=masks(np.minimum(span, 64)),
                    m2=masks(np.maximum(span - 64, 0)), ref=", ".join(map(str, ref.reshape(-1).tolist())),
                    idx=",\n".join("  { " + ", ".join(map(str, r)) + " }" for r in rows.tolist()),
                    yoff=", ".join(map(str, yoff.tolist())), ymask=", ".join(map(str, ymask.tolist())))
    return None


def _tile_candidates(target: QTarget, max_nv: int):
    """(mr, nv) register tiles: accumulators, the nv input vectors and the mr broadcast weights fit the
    registers with TILE_SPARE left, nv <= max_nv."""
    return [(mr, nv) for nv in range(1, max_nv + 1) for mr in range(1, 25)
            if mr * nv + mr + nv <= target.registers - TILE_SPARE]


def _blocks(total: int, size: int) -> list[tuple[int, int]]:
    """(count, size) of full blocks then the remainder block."""
    out = [(total // size, size)] if total >= size else []
    if total % size:
        out.append((1, total % size))
    return out


def choose_tile(fg: int, nvec: int, ksteps: int, target: QTarget, max_nv: int = 8) -> tuple[int, int]:
    """The (mr, nv) of least modelled cycles over the output channels of a group x the pixel vectors."""
    best = None
    for mr, nv in _tile_candidates(target, max_nv):
        if mr > fg or nv > nvec:
            continue
        cost = 0.0
        for cm, m in _blocks(fg, mr):
            for cq, v in _blocks(nvec, nv):
                cost += cm * cq * (ksteps * max(m * v * DP_CYCLES, (m + v) * LOAD_CYCLES) + TILE_OVERHEAD)
        key = (cost, -mr * nv)
        if best is None or key < best[0]:
            best = (key, (mr, nv))
    return best[1] if best else (1, 1)


def dw_desc(dw: dict, kh: int) -> str:
    return (f", direct depthwise (AVX512-VBMI; the planes without it): {dw['nvec']} {dw['layout']} vectors x {kh} "
            f"rows, each a masked {dw['window']}-byte window of the NCHW input permuted into tap dwords "
            f"({dw['nidx']} index rows)")


def plan_qconv(x_shape, w_shape, strides, dilations, pads, group: int = 1, *, x_dtype: str, x_offset: int,
               w_dtype: str = "int8", w_offset=0, multiplier=1.0, y: Requant, num_threads: int = 1,
               target: QTarget | None = None, name: str = "gq_conv", force: dict | None = None,
               residual: ResidualAdd | None = None):
    """An Int8Kernel (kind "conv") for a quantized `conv`, or Unsupported(reason). Shapes and attributes are the
    conv primitive's (x [N, C, *S], w [F, C/group, *K], pads = begins + ends); ``w_offset`` and ``multiplier``
    are scalars (per tensor) or [F] (per output channel); ``y`` is the output's Requant. With ``residual`` the
    kernel (kind "conv+add") takes two more arguments, B and Y (``const void *b, void *yadd``), and each tile,
    after storing its requantized 8-bit output, adds it to B into Y over the pixels it stored (plan_qadd's
    arithmetic; Y may be B or the conv output itself, element for element)."""
    force = check_weighted("conv", name, x_dtype, x_offset, w_dtype, y, force)
    target = target or host_qtarget()
    x_shape, w_shape = tuple(x_shape), tuple(w_shape)
    given_w_shape = w_shape
    nsp = len(x_shape) - 2
    if nsp not in (1, 2) or len(w_shape) != len(x_shape):
        return Unsupported(f"int8 engine: 1-d and 2-d convolutions only (input {x_shape}, filter {w_shape})")
    if nsp == 1:  # a 1-d conv is a 2-d one of height 1
        x_shape, w_shape = x_shape[:2] + (1,) + x_shape[2:], w_shape[:2] + (1,) + w_shape[2:]
        strides, dilations, pads = (1,) + tuple(strides), (1,) + tuple(dilations), (0, pads[0], 0, pads[1])
    n, c, h, w = x_shape
    f, cg, kh, kw = w_shape
    if group < 1 or c % group or f % group or cg * group != c:
        raise Int8EngineError(f"int8 engine: filter {w_shape} with group {group} does not match input {x_shape}")
    sh, sw = strides
    dh, dw = dilations
    pt, pl, pb, pr = pads
    if min(sh, sw, dh, dw) < 1 or min(pads) < 0:
        raise Int8EngineError(f"int8 engine: strides {strides} and dilations {dilations} must be >= 1, pads "
                              f"{pads} >= 0")
    hp, wp = h + pt + pb, w + pl + pr
    oh, ow = (hp - (kh - 1) * dh - 1) // sh + 1, (wp - (kw - 1) * dw - 1) // sw + 1
    if oh <= 0 or ow <= 0 or n == 0 or f == 0 or c == 0:
        return Unsupported(f"int8 engine: empty convolution (input {x_shape}, filter {w_shape})")
    fg = f // group
    terms = WeightTerms.of("conv", x_dtype, x_offset, w_dtype, w_offset, multiplier, f)
    mult, flip, xo_u, xsum = terms.mult, terms.flip, terms.xo_u, terms.xsum
    lanes = target.lanes

    # a depthwise conv of 2-4 columns packs a kernel row's taps (not 4 channels) in a dword: the planes' columns are
    # the output columns, one dword read per kernel row
    kwpack = cg == 1 and 2 <= kw <= 4 and dw == 1 and sw <= KWPACK_MAX_STRIDE
    # planes: only the stride phases some tap reads
    taps = [(i, 0) for i in range(kh)] if kwpack else [(i, j) for i in range(kh) for j in range(kw)]
    phases = sorted({((i * dh) % sh, (j * dw) % sw) for i, j in taps})
    hh, wh = -(-hp // sh), (ow if kwpack else -(-wp // sw))
    c4 = -(-cg // 4)
    q = oh * wh
    nvec = -(-q // lanes)
    kc = max(d for d in range(1, AMX_MAX_KC + 1) if c4 % d == 0)
    amx_oc = 16 if fg <= 16 else 32
    fpad = -(-fg // amx_oc) * amx_oc
    amx = bool(target.amx and force.get("amx", True) and lanes == 16 and group == 1 and not kwpack
               and kc >= AMX_MIN_KC and fpad * 3 <= fg * 4)
    deltas = [phases.index(((i * dh) % sh, (j * dw) % sw)) for i, j in taps]
    inplane = [(i * dh // sh) * wh + (j * dw // sw) for i, j in taps]
    # an AMX block reads vectors in pairs: an odd count's last pair reads one vector past the last (dropped)
    plen = max(hh * wh, (nvec + (nvec % 2 if amx else 0)) * lanes + max(inplane))
    plen = -(-plen // 16) * 16
    toff = [(d * plen + e) * 4 for d, e in zip(deltas, inplane)]
    cst = len(phases) * plen * 4
    xt_bytes = group * c4 * cst
    xs_bytes = group * nvec * lanes * 4 if xsum else 0
    scratch = -(-(xt_bytes + xs_bytes) // 64) * 64

    # valid lanes and the output position of each vector's first valid lane
    masks, pos = [], []
    done = 0
    for v in range(nvec):
        m = 0
        for li in range(lanes):
            qq = v * lanes + li
            if qq < q and qq % wh < ow:
                m |= 1 << li
        masks.append(m)
        pos.append(done)
        done += bin(m).count("1")

    ksteps = c4 * len(taps)
    mr, nv = choose_tile(fg, nvec, ksteps, target, MAX_NV)
    mr, nv = int(force.get("mr", mr)), int(force.get("nv", nv))
    if not (1 <= mr <= fg and 1 <= nv <= nvec):
        raise Int8EngineError(f"int8 engine: forced tile {mr}x{nv} must fit 1..{fg} channels x 1..{nvec} vectors")
    nob, nqb = -(-fg // mr), -(-nvec // nv)
    variants = []
    for cm, m in _blocks(fg, mr):
        for cq, v in _blocks(nvec, nv):
            cond_o = f"ob < {fg // mr}" if m == mr else f"ob == {fg // mr}"
            cond_q = f"qb < {nvec // nv}" if v == nv else f"qb == {nvec // nv}"
            variants.append((m, v, f"{cond_o} && {cond_q}"))
    res_src, res_desc = "", ""
    # the 16-lane path adds the residual to the requantized lanes in registers (8-bit B and Y: the qadd's v16 helper)
    res_vec = residual is not None and lanes == 16 and {residual.b_dtype, residual.y.dtype} <= {"int8", "uint8"}
    if residual is not None:
        if y.dtype not in ("int8", "uint8"):
            raise Int8EngineError(f"int8 engine: a residual add needs an 8-bit conv output, not {y.dtype}")
        ab = [(y.dtype, y.offset, residual.conv_multiplier), (residual.b_dtype, residual.b_offset,
                                                              residual.b_multiplier)]
        if residual.conv_slot:
            ab.reverse()
        (ad, ao, am), (bd, bo, bm) = ab
        res_src = plan_qadd((1,), a_dtype=ad, a_offset=ao, a_multiplier=am, b_dtype=bd, b_offset=bo,
                            b_multiplier=bm, y=residual.y, target=target, name=name + "_res").source
        res_desc = (f", residual add {residual.b_dtype}->{residual.y.dtype} fused per tile"
                    f"{' in registers' if res_vec else ''}")
    macs = n * f * cg * kh * kw * oh * ow
    # the transform and the stores cost like an elementwise kernel's elements: a depthwise conv of few
    # multiply-adds per element still shares out
    nt = threads_for(max(macs, ELEMENT_WORK * n * (c * h * w + f * oh * ow)), num_threads)
    # a depthwise conv without weight offsets or residual: straight from the NCHW rows by byte permutations
    dw = (plan_dw_direct(h, w, oh, ow, kh, kw, sh, sw, dh, pt, pl)
          if kwpack and fg == 1 and lanes == 16 and residual is None and not xsum and force.get("dwdirect", True)
          else None)
    trows, items = group * c4 * len(phases) * hh, group * nob * nqb
    # group by group (transform, sums, tiles while the group's planes are in cache) when the groups share out
    by_group = group >= BY_GROUP_MIN * nt
    tchunk = max(1, trows // (nt * DYNAMIC_CHUNKS))
    # a 1x1 conv of stride 1 without padding: its virtual pixels are the input's, so a chunk of pixel vectors is
    # transformed and multiplied by the thread that takes it (no barrier, the planes stay in its cache)
    step = nv * 2 // int(np.gcd(nv, 2)) if amx else nv
    pxvec = -(-max(PXSPLIT_MIN_VECTORS, -(-nvec // (nt * DYNAMIC_CHUNKS))) // step) * step
    pxsplit = (kh == kw == 1 and sh == sw == 1 and not any(pads) and group == 1
               and force.get("pxsplit", nt > 1 and -(-nvec // pxvec) >= PXSPLIT_MIN_CHUNKS * nt))
    requant = y.dtype != "int32"
    flo, fhi = y.float_bounds() if requant else ("0.0", "0.0")
    kind = "depthwise" if cg == 1 and group == c else ("1x1" if kh == kw == 1 else f"{kh}x{kw}")
    desc = (f"int8 conv {kind} {x_dtype}x{w_dtype}->{y.dtype} {n}x{c}x{h}x{w} -> {f}x{oh}x{ow} g{group} "
            f"s{sh},{sw}: transform to {len(phases)} plane(s) of {hh}x{wh} dwords"
            f"{f' of a kernel row (kw {kw} taps)' if kwpack else ''}, tile {mr}ch x {nv}x{lanes}px, "
            f"{'per-channel' if len(set(mult.tolist())) > 1 else 'per-tensor'} requant"
            f"{', pixel sums for weight offsets' if xsum else ''}{res_desc}{', group by group' if by_group else ''}"
            f"{f', chunks of {pxvec} pixel vectors transformed and multiplied by one thread' if pxsplit else ''}"
            f"{f', AMX blocks {amx_oc}ch x 32px over K chunks of {kc * 4} channels (the VNNI tiles without AMX)' if amx else ''}"
            f"{dw_desc(dw, kh) if dw else ''}, "
            f"{nt} thread(s), {target.name}")
    nqb2 = -(-nvec // 2)
    vnni_bytes = f * c4 * 4 * len(taps)
    src = template("qconv.c.j2").render(
        name=name, describe=desc, lanes=lanes, n=n, c=c, h=h, w=w, f=f, fg=fg, cg=cg, c4=c4, group=group,
        oh=oh, ow=ow, ohw=oh * ow, sh=sh, sw=sw, pad_t=pt, pad_l=pl, hh=hh, wh=wh, plen=plen,
        nplanes=len(phases), phs=", ".join(str(p[0]) for p in phases), pws=", ".join(str(p[1]) for p in phases),
        taps=len(taps), toff=", ".join(map(str, toff)), cst=cst, nvec=nvec,
        masks=", ".join(f"0x{m:x}u" for m in masks), pos=", ".join(map(str, pos + [done])),
        flip=flip, flip4=flip * 0x01010101, pad1=xo_u, pad4=xo_u * 0x01010101, trows=trows,
        xsum=xsum, xt_bytes=xt_bytes, scratch=scratch, variants=variants, mr=mr, nv=nv, nob=nob, nqb=nqb,
        items=items, requant=requant, flo=flo, fhi=fhi, yoff=y.offset,
        x_ctype="int8_t" if x_dtype == "int8" else "uint8_t",
        y_ctype={"int8": "int8_t", "uint8": "uint8_t", "int32": "int32_t"}[y.dtype],
        parallel=nt > 1, nt=nt, res_src=res_src, residual=residual,
        tchunk=tchunk, tchunks=-(-trows // tchunk), ichunk=max(1, items // (nt * DYNAMIC_CHUNKS)),
        res_vec=res_vec, by_group=by_group, kwpack=kwpack, kw=kw, kwmask=(1 << 8 * kw) - 1,
        padk=xo_u * ((1 << 8 * kw) - 1) // 255, flipk=flip * ((1 << 8 * kw) - 1) // 255,
        shuf=", ".join(str(j * sw + t) for j in range(4) for t in range(4)),
        rb_cvt="cvtepi8" if residual and residual.b_dtype == "int8" else "cvtepu8",
        b_ctype=QTYPES[residual.b_dtype][0] if residual else "",
        r_ctype=QTYPES[residual.y.dtype][0] if residual else "",
        amx=amx, kc=kc, nk=c4 // kc, amx_off=vnni_bytes, amx_block=len(taps) * c4 * 4 * amx_oc, nqb2=nqb2,
        amx_items=fpad // amx_oc * nqb2, amx_ichunk=max(1, fpad // amx_oc * nqb2 // (nt * DYNAMIC_CHUNKS)),
        ma=amx_oc // 16, fpad=fpad, q=q, pxsplit=pxsplit, pxvec=pxvec, pxchunks=-(-nvec // pxvec), dw=dw, kh=kh, dwpad=(xo_u ^ flip) & 0xFF,
        dwchunk=max(1, n * f // (nt * DYNAMIC_CHUNKS)), gchunk=max(1, group // (nt * DYNAMIC_CHUNKS)))

    def pack(weights, bias=None) -> QConstants:
        wt = terms.signed(weights, (f, cg, kh, kw), given_w_shape)
        k = cg * kh * kw
        corr = terms.bias(bias) - xo_u * wt.reshape(f, -1).sum(axis=1) + k * xo_u * terms.wo_s
        nt_ = len(taps)
        wpad = np.zeros((f, c4 * 4, nt_), np.int64)
        if kwpack:  # byte t of kernel row i's dword: column t
            wpad[:, :kw] = wt.reshape(f, kh, kw).transpose(0, 2, 1)
        else:
            wpad[:, :cg] = wt.reshape(f, cg, kh * kw)
        # [F, c4, 4, T] -> per block of rows [c4, T, rows, 4]
        wpad = wpad.reshape(f, c4, 4, nt_).transpose(1, 3, 0, 2)
        blocks = []
        for g in range(group):
            for f0 in range(0, fg, mr):
                rows = slice(g * fg + f0, g * fg + min(f0 + mr, fg))
                blocks.append(wpad[:, :, rows].reshape(-1))
        packed = np.concatenate(blocks).astype(np.int8)
        assert packed.size == vnni_bytes
        if amx:  # then the AMX weight tiles: [channel block][tap][K chunk][16 ma channels][kc blocks x 4]
            wa = np.zeros((fpad, c4 * 4, nt_), np.int64)
            wa[:f, :cg] = wt.reshape(f, cg, nt_)
            wa = wa.reshape(fpad // amx_oc, amx_oc, c4 // kc, kc * 4, nt_).transpose(0, 4, 2, 1, 3)
            packed = np.concatenate([packed, wa.reshape(-1).astype(np.int8)])
        corr32 = corr.astype(np.int64).astype(np.uint32).view(np.int32)  # wraps like the kernel's int32
        if xsum:
            corr32 = np.concatenate([corr32, terms.wo_s.astype(np.int32)])
        return QConstants(packed, corr32, mult.copy())

    return Int8Kernel(name, "conv+add" if residual else "conv", src, scratch, desc, macs, pack)
