"""Heterogeneous partitioning: placement and its reasons, partitions without cycles, transfers, islands, memory
splits, forcing, the CPU backend's fallback, the placement report and ``glowc partition``.

Expectations come from the same model compiled for one backend (the interpreter, or cpu), compared with the
conformance suite's model tolerance, from graph facts checked independently of the partitioner (every value a
partition reads is a graph input or comes from an earlier partition), and from numpy."""
from __future__ import annotations

import json
import random
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_conformance.checker import compare
from glow_conformance.subset import SubsetBackend, conv_matmul_add
from glow_tools import cli
from glow_conformance import example_models as models
from glow_core.api import FallbackWarning, plan_partitions
from glow_core.backend import Backend, CompiledFunction
from glow_core.backend import ACCELERATOR
from glow_core.errors import GlowError, UnsupportedOpError
from glow_core.discovery import get_backend

INTERP = get_backend("interpreter")


def feeds(model, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        t = vi.type.tensor_type
        dt = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        out[vi.name] = rng.standard_normal([d.dim_value for d in t.shape.dim]).astype(dt)
    return out


def same(got: dict, want: dict, what: str):
    assert sorted(got) == sorted(want)
    for k in want:
        compare(got[k], want[k], "model", f"{what}: output {k}", rerun="")


def chain_model(ops, shape=(2, 3), dtype=TensorProto.FLOAT, name="chain"):
    """x -> ops[0] -> ops[1] -> ... -> y; binary ops take the previous value twice."""
    nodes, x = [], "x"
    for i, op in enumerate(ops):
        ins = [x, x] if op in ("Add", "Mul", "Sub") else [x]
        nodes.append(helper.make_node(op, ins, [f"v{i}"], name=f"n{i}"))
        x = f"v{i}"
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", dtype, list(shape))],
                          [helper.make_tensor_value_info(x, dtype, list(shape))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def dag_model(spec, name="dag"):
    """spec: [(name, op, [input names])] over graph input x [2, 3]; outputs: the values nobody reads."""
    read = {i for _, _, ins in spec for i in ins}
    nodes = [helper.make_node(op, ins, [n], name=n) for n, op, ins in spec]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n, _, _ in spec if n not in read]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])], outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def check_structure(plan):
    """Independent of the partitioner's algorithm: each partition runs on one backend, and every value it reads
    is a graph input or produced by an earlier partition (so the order is topological: no cycle); every node
    is in exactly one partition."""
    where = {}
    for i, p in enumerate(plan.partitions):
        for u in p.units:
            assert u.backend == p.backend
            assert id(u.node) not in where
            for v in u.node.inputs:
                if v is None or v.is_const or v.kind == "placeholder":
                    continue
                j = where.get(id(v.producer))
                if j is None:  # produced later in this same partition? never: units are in topological order
                    raise AssertionError(f"partition {i}: '{u.node.name}' reads '{v.name}' before it is computed")
                assert j <= i
            where[id(u.node)] = i
        for v in p.inputs:
            assert v.kind == "placeholder" or where[id(v.producer)] < i
    assert len(where) == len(plan.units)
    return where


def mergeable_pairs(plan):
    """Pairs of partitions on one backend that no other partition separates (a path through another partition
    would make their union part of a cycle): a partitioning with such a pair is not as small as it could be."""
    k = len(plan.partitions)
    home = {id(v): i for i, p in enumerate(plan.partitions) for u in p.units for v in u.node.outputs}
    deps = [{home[id(v)] for v in p.inputs if id(v) in home} for p in plan.partitions]
    reach = [set() for _ in range(k)]  # reach[i]: partitions i depends on, transitively
    for i in range(k):
        for d in deps[i]:
            reach[i] |= reach[d] | {d}
    out = []
    for i in range(k):
        for j in range(i + 1, k):
            if plan.partitions[i].backend != plan.partitions[j].backend:
                continue
            between = [x for x in range(k) if x not in (i, j) and i in reach[x] | {x} and x in reach[j]]
            if not between:
                out.append((i, j))
    return out


