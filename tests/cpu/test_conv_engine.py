"""The conv engine (glow_cpu.conv.engine) compiled for real, against convolutions written here in numpy.

Every case is one line of CASES; the kernels of all cases build into one shared library (content-hash cached).
The expectation is a float64 convolution computed from the definition (a transposed convolution by scattering
each input sample, independently of the engine's input-dilation formulation); the tolerance is the conformance
suite's "conv" family (glow_conformance.checker: 1 ULP or 2 * n * eps * sum of |terms|), for Winograd too.
"""
from __future__ import annotations

import itertools
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from glow_conformance.checker import compare, ulp_distance
from glow_core.backend import Unsupported
from glow_cpu.conv.engine import (ConvEngineError, ConvGeometry, Epilogue, Target, host_target, layout_kernel,
                                  plan_conv)
from tests.cpu.harness import FLAGS, ConvRunner, blocked, compile_library, run_layout, unblocked
from glow_cpu.conv.algorithms import DW_STRIP_BYTES

EPS32 = float(np.finfo(np.float32).eps)


def ref_conv(x, w, b, strides, dilations, pads, group):
    """float64 cross-correlation from the definition: y[n, f, o] = b[f] + sum_c,k w[f, c, k] x[n, g*cg + c,
    o * s + k * d - pad] over in-range input positions; also the sum of |terms| (the tolerance scale)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    N, C = x.shape[:2]
    F, cg = w.shape[:2]
    nd = x.ndim - 2
    fg = F // group
    sp, k = x.shape[2:], w.shape[2:]
    out = [(sp[i] + pads[i] + pads[nd + i] - (k[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(nd)]
    y = np.zeros((N, F, *out))
    mag = np.zeros_like(y)
    for o in itertools.product(*[range(n) for n in out]):
        for kk in itertools.product(*[range(n) for n in k]):
            pos = [o[i] * strides[i] + kk[i] * dilations[i] - pads[i] for i in range(nd)]
            if any(p < 0 or p >= sp[i] for i, p in enumerate(pos)):
                continue
            for g in range(group):
                xs = x[(slice(None), slice(g * cg, (g + 1) * cg)) + tuple(pos)]  # [N, cg]
                ws = w[(slice(g * fg, (g + 1) * fg), slice(None)) + kk]  # [fg, cg]
                y[(slice(None), slice(g * fg, (g + 1) * fg)) + o] += xs @ ws.T
                mag[(slice(None), slice(g * fg, (g + 1) * fg)) + o] += np.abs(xs) @ np.abs(ws).T
    y += b.reshape((1, F) + (1,) * nd)
    mag += np.abs(b).reshape((1, F) + (1,) * nd)
    return y, mag


def ref_conv_transpose(x, w, b, strides, dilations, pads, out_pad, group):
    """ONNX ConvTranspose by scattering: input sample i adds w[c, f, k] * x at output i * s + k * d - pad."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    N, C = x.shape[:2]
    nd = x.ndim - 2
    fg = w.shape[1]
    cg = C // group
    k = w.shape[2:]
    full = [strides[i] * (x.shape[2 + i] - 1) + out_pad[i] + (k[i] - 1) * dilations[i] + 1 for i in range(nd)]
    out = [full[i] - pads[i] - pads[nd + i] for i in range(nd)]
    y = np.zeros((N, group * fg, *out))
    mag = np.zeros_like(y)
    for i in itertools.product(*[range(n) for n in x.shape[2:]]):
        for kk in itertools.product(*[range(n) for n in k]):
            o = [i[d] * strides[d] + kk[d] * dilations[d] - pads[d] for d in range(nd)]
            if any(p < 0 or p >= out[d] for d, p in enumerate(o)):
                continue
            for g in range(group):
                xs = x[(slice(None), slice(g * cg, (g + 1) * cg)) + i]  # [N, cg]
                ws = w[(slice(g * cg, (g + 1) * cg), slice(None)) + kk]  # [cg, fg]
                y[(slice(None), slice(g * fg, (g + 1) * fg)) + tuple(o)] += xs @ ws
                mag[(slice(None), slice(g * fg, (g + 1) * fg)) + tuple(o)] += np.abs(xs) @ np.abs(ws)
    y += b.reshape((1, -1) + (1,) * nd)
    mag += np.abs(b).reshape((1, -1) + (1,) * nd)
    return y, mag


