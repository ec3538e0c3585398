"""requant="fixed_point": the quantized primitives' integer-only requantization (TOSA RESCALE, scale32).

The expectations are written here from the TOSA specification with Python integers (frexp, round half away from
zero, (v * m + 2^(shift-1)) >> shift), never from glow_core's own helpers; the float32 mode stays what it was
(checked against onnxruntime on a QDQ model)."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import glow_core
from glow_core.errors import GlowError
from glow_core.ops.registry import get_primitive


def tosa_multiplier(real: float) -> tuple[int, int]:
    """TOSA scale32 (MLIR computeMultiplierAndShiftTosaScale32), in Python floats and integers."""
    mant, exp = math.frexp(real)
    m = int(math.floor(mant * (1 << 31) + 0.5))
    if m == 1 << 31:
        m, exp = m // 2, exp + 1
    shift = 31 - exp
    if shift > 62:
        m >>= min(31, shift - 62)
        shift = 62
    return m, shift


def scale(v: int, real: float) -> int:
    m, s = tosa_multiplier(real)
    return (v * m + (1 << (s - 1))) >> s


def sat(v: int, dt: str, lo=None, hi=None) -> int:
    info = np.iinfo(np.dtype(dt))
    a, b = int(info.min), int(info.max)
    a = a if lo is None else max(a, lo)
    b = b if hi is None else min(b, hi)
    return min(max(v, a), b)


def run(op, arrays, **attrs):
    p = get_primitive(op)
    return p.run(arrays, p.normalize_attrs(attrs, "test"))[0]


@pytest.mark.parametrize("real,want", [(0.5, (1 << 30, 31)), (1.0, (1 << 30, 30)), (0.25, (1 << 30, 32)),
                                       (1e-12, None), (0.0123, None)])
def test_multiplier_derivation(real, want):
    from glow_core.ops.primitives.quantized import fixed_point_multiplier
    got = fixed_point_multiplier(real)
    assert got == (want or tosa_multiplier(real))
    m, s = got
    assert 0 <= m < 1 << 31 and 2 <= s <= 62
    if real > 1e-9:
        assert abs(m * 2.0 ** -s - real) <= real * 2.0 ** -30


def test_multiplier_too_large_is_an_error():
    from glow_core.ops.primitives.quantized import fixed_point_multiplier
    with pytest.raises(GlowError, match="too large"):
        fixed_point_multiplier(2.0 ** 30)


def test_rescale_rounds_half_up_on_ties():
    # in_scale / out_scale = 0.5: x - in_offset = -3..3 -> -1.5 -> -1, -0.5 -> 0, 0.5 -> 1, 1.5 -> 2
    x = np.arange(-3, 4, dtype=np.int8)
    got = run("rescale", [x], in_scale=0.5, in_offset=0, out_scale=1.0, out_offset=0, out_dtype="int8",
              requant="fixed_point")
    assert got.tolist() == [-1, -1, 0, 0, 1, 1, 2]
    flt = run("rescale", [x], in_scale=0.5, in_offset=0, out_scale=1.0, out_offset=0, out_dtype="int8")
    assert flt.tolist() == [-2, -1, -0, 0, 0, 1, 2]  # float32 mode: half to even, unchanged


def test_qconv_matches_the_spec_per_channel():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (1, 6, 7, 7)).astype(np.uint8)
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    bias = rng.integers(-5000, 5000, 4).astype(np.int32)
    ws = np.array([0.011, 0.0023, 0.031, 0.0007], np.float32)
    wo = np.zeros(4, np.int32)
    attrs = dict(strides=[2, 1], dilations=[1, 2], pads=[1, 2, 0, 1], group=2, x_scale=0.02, x_offset=128,
                 out_scale=0.05, out_offset=-3, out_dtype="int8", clamp_min=-100, clamp_max=90)
    got = run("qconv", [x, w, bias, ws, wo], **attrs, requant="fixed_point")
    acc = run("qconv", [x, w, bias, ws, wo], **{**attrs, "out_dtype": "int32", "clamp_min": None,
                                                 "clamp_max": None})
    want = np.empty_like(got)
    for idx in np.ndindex(*acc.shape):
        f = idx[1]
        real = float(np.float32(0.02)) * float(ws[f]) / 0.05
        want[idx] = sat(scale(int(acc[idx]), real) - 3, "int8", -100, 90)
    np.testing.assert_array_equal(got, want)


def test_qadd_qmul_qavg_pool_match_the_spec():
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, 300).astype(np.int8)
    b = rng.integers(0, 256, 300).astype(np.uint8)
    att = dict(a_scale=0.031, a_offset=-4, b_scale=0.017, b_offset=120, out_scale=0.045, out_offset=7,
               out_dtype="int8", requant="fixed_point")
    got = run("qadd", [a, b], **att)
    twice = 2 * max(0.031, 0.017)
    want = [sat(scale(scale((int(p) + 4) << 20, 0.031 / twice) + scale((int(q) - 120) << 20, 0.017 / twice),
                      twice / (2 ** 20 * 0.045)) + 7, "int8") for p, q in zip(a, b)]
    assert got.tolist() == want
    got = run("qmul", [a, b], **att)
    want = [sat(scale((int(p) + 4) * (int(q) - 120), 0.031 * 0.017 / 0.045) + 7, "int8") for p, q in zip(a, b)]
    assert got.tolist() == want
    x = rng.integers(-128, 128, (1, 2, 5, 5)).astype(np.int8)
    got = run("qavg_pool", [x], kernel=[3, 3], strides=[2, 2], dilations=[1, 1], pads=[1, 1, 1, 1],
              count_include_pad=0, x_scale=0.1, x_offset=3, out_scale=0.07, out_offset=-2, out_dtype="int8",
              requant="fixed_point")
    for n, c, i, j in np.ndindex(*got.shape):
        vals = [int(x[n, c, r, s]) - 3 for r in range(2 * i - 1, 2 * i + 2) for s in range(2 * j - 1, 2 * j + 2)
                if 0 <= r < 5 and 0 <= s < 5]
        assert got[n, c, i, j] == sat(scale(sum(vals), 0.1 / (0.07 * len(vals))) - 2, "int8")


def test_int16_products_are_exact():
    a = np.array([32767, -32768, 30000], np.int16)
    b = np.array([-32768, -32768, 29999], np.int16)
    got = run("qmul", [a, b], a_scale=1.0, a_offset=0, b_scale=1.0, b_offset=0, out_scale=2.0 ** 20,
              out_offset=0, out_dtype="int16", requant="fixed_point")
    assert got.tolist() == [sat(scale(int(p) * int(q), 2.0 ** -20), "int16") for p, q in zip(a, b)]


def test_bad_mode_is_refused():
    x = np.zeros(3, np.int8)
    with pytest.raises(GlowError, match="requant"):
        run("rescale", [x], in_scale=0.5, in_offset=0, out_scale=1.0, out_offset=0, out_dtype="int8",
            requant="float16")
    with pytest.raises(GlowError, match="requant="):
        glow_core.compile(_qdq_conv_model(), "interpreter", requant="fixed")


def _qdq_conv_model() -> onnx.ModelProto:
    """A float conv + relu between QuantizeLinear/DequantizeLinear pairs, per-channel weights (as
    onnxruntime's quantize_static writes them)."""
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)
    ws = (rng.random(8) * 0.01 + 0.001).astype(np.float32)
    inits = [helper.make_tensor("xs", TensorProto.FLOAT, [], [0.02]),
             helper.make_tensor("xz", TensorProto.UINT8, [], [128]),
             helper.make_tensor("w", TensorProto.INT8, w.shape, w.reshape(-1).tolist()),
             helper.make_tensor("ws", TensorProto.FLOAT, [8], ws.tolist()),
             helper.make_tensor("wz", TensorProto.INT8, [8], [0] * 8),
             helper.make_tensor("b", TensorProto.INT32, [8], rng.integers(-2000, 2000, 8).tolist()),
             helper.make_tensor("bs", TensorProto.FLOAT, [8], (ws * np.float32(0.02)).tolist()),
             helper.make_tensor("bz", TensorProto.INT32, [8], [0] * 8),
             helper.make_tensor("ys", TensorProto.FLOAT, [], [0.03]),
             helper.make_tensor("yz", TensorProto.UINT8, [], [0])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    g = helper.make_graph(nodes, "qdq_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 9, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 9, 9])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_compile_option_reaches_the_interpreter():
    """float32 (default) equals onnxruntime bit for bit; fixed_point stays within 1 LSB of it and its integers are
    the spec's requantization of the accumulators."""
    ort = pytest.importorskip("onnxruntime")
    m = _qdq_conv_model()
    x = np.random.default_rng(4).uniform(-2.5, 2.5, (1, 4, 9, 9)).astype(np.float32)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    flt = glow_core.compile(m, "interpreter")
    np.testing.assert_array_equal(flt.run({"x": x})["y"], want)
    fix = glow_core.compile(m, "interpreter", requant="fixed_point")
    got = fix.run({"x": x})["y"]
    qconvs = [i for i in fix.ir.code if i.op == "qconv"]
    assert qconvs and all(i.attrs["requant"] == "fixed_point" for i in qconvs)
    assert np.abs(np.rint(got / 0.03) - np.rint(want / 0.03)).max() <= 1
    # the integers, from the accumulators of the float32-mode int32 conv (same inputs): the spec's requantization
    xq = np.clip(np.rint(x / np.float32(0.02)) + 128, 0, 255).astype(np.uint8)
    init = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    acc = run("qconv", [xq, init["w"], init["b"], init["ws"], init["wz"].astype(np.int32)], strides=[1, 1],
              dilations=[1, 1], pads=[1, 1, 1, 1], x_scale=0.02, x_offset=128, out_scale=1.0, out_offset=0,
              out_dtype="int32")
    want_q = np.empty(acc.shape, np.int64)
    for idx in np.ndindex(*acc.shape):
        real = float(np.float32(0.02)) * float(init["ws"][idx[1]]) / float(np.float32(0.03))
        want_q[idx] = sat(scale(int(acc[idx]), real), "uint8")
    np.testing.assert_array_equal(np.rint(got / np.float32(0.03)).astype(np.int64), want_q)


def test_cpu_refuses_fixed_point_with_a_reason():
    from glow_core.backend import NodeInfo
    from glow_core.discovery import get_backend
    cpu = get_backend("cpu")
    info = NodeInfo("qadd", ("int8", "int8"), ("int8",), {"requant": "fixed_point"})
    answer = cpu.is_op_supported(info)
    assert not answer and "fixed_point" in answer.reason


def test_required_options_conflict_is_an_error():
    from glow_core.api import with_required_options
    from glow_core.backend import Backend

    class Needs(Backend):
        name = "needs"

        def is_op_supported(self, node_info):
            return True

        def compile(self, function, options):
            raise AssertionError

        def required_options(self):
            return {"requant": "fixed_point"}
    assert with_required_options({}, [Needs()]) == {"requant": "fixed_point"}
    with pytest.raises(GlowError, match="requires the compile option requant='fixed_point'"):
        with_required_options({"requant": "float32"}, [Needs()])


def test_emulation_of_a_refused_fixed_point_qconv_is_exact():
    """A QLinearConv the cpu backend refuses in fixed_point mode is emulated with int64 primitives: bit-exact with
    the interpreter's fixed_point qconv (on a scale whose accumulators land on rounding ties)."""
    rng = np.random.default_rng(5)
    w = rng.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)
    inits = [helper.make_tensor("xs", TensorProto.FLOAT, [], [0.5]),
             helper.make_tensor("xz", TensorProto.UINT8, [], [128]),
             helper.make_tensor("w", TensorProto.INT8, w.shape, w.reshape(-1).tolist()),
             helper.make_tensor("ws", TensorProto.FLOAT, [8], [0.25] * 4 + [0.0625] * 4),
             helper.make_tensor("wz", TensorProto.INT8, [8], [0] * 8),
             helper.make_tensor("ys", TensorProto.FLOAT, [], [4.0]),
             helper.make_tensor("yz", TensorProto.UINT8, [], [100])]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1, 1, 1, 1])
    g = helper.make_graph([node], "qlinear", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 9, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 8, 9, 9])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.integers(120, 137, (1, 4, 9, 9)).astype(np.uint8)
    ref = glow_core.compile(m, "interpreter", requant="fixed_point").run({"x": x})["y"]
    flt = glow_core.compile(m, "interpreter").run({"x": x})["y"]
    assert (ref != flt).any()  # ties: half up (fixed point) vs half to even (float32)
    cm = glow_core.compile(m, "cpu", requant="fixed_point")
    assert [e[1] for e in cm.last.stats["quantization"]["emulated"]] == ["qconv"]
    np.testing.assert_array_equal(cm.run({"x": x})["y"], ref)