# -- partitions: structure ------------------------------------------------------------------------------------
A = SubsetBackend(INTERP, ops=("add", "neg", "abs"), name="dev_a")  # B: the interpreter, for mul, sigmoid, exp


def test_alternating_chain_has_one_partition_per_run():
    m = chain_model(["Add", "Mul", "Mul", "Add", "Neg", "Sigmoid", "Abs"])
    plan = plan_partitions(m, [A, INTERP])
    check_structure(plan)
    assert [(plan.names[p.backend], len(p.units)) for p in plan.partitions] == \
        [("dev_a", 1), ("interpreter", 2), ("dev_a", 2), ("interpreter", 1), ("dev_a", 1)]
    x = feeds(m)
    same(glow_core.compile(m, backend=[A, INTERP]).run(x), glow_core.compile(m, "interpreter").run(x), "chain")


def test_independent_branches_share_partitions():
    m = dag_model([("a1", "Add", ["x", "x"]), ("m1", "Mul", ["a1", "a1"]),
                   ("a2", "Neg", ["x"]), ("m2", "Sigmoid", ["a2"])])
    plan = plan_partitions(m, [A, INTERP])
    check_structure(plan)
    assert [(plan.names[p.backend], len(p.units)) for p in plan.partitions] == [("dev_a", 2), ("interpreter", 2)]


def test_a_node_joins_an_independent_earlier_partition():
    # b1 (interpreter) does not depend on a1 (dev_a), so u (dev_a, reads both) can share a1's partition.
    m = dag_model([("a1", "Add", ["x", "x"]), ("b1", "Exp", ["x"]), ("u", "Add", ["a1", "b1"]),
                   ("b2", "Mul", ["u", "u"])])
    plan = plan_partitions(m, [A, INTERP])
    check_structure(plan)
    assert len(plan.partitions) == 3 and not mergeable_pairs(plan)


def test_diamond_needs_three_partitions():
    m = dag_model([("a", "Add", ["x", "x"]), ("b", "Mul", ["a", "a"]), ("c", "Neg", ["a"]), ("d", "Add", ["b", "c"])])
    plan = plan_partitions(m, [A, INTERP])
    check_structure(plan)
    assert [(plan.names[p.backend], sorted(u.origin for u in p.units)) for p in plan.partitions] == \
        [("dev_a", ["a", "c"]), ("interpreter", ["b"]), ("dev_a", ["d"])]


@pytest.mark.parametrize("seed", range(6))
def test_random_dags_partition_without_cycles(seed):
    rng = random.Random(seed)
    spec, names = [], ["x"]
    for i in range(60):
        op = rng.choice(["Add", "Mul", "Neg", "Sigmoid", "Abs", "Exp", "Sub"])
        k = 2 if op in ("Add", "Mul", "Sub") else 1
        ins = [rng.choice(names[-12:]) for _ in range(k)]
        spec.append((f"n{i}", op, ins))
        names.append(f"n{i}")
    m = dag_model(spec)
    # dev_a claims add/neg/abs and, on top, refuses a random third of the nodes
    refuse = {u.node.name for u in plan_partitions(m, [INTERP]).units if rng.random() < 0.33}
    dev = SubsetBackend(INTERP, ops=("add", "neg", "abs", "sub"), refuse=refuse, name="dev_a")
    plan = plan_partitions(m, [dev, INTERP])
    check_structure(plan)
    assert not mergeable_pairs(plan), "two partitions of one backend could have been merged"
    x = {"x": np.random.default_rng(seed).uniform(-1, 1, (2, 3)).astype(np.float32)}
    got = glow_core.compile(m, backend=[dev, INTERP]).run(x)
    want = glow_core.compile(m, "interpreter").run(x)
    for k in want:  # the same numpy kernels on both sides of every cut: bit-exact
        np.testing.assert_array_equal(got[k], want[k])


