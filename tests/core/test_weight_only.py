"""glow_core.quantization.weight_only: MatMul/Gemm with constant weights -> com.microsoft MatMulNBits that
onnxruntime runs; each weight within half a quantization step (onnxruntime dequantizes it: the product with an
identity); models quantized by onnxruntime's own MatMulNBitsQuantizer imported and run like onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import glow_core
from glow_core.errors import GlowError
from glow_core.quantization import weight_only

ort = pytest.importorskip("onnxruntime")
F = onnx.TensorProto.FLOAT


def ort_run(model, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def mlp(seed=0, k=96, n=40, m=24, dt=np.float32):
    """MatMul (3-D input) -> Relu -> Gemm(transB, bias) -> MatMul whose weight is read again (as A of another
    MatMul), and a MatMul whose B is a graph input (not a constant: left alone)."""
    r = np.random.default_rng(seed)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    inits = [numpy_helper.from_array(a.astype(dt), nm) for nm, a in (
        ("w1", r.standard_normal((k, n))), ("w2t", r.standard_normal((m, n))), ("b2", r.standard_normal(m)),
        ("w3", r.standard_normal((m, m))))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"), helper.make_node("Relu", ["h"], ["a"]),
             helper.make_node("Reshape", ["a", "flat"], ["a2"]),
             helper.make_node("Gemm", ["a2", "w2t", "b2"], ["g"], transB=1, name="fc2"),
             helper.make_node("MatMul", ["g", "w3"], ["y"], name="fc3"),
             helper.make_node("MatMul", ["w3", "w3"], ["w3sq"], name="reads_w3"),
             helper.make_node("MatMul", ["g", "rt"], ["z"], name="runtime_b")]
    inits.append(numpy_helper.from_array(np.array([-1, n], np.int64), "flat"))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", t, [2, 3, k]),
                                         helper.make_tensor_value_info("rt", t, [m, 5])],
                          [helper.make_tensor_value_info(o, t, None) for o in ("y", "w3sq", "z")], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model, {"x": r.standard_normal((2, 3, k)).astype(dt), "rt": r.standard_normal((m, 5)).astype(dt)}


def dequantized_by_onnxruntime(q, k):
    """The weight [K, N] onnxruntime reads from MatMulNBits node ``q`` (of a weight_only model): its product
    with the identity."""
    node = next(n for n in q.graph.node if n.op_type == "MatMulNBits")
    inits = {t.name: t for t in q.graph.initializer}
    g = helper.make_graph([node], "deq", [helper.make_tensor_value_info(node.input[0], F, [k, k])],
                          [helper.make_tensor_value_info(node.output[0], F, None)],
                          [inits[x] for x in node.input[1:] if x])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 9
    return ort_run(m, {node.input[0]: np.eye(k, dtype=np.float32)})[0]


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block_size", [32, 64, 128])
@pytest.mark.parametrize("symmetric", [True, False])
def test_each_weight_within_half_a_step(bits, block_size, symmetric):
    k, n = 100, 12  # K not a multiple of the block
    r = np.random.default_rng(bits * block_size)
    w = r.standard_normal((k, n)).astype(np.float32)
    w[:, 3] = 0  # an all-zero column: scale 1, zeros back
    w[:40, 5] = np.abs(w[:40, 5])  # one-signed blocks (asymmetric: the zero point at an end)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "one",
                          [helper.make_tensor_value_info("x", F, [1, k])], [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(w, "w")])
    q = weight_only(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), bits, block_size, symmetric)
    deq = dequantized_by_onnxruntime(q, k)
    half = 1 << (bits - 1)
    for j in range(0, k, block_size):
        blk = w[j:j + block_size]
        if symmetric:  # steps of max|w| / 2^(bits-1); the top level of the far value's opposite sign is cut
            step = np.abs(blk).max(0) / half
            allowed = np.where(np.abs(blk) >= (half - 0.5) * step * (1 - 1e-6), step, step / 2)
        else:  # [min(w, 0), max(w, 0)] in 2^bits - 1 steps
            allowed = (np.maximum(blk.max(0), 0) - np.minimum(blk.min(0), 0)) / (2 * half - 1) / 2
        assert np.all(np.abs(deq[j:j + block_size] - blk) <= allowed * (1 + 1e-5) + 1e-7)
    assert np.all(deq[:, 3] == 0)


@pytest.mark.parametrize("bits, block_size, symmetric", [(4, 32, True), (4, 128, False), (8, 64, True),
                                                         (8, 32, False)])
def test_quantized_model_runs_on_onnxruntime_and_glow_alike(bits, block_size, symmetric):
    model, feeds = mlp()
    q = weight_only(model, bits, block_size, symmetric)
    ops = [n.op_type for n in q.graph.node]
    assert ops.count("MatMulNBits") == 4 and ops.count("MatMul") == 1  # all but the runtime B
    names = {t.name for t in q.graph.initializer}
    assert "w1" not in names and "w2t" not in names and "w3" in names  # w3 is still read (as A of reads_w3)
    want = ort_run(q, feeds)
    got = glow_core.compile(q, "interpreter").run(feeds)
    for name, w in zip(("y", "w3sq", "z"), want):
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
    base = ort_run(model, feeds)[0].astype(np.float64)
    sqnr = 10 * np.log10(np.sum(base ** 2) / np.sum((want[0] - base) ** 2))
    assert sqnr > (12 if bits == 4 else 35)  # the quantization's own error, for scale


def test_float16_weights():
    model, feeds = mlp(dt=np.float16)
    q = weight_only(model, 4, 32)
    want = ort_run(q, feeds)[0]
    got = glow_core.compile(q, "interpreter").run(feeds)["y"]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=2e-2 * np.abs(want).max())


@pytest.mark.parametrize("bits, block_size, symmetric", [(4, 32, True), (4, 128, False), (8, 32, False)])
def test_onnxruntime_quantizer_models_import(bits, block_size, symmetric):
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    model, feeds = mlp(seed=3, k=128, n=64, m=32)
    qz = MatMulNBitsQuantizer(model, bits=bits, block_size=block_size, is_symmetric=symmetric)
    qz.process()
    q = qz.model.model
    assert any(n.op_type == "MatMulNBits" for n in q.graph.node)
    want = ort_run(q, feeds)
    got = glow_core.compile(q, "interpreter").run(feeds)
    for name, w in zip(("y", "w3sq", "z"), want):
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5 * np.abs(w).max())


def test_arguments_are_checked():
    model, _ = mlp()
    with pytest.raises(GlowError, match="bits=3; accepted: 4, 8"):
        weight_only(model, bits=3)
    with pytest.raises(GlowError, match="block_size=24; accepted: a power of two of at least 16"):
        weight_only(model, block_size=24)
