"""The NPU backend: every claimed primitive bit-exact with its reference kernel in fixed-point mode (the
interpreter's arithmetic) over conv geometries, on the default scratchpads and on tiny ones that force channel
splits, tail tiles and many steps; the fused residual add; what it refuses and why; statistics, assembly and
trace."""
from __future__ import annotations

import numpy as np
import pytest

from glow_core.api import compile_graph
from glow_core.backend import NodeInfo
from glow_core.builder import Builder
from glow_core.errors import GlowError, MemoryLimitError
from glow_core.graph import Function
from glow_core.ops.registry import get_primitive
from glow_core.types import tensor_type_of
from glow_npu.backend import NpuBackend
from glow_npu.config import NpuConfig

TINY = NpuConfig(input_spm_bytes=4096, weight_spm_bytes=2048, acc_spm_bytes=8192)


def run_npu(prim, arrays, attrs, consts=(), cfg=None):
    fn = Function(f"t_{prim}")
    vals = [fn.constant(np.asarray(a), f"c{i}") if i in consts else fn.add_input(f"x{i}", tensor_type_of(a))
            for i, a in enumerate(arrays)]
    out = Builder(fn, where="test", fold=False, name="op").emit(prim, *vals, **attrs)
    fn.set_outputs([out], ["y"])
    res = compile_graph(fn, NpuBackend(cfg), {"optimize": False})
    got = res.compiled.execute({f"x{i}": a for i, a in enumerate(arrays) if i not in consts})["y"]
    return got, res.compiled


def reference(prim, arrays, attrs):
    p = get_primitive(prim)
    return p.run(arrays, p.normalize_attrs(attrs, prim))[0]


#: (input shape, weight shape, strides, dilations, pads, group, x dtype)
CONVS = [
    ((1, 8, 10, 10), (16, 8, 3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 1, "uint8"),
    ((2, 3, 17, 19), (20, 3, 7, 7), [2, 2], [1, 1], [3, 3, 3, 3], 1, "int8"),
    ((1, 32, 9, 9), (32, 1, 3, 3), [1, 2], [1, 1], [1, 0, 2, 1], 32, "uint8"),
    ((1, 12, 9, 11), (6, 4, 3, 2), [2, 1], [2, 3], [0, 2, 1, 1], 3, "int8"),
    ((1, 16, 6, 6), (32, 1, 3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 16, "int8"),  # channel multiplier 2
    ((1, 40, 7, 5), (24, 40, 1, 1), [1, 1], [1, 1], [0, 0, 0, 0], 1, "uint8"),
    ((1, 4, 5, 5), (6, 4, 1, 1), [1, 1], [1, 1], [2, 2, 2, 2], 1, "int8"),  # rows of padding only
    ((2, 3, 21), (5, 3, 4), [2], [3], [2, 1], 1, "uint8"),  # 1-D
    ((1, 4, 4, 5, 6), (4, 2, 2, 3, 2), [1, 2, 1], [2, 1, 2], [1, 0, 1, 0, 1, 1], 2, "int8"),  # 3-D
    # depthwise (the vector unit's path when its cost wins): dilated, 1-D, 3-D, batch 2 with more channels than lanes
    ((1, 24, 11, 9), (24, 1, 3, 3), [2, 1], [2, 2], [2, 1, 0, 2], 24, "int8"),
    ((1, 20, 30), (20, 1, 5), [1], [1], [2, 2], 20, "uint8"),
    ((1, 6, 4, 5, 6), (6, 1, 2, 3, 3), [1, 1, 2], [1, 1, 1], [0, 1, 1, 1, 1, 0], 6, "int8"),
    ((2, 72, 13, 13), (72, 1, 3, 3), [2, 2], [1, 1], [1, 1, 1, 1], 72, "uint8"),
]


def conv_case(xs, ws, st, dl, pd, g, xdt, seed=0, out="same"):
    rng = np.random.default_rng(seed)
    lo, hi = (0, 256) if xdt == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, xs).astype(xdt)
    w = rng.integers(-128, 128, ws).astype(np.int8)
    f = ws[0]
    arrays = [x, w, rng.integers(-3000, 3000, f).astype(np.int32), rng.uniform(0.002, 0.05, f).astype(np.float32),
              rng.integers(-5, 6, f).astype(np.int32)]
    k = int(np.prod(ws[1:]))
    attrs = dict(strides=st, dilations=dl, pads=pd, group=g, x_scale=0.02, x_offset=int(rng.integers(0, 20)),
                 out_scale=float(0.02 * 0.03 * np.sqrt(k) * 40), out_offset=int(rng.integers(0, 20)),
                 out_dtype=xdt if out == "same" else out, requant="fixed_point")
    return arrays, attrs


@pytest.mark.parametrize("cfg", [None, TINY], ids=["default_spm", "tiny_spm"])
@pytest.mark.parametrize("geo", CONVS, ids=lambda g: "x".join(map(str, g[1])) + f"_g{g[5]}_{g[6]}")
def test_qconv_bit_exact(geo, cfg):
    arrays, attrs = conv_case(*geo)
    got, _ = run_npu("qconv", arrays, attrs, consts=(1, 2, 3, 4), cfg=cfg)
    np.testing.assert_array_equal(got, reference("qconv", arrays, attrs))


def test_qconv_int32_accumulator_and_clamp():
    arrays, attrs = conv_case(*CONVS[0], out="int32")
    attrs.pop("requant")
    got, _ = run_npu("qconv", arrays, attrs, consts=(1, 2, 3, 4), cfg=TINY)
    np.testing.assert_array_equal(got, reference("qconv", arrays, attrs))
    arrays, attrs = conv_case(*CONVS[1], seed=3)
    attrs.update(clamp_min=-20, clamp_max=40)
    got, _ = run_npu("qconv", arrays, attrs, consts=(1, 2, 3, 4))
    np.testing.assert_array_equal(got, reference("qconv", arrays, attrs))


@pytest.mark.parametrize("b_const", [True, False])
def test_qmatmul_bit_exact(b_const):
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (37, 70)).astype(np.uint8)
    b = rng.integers(-128, 128, (70, 45)).astype(np.int8)
    arrays = [a, b, rng.integers(-2000, 2000, 45).astype(np.int32), rng.uniform(0.005, 0.05, 45).astype(np.float32),
              rng.integers(-6, 6, 45).astype(np.int32)]
    attrs = dict(a_scale=0.03, a_offset=9, out_scale=0.9, out_offset=-4, out_dtype="int8", requant="fixed_point")
    got, _ = run_npu("qmatmul", arrays, attrs, consts=(1, 2, 3, 4) if b_const else (2, 3, 4), cfg=TINY)
    np.testing.assert_array_equal(got, reference("qmatmul", arrays, attrs))


