"""The node scheduler, the memory plan's soundness and scratch operands.

The scheduler's order is topological and, on trees, needs no more memory than any depth-first order (checked by
brute force against the cost model written out here); the pipeline keeps it only when its plan is smaller, so
no model's activations grow and results stay bit-identical. Every plan is checked by brute force: no two
buffers live at the same instruction share a byte, and buffer sharing only merges buffers whose lives touch at
the instruction that shares them. A backend asking scratch for every convolution gets it placed and counted."""
from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core import errors
from glow_conformance import example_models
from glow_core.graph import Function
from glow_core.importer.onnx_import import import_model
from glow_core.ir import PSEUDO, generate_ir, remove_dead_allocations, share_buffers
from glow_core.lower import lower
from glow_core.memory import align_up
from glow_core.schedule import peak_bytes, schedule
from glow_core.types import TensorType, dtype
from glow_interpreter.backend import InterpreterBackend

F32 = dtype("float32")


def feeds_for(model, seed=0):
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    return {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
            for vi in model.graph.input if vi.name not in inits}


def branches(n=4, shape=(1, 8, 16, 16)):
    """``n`` branches Exp(x * c_i) -> ReduceSum over all axes, concatenated, listed breadth-first (every Mul,
    then every Exp, then every ReduceSum), as some exporters order a graph: all ``n`` large values are live at
    once unless the branches are run one after another."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal(shape[1:]).astype(np.float32) * 0.1, f"c{i}")
             for i in range(n)]
    nodes = [helper.make_node("Mul", ["x", f"c{i}"], [f"m{i}"], name=f"m{i}") for i in range(n)]
    nodes += [helper.make_node("Exp", [f"m{i}"], [f"e{i}"], name=f"e{i}") for i in range(n)]
    nodes += [helper.make_node("ReduceSum", [f"e{i}"], [f"r{i}"], keepdims=1, name=f"r{i}") for i in range(n)]
    nodes += [helper.make_node("Concat", [f"r{i}" for i in range(n)], ["y"], axis=0, name="cat")]
    g = helper.make_graph(nodes, "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, 1, 1, 1])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


MODELS = {
    "branches": branches,
    "cnn": lambda: example_models.cnn(seed=2),
    "resnet": lambda: example_models.resnet(seed=3, size=16, widths=(8, 16), blocks=1),
    "bert": lambda: example_models.bert_encoder(seq=8, hidden=32, heads=2, ffn=64, layers=2),
    "vit": lambda: example_models.vit_tiny(size=32, patch=8, hidden=32, heads=2, mlp=64, classes=10, layers=2),
    "chain": lambda: example_models.elementwise_chain(60),
}


# -- the scheduler on the pipeline --------------------------------------------------------------------------
def test_scheduler_runs_branches_one_after_another():
    model = branches()
    x = feeds_for(model)["x"]
    plain = glow_core.compile(model, schedule=False)
    sched = glow_core.compile(model)
    p = sched.last.ir.plan
    big = align_up(8 * 16 * 16 * 4)
    assert plain.last.ir.plan.activations_size >= 4 * big  # breadth-first: the four Exp results live at once
    assert p.unscheduled_size == plain.last.ir.plan.activations_size
    assert p.activations_size <= 2 * big < p.unscheduled_size
    assert sched.last.stats["schedule"] == {"activations_before": p.unscheduled_size,
                                            "activations_after": p.activations_size, "reordered": True}
    assert f"activations {p.activations_size} B (before scheduling {p.unscheduled_size} B" in sched.last.ir.dump()
    c = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    want = np.array([np.exp(x * c[f"c{i}"]).sum(dtype=np.float64) for i in range(4)]).reshape(4, 1, 1, 1)
    got = sched.run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert got.tobytes() == plain.run({"x": x})["y"].tobytes()
    # The graph the IR came from is in the scheduled order: each Exp's ReduceSum follows it at once.
    ops = [n.op for n in sched.last.graph.nodes]
    assert ops.index("reduce_sum") < len(ops) - 1 - ops[::-1].index("exp")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_scheduling_never_grows_a_plan_and_keeps_results(name):
    model = MODELS[name]()
    feeds = feeds_for(model)
    plain, sched = glow_core.compile(model, schedule=False), glow_core.compile(model)
    a, b = plain.last.ir.plan, sched.last.ir.plan
    assert a.unscheduled_size is None and b.unscheduled_size == a.activations_size
    assert b.activations_size <= a.activations_size
    assert sched.last.stats["schedule"]["reordered"] == (b.activations_size < a.activations_size)
    for k, v in plain.run(feeds).items():
        assert sched.run(feeds)[k].tobytes() == v.tobytes()


# -- the scheduler against its cost model, on small graphs ---------------------------------------------------
def random_tree(rng, n):
    """A tree of ``n`` nodes on one input (each node reads the outputs of its children), output sizes random."""
    fn = Function("tree")
    x = fn.add_input("x", TensorType(F32, (4,)))
    parent = [None] + [int(rng.integers(0, i)) for i in range(1, n)]  # towards the root, node 0
    out = {}
    for i in reversed(range(n)):  # children (higher numbers) before parents
        ins = [out[j] for j in range(n) if parent[j] == i] or [x]
        out[i] = fn.add_node("add", ins, {}, [TensorType(F32, (int(rng.integers(1, 64)),))], name=f"n{i}").outputs[0]
    fn.set_outputs([out[0]], ["y"])
    return fn


def model_peak(fn, order):
    """Bytes live at the worst step of ``order`` in the scheduler's cost model: a node's results live from its
    step to the step of its last reader, results nobody reads only during their step (function outputs live
    elsewhere and count nothing)."""
    outputs = {v.id for v in fn.outputs}
    last = {}
    for i, n in enumerate(order):
        for v in n.inputs:
            last[v.id] = i
    peak, live = 0, {}
    for i, n in enumerate(order):
        for v in n.outputs:
            if v.id not in outputs:
                live[v.id] = v.type.nbytes
        peak = max(peak, sum(live.values()))
        for v in list(n.inputs) + n.outputs:
            if last.get(v.id, i) == i:
                live.pop(v.id, None)
    return peak


def depth_first_orders(fn):
    """Every order that computes each node right after its children, children in any order."""
    producer = {v.id: n for n in fn.nodes for v in n.outputs}
    kids = {n: [producer[v.id] for v in n.inputs if v.id in producer] for n in fn.nodes}

    def orders(n):
        for perm in itertools.permutations(kids[n]):
            for parts in itertools.product(*(list(orders(k)) for k in perm)):
                yield [m for part in parts for m in part] + [n]
    return list(orders(producer[fn.outputs[0].id]))


def is_topological(fn, order):
    pos = {n: i for i, n in enumerate(order)}
    return len(order) == len(fn.nodes) and set(order) == set(fn.nodes) and all(
        pos[v.producer] < pos[n] for n in order for v in n.inputs if v.producer is not None)


@pytest.mark.parametrize("seed", range(30))
def test_schedule_of_a_tree_is_the_best_depth_first_order(seed):
    rng = np.random.default_rng(seed)
    fn = random_tree(rng, int(rng.integers(2, 8)))
    order = schedule(fn)
    assert is_topological(fn, order)
    assert model_peak(fn, order) == min(model_peak(fn, o) for o in depth_first_orders(fn))


def test_schedule_of_a_dag_is_topological_and_measured():
    for seed in range(20):
        rng = np.random.default_rng(seed)
        fn = Function("dag")
        vals = [fn.add_input("x", TensorType(F32, (4,)))]
        for i in range(int(rng.integers(1, 40))):
            ins = [vals[int(j)] for j in rng.choice(len(vals), size=min(len(vals), int(rng.integers(1, 3))),
                                                        replace=False)]
            vals.append(fn.add_node("add", ins, {}, [TensorType(F32, (int(rng.integers(1, 9)),))]).outputs[0])
        fn.set_outputs([vals[-1], vals[len(vals) // 2]], ["a", "b"])
        order = schedule(fn)
        assert is_topological(fn, order)
        for o in (order, fn.nodes):
            assert peak_bytes(fn, o) == model_peak(fn, o)


# -- plan soundness -----------------------------------------------------------------------------------------
def live_intervals(irf):
    """(first, last) instruction index of every activation root, from the computing instructions' operands."""
    rng = {}
    for idx, ins in enumerate(i for i in irf.instrs if i.op not in PSEUDO or i.op == "tensorview"):
        for b, _ in ins.operands:
            r = b.root
            if r.kind == "activation":
                lo, _ = rng.get(id(r), (idx, idx))
                rng[id(r)] = (lo, idx)
    return rng


