"""The differential fuzzer (glowc fuzz): generator validity and reproducibility, the child-process runner's
crash and hang handling, the shrinker, and finding a deliberately broken CPU template (a temporary copy of
backends/cpu/templates with one token changed: the repository's files are never touched)."""
from __future__ import annotations

import time
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import helper

from glow_tools.fuzz import runner
from glow_tools.fuzz.driver import Session, fuzz, replay
from glow_tools.fuzz.generator import drawable_ops, generate
from glow_tools.fuzz.recipes import SKIP
from glow_tools.fuzz.shrink import shrink
from glow_core.ops.registry import OPS

from tests.cpu.broken_templates import broken_backend


def test_every_importer_op_is_drawn_or_skipped_with_a_reason():
    ops = drawable_ops()
    assert set(ops) | set(SKIP) == set(OPS)
    assert all(reason for reason in SKIP.values())


def test_generated_graphs_are_valid_and_reproducible():
    ops = drawable_ops()
    stats = Counter()
    made = 0
    seen = set()
    for i in range(30):
        m, feeds = generate(np.random.default_rng([7, i]), ops, stats=stats)
        if m is None:
            continue
        made += 1
        onnx.checker.check_model(m, full_check=True)  # raises on an invalid graph
        assert 1 <= len(m.graph.node) <= 30
        assert {i.name for i in m.graph.input} == set(feeds)
        seen.update(n.op_type for n in m.graph.node)
        again, feeds2 = generate(np.random.default_rng([7, i]), ops)
        assert again.SerializeToString() == m.SerializeToString()
        assert all(np.array_equal(feeds[k], feeds2[k], equal_nan=feeds[k].dtype.kind == "f") for k in feeds)
    assert made >= 20 and len(seen) >= 40


def test_special_values_reach_the_inputs():
    ops = drawable_ops(["Add", "Mul", "Sub"])
    found = set()
    for i in range(40):
        m, feeds = generate(np.random.default_rng([3, i]), ops, special=1.0, dtypes=["float32"])
        for a in (feeds or {}).values():
            if a.dtype == np.float32:
                found |= {"nan"} if np.isnan(a).any() else set()
                found |= {"inf"} if np.isinf(a).any() else set()
                found |= {"-0"} if (np.signbit(a) & (a == 0)).any() else set()
                found |= {"denormal"} if ((a != 0) & (np.abs(a) < np.finfo(np.float32).tiny)).any() else set()
    assert found == {"nan", "inf", "-0", "denormal"}


def _model(node, ins, outs):
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info(n, 1, s) for n, s in ins],
                          [helper.make_tensor_value_info(n, 1, s) for n, s in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def test_runner_survives_a_crash_and_a_hang():
    with runner.Worker(timeout=20) as w:
        out = w.call("os:abort")
        assert out.kind == runner.CRASH and out.error_type == "SIGABRT"
        out = w.call("time:sleep", 30, timeout=1.0)
        assert out.kind == runner.HANG
        m = _model(helper.make_node("Relu", ["x"], ["y"]), [("x", [3])], [("y", [3])])
        out = w.run("interpreter", m.SerializeToString(), {"x": np.array([-1, 0, 2], np.float32)})
        assert out.kind == runner.OK and out.outputs["y"].tolist() == [0, 0, 2]


def test_shrinker_keeps_only_the_failing_node():
    """A chain of 6 nodes where only Neg 'fails': the minimal model is that one node."""
    nodes = [helper.make_node(op, [f"v{i}"], [f"v{i + 1}"]) for i, op in
             enumerate(["Relu", "Abs", "Neg", "Sigmoid", "Tanh", "Exp"])]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("v0", 1, [4])],
                          [helper.make_tensor_value_info("v6", 1, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])

    def fails(c, f):
        return any(n.op_type == "Neg" for n in c.graph.node)

    def values(c, f):
        x = f["v0"] if "v0" in f else next(iter(f.values()))
        return {f"v{i}": x for i in range(7)}

    small, feeds, tests = shrink(m, {"v0": np.ones(4, np.float32)}, fails, values, seconds=30)
    assert [n.op_type for n in small.graph.node] == ["Neg"]
    assert tests > 0


