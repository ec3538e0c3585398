"""The instruction emitter: how each IR instruction the device claims becomes NPU instructions.

``JOBS`` maps an IR op to its *job builder*, ``builder(fn, ins, fused, layer) -> [job, ...]``: ``fn`` is the
compiled function (``fn.addr(buffer)``: a buffer's DRAM address; ``fn.pack(array)``: append constants the compiler
made, such as weights laid out for the array, and get their address; ``fn.cfg``: the config), ``ins`` the IR
instruction (``ins.ins``, ``ins.outs``: its buffers; ``ins.attrs``: the primitive's attributes, documented in
vendor_guide/primitives.md), ``fused`` the qadd of a conv's residual group (else None) and ``layer`` the record
of the statistics (set ``layer.macs``).

A *job* has four parts: ``loops`` (the loop nest to tile), ``buffers(tile)`` (what one tile keeps in which
scratchpad), ``cost(tile, order)`` (the analytical cycles the tiling is chosen by) and ``emit(tiling, stream,
layer_name)`` (one ``glow_npu.steps.Step`` of loads, computes and stores per tile; the stream adds the tokens of a
double-buffered pipeline). tiling.py turns the first three into a tiling; the ISA is vendor_guide/npu_isa.md.

Day one: every op runs the reference NPU's job builder (``NpuFunction.JOBS``), except ``max`` and ``min``,
which run ``MinMaxJob`` below: a whole job written out, to copy. Replace the builders one op at a time and check
each with ``glowc conformance --backend {{ cookiecutter.backend_name }} --case 'primitives/OP/*'``. Deleting an
op from JOBS stops the device claiming it (it then runs on the fallback).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from glow_core.tiling import TileBuffer
from glow_npu import NpuConfig
from glow_npu.backend import DT, NpuFunction
from glow_npu.isa import Insn
from glow_npu.kernels import cdiv, dma_cycles, req, tiles, vec
from glow_npu.steps import Step

ROW = 256  # elements per scratchpad row of a tile (a DMA row, a vector-unit row)


@dataclass
class MinMaxJob:
    """``op`` ("max" or "min") of two 8-bit tensors at DRAM ``a`` and ``b`` (``count`` elements each, one shape,
    one dtype ``dt``, flat) into ``y``: both operands widened to int32 in ACC, the vector unit's max/min, narrowed
    back to 8 bits by REQ into INP, stored."""

    name: str
    op: str
    count: int
    a: int
    b: int
    y: int
    dt: str
    cfg: NpuConfig = field(default_factory=NpuConfig)

    @property
    def loops(self) -> dict:
        """The loop nest: rows of ROW elements (a tile is ``r`` rows)."""
        return {"r": cdiv(self.count, ROW)}

    def buffers(self, t) -> list:
        """A tile of ``t["r"]`` rows: both operands as int32 in ACC, the 8-bit result in INP; each double-buffered
        (two slots), so the loads of tile i+1 run while tile i is computed."""
        e = t["r"] * ROW
        return [TileBuffer("a", "ACC", 4 * e), TileBuffer("b", "ACC", 4 * e), TileBuffer("y", "INP", e)]

    def cost(self, t, order) -> float:
        """Cycles of a tiling: the busiest of the load engine, the store engine, the shared DRAM port and the
        vector unit (the pipeline overlaps them), plus the first tile's loads and the last one's store."""
        cfg = self.cfg
        e = t["r"] * ROW
        steps = cdiv(self.count, e)
        load = 2 * steps * cfg.dma_latency_cycles + cdiv(2 * self.count, cfg.dma_bytes_per_cycle)
        store = steps * cfg.dma_latency_cycles + cdiv(self.count, cfg.dma_bytes_per_cycle)
        port = cdiv(3 * self.count, cfg.dma_bytes_per_cycle)
        compute = 2 * cdiv(self.count, ROW) * cdiv(ROW, cfg.vector_lanes)  # a VEC and a REQ per row
        return max(load, store, port, compute) + dma_cycles(cfg, 2 * e) + dma_cycles(cfg, e)

    def emit(self, t, stream, layer: str):
        """One step per tile: LOAD a and b (widened to int32), VEC max/min, REQ (narrow), STORE."""
        cfg, off = self.cfg, t.offsets
        for k, (e0, ne) in enumerate(tiles(self.count, t.tile["r"] * ROW)):
            a, b, y = (off[(buf, k % 2)] for buf in ("a", "b", "y"))  # slot k % 2 of each double buffer
            step = Step()
            rows, tail = divmod(ne, ROW)
            for s, nr, nn in ([(0, rows, ROW)] if rows else []) + ([(rows * ROW, 1, tail)] if tail else []):
                n, st = (1, nr, nn), (0, ROW)
                for src, dst in ((self.a, a), (self.b, b)):
                    step.loads.append(Insn("LOAD", spm="ACC", dt=self.dt, sram=dst + 4 * s, dram=src + e0 + s,
                                           n2=1, n1=nr, n0=nn, ds1=ROW, ss1=ROW))
                step.computes.append(vec(cfg, self.op, n, a + 4 * s, st, a + 4 * s, st, src2=b + 4 * s,
                                         src2_mode="tile", tstr=st))
                step.computes.append(req(n, a + 4 * s, st, y + s, st, self.dt))
                step.stores.append(Insn("STORE", spm="INP", dt=self.dt, sram=y + s, dram=self.y + e0 + s, n2=1,
                                        n1=nr, n0=nn, ds1=ROW, ss1=ROW))
            stream.add(step, layer)


def minmax_jobs(fn, ins, fused, layer) -> list:
    """``max`` / ``min`` of two 8-bit tensors of one shape (the partitioner only offers those: is_op_supported)."""
    (a, b), y = ins.ins, ins.outs[0]
    for x in (a, b):
        fn.device_const(x)  # a constant operand of rank >= 3 is stored channels-last, as the activations are
    return [MinMaxJob(ins.name, ins.op, y.type.numel, fn.addr(a), fn.addr(b), fn.addr(y), DT[y.type.dtype.name],
                      fn.cfg)]


#: IR op -> job builder. The reference NPU's for every op it runs, the jobs of this file for max and min.
JOBS = {**NpuFunction.JOBS, "max": minmax_jobs, "min": minmax_jobs}