def test_graph_outputs_that_are_inputs_constants_or_repeated():
    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["same"]), helper.make_node("Add", ["x", "x"], ["s"], name="add"),
         helper.make_node("Identity", ["s"], ["s2"]), helper.make_node("Exp", ["s"], ["e"], name="exp"),
         helper.make_node("Identity", ["c"], ["const_out"])],
        "outs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("same", "s", "s2", "e", "const_out")],
        [numpy_helper.from_array(np.arange(3, dtype=np.float32), "c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.array([1, -2, 3], np.float32)
    out = glow_core.compile(m, backend=[A, INTERP]).run({"x": x})
    np.testing.assert_array_equal(out["same"], x)
    np.testing.assert_array_equal(out["s"], 2 * x)
    np.testing.assert_array_equal(out["s2"], 2 * x)
    np.testing.assert_allclose(out["e"], np.exp(2 * x.astype(np.float64)), rtol=1e-6)
    np.testing.assert_array_equal(out["const_out"], np.arange(3, dtype=np.float32))
    out["same"][0] = 99
    out["s"][0] = 99
    assert x[0] == 1 and out["s2"][0] == 2, "outputs must not share memory with inputs or each other"


# -- reasons --------------------------------------------------------------------------------------------------
def test_op_and_dtype_refusals_are_distinct_reasons():
    dev = SubsetBackend(INTERP, ops=("add", "mul"), dtypes=("float32",), name="dev")
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["a"], name="add32"), helper.make_node("Exp", ["a"], ["e"], name="exp"),
         helper.make_node("Cast", ["e"], ["d"], to=TensorProto.DOUBLE, name="cast"),
         helper.make_node("Mul", ["d", "d"], ["y"], name="mul64")],
        "reasons", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    rep = glow_core.compile(m, backend=[dev, INTERP]).placement()
    by = {n.origin: n for n in rep.nodes}
    assert by["add32"].backend == "dev" and by["add32"].reason == "supported"
    assert by["exp"].reason == "op-refused" and "claims only add, mul" in by["exp"].detail
    assert by["mul64"].reason == "dtype-refused" and "float32 only, not float64" in by["mul64"].detail
    assert rep.reasons() == {"op-refused": 2, "dtype-refused": 1}  # exp and the cast (a float64 output: not claimed)
    text = str(rep)
    assert "op refused: 2" in text and "dtype refused: 1" in text


class SoftmaxUnit(Backend):
    """A device with only a Softmax unit: keeps ONNX Softmax (opset 13+) whole and computes it with numpy from the
    ONNX spec (exp(x - max) / sum along ``axis``)."""

    name = "softmax_unit"

    def is_op_supported(self, info):
        return info.op == "Softmax" and info.in_dtypes == ("float32",)

    def should_lower(self, node):
        return node.op != "Softmax"

    def compile(self, function, options):
        (ins,) = function.code
        return _SoftmaxFunction(function, ins)


class _SoftmaxFunction(CompiledFunction):
    def __init__(self, irf, ins):
        self.irf, self.axis = irf, ins.attrs["axis"]

    def execute(self, inputs):
        (x,) = inputs.values()
        e = np.exp(x - x.max(axis=self.axis, keepdims=True))
        (name,) = self.irf.outputs
        return {name: (e / e.sum(axis=self.axis, keepdims=True)).astype(np.float32)}


def test_kept_whole_elsewhere():
    g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["m"], name="mul"),
                           helper.make_node("Softmax", ["m"], ["s"], axis=-1, name="softmax"),
                           helper.make_node("Add", ["s", "x"], ["y"], name="add")],
                          "sm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    cm = glow_core.compile(m, backend=[INTERP, SoftmaxUnit()])
    rep = cm.placement()
    (sm,) = [n for n in rep.nodes if n.backend == "softmax_unit"]
    assert (sm.node, sm.op, sm.reason) == ("softmax", "Softmax", "kept-whole-elsewhere")
    assert "softmax_unit keeps Softmax whole; interpreter would lower it" == sm.detail
    assert [p.backend for p in rep.partitions] == ["interpreter", "softmax_unit", "interpreter"]
    x = feeds(m)
    same(cm.run(x), glow_core.compile(m, "interpreter").run(x), "softmax kept whole")