def test_shrinker_keeps_a_failing_node_no_output_reads():
    """The backend compiles every node: a failing node whose result no graph output reads (the generator drops
    outputs of unknown shape) is kept, not pruned away (the s5 run's MatMulInteger ShapeError was shrunk to a model
    without it, which then passed)."""
    nodes = [helper.make_node("Relu", ["v0"], ["v1"]), helper.make_node("Neg", ["v0"], ["dead"]),
             helper.make_node("Abs", ["v1"], ["v2"])]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("v0", 1, [4])],
                          [helper.make_tensor_value_info("v2", 1, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])

    def fails(c, f):
        return any(n.op_type == "Neg" for n in c.graph.node)

    def values(c, f):
        return {k: np.ones(4, np.float32) for k in ("v0", "v1", "v2", "dead")}

    small, feeds, tests = shrink(m, {"v0": np.ones(4, np.float32)}, fails, values, seconds=30)
    assert "Neg" in [n.op_type for n in small.graph.node] and len(small.graph.node) < 3


def test_replay_of_an_agreeing_model(tmp_path):
    m = _model(helper.make_node("Add", ["a", "b"], ["y"]), [("a", [2, 3]), ("b", [3])], [("y", [2, 3])])
    onnx.save(m, tmp_path / "m.onnx")
    np.savez(tmp_path / "m.inputs.npz", a=np.ones((2, 3), np.float32), b=np.arange(3, dtype=np.float32))
    assert replay(str(tmp_path / "m.onnx"), "cpu", log=lambda *a: None) is None


#: One token of strided.c.j2 (data movement): the outermost index of the odometer never advances.
BROKEN = ("strided.c.j2", "for (int d = {{ p.outer_rank - 1 }}; d >= 0; --d)",
          "for (int d = {{ p.outer_rank - 1 }}; d > 0; --d)")
#: ops whose lowering goes through strided.c.j2: the budget of the CI test is spent on them
STRIDED_OPS = ["Transpose", "Slice", "Concat", "Pad", "Expand", "Tile", "Reshape", "Add"]


def test_fuzzer_finds_a_broken_template_and_shrinks_it(tmp_path):
    spec, env = broken_backend(tmp_path, *BROKEN)
    t0 = time.monotonic()
    s = fuzz(spec, seconds=80, seed=11, out_dir=str(tmp_path / "out"), ops=STRIDED_OPS, max_nodes=12,
             shrink_seconds=40, env=env, log=lambda *a: None, max_findings=1)
    assert s.findings, f"nothing found in {s.graphs} graphs ({s.compared} compared)"
    f = s.findings[0]
    assert f.signature == "mismatch"
    assert f.nodes_after <= 4, f.ops
    assert time.monotonic() - t0 < 170
    # the minimal model is a real failure of the broken template only: the repository's backend agrees
    assert replay(f.files[0], "cpu", log=lambda *a: None) is None
    sess = Session(spec, env=env)
    try:
        with np.load(f.files[1]) as z:
            verdict, _, _ = sess.check(onnx.load(f.files[0]), {k: z[k] for k in z.files})
    finally:
        sess.close()
    assert verdict == "mismatch"


