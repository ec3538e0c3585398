"""The static memory plan: a ResNet-style model is planned near the max-live lower bound with no two live
buffers overlapping (and still computes the right result), and ``glow_core.memory.allocate`` checked by brute
force on random interval sets."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core import errors, memory
from glow_conformance import example_models
from glow_core.ir import live_ranges
from glow_core.memory import ALIGNMENT, Interval, allocate, check_no_overlap
from glow_core.ops.registry import get_op

HAS_BN = get_op("BatchNormalization") is not None


def brute_max_live(intervals, alignment=ALIGNMENT):
    """Bytes live at each instant, by enumeration: the lower bound of any plan."""
    if not intervals:
        return 0
    end = max(iv.end for iv in intervals)
    return max(sum(-(-iv.size // alignment) * alignment for iv in intervals if iv.start <= t <= iv.end)
               for t in range(end + 1))


def brute_overlaps(intervals, offsets, alignment=1):
    bad = []
    for a, b in itertools.combinations(intervals, 2):
        if a.start <= b.end and b.start <= a.end and a.size and b.size:
            oa, ob = offsets[a.key], offsets[b.key]
            sa, sb = -(-a.size // alignment) * alignment, -(-b.size // alignment) * alignment
            if oa < ob + sb and ob < oa + sa:
                bad.append((a.key, b.key))
    return bad


# -- the ResNet --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def resnet():
    model = example_models.resnet(seed=0, batch=1, size=32, batchnorm=HAS_BN)
    convs = sum(n.op_type == "Conv" for n in model.graph.node)
    assert convs >= 16 and sum(n.op_type == "Add" for n in model.graph.node) >= 6
    return model, glow_core.compile(model, backend="interpreter")


def test_resnet_matches_reference(resnet):
    model, cm = resnet
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"input": x})[0]
    got = cm.run({"input": x})["output"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    # The interpreter computes inside the planned regions: runs must not see stale values of earlier runs.
    x2 = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    assert np.abs(cm.run({"input": x2})["output"] - got).max() > 1e-3
    np.testing.assert_array_equal(cm.run({"input": x})["output"], got)


def test_resnet_matches_onnxruntime(resnet):
    ort = pytest.importorskip("onnxruntime")
    model, cm = resnet
    m = type(model)()
    m.CopyFrom(model)
    m.ir_version = min(m.ir_version, 10)  # onnxruntime may not read the newest IR version
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = sess.run(None, {"input": x})[0]
    np.testing.assert_allclose(cm.run({"input": x})["output"], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_resnet_batchnorm_folded(resnet):
    _, cm = resnet
    ops = [n.op for n in cm.last.graph.nodes]
    assert "BatchNormalization" not in ops and "batch_norm" not in ops
    assert sum(op == "conv" for op in ops) >= 16
    if HAS_BN:
        assert cm.last.stats["passes"]["fold-batchnorm"] >= 16


def test_resnet_peak_near_lower_bound(resnet):
    _, cm = resnet
    irf = cm.last.ir
    plan = irf.plan
    ranges = live_ranges(irf)
    intervals = [Interval(key, buf.size, s, e) for key, (s, e, buf) in ranges.items()]
    bound = brute_max_live(intervals, plan.alignment)
    assert plan.allocation.lower_bound == bound
    assert bound > 0 and plan.activations_size == plan.allocation.peak
    assert plan.activations_size <= 1.10 * bound, (plan.activations_size, bound, plan.allocation.tried)
    # The peak is no smaller than what is live at once, and every buffer fits in the region.
    assert plan.activations_size >= bound
    for _, (_, _, buf) in ranges.items():
        assert buf.offset % plan.alignment == 0 and buf.offset + buf.size <= plan.activations_size


def test_resnet_no_live_overlap(resnet):
    _, cm = resnet
    irf = cm.last.ir
    ranges = live_ranges(irf)
    intervals = [Interval(key, buf.size, s, e) for key, (s, e, buf) in ranges.items()]
    offsets = {key: buf.offset for key, (_, _, buf) in ranges.items()}
    assert check_no_overlap(intervals, offsets) == []
    assert brute_overlaps(intervals, offsets) == []
    # Buffers are in fact reused: the region is much smaller than the sum of all activations.
    assert irf.plan.activations_size < 0.5 * sum(iv.size for iv in intervals)
    # Live ranges agree with the alloc/dealloc pseudo-instructions.
    for key, (s, e, buf) in ranges.items():
        assert irf.instrs[s].op == "allocactivation" and irf.instrs[s].operands[0][0] is buf
        assert irf.instrs[e].op == "deallocactivation" and irf.instrs[e].operands[0][0] is buf


@pytest.mark.parametrize("kw", [dict(size=24, batch=2), dict(size=20, widths=(8, 16, 24), blocks=3),
                                dict(size=17, widths=(5, 7, 9, 11), blocks=2)])
def test_resnet_variants_plan(kw):
    """Odd sizes and channel counts (buffers that are not multiples of the alignment), deeper stages, batch 2."""
    irf = glow_core.compile(example_models.resnet(seed=3, batchnorm=HAS_BN, **kw)).last.ir
    ranges = live_ranges(irf)
    intervals = [Interval(key, buf.size, s, e) for key, (s, e, buf) in ranges.items()]
    offsets = {key: buf.offset for key, (_, _, buf) in ranges.items()}
    assert brute_overlaps(intervals, offsets, alignment=irf.plan.alignment) == []
    bound = brute_max_live(intervals, irf.plan.alignment)
    assert bound <= irf.plan.activations_size <= 1.10 * bound


def test_resnet_memory_capacity():
    model = example_models.resnet(seed=0, size=16, widths=(8, 16), blocks=1, batchnorm=HAS_BN)
    peak = glow_core.compile(model).last.ir.plan.activations_size
    assert glow_core.compile(model, memory_capacity=peak).last.ir.plan.activations_size == peak
    with pytest.raises(errors.MemoryLimitError) as ei:
        glow_core.compile(model, memory_capacity=peak - 1)
    msg = str(ei.value)
    assert f"need {peak} bytes" in msg and f"capacity is {peak - 1} bytes" in msg and "largest buffer" in msg


# -- allocate on random intervals ---------------------------------------------------------------------------
def random_intervals(rng, n, horizon=40, max_size=5000):
    out = []
    for i in range(n):
        s = int(rng.integers(horizon))
        e = s + int(rng.integers(0, horizon // 3 + 1))
        size = int(rng.integers(0, max_size)) if rng.random() < 0.9 else int(rng.integers(1, 64))
        out.append(Interval(f"b{i}", size, s, e))
    return out


@pytest.mark.parametrize("seed", range(25))
def test_allocate_random(seed):
    rng = np.random.default_rng(seed)
    ivs = random_intervals(rng, int(rng.integers(1, 40)))
    a = allocate(ivs)
    assert set(a.offsets) == {iv.key for iv in ivs}
    assert all(off % 64 == 0 for off in a.offsets.values())
    assert brute_overlaps(ivs, a.offsets, alignment=64) == []
    assert check_no_overlap(ivs, a.offsets) == []
    assert a.lower_bound == brute_max_live(ivs) == memory.max_live_bytes(ivs)
    assert a.peak == max((a.offsets[iv.key] + -(-iv.size // 64) * 64 for iv in ivs), default=0)
    assert a.lower_bound <= a.peak
    # Statistics: every strategy was tried, the best one kept.
    assert set(a.tried) == set(memory.STRATEGIES) and a.peak == min(a.tried.values())
    assert a.tried[a.strategy] == a.peak
    assert a.efficiency == pytest.approx(a.lower_bound / a.peak if a.peak else 1.0)
    assert 0 < a.efficiency <= 1


@pytest.mark.parametrize("strategy", sorted(memory.STRATEGIES))
def test_each_strategy_is_sound(strategy):
    for seed in range(8):
        ivs = random_intervals(np.random.default_rng(100 + seed), 30)
        a = allocate(ivs, strategies=(strategy,))
        assert a.strategy == strategy and list(a.tried) == [strategy]
        assert brute_overlaps(ivs, a.offsets, alignment=64) == []
        assert a.peak >= brute_max_live(ivs)


@pytest.mark.parametrize("alignment", [1, 16, 64, 256])
def test_alignment(alignment):
    ivs = random_intervals(np.random.default_rng(alignment), 25, max_size=1000)
    a = allocate(ivs, alignment=alignment)
    assert all(off % alignment == 0 for off in a.offsets.values())
    assert brute_overlaps(ivs, a.offsets, alignment=alignment) == []
    assert a.lower_bound == brute_max_live(ivs, alignment)


def test_known_optima():
    # Disjoint lifetimes share one slot; the peak is the largest buffer, aligned.
    chain = [Interval(i, 100 * (i + 1), 2 * i, 2 * i + 1) for i in range(6)]
    assert allocate(chain).peak == 640
    # All alive at once: the peak is the sum of aligned sizes, which is also the bound.
    crowd = [Interval(i, 65, 0, 10) for i in range(5)]
    a = allocate(crowd)
    assert a.peak == a.lower_bound == 5 * 128 and sorted(a.offsets.values()) == [0, 128, 256, 384, 512]
    # A hole left by a dead buffer is reused by a later one that fits.
    ivs = [Interval("a", 640, 0, 2), Interval("b", 64, 0, 9), Interval("c", 640, 3, 9)]
    assert allocate(ivs).peak == 704
    assert allocate([]).peak == 0


def test_zero_size_buffers():
    ivs = [Interval("z", 0, 0, 5), Interval("a", 64, 0, 5), Interval("b", 64, 1, 3)]
    a = allocate(ivs)
    assert a.peak == 128 and brute_overlaps(ivs, a.offsets, 64) == []


def test_capacity_limit():
    ivs = [Interval("big_weights", 4000, 0, 3), Interval("act", 1000, 2, 5), Interval("tmp", 10, 4, 6)]
    a = allocate(ivs)
    assert allocate(ivs, capacity=a.peak).peak == a.peak
    with pytest.raises(errors.MemoryLimitError) as ei:
        allocate(ivs, capacity=a.peak - 1, region="sram")
    msg = str(ei.value)
    assert isinstance(ei.value, errors.GlowError)
    assert f"sram need {a.peak} bytes" in msg and f"lower bound {a.lower_bound}" in msg
    assert f"capacity is {a.peak - 1} bytes" in msg and "'big_weights' with 4000 bytes" in msg


def test_check_no_overlap_detects_conflicts():
    ivs = [Interval("a", 100, 0, 5), Interval("b", 100, 3, 8), Interval("c", 100, 6, 9)]
    assert check_no_overlap(ivs, {"a": 0, "b": 100, "c": 0}) == []
    assert check_no_overlap(ivs, {"a": 0, "b": 50, "c": 200}) == [("a", "b")]
    assert check_no_overlap(ivs, {"a": 0, "b": 100, "c": 150}) == [("b", "c")]


# -- instruction groups: a backend's fused kernel keeps its buffers apart -------------------------------------
def _conv_add_model():
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Conv", ["a", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "z"], ["y"]), helper.make_node("Add", ["y", "c"], ["out"])]
    io = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8, 8, 8])
    return helper.make_model(helper.make_graph(nodes, "g", [io("x"), io("z")], [io("out")], [w]))


def test_instruction_groups_keep_the_group_live():
    """Backend.instruction_groups: a conv and the add reading it run as one kernel, so the add's result may not
    take the conv input's bytes (free once the conv alone has run): the group's activations live over all of it,
    the alloc/dealloc pseudo-instructions say so, and the model still computes the right thing."""
    from glow_interpreter.backend import InterpreterBackend

    class Grouping(InterpreterBackend):
        def instruction_groups(self, irf):
            code = irf.code
            conv = next(i for i in code if i.op == "conv")
            return [[conv, next(i for i in code if i.op == "add")]]

    model = _conv_add_model()
    rng = np.random.default_rng(6)
    feeds = {k: rng.standard_normal((1, 8, 8, 8)).astype(np.float32) for k in ("x", "z")}
    plain = glow_core.compile(model, backend=InterpreterBackend()).last.ir
    grouped_cm = glow_core.compile(model, backend=Grouping())
    grouped = grouped_cm.last.ir
    assert plain.groups == [] and [[i.op for i in g] for g in grouped.groups] == [["conv", "add"]]
    for irf, together in ((plain, False), (grouped, True)):
        code = irf.code
        conv, add = next(i for i in code if i.op == "conv"), next(i for i in code if i.op == "add")
        ranges = live_ranges(irf)
        a, y = conv.ins[0].root, add.outs[0].root
        sa, ea, _ = ranges[id(a)]
        sy, ey, _ = ranges[id(y)]
        assert (sa <= ey and sy <= ea) == together  # without the group, a dies before y is born
        intervals = [Interval(key, buf.size, s, e) for key, (s, e, buf) in ranges.items()]
        offsets = {key: buf.offset for key, (_, _, buf) in ranges.items()}
        assert brute_overlaps(intervals, offsets) == []
    assert plain.plan.activations_size < grouped.plan.activations_size  # the plain plan puts y over a
    assert "; group: %" in grouped.dump()
    np.testing.assert_allclose(grouped_cm.run(feeds)["out"], ReferenceEvaluator(model).run(None, feeds)[0],
                               rtol=1e-4, atol=1e-4)


def test_instruction_group_of_unknown_instruction_is_refused():
    from glow_core.errors import VerifyError
    from glow_core.ir import Instr
    from glow_interpreter.backend import InterpreterBackend

    class Bad(InterpreterBackend):
        def instruction_groups(self, irf):
            return [[irf.code[0], Instr("add", [], {}, "ghost")]]

    with pytest.raises(VerifyError, match="'ghost' \\(add\\) is not an instruction of"):
        glow_core.compile(_conv_add_model(), backend=Bad())
