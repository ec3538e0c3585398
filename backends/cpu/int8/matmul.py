"""Int8 matmul a [..., M, K] x w [..., K, N] with w constant: rows x column-vector register tiles.

The output row is contiguous, so vectors run along N: a packed vector holds 4 consecutive k of lanes columns
(vpdpbusd's signed operand) and a broadcast dword holds 4 consecutive k of one row of a (its unsigned operand:
the rows are copied into scratch as unsigned bytes, int8 + 128, zero-padded to a multiple of 4). The zero-point
algebra is the conv's (int8_conv): per-column corrections at compile time, per-row sums when a weight offset is
non-zero.
"""
from __future__ import annotations

import math

import numpy as np

from glow_core.backend import Unsupported

from ..templates import template
from .common import (Int8EngineError, Int8Kernel, QConstants, QTarget, Requant, WeightTerms, check_weighted,
                          host_qtarget, threads_for)
from .conv import _blocks, choose_tile


def plan_qmatmul(a_shape, w_shape, *, a_dtype: str, a_offset: int, w_dtype: str = "int8", w_offset=0,
                 multiplier=1.0, y: Requant, num_threads: int = 1, target: QTarget | None = None,
                 name: str = "gq_matmul", force: dict | None = None):
    """An Int8Kernel (kind "matmul") for a quantized `matmul` whose second operand is a constant, or
    Unsupported(reason). ``w_offset`` and ``multiplier`` are scalars or [N] (per output column)."""
    force = check_weighted("matmul", name, a_dtype, a_offset, w_dtype, y, force)
    target = target or host_qtarget()
    a_shape, w_shape = tuple(a_shape), tuple(w_shape)
    if len(a_shape) < 2 or len(w_shape) != len(a_shape) or a_shape[:-2] != w_shape[:-2] or a_shape[-1] != w_shape[-2]:
        raise Int8EngineError(f"int8 engine: matmul expects [..., M, K] x [..., K, N] with equal batch dims, got "
                              f"{a_shape} x {w_shape}")
    batch, m, k, n = math.prod(a_shape[:-2]), a_shape[-2], a_shape[-1], w_shape[-1]
    if 0 in (batch, m, k, n):
        return Unsupported(f"int8 engine: empty matmul {a_shape} x {w_shape}")
    terms = WeightTerms.of("matmul", a_dtype, a_offset, w_dtype, w_offset, multiplier, n)
    mult, flip, xo_u, xsum, wo_s = terms.mult, terms.flip, terms.xo_u, terms.xsum, terms.wo_s
    lanes = target.lanes
    kp = -(-k // 4) * 4
    nvec = -(-n // lanes)
    mr, nv = choose_tile(m, nvec, kp // 4, target)
    mr, nv = int(force.get("mr", mr)), int(force.get("nv", nv))
    if not (1 <= mr <= m and 1 <= nv <= nvec):
        raise Int8EngineError(f"int8 engine: forced tile {mr}x{nv} must fit 1..{m} rows x 1..{nvec} vectors")
    nrb, ncb = -(-m // mr), -(-nvec // nv)
    npad = ncb * nv * lanes
    variants = []
    for _, r in _blocks(m, mr):
        for _, v in _blocks(nvec, nv):
            cond_r = f"rb < {m // mr}" if r == mr else f"rb == {m // mr}"
            cond_c = f"cb < {nvec // nv}" if v == nv else f"cb == {nvec // nv}"
            variants.append((r, v, f"{cond_r} && {cond_c}"))
    ap_bytes = -(-m * kp // 64) * 64
    scratch = ap_bytes + (-(-m * 4 // 64) * 64 if xsum else 0)
    macs = batch * m * k * n
    nt = threads_for(macs, num_threads)
    requant = y.dtype != "int32"
    flo, fhi = y.float_bounds() if requant else ("0.0", "0.0")
    desc = (f"int8 matmul {a_dtype}x{w_dtype}->{y.dtype} {batch}x[{m}x{k}]x[{k}x{n}]: rows packed to {kp} bytes, "
            f"tile {mr} rows x {nv}x{lanes} columns, {'per-channel' if len(set(mult.tolist())) > 1 else 'per-tensor'}"
            f" requant{', row sums for weight offsets' if xsum else ''}, {nt} thread(s), {target.name}")
    src = template("qgemm.c.j2").render(
        name=name, describe=desc, lanes=lanes, batch=batch, m=m, k=k, n=n, kp=kp, npad=npad, flip=flip,
        xsum=xsum, ap_bytes=ap_bytes, scratch=scratch, variants=variants, mr_full=mr, nv_full=nv, nrb=nrb,
        ncb=ncb, items=ncb * nrb, requant=requant, flo=flo, fhi=fhi, yoff=y.offset, full_mask=(1 << lanes) - 1,
        a_ctype="int8_t" if a_dtype == "int8" else "uint8_t",
        y_ctype={"int8": "int8_t", "uint8": "uint8_t", "int32": "int32_t"}[y.dtype], parallel=nt > 1, nt=nt)

    def pack(weights, bias=None) -> QConstants:
        wt = terms.signed(weights, (batch, k, n), w_shape)
        corr = terms.bias(bias)[None, :] - xo_u * wt.sum(axis=1) + k * xo_u * wo_s[None, :]  # [batch, n]
        wp = np.zeros((batch, kp, npad), np.int64)
        wp[:, :k, :n] = wt
        # [batch, k/4, 4, column blocks, columns] -> [batch, column block, k/4, columns, 4]
        wp = wp.reshape(batch, kp // 4, 4, ncb, nv * lanes).transpose(0, 3, 1, 4, 2)
        pad = np.zeros(npad - n, np.int64)
        corr32 = np.concatenate([corr, np.zeros((batch, npad - n), np.int64)], axis=1).reshape(-1)
        corr32 = corr32.astype(np.uint32).view(np.int32)
        if xsum:
            corr32 = np.concatenate([corr32, np.concatenate([wo_s, pad]).astype(np.int32)])
        return QConstants(wp.reshape(-1).astype(np.int8), corr32,
                          np.concatenate([mult, np.zeros(npad - n, np.float32)]))

    return Int8Kernel(name, "matmul", src, scratch, desc, macs, pack)
