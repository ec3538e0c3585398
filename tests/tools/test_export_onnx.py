"""``glowc dump MODEL --onnx FILE``: the lowered graph as a valid ONNX model of ``glow``-domain nodes, checked with
onnx.checker and against the source model's own weights, attributes and shapes."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from glow_tools import cli
from glow_conformance import example_models as models


def _dump(tmp_path, model, backend="interpreter", capsys=None):
    src, out = tmp_path / "m.onnx", tmp_path / "lowered.onnx"
    onnx.save(model, src)
    assert cli.main(["dump", str(src), "--backend", backend, "--onnx", str(out)]) == 0
    dumped = onnx.load(out)
    onnx.checker.check_model(dumped, full_check=True)
    return dumped


def _typed_names(g):
    return ({v.name for v in g.input} | {t.name for t in g.initializer} | {v.name for v in g.value_info}
            | {v.name for v in g.output})


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_cnn_dump_is_valid_onnx_with_the_models_weights(tmp_path, backend):
    src = models.cnn(seed=3)
    if backend == "cpu":
        pytest.importorskip("glow_cpu")
    g = _dump(tmp_path, src, backend).graph
    assert {(o.domain, o.version) for o in onnx.load(tmp_path / "lowered.onnx").opset_import} >= {("glow", 1)}
    assert all(n.domain == "glow" for n in g.node)
    # every value a node reads or writes has a dtype and a shape
    used = {x for n in g.node for x in [*n.input, *n.output] if x}
    assert used <= _typed_names(g)
    for vi in [*g.value_info, *g.input, *g.output]:
        assert vi.type.tensor_type.elem_type == TensorProto.FLOAT and vi.type.tensor_type.HasField("shape")
    # the source's input and output names and shapes stay
    assert [(v.name, [d.dim_value for d in v.type.tensor_type.shape.dim]) for v in g.input] == [("input", [1, 3, 28, 28])]
    assert [(v.name, [d.dim_value for d in v.type.tensor_type.shape.dim]) for v in g.output] == [("output", [1, 10])]
    # the conv is a glow.conv with the Conv node's attributes, reading the model's own weights
    src_w = {t.name: numpy_helper.to_array(t) for t in src.graph.initializer}
    src_conv = next(n for n in src.graph.node if n.op_type == "Conv")
    conv = next(n for n in g.node if n.op_type == "conv")
    attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    assert attrs["pads"] == list(next(a.ints for a in src_conv.attribute if a.name == "pads"))
    assert attrs["strides"] == [1, 1]  # the Conv node leaves it to ONNX's default
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    np.testing.assert_array_equal(inits[conv.input[1]], src_w[src_conv.input[1]])
    np.testing.assert_array_equal(inits[conv.input[2]], src_w[src_conv.input[2]])
    assert conv.doc_string == f"{16 * 28 * 28 * (2 * 27 + 1)} FLOPs"


def test_outputs_that_are_inputs_constants_or_repeated_get_copies(tmp_path):
    """An output that is a graph input, a constant, a value also read by a node, or listed twice."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["n"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3))],
                          [helper.make_tensor_value_info(nm, TensorProto.FLOAT, (2, 3)) for nm in ("x", "r", "n")]
                          + [helper.make_tensor_value_info("c", TensorProto.FLOAT, (2,))],
                          [helper.make_tensor("c", TensorProto.FLOAT, (2,), [1.0, 2.0])])
    dumped = _dump(tmp_path, helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])).graph
    assert [o.name for o in dumped.output] == ["x", "r", "n", "c"]
    writers = {o: n for n in dumped.node for o in n.output}
    assert writers["n"].op_type == "neg"  # a node result only output is named after the output
    assert writers["r"].op_type == "copy"  # also read by neg: copied, as the IR does
    assert "x" not in writers and "c" not in writers  # an input and an initializer are outputs as they are
    assert numpy_helper.to_array(next(t for t in dumped.initializer if t.name == "c")).tolist() == [1.0, 2.0]


def test_extended_op_and_attributes_of_every_kind(tmp_path):
    """TopK stays whole (an extended op) and keeps its attributes; a cast keeps its target dtype."""
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=0),
             helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 6))],
                          [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("f", TensorProto.FLOAT, None)],
                          [helper.make_tensor("k", TensorProto.INT64, (1,), [2])])
    dumped = _dump(tmp_path, helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])).graph
    ops = {n.op_type: n for n in dumped.node}
    assert {a.name: helper.get_attribute_value(a) for a in ops["TopK"].attribute}["largest"] == 0
    assert {a.name: helper.get_attribute_value(a) for a in ops["cast"].attribute}["to"] == b"float32"
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in [*dumped.value_info,
                                                                                   *dumped.output]}
    assert shapes["v"] == [4, 2] and shapes["f"] == [4, 2]


def test_dot_keeps_working(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(models.cnn(), src)
    assert cli.main(["dump", str(src), "--dot", str(tmp_path / "g.dot"), "--onnx", str(tmp_path / "g.onnx")]) == 0
    assert (tmp_path / "g.dot").read_text().startswith("digraph glow {")
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'g.dot'}" in out and f"wrote {tmp_path / 'g.onnx'}" in out