def test_cli_fuzz_exit_status_and_output(tmp_path, capsys):
    from glow_tools.cli import main
    rc = main(["fuzz", "--backend", "cpu", "--ops", "Add,Relu", "--seconds", "60", "--max-graphs", "3", "--seed", "1",
               "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert rc == 0 and "3 graphs" in out and (tmp_path / "o" / "summary.json").exists()
    assert main(["fuzz", "--backend", "interpreter", "--against", "interpreter", "--out", str(tmp_path)]) == 1
    assert main(["fuzz", "--backend", "cpu", "--ops", "NoSuchOp", "--out", str(tmp_path)]) == 1
    assert "NoSuchOp" in capsys.readouterr().err


def test_progress_line_only_on_a_terminal():
    import io

    from glow_tools.fuzz.driver import Summary, status
    from glow_tools.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True
    s = Summary("cpu", "interpreter", 0, seconds=30.0, graphs=12)
    pipe, tty = io.StringIO(), Tty()
    for stream in (pipe, tty):
        p = Progress("fuzz cpu", total=60.0, unit="s", stream=stream, interval=0.0)
        p.update(s.seconds, note=status(s))
        p.close()
    assert pipe.getvalue() == ""
    assert "graphs 12 (24/min), failures 0" in tty.getvalue() and tty.getvalue().startswith("\r")


def test_onnxruntime_differences_apply_only_under_their_condition():
    from glow_tools.fuzz.compare import ORT_DIFFERENCES, conditions
    assert conditions([np.array([1.0, np.nan], np.float32)]) == {"nan"}
    assert conditions([np.array([1, np.iinfo(np.int64).min], np.int64)]) == {"overflow"}
    assert conditions([np.array([1.0, 2.0], np.float16), np.array([3], np.int32)]) == set()
    assert conditions([np.array([1.0, -65504.0], np.float16)]) == {"overflow", "overflow16"}
    assert ORT_DIFFERENCES["QuantizeLinear"][0] == "nan"  # round(NaN) + zero point: no integer (onnxruntime: 0)
    assert all(({cond} if isinstance(cond, str) else set(cond)) <= {"nan", "overflow", "overflow16"} and reason
               for cond, reason in ORT_DIFFERENCES.values())


def _one_node(op, shape, opset, **attrs):
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def test_onnxruntime_operand_differences_hold_and_apply_only_under_their_condition():
    """MeanVarianceNormalization of a constant slice: the specification's function body gives
    (x - mean) / (sqrt(var) + 1e-9) = 0, onnxruntime 0/0 = NaN (the interpreter follows the specification);
    the condition holds for flat slices only. Gelu's entry holds below -1 only."""
    ort = pytest.importorskip("onnxruntime")
    import glow_core
    from glow_tools.fuzz.compare import ORT_OPERAND_DIFFERENCES, operand_differences
    m = _one_node("MeanVarianceNormalization", [1, 3, 1, 1], 21)
    x = np.array([0.5, -1.0, 2.0], np.float32).reshape(1, 3, 1, 1)
    spec = np.zeros_like(x)  # each [0, 2, 3] slice holds one element: x - mean = 0, var = 0
    (got,) = glow_core.compile(m, "interpreter").run({"x": x}).values()
    np.testing.assert_array_equal(got, spec)
    theirs = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.isnan(theirs).all()
    assert operand_differences(m, {"x": x}) == {"y"}
    spread = np.array([[[[0.5, -1.0]], [[2.0, 3.0]]]], np.float32).reshape(1, 2, 1, 2)
    assert operand_differences(_one_node("MeanVarianceNormalization", [1, 2, 1, 2], 21), {"x": spread}) == set()
    gelu = _one_node("Gelu", [3], 20)
    assert operand_differences(gelu, {"x": np.array([-0.5, 0.0, 3.0], np.float32)}) == set()
    assert operand_differences(gelu, {"x": np.array([-0.5, -1.5, 3.0], np.float32)}) == {"y"}
    assert operand_differences(gelu, {"x": np.array([1.0], np.float64)}) == set()
    gelu_tanh = _one_node("Gelu", [1], 20, approximate="tanh")
    assert operand_differences(gelu_tanh, {"x": np.array([1.0], np.float64)}) == {"y"}
    rmax = _one_node("ReduceMax", [3], 18)  # a NaN computed inside the graph (Pow of a negative base) counts too
    assert operand_differences(rmax, {"x": np.array([1.0, np.nan, 2.0], np.float32)}) == {"y"}
    assert operand_differences(rmax, {"x": np.array([1.0, 3.0, 2.0], np.float32)}) == set()
    dql = _one_node("DynamicQuantizeLinear", [3], 21)
    assert operand_differences(dql, {"x": np.array([1, np.nan, -2], np.float32)}) == {"y"}  # NaN skipped there
    assert operand_differences(dql, {"x": np.zeros(3, np.float32)}) == {"y"}
    assert operand_differences(dql, {"x": np.array([0, 1, 0], np.float32)}) == set()
    assert all(callable(cond) and reason for cond, reason in ORT_OPERAND_DIFFERENCES.values())


def test_prelu_slopes_broadcast_to_the_input_only():
    """PRelu's slope must be unidirectionally broadcastable to X (onnxruntime also accepts a larger slope, the
    specification does not: drawing one was the fuzzer's PRelu false positive)."""
    seen = 0
    for i in range(40):
        model, _ = generate(np.random.default_rng([3, i]), drawable_ops(["PRelu"]), 4)
        if model is None:
            continue
        g = onnx.shape_inference.infer_shapes(model).graph
        shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
                  for v in list(g.input) + list(g.value_info) + list(g.output)}
        for n in model.graph.node:
            x, s = shapes[n.input[0]], shapes[n.input[1]]
            assert len(s) <= len(x) and all(b in (1, a) for a, b in zip(x[len(x) - len(s):], s)), (x, s)
            seen += 1
    assert seen >= 40


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_gelu_of_the_largest_float_does_not_overflow(backend):
    """Found by glowc fuzz against onnxruntime: 0.5 * x * (1 + erf(x / sqrt 2)) is x for x = 3.4e38 (numpy of the
    formula in float64), where x * 2 overflowed before the halving."""
    import math
    import glow_core
    x = np.array([np.finfo(np.float32).max, 2.0], np.float32)
    want = np.array([0.5 * float(v) * (1 + math.erf(float(v) / math.sqrt(2))) for v in x], np.float32)
    (got,) = glow_core.compile(_one_node("Gelu", [2], 20), backend).run({"x": x}).values()
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def _graph(nodes, inputs, inits=(), opset=21):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)],
                          [onnx.numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def test_spec_rules_reject_what_the_specification_rejects_only():
    """Models onnxruntime ran although the specification rejects them (findings of glowc fuzz --against
    onnxruntime): a DFT axis given as a vector, a DequantizeLinear scale of 4 for an input of 5 with the default
    axis out of range, a QuantizeLinear scale of the input's rank without block_size, an InstanceNormalization
    scale of 5 for one channel, QLinearMatMul scales and zero points of rank 4, SoftmaxCrossEntropyLoss scores of
    rank 1 (the specification's are (N, C) or (N, C, D1, ...)), a MatMulInteger zero point of rank 3 for a 1-D B (the
    s5 run's g16907), RotaryEmbedding caches of rank 4 with position_ids of rank 1 (the s5 lead's run, g8829), a
    QLinearConv bias of shape (1, 1) (the s6 lead's run, seed 20261203, g5924). Their
    valid neighbours (a per-tensor scale leaves
    the axis unused) pass."""
    from glow_tools.fuzz.compare import spec_violations
    F, I8, I64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT8, onnx.TensorProto.INT64

    def dft(axis_shape):
        return _graph([helper.make_node("DFT", ["x", "", "a"], ["y"])], [("x", F, [2, 8, 1]), ("a", I64, axis_shape)],
                      opset=20)

    def dq(scale_shape, **attrs):
        return _graph([helper.make_node("DequantizeLinear", ["x", "s"], ["y"], **attrs)],
                      [("x", I8, [5]), ("s", F, scale_shape)])

    def q(scale_shape, **attrs):
        return _graph([helper.make_node("QuantizeLinear", ["x", "s"], ["y"], **attrs)],
                      [("x", F, [2, 6]), ("s", F, scale_shape)])

    def inorm(c):
        return _graph([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])],
                      [("x", F, [1, 1, 1, 1]), ("s", F, [c]), ("b", F, [c])])

    def qmm(scale_shape):  # a QLinearMatMul whose scales and zero points are of scale_shape (a 4-D one: the run's)
        U8 = onnx.TensorProto.UINT8
        return _graph([helper.make_node("QLinearMatMul", ["a", "s", "z", "b", "s", "z", "s", "z"], ["y"])],
                      [("a", U8, [2, 3]), ("b", U8, [3, 2]), ("s", F, scale_shape), ("z", U8, scale_shape)])

    def sce(scores, labels, weights=None):  # SoftmaxCrossEntropyLoss: scores (N, C, D...), labels (N, D...)
        ins = [("x", F, scores), ("t", I64, labels)] + ([("w", F, weights)] if weights else [])
        return _graph([helper.make_node("SoftmaxCrossEntropyLoss", [n for n, _, _ in ins], ["y"])], ins, opset=13)

    def argmax(shape, axis=0):  # an index over an empty axis does not exist, unless the output is empty too
        return _graph([helper.make_node("ArgMax", ["x"], ["y"], axis=axis)], [("x", F, shape)])

    def mmi(a, b, za, zb):  # MatMulInteger: N-D zero points are of their operand's rank ([D.., M, 1], [D.., 1, N])
        U8 = onnx.TensorProto.UINT8
        return _graph([helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])],
                      [("a", U8, a), ("b", U8, b), ("za", U8, za), ("zb", U8, zb)])

    def rope(cos, pos=None):  # RotaryEmbedding (opset 23): 2-D caches with position_ids, 3-D without
        ins = [("x", F, [1, 2, 3, 4]), ("c", F, cos), ("s", F, cos)] + ([("p", I64, pos)] if pos else [])
        return _graph([helper.make_node("RotaryEmbedding", [n for n, _, _ in ins], ["y"])], ins, opset=23)

    def qconv(bias):  # QLinearConv of one 1x1 channel: scalar scales and zero points, a bias of shape `bias`
        U8, I32 = onnx.TensorProto.UINT8, onnx.TensorProto.INT32
        return _graph([helper.make_node("QLinearConv", ["x", "s", "z", "w", "s", "z", "s", "z", "b"], ["y"])],
                      [("x", U8, [1, 1, 1, 1]), ("w", U8, [1, 1, 1, 1]), ("s", F, []), ("z", U8, []),
                       ("b", I32, bias)])

    bad = [dft([2]), dft([1, 1, 1, 3]), dq([4]), q([2, 6]), q([2, 2], axis=1), inorm(5), qmm([1, 1, 1, 1]),
           qconv([1, 1]),
           sce([1], [1]), sce([2, 3], [3]), sce([2, 3, 4], [2, 4], [2]), argmax([0]), argmax([3, 0], axis=-1),
           mmi([1, 1, 2], [2], [1, 1, 1], [1, 1, 1]), rope([1, 1, 1, 1], [3]), rope([8, 2], [3]), rope([8, 2])]
    good = [dft([]), dq([]), dq([], axis=1), dq([5], axis=0), q([6]), q([2, 2], axis=1, block_size=3), inorm(1),
            qmm([]), qmm([1]), sce([2, 3], [2]), sce([2, 3, 4], [2, 4], [3]), argmax([3]), argmax([0, 0], axis=1),
            mmi([1, 1, 2], [1, 2, 3], [1, 1, 1], [1, 1, 3]), mmi([4, 2], [2, 3], [4], [3]), rope([8, 2], [1, 3]),
            rope([1, 3, 2]), qconv([1])]
    assert [bool(spec_violations(m.SerializeToString())) for m in bad] == [True] * len(bad)
    assert [spec_violations(m.SerializeToString()) for m in good] == [[]] * len(good)
    assert spec_violations(dq([4]).SerializeToString())[0][0] == "DequantizeLinear"


