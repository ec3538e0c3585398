"""Sizes that reach every code path of the built-in CPU backend, read from its code generator's tables when the
cases are collected: the OpenMP thresholds (``templates.PARALLEL_MIN_WORK``: the least work for which a loop
runs on several threads) and the GEMM blocking table (``GEMM_TILES``: the cache blocks kc, mc, nc and the
micro-kernel heights). Shapes derived here sit just above each threshold and on both sides of every tile
edge, so that they follow the generator when its tables change. Micro-kernel widths are twice the vector
length, which depends on the host (16, 32 or 64-byte vectors): every candidate is covered.
"""
from __future__ import annotations

import math
from functools import lru_cache

VECTOR_BYTES = (16, 32, 64)


@lru_cache(maxsize=1)
def _gemm_blocking():
    from glow_cpu.kernels import gemm_blocking
    return gemm_blocking


@lru_cache(maxsize=1)
def _templates():
    from glow_cpu import templates
    return templates


def thresholds() -> dict:
    """{"elementwise": n, "window": n, "gemm": n}: the least work run in parallel, per kernel kind."""
    return dict(_templates().PARALLEL_MIN_WORK)


def gemm_tiles(sfx: str) -> dict:
    """The GEMM tile entry of ``sfx`` ("f32" or "f64"): kc, mc, nc, mr_wide and the narrow height."""
    cg = _gemm_blocking()
    table = getattr(cg, "GEMM_TILES", None) or getattr(cg, "_GEMM_TILES")
    t = dict(table[sfx])
    t.setdefault("mr_narrow", 6)
    return t