POOLS = [("max_pool", ((1, 20, 11, 13), [3, 3], [2, 2], [1, 1], [1, 1, 1, 1])),
         ("max_pool", ((2, 3, 9, 8, 7), [2, 2, 3], [1, 2, 1], [2, 1, 1], [0, 1, 1, 1, 0, 1])),
         ("qavg_pool", ((1, 20, 11, 13), [3, 3], [2, 2], [1, 1], [1, 1, 1, 1])),
         ("qavg_pool", ((2, 5, 17), [4], [3], [1], [2, 1])),
         ("qavg_pool", ((1, 70, 7, 7), [7, 7], [1, 1], [1, 1], [0, 0, 0, 0]))]


@pytest.mark.parametrize("prim,geo,cip", [(p, g, c) for p, g in POOLS for c in ((0, 1) if p == "qavg_pool" else (0,))])
def test_pools_bit_exact(prim, geo, cip):
    xs, k, st, dl, pd = geo
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, xs).astype(np.int8)
    if prim == "max_pool":
        attrs = dict(kernel=k, strides=st, dilations=dl, pads=pd)
    else:
        attrs = dict(kernel=k, strides=st, dilations=dl, pads=pd, count_include_pad=cip, x_scale=0.04, x_offset=-7,
                     out_scale=0.03, out_offset=5, out_dtype="int8", requant="fixed_point")
    got, _ = run_npu(prim, [x], attrs, cfg=TINY)
    np.testing.assert_array_equal(got, reference(prim, [x], attrs))


@pytest.mark.parametrize("prim", ["qadd", "qmul", "rescale", "max", "min"])
def test_elementwise_bit_exact(prim):
    rng = np.random.default_rng(3)
    shape = (2, 3, 37, 41)
    a = rng.integers(-128, 128, shape).astype(np.int8)
    b = rng.integers(0, 256, shape).astype(np.uint8) if prim in ("qadd", "qmul") else \
        rng.integers(-128, 128, shape).astype(np.int8)
    if prim in ("qadd", "qmul"):
        attrs = dict(a_scale=0.05, a_offset=-3, b_scale=0.02, b_offset=128, out_scale=0.07 * (40 if prim == "qmul"
                     else 1), out_offset=2, out_dtype="int8", clamp_max=100, requant="fixed_point")
        arrays = [a, b]
    elif prim == "rescale":
        attrs = dict(in_scale=0.05, in_offset=-3, out_scale=0.013, out_offset=200, out_dtype="uint8",
                     requant="fixed_point")
        arrays = [a]
    else:
        attrs, arrays = {}, [a, b]
    got, _ = run_npu(prim, arrays, attrs, cfg=TINY)
    np.testing.assert_array_equal(got, reference(prim, arrays, attrs))