def test_a_disagreement_with_onnxruntime_is_arbitrated_in_float64():
    """InstanceNormalization over one element per instance is B exactly (x - mean = 0); onnxruntime 1.32 is ~90 ULP
    off. The float64 evaluation (the interpreter on the widened model) clears the backend; an answer off by more
    than the tolerance from it stays a finding."""
    pytest.importorskip("onnxruntime")
    from glow_tools.fuzz.driver import MISMATCH
    m = _graph([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])], [("x", onnx.TensorProto.FLOAT,
                                                                                     [1, 2, 1])],
               [("s", np.ones(2, np.float32)), ("b", np.array([-0.76279205, 0.51586366], np.float32))])
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2, 1]))
    feeds = {"x": np.array([[[0.25], [-1.5]]], np.float32)}
    sess = Session("interpreter", "onnxruntime")
    try:
        verdict, want, got = sess.check(m, feeds)
        assert verdict is None, (verdict, got.message if got else want.message)
        np.testing.assert_array_equal(got.outputs["y"].ravel(), np.float32([-0.76279205, 0.51586366]))
        assert any("float64" in n for n in sess.notes), sess.notes  # onnxruntime was off: arbitrated
        off = runner.Outcome(runner.OK, {"y": got.outputs["y"] * np.float32(1 + 1e-4)})
        assert not sess._float64_agrees(m, feeds, off, {"y": want.outputs["y"]})
        assert MISMATCH == "mismatch"
    finally:
        sess.close()


