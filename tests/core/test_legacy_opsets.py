"""Models of ai.onnx opsets 1-6: upgraded to opset 7 by onnx's version converter before import
(glow_core/importer/legacy.py), checked against numpy written from the old opsets' specifications."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import glow_core
from glow_core.errors import GlowError
from glow_core.importer import legacy


def model(nodes, inputs, outputs, opset, inits=()):
    g = helper.make_graph(nodes, "legacy", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 3
    return m


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_gemm_6_broadcast_attribute(backend):
    """Gemm-6's ``broadcast`` attribute (C of shape [N] added to every row), as torch's old nn.Linear export."""
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((4, 10), (8, 10), (8,)))
    m = model([helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=1.0, beta=1.0, broadcast=1, transB=1)],
              [("a", [4, 10])], ["y"], 6, [onnx.numpy_helper.from_array(b, "b"), onnx.numpy_helper.from_array(c, "c")])
    got = glow_core.compile(m, backend).run({"a": a})["y"]
    np.testing.assert_allclose(got, (a.astype(np.float64) @ b.T.astype(np.float64) + c), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rank", [3, 4, 5])
def test_prelu_6_slope_per_channel(rank):
    """PRelu-6 applies a 1-d slope of C elements per channel (axis 1), not along the last axis."""
    rng = np.random.default_rng(rank)
    shape = [2, 3, 4, 5, 6][:rank]
    x = rng.standard_normal(shape).astype(np.float32)
    slope = np.array([0.25, -0.5, 2.0], np.float32)
    m = model([helper.make_node("PRelu", ["x", "s"], ["y"])], [("x", shape)], ["y"], 6,
              [onnx.numpy_helper.from_array(slope, "s")])
    got = glow_core.compile(m, "interpreter").run({"x": x})["y"]
    per_channel = slope.reshape([3] + [1] * (rank - 2))
    np.testing.assert_array_equal(got, np.where(x < 0, x * per_channel, x))


def test_add_6_legacy_broadcast_axis():
    """Add-6 with ``broadcast=1, axis=1``: B's dims align with A's from axis 1 (legacy broadcasting)."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 4, 5)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    m = model([helper.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=1)], [("a", [2, 3, 4, 5]), ("b", [3, 4])],
              ["y"], 6)
    got = glow_core.compile(m, "interpreter").run({"a": a, "b": b})["y"]
    np.testing.assert_array_equal(got, a + b[None, :, :, None])


@pytest.mark.parametrize("opset", [7, 8])
def test_upsample_scales_attribute(opset):
    """Upsample-7/8 take their scales as an attribute (an input from opset 9): nearest, floor(x / scale)."""
    x = np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3)
    m = model([helper.make_node("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 2.0, 3.0])], [("x", [1, 1, 2, 3])],
              ["y"], opset)
    got = glow_core.compile(m, "interpreter").run({"x": x})["y"]
    np.testing.assert_array_equal(got, x.repeat(2, axis=2).repeat(3, axis=3))


def test_upgrade_leaves_the_callers_model_alone():
    m = model([helper.make_node("PRelu", ["x", "s"], ["y"])], [("x", [2, 3, 4]), ("s", [3])], ["y"], 6)
    before = m.SerializeToString()
    up, why = legacy.upgrade(m)
    assert why == "" and legacy.ai_onnx_opset(up) == legacy.NATIVE_MIN_OPSET
    assert [n.op_type for n in up.graph.node] == ["Unsqueeze", "PRelu"]
    assert m.SerializeToString() == before


def test_no_adapter_imports_at_the_models_opset_and_errors_say_why():
    """Split-1 has no adapter in the converter: the model is imported at opset 1 (the importer reads Split-1's
    schema); an error in such a model names the node and gives the converter's reason."""
    m = model([helper.make_node("Split", ["a"], ["y", "z"])], [("a", [4])], ["y", "z"], 1)
    got = glow_core.compile(m, "interpreter").run({"a": np.arange(4, dtype=np.float32)})
    np.testing.assert_array_equal(got["y"], [0, 1])
    bad = model([helper.make_node("Split", ["a"], ["y", "z"]), helper.make_node("NoSuchOp", ["y"], ["w"])],
                [("a", [4])], ["w", "z"], 1)
    with pytest.raises(GlowError, match=r"NoSuchOp.*version converter could not upgrade this ai.onnx opset 1 "
                                        r"model to opset 7: No Adapter From Version \$1 for Split"):
        glow_core.compile(bad, "interpreter")