def overlapping_pairs(irf):
    roots = {id(b): b for b in irf.buffers if b.kind == "activation"}
    ivs = live_intervals(irf)
    bad = []
    for a, b in itertools.combinations(ivs, 2):
        (s1, e1), (s2, e2) = ivs[a], ivs[b]
        x, y = roots[a], roots[b]
        live_together = s1 <= e2 and s2 <= e1 and x.size and y.size
        if live_together and x.offset < y.offset + y.size and y.offset < x.offset + x.size:
            bad.append((x.name, y.name))
    return bad


@pytest.mark.parametrize("name", sorted(MODELS))
def test_no_two_live_buffers_overlap(name):
    irf = glow_core.compile(MODELS[name]()).last.ir
    p = irf.plan
    acts = [b for b in irf.buffers if b.kind == "activation"]
    assert acts and all(b.offset is not None and b.offset % p.alignment == 0 for b in acts)
    assert max(b.offset + b.size for b in acts) <= p.activations_size
    assert overlapping_pairs(irf) == []


@pytest.mark.parametrize("name", sorted(MODELS))
def test_sharing_merges_only_lives_that_touch(name):
    """Buffers merged by share_buffers: in the IR before sharing, each one's life starts at the instruction
    where the previous one's ends."""
    model = MODELS[name]()
    irfs = []
    for share in (False, True):
        fn = import_model(model)
        lower(fn)
        fn.toposort()
        irf = generate_ir(fn)
        remove_dead_allocations(irf)
        if share:
            shared = share_buffers(irf)
        irfs.append(irf)
    before, after = ([i for i in irf.instrs if i.op not in ("allocactivation", "deallocactivation")] for irf in irfs)
    assert [i.op for i in before] == [i.op for i in after]
    merged = {}
    for i0, i1 in zip(before, after):
        for (b0, _), (b1, _) in zip(i0.operands, i1.operands):
            if b0.kind == "activation":
                merged.setdefault(id(b1), {})[id(b0)] = b0
    ivs = live_intervals(irfs[0])
    groups = [sorted(ivs[k] for k in g) for g in merged.values() if len(g) > 1]
    assert shared > 0 and sum(len(g) - 1 for g in groups) == shared
    for g in groups:
        for (s1, e1), (s2, e2) in zip(g, g[1:]):
            assert s2 == e1, g