def test_reduce_mean_over_an_empty_set_is_not_compared():
    """The specification leaves ReduceMean over an empty set undefined: NaN (0/0) and onnxruntime's 0 are both
    answers, so that output is not compared (and the note says why)."""
    pytest.importorskip("onnxruntime")
    m = _graph([helper.make_node("ReduceMean", ["x", "a"], ["y"])], [("x", onnx.TensorProto.FLOAT, [0, 1])],
               [("a", np.array([1, 0], np.int64))], opset=18)
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 1]))
    sess = Session("interpreter", "onnxruntime")
    try:
        verdict, want, got = sess.check(m, {"x": np.zeros((0, 1), np.float32)})
        assert verdict is None and any("ReduceMean" in n for n in sess.notes), (verdict, sess.notes)
    finally:
        sess.close()


def test_an_oracle_that_hangs_or_crashes_is_not_a_finding():
    """onnxruntime's own crash or hang (here: no answer within the time limit) is the oracle's: ORACLE_CRASH."""
    pytest.importorskip("onnxruntime")
    from glow_tools.fuzz.driver import ORACLE_CRASH
    m = _one_node("Relu", [3], 18)
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3]))
    sess = Session("interpreter", "onnxruntime", timeout=1e-4)
    try:
        verdict, want, got = sess.check(m, {"x": np.ones(3, np.float32)})
        assert verdict == ORACLE_CRASH and want.kind == runner.HANG and got is None
    finally:
        sess.close()
    sess = Session("onnxruntime", "interpreter", timeout=1e-4)  # the interpreter is the kit's: its hang is a finding
    try:
        assert sess.check(m, {"x": np.ones(3, np.float32)})[0] == "reference-hang"
    finally:
        sess.close()


