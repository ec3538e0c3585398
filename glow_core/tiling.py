"""Tiling utilities for scratchpad devices: choose tile sizes and a loop order for one instruction's loop nest,
and place each tile's buffers in the scratchpads, double-buffered. Target-independent: the device describes
itself through callbacks.

``plan(loops, memories, buffers, cost, orders=...)`` enumerates tile sizes for every loop (``candidate_sizes``:
the distinct sizes ceil(extent / n), optionally multiples of a quantum such as the MAC array's width), drops
the tilings whose buffers do not fit (``buffers(tile)`` lists them: memory, bytes, double-buffered or not), asks
``cost(tile, order)`` (the device's analytical model: cycles, bytes, anything to minimize) for each fitting
tiling and loop order, and returns a ``Plan``: the candidates best first and the best one placed (``place``).

``place(buffers, memories)`` gives every buffer (both slots of a double-buffered one) an offset in its memory
with ``glow_core.memory.allocate``, the activation planner's allocator: buffers live over ``[start, end]`` of
the kernel's phases (default: all of it) and buffers whose phases do not overlap may share bytes. A memory over
its capacity is a MemoryLimitError naming it.

Example: a GEMM C[M, N] += A[M, K] B[K, N] on a device with 64 KiB for A, B and C each:

    loops = {"m": 512, "n": 256, "k": 1024}
    bufs = lambda t: [TileBuffer("a", "inp", t["m"] * t["k"]), TileBuffer("b", "wgt", t["k"] * t["n"]),
                      TileBuffer("c", "acc", 4 * t["m"] * t["n"], double=False)]
    best = plan(loops, {"inp": 65536, "wgt": 65536, "acc": 65536}, bufs, my_cycles,
                orders=[("m", "n", "k"), ("n", "m", "k")], quanta={"n": 16, "k": 16}).best
    best.tile, best.order, best.offsets[("a", 1)]
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

from .errors import GlowError, MemoryLimitError
from .memory import Interval, align_up, allocate


@dataclass(frozen=True)
class TileBuffer:
    """One buffer of a tile: its name, the memory it lives in, its bytes, whether it is double-buffered (two
    slots: the engine fills one while the other is computed on) and the phases it lives in (inclusive)."""

    name: str
    memory: str
    nbytes: int
    double: bool = True
    start: int = 0
    end: int = 0

    @property
    def slots(self) -> int:
        return 2 if self.double else 1


@dataclass
class Tiling:
    """A tiling: tile size per loop, loop order (outermost first), its cost, its buffers and, once placed, each
    buffer slot's offset (``offsets[(name, slot)]``) and the bytes used per memory."""

    tile: dict
    order: tuple
    cost: float
    buffers: list
    offsets: dict = field(default_factory=dict)
    used: dict = field(default_factory=dict)

    def describe(self) -> str:
        t = " ".join(f"{k}={v}" for k, v in self.tile.items())
        u = " ".join(f"{m}={b}" for m, b in sorted(self.used.items()))
        return f"tile {t}; order {'>'.join(self.order)}; cost {self.cost:.0f}" + (f"; bytes {u}" if u else "")


@dataclass
class Plan:
    """What ``plan`` found: the candidates (best first, at most ``keep``), the best one placed, and how many
    tilings were tried and how many did not fit."""

    candidates: list
    best: Tiling
    tried: int
    over_capacity: int


