"""The CPU backend's int8 engine against numpy integer arithmetic written from the semantics (not from the
engine): real = (q - offset) * scale; acc = sum (x - xo)(w - wo) + bias accumulated in int64 then taken as
int32; y = clamp(rint(float32(acc) * float32 M) + out_offset, lo, hi) with np.rint (half to even).

Every case is rendered, compiled by the system C compiler into a shared library (one per C path and thread
count) and called through ctypes; results must be bit-exact. C paths: the host's SIMD path for 16-lane and
8-lane layouts, AVX-VNNI and the exact AVX2 emulation forced by -mno-* flags, and the portable C path forced by
-DGLOW_Q_PORTABLE, each where the host can run it."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from glow_cpu.int8.engine import (TARGETS, Int8EngineError, Requant, ResidualAdd, avg_pool_multipliers,
                                      plan_qadd, plan_qconv, plan_qlookup, plan_qmatmul, plan_qmul, plan_qpool,
                                      plan_qrescale)
from tests.cpu.harness import FLAGS, PATH_FLAGS, GemmRunner, aligned, compile_library, run_simple
from glow_cpu.build.toolchain import find_compiler
from glow_core.errors import GlowError

try:
    find_compiler()
    HAVE_CC = True
except GlowError:
    HAVE_CC = False
pytestmark = pytest.mark.skipif(not HAVE_CC, reason="no C compiler")


def _host_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split())
    except OSError:
        pass
    return set()


HOST = _host_flags()


def _amx_granted() -> bool:
    """Linux lets this process use AMX tiles (the kernels ask the same: arch_prctl ARCH_REQ_XCOMP_PERM)."""
    if not {"amx_tile", "amx_int8"} <= HOST:
        return False
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).syscall(158, 0x1023, 18) == 0  # SYS_arch_prctl on x86-64
    except (OSError, AttributeError):
        return False


AMX = _amx_granted()
# (layout target, C path, threads, what the host must have to run it): each SIMD path once, the 16-lane layout at
# 1 and 2 threads, the portable path on both layouts.
PATHS = [("avx512vnni", "native", 1, {"avx512_vnni", "avx512bw", "avx512vl"}),
         ("avx512vnni", "native", 2, {"avx512_vnni", "avx512bw", "avx512vl"}),
         ("avxvnni", "avxvnni", 1, {"avx_vnni"}),
         ("avx2", "avx2", 1, {"avx2"}),
         ("avx512vnni", "portable", 1, set()),
         ("portable", "portable", 2, set()),
         # convs of enough channels on AMX tiles, at 1 and 2 threads; their VNNI fallback (-DGLOW_Q_NO_AMX)
         ("avx512vnni-amx", "native", 1, {"amx"}),
         ("avx512vnni-amx", "native", 2, {"amx"}),
         ("avx512vnni-amx", "noamx", 1, {"avx512_vnni", "avx512bw", "avx512vl"})]
RUNNABLE = [(t, p, n) for t, p, n, need in PATHS if need <= HOST | ({"amx"} if AMX else set())]
INT8_PATH_FLAGS = {**PATH_FLAGS, "noamx": ["-DGLOW_Q_NO_AMX"]}
TYPES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}

# -- cases: one line each ----------------------------------------------------------------------------------------
# conv: x shape, w shape, strides, dilations, pads, group, x dtype, x offset ("rand" | "lo" | "hi"),
#       weight offsets ("zero" | "tensor" | "channel"), per-channel multipliers, y dtype, fused "relu"/"relu6"/None,
#       multiplier scale (large: saturates at both ends)
CONV = [
    ((1, 8, 6, 7), (5, 8, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, "int8", "rand", "zero", False, "int8", None, 1),
    ((2, 6, 9, 10), (7, 6, 3, 3), (2, 2), (1, 1), (1, 0, 1, 2), 1, "uint8", "rand", "zero", True, "uint8", None, 1),
    ((1, 3, 23, 21), (9, 3, 7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1, "uint8", "hi", "zero", True, "int8", "relu", 1),
    ((1, 16, 8, 8), (33, 16, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, "int8", "lo", "zero", True, "int8", None, 1),
    ((1, 10, 9, 9), (19, 10, 1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1, "int8", "rand", "tensor", False, "uint8", None, 1),
    ((1, 8, 9, 9), (8, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 8, "int8", "rand", "zero", True, "int8", "relu", 1),
    ((2, 12, 10, 11), (12, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 12, "uint8", "rand", "channel", True, "uint8", None, 1),
    ((1, 12, 7, 8), (18, 4, 3, 2), (1, 2), (2, 1), (2, 0, 1, 1), 3, "int8", "rand", "channel", True, "int8", "relu6", 1),
    ((1, 5, 6, 7), (3, 5, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, "int8", "hi", "tensor", False, "int8", None, 100),
    ((1, 5, 6, 7), (3, 5, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, "uint8", "lo", "zero", True, "uint8", None, 100),
    ((1, 7, 5, 5), (4, 7, 2, 2), (3, 3), (1, 1), (0, 0, 0, 0), 1, "uint8", "rand", "zero", False, "int32", None, 1),
    ((3, 4, 1, 17), (6, 4, 1, 5), (1, 2), (1, 2), (0, 2, 0, 3), 1, "int8", "rand", "zero", True, "int8", None, 1),
    ((1, 64, 28, 28), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, "uint8", "rand", "zero", True, "uint8", "relu", 1),
    ((1, 128, 7, 7), (96, 128, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, "int8", "rand", "tensor", True, "int8", None, 1),
    # rows of at least 16 positions: the transform's 16-position blocks (stride 1 and 2, int8 flipped, a partial
    # 4-channel block beside full ones) with scalar heads and tails
    ((1, 8, 12, 40), (8, 8, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1, "int8", "rand", "zero", True, "int8", None, 1),
    ((1, 6, 5, 37), (4, 6, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, "int8", "lo", "channel", True, "uint8", None, 1),
    ((1, 4, 6, 66), (5, 4, 1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1, "uint8", "rand", "zero", False, "uint8", None, 1),
    # the same blocks for 1-3 channels (depthwise; a 3-channel tail block), pixel sums of the zero-filled bytes
    ((1, 8, 7, 40), (8, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 8, "int8", "rand", "channel", True, "int8", "relu", 1),
    ((1, 6, 9, 45), (6, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 6, "uint8", "hi", "tensor", True, "uint8", None, 1),
    ((1, 7, 4, 35), (5, 7, 3, 3), (2, 2), (1, 1), (0, 1, 1, 1), 1, "int8", "lo", "channel", True, "int8", None, 1),
    # group by group, above the parallel threshold (2 threads share the groups)
    ((1, 64, 48, 40), (64, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 64, "int8", "rand", "channel", True, "uint8", "relu6",
     1),
    # depthwise with kernel rows of 2 and 4 columns packed in dwords: column stride 4 and 3, row dilation, uneven pads
    ((1, 5, 9, 50), (5, 1, 2, 4), (3, 4), (2, 1), (1, 2, 0, 3), 5, "int8", "rand", "channel", True, "uint8", None, 1),
    ((2, 4, 6, 41), (8, 1, 3, 2), (1, 3), (1, 1), (2, 0, 1, 1), 4, "uint8", "lo", "zero", False, "int8", None, 1),
    # AMX blocks (also lines 12 and 13): K chunks of 12 blocks, 24 channels padded to 32, an odd vector count and
    # pixel sums; K chunks of 10 blocks over 4 stride phases; two batches, 48 channels (a 32 block and a 16 one)
    ((1, 144, 9, 11), (24, 144, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, "int8", "rand", "channel", True, "int8", None,
     1),
    ((1, 40, 15, 15), (64, 40, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1, "uint8", "rand", "zero", True, "uint8", "relu", 1),
    ((2, 32, 6, 9), (48, 32, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, "int8", "hi", "zero", False, "int32", None, 1),
    # one weight tile (16 channels), K chunks of 6 blocks, an odd vector count
    ((1, 24, 11, 13), (16, 24, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, "uint8", "rand", "zero", True, "uint8", None, 1),
    # direct depthwise (also line 5): two images of 7x7 (4 vectors, a tail of 1 lane), stride 2 from 14x14, 96
    # channels above the parallel threshold, 56 columns at stride 2 (128-byte windows), 112 columns at stride 2
    # (vectors within one output row), kernel rows of 4 and 2 columns with column stride 3, row dilation, uneven pads
    ((2, 24, 7, 7), (24, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 24, "int8", "rand", "zero", True, "uint8", "relu6", 1),
    ((1, 16, 14, 14), (16, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 16, "uint8", "hi", "zero", True, "int8", None, 1),
    ((1, 96, 14, 14), (96, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 96, "uint8", "rand", "zero", True, "uint8", "relu", 1),
    ((1, 3, 10, 56), (3, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 3, "int8", "lo", "zero", False, "int8", None, 1),
    ((1, 2, 5, 112), (2, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 2, "int8", "rand", "zero", True, "int8", None, 100),
    ((1, 5, 9, 30), (5, 1, 3, 4), (1, 3), (2, 1), (2, 1, 0, 3), 5, "int8", "rand", "zero", True, "int32", None, 1),
    ((2, 4, 6, 23), (4, 1, 2, 2), (2, 1), (1, 1), (0, 1, 1, 0), 4, "uint8", "rand", "zero", False, "uint8", None, 1),
    # 1x1 convs above the parallel threshold split by pixel chunks at 2 threads: the VNNI tiles with pixel sums and a
    # 2-channel tail block over two images; AMX blocks (K chunks of 16 blocks, 48 channels) over an odd vector count
    ((2, 22, 30, 31), (40, 22, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, "int8", "rand", "channel", True, "int8", None, 1),
    ((1, 64, 23, 23), (48, 64, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, "uint8", "rand", "zero", True, "uint8", "relu", 1),
]
#: CONV lines the AMX target plans on AMX blocks
AMX_LINES = (12, 13, 23, 24, 25, 26, 35)
#: CONV lines the 16-lane targets plan as direct depthwise convs (the C takes them with AVX512-VBMI)
DW_LINES = (5, 27, 28, 29, 30, 31, 32, 33)
VBMI = "avx512vbmi" in HOST
# matmul: a shape, w shape, a dtype, a offset, weight offsets, per-channel, y dtype, fused, multiplier scale
MATMUL = [
    ((1, 512), (512, 100), "int8", "rand", "zero", False, "int8", None, 1),
    ((7, 33), (33, 50), "uint8", "rand", "zero", True, "uint8", "relu", 1),
    ((2, 7, 33), (2, 33, 50), "int8", "hi", "tensor", False, "int8", None, 1),
    ((13, 10), (10, 17), "int8", "lo", "channel", True, "int8", None, 100),
    ((5, 3), (3, 1), "uint8", "rand", "zero", False, "int32", None, 1),
    ((96, 256), (256, 200), "uint8", "rand", "zero", True, "int8", None, 1),
]
# lanes-independent kernels: rescale (x dtype, x offset, y dtype, y offset, multiplier), add, lookup, pools
RESCALE = [("int8", -128, "uint8", 0, 0.7), ("uint8", 255, "int8", 127, 3.3), ("int32", 12345, "int8", -3, 0.001),
           ("int16", -7, "uint8", 200, 0.02), ("int8", 0, "int8", 0, 1.0)]
ADD = [("int8", 5, 0.9, "uint8", 128, 1.3, "int8", -10, "relu"), ("uint8", 0, 0.5, "uint8", 255, 0.5, "uint8", 0, None),
       ("int8", -128, 2.0, "int8", 127, 1.7, "int8", 3, None),
       ("int16", -300, 0.01, "int8", 5, 0.7, "int16", 17, None),
       ("int16", 1000, 0.003, "int16", -32768, 0.002, "int16", -5, "relu"),
       ("uint8", 3, 0.5, "int8", -7, 0.5, "uint8", 100, None)]  # half-integer sums: the 16-lane float pass defers
POOL = [("max", (2, 3, 9, 8), (3, 3), (2, 2), (1, 1, 1, 1), "int8", 0, 0),
        ("max", (1, 4, 5, 5), (2, 2), (1, 1), (0, 0, 1, 1), "uint8", 0, 0),
        ("avg", (2, 3, 9, 8), (3, 3), (2, 2), (1, 1, 1, 1), "int8", 1, 1),
        ("avg", (2, 3, 9, 8), (3, 3), (2, 2), (1, 1, 1, 1), "uint8", 0, 0),
        ("avg", (1, 16, 7, 7), (7, 7), (1, 1), (0, 0, 0, 0), "uint8", 0, 0)]


# -- the reference ------------------------------------------------------------------------------------------------
def requantize(acc, mult, y_dtype, y_offset, lo, hi):
    """clamp(rint(float32(acc) * M) + offset, lo, hi)."""
    if y_dtype == "int32":
        return acc.astype(np.int32)
    v = np.rint(acc.astype(np.int32).astype(np.float32) * mult.astype(np.float32)).astype(np.int64) + y_offset
    return np.clip(v, lo, hi).astype(y_dtype)


def ref_conv(x, w, bias, strides, dilations, pads, group, xo, wo):
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    xp = np.full((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]), xo, np.int64)
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    oh = (xp.shape[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (xp.shape[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    acc = np.zeros((n, f, oh, ow), np.int64)
    fg = f // group
    for g in range(group):
        xs = xp[:, g * cg:(g + 1) * cg] - xo
        for i in range(kh):
            for j in range(kw):
                a, b = i * dilations[0], j * dilations[1]
                win = xs[:, :, a:a + strides[0] * (oh - 1) + 1:strides[0], b:b + strides[1] * (ow - 1) + 1:strides[1]]
                ww = w[g * fg:(g + 1) * fg, :, i, j].astype(np.int64) - wo[g * fg:(g + 1) * fg, None]
                acc[:, g * fg:(g + 1) * fg] += np.einsum("nchw,fc->nfhw", win, ww)
    return acc + bias.astype(np.int64)[None, :, None, None]


def _offset(rng, dtype, kind):
    lo, hi = TYPES[dtype]
    return {"lo": lo, "hi": hi}.get(kind, int(rng.integers(lo, hi + 1)))


def _tensor(rng, dtype, shape):
    lo, hi = TYPES[dtype]
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def _requant(rng, y_dtype, fused, scale_m, count, per_chan):
    """(Requant, multipliers[count], bounds)."""
    m = rng.uniform(2e-4, 4e-3, count if per_chan else 1).astype(np.float32) * np.float32(scale_m)
    m = np.broadcast_to(m, (count,)).astype(np.float32)
    if y_dtype == "int32":
        return Requant("int32"), m, (None, None)
    lo, hi = TYPES[y_dtype]
    off = int(rng.integers(lo + 20, hi - 20))
    if fused == "relu":
        lo = off
    elif fused == "relu6":
        lo, hi = off, min(hi, off + 40)
    return Requant(y_dtype, off, lo, hi), m, (lo, hi)


def conv_draw(i):
    """CONV[i]'s operands and parameters: x, w, bias, xo, wo (per channel), Requant y, multipliers m, (lo, hi)."""
    xs, ws, st, dl, pd, g, xdt, xok, wok, pc, ydt, fused, sm = CONV[i]
    rng = np.random.default_rng(1000 + i)
    x, w = _tensor(rng, xdt, xs), rng.integers(-128, 128, ws).astype(np.int8)
    f = ws[0]
    bias = rng.integers(-20000, 20000, f).astype(np.int32)
    xo = _offset(rng, xdt, xok)
    wo = {"zero": np.zeros(f, np.int64), "tensor": np.full(f, int(rng.integers(-128, 128))),
          "channel": rng.integers(-128, 128, f)}[wok]
    y, m, bounds = _requant(rng, ydt, fused, sm, f, pc)
    return x, w, bias, xo, wo, y, m, bounds