def micro_edges(sfx: str) -> tuple[list[int], list[int]]:
    """Heights and widths of the micro-kernel tile (every candidate vector length)."""
    t = gemm_tiles(sfx)
    size = 4 if sfx == "f32" else 8
    return sorted({t["mr_wide"], t["mr_narrow"]}), sorted({2 * vb // size for vb in VECTOR_BYTES})


def gemm_shapes(sfx: str) -> list[tuple[int, int, int]]:
    """(M, K, N) across every micro-tile edge, every cache block edge and above the GEMM parallel threshold.
    The micro-tile shapes get a K that gives them a quarter of the parallel threshold's work, so that the
    generator picks its GEMM (not its small-product loops) for them."""
    t = gemm_tiles(sfx)
    mrs, nrs = micro_edges(sfx)
    work = thresholds()["gemm"]
    mn = []
    for mr in mrs:  # heights on both sides of each micro-tile height
        mn += [(mr - 1, nrs[0] + 1), (mr, nrs[-1]), (mr + 1, nrs[1] - 1), (2 * mr + 1, 2 * nrs[0] + 3)]
    for nr in nrs:  # widths on both sides of each micro-tile width
        mn += [(5, nr - 1), (7, nr), (9, nr + 1)]
    out = [(m, max(3, math.ceil(work / 4 / (m * n))), n) for m, n in mn]
    kc, mc, nc = t["kc"], t["mc"], t["nc"]
    out += [(mc - 1, 17, 40), (mc, 16, 33), (mc + 1, 19, 35), (2 * mc + 3, 8, 21),  # M across the mc block
            (12, kc - 1, 20), (10, kc, 18), (9, kc + 1, 23), (6, 2 * kc + 3, 11),  # K across the kc block
            (3, 5, nc + 3), (4, 3, nc - 1)]  # N across the nc block
    n = max(2 * nrs[-1] + 3, math.ceil(work / (mc * kc)) + 5)  # mc * nc * kc above the threshold
    out.append((mc + 1, kc + 1, n))
    return out


def packed_b_shapes(sfx: str) -> list[tuple[int, int, int]]:
    """The gemm_shapes that matter to a B packed at compile time (panels of ``gemm_blocking.gemm_pack_width`` columns):
    N on both sides of the panel width, K beyond the kc block (panel offsets), N beyond the nc block, and the
    product above the parallel threshold."""
    w, t = _gemm_blocking().gemm_pack_width(sfx), gemm_tiles(sfx)
    shapes = gemm_shapes(sfx)
    return [s for s in shapes[:-1] if s[2] in (w - 1, w, w + 1) or s[1] in (t["kc"] + 1, 2 * t["kc"] + 3)] + [
        (5, 7, t["nc"] + 3)] + shapes[-1:]  # a K of 7: enough work for the GEMM (gemm_shapes' nc edges have less)


def gemv_shapes() -> list[tuple[int, int]]:
    """(K, N) of one-row products with a constant B (the CPU backend's float32 GEMV, ``kernels.matmul.GEMV``, taken
    from GEMM_MIN_WORK multiply-adds on): N on both sides of the panel width and below it, K on both sides of the
    GEMM's row block (kc: the GEMV sums in the GEMM's order), odd sizes, and last a B of enough weights for two
    threads."""
    from glow_cpu.kernels import codegen  # noqa: F401  (registers the kernel families in their order)
    from glow_cpu.kernels.matmul import GEMM_MIN_WORK, GEMV
    blocking = _gemm_blocking()
    w, kc, t = blocking.gemm_pack_width("f32"), blocking.GEMM_TILES["f32"]["kc"], GEMV["min_weights_per_thread"]
    shapes = [(kc - 1, 3 * w - 1), (kc, 3 * w), (kc + 1, 3 * w + 1), (2 * kc + 5, 2 * w + 3), (257, 131),
              (3 * kc + 1, w - 1), (kc + 7, 2 * t // (kc + 7) + w + 1)]
    assert all(k * n >= GEMM_MIN_WORK for k, n in shapes)
    return shapes


def parallel_side(work: int, per_point: int, channels: int) -> int:
    """The side of a square output plane that makes ``channels * side**2 * per_point`` exceed ``work``."""
    return math.isqrt(work // (channels * per_point)) + 2


@lru_cache(maxsize=1)
def _conv_algorithms():
    from glow_cpu.conv import algorithms as conv_algorithms
    return conv_algorithms


def chunked_channels(taps: int) -> int:
    """Input channels for which the conv engine's direct kernel (``conv_algorithms.plan_direct``) splits the
    reduction into several input-channel chunks (``SLAB_BYTES`` of weights per chunk and filter block), even at
    the narrowest vector (4 lanes) and a one-block tile: every chunk after the first resumes from the partial
    sums stored by the one before."""
    return _conv_algorithms().SLAB_BYTES // (4 * taps * 4) + 4


def depthwise_tail_width(max_registers: int = 32) -> int:
    """A prime output width above the conv engine's widest depthwise tile (``plan_depthwise``: at most the
    registers less 3 pixels): no tile width divides it, so a row ends in a tail tile on every target."""
    w = max_registers - 2
    while any(w % d == 0 for d in range(2, math.isqrt(w) + 1)):
        w += 1
    return w


def depthwise_strip_width() -> int:
    """The width of a depthwise 3x3 (pad 1) input whose padded rows of one channel block (8 or 16 lanes)
    overflow the CPU conv engine's strip budget (``conv_algorithms.DW_STRIP_BYTES``) within 8 rows: a map of 6+
    rows then takes several strips."""
    return _conv_algorithms().DW_STRIP_BYTES // (8 * 4 * 8)


def engine_parallel_macs(depthwise: bool = False) -> int:
    """The least multiply-adds for which a CPU conv engine kernel opens its OpenMP region
    (``conv_algorithms.PARALLEL_MIN_MACS``; a quarter of it for depthwise)."""
    macs = _conv_algorithms().PARALLEL_MIN_MACS
    return macs // 4 if depthwise else macs


def engine_geometries() -> dict:
    """name -> (x shape, w shape, strides, pads, group) of float32 convs that the CPU conv engine
    (``conv_algorithms``; constant filters) runs by each of its algorithms, with output planes large enough
    for its OpenMP region at two threads (``PARALLEL_MIN_MACS``; a quarter of it for depthwise). Winograd:
    every F(m x m) of ``WINOGRAD_LEAST_SIDE``, on an output side from its least one up to below the next
    larger m's, not a multiple of m (a ragged last tile row), with the fewest channels it takes
    (``WINOGRAD_MIN_CHANNELS``) and half as many filters more (a partial filter block); padded (``pad1``) and
    not (``pad0``, two images: the weights may then hold special values too, a padded tap being 0 * w). The
    direct kernel just below Winograd's channel count, strided 3x3 and 1x1 reading x in place; depthwise."""
    ca = _conv_algorithms()
    work, c = ca.PARALLEL_MIN_MACS, ca.WINOGRAD_MIN_CHANNELS
    f = c + c // 2
    g = {}
    sides = sorted(least for _, least in ca.WINOGRAD_LEAST_SIDE)
    for m, least in ca.WINOGRAD_LEAST_SIDE:
        side = max(least, parallel_side(work, 9 * c, f))
        side += 1 - side % 2 if side % m == 0 else 0
        larger = [s for s in sides if s > least]
        assert not larger or side < larger[0], (m, side, larger)
        g[f"winograd{m}_pad1"] = ((1, c, side, side), (f, c, 3, 3), [1, 1], [1] * 4, 1)
        g[f"winograd{m}_pad0_batch2"] = ((2, c, side + 2, side + 2), (f, c, 3, 3), [1, 1], [0] * 4, 1)
    side = parallel_side(work, 9 * (c - 1), c)
    g["direct_3x3_below_winograd"] = ((1, c - 1, side, side), (c, c - 1, 3, 3), [1, 1], [1] * 4, 1)
    side = parallel_side(work, 9 * c, f)
    g["direct_3x3_stride2"] = ((1, c, 2 * side + 1, 2 * side + 1), (f, c, 3, 3), [2, 2], [0] * 4, 1)
    side = parallel_side(work, f, c)
    g["direct_1x1_in_place"] = ((1, f, side, side + 3), (c, f, 1, 1), [1, 1], [0] * 4, 1)
    side = parallel_side(work // 4, 9, c)
    g["depthwise_3x3"] = ((1, c, side, side), (c, 1, 3, 3), [1, 1], [1] * 4, c)
    return g


def int8_parallel_elements() -> int:
    """Elements of an int8 elementwise kernel (qadd, qmul, rescale) past the CPU int8 engine's threading threshold
    (``int8_common.PARALLEL_MIN_MACS`` of work at ``int8_elementwise.ELEMENT_WORK`` per element), with a ragged
    tail so the threads' chunks end unevenly."""
    from glow_cpu.int8 import common as int8_common, elementwise as int8_elementwise
    return int8_common.PARALLEL_MIN_MACS // int8_elementwise.ELEMENT_WORK + 37


def int8_parallel_conv_rows(channels: int, filters: int, taps: int, width: int) -> int:
    """Output rows of a stride-1 int8 conv (``channels`` -> ``filters``, ``taps`` per window, ``width`` output
    columns) whose multiply-adds pass the CPU int8 engine's threading threshold (``int8_common.PARALLEL_MIN_MACS``),
    plus one so the threads' shares of register tiles end unevenly."""
    from glow_cpu.int8 import common as int8_common
    return int8_common.PARALLEL_MIN_MACS // (channels * filters * taps * width) + 2