def test_forced_placement():
    m = chain_model(["Add", "Relu", "Mul"])
    cm = glow_core.compile(m, backend=["cpu", "interpreter"], force={"Relu": "interpreter"})
    rep = cm.placement()
    forced = [n for n in rep.nodes if n.reason == "forced"]
    assert forced and all(n.origin == "n1" and n.backend == "interpreter" for n in forced)
    assert "force={'Relu': 'interpreter'}" in forced[0].detail
    assert all(n.backend == "cpu" for n in rep.nodes if n.origin != "n1")
    x = feeds(m)
    same(cm.run(x), glow_core.compile(m, "interpreter").run(x), "forced")
    with pytest.raises(GlowError, match="names no node"):
        glow_core.compile(m, backend=["cpu", "interpreter"], force={"Softmax": "interpreter"})
    with pytest.raises(GlowError, match="not one of the backends"):
        glow_core.compile(m, backend=["cpu", "interpreter"], force={"Relu": "acme"})


def test_no_backend_runs_it():
    dev = SubsetBackend(INTERP, ops=("add",), name="dev_a")
    dev_b = SubsetBackend(INTERP, ops=("mul",), name="dev_b")
    with pytest.raises(UnsupportedOpError) as e:
        glow_core.compile(chain_model(["Add", "Exp"]), backend=[dev, dev_b])
    msg = str(e.value)
    assert "node 'n1_exp' (exp with dtypes float32, lowered from 'n1' (Exp))" in msg
    assert "dev_a: claims only add" in msg and "dev_b: claims only mul" in msg


# -- islands and memory ---------------------------------------------------------------------------------------
def test_small_islands_return_to_the_host_by_cost_model():
    m = models.bert_encoder(seq=16, hidden=64, heads=2, layers=1, ffn=128)
    host_like = SubsetBackend(get_backend("cpu"), ops=("conv", "matmul", "add"), dtypes=("float32",), name="npu")
    card = conv_matmul_add()
    plain, costed = plan_partitions(m, [host_like, "cpu"]), plan_partitions(m, [card, "cpu"])
    assert not [u for u in plain.units if u.reason == "island"], "a device computing in host memory keeps islands"
    islands = [u for u in costed.units if u.reason == "island"]
    assert islands and all(u.node.op in ("add", "matmul") for u in islands)
    cost, cpu = ACCELERATOR, get_backend("cpu").cost_model()
    for u in islands:  # the rule, from the figures: the host computes it faster than the card plus its transfers
        ins = [v for v in u.node.inputs if v is not None and not v.is_const]
        moved = sum(v.type.nbytes for v in ins + u.node.outputs)
        f = costed._flops[id(u.node)]
        assert cpu.compute_seconds(f) < cost.compute_seconds(f) + cost.transfer_seconds(moved, len(ins) + 1)
    assert len(costed.partitions) < len(plain.partitions)
    x = feeds(m)
    same(glow_core.compile(m, backend=[card, "cpu"]).run(x), glow_core.compile(m, "cpu").run(x), "bert islands")


class SmallMemory(SubsetBackend):
    """The interpreter with ``capacity`` bytes of activation memory and, for conv, ``conv_scratch`` scratch bytes."""

    def __init__(self, capacity, conv_scratch=0):
        super().__init__(INTERP, name="small")
        self.capacity, self.conv_scratch = capacity, conv_scratch

    def memory_capacity(self):
        return self.capacity

    def scratch_bytes(self, instr):
        return self.conv_scratch if instr.op == "conv" else 0