def conv_case(i, target, threads=2, residual=None):
    xs, ws, st, dl, pd, g, xdt, xok, wok, pc, ydt, fused, sm = CONV[i]
    x, w, bias, xo, wo, y, m, (lo, hi) = conv_draw(i)
    k = plan_qconv(xs, ws, st, dl, pd, g, x_dtype=xdt, x_offset=xo, w_offset=wo if wok != "zero" else 0,
                   multiplier=m if pc else m[0], y=y, num_threads=threads, target=TARGETS[target],
                   name=f"conv{i}" if residual is None else f"conv{i}_res", residual=residual)
    acc = ref_conv(x.astype(np.int64), w, bias, st, dl, pd, g, xo, wo)
    return k, (w, bias), x, requantize(acc, m[None, :, None, None], ydt, y.offset, lo, hi)


def matmul_case(i, target):
    ash, wsh, adt, aok, wok, pc, ydt, fused, sm = MATMUL[i]
    rng = np.random.default_rng(2000 + i)
    a, w = _tensor(rng, adt, ash), rng.integers(-128, 128, wsh).astype(np.int8)
    n = wsh[-1]
    bias = rng.integers(-20000, 20000, n).astype(np.int32)
    ao = _offset(rng, adt, aok)
    wo = {"zero": np.zeros(n, np.int64), "tensor": np.full(n, int(rng.integers(-128, 128))),
          "channel": rng.integers(-128, 128, n)}[wok]
    y, m, (lo, hi) = _requant(rng, ydt, fused, sm, n, pc)
    k = plan_qmatmul(ash, wsh, a_dtype=adt, a_offset=ao, w_offset=wo if wok != "zero" else 0,
                     multiplier=m if pc else m[0], y=y, num_threads=2, target=TARGETS[target], name=f"mm{i}")
    acc = np.matmul(a.astype(np.int64) - ao, w.astype(np.int64) - wo) + bias
    return k, (w, bias), a, requantize(acc, m, ydt, y.offset, lo, hi)