def test_quantize_and_dft_operands_follow_the_specification():
    """(De)QuantizeLinear and DFT are drawn by their own families as the specification allows them (the generic
    family's random shapes gave DFT axis vectors and scales of the input's rank, which onnxruntime ran and the kit
    refused): scales per tensor, per axis and blocked, a scalar DFT axis and dft_length; (De)QuantizeLinear at
    opset 25 at most (onnxruntime 1.32 has no kernel for their version 28)."""
    from glow_tools.fuzz.compare import spec_violations
    kinds = Counter()
    for i in range(40):
        m, _ = generate(np.random.default_rng([4, i]), drawable_ops(["QuantizeLinear", "DequantizeLinear", "DFT"]), 5)
        if m is None:
            continue
        assert spec_violations(m.SerializeToString()) == [], i
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
        for n in m.graph.node:
            attrs = {a.name for a in n.attribute}
            if n.op_type == "DFT":
                kinds["dft_length" if n.input[1] else "dft"] += 1
            else:
                assert m.opset_import[0].version <= 25
                per_axis = inits[n.input[1]].ndim
                kinds["blocked" if "block_size" in attrs else "per-axis" if per_axis else "per-tensor"] += 1
    assert min(kinds[k] for k in ("dft", "dft_length", "per-tensor", "per-axis", "blocked")) >= 2, kinds