def _erfc(v):
    return np.vectorize(math.erfc)(v)


#: activation -> (numpy float64 reference, bound on |f'| to carry the conv's error through, ULPs allowed alone)
ACT = {
    "relu": (lambda v: np.maximum(v, 0), 1.0, 0),
    ("clip", -0.5, 1.5): (lambda v: np.clip(v, -0.5, 1.5), 1.0, 0),
    "sigmoid": (lambda v: 1 / (1 + np.exp(-v)), 0.25, 4),
    "silu": (lambda v: v / (1 + np.exp(-v)), 1.1, 4),
    "gelu_erf": (lambda v: 0.5 * v * _erfc(-v / math.sqrt(2)), 1.13, 8),  # 1 + erf(-x) cancels; erfc does not
    # 0.5 (1 + tanh z) = 1 / (1 + exp(-2 z)): the tanh form cancels for negative v, even in float64
    "gelu_tanh": (lambda v: v / (1 + np.exp(-2 * math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))), 1.13, 4),
    ("hard_swish", 1 / 6, 0.5): (lambda v: v * np.clip(v / 6 + 0.5, 0, 1), 1.5, 4),
    ("hard_sigmoid", 0.2, 0.5): (lambda v: np.clip(0.2 * v + 0.5, 0, 1), 0.2, 2),
}