def candidate_sizes(extent: int, quantum: int = 1, limit: int = 24) -> list[int]:
    """Tile sizes worth trying for a loop of ``extent`` iterations: the distinct ceil(extent / n) for n = 1, 2,
    ... (each leaves the fewest remainder iterations for its tile count), rounded up to a multiple of
    ``quantum`` (capped at the extent), at most ``limit`` of them, largest first; then, for memories too small
    for those, the smallest (or the quantum) halved down to 1 (the cost callback judges what a narrower tile
    loses)."""
    if extent <= 0:
        return [1]
    out: list[int] = []
    n = 1
    while len(out) < limit:
        t = -(-extent // n)
        if quantum > 1:
            t = min(extent, -(-t // quantum) * quantum)
        if t not in out:
            out.append(t)
        if t <= max(1, min(quantum, extent)):
            break
        n += 1 if n < 16 else max(1, n // 4)
    q = min(min(out), quantum) // 2 if quantum > 1 else min(out) // 2
    while q >= 1:
        if q not in out:
            out.append(q)
        q //= 2
    return out


def footprint(buffers, alignment: int = 64) -> dict:
    """Bytes per memory if every buffer slot were live at once (an upper bound of what ``place`` needs)."""
    out: dict = {}
    for b in buffers:
        out[b.memory] = out.get(b.memory, 0) + b.slots * align_up(max(b.nbytes, 0), alignment)
    return out


def place(buffers, memories: dict, alignment: int = 64) -> tuple[dict, dict]:
    """Offsets of every buffer slot, ``{(name, slot): offset}``, and the bytes used per memory, by
    ``glow_core.memory.allocate`` (slots of one buffer, and buffers whose phases overlap, never share bytes).
    MemoryLimitError when a memory's buffers do not fit its capacity; GlowError for an unknown memory."""
    offsets, used = {}, {}
    by_mem: dict = {}
    for b in buffers:
        if b.memory not in memories:
            raise GlowError(f"tile buffer '{b.name}' lives in memory {b.memory!r}, which is not one of "
                            f"{sorted(memories)}")
        for s in range(b.slots):
            by_mem.setdefault(b.memory, []).append(Interval((b.name, s), max(b.nbytes, 0), b.start, b.end))
    for mem, ivs in by_mem.items():
        a = allocate(ivs, alignment, capacity=memories[mem], region=f"scratchpad '{mem}'")
        offsets.update(a.offsets)
        used[mem] = a.peak
    return offsets, used


def plan(loops: dict, memories: dict, buffers: Callable, cost: Callable, orders=None, sizes: dict | None = None,
         quanta: dict | None = None, alignment: int = 64, keep: int = 8) -> Plan:
    """The tilings of the loop nest ``loops`` ({loop: extent}) that fit ``memories`` ({memory: capacity}),
    cheapest first by ``cost(tile, order)``; ``buffers(tile)`` lists a tile's TileBuffers; ``orders``: the loop
    orders to consider (default: the loops' order as given); ``sizes``: tile sizes per loop (default
    ``candidate_sizes`` with ``quanta``). MemoryLimitError naming the smallest need when nothing fits."""
    quanta = quanta or {}
    orders = [tuple(o) for o in (orders or [tuple(loops)])]
    names = list(loops)
    choice = [list((sizes or {}).get(k) or candidate_sizes(loops[k], quanta.get(k, 1))) for k in names]
    found: list[Tiling] = []
    tried = over = 0
    smallest = None
    for combo in itertools.product(*choice):
        tile = dict(zip(names, combo))
        bufs = buffers(tile)
        need = footprint(bufs, alignment)
        tried += 1
        if any(need.get(m, 0) > cap for m, cap in memories.items()):
            over += 1
            total = sum(need.values())
            if smallest is None or total < smallest[0]:
                smallest = (total, need)
            continue
        for order in orders:
            found.append(Tiling(tile, order, float(cost(tile, order)), bufs))
    if not found:
        need = smallest[1] if smallest else {}
        raise MemoryLimitError(f"no tiling of loops {loops} fits the scratchpads {memories}: the smallest tile "
                               f"needs {need} bytes (double-buffered)")
    found.sort(key=lambda t: (t.cost, -sum(t.tile.values())))
    for t in found:
        try:
            t.offsets, t.used = place(t.buffers, memories, alignment)
        except MemoryLimitError:
            continue
        return Plan(found[:keep], t, tried, over)
    raise MemoryLimitError(f"no tiling of loops {loops} could be placed in {memories}")
