"""glow_core.tiling: the planner enumerates tilings, keeps those that fit, ranks them by the device's cost and
places the best one's buffers, double-buffered, with the activation allocator (checked here against brute force
and against an independent overlap check)."""
from __future__ import annotations

import itertools

import pytest

from glow_core.errors import MemoryLimitError
from glow_core.memory import Interval, check_no_overlap
from glow_core.tiling import TileBuffer, candidate_sizes, footprint, place, plan


def gemm_buffers(t):
    return [TileBuffer("a", "inp", t["m"] * t["k"]), TileBuffer("b", "wgt", t["k"] * t["n"]),
            TileBuffer("c", "acc", 4 * t["m"] * t["n"], double=False)]


def gemm_cost(loops):
    """DRAM bytes of a blocked GEMM: A re-read per n tile, B per m tile (outer loop m) or the other way."""
    def cost(t, order):
        mt, nt = -(-loops["m"] // t["m"]), -(-loops["n"] // t["n"])
        a, b = loops["m"] * loops["k"], loops["k"] * loops["n"]
        return a * (nt if order[0] == "n" or t["k"] < loops["k"] else 1) + b * (mt if order[0] == "m" else 1)
    return cost


def test_candidate_sizes():
    assert candidate_sizes(10) == [10, 5, 4, 3, 2, 1]
    sizes = candidate_sizes(100, quantum=16)
    assert sizes[:3] == [100, 64, 48]
    big = sizes[:sizes.index(16) + 1]
    assert all(s % 16 == 0 or s == 100 for s in big) and sizes[len(big):] == [8, 4, 2, 1]
    assert candidate_sizes(7, quantum=16) == [7, 3, 1]


def test_plan_is_the_cheapest_fitting_tiling():
    loops = {"m": 96, "n": 64, "k": 128}
    mem = {"inp": 8192, "wgt": 8192, "acc": 8192}
    cost = gemm_cost(loops)
    orders = [("m", "n", "k"), ("n", "m", "k")]
    p = plan(loops, mem, gemm_buffers, cost, orders=orders, quanta={"n": 16, "k": 16})
    # brute force over the same sizes
    best = None
    for m, n, k in itertools.product(candidate_sizes(96), candidate_sizes(64, 16), candidate_sizes(128, 16)):
        t = {"m": m, "n": n, "k": k}
        if any(v > mem[x] for x, v in footprint(gemm_buffers(t)).items()):
            continue
        for o in orders:
            c = cost(t, o)
            best = c if best is None else min(best, c)
    assert p.best.cost == best
    assert p.over_capacity > 0 and p.tried > p.over_capacity
    assert [c.cost for c in p.candidates] == sorted(c.cost for c in p.candidates)
    used = footprint(p.best.buffers)
    assert all(used[x] <= mem[x] for x in used)
    assert "tile m=" in p.best.describe()


def test_placement_double_buffers_without_overlap():
    bufs = [TileBuffer("in", "spm", 1000), TileBuffer("w", "spm", 300), TileBuffer("acc", "spm", 200, double=False),
            TileBuffer("tmp", "spm", 500, double=False, start=1, end=1),
            TileBuffer("early", "spm", 400, double=False, start=0, end=0)]
    offsets, used = place(bufs, {"spm": 4096})
    assert set(offsets) == {("in", 0), ("in", 1), ("w", 0), ("w", 1), ("acc", 0), ("tmp", 0), ("early", 0)}
    ivs = [Interval((b.name, s), b.nbytes, b.start, b.end) for b in bufs for s in range(b.slots)]
    assert check_no_overlap(ivs, offsets) == []
    assert all(o % 64 == 0 for o in offsets.values())
    # tmp and early live in different phases: they may share bytes, so the peak is below the sum
    assert used["spm"] < sum(-(-b.nbytes // 64) * 64 * b.slots for b in bufs)


def test_nothing_fits_is_a_memory_error():
    with pytest.raises(MemoryLimitError, match="no tiling"):
        plan({"m": 4, "n": 4, "k": 4}, {"inp": 8, "wgt": 8, "acc": 8},
             lambda t: [TileBuffer("x", "inp", 1000)], lambda t, o: 0)
    with pytest.raises(MemoryLimitError, match="scratchpad 'spm'"):
        place([TileBuffer("x", "spm", 100)], {"spm": 64})
