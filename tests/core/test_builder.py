"""The builder layer: the one node-building path, its error mapping, subgraph bodies as Functions, and the
extended ops' shape rules (checked against ONNX's own shape inference, an independent implementation)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core import errors
from glow_core.importer.onnx_import import import_model
from glow_core.ops.registry import OPS, onnx_op

F, I64 = TensorProto.FLOAT, TensorProto.INT64
vi = helper.make_tensor_value_info


def model(nodes, inputs, outputs, inits=(), opset=17):
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)])


@pytest.fixture
def buggy_op():
    """An ONNX op type whose lowering has a bug (a KeyError no input should cause)."""
    @onnx_op("GlowTestBuggy")
    def buggy(b, x):
        return {}["missing"]
    try:
        yield "GlowTestBuggy"
    finally:
        OPS.pop("GlowTestBuggy", None)


def test_a_bug_in_a_lowering_is_an_internal_error_not_a_glow_error(buggy_op):
    m = model([helper.make_node(buggy_op, ["x"], ["y"], name="the_node")], [vi("x", F, [2])], [vi("y", F, [2])])
    with pytest.raises(errors.InternalError) as ei:
        glow_core.compile(m)
    assert not isinstance(ei.value, errors.GlowError)
    assert "'the_node'" in str(ei.value) and buggy_op in str(ei.value) and "KeyError" in str(ei.value)
    assert isinstance(ei.value.__cause__, KeyError)


def test_user_errors_inside_lowerings_stay_glow_errors():
    m = model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")], [vi("x", F, [2, 3])], [vi("y", F, None)],
              [numpy_helper.from_array(np.array([4, 5], np.int64), "s")])
    with pytest.raises(errors.ShapeError, match="'rs'"):
        glow_core.compile(m)


def test_unsupported_op_error_is_not_an_import_error():
    assert issubclass(errors.UnsupportedOpError, errors.GlowError)
    assert not issubclass(errors.UnsupportedOpError, errors.ImportError_)


def loop_model():
    """A Loop whose body slices a constant with its iteration number (a shape operand known only per iteration)."""
    table = numpy_helper.from_array(np.arange(1, 6, dtype=np.float32), "table")
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["i", "one"], ["i1"]),
         helper.make_node("Unsqueeze", ["i", "zero"], ["start"]),
         helper.make_node("Unsqueeze", ["i1", "zero"], ["end"]),
         helper.make_node("Slice", ["table", "start", "end"], ["piece"]),
         helper.make_node("Add", ["acc_in", "piece"], ["acc_out"])],
        "body", [vi("i", I64, []), vi("cond_in", TensorProto.BOOL, []), vi("acc_in", F, [1])],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", F, [1])],
        [numpy_helper.from_array(np.array(1, np.int64), "one"), numpy_helper.from_array(np.array([0], np.int64), "zero")])
    return model([helper.make_node("Loop", ["n", "", "acc0"], ["acc"], body=body, name="loop")],
                 [vi("acc0", F, [1])], [vi("acc", F, [1])],
                 [numpy_helper.from_array(np.array(4, np.int64), "n"), table])


def test_subgraph_bodies_are_functions_built_at_import():
    fn = import_model(loop_model())
    (loop,) = [n for n in fn.nodes if n.op == "Loop"]
    body = loop.attrs["body"]
    assert isinstance(body, glow_core.graph.Function)
    assert [v.name for v in body.inputs] == ["i", "cond_in", "acc_in", "table"]  # formal inputs, then captures
    types = {n.op: [v.type for v in n.outputs] for n in body.nodes}
    assert str(types["Unsqueeze"][0]) == "int64<1>"  # typed at import
    assert types["Slice"] == [None]  # its shape depends on the iteration number: decided when inlined
    out = glow_core.compile(loop_model()).run({"acc0": np.array([10.0], np.float32)})["acc"]
    np.testing.assert_array_equal(out, [10.0 + 1 + 2 + 3 + 4])


def test_an_error_in_a_body_names_the_subgraph_and_node():
    m = loop_model()
    m.graph.node[0].attribute[0].g.node[5].input[1] = "nowhere"
    with pytest.raises(errors.ImportError_, match=r"subgraph 'body' \(body\) of node 'loop' \(Loop\).*'nowhere'"):
        import_model(m)


def _onnx_types(m):
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    return {v.name: (v.type.tensor_type.elem_type, [d.dim_value for d in v.type.tensor_type.shape.dim])
            for v in inferred.graph.output}


EXTENDED = {  # op -> (inputs as (name, onnx type, shape), attributes, number of outputs)
    "TopK": ([("x", F, [3, 7, 5]), ("k", I64, [1])], {"axis": 1}, 2),
    "RoiAlign": ([("x", F, [2, 3, 8, 9]), ("rois", F, [4, 4]), ("idx", I64, [4])],
                 {"output_height": 3, "output_width": 2}, 1),
    "Det": ([("x", F, [2, 3, 4, 4])], {}, 1),
    "DeformConv": ([("x", F, [1, 2, 7, 6]), ("w", F, [4, 2, 3, 2]), ("off", F, [1, 12, 4, 6])],
                   {"pads": [1, 0, 1, 1], "strides": [2, 1]}, 1),
    "TfIdfVectorizer": ([("x", I64, [2, 6])], {"mode": "TF", "min_gram_length": 1, "max_gram_length": 2,
                                               "max_skip_count": 0, "ngram_counts": [0, 2],
                                               "ngram_indexes": [0, 1, 2], "pool_int64s": [1, 2, 1, 2]}, 1),
}


@pytest.mark.parametrize("op", sorted(EXTENDED))
def test_extended_op_shape_rules_agree_with_onnx_shape_inference(op):
    ins, attrs, n_out = EXTENDED[op]
    inits = [numpy_helper.from_array(np.array([4], np.int64), "k")] if op == "TopK" else []
    outs = [f"y{i}" for i in range(n_out)]
    m = model([helper.make_node(op, [n for n, _, _ in ins], outs, name="ext", **attrs)],
              [vi(n, t, s) for n, t, s in ins if n != "k"], [helper.make_empty_tensor_value_info(o) for o in outs],
              inits, opset=19)
    want = _onnx_types(m)
    fn = import_model(m)
    got = {name: (v.dtype.onnx, list(v.shape)) for name, v in zip(fn.output_names, fn.outputs)}
    assert got == want