def test_a_float16_disagreement_is_arbitrated_in_float64():
    """float16 InstanceNormalization over one element per instance: the answer is B exactly; onnxruntime 1.32
    gives 0 for an input of -28860 (its variance overflows float16). The widened float64 model clears the backend
    (found by the 30-minute glowc fuzz run); a backend answer of 0 there stays a finding."""
    pytest.importorskip("onnxruntime")
    h = onnx.TensorProto.FLOAT16
    m = _graph([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])], [("x", h, [3, 1, 1])],
               [("s", np.ones(1, np.float16)), ("b", np.array([0.3674], np.float16))])
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", h, [3, 1, 1]))
    feeds = {"x": np.array([0.0, 0.0, -28860.0], np.float16).reshape(3, 1, 1)}
    sess = Session("cpu", "onnxruntime")
    try:
        verdict, want, got = sess.check(m, feeds)
        assert float(want.outputs["y"].ravel()[2]) == 0.0  # onnxruntime's answer, the one this test is about
        assert verdict is None, (verdict, got.message if got else want.message)
        np.testing.assert_array_equal(got.outputs["y"].ravel(), np.full(3, 0.3674, np.float16))
        assert any("float64" in n for n in sess.notes), sess.notes
        off = runner.Outcome(runner.OK, {"y": want.outputs["y"]})
        assert not sess._float64_agrees(m, feeds, off, {"y": want.outputs["y"]})
    finally:
        sess.close()


def test_a_float16_overflow_inside_the_graph_is_arbitrated_by_the_declared_types():
    """Selu(65504) is 68826, beyond float16's range: the graph declares the intermediate float16, so it is inf and
    Asinh of it is inf (onnx.reference agrees). onnxruntime keeps the chain in float32 and answers 11.84; the float64
    evaluation widens the intermediate too. The declared-type evaluation clears the backend (found by the lead's
    30-minute glowc fuzz run, seed 20261202, g11081); a backend answer of onnxruntime's stays a finding there."""
    pytest.importorskip("onnxruntime")
    h = onnx.TensorProto.FLOAT16
    m = _graph([helper.make_node("Selu", ["x"], ["t"]), helper.make_node("Asinh", ["t"], ["y"])], [("x", h, [3])],
               [], opset=18)
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", h, [3]))
    feeds = {"x": np.array([1.0, -4.0, 65504.0], np.float16)}
    sess = Session("cpu", "onnxruntime")
    try:
        verdict, want, got = sess.check(m, feeds)
        assert np.isfinite(want.outputs["y"][2])  # onnxruntime's answer, the one this test is about
        assert verdict is None, (verdict, got.message if got else want.message)
        assert np.isposinf(got.outputs["y"][2]), got.outputs
        assert any("declared" in n for n in sess.notes), sess.notes
        off = runner.Outcome(runner.OK, {"y": want.outputs["y"]})
        assert not sess._declared_types_agree(m, feeds, off, {"y": want.outputs["y"]})
    finally:
        sess.close()


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_lp_normalization_out_of_the_squares_range(backend):
    """Found by glowc fuzz against onnxruntime: a float16 LpNormalization of [5.96e-8] over an axis of one element
    is 1 (x^2 underflowed float16: the kit gave 0); float32 rows of 1e-25 and 1e25 likewise. Expected: the
    definition in float64, rounded once."""
    import glow_core
    from glow_core.types import dtype as gdtype
    for dt, rows in ((np.float16, [[5.96e-8], [2.0], [0.0], [300.0]]),
                     (np.float32, [[1e-25, -2e-25], [1e25, 3e25], [0.0, 0.0], [3.0, 4.0]])):
        x = np.array(rows, dt)
        for p in (1, 2):
            xf = x.astype(np.float64)
            norm = np.sum(np.abs(xf) ** p, axis=1, keepdims=True) ** (1 / p)
            want = np.where(norm == 0, 0, xf / np.where(norm == 0, 1, norm)).astype(dt)
            m = _one_node("LpNormalization", x.shape, 22, axis=1, p=p)
            m.graph.input[0].type.tensor_type.elem_type = gdtype(dt).onnx
            m.graph.output[0].type.tensor_type.elem_type = gdtype(dt).onnx
            (got,) = glow_core.compile(m, backend).run({"x": x}).values()
            np.testing.assert_allclose(np.asarray(got, np.float64), want.astype(np.float64), rtol=4 * np.finfo(dt).eps,
                                       err_msg=f"{dt.__name__} p={p}")