@functools.lru_cache(maxsize=None)
def built(target: str, path: str, threads: int):
    """All conv and matmul cases of one layout target: kernels, their library (one compile) and expectations."""
    cases = [conv_case(i, target) for i in range(len(CONV))] + [matmul_case(i, target) for i in range(len(MATMUL))]
    flags = [f for f in FLAGS if threads > 1 or f != "-fopenmp"] + INT8_PATH_FLAGS[path]
    return cases, compile_library([c[0] for c in cases], flags)


@pytest.mark.parametrize("target,path,threads", RUNNABLE)
@pytest.mark.parametrize("index", range(len(CONV) + len(MATMUL)))
def test_conv_matmul_bit_exact(target, path, threads, index):
    cases, lib = built(target, path, threads)
    k, (w, bias), x, expect = cases[index]
    got = GemmRunner(k, w, bias, expect.shape, expect.dtype, lib=lib).run(x)
    bad = np.argwhere(got != expect)
    assert bad.size == 0, (f"{k.describe}: {len(bad)} of {expect.size} differ, first at {tuple(bad[0])}: "
                           f"{got[tuple(bad[0])]} != {expect[tuple(bad[0])]}")


def test_amx_plans_the_lines_it_should():
    """The AMX target takes AMX blocks exactly on AMX_LINES (so the AMX paths above run those kernels)."""
    for i in range(len(CONV)):
        k = conv_case(i, "avx512vnni-amx")[0]
        assert ("AMX blocks" in k.describe) == (i in AMX_LINES), k.describe
    k = plan_qconv((1, 64, 8, 8), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), x_dtype="uint8", x_offset=0,
                   y=Requant("uint8"), target=TARGETS["avx512vnni-amx"], force={"amx": False})
    assert "AMX" not in k.describe