# id: (batch, C, F, spatial, kernel, strides, dilations, pads, group, force, layouts in/out, threads, epilogue)
# transposed cases: kernel -> ("T", kernel, output_padding)
CASES = {
    "direct-3x3-pad1": (1, 32, 48, (10, 12), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, {"algorithm": "direct"},
                        "nchw/nchw", 1, ()),
    "direct-odd-sizes": (2, 20, 40, (9, 11), (3, 3), (2, 1), (1, 2), (0, 1, 2, 3), 1, None, "nchw/nchw", 2, ()),
    "direct-blocked-io": (1, 40, 70, (9, 11), (3, 5), (2, 1), (1, 1), (1, 2, 1, 2), 1, None, "nchwc/nchwc", 1,
                          ("residual", "relu")),
    "direct-mixed-io": (1, 24, 17, (7, 8), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, None, "nchwc/nchw", 2,
                        ("relu", "residual")),
    "pads-past-kernel": (1, 4, 6, (5, 5), (5, 5), (1, 1), (2, 2), (4, 4, 4, 4), 1, None, "nchw/nchw", 1, ()),
    "pads-past-kernel-blk": (1, 16, 32, (5, 5), (5, 5), (1, 1), (2, 2), (4, 4, 4, 4), 1, None, "nchwc/nchwc", 1,
                             ()),
    "window-in-padding-s3": (1, 8, 8, (4, 4), (2, 2), (3, 3), (1, 1), (5, 0, 6, 1), 1, None, "nchw/nchw", 1, ()),
    "stem-7x7-s2": (2, 3, 64, (30, 26), (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1, None, "nchw/nchw", 2, ()),
    "stem-3-16": (1, 3, 16, (16, 16), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, None, "nchw/nchwc", 1, ("relu",)),
    "few-channels-planar": (1, 20, 24, (8, 9), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, None, "nchw/nchw", 1, ()),
    "pointwise-flat": (1, 64, 96, (7, 9), (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, None, "nchw/nchw", 1, ()),
    "pointwise-s2-blocked": (1, 32, 48, (9, 10), (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1, None, "nchwc/nchwc", 1,
                             ()),
    "pointwise-s2-pads": (1, 32, 16, (9, 10), (1, 1), (2, 3), (1, 1), (1, 0, 2, 1), 1, None, "nchw/nchw", 1, ()),
    "grouped-aligned": (1, 64, 64, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2, None, "nchw/nchw", 2, ()),
    "grouped-unaligned": (1, 12, 18, (7, 6), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 3, None, "nchw/nchw", 1, ()),
    "grouped-g32": (1, 128, 128, (6, 6), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 32, None, "nchwc/nchwc", 1, ()),
    "depthwise-3x3": (1, 32, 32, (12, 13), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 32, None, "nchw/nchw", 2, ()),
    "depthwise-s2-blocked": (2, 24, 24, (12, 13), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 24, None, "nchwc/nchwc", 1,
                             ("relu",)),
    "depthwise-multiplier": (1, 8, 24, (9, 9), (5, 5), (1, 2), (2, 1), (3, 0, 4, 2), 8, None, "nchw/nchw", 1, ()),
    "depthwise-pads-past": (1, 8, 8, (5, 5), (5, 5), (1, 1), (2, 2), (4, 4, 4, 4), 8, None, "nchw/nchw", 1, ()),
    # parallel: each item copies its channel block's padded rows strip by strip into its thread's scratch slice
    "depthwise-parallel-strips": (1, 32, 32, (40, 40), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 32, None, "nchw/nchw", 2,
                                  ("relu",)),
    "depthwise-s2-strip3-mixed": (1, 24, 24, (30, 31), (3, 3), (2, 2), (1, 1), (1, 2, 1, 0), 24, {"strip": 3},
                                  "nchwc/nchw", 2, ("residual",)),
    # 1x1 on nchw read in place (1-lane input blocks); on two threads its flattened rows split into row blocks
    "pointwise-inplace-parallel": (1, 32, 16, (33, 32), (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, None, "nchw/nchw", 2,
                                   ("relu",)),
    "dilated-3x3-d2": (1, 32, 32, (15, 14), (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 1, None, "nchw/nchw", 1, ()),
    "winograd4": (1, 32, 32, (30, 29), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, {"algorithm": "winograd4"},
                  "nchw/nchw", 2, ()),
    "winograd4-odd-pads": (2, 20, 40, (9, 11), (3, 3), (1, 1), (1, 1), (0, 1, 2, 0), 1, {"algorithm": "winograd4"},
                           "nchwc/nchwc", 1, ("residual", "relu")),
    "winograd2": (1, 48, 32, (13, 14), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, {"algorithm": "winograd2"},
                  "nchw/nchw", 2, ()),
    "winograd-chosen": (1, 64, 64, (28, 28), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, None, "nchwc/nchw", 1, ()),
    "conv1d": (1, 20, 30, (13,), (3,), (2,), (1,), (1, 2), 1, None, "nchw/nchw", 1, ()),
    "conv1d-depthwise": (1, 20, 20, (17,), (3,), (1,), (1,), (1, 1), 20, None, "nchw/nchw", 1, ()),
    "nhwc-study": (1, 32, 48, (9, 10), (3, 3), (2, 1), (1, 1), (1, 1, 1, 1), 1, None, "nhwc/nhwc", 1, ()),
    "batch3-threads": (3, 16, 32, (11, 12), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, {"algorithm": "direct"},
                       "nchw/nchw", 2, ()),
    "convT-4x4-s2": (1, 16, ("T", 8), (7, 6), (4, 4), (2, 2), (1, 1), (1, 1, 1, 1), 1, (0, 0), "nchw/nchw", 1, ()),
    "convT-s3-d2-outpad": (2, 6, ("T", 5), (4, 5), (3, 2), (3, 2), (2, 1), (1, 0, 0, 2), 1, (2, 1), "nchw/nchw", 2,
                           ()),
    "convT-grouped-negpad": (1, 8, ("T", 3), (5, 5), (3, 3), (2, 2), (1, 1), (4, 0, 0, 3), 2, (1, 0), "nchwc/nchwc",
                             1, ("relu",)),
    "convT-1d": (1, 4, ("T", 6), (9,), (5,), (3,), (1,), (2, 1), 1, (1,), "nchw/nchw", 1, ()),
    # "residual in y": the residual is what y holds on entry (Epilogue.in_place): one input-channel chunk however
    # small the forced one (blocked, nhwc output), partial sums in scratch (nchw output), phases of a transposed conv
    "inplace-blocked-chunks": (1, 96, 40, (9, 10), (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1, {"chunk": 2},
                               "nchwc/nchwc", 2, ("residual in y", "relu")),
    "inplace-mixed-chunks": (2, 40, 24, (9, 11), (3, 3), (2, 1), (1, 1), (1, 1, 1, 1), 1, {"chunk": 1},
                             "nchwc/nchw", 2, ("relu", "residual in y")),
    "inplace-nhwc": (1, 32, 48, (9, 10), (3, 3), (2, 1), (1, 1), (1, 1, 1, 1), 1, None, "nhwc/nhwc", 1,
                     ("residual in y",)),
    "inplace-convT-blocked": (1, 16, ("T", 24), (7, 6), (4, 4), (2, 2), (1, 1), (1, 1, 1, 1), 1, (0, 0),
                              "nchwc/nchwc", 2, ("residual in y", "relu")),
    "inplace-convT-plain": (2, 6, ("T", 5), (4, 5), (3, 2), (3, 2), (2, 1), (1, 0, 0, 2), 1, (2, 1), "nchw/nchw", 1,
                            ("residual in y",)),
    # long activations applied to the register tile in one loop (Epilogue.looped): residuals read at run-time
    # offsets, planar with a partial last block, in y itself, tail tiles, depthwise
    "looped-1x1-residual-planar": (1, 40, 72, (5, 9), (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, None, "nchwc/nchw", 1,
                                   ("residual", "silu")),
    "looped-inplace": (1, 48, 40, (7, 9), (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, None, "nchwc/nchwc", 2,
                       ("residual in y", "silu")),
    "looped-strided-tails": (2, 24, 56, (5, 19), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1, None, "nchw/nchwc", 1,
                             ("gelu_tanh", "residual", "sigmoid")),
    "looped-depthwise-residual": (1, 40, 40, (9, 11), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 40, None, "nchwc/nchw",
                                  1, ("silu", "residual")),
}
for _i, _act in enumerate(ACT):
    _nm = _act if isinstance(_act, str) else _act[0]
    CASES[f"epilogue-{_nm}"] = (1, 16, 24, (6, 7), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, None,
                                "nchw/nchw" if _i % 2 else "nchwc/nchwc", 1, (_act, "residual") if _i % 3 == 0 else
                                ("residual", _act) if _i % 3 == 1 else (_act,))


def _case(cid):
    n, c, f, sp, k, s, d, p, g, extra, io, nt, epi = CASES[cid]
    il, ol = io.split("/")
    transposed = isinstance(f, tuple)
    rng = np.random.default_rng(abs(hash(cid)) % 2 ** 32)
    x = rng.standard_normal((n, c) + sp).astype(np.float32)
    if transposed:
        fg = f[1]
        w = rng.standard_normal((c, fg) + k).astype(np.float32)
        b = rng.standard_normal(g * fg).astype(np.float32)
        geom, tw = ConvGeometry.from_conv_transpose(x.shape, w.shape, s, d, p, extra, g)
        want, mag = ref_conv_transpose(x, w, b, s, d, p, extra, g)
        w_conv, force = tw(w), None
    else:
        w = rng.standard_normal((f, c // g) + k).astype(np.float32)
        b = rng.standard_normal(f).astype(np.float32)
        geom = ConvGeometry(n, c, f, g, sp, k, s, d, p)
        want, mag = ref_conv(x, w, b, s, d, p, g)
        w_conv, force = w, extra
    assert tuple(geom.out_spatial) == want.shape[2:]
    steps = tuple("residual" if e == "residual in y" else e for e in epi)
    kern = plan_conv(geom, epilogue=Epilogue(steps, in_place="residual in y" in epi), num_threads=nt, in_layout=il,
                     out_layout=ol, force=force, name="k_" + cid.replace("-", "_"))
    return dict(x=x, w=w_conv, b=b, want=want, mag=mag, kern=kern, epi=epi, rng=rng, geom=geom)


def _reduction_length(geom):
    return geom.channels // geom.group * math.prod(geom.kernel)


@pytest.mark.parametrize("cid", list(CASES))
def test_case(cid):
    c = _case(cid)
    kern = c["kern"]
    assert kern, kern
    assert cid.startswith("looped") <= ("epilogue looped" in kern.describe), kern.describe
    want, mag = c["want"], c["mag"]
    residual = {"residual", "residual in y"} & set(c["epi"])
    res = c["rng"].standard_normal(want.shape).astype(np.float32) if residual else None
    got = ConvRunner(kern, c["w"], c["b"]).run(c["x"], res).astype(np.float64)
    n = _reduction_length(c["geom"])
    err_scale = 2 * n * EPS32 * mag  # the conformance "conv" bound, before the epilogue
    for step in c["epi"]:
        if step in residual:
            want = want + res
            err_scale = err_scale + EPS32 * np.abs(want)
        else:
            f, lip, _ = ACT[step]
            want = f(want)
            err_scale = lip * err_scale + 8 * EPS32 * np.abs(want)
    if not c["epi"]:
        compare(got.astype(np.float32), want.astype(np.float32), "conv", f"conv engine case {cid}: "
                f"{kern.describe}", f"pytest tests/cpu/test_conv_engine.py -k {cid}", n=n, magnitude=mag)
    else:
        bad = np.abs(got - want) > err_scale + float(np.finfo(np.float32).tiny)
        assert not bad.any(), (f"{cid} ({kern.describe}): {int(bad.sum())} of {bad.size} out of tolerance, max "
                               f"abs error {np.abs(got - want).max():.3g}")


def test_thin_convs_use_both_threads_without_copies():
    """MobileNetV2's thin 1x1 convs read nchw in place and split over two threads (their flattened rows in row
    blocks); a depthwise conv copies per strip, its scratch one strip per thread, not the whole image."""
    pw = plan_conv(ConvGeometry(1, 32, 16, 1, (112, 112), (1, 1), (1, 1), (1, 1), (0,) * 4), num_threads=2)
    assert pw.details["icb"] == 1 and pw.scratch_bytes == pw.geometry.filters * 112 * 112 * 4, pw.describe
    assert pw.details["rblocks"] >= 2 and "2 thread(s)" in pw.describe, pw.describe
    dw = plan_conv(ConvGeometry(1, 96, 96, 96, (112, 112), (3, 3), (2, 2), (1, 1), (1,) * 4), num_threads=2,
                   out_layout="nchwc")
    assert 0 < dw.scratch_bytes <= 2 * (DW_STRIP_BYTES + 64), dw.describe
    assert dw.details["strip"] < 56 and "2 thread(s)" in dw.describe, dw.describe


def test_sigmoid_sweep_within_its_bound_and_equal_fused_and_unfused():
    """bench/bench_sigmoid.py over every 1009th float of [-104, 18] (2.2 million): the scalar glow_sigmoidf within
    2 ULPs of float64 sigmoid rounded to float (the conformance bound is 4) and the vector gce_sigmoid equal to it
    on every input (a fused epilogue must equal the unfused kernel bit for bit)."""
    bench = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench", "bench_sigmoid.py")
    out = subprocess.run([sys.executable, bench, "--step", "1009"], capture_output=True, text=True, timeout=300,
                         check=True).stdout
    m = re.search(r"over (\d+) floats .*: at most (\d+) ULP .* gce_sigmoid16 differs on (\d+)", out)
    assert m and int(m[1]) > 2_000_000, out
    assert int(m[2]) <= 2 and int(m[3]) == 0, out
    assert "VECTOR DIFFERS" not in out, out


def test_activations_match_numpy():
    """Each activation through a depthwise 1x1 conv of weight 1 (exact: one product by 1.0, zero bias) over a
    wide range of inputs, NaN and infinities included: within k ULPs of float64 numpy (k = 4, 8 for gelu_erf),
    or k * eps * (|f(v)| + |v f'(v)|) (the error any float32 evaluation inherits from rounding v), or below the
    smallest normal."""
    vals = np.concatenate([-np.logspace(-8, 2.1, 700), [0.0], np.logspace(-8, 2.1, 700), np.linspace(-9, 9, 141),
                           [np.nan, np.inf, -np.inf]]).astype(np.float32)
    c = 16
    px = -(-vals.size // c)
    x = np.zeros(c * px, np.float32)
    x[:vals.size] = vals
    x = x.reshape(1, c, 1, px)
    w = np.ones((c, 1, 1, 1), np.float32)
    kernels = {a: plan_conv(ConvGeometry(1, c, c, c, (1, px), (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
                            epilogue=Epilogue((a,)), name="act_" + (a if isinstance(a, str) else a[0]))
               for a in ACT}
    lib = compile_library(list(kernels.values()))
    for a, k in kernels.items():
        got = ConvRunner(k, w, np.zeros(c, np.float32), lib=lib).run(x).reshape(-1)[:vals.size]
        with np.errstate(all="ignore"):
            want = ACT[a][0](vals.astype(np.float64)).astype(np.float32)
            v64 = vals.astype(np.float64)
            h = 1e-6
            slope = np.abs(ACT[a][0](v64 * (1 + h)) - ACT[a][0](v64 * (1 - h))) / (2 * h)  # |v f'(v)|
        both_nan = np.isnan(got) & np.isnan(want)
        allowed = ACT[a][2] * EPS32 * (np.abs(want) + np.nan_to_num(slope)) + np.finfo(np.float32).tiny
        ok = both_nan | (ulp_distance(got, want) <= ACT[a][2]) | (np.abs(got.astype(np.float64) - want) <= allowed)
        assert ok.all(), (a, vals[~ok][:5], got[~ok][:5], want[~ok][:5])


def test_layout_kernels_roundtrip():
    rng = np.random.default_rng(5)
    cb = host_target().cb
    for shape in ((2, 37, 5, 19), (1, 16, 40), (1, 3, 33, 2)):
        x = rng.standard_normal(shape).astype(np.float32)
        to_blk = layout_kernel(shape, "nchw", "nchwc", num_threads=2, name="lay_in")
        back = layout_kernel(shape, "nchwc", "nchw", num_threads=2, name="lay_out")
        lib = compile_library([to_blk, back])
        yb = run_layout(to_blk, x, lib)
        assert np.array_equal(yb, blocked(x, cb))  # zero lanes past C included
        assert np.array_equal(run_layout(back, yb, lib), x)
        assert np.array_equal(unblocked(yb, shape[1]), x)


def test_unsupported_and_errors_say_why():
    g3 = ConvGeometry(1, 4, 4, 1, (4, 4, 4), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1,) * 6)
    r = plan_conv(g3)
    assert isinstance(r, Unsupported) and "3-d" in r.reason
    g2 = ConvGeometry(1, 4, 4, 1, (4, 4), (3, 3), (1, 1), (1, 1), (1,) * 4)
    r = plan_conv(g2, dtype="float16")
    assert isinstance(r, Unsupported) and "float32" in r.reason
    with pytest.raises(ConvEngineError, match="epilogue step"):
        Epilogue(("tanhh",))
    with pytest.raises(ConvEngineError, match="at most one residual"):
        Epilogue(("residual", "residual"))
    with pytest.raises(ConvEngineError, match="needs a residual"):
        Epilogue(("relu",), in_place=True)
    g16 = ConvGeometry(1, 16, 16, 1, (24, 24), (3, 3), (1, 1), (1, 1), (1,) * 4)
    dw16 = ConvGeometry(1, 16, 16, 16, (8, 8), (3, 3), (1, 1), (1, 1), (1,) * 4)
    for geom, force in ((g16, None), (g16, {"algorithm": "winograd2"}), (dw16, None)):
        r = plan_conv(geom, epilogue=Epilogue(("residual",), in_place=True), force=force)
        assert isinstance(r, Unsupported) and "direct kernel only" in r.reason
    assert plan_conv(g16, epilogue=Epilogue(("residual",), in_place=True), force={"algorithm": "direct"})
    with pytest.raises(ConvEngineError, match="layouts"):
        plan_conv(g2, in_layout="nwhc")
    with pytest.raises(ConvEngineError, match="C identifier"):
        plan_conv(g2, name="k; system(")
    with pytest.raises(ConvEngineError, match="accepted keys"):
        plan_conv(g2, force={"algorithm": "fft"})
    with pytest.raises(ConvEngineError, match="group"):
        ConvGeometry(1, 6, 4, 4, (4, 4), (3, 3), (1, 1), (1, 1), (1,) * 4)


def test_winograd_accuracy_within_conformance_bound():
    """F(4x4, 3x3) and F(2x2, 3x3) on inputs spanning six orders of magnitude inside a tile, at 16 and 64
    channels: the error stays within the conformance conv bound (2 * n * eps * sum |terms|) with margin; the
    chooser never picks Winograd below 16 channels, where it does not."""
    rng = np.random.default_rng(11)
    worst = {}
    ks = {}
    data = {}
    for c in (16, 64):
        geom = ConvGeometry(1, c, 16, 1, (12, 12), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))
        x = (rng.standard_normal((1, c, 12, 12)) * 10 ** rng.uniform(-3, 3, (1, c, 12, 12))).astype(np.float32)
        w = rng.standard_normal((16, c, 3, 3)).astype(np.float32)
        b = np.zeros(16, np.float32)
        data[c] = (x, w, b, ref_conv(x, w, b, (1, 1), (1, 1), (1, 1, 1, 1), 1))
        for m in (2, 4):
            ks[c, m] = plan_conv(geom, force={"algorithm": f"winograd{m}"}, name=f"wacc_{c}_{m}")
    lib = compile_library(list(ks.values()))
    for (c, m), k in ks.items():
        x, w, b, (want, mag) = data[c]
        got = ConvRunner(k, w, b, lib=lib).run(x).astype(np.float64)
        worst[c, m] = float((np.abs(got - want) / (c * 9 * EPS32 * mag)).max())
    assert max(worst.values()) < 1.0, worst  # the suite allows 2.0
    assert plan_conv(ConvGeometry(1, 8, 16, 1, (32, 32), (3, 3), (1, 1), (1, 1), (1,) * 4)).algorithm == "direct"


def test_padded_conv_folds_interior_pad():
    """A zero `pad` with interior (ConvTranspose's lowering) feeding a stride-1 conv, as one kernel reading the
    unpadded input: against the numpy pad (zeros inserted) and the reference conv."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 8, 5, 6)).astype(np.float32)
    w = rng.standard_normal((12, 8, 3, 4)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    pad_pads, interior, conv_pads = [0, 0, 2, 1, 0, 0, 1, 3], [0, 0, 1, 2], [1, 0, 0, 2]
    xp = np.zeros((2, 8, 2 + 4 * 2 + 1 + 1, 1 + 5 * 3 + 1 + 3), np.float32)
    xp[:, :, 2:2 + 9:2, 1:1 + 16:3] = x
    want, mag = ref_conv(xp, w, b, (1, 1), (1, 1), conv_pads, 1)
    geom = ConvGeometry.from_padded_conv(x.shape, pad_pads, interior, w.shape, (1, 1), (1, 1), conv_pads)
    kern = plan_conv(geom, num_threads=2)
    got = ConvRunner(kern, w, b).run(x)
    compare(got, want.astype(np.float32), "conv", kern.describe, "pytest tests/cpu/test_conv_engine.py -k padded",
            n=8 * 12, magnitude=mag)
    with pytest.raises(ConvEngineError, match="only spatial padding"):
        ConvGeometry.from_padded_conv(x.shape, [0, 1, 0, 0, 0, 0, 0, 0], None, w.shape, (1, 1), (1, 1), [0] * 4)


def test_default_names_identify_the_source():
    g = ConvGeometry(1, 16, 16, 1, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))
    a, b = plan_conv(g, num_threads=2), plan_conv(g, num_threads=2)
    c = plan_conv(g, num_threads=2, epilogue=Epilogue(("relu",)))
    assert a.name == b.name and a.source == b.source and a.name != c.name and a.name.startswith("gce_")


#: (target the blocking is planned for, compiler flags replacing -march=native): the portable paths
PORTABLE = {
    "generic-x86-64": (None, ["-march=x86-64", "-mtune=generic"]),
    "avx2-cb8": (Target("avx2", 8, 16), ["-march=x86-64", "-mavx2", "-mfma"]),
    "sse-cb8": (Target("sse", 4, 16), ["-march=x86-64"]),
}


@pytest.mark.parametrize("port", list(PORTABLE))
def test_portable_builds(port):
    """The kernels compiled without AVX-512 (SSE2 only, or AVX2/FMA with 8-lane blocks): vector extensions split
    into the target's registers, the AVX-512 transposes fall back to loops; same results within tolerance."""
    target, march = PORTABLE[port]
    flags = [f for f in FLAGS if not f.startswith("-march")] + march
    rng = np.random.default_rng(3)
    cases = [((1, 20, 24, (9, 10), (3, 3), (2, 1), (1, 1), (1, 1, 1, 1), 1), None, ("gelu_erf",)),
             ((2, 16, 16, (11, 12), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1), {"algorithm": "winograd4"}, ("silu",)),
             ((1, 24, 24, (9, 9), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 24), None, ("relu",)),
             ((1, 3, 16, (17, 18), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1), None, ())]
    kernels, data = [], []
    for i, ((n, c, f, sp, k, s, d, p, g), force, epi) in enumerate(cases):
        geom = ConvGeometry(n, c, f, g, sp, k, s, d, p)
        kernels.append(plan_conv(geom, epilogue=Epilogue(epi), num_threads=2, target=target, force=force,
                                 name=f"port{i}"))
        x = rng.standard_normal((n, c) + sp).astype(np.float32)
        w = rng.standard_normal((f, c // g) + k).astype(np.float32)
        b = rng.standard_normal(f).astype(np.float32)
        data.append((x, w, b, *ref_conv(x, w, b, s, d, p, g), epi))
    lib = compile_library(kernels, flags=flags)
    for kern, (x, w, b, want, mag, epi) in zip(kernels, data):
        got = ConvRunner(kern, w, b, lib=lib).run(x).astype(np.float64)
        scale = 2 * _reduction_length(kern.geometry) * EPS32 * mag
        for step in epi:
            f_, lip, _ = ACT[step]
            want, scale = f_(want), lip * scale + 8 * EPS32 * np.abs(f_(want))
        assert kern.cb == (target or host_target()).cb
        assert (np.abs(got - want) <= scale + 1e-30).all(), (port, kern.describe, np.abs(got - want).max())
