"""Kernels: each claimed instruction (or fused group) as a tiled pipeline of NPU instructions.

Every kernel is a *job* (a dataclass describing the operands in DRAM, in the device layout) with three parts:
``loops`` / ``buffers(tile)`` / ``cost(tile, order)`` for ``glow_core.tiling.plan`` (the analytical model the
tiling is chosen by), and ``emit(tiling, stream)`` writing its steps (``steps.Stream``: the tokens follow from
the step structure). The jobs:

- ``ConvJob``: convolution and matrix product on the MAC array (an implicit im2col: a GEMM loops over the taps
  of the input tile in INP), with the requantization epilogue (and a fused residual ``qadd``) on the vector unit;
- ``DwJob``: depthwise convolution on the vector unit (a multiply-accumulate per tap over a widened input tile),
  when its cost beats the block-diagonal GEMM;
- ``PoolJob``: max and average pooling on the vector unit over an input tile widened into ACC;
- ``EltJob``: elementwise ``qadd``, ``qmul``, ``rescale``, ``max``, ``min`` over flat tiles;
- ``CopyJob``: bytes from one DRAM buffer to another through INP.

Scratchpad buffers are placed by ``glow_core.tiling.place`` (the activation allocator): every buffer whose
content changes during the kernel has two slots (double buffering), used alternately by content index.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from glow_core.ops.primitives.quantized import qadd_multipliers, qadd_shift
from glow_core.ops.primitives.quantized import fixed_point_multiplier
from glow_core.tiling import TileBuffer, Tiling, candidate_sizes, plan

from .config import NpuConfig
from .isa import Insn
from .steps import Step

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
RANGES = {"i8": (-128, 127), "u8": (0, 255), "i32": (I32_MIN, I32_MAX)}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def memories(cfg: NpuConfig) -> dict:
    return {"INP": cfg.input_spm_bytes, "WGT": cfg.weight_spm_bytes, "ACC": cfg.acc_spm_bytes}


def dma_cycles(cfg: NpuConfig, nbytes: int) -> int:
    return cfg.dma_latency_cycles + cdiv(nbytes, cfg.dma_bytes_per_cycle) if nbytes else 0


def tiles(extent: int, size: int):
    """(start, length) of each tile of ``size`` over ``extent``."""
    return [(s, min(size, extent - s)) for s in range(0, extent, size)]


def vec(cfg, op, n, dst, dstr, src, sstr, src2=0, src2_mode="imm", tstr=(0, 0), imm2=0) -> Insn:
    return Insn("VEC", alu=op, src2_mode=src2_mode, n2=n[0], n1=n[1], n0=n[2], dst=dst, ds2=dstr[0], ds1=dstr[1],
                src=src, ss2=sstr[0], ss1=sstr[1], src2=src2, ts2=tstr[0], ts1=tstr[1], imm2=imm2)


def req(n, src, sstr, dst, dstr, dt, in_zp=0, lshift=0, scale=None, table=0, out_zp=0, lo=None, hi=None) -> Insn:
    """REQ: ``scale`` None (narrow only), (m, shift) (scalar) or "table" (per column at ``table``)."""
    rlo, rhi = RANGES[dt]
    fields = dict(dst_spm="ACC" if dt == "i32" else "INP", dt=dt, n2=n[0], n1=n[1], n0=n[2], src=src, ss2=sstr[0],
                  ss1=sstr[1], dst=dst, ds2=dstr[0], ds1=dstr[1], in_zp=in_zp, lshift=lshift, out_zp=out_zp,
                  lo=rlo if lo is None else max(rlo, lo), hi=rhi if hi is None else min(rhi, hi))
    if scale == "table":
        fields.update(scale_mode="colvec", table=table)
    elif scale is not None:
        fields.update(scale_mode="scalar", m=scale[0], shift=scale[1])
    return Insn("REQ", **fields)


def tile_loads(spm, dt, sram, x_addr, zs, H, W, x_plane, x_row, x_pix, r0, ih, q0, iw, c0, tc_, strides, pad):
    """The LOADs of an input tile [planes][ih][iw][tc_] (scratchpad strides ``strides`` = (plane, row, pixel)):
    plane p holds input depth ``zs[p]`` (None: outside the input, all padding), rows r0.. and columns q0.. of it
    with everything outside the input set to ``pad``."""
    a_lo, a_hi = max(r0, 0), min(r0 + ih, H)
    b_lo, b_hi = max(q0, 0), min(q0 + iw, W)
    nr, nc = max(a_hi - a_lo, 0), max(b_hi - b_lo, 0)
    out = []
    for p, z in enumerate(zs):
        n2, n1 = (nr, nc) if nr and nc and z is not None else (0, 0)
        p2 = min(max(-r0, 0), ih) if n2 else ih
        p1 = min(max(-q0, 0), iw) if n1 else iw
        out.append(Insn("LOAD", spm=spm, dt=dt, sram=sram + p * strides[0] * (4 if spm == "ACC" else 1),
                        dram=x_addr + z * x_plane + a_lo * x_row + b_lo * x_pix + c0 if n2 else 0,
                        n2=n2, n1=n1, n0=tc_, ds2=x_row, ds1=x_pix, ss2=strides[1], ss1=strides[2],
                        pad2_lo=p2, pad2_hi=ih - p2 - n2, pad1_lo=p1, pad1_hi=iw - p1 - n1, pad_value=pad))
    return out


def planes(od, sd, pf, kd, dd, D):
    """The input depths output depth ``od`` reads (None where the window is in the padding)."""
    return [z if 0 <= z < D else None for z in (od * sd - pf + a * dd for a in range(kd))]


# -- convolution and matrix product --------------------------------------------------------------------------
@dataclass(kw_only=True)
class Window:
    """The geometry every windowed job shares: ``images`` images of H x W (x D) pixels, an OH x OW (x OD) output,
    a kh x kw (x kd) window with strides ``sh``/``sw`` (``sd``), dilations ``dh``/``dw`` (``dd``) and leading
    padding ``pt``/``pl`` (``pf``). ``x_addr[img]`` / ``y_addr[img]`` are the DRAM addresses of pixel (0, 0) of
    image img, rows ``x_row`` / ``y_row`` elements apart (planes ``x_plane`` / ``y_plane``), of types ``xdt`` /
    ``ydt``; ``out_zp`` is the output zero point."""

    name: str
    images: int
    H: int
    W: int
    OH: int
    OW: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    x_addr: list
    x_row: int
    xdt: str
    y_addr: list
    y_row: int
    ydt: str
    out_zp: int = 0
    cfg: NpuConfig = field(default_factory=NpuConfig)
    D: int = 1
    OD: int = 1
    kd: int = 1
    sd: int = 1
    dd: int = 1
    pf: int = 0
    x_plane: int = 0
    y_plane: int = 0

    def in_extent(self, toh, tow):
        return (toh - 1) * self.sh + (self.kh - 1) * self.dh + 1, (tow - 1) * self.sw + (self.kw - 1) * self.dw + 1


@dataclass(kw_only=True)
class ConvJob(Window):
    """A convolution (or matrix product: kh = kw = 1, W = 1, one "pixel" per row) on one group block, over
    ``images`` images, every tensor channels-last in DRAM.

    x: ``x_addr[img]`` is the DRAM address of pixel (0, 0), channel ``c_base`` of image img; a row is ``x_row``
    elements, a pixel ``x_pix``; ``K`` channels per pixel are reduced (the group block's). w: ``w_addr[img]`` is
    [kh][kw][K][N] 8-bit, row stride ``w_row`` (N when packed), ``w_zp`` the DRAM address of N int32 zero points.
    Per output channel: ``bias`` (N int32 or None) and ``table`` ((m, shift) int32 pairs; None for an int32 result).
    y: ``y_addr[img]`` of output pixel (0, 0), channel ``f_base``; rows ``y_row``, pixels ``y_pix``. A 3-D
    convolution adds depth (``D``, ``OD``, ``kd``, ``sd``, ``dd``, ``pf``; planes ``x_plane`` / ``y_plane``
    elements apart): each output plane sums ``kd`` input planes, as one more loop of taps."""

    K: int
    N: int
    x_pix: int
    xzp: int
    w_addr: list
    w_row: int
    wdt: str
    w_zp: int
    bias: "int | None"
    table: "int | None"
    y_pix: int
    lo: "int | None" = None
    hi: "int | None" = None
    macs: int = 0
    #: fused residual qadd: dict(addr=[...], row=, pix=, dt=, conv_is_a=bool, a_zp, b_zp, ma, mb, mo, L, out_zp,
    #: lo, hi, ydt) or None
    residual: "dict | None" = None

    # taps packed into the reduction when a row of kw taps is contiguous in the input tile
    @property
    def packed(self) -> bool:
        return self.dw == 1

    @property
    def loops(self) -> dict:
        return {"oh": self.OH, "ow": self.OW, "f": self.N, "c": self.K}

    @property
    def quanta(self) -> dict:
        return {"f": min(self.cfg.mac_cols, self.N), "c": min(self.cfg.mac_rows, self.K)}

    def buffers(self, t) -> list:
        ih, iw = self.in_extent(t["oh"], t["ow"])
        pix = t["oh"] * t["ow"] * t["f"]
        i32out = self.ydt == "i32"
        bufs = [TileBuffer("in", "INP", self.kd * ih * iw * t["c"]),
                TileBuffer("w", "WGT", self.kd * self.kh * self.kw * t["c"] * t["f"]),
                TileBuffer("acc", "ACC", 4 * pix, double=i32out),
                TileBuffer("par", "ACC", 16 * t["f"])]
        if not i32out:
            bufs.append(TileBuffer("out", "INP", pix))
        if self.residual is not None:
            bufs.append(TileBuffer("res", "ACC", 4 * pix))
        return bufs

    def gemm_cycles(self, toh, tow, tc, tf) -> int:
        cfg = self.cfg
        if self.packed:
            sl = self.kd * self.kh * cdiv(self.kw * tc, cfg.mac_rows)
        else:
            sl = self.kd * self.kh * self.kw * cdiv(tc, cfg.mac_rows)
        return toh * tow * sl * cdiv(tf, cfg.mac_cols) + cfg.mac_rows + cfg.mac_cols

    def epilogue_ops(self) -> int:
        if self.ydt == "i32":
            return 0
        return 1 if self.residual is None else 5

    def cost(self, t, order) -> float:
        """Cycles: the busiest of the load engine, the store engine, the shared DRAM port and the compute engine,
        plus the first step's loads and the last step's stores (the pipeline's fill and drain)."""
        cfg = self.cfg
        toh, tow, tf, tc = t["oh"], t["ow"], t["f"], t["c"]
        n_sp = self.images * self.OD * cdiv(self.OH, toh) * cdiv(self.OW, tow)
        n_f, n_c = cdiv(self.N, tf), cdiv(self.K, tc)
        ih, iw = self.in_extent(toh, tow)
        in_b, w_b = self.kd * ih * iw * tc, self.kd * self.kh * self.kw * tc * tf
        pix = toh * tow * tf
        ws = order[0] == "f"
        steps = n_sp * n_f * n_c
        if ws:
            in_loads = 1 if n_sp == 1 and n_c == 1 else steps
            w_loads = n_f if n_c == 1 else steps
            par_loads = n_f
        else:
            in_loads = n_sp if n_c == 1 else steps
            w_loads = 1 if n_c == 1 and n_f == 1 else steps
            par_loads = 1 if n_f == 1 else n_sp * n_f
        w_dmas = 1
        out_b = pix * (4 if self.ydt == "i32" else 1)
        res_b = pix if self.residual is not None else 0
        load_bytes = in_loads * in_b + w_loads * w_b + par_loads * 16 * tf + n_sp * n_f * res_b
        n_load = in_loads * self.kd + w_loads * w_dmas + par_loads * 3 + (n_sp * n_f if res_b else 0)
        load_time = n_load * cfg.dma_latency_cycles + cdiv(load_bytes, cfg.dma_bytes_per_cycle)
        store_bytes = n_sp * n_f * out_b
        store_time = n_sp * n_f * cfg.dma_latency_cycles + cdiv(store_bytes, cfg.dma_bytes_per_cycle)
        port = cdiv(load_bytes + store_bytes, cfg.dma_bytes_per_cycle)
        comp = steps * self.gemm_cycles(toh, tow, tc, tf) + n_sp * n_f * self.epilogue_ops() * toh * tow * cdiv(
            tf, cfg.vector_lanes)
        ramp = dma_cycles(cfg, in_b + w_b) + dma_cycles(cfg, out_b)
        return max(load_time, store_time, port, comp) + ramp

    def plan(self) -> Tiling:
        return plan(self.loops, memories(self.cfg), self.buffers, self.cost, orders=[("f", "sp", "c"), ("sp", "f", "c")],
                    quanta=self.quanta, sizes={"oh": candidate_sizes(self.OH, 1, 12), "ow": candidate_sizes(self.OW, 1, 6)}).best

    def emit(self, t: Tiling, stream, layer: str, count: "dict | None" = None):
        """The steps of this job; ``count`` (content counters of each double-buffered buffer) continues across
        the jobs of one layer that share ``t``, so that their slots keep alternating."""
        cfg = self.cfg
        toh, tow, tf, tc = (t.tile[k] for k in ("oh", "ow", "f", "c"))
        off = t.offsets
        ih_full, iw_full = self.in_extent(toh, tow)
        sp = [((img, od), oh, ow) for img in range(self.images) for od in range(self.OD) for oh in tiles(self.OH, toh)
              for ow in tiles(self.OW, tow)]
        ft, ct = tiles(self.N, tf), tiles(self.K, tc)
        if t.order[0] == "f":
            seq = [(s, f, c) for f in ft for s in sp for c in ct]
        else:
            seq = [(s, f, c) for s in sp for f in ft for c in ct]
        keys = {"in": None, "w": None, "par": None}
        if count is None:
            count = {}
        for k in ("in", "w", "par", "tile", "res"):
            count.setdefault(k, -1)
        i32out = self.ydt == "i32"
        plane = ih_full * iw_full * tc
        for ((img, od), (oh0, toh_), (ow0, tow_)), (f0, tf_), (c0, tc_) in seq:
            step = Step()
            last_c = c0 + tc_ == self.K
            first_c = c0 == 0
            # input tile: the planes, rows and columns of the input this output tile reads, padded with the zero point
            r0 = oh0 * self.sh - self.pt
            ih = (toh_ - 1) * self.sh + (self.kh - 1) * self.dh + 1
            q0 = ow0 * self.sw - self.pl
            iw = (tow_ - 1) * self.sw + (self.kw - 1) * self.dw + 1
            key = (img, od, oh0, ow0, c0)
            if keys["in"] != key:
                keys["in"] = key
                count["in"] += 1
                step.loads += tile_loads("INP", self.xdt, off[("in", count["in"] % 2)], self.x_addr[img],
                                         planes(od, self.sd, self.pf, self.kd, self.dd, self.D), self.H, self.W,
                                         self.x_plane, self.x_row, self.x_pix, r0, ih, q0, iw, c0, tc_,
                                         (plane, iw_full * tc, tc), self.xzp)
            wkey = (img if len(set(self.w_addr)) > 1 else 0, f0, c0)
            if keys["w"] != wkey:
                keys["w"] = wkey
                count["w"] += 1
                wslot = off[("w", count["w"] % 2)]
                base = self.w_addr[img]
                # [kh][kw][c-block][f-block]: kernel rows and columns are one dimension (stride K * w_row)
                step.loads.append(Insn(
                    "LOAD", spm="WGT", dt=self.wdt, sram=wslot, dram=base + c0 * self.w_row + f0,
                    n2=self.kd * self.kh * self.kw, n1=tc_, n0=tf_, ds2=self.K * self.w_row, ds1=self.w_row, ss2=tc_ * tf_,
                    ss1=tf_))
            if keys["par"] != f0:
                keys["par"] = f0
                count["par"] += 1
                pslot = off[("par", count["par"] % 2)]
                for k, addr in enumerate((self.bias, self.w_zp)):
                    if addr is not None:
                        step.loads.append(Insn("LOAD", spm="ACC", dt="i32", sram=pslot + 4 * k * tf,
                                               dram=addr + 4 * f0, n2=1, n1=1, n0=tf_))
                if self.table is not None:
                    step.loads.append(Insn("LOAD", spm="ACC", dt="i32", sram=pslot + 8 * tf,
                                           dram=self.table + 8 * f0, n2=1, n1=1, n0=2 * tf_))
            pslot = off[("par", count["par"] % 2)]
            if first_c:
                count["tile"] += 1
            acc = off[("acc", count["tile"] % 2 if i32out else 0)]
            cs = (tow * tf, tf)
            inp = off[("in", count["in"] % 2)]
            a_str = (self.sh * iw_full * tc, self.sw * tc)
            first_mode = "bias" if self.bias is not None else "overwrite"
            common = dict(adt=self.xdt, bdt=self.wdt, bzp_vec=1, azp=self.xzp, m2=toh_, m1=tow_, n=tf_, as2=a_str[0],
                          as1=a_str[1], c=acc, cs2=cs[0], cs1=cs[1], bias=pslot, bzp_addr=pslot + 4 * tf)
            wb = off[("w", count["w"] % 2)]
            if self.packed and (tc_ == tc or self.kw == 1):
                # a row of kw taps is kw * tc contiguous bytes of the tile: one reduction; planes and rows are taps
                step.computes.append(Insn("GEMM", mode=first_mode if first_c else "accumulate", a=inp, b=wb,
                                          t2=self.kd, t1=self.kh, k=self.kw * tc_, at2=plane, at1=self.dh * iw_full * tc,
                                          **common))
            else:
                for a in range(self.kd):  # one GEMM per input plane, its taps the kernel's rows and columns
                    step.computes.append(Insn(
                        "GEMM", mode=first_mode if first_c and a == 0 else "accumulate", a=inp + a * plane,
                        b=wb + a * self.kh * self.kw * tc_ * tf_, t2=self.kh, t1=self.kw, k=tc_,
                        at2=self.dh * iw_full * tc, at1=self.dw * tc, **common))
            if last_c:
                n = (toh_, tow_, tf_)
                dram = self.y_addr[img] + od * self.y_plane + oh0 * self.y_row + ow0 * self.y_pix + f0
                if i32out:
                    step.stores.append(Insn("STORE", spm="ACC", dt="i32", sram=acc, dram=self.y_addr[img] +
                                            4 * (od * self.y_plane + oh0 * self.y_row + ow0 * self.y_pix + f0),
                                            n2=n[0], n1=n[1], n0=n[2], ds2=self.y_row, ds1=self.y_pix,
                                            ss2=cs[0], ss1=cs[1]))
                else:
                    outb = off[("out", count["tile"] % 2)]
                    os_ = (tow * tf, tf)
                    r = self.residual
                    if r is None:
                        step.computes.append(req(n, acc, cs, outb, os_, self.ydt, scale="table", table=pslot + 8 * tf,
                                                 out_zp=self.out_zp, lo=self.lo, hi=self.hi))
                    else:
                        count["res"] += 1
                        res = off[("res", count["res"] % 2)]
                        step.loads.append(Insn(
                            "LOAD", spm="ACC", dt=r["dt"], sram=res, dram=r["addr"][img] + od * self.y_plane +
                            oh0 * r["row"] + ow0 * r["pix"] + f0, n2=n[0], n1=n[1], n0=n[2], ds2=r["row"], ds1=r["pix"],
                            ss2=cs[0], ss1=cs[1]))
                        # the conv's own result (its type: conv_dt, out_zp, clamp), kept in ACC as int32
                        lo, hi = RANGES[r["conv_dt"]]
                        lo = lo if self.lo is None else max(lo, self.lo)
                        hi = hi if self.hi is None else min(hi, self.hi)
                        step.computes.append(req(n, acc, cs, acc, cs, "i32", scale="table", table=pslot + 8 * tf,
                                                 out_zp=self.out_zp, lo=lo, hi=hi))
                        ya, yb = (acc, res) if r["conv_is_a"] else (res, acc)
                        step.computes.append(req(n, ya, cs, ya, cs, "i32", in_zp=r["a_zp"], lshift=r["L"],
                                                 scale=r["ma"]))
                        step.computes.append(req(n, yb, cs, yb, cs, "i32", in_zp=r["b_zp"], lshift=r["L"],
                                                 scale=r["mb"]))
                        step.computes.append(vec(cfg, "add", n, acc, cs, acc, cs, src2=res, src2_mode="tile",
                                                 tstr=cs))
                        step.computes.append(req(n, acc, cs, outb, os_, r["ydt"], scale=r["mo"], out_zp=r["out_zp"],
                                                 lo=r["lo"], hi=r["hi"]))
                        dram = r["y_addr"][img] + od * self.y_plane + oh0 * self.y_row + ow0 * self.y_pix + f0
                    step.stores.append(Insn("STORE", spm="INP", dt=self.ydt if r is None else r["ydt"], sram=outb,
                                            dram=dram, n2=n[0], n1=n[1], n0=n[2], ds2=self.y_row, ds1=self.y_pix,
                                            ss2=os_[0], ss1=os_[1]))
            stream.add(step, layer)


# -- depthwise convolution on the vector unit ------------------------------------------------------------------
@dataclass(kw_only=True)
class DwJob(Window):
    """A depthwise convolution (one filter per channel: group = C = F) on the vector unit, over ``images``
    channels-last images: each tap is one VEC multiply-accumulate of the input tile (widened to int32 in ACC,
    padded with the input zero point) by a per-channel weight vector, so the vector unit does ``vector_lanes``
    useful MACs per cycle where the MAC array, given the block-diagonal GEMM of merged groups, does ``mac_cols``.

    In DRAM: ``w`` is [kd * kh * kw][C] int32 weights minus their zero points, ``bias`` [C] int32 the bias minus
    x_offset times the sum of the channel's weights (the padding, loaded as x_offset, then adds exactly what the
    zero point takes away), ``table`` [C] (m, shift) pairs; x and y as in ``ConvJob`` (``x_addr`` / ``y_addr`` per
    image, rows ``x_row`` / ``y_row``, pixels of C elements)."""

    C: int
    xzp: int
    w: int
    bias: int
    table: int
    lo: "int | None" = None
    hi: "int | None" = None
    macs: int = 0

    @property
    def taps(self) -> int:
        return self.kd * self.kh * self.kw

    @property
    def loops(self) -> dict:
        return {"oh": self.OH, "ow": self.OW, "c": self.C}

    def buffers(self, t) -> list:
        ih, iw = self.in_extent(t["oh"], t["ow"])
        pix = t["oh"] * t["ow"] * t["c"]
        return [TileBuffer("in", "ACC", 4 * self.kd * ih * iw * t["c"]), TileBuffer("acc", "ACC", 4 * pix, double=False),
                TileBuffer("par", "ACC", 4 * (self.taps + 3) * t["c"]), TileBuffer("out", "INP", pix)]

    def cost(self, t, order) -> float:
        """Cycles: the busiest of the load engine, the store engine, the DRAM port and the vector unit (a VEC per
        tap, the bias, the REQ, each a row of up to vector_lanes channels per output pixel), plus fill and drain."""
        cfg = self.cfg
        toh, tow, tc = t["oh"], t["ow"], t["c"]
        n_sp = self.images * self.OD * cdiv(self.OH, toh) * cdiv(self.OW, tow)
        n_c = cdiv(self.C, tc)
        steps = n_sp * n_c
        ih, iw = self.in_extent(toh, tow)
        in_b = self.kd * ih * iw * tc
        par_b = 4 * (self.taps + 3) * tc
        par_loads = n_c if order[0] == "c" or n_c == 1 else steps
        load_bytes = steps * in_b + par_loads * par_b
        load = (steps * self.kd + 3 * par_loads) * cfg.dma_latency_cycles + cdiv(load_bytes, cfg.dma_bytes_per_cycle)
        out_b = toh * tow * tc
        store = steps * cfg.dma_latency_cycles + cdiv(steps * out_b, cfg.dma_bytes_per_cycle)
        port = cdiv(load_bytes + steps * out_b, cfg.dma_bytes_per_cycle)
        comp = steps * (self.taps + 2) * toh * tow * cdiv(tc, cfg.vector_lanes)
        return max(load, store, port, comp) + dma_cycles(cfg, in_b + par_b) + dma_cycles(cfg, out_b)

    def plan(self) -> Tiling:
        return plan(self.loops, memories(self.cfg), self.buffers, self.cost, orders=[("c", "sp"), ("sp", "c")],
                    quanta={"c": min(self.C, self.cfg.vector_lanes)},
                    sizes={"oh": candidate_sizes(self.OH, 1, 12), "ow": candidate_sizes(self.OW, 1, 6)}).best

    def emit(self, t: Tiling, stream, layer: str):
        cfg = self.cfg
        toh, tow, tc = t.tile["oh"], t.tile["ow"], t.tile["c"]
        off = t.offsets
        ihf, iwf = self.in_extent(toh, tow)
        plane = ihf * iwf * tc
        sp = [(img, od, oh, ow) for img in range(self.images) for od in range(self.OD) for oh in tiles(self.OH, toh)
              for ow in tiles(self.OW, tow)]
        ct = tiles(self.C, tc)
        seq = [(s, c) for c in ct for s in sp] if t.order[0] == "c" else [(s, c) for s in sp for c in ct]
        par_key, n_par = None, -1
        istr, astr = (iwf * tc, tc), (tow * tc, tc)
        vstr = (self.sh * iwf * tc, self.sw * tc)
        for k, ((img, od, (oh0, toh_), (ow0, tow_)), (c0, tc_)) in enumerate(seq):
            step = Step()
            if par_key != c0:  # this channel block's weights, bias and (m, shift) table
                par_key, n_par = c0, n_par + 1
                par = off[("par", n_par % 2)]
                step.loads += [
                    Insn("LOAD", spm="ACC", dt="i32", sram=par, dram=self.w + 4 * c0, n2=1, n1=self.taps, n0=tc_,
                         ds1=self.C, ss1=tc),
                    Insn("LOAD", spm="ACC", dt="i32", sram=par + 4 * self.taps * tc, dram=self.bias + 4 * c0, n2=1,
                         n1=1, n0=tc_),
                    Insn("LOAD", spm="ACC", dt="i32", sram=par + 4 * (self.taps + 1) * tc, dram=self.table + 8 * c0,
                         n2=1, n1=1, n0=2 * tc_)]
            par = off[("par", n_par % 2)]
            inb = off[("in", k % 2)]
            r0, q0 = oh0 * self.sh - self.pt, ow0 * self.sw - self.pl
            ih = (toh_ - 1) * self.sh + (self.kh - 1) * self.dh + 1
            iw = (tow_ - 1) * self.sw + (self.kw - 1) * self.dw + 1
            step.loads += tile_loads("ACC", self.xdt, inb, self.x_addr[img],
                                     planes(od, self.sd, self.pf, self.kd, self.dd, self.D), self.H, self.W,
                                     self.x_plane, self.x_row, self.C, r0, ih, q0, iw, c0, tc_,
                                     (plane, istr[0], istr[1]), self.xzp)
            acc, outb = off[("acc", 0)], off[("out", k % 2)]
            n = (toh_, tow_, tc_)
            tap = 0
            for a in range(self.kd):
                for i in range(self.kh):
                    for j in range(self.kw):
                        src = inb + 4 * (a * plane + i * self.dh * iwf * tc + j * self.dw * tc)
                        step.computes.append(vec(cfg, "mul" if tap == 0 else "mac", n, acc, astr, src, vstr,
                                                 src2=par + 4 * tap * tc, src2_mode="colvec"))
                        tap += 1
            step.computes.append(vec(cfg, "add", n, acc, astr, acc, astr, src2=par + 4 * self.taps * tc,
                                     src2_mode="colvec"))
            step.computes.append(req(n, acc, astr, outb, astr, self.ydt, scale="table",
                                     table=par + 4 * (self.taps + 1) * tc, out_zp=self.out_zp, lo=self.lo, hi=self.hi))
            step.stores.append(Insn("STORE", spm="INP", dt=self.ydt, sram=outb,
                                    dram=self.y_addr[img] + od * self.y_plane + oh0 * self.y_row + ow0 * self.C + c0,
                                    n2=n[0], n1=n[1], n0=n[2], ds2=self.y_row, ds1=self.C, ss2=astr[0], ss1=astr[1]))
            stream.add(step, layer)


# -- pooling -------------------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class PoolJob(Window):
    """Max or average pooling over ``images`` channels-last images (C channels) on the vector unit. ``kind``:
    "max" or "avg"; for "avg", ``scales[(oh, ow)]`` gives the (m, shift) of that output's divisor and ``xzp`` the
    input zero point (subtracted first, so padding, loaded as the zero point, adds 0)."""

    C: int
    x_pix: int
    y_pix: int
    kind: str
    xzp: int = 0
    scales: "list | None" = None  # [OD][OH][OW] of (m, shift) (avg)

    @property
    def loops(self):
        return {"oh": self.OH, "ow": self.OW, "c": self.C}

    def buffers(self, t):
        ih, iw = self.in_extent(t["oh"], t["ow"])
        pix = t["oh"] * t["ow"] * t["c"]
        return [TileBuffer("in", "ACC", 4 * self.kd * ih * iw * t["c"]), TileBuffer("acc", "ACC", 4 * pix, double=False),
                TileBuffer("out", "INP", pix)]

    def cost(self, t, order):
        cfg = self.cfg
        toh, tow, tc = t["oh"], t["ow"], t["c"]
        n = self.images * self.OD * cdiv(self.OH, toh) * cdiv(self.OW, tow) * cdiv(self.C, tc)
        ih, iw = self.in_extent(toh, tow)
        ih *= self.kd
        pix = toh * tow * tc
        row = cdiv(tc, cfg.vector_lanes)
        comp = n * ((self.kd * self.kh * self.kw + 1) * toh * tow * row + (ih * iw * row if self.kind == "avg" else 0))
        lb, sb = n * ih * iw * tc, n * pix
        load = n * cfg.dma_latency_cycles + cdiv(lb, cfg.dma_bytes_per_cycle)
        store = n * cfg.dma_latency_cycles + cdiv(sb, cfg.dma_bytes_per_cycle)
        return max(load, store, cdiv(lb + sb, cfg.dma_bytes_per_cycle), comp) + dma_cycles(cfg, ih * iw * tc)

    def plan(self) -> Tiling:
        return plan(self.loops, memories(self.cfg), self.buffers, self.cost,
                    quanta={"c": min(self.C, self.cfg.vector_lanes)},
                    sizes={"oh": candidate_sizes(self.OH, 1, 12), "ow": candidate_sizes(self.OW, 1, 6)}).best

    def emit(self, t: Tiling, stream, layer: str):
        cfg = self.cfg
        toh, tow, tc = t.tile["oh"], t.tile["ow"], t.tile["c"]
        off = t.offsets
        ihf, iwf = self.in_extent(toh, tow)
        k = -1
        lo_v = RANGES[self.xdt][0]
        plane = ihf * iwf * tc
        grid = itertools.product(range(self.images), range(self.OD), tiles(self.OH, toh), tiles(self.OW, tow),
                                 tiles(self.C, tc))
        for img, od, (oh0, toh_), (ow0, tow_), (c0, tc_) in grid:
            k += 1
            step = Step()
            r0, q0 = oh0 * self.sh - self.pt, ow0 * self.sw - self.pl
            ih = (toh_ - 1) * self.sh + (self.kh - 1) * self.dh + 1
            iw = (tow_ - 1) * self.sw + (self.kw - 1) * self.dw + 1
            inb = off[("in", k % 2)]
            pad = lo_v if self.kind == "max" else self.xzp
            istr = (iwf * tc, tc)
            step.loads += tile_loads("ACC", self.xdt, inb, self.x_addr[img],
                                     planes(od, self.sd, self.pf, self.kd, self.dd, self.D), self.H,
                                     self.W, self.x_plane, self.x_row, self.x_pix, r0, ih, q0, iw, c0,
                                     tc_, (plane, istr[0], istr[1]), pad)
            acc, outb = off[("acc", 0)], off[("out", k % 2)]
            n = (toh_, tow_, tc_)
            astr = (tow * tc, tc)
            vstr = (self.sh * iwf * tc, self.sw * tc)
            if self.kind == "avg" and self.xzp:
                for a in range(self.kd):
                    step.computes.append(vec(cfg, "sub", (ih, iw, tc_), inb + 4 * a * plane, istr,
                                             inb + 4 * a * plane, istr, src2=self.xzp))
            op = "max" if self.kind == "max" else "add"
            first = True
            for a in range(self.kd):
                for i in range(self.kh):
                    for j in range(self.kw):
                        tap = inb + 4 * (a * plane + i * self.dh * iwf * tc + j * self.dw * tc)
                        if first:
                            step.computes.append(vec(cfg, "add", n, acc, astr, tap, vstr, src2=0))
                            first = False
                        else:
                            step.computes.append(vec(cfg, op, n, acc, astr, acc, astr, src2=tap,
                                                     src2_mode="tile", tstr=vstr))
            ostr = (tow * tc, tc)
            if self.kind == "max":
                step.computes.append(req(n, acc, astr, outb, ostr, self.ydt))
            else:
                for r in range(toh_):
                    run0 = 0
                    row = self.scales[od][oh0 + r]
                    for q in range(1, tow_ + 1):
                        if q == tow_ or row[ow0 + q] != row[ow0 + run0]:
                            step.computes.append(req(
                                (1, q - run0, tc_), acc + 4 * (r * astr[0] + run0 * tc), astr,
                                outb + r * ostr[0] + run0 * tc, ostr, self.ydt,
                                scale=row[ow0 + run0], out_zp=self.out_zp))
                            run0 = q
            step.stores.append(Insn("STORE", spm="INP", dt=self.ydt, sram=outb,
                                    dram=self.y_addr[img] + od * self.y_plane + oh0 * self.y_row +
                                    ow0 * self.y_pix + c0,
                                    n2=n[0], n1=n[1], n0=n[2], ds2=self.y_row, ds1=self.y_pix,
                                    ss2=ostr[0], ss1=ostr[1]))
            stream.add(step, layer)


# -- elementwise ---------------------------------------------------------------------------------------------
ROW = 256  # elements per scratchpad row of an elementwise tile


@dataclass
class EltJob:
    """An elementwise instruction over ``count`` elements (operands of one shape and layout, flat in DRAM):
    ``op`` "qadd", "qmul", "rescale", "max" or "min"; ``a`` / ``b`` DRAM addresses, dtypes ``adt`` / ``bdt``;
    ``p`` the parameters: zero points and (m, shift) pairs as the op needs them."""

    name: str
    op: str
    count: int
    a: int
    adt: str
    b: "int | None"
    bdt: "str | None"
    y: int
    ydt: str
    p: dict
    cfg: NpuConfig = field(default_factory=NpuConfig)

    @property
    def loops(self):
        return {"r": cdiv(self.count, ROW)}

    def buffers(self, t):
        e = t["r"] * ROW
        out = [TileBuffer("a", "ACC", 4 * e), TileBuffer("out", "INP", e)]
        if self.b is not None:
            out.append(TileBuffer("b", "ACC", 4 * e))
        return out

    def cost(self, t, order):
        cfg = self.cfg
        e = t["r"] * ROW
        n = cdiv(self.count, e)
        ops = {"qadd": 4, "qmul": 4, "rescale": 1, "max": 2, "min": 2}[self.op]
        lb = self.count * (2 if self.b is not None else 1)
        load = n * (2 if self.b is not None else 1) * cfg.dma_latency_cycles + cdiv(lb, cfg.dma_bytes_per_cycle)
        store = n * cfg.dma_latency_cycles + cdiv(self.count, cfg.dma_bytes_per_cycle)
        return max(load, store, cdiv(lb + self.count, cfg.dma_bytes_per_cycle),
                   cdiv(self.count, ROW) * cdiv(ROW, cfg.vector_lanes) * ops) + dma_cycles(cfg, e * 2)

    def plan(self) -> Tiling:
        return plan(self.loops, memories(self.cfg), self.buffers, self.cost).best

    def emit(self, t: Tiling, stream, layer: str):
        cfg = self.cfg
        off = t.offsets
        e_tile = t.tile["r"] * ROW
        p = self.p
        for k, (e0, ne) in enumerate(tiles(self.count, e_tile)):
            step = Step()
            rows, tail = divmod(ne, ROW)
            parts = ([(0, rows, ROW)] if rows else []) + ([(rows * ROW, 1, tail)] if tail else [])
            a, b, o = off[("a", k % 2)], off[("b", k % 2)] if self.b is not None else 0, off[("out", k % 2)]
            for s, nr, nn in parts:
                step.loads.append(Insn("LOAD", spm="ACC", dt=self.adt, sram=a + 4 * s, dram=self.a + e0 + s, n2=1,
                                       n1=nr, n0=nn, ds1=ROW, ss1=ROW))
                if self.b is not None:
                    step.loads.append(Insn("LOAD", spm="ACC", dt=self.bdt, sram=b + 4 * s, dram=self.b + e0 + s,
                                           n2=1, n1=nr, n0=nn, ds1=ROW, ss1=ROW))
                n, st = (1, nr, nn), (0, ROW)
                A, B, O = a + 4 * s, b + 4 * s, o + s
                if self.op == "qadd":
                    step.computes += [req(n, A, st, A, st, "i32", in_zp=p["a_zp"], lshift=p["L"], scale=p["ma"]),
                                      req(n, B, st, B, st, "i32", in_zp=p["b_zp"], lshift=p["L"], scale=p["mb"]),
                                      vec(cfg, "add", n, A, st, A, st, src2=B, src2_mode="tile", tstr=st),
                                      req(n, A, st, O, st, self.ydt, scale=p["mo"], out_zp=p["out_zp"], lo=p["lo"],
                                          hi=p["hi"])]
                elif self.op == "qmul":
                    step.computes += [vec(cfg, "sub", n, A, st, A, st, src2=p["a_zp"]),
                                      vec(cfg, "sub", n, B, st, B, st, src2=p["b_zp"]),
                                      vec(cfg, "mul", n, A, st, A, st, src2=B, src2_mode="tile", tstr=st),
                                      req(n, A, st, O, st, self.ydt, scale=p["m"], out_zp=p["out_zp"], lo=p["lo"],
                                          hi=p["hi"])]
                elif self.op == "rescale":
                    step.computes.append(req(n, A, st, O, st, self.ydt, in_zp=p["a_zp"], scale=p["m"],
                                             out_zp=p["out_zp"]))
                else:
                    step.computes += [vec(cfg, self.op, n, A, st, A, st, src2=B, src2_mode="tile", tstr=st),
                                      req(n, A, st, O, st, self.ydt)]
                step.stores.append(Insn("STORE", spm="INP", dt=self.ydt, sram=O, dram=self.y + e0 + s, n2=1, n1=nr,
                                        n0=nn, ds1=ROW, ss1=ROW))
            stream.add(step, layer)


@dataclass
class CopyJob:
    """``nbytes`` bytes from DRAM ``src`` to DRAM ``dst`` through INP (an IR copy)."""

    name: str
    nbytes: int
    src: int
    dst: int
    cfg: NpuConfig = field(default_factory=NpuConfig)

    @property
    def loops(self):
        return {"r": cdiv(self.nbytes, ROW)}

    def buffers(self, t):
        return [TileBuffer("buf", "INP", t["r"] * ROW)]

    def cost(self, t, order):
        n = cdiv(self.nbytes, t["r"] * ROW)
        cfg = self.cfg
        return n * cfg.dma_latency_cycles + cdiv(self.nbytes, cfg.dma_bytes_per_cycle)

    def plan(self) -> Tiling:
        return plan(self.loops, memories(self.cfg), self.buffers, self.cost).best

    def emit(self, t: Tiling, stream, layer: str):
        e_tile = t.tile["r"] * ROW
        for k, (e0, ne) in enumerate(tiles(self.nbytes, e_tile)):
            step = Step()
            buf = t.offsets[("buf", k % 2)]
            rows, tail = divmod(ne, ROW)
            for s, nr, nn in ([(0, rows, ROW)] if rows else []) + ([(rows * ROW, 1, tail)] if tail else []):
                step.loads.append(Insn("LOAD", spm="INP", dt="u8", sram=buf + s, dram=self.src + e0 + s, n2=1,
                                       n1=nr, n0=nn, ds1=ROW, ss1=ROW))
                step.stores.append(Insn("STORE", spm="INP", dt="u8", sram=buf + s, dram=self.dst + e0 + s, n2=1,
                                        n1=nr, n0=nn, ds1=ROW, ss1=ROW))
            stream.add(step, layer)


def qadd_params(a_scale, b_scale, out_scale, adt, bdt) -> dict:
    """Fixed-point qadd's left shift and the three (m, shift) pairs (glow_core's definition)."""
    L = qadd_shift(adt, bdt)
    ra, rb, ro = qadd_multipliers(a_scale, b_scale, out_scale, L)
    return {"L": L, "ma": fixed_point_multiplier(ra), "mb": fixed_point_multiplier(rb), "mo": fixed_point_multiplier(ro)}
