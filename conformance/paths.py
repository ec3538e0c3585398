"""Sizes that reach the code paths of the backend under test, from its ``Backend.interesting_shapes(op)``.

A backend names, per op, the sizes where its kernels change path (keys below); this module derives case shapes
on both sides of each, so that they follow the backend when its tables change. A backend naming none gets
generic sizes (``GENERIC``: common GEMM blockings and thresholds, no backend's), so the cases exist for every
backend and their ids only depend on the answers.

Keys read (all optional):

- elementwise ops (``add``), pooling and reductions (``max_pool``, ``reduce_sum``): ``parallel_work``, the least
  work run on several threads (elements, or window positions times window size);
- ``matmul``: ``tiles`` {dtype: {kc, mc, nc (cache blocks), mr (micro-tile heights), nr (micro-tile widths, every
  vector length the backend may use), pack_width (columns per panel of a B packed at compile time)}} for float32
  and float64, ``parallel_work`` (m * n * k), and ``gemv`` {min_weights_per_thread, min_work}
  of one-row products with a constant B;
- ``conv``: ``parallel_work``, ``parallel_macs`` (the least multiply-adds for which a conv kernel of constant
  filters runs on several threads; a quarter of it for depthwise), ``geometries`` {name: (x shape, w shape,
  strides, pads, group)} of the convs its algorithms each run (constant filters), ``chunked_channels`` (input
  channels whose 3x3 reduction is split into chunks), ``depthwise_tail_width`` (an output width ending in a partial tile), ``depthwise_strip_width`` (an
  input width whose rows overflow one strip);
- ``qadd``: ``parallel_elements``; ``qconv``: ``parallel_macs``.
"""
from __future__ import annotations

import math

#: What a backend answering nothing gets (generic sizes, no backend's).
GENERIC = {
    "elementwise": {"parallel_work": 32768},
    "window": {"parallel_work": 65536},
    "matmul": {"tiles": {"float32": {"kc": 256, "mc": 96, "nc": 4096, "mr": (8, 6), "nr": (8, 16, 32),
                                     "pack_width": 32},
                         "float64": {"kc": 256, "mc": 96, "nc": 2048, "mr": (8, 6), "nr": (4, 8, 16),
                                     "pack_width": 16}},
               "parallel_work": 524288, "gemv": {"min_weights_per_thread": 1 << 21, "min_work": 4096}},
    "conv": {"parallel_work": 65536, "parallel_macs": 1 << 19, "chunked_channels": 300, "depthwise_tail_width": 31,
             "depthwise_strip_width": 256,
             "geometries": {"3x3_pad1": ((1, 16, 26, 26), (24, 16, 3, 3), [1, 1], [1] * 4, 1),
                            "3x3_pad0_batch2": ((2, 16, 15, 15), (24, 16, 3, 3), [1, 1], [0] * 4, 1),
                            "3x3_stride2": ((1, 16, 33, 33), (24, 16, 3, 3), [2, 2], [0] * 4, 1),
                            "1x1": ((1, 24, 30, 33), (16, 24, 1, 1), [1, 1], [0] * 4, 1),
                            "depthwise_3x3_batch2": ((2, 16, 61, 61), (16, 1, 3, 3), [1, 1], [1] * 4, 16)}},
    "qadd": {"parallel_elements": 16384},
    "qconv": {"parallel_macs": 1 << 20},
}
_KIND = {"add": "elementwise", "max_pool": "window", "reduce_sum": "window", "matmul": "matmul", "conv": "conv",
         "qadd": "qadd", "qconv": "qconv"}
_SFX = {"f32": "float32", "f64": "float64"}

_backend = None
_answers: dict = {}


def use(backend) -> bool:
    """Take the sizes from ``backend`` (the backend under test; None: the generic sizes only); True when they
    differ from the sizes used before."""
    global _backend
    before = signature()
    _backend = backend
    _answers.clear()
    return signature() != before


def signature() -> str:
    """The sizes in use, as text: a case module records the one its tables were made with (``PATHS_SIGNATURE``),
    and the plugin re-imports the modules whose tables were made with other sizes."""
    return repr([shapes_of(op) for op in _KIND])


def shapes_of(op: str) -> dict:
    """The backend's answer for ``op`` over the generic sizes (each key the backend names replaces GENERIC's)."""
    if op not in _answers:
        answer = dict(_backend.interesting_shapes(op) or {}) if _backend is not None else {}
        merged = dict(GENERIC[_KIND[op]])
        merged.update({k: v for k, v in answer.items() if v is not None})
        _answers[op] = merged
    return _answers[op]


def thresholds() -> dict:
    """{"elementwise": n, "window": n, "gemm": n}: the least work run in parallel, per kernel kind."""
    return {"elementwise": shapes_of("add")["parallel_work"], "window": shapes_of("max_pool")["parallel_work"],
            "gemm": shapes_of("matmul")["parallel_work"]}


def gemm_tiles(sfx: str) -> dict:
    """The GEMM tile entry of ``sfx`` ("f32" or "f64"): kc, mc, nc, mr (heights), nr (widths), pack_width."""
    t = dict(shapes_of("matmul")["tiles"][_SFX[sfx]])
    t["mr"], t["nr"] = tuple(t["mr"]), tuple(t["nr"])
    return t


def micro_edges(sfx: str) -> tuple[list[int], list[int]]:
    """Heights and widths of the micro-kernel tile (every candidate vector length)."""
    t = gemm_tiles(sfx)
    return sorted(set(t["mr"])), sorted(set(t["nr"]))