def test_direct_depthwise_plans_the_lines_it_should():
    """The 16-lane targets plan exactly DW_LINES direct (the 8-lane ones never), with both window sizes and both
    vector layouts among them; force={"dwdirect": False} keeps the planes."""
    seen = set()
    for target in ("avx512vnni", "avx512vnni-amx", "avxvnni"):
        for i in range(len(CONV)):
            k = conv_case(i, target)[0]
            assert ("direct depthwise" in k.describe) == (i in DW_LINES and TARGETS[target].lanes == 16), k.describe
            if "direct depthwise" in k.describe:
                seen |= {w for w in ("64-byte", "128-byte", "flat vectors", "rows vectors") if w in k.describe}
    assert seen == {"64-byte", "128-byte", "flat vectors", "rows vectors"}
    k = plan_qconv((1, 8, 9, 9), (8, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 8, x_dtype="uint8", x_offset=0,
                   y=Requant("uint8"), target=TARGETS["avx512vnni"], force={"dwdirect": False})
    assert "direct" not in k.describe


@pytest.mark.skipif(not VBMI or "avx512_vnni" not in HOST, reason="no AVX512-VBMI and VNNI on this host")
@pytest.mark.parametrize("threads", [1, 2])
def test_direct_depthwise_equals_planes(threads):
    """On DW_LINES the direct kernel and the planes (forced) give the reference's output, in one library."""
    kernels, runs = [], []
    for i in DW_LINES:
        xs, ws, st, dl, pd, g, xdt, xok, wok, pc, ydt, fused, sm = CONV[i]
        x, w, bias, xo, wo, y, m, (lo, hi) = conv_draw(i)
        expect = requantize(ref_conv(x.astype(np.int64), w, bias, st, dl, pd, g, xo, wo), m[None, :, None, None],
                            ydt, y.offset, lo, hi)
        for direct in (True, False):
            k = plan_qconv(xs, ws, st, dl, pd, g, x_dtype=xdt, x_offset=xo, multiplier=m if pc else m[0], y=y,
                           num_threads=threads, target=TARGETS["avx512vnni"], name=f"dw{i}_{int(direct)}",
                           force={"dwdirect": direct})
            assert ("direct depthwise" in k.describe) == direct
            kernels.append(k)
            runs.append((k, w, bias, x, expect))
    lib = compile_library(kernels, [f for f in FLAGS if threads > 1 or f != "-fopenmp"])
    for k, w, bias, x, expect in runs:
        got = GemmRunner(k, w, bias, expect.shape, expect.dtype, lib=lib).run(x)
        assert np.array_equal(got, expect), k.describe


@pytest.mark.skipif(not AMX, reason="no AMX tiles granted on this host")
@pytest.mark.parametrize("line", AMX_LINES)
def test_amx_equals_vnni(line):
    """AMX blocks and the VNNI tiles (the same packed weights' fallback) give equal outputs."""
    got = {}
    for path in ("native", "noamx"):
        cases, lib = built("avx512vnni-amx", path, 1)
        k, (w, bias), x, expect = cases[line]
        got[path] = GemmRunner(k, w, bias, expect.shape, expect.dtype, lib=lib).run(x)
    assert np.array_equal(got["native"], got["noamx"])


def test_saturation_reaches_both_ends():
    """The large-multiplier cases really saturate at both ends (so the bit-exact tests cover saturation)."""
    for i, case in enumerate(CONV):
        if case[-1] > 1:
            expect = conv_case(i, "portable")[3]
            lo, hi = TYPES[case[10]]
            assert (expect == lo).any() and (expect == hi).any(), f"conv case {i} does not saturate"


@pytest.mark.parametrize("path", ["native", "portable"])
def test_elementwise_and_pool_bit_exact(path):
    rng = np.random.default_rng(7)
    kernels, runs = [], []
    for i, (xdt, xo, ydt, yo, m) in enumerate(RESCALE):
        info = np.iinfo(xdt)
        x = rng.integers(max(info.min, -200000), min(info.max, 200000) + 1, (3, 5, 7)).astype(xdt)
        k = plan_qrescale(x.shape, x_dtype=xdt, x_offset=xo, multiplier=m, y=Requant(ydt, yo), name=f"rs{i}")
        e = requantize(np.rint((x.astype(np.int64) - xo).astype(np.float32) * np.float32(m)), np.float32(1),
                       ydt, yo, *TYPES[ydt])
        kernels.append(k)
        runs.append(([x], e))
    for i, (adt, ao, ma, bdt, bo, mb, ydt, yo, fused) in enumerate(ADD):
        a, b = _tensor(rng, adt, (4, 33)), _tensor(rng, bdt, (4, 33))
        lo, hi = TYPES[ydt]
        lo = yo if fused == "relu" else lo
        k = plan_qadd(a.shape, a_dtype=adt, a_offset=ao, a_multiplier=ma, b_dtype=bdt, b_offset=bo,
                      b_multiplier=mb, y=Requant(ydt, yo, lo, hi), name=f"add{i}")
        # one rounding of the sum of the exact products, in float64
        s = np.rint((a.astype(np.int64) - ao) * np.float64(np.float32(ma))
                    + (b.astype(np.int64) - bo) * np.float64(np.float32(mb))).astype(np.int64)
        kernels.append(k)
        runs.append(([a, b], np.clip(s + yo, lo, hi).astype(ydt)))
        k = plan_qmul(a.shape, a_dtype=adt, a_offset=ao, b_dtype=bdt, b_offset=bo, multiplier=ma * mb,
                      y=Requant(ydt, yo, lo, hi), name=f"mul{i}")
        s = np.rint(((a.astype(np.int64) - ao) * (b.astype(np.int64) - bo)).astype(np.float64)
                    * np.float64(np.float32(ma * mb))).astype(np.int64)
        kernels.append(k)
        runs.append(([a, b], np.clip(s + yo, lo, hi).astype(ydt)))
    for xdt, ydt in (("int8", "uint8"), ("uint8", "int8")):
        x, t = _tensor(rng, xdt, (2, 70)), _tensor(rng, ydt, 256)
        kernels.append(plan_qlookup(x.shape, x_dtype=xdt, y_dtype=ydt, name=f"lut_{xdt}"))
        runs.append(([x, t], t[x.astype(np.int64) - TYPES[xdt][0]]))
    for i, (op, xs, kk, st, pd, xdt, ydt_same, inc) in enumerate(POOL):
        x = _tensor(rng, xdt, xs)
        n, c, h, w = xs
        oh, ow = (h + pd[0] + pd[2] - kk[0]) // st[0] + 1, (w + pd[1] + pd[3] - kk[1]) // st[1] + 1
        sl = [(a, b) for a in range(kk[0]) for b in range(kk[1])]

        def win(arr, a, b):
            return arr[..., a:a + st[0] * (oh - 1) + 1:st[0], b:b + st[1] * (ow - 1) + 1:st[1]]
        if op == "max":
            xp = np.full((n, c, h + pd[0] + pd[2], w + pd[1] + pd[3]), TYPES[xdt][0], np.int64)
            xp[:, :, pd[0]:pd[0] + h, pd[1]:pd[1] + w] = x
            k = plan_qpool("max", xs, kk, st, (1, 1), pd, x_dtype=xdt, name=f"pool{i}")
            runs.append(([x, np.zeros(1, np.float32)], np.max([win(xp, a, b) for a, b in sl], axis=0).astype(xdt)))
        else:
            xo, yo, xs_, ys_ = int(rng.integers(*TYPES[xdt])), 17, 0.05, 0.0625
            xp = np.zeros((n, c, h + pd[0] + pd[2], w + pd[1] + pd[3]), np.int64)
            xp[:, :, pd[0]:pd[0] + h, pd[1]:pd[1] + w] = x.astype(np.int64) - xo
            inb = np.zeros(xp.shape[2:], np.int64)
            inb[pd[0]:pd[0] + h, pd[1]:pd[1] + w] = 1
            cnt_src = np.ones_like(inb) if inc else inb
            s = np.sum([win(xp, a, b) for a, b in sl], axis=0)
            cnt = np.sum([win(cnt_src, a, b) for a, b in sl], axis=0)
            table = avg_pool_multipliers(xs_, ys_, kk[0] * kk[1])
            # reference table written from the definition: float32(x_scale / (y_scale * count)) in float64
            assert np.array_equal(table[1:], (xs_ / (ys_ * np.arange(1, kk[0] * kk[1] + 1))).astype(np.float32))
            k = plan_qpool("avg", xs, kk, st, (1, 1), pd, x_dtype=xdt, x_offset=xo, y=Requant("uint8", yo),
                           count_include_pad=inc, name=f"pool{i}")
            e = np.clip(np.rint(s.astype(np.float32) * table[cnt]).astype(np.int64) + yo, 0, 255).astype(np.uint8)
            runs.append(([x, table], e))
        kernels.append(k)
    lib = compile_library(kernels, FLAGS + PATH_FLAGS[path])
    for k, (inputs, expect) in zip(kernels, runs):
        got = run_simple(k, inputs, expect.shape, expect.dtype, lib=lib)
        assert np.array_equal(got, expect), f"{k.describe}: {(got != expect).sum()} of {expect.size} differ"


@pytest.mark.parametrize("call,message", [
    (lambda: plan_qconv((1, 4, 5, 5), (2, 4, 3, 3), (1, 1), (1, 1), (0, 0, 0, 0), x_dtype="int16", x_offset=0,
                        y=Requant("int8")), "conv input dtype 'int16'"),
    (lambda: plan_qconv((1, 4, 5, 5), (2, 4, 3, 3), (1, 1), (1, 1), (0, 0, 0, 0), x_dtype="uint8", x_offset=300,
                        y=Requant("int8")), "offset 300"),
    (lambda: plan_qconv((1, 4, 5, 5), (2, 4, 3, 3), (1, 1), (1, 1), (0, 0, 0, 0), x_dtype="uint8", x_offset=0,
                        multiplier=[1.0, 2.0, 3.0], y=Requant("int8")), "2 entries"),
    (lambda: plan_qconv((1, 4, 5, 5), (2, 4, 3, 3), (1, 1), (1, 1), (0, 0, 0, 0), x_dtype="uint8", x_offset=0,
                        y=Requant("int8", 0, 10, 5)), "clamp [10, 5]"),
    (lambda: plan_qmatmul((2, 3), (4, 5), a_dtype="int8", a_offset=0, y=Requant("int8")), "[..., M, K]"),
    (lambda: plan_qmul((4,), a_dtype="int8", a_offset=0, b_dtype="int8", b_offset=0, multiplier=1e300,
                       y=Requant("int8")), "must be finite"),
    (lambda: plan_qconv((1, 4, 5, 5), (2, 4, 3, 3), (1, 1), (1, 1), (0, 0, 0, 0), x_dtype="int8", x_offset=0,
                        y=Requant("int8"), name="bad name"), "not a C identifier"),
])
def test_bad_requests_are_named_errors(call, message):
    with pytest.raises(Int8EngineError, match=message.replace("[", r"\[").replace("]", r"\]")):
        call()


def test_unsupported_geometry_is_reported():
    k = plan_qconv((1, 2, 3, 3, 3), (2, 2, 1, 1, 1), (1, 1, 1), (1, 1, 1), (0,) * 6, x_dtype="int8", x_offset=0,
                   y=Requant("int8"))
    assert not k and "2-d" in k.reason


def test_kernels_of_both_layouts_share_one_translation_unit():
    """Codegen places many kernels in one unit: 16- and 8-lane kernels and every kind compile together."""
    ks = [plan_qconv((1, 4, 5, 5), (2, 4, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), x_dtype="int8", x_offset=0,
                     y=Requant("int8"), target=TARGETS[t], name=f"k_conv_{t}") for t in ("avx512vnni", "avx2")]
    ks.append(plan_qmatmul((3, 4), (4, 5), a_dtype="uint8", a_offset=0, y=Requant("int8"), name="k_mm"))
    ks.append(plan_qpool("max", (1, 2, 4, 4), (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), x_dtype="int8", name="k_pool"))
    ks.append(plan_qadd((4,), a_dtype="int8", a_offset=0, a_multiplier=1.0, b_dtype="int8", b_offset=0,
                        b_multiplier=1.0, y=Requant("int8"), name="k_add"))
    compile_library(ks)


# conv with a fused residual add: CONV line, B dtype, conv output's add slot, Y written "apart" | "in_b" (in place
# over B) | "in_y" (over the conv's own output), add output dtype, fused "relu" or None
RESIDUAL = [(0, "int8", 0, "apart", "int8", None), (1, "uint8", 1, "in_b", "uint8", "relu"),
            (4, "int8", 0, "in_y", "int8", "relu"), (7, "uint8", 1, "apart", "int8", None),
            (12, "uint8", 0, "in_b", "uint8", "relu"), (34, "int8", 0, "in_b", "int8", None),
            (35, "uint8", 1, "apart", "uint8", "relu")]


def residual_case(index, target, threads):
    """RESIDUAL[index]: the conv case's kernel with its residual add, operands and expectation, and the add's
    parameters (B, its offset, the two multipliers, the add's Requant, the conv output's offset)."""
    line, bdt, slot, where, ydt, fused = RESIDUAL[index]
    c_off = conv_draw(line)[5].offset
    rng = np.random.default_rng(3000 + index)
    b = _tensor(rng, bdt, conv_case(line, target)[3].shape)
    b_off = _offset(rng, bdt, "rand")
    mc, mb = np.float32(rng.uniform(0.3, 1.7)), np.float32(rng.uniform(0.3, 1.7))
    lo, hi = TYPES[ydt]
    y_off = int(rng.integers(lo + 20, hi - 20))
    yadd = Requant(ydt, y_off, y_off if fused == "relu" else None)
    case = conv_case(line, target, threads, ResidualAdd(bdt, b_off, float(mc), float(mb), yadd, slot))
    return case, (b, b_off, mc, mb, yadd, c_off)


@functools.lru_cache(maxsize=None)
def residual_built(target: str, path: str, threads: int):
    """All RESIDUAL cases of one path and their library (one compile)."""
    cases = [residual_case(i, target, threads) for i in range(len(RESIDUAL))]
    flags = [f for f in FLAGS if threads > 1 or f != "-fopenmp"] + INT8_PATH_FLAGS[path]
    return cases, compile_library([c[0][0] for c in cases], flags)


@pytest.mark.parametrize("target,path,threads", RUNNABLE)
@pytest.mark.parametrize("index", range(len(RESIDUAL)))
def test_conv_with_residual_add_bit_exact(target, path, threads, index):
    """The residual pass of a conv's tiles against the conv's reference output added to B by the qadd formula
    (numpy: both operands rescaled in float64, one rounding half to even, the clamp)."""
    (k, (w, bias), x, conv_out), (b, b_off, mc, mb, yadd, c_off) = residual_built(target, path, threads)[0][index]
    lib = residual_built(target, path, threads)[1]
    where, ydt, y_off = RESIDUAL[index][3], RESIDUAL[index][4], yadd.offset
    assert k.kind == "conv+add" and "residual add" in k.describe
    runner = GemmRunner(k, w, bias, conv_out.shape, conv_out.dtype, lib=lib)
    runner.prepare(x)
    bbuf = aligned(b.nbytes)
    bbuf[:] = b.reshape(-1).view(np.uint8)
    ybuf = {"apart": aligned(conv_out.size * np.dtype(ydt).itemsize), "in_b": bbuf, "in_y": runner.y}[where]
    runner.fn(*runner.args, bbuf.ctypes.data, ybuf.ctypes.data)
    got = ybuf[:conv_out.size * np.dtype(ydt).itemsize].view(ydt).reshape(conv_out.shape)
    cv = (conv_out.astype(np.float64) - c_off) * np.float64(mc)
    bv = (b.astype(np.float64) - b_off) * np.float64(mb)
    want = np.clip(np.rint(cv + bv) + y_off, yadd.bounds()[0], yadd.bounds()[1]).astype(ydt)
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"{k.describe}: {len(bad)} of {want.size} differ, first at {tuple(bad[0])}"
    if where != "in_y":
        assert np.array_equal(runner.result(), conv_out)  # the conv's own output is stored as well