def test_partitions_over_device_memory_are_split():
    m = models.resnet(size=16, widths=(8, 16), blocks=1)
    whole = glow_core.compile(m, backend=[SmallMemory(None), "interpreter"])
    peak = whole.last.parts[0].ir.plan.activations_size
    assert len(whole.last.parts) == 1
    cm = glow_core.compile(m, backend=[SmallMemory(peak // 4), "interpreter"])
    res = cm.last
    assert len(res.parts) > 1 and all(r.ir.plan.activations_size <= peak // 4 for r in res.parts)
    assert all(p.backend == "small" for p in cm.placement().partitions)
    assert all("over device memory" in p.split for p in cm.placement().partitions)
    x = feeds(m)
    np.testing.assert_array_equal(cm.run(x)["output"], whole.run(x)["output"])


def test_a_node_too_large_for_the_device_moves_on():
    m = models.cnn()
    cm = glow_core.compile(m, backend=[SmallMemory(1 << 20, conv_scratch=2 << 20), "cpu"])
    rep = cm.placement()
    (conv,) = [n for n in rep.nodes if n.op == "conv"]
    assert conv.backend == "cpu" and conv.reason == "over-memory" and "does not fit" in conv.detail
    assert all(n.backend == "small" for n in rep.nodes if n.op != "conv")
    x = feeds(m)
    same(cm.run(x), glow_core.compile(m, "interpreter").run(x), "conv moved for memory")


# -- the must-show models: a device claiming conv, matmul and add (float32), with CPU fallback -------------------
MUST_SHOW = {
    "resnet18": lambda: models.resnet18(size=64),
    "mobilenetv2": lambda: models.mobilenetv2(size=64, width=0.5),
    "bert_encoder": lambda: models.bert_encoder(seq=32, hidden=64, heads=2, layers=2, ffn=128),
}


@pytest.mark.parametrize("name", sorted(MUST_SHOW))
def test_first_day_device_runs_whole_models(name):
    m = MUST_SHOW[name]()
    cm = glow_core.compile(m, backend=[conv_matmul_add(), "cpu"])
    rep = cm.placement()
    on_dev = [n for n in rep.nodes if n.backend == "cma_npu"]
    assert on_dev and all(n.op in ("conv", "matmul", "add") for n in on_dev)
    assert rep.count("cma_npu") > 1 and rep.count("cpu") > 1
    assert set(rep.reasons()) <= {"op-refused", "dtype-refused", "island"}
    x = feeds(m)
    same(cm.run(x), glow_core.compile(m, "cpu").run(x), name)


# -- the CPU backend's fallback -------------------------------------------------------------------------------
def topk_model():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                           helper.make_node("TopK", ["r", "k"], ["v", "i"], axis=1, name="top"),
                           helper.make_node("Add", ["v", "v"], ["y"], name="add")],
                          "topk", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2]),
                           helper.make_tensor_value_info("i", TensorProto.INT64, [3, 2])],
                          [numpy_helper.from_array(np.array([2], np.int64), "k")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_cpu_falls_back_to_the_interpreter_with_a_notice():
    m = topk_model()
    x = np.random.default_rng(3).permutation(15).reshape(3, 5).astype(np.float32) - 7
    with pytest.warns(FallbackWarning, match=r"backend 'cpu' does not run 1 node\(s\).*'top' \(TopK\) -> interpreter"):
        cm = glow_core.compile(m, "cpu")
    got = cm.run({"x": x})
    r = np.maximum(x, 0)
    want_i = np.argsort(-r, axis=1, kind="stable")[:, :2]
    np.testing.assert_array_equal(got["i"], want_i)
    np.testing.assert_array_equal(got["y"], 2 * np.take_along_axis(r, want_i, axis=1))
    rep = cm.placement()
    assert [p.backend for p in rep.partitions] == ["cpu", "interpreter", "cpu"]
    assert rep.reasons() == {"op-refused": 1}
    with pytest.raises(UnsupportedOpError, match="TopK"):
        glow_core.compile(m, "cpu", fallback=False)


def test_fallback_is_a_backend_property():
    assert Backend.fallback_backends(INTERP) == [] and get_backend("interpreter").fallback_backends() == []
    dev = SubsetBackend(INTERP, ops=("add",), name="dev")
    m = chain_model(["Add", "Exp"])
    with pytest.raises(UnsupportedOpError):
        glow_core.compile(m, dev)  # no fallback by default
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        glow_core.compile(chain_model(["Add", "Mul"]), "cpu")  # nothing refused: no notice, one partition
    cm = glow_core.compile(chain_model(["Add", "Mul"]), "cpu")
    assert cm.ir is not None and len(cm.placement().partitions) == 1
    with pytest.warns(FallbackWarning):
        cm = glow_core.compile(m, dev, fallback=["interpreter"])
    assert [p.backend for p in cm.placement().partitions] == ["dev", "interpreter"]


# -- the report and the command line ----------------------------------------------------------------------------
def test_report_data_and_dot():
    m = models.resnet(size=16, widths=(8, 16), blocks=1)
    rep = glow_core.compile(m, backend=[conv_matmul_add(), "cpu"]).placement()
    data = json.loads(json.dumps(rep.to_dict()))
    assert data["backends"] == ["cma_npu", "cpu"] and len(data["partitions"]) == len(rep.partitions)
    assert sum(p["nodes"] for p in data["partitions"]) == len(data["nodes"])
    assert data["reasons"] == rep.reasons() and sum(rep.reasons().values()) == len(rep.offloaded())
    dot = rep.to_dot()
    assert dot.startswith("digraph") and dot.count("subgraph cluster_") == len(rep.partitions)
    assert dot.count("[label=") >= len(rep.nodes)


def test_glowc_partition(tmp_path, capsys):
    path = tmp_path / "resnet.onnx"
    onnx.save(models.resnet(size=16, widths=(8, 16), blocks=1), path)
    dot = tmp_path / "p.dot"
    assert cli.main(["partition", str(path), "--backend", "glow_conformance.subset:conv_matmul_add,cpu",
                     "--dot", str(dot)]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("model 'resnet' over cma_npu, cpu: ") and "partition(s) (cma_npu " in first
    assert "bytes in" in out and "bytes out" in out and "MFLOP" in out
    assert "nodes not on cma_npu:" in out and "op refused:" in out and "claims only add, conv, matmul" in out
    assert dot.read_text().startswith("digraph")
    assert cli.main(["partition", str(path), "--backend", "cpu"]) == 0
    assert "1 partition(s) (cpu 1)" in capsys.readouterr().out
    assert cli.main(["partition", str(path), "--backend", "cpu,,interpreter"]) == 1
    assert "comma" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["partition", "--help"])
    assert "glowc partition resnet.onnx --backend acme_npu,cpu" in capsys.readouterr().out


def test_glowc_run_and_dump_across_backends(tmp_path, capsys):
    m = models.cnn(seed=4)
    path = tmp_path / "cnn.onnx"
    onnx.save(m, path)
    x = feeds(m)
    np.save(tmp_path / "x.npy", x["input"])
    assert cli.main(["run", str(path), "--backend", "glow_conformance.subset:conv_matmul_add,cpu",
                     "--input", f"input={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / "out")]) == 0
    got = np.load(tmp_path / "out" / "output.npy")
    compare(got, glow_core.compile(m, "interpreter").run(x)["output"], "model", "glowc run", rerun="")
    capsys.readouterr()
    assert cli.main(["dump", str(path), "--backend", "glow_conformance.subset:conv_matmul_add,cpu", "--ir"]) == 0
    out = capsys.readouterr().out
    assert out.count("# partition ") >= 2 and "# partition 0: cma_npu" in out and "code {" in out
