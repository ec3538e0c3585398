"""Graph passes and IR passes: each changes the graph as expected and leaves results unchanged (checked against
the unoptimized pipeline and onnx.reference); symbolic dims and shape inputs are specialized at run time."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_conformance import example_models
from glow_core.graph import Function
from glow_core.importer.onnx_import import import_model
from glow_core.ir import eliminate_copies, generate_ir, plan_memory, remove_dead_allocations, share_buffers, verify_ir
from glow_core.lower import lower
from glow_core.discovery import get_backend
from glow_core.ops.registry import get_op
from glow_core.passes import PASSES, run_pipeline
from glow_core.types import TensorType, dtype
from glow_core.verify import verify_function

F = TensorProto.FLOAT
vi = helper.make_tensor_value_info
rng = np.random.default_rng(0)


def init(name, arr, dt=np.float32):
    return numpy_helper.from_array(np.asarray(arr, dtype=dt), name)


def onnx_model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def reference(model, feeds):
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ReferenceEvaluator(model).run(None, feeds)))


IR_PASSES = ("remove_dead_allocations", "share_buffers", "eliminate_copies")


def run_function(fn: Function, feeds, ir_passes=IR_PASSES):
    """Lower ``fn`` and run it on the interpreter with only the IR passes named (no graph passes)."""
    lower(fn)
    fn.toposort()
    verify_function(fn)
    irf = generate_ir(fn)
    counts = {}
    for name, p in (("remove_dead_allocations", remove_dead_allocations), ("share_buffers", share_buffers),
                    ("eliminate_copies", eliminate_copies)):
        if name in ir_passes:
            counts[name] = p(irf)
    verify_ir(irf)
    plan_memory(irf)
    out = get_backend("interpreter").compile(irf, {}).execute({k: v for k, v in feeds.items() if k in irf.inputs})
    return out, counts


def check_pass(model, feeds, pass_name, expect_changes, expect_ops_after=None, rtol=1e-5):
    """Apply one pass to the imported graph; compare with the untouched graph and onnx.reference."""
    plain = import_model(model)
    opt = import_model(model)
    before = len(opt.nodes)
    changes = PASSES[pass_name](opt)
    assert changes == expect_changes, [n.op for n in opt.nodes]
    assert len(opt.nodes) == before - expect_changes or pass_name in ("remove-noops",)
    if expect_ops_after is not None:
        assert sorted(n.op for n in opt.nodes) == sorted(expect_ops_after)
    want = reference(model, feeds)
    got_plain, _ = run_function(plain, feeds)
    got_opt, _ = run_function(opt, feeds)
    for k in want:
        np.testing.assert_allclose(got_opt[k], want[k], rtol=rtol, atol=rtol)
        np.testing.assert_allclose(got_opt[k], got_plain[k], rtol=rtol, atol=rtol)
    # The whole pipeline, optimized or not, agrees too.
    for optimize in (False, True):
        out = glow_core.compile(model, optimize=optimize).run(feeds)
        for k in want:
            np.testing.assert_allclose(out[k], want[k], rtol=rtol, atol=rtol)
    return opt


X23 = rng.standard_normal((2, 3)).astype(np.float32)


def test_dce():
    m = onnx_model([helper.make_node("Relu", ["x"], ["y"]),
                    helper.make_node("Neg", ["x"], ["dead1"]),
                    helper.make_node("Exp", ["x"], ["dead2"]),
                    helper.make_node("Mul", ["dead1", "dead2"], ["dead3"])],
                   [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])
    check_pass(m, {"x": X23}, "dce", 3, ["Relu"])
    assert glow_core.compile(m).last.stats["passes"]["dce"] == 3


def test_cse():
    m = onnx_model([helper.make_node("Sigmoid", ["x"], ["a"]),
                    helper.make_node("Sigmoid", ["x"], ["b"]),
                    helper.make_node("Mul", ["a", "w"], ["c"]),
                    helper.make_node("Mul", ["b", "w"], ["d"]),
                    helper.make_node("Sub", ["c", "d"], ["e"]),
                    helper.make_node("Add", ["c", "d"], ["y"])],
                   [vi("x", F, [2, 3])], [vi("y", F, [2, 3]), vi("e", F, [2, 3])], [init("w", rng.standard_normal(3))])
    check_pass(m, {"x": X23}, "cse", 2, ["Sigmoid", "Mul", "Sub", "Add"])
    opt = import_model(m)
    PASSES["cse"](opt)
    add = next(n for n in opt.nodes if n.op == "Add")
    assert add.inputs[0] is add.inputs[1]
    # Different attributes are not merged.
    m2 = onnx_model([helper.make_node("LeakyRelu", ["x"], ["a"], alpha=0.1),
                     helper.make_node("LeakyRelu", ["x"], ["b"], alpha=0.2),
                     helper.make_node("Add", ["a", "b"], ["y"])], [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])
    check_pass(m2, {"x": X23}, "cse", 0)


def _manual_const_graph():
    fn = Function("cf")
    x = fn.add_input("x", TensorType(dtype("float32"), (2, 3)))
    c1 = fn.constant(np.arange(6, dtype=np.float32).reshape(2, 3), "c1")
    c2 = fn.constant(np.full((2, 3), 0.5, np.float32), "c2")
    t = TensorType(dtype("float32"), (2, 3))
    s = fn.add_node("add", [c1, c2], {}, [t], "sum").outputs[0]
    p = fn.add_node("mul", [s, c2], {}, [t], "prod").outputs[0]
    y = fn.add_node("add", [x, p], {}, [t], "out").outputs[0]
    fn.set_outputs([y], ["y"])
    return fn


def test_constant_fold():
    fn = _manual_const_graph()
    assert PASSES["constant-fold"](fn) == 2
    assert [n.op for n in fn.nodes] == ["add"]
    c = fn.nodes[0].inputs[1]
    assert c.is_const
    np.testing.assert_array_equal(c.const, (np.arange(6).reshape(2, 3) + 0.5) * 0.5)
    got, _ = run_function(fn, {"x": X23})
    np.testing.assert_allclose(got["y"], X23 + (np.arange(6).reshape(2, 3) + 0.5) * 0.5, rtol=1e-6)
    plain, _ = run_function(_manual_const_graph(), {"x": X23})
    np.testing.assert_array_equal(plain["y"], got["y"])
    # Constant subgraphs of a model never reach the backend: Shape->Gather->... become constants.
    m = onnx_model([helper.make_node("Shape", ["x"], ["s"]),
                    helper.make_node("Cast", ["s"], ["sf"], to=F),
                    helper.make_node("ReduceSum", ["sf"], ["n"], keepdims=0),
                    helper.make_node("Mul", ["x", "n"], ["y"])], [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])
    cm = glow_core.compile(m)
    assert [i.op for i in cm.last.ir.code] == ["mul"]
    np.testing.assert_allclose(cm.run({"x": X23})["y"], reference(m, {"x": X23})["y"], rtol=1e-6)


def test_remove_noops():
    m = onnx_model([helper.make_node("Identity", ["x"], ["a"]),
                    helper.make_node("Reshape", ["a", "s23"], ["b"]),
                    helper.make_node("Transpose", ["b"], ["c"], perm=[0, 1]),
                    helper.make_node("Reshape", ["c", "s32"], ["d"]),
                    helper.make_node("Reshape", ["d", "s23"], ["e"]),
                    helper.make_node("Transpose", ["e"], ["f"], perm=[1, 0]),
                    helper.make_node("Transpose", ["f"], ["g"], perm=[1, 0]),
                    helper.make_node("Relu", ["g"], ["y"])],
                   [vi("x", F, [2, 3])], [vi("y", F, [2, 3])],
                   [init("s23", [2, 3], np.int64), init("s32", [3, 2], np.int64)])
    check_pass(m, {"x": X23}, "remove-noops", 1)  # the Identity, before lowering
    fn = import_model(m)
    lower(fn)
    n_lowered = len(fn.nodes)
    assert {"reshape", "transpose"} <= {n.op for n in fn.nodes}
    counts = run_pipeline(fn, ["remove-noops", "dce"])
    assert counts["remove-noops"] >= 2 and len(fn.nodes) < n_lowered
    # reshape(reshape(x)) to the same shape and transpose(transpose(x)) with inverse perms vanish entirely.
    assert [n.op for n in fn.nodes] == ["max"]
    got, _ = run_function(fn, {"x": X23})
    np.testing.assert_allclose(got["y"], np.maximum(X23, 0))
    cm = glow_core.compile(m)
    assert [i.op for i in cm.last.ir.code] == ["max"]
    assert cm.last.stats["post_passes"]["remove-noops"] >= 2


def test_fold_batchnorm_on_graph():
    """Conv followed by BatchNormalization (added to the graph by hand) folds into one Conv."""
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    bn = [rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal(4), 0.5 + rng.random(4)]
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    conv_only = onnx_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4, name="conv")],
                           [vi("x", F, [1, 3, 8, 8])], [vi("c", F, [1, 4, 8, 8])], [init("w", w), init("b", b)])
    full = onnx_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4, name="conv"),
                       helper.make_node("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["y"], epsilon=1e-3)],
                      [vi("x", F, [1, 3, 8, 8])], [vi("y", F, [1, 4, 8, 8])],
                      [init("w", w), init("b", b)] + [init(n, a) for n, a in zip(["s", "bb", "mu", "var"], bn)])
    fn = import_model(conv_only)
    c = fn.outputs[0]
    params = [fn.constant(np.asarray(a, np.float32), n) for n, a in zip(["s", "bb", "mu", "var"], bn)]
    node = fn.add_node("BatchNormalization", [c] + params, {"epsilon": 1e-3, "momentum": 0.9, "training_mode": 0},
                       [c.type], "bn")
    fn.set_outputs([node.outputs[0]], ["y"])
    assert PASSES["fold-batchnorm"](fn) == 1
    assert [n.op for n in fn.nodes] == ["Conv"]
    got, _ = run_function(fn, {"x": x})
    want = reference(full, {"x": x})["y"]
    np.testing.assert_allclose(got["y"], want, rtol=1e-4, atol=1e-4)
    # A BatchNormalization whose statistics are not constant is left alone.
    fn = import_model(conv_only)
    c = fn.outputs[0]
    var = fn.add_input("var", TensorType(dtype("float32"), (4,)))
    node = fn.add_node("BatchNormalization", [c] + params[:3] + [var], {"epsilon": 1e-3, "training_mode": 0},
                       [c.type], "bn")
    fn.set_outputs([node.outputs[0]], ["y"])
    assert PASSES["fold-batchnorm"](fn) == 0


@pytest.mark.skipif(get_op("BatchNormalization") is None, reason="BatchNormalization is not registered yet")
def test_fold_batchnorm_resnet():
    m = example_models.resnet(seed=1, size=16, widths=(8, 16), blocks=1, batchnorm=True)
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    n_bn = sum(n.op_type == "BatchNormalization" for n in m.graph.node)
    others = [n.op_type for n in m.graph.node if n.op_type != "BatchNormalization"]
    check_pass(m, {"input": x}, "fold-batchnorm", n_bn, others, rtol=1e-4)


# -- IR passes -------------------------------------------------------------------------------------------
def test_ir_passes_keep_results():
    m = example_models.resnet(seed=2, size=16, widths=(8, 16), blocks=1, batchnorm=False)
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = reference(m, {"input": x})["output"]
    results = {}
    for passes in [(), ("remove_dead_allocations",), ("share_buffers",), ("eliminate_copies",), IR_PASSES]:
        out, counts = run_function(import_model(m), {"input": x}, passes)
        results[passes] = out["output"]
        np.testing.assert_allclose(out["output"], want, rtol=1e-4, atol=1e-4)
        if "share_buffers" in passes:
            assert counts["share_buffers"] >= 5  # relu, residual add and relu run in place
    np.testing.assert_array_equal(results[()], results[IR_PASSES])


def test_remove_dead_allocations():
    m = onnx_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Exp", ["x"], ["e"]),
                    helper.make_node("Neg", ["e"], ["dead"])], [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])
    fn = import_model(m)  # no dce: the dead nodes reach the IR
    out, counts = run_function(fn, {"x": X23}, ("remove_dead_allocations",))
    assert counts["remove_dead_allocations"] == 2
    np.testing.assert_array_equal(out["y"], np.maximum(X23, 0))


def test_eliminate_copies():
    fn = Function("copies")
    t = TensorType(dtype("float32"), (2, 3))
    x = fn.add_input("x", t)
    e = fn.add_node("exp", [x], {}, [t], "e").outputs[0]
    y = fn.add_node("copy", [e], {}, [t], "cp").outputs[0]
    fn.set_outputs([y], ["y"])
    irf = generate_ir(fn)
    assert [i.op for i in irf.code] == ["exp", "copy"]
    assert eliminate_copies(irf) == 1
    assert [i.op for i in irf.code] == ["exp"] and irf.code[0].outs[0] is irf.outputs["y"]
    verify_ir(irf)
    plan_memory(irf)
    assert irf.plan.activations_size == 0
    out = get_backend("interpreter").compile(irf, {}).execute({"x": X23})
    np.testing.assert_allclose(out["y"], np.exp(X23), rtol=1e-6)


def test_share_buffers_in_place():
    m = onnx_model([helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
                    helper.make_node("Exp", ["b"], ["c"]), helper.make_node("Add", ["c", "a"], ["y"])],
                   [vi("x", F, [64, 64])], [vi("y", F, [64, 64])])
    x = rng.standard_normal((64, 64)).astype(np.float32)
    out, counts = run_function(import_model(m), {"x": x})
    assert counts["share_buffers"] >= 1
    np.testing.assert_allclose(out["y"], np.exp(-np.exp(x)) + np.exp(x), rtol=1e-5)
    cm = glow_core.compile(m)
    assert cm.last.ir.plan.activations_size == 2 * 64 * 64 * 4  # a and b|c: two buffers, not three
    np.testing.assert_allclose(cm.run({"x": x})["y"], reference(m, {"x": x})["y"], rtol=1e-5)


# -- specialization ------------------------------------------------------------------------------------------
def test_symbolic_batch_specialized_per_shape():
    w = rng.standard_normal((5, 10)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    m = onnx_model([helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
                    helper.make_node("Sigmoid", ["g"], ["y"])],
                   [vi("x", F, ["N", 10])], [vi("y", F, ["N", 5])], [init("w", w), init("b", bias)])
    cm = glow_core.compile(m)
    assert cm.last is None  # nothing compiled before the first run
    for n in (3, 7, 3):
        x = rng.standard_normal((n, 10)).astype(np.float32)
        y = cm.run({"x": x})["y"]
        assert y.shape == (n, 5)
        np.testing.assert_allclose(y, 1 / (1 + np.exp(-(x.astype(np.float64) @ w.T + bias))), rtol=1e-5, atol=1e-6)
        assert cm.last.ir.inputs["x"].type.shape == (n, 10)
    assert len(cm._cache) == 2  # one compilation per batch size, reused
    with pytest.raises(glow_core.errors.InputError, match="'x'"):
        cm.run({"x": np.zeros((3, 9), np.float32)})


def test_symbolic_cnn_batch():
    m = example_models.cnn(seed=1)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    cm = glow_core.compile(m)
    for n in (1, 2):
        x = rng.standard_normal((n, 3, 28, 28)).astype(np.float32)
        np.testing.assert_allclose(cm.run({"input": x})["output"], reference(m, {"input": x})["output"],
                                   rtol=1e-4, atol=1e-5)


def test_reshape_shape_input_specialized():
    m = onnx_model([helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
                   [vi("x", F, [2, 3, 4]), vi("shape", TensorProto.INT64, [2])], [vi("y", F, None)])
    cm = glow_core.compile(m)
    assert "shape" in cm.specialized
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    for shape in ([6, 4], [4, -1], [24, 1], [6, 4]):
        s = np.array(shape, np.int64)
        y = cm.run({"x": x, "shape": s})["y"]
        want = reference(m, {"x": x, "shape": s})["y"]
        assert y.shape == want.shape
        np.testing.assert_array_equal(y, want)
        assert "shape" not in cm.last.ir.inputs  # a constant of the compiled function, not a run-time input
    assert len(cm._cache) == 3
    with pytest.raises(glow_core.errors.GlowError, match="Reshape|reshape"):
        cm.run({"x": x, "shape": np.array([5, 5], np.int64)})