def gemm_shapes(sfx: str) -> list[tuple[int, int, int]]:
    """(M, K, N) across every micro-tile edge, every cache block edge and above the GEMM parallel threshold.
    The micro-tile shapes get a K that gives them a quarter of the parallel threshold's work, so that a backend
    with small-product loops takes its GEMM for them."""
    t = gemm_tiles(sfx)
    mrs, nrs = micro_edges(sfx)
    work = thresholds()["gemm"]
    nr1 = nrs[1] if len(nrs) > 1 else nrs[0]
    mn = []
    for mr in mrs:  # heights on both sides of each micro-tile height
        mn += [(mr - 1, nrs[0] + 1), (mr, nrs[-1]), (mr + 1, nr1 - 1), (2 * mr + 1, 2 * nrs[0] + 3)]
    for nr in nrs:  # widths on both sides of each micro-tile width
        mn += [(5, nr - 1), (7, nr), (9, nr + 1)]
    out = [(m, max(3, math.ceil(work / 4 / (m * n))), n) for m, n in mn if m > 0 and n > 0]
    kc, mc, nc = t["kc"], t["mc"], t["nc"]
    out += [(mc - 1, 17, 40), (mc, 16, 33), (mc + 1, 19, 35), (2 * mc + 3, 8, 21),  # M across the mc block
            (12, kc - 1, 20), (10, kc, 18), (9, kc + 1, 23), (6, 2 * kc + 3, 11),  # K across the kc block
            (3, 5, nc + 3), (4, 3, nc - 1)]  # N across the nc block
    n = max(2 * nrs[-1] + 3, math.ceil(work / (mc * kc)) + 5)  # mc * nc * kc above the threshold
    out.append((mc + 1, kc + 1, n))
    return list(dict.fromkeys(out))


def packed_b_shapes(sfx: str) -> list[tuple[int, int, int]]:
    """The gemm_shapes that matter to a B packed at compile time (panels of ``pack_width`` columns): N on both
    sides of the panel width, K beyond the kc block (panel offsets), N beyond the nc block, and the product
    above the parallel threshold."""
    t = gemm_tiles(sfx)
    w = t["pack_width"]
    shapes = gemm_shapes(sfx)
    return [s for s in shapes[:-1] if s[2] in (w - 1, w, w + 1) or s[1] in (t["kc"] + 1, 2 * t["kc"] + 3)] + [
        (5, 7, t["nc"] + 3)] + shapes[-1:]  # a K of 7: enough work for the GEMM (gemm_shapes' nc edges have less)


def gemv_shapes() -> list[tuple[int, int]]:
    """(K, N) of one-row products with a constant B (a float32 GEMV, ``matmul``'s ``gemv``, taken from
    ``min_work`` multiply-adds on): N on both sides of the panel width and below it, K on both sides of the GEMM's
    row block (kc: the GEMV sums in the GEMM's order), odd sizes, and last a B of enough weights for two threads."""
    g, tiles = shapes_of("matmul")["gemv"], gemm_tiles("f32")
    w, kc, t = tiles["pack_width"], tiles["kc"], int(g["min_weights_per_thread"])
    shapes = [(kc - 1, 3 * w - 1), (kc, 3 * w), (kc + 1, 3 * w + 1), (2 * kc + 5, 2 * w + 3), (257, 131),
              (3 * kc + 1, w - 1), (kc + 7, 2 * t // (kc + 7) + w + 1)]
    return [(k, n) for k, n in shapes if k * n >= int(g.get("min_work", 0))]


def parallel_side(work: int, per_point: int, channels: int) -> int:
    """The side of a square output plane that makes ``channels * side**2 * per_point`` exceed ``work``."""
    return math.isqrt(work // (channels * per_point)) + 2


def chunked_channels(taps: int = 9) -> int:
    """Input channels whose reduction (of ``taps`` taps; 9) the backend splits into several chunks: every chunk
    after the first resumes from the partial sums stored by the one before."""
    return int(shapes_of("conv")["chunked_channels"])


def depthwise_tail_width() -> int:
    """An output width no depthwise tile width divides: a row ends in a tail tile."""
    return int(shapes_of("conv")["depthwise_tail_width"])


def depthwise_strip_width() -> int:
    """The width of a depthwise 3x3 (pad 1) input whose padded rows of one channel block overflow the backend's
    strip budget within 8 rows: a map of 6+ rows then takes several strips."""
    return int(shapes_of("conv")["depthwise_strip_width"])


def engine_parallel_macs(depthwise: bool = False) -> int:
    """The least multiply-adds for which the backend's conv kernels (constant filters) run on several threads
    (a quarter of it for depthwise)."""
    macs = int(shapes_of("conv")["parallel_macs"])
    return macs // 4 if depthwise else macs


def engine_geometries() -> dict:
    """name -> (x shape, w shape, strides, pads, group) of float32 convs (constant filters) that the backend runs
    by each of its algorithms, above its parallel threshold (run at 1 and 2 threads, with special values)."""
    return {k: tuple(v) for k, v in shapes_of("conv")["geometries"].items()}


def int8_parallel_elements() -> int:
    """Elements of an int8 elementwise kernel (qadd, qmul, rescale) past the backend's threading threshold, with a
    ragged tail so the threads' chunks end unevenly."""
    return int(shapes_of("qadd")["parallel_elements"]) + 37


def int8_parallel_conv_rows(channels: int, filters: int, taps: int, width: int) -> int:
    """Output rows of a stride-1 int8 conv (``channels`` -> ``filters``, ``taps`` per window, ``width`` output
    columns) whose multiply-adds pass the backend's threading threshold, plus one so the threads' shares end
    unevenly."""
    return int(shapes_of("qconv")["parallel_macs"]) // (channels * filters * taps * width) + 2