# -- scratch --------------------------------------------------------------------------------------------------
class ScratchInterpreter(InterpreterBackend):
    """The interpreter, asking scratch for every convolution (as a CPU im2col kernel would)."""

    name = "scratch-interpreter"

    def __init__(self, per_conv=100_000, capacity=None):
        self.per_conv, self.capacity = per_conv, capacity

    def scratch_bytes(self, instr):
        return self.per_conv + 8 * len(instr.name) if instr.op == "conv" else 0

    def memory_capacity(self):
        return self.capacity


@pytest.mark.parametrize("name", ["cnn", "resnet"])
def test_scratch_is_planned_and_counted(name):
    model = MODELS[name]()
    feeds = feeds_for(model)
    be = ScratchInterpreter()
    cm = glow_core.compile(model, be)
    irf = cm.last.ir
    convs = [i for i in irf.code if i.op == "conv"]
    assert convs and all(i.scratch is not None and i.scratch.size == be.scratch_bytes(i) for i in convs)
    assert all(i.scratch is None for i in irf.code if i.op != "conv")
    p = irf.plan
    assert p.scratch_size == sum(be.scratch_bytes(i) for i in convs)
    assert p.scratch_peak == max(align_up(be.scratch_bytes(i)) for i in convs)
    assert p.activations_size >= p.scratch_peak
    # Each scratch buffer is allocated just before its instruction and freed just after it.
    for k, ins in enumerate(irf.instrs):
        if ins.op == "conv":
            at = [j for j, i in enumerate(irf.instrs) if i.operands and i.operands[0][0] is ins.scratch and j != k]
            assert len(at) == 2 and at[0] < k < at[1]
            assert all(i.op == "allocactivation" for i in irf.instrs[at[0]:k])
            assert all(i.op == "deallocactivation" for i in irf.instrs[k + 1:at[1] + 1])
    assert overlapping_pairs(irf) == []
    plain = glow_core.compile(model)
    for k, v in plain.run(feeds).items():
        assert cm.run(feeds)[k].tobytes() == v.tobytes()
    text = irf.dump()
    assert f"@scratch %{convs[0].scratch.name}" in text
    assert f"scratch {p.scratch_size} B in all, {p.scratch_peak} B at most at once" in text


def test_capacity_counts_scratch():
    model = MODELS["cnn"]()
    need = glow_core.compile(model, ScratchInterpreter()).last.ir.plan.activations_size
    without = glow_core.compile(model).last.ir.plan.activations_size
    assert need > without
    assert glow_core.compile(model, ScratchInterpreter(capacity=need)).last.ir.plan.activations_size == need
    for kw in ({"backend": ScratchInterpreter(capacity=without)},
               {"backend": ScratchInterpreter(), "memory_capacity": need - 1}):
        with pytest.raises(errors.MemoryLimitError) as ei:
            glow_core.compile(model, **kw)
        assert f"need {need} bytes" in str(ei.value) and "__scratch" in str(ei.value)