def test_refusals_carry_reasons():
    npu = NpuBackend()
    cases = [NodeInfo("qconv", ("int8", "int8"), ("int8",), {"strides": [1, 1]}),  # float32 requantization
             NodeInfo("qadd", ("int16", "int16"), ("int16",), {"requant": "fixed_point"}),
             NodeInfo("exp", ("float32",), ("float32",), {}),
             NodeInfo("qmatmul", ("int8", "int8"), ("int8",), {"requant": "fixed_point"}, "",
                      ((2, 3, 4, 5), (2, 3, 5, 6)), ((2, 3, 4, 6),))]
    reasons = ["fixed point only", "8-bit integers", "runs on the fallback", "rank 4"]
    for info, why in zip(cases, reasons):
        answer = npu.is_op_supported(info)
        assert not answer and why in answer.reason
    assert npu.required_options() == {"requant": "fixed_point"}
    assert npu.is_op_supported(NodeInfo("qconv", ("uint8", "int8"), ("uint8",),
                                        {"strides": [1, 1], "requant": "fixed_point"}))


def test_stats_asm_and_trace():
    arrays, attrs = conv_case(*CONVS[0])
    _, fn = run_npu("qconv", arrays, attrs, consts=(1, 2, 3, 4), cfg=TINY)
    st = fn.stats()
    assert {"cycles", "macs", "mac_utilization", "dram_bytes", "layers"} <= set(st)
    (layer,) = st["layers"]
    assert {"name", "cycles", "bound_cycles"} <= set(layer)
    assert layer["macs"] == st["macs"] == 16 * 8 * 9 * 10 * 10
    assert 0 < st["mac_utilization"] <= 1
    assert layer["cycles"] >= layer["bound_cycles"] > 0
    assert "tile oh=" in layer["tiling"]
    asm = fn.asm()
    assert "GEMM" in asm and "LOAD" in asm and "pop_prev" in asm
    _, timings = fn.execute_timed({"x0": arrays[0]})
    assert {t[3] for t in timings} == {"load", "compute", "store"}
    assert all(t[2] > 0 and t[0].op == "qconv" for t in timings)


def test_dram_and_scratchpad_limits_are_errors():
    arrays, attrs = conv_case(*CONVS[0])
    with pytest.raises(MemoryLimitError, match="DRAM needs"):
        run_npu("qconv", arrays, attrs, consts=(1, 2, 3, 4), cfg=NpuConfig(dram_bytes=4096))
    with pytest.raises(MemoryLimitError, match="no tiling"):
        run_npu("qconv", arrays, attrs, consts=(1, 2, 3, 4), cfg=NpuConfig(input_spm_bytes=64, acc_spm_bytes=64))
    with pytest.raises(GlowError, match="npu_config"):
        NpuConfig.of(42)


def test_depthwise_runs_on_the_vector_unit_when_cheaper():
    """A MobileNet depthwise layer: the cost model picks the vector unit (a multiply-accumulate per tap, 32 lanes),
    and the simulated layer beats what the array could do at best on the block-diagonal GEMM (mac_cols useful MACs
    per cycle); bit-exact."""
    arrays, attrs = conv_case((1, 96, 28, 28), (96, 1, 3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 96, "uint8", seed=5)
    attrs.update(clamp_min=0, clamp_max=200)
    got, fn = run_npu("qconv", arrays, attrs, consts=(1, 2, 3, 4))
    np.testing.assert_array_equal(got, reference("qconv", arrays, attrs))
    (layer,) = fn.layers
    assert [type(job).__name__ for job, _ in layer.jobs] == ["DwJob"]
    st = fn.stats()
    cfg = NpuConfig()
    assert st["layers"][0]["cycles"] < layer.macs / cfg.mac_cols
    assert "DwJob tile" in fn.describe()


def test_a_job_builder_ignoring_the_residual_is_refused():
    """A device built on the NPU that replaces the qconv builder with one that drops the fused qadd gets a clear
    error, not a wrong answer."""
    import glow_core
    from glow_conformance import example_models
    from glow_core import quantization
    from glow_npu.backend import NpuFunction

    class Plain(NpuFunction):
        JOBS = {**NpuFunction.JOBS, "qconv": lambda fn, ins, fused, layer: fn._conv(ins, None, layer)}

    class Vendor(NpuBackend):
        name = "npu"
        FUNCTION = Plain

    m = example_models.resnet(seed=1, size=8, widths=(8,), blocks=1)
    x = {"input": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    prof = quantization.profile(m, [x])
    with pytest.raises(GlowError, match="ignored the residual .* instruction_groups"):
        glow_core.compile(m, backend=[Vendor(), "cpu"], quantize=prof)