def test_an_ill_conditioned_disagreement_is_arbitrated_by_the_rounding_spread():
    """BatchNormalization of zeros with variance 0 gives about -mean / sqrt(1e-5), a few hundred; Sin of that
    turns the last bit of the normalization (3e-5 there) into the fifth digit of the result. The backend and
    onnxruntime round it differently and both differ from the float64 evaluation by more than the tolerance (a
    finding of the 30-minute glowc fuzz run); the rounding spread of the float64 evaluation (every operand
    perturbed by a few unit roundoffs) clears the backend. An answer off by 1e-2 stays a finding."""
    pytest.importorskip("onnxruntime")
    F = onnx.TensorProto.FLOAT
    params = [np.float32(v) for v in ([1.0810653, 1.7107214, 1.1480725, 1.1111656],
                                      [-0.044323865, -0.9049024, 0.5122163, 0.816863],
                                      [0.6895863, -0.7074874, -0.8218991, -0.15936247], [0, 0, 0, 0])]
    m = _graph([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["n"]),
                helper.make_node("Sin", ["n"], ["y"])], [("x", F, [1, 4, 2, 1])],
               list(zip("sbmv", params)), opset=15)
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", F, [1, 4, 2, 1]))
    feeds = {"x": np.zeros((1, 4, 2, 1), np.float32)}
    sess = Session("cpu", "onnxruntime")
    try:
        verdict, want, got = sess.check(m, feeds)
        assert verdict is None, (verdict, got.message if got else want.message)
        assert any("rounding spread" in n for n in sess.notes), sess.notes
        off = runner.Outcome(runner.OK, {"y": got.outputs["y"] + np.float32(1e-2)})
        assert not sess._float64_agrees(m, feeds, off, {"y": want.outputs["y"]})
    finally:
        sess.close()


def test_a_sign_of_rounding_noise_is_arbitrated_by_the_rounding_spread():
    """float16 DFT of [1, 1] at length 4: bin 2 is 0 exactly, computed as a rounding residue of sin(pi) whose sign
    LpNormalization over an axis of one element returns (the backend's 0, onnxruntime's 1: a finding of the
    30-minute glowc fuzz run). The spread's absolute term for accumulating ops (of the order of the DFT's largest
    bin) clears it; a wrong answer at a well-conditioned element stays a finding."""
    pytest.importorskip("onnxruntime")
    h = onnx.TensorProto.FLOAT16
    m = _graph([helper.make_node("DFT", ["x", "n", "a"], ["d"]), helper.make_node("LpNormalization", ["d"], ["y"],
                                                                                    axis=1)],
               [("x", h, [2, 1, 1])], [("n", np.array(4, np.int64)), ("a", np.array(-3, np.int64))], opset=20)
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", h, [4, 1, 2]))
    feeds = {"x": np.ones((2, 1, 1), np.float16)}
    sess = Session("cpu", "onnxruntime")
    try:
        verdict, want, got = sess.check(m, feeds)
        assert verdict is None, (verdict, got.message if got else want.message)
        off = got.outputs["y"].copy()
        off[1, 0, 0] = 0.5  # the real part of bin 1, 1 - 1j, normalized: 1
        assert not sess._float64_agrees(m, feeds, runner.Outcome(runner.OK, {"y": off}), {"y": want.outputs["y"]})
    finally:
        sess.close()
