"""glow_core.layout: the layout pass's decisions on a small graph, and the CPU backend's answer end to end."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.api import compile_function
from glow_core.discovery import get_backend
from glow_core.importer.onnx_import import import_model
from glow_core.ir import PLAIN, generate_ir, plan_memory, remove_dead_allocations, stored_shape, verify_ir
from glow_core.layout import LAYOUT_CONVERT, LayoutRequirement, assign_layouts
from glow_core.lower import lower

BLOCKED = "nchwc4"


def _model(c=5):
    """input -> conv1 -> conv2 -> add(conv2, conv1) -> sigmoid -> output; conv3 of the add is an output too;
    conv4 of conv1 -> flatten -> output. C = 5 channels: not a multiple of the block (4)."""
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "c1"], ["s"]),
             helper.make_node("Sigmoid", ["s"], ["sig"]),
             helper.make_node("Conv", ["s", "w3"], ["c3"]),
             helper.make_node("Conv", ["c1", "w4"], ["c4"]),
             helper.make_node("Flatten", ["c4"], ["flat"])]
    g = helper.make_graph(nodes, "layouts", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("sig", "c3", "flat")],
                          [w("w1", c, 3, 3, 3), w("w2", c, c, 3, 3), w("w3", c, c, 1, 1), w("w4", 2, c, 1, 1)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _requirements(ins):
    """A backend that computes convs on BLOCKED or plain and adds on any layout."""
    if ins.op == "conv":
        return LayoutRequirement(inputs={0: (BLOCKED, PLAIN)}, output=(BLOCKED, PLAIN))
    if ins.op == "add":
        return LayoutRequirement(agnostic=True)
    return None


def _ir():
    fn = import_model(_model())
    lower(fn)
    irf = generate_ir(fn)
    remove_dead_allocations(irf)
    return irf


def test_layout_decisions_on_a_small_graph():
    irf = _ir()
    n = assign_layouts(irf, _requirements)
    verify_ir(irf)
    code = irf.code
    by_op = {}
    for ins in code:
        by_op.setdefault(ins.op, []).append(ins)
    convs = by_op["conv"]
    # conv1 feeds conv2 and the add: blocked; conv2 feeds the add: blocked; the add feeds conv3: blocked.
    # conv3 and the flattened conv4 write graph outputs / a reshaped tensor: plain.
    assert [c.outs[0].layout for c in convs] == [BLOCKED, BLOCKED, PLAIN, PLAIN]
    assert by_op["add"][0].outs[0].layout == BLOCKED
    # One conversion, at the one boundary: the sigmoid (plain only here) reads the blocked sum.
    assert n == 1 and len(by_op[LAYOUT_CONVERT]) == 1
    conv = by_op[LAYOUT_CONVERT][0]
    assert conv.ins[0] is by_op["add"][0].outs[0] and conv.attrs == {"from": BLOCKED, "to": PLAIN}
    assert by_op["sigmoid"][0].ins[0] is conv.outs[0]
    # Every reader of a blocked buffer accepts it; every plain-only reader reads plain.
    for ins in code:
        for b in ins.ins:
            if b.layout != PLAIN:
                assert ins.op in ("conv", "add", LAYOUT_CONVERT), ins
    assert all(b.layout == PLAIN for b in irf.buffers if b.kind in ("mutable", "constant", "view"))
    assert any("1 conversion(s)" in line for line in irf.dump().splitlines())


def test_blocked_buffers_are_planned_at_their_padded_size():
    irf = _ir()
    assign_layouts(irf, _requirements)
    plan_memory(irf)
    blocked = [b for b in irf.buffers if b.layout == BLOCKED]
    assert blocked
    for b in blocked:
        assert stored_shape(b.type.shape, BLOCKED) == (1, 2, 6, 6, 4)  # 5 channels -> 2 blocks of 4 lanes
        assert b.size == 2 * 6 * 6 * 4 * 4
    iv = sorted((b.offset, b.offset + b.size) for b in irf.buffers if b.kind == "activation")
    assert max(hi for _, hi in iv) <= irf.plan.activations_size


def test_no_answer_changes_nothing():
    irf = _ir()
    before = [(i.op, [b.name for b, _ in i.operands]) for i in irf.instrs]
    assert assign_layouts(irf, lambda ins: None) == 0
    assert [(i.op, [b.name for b, _ in i.operands]) for i in irf.instrs] == before
    assert glow_core.backend.Backend.tensor_layout_requirements(None, None) is None


def test_stored_shape_refuses_unknown_layouts():
    with pytest.raises(glow_core.errors.VerifyError, match="nchwc<cb>"):
        stored_shape((1, 3, 4, 4), "nhwc")


def test_cpu_backend_keeps_nchwc_and_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    model = _model(c=17)
    x = np.random.default_rng(1).standard_normal((1, 3, 6, 6)).astype(np.float32)
    r = compile_function(model, get_backend("cpu"), options={"num_threads": 1})
    got = r.compiled.execute({"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for name, w in zip(("sig", "c3", "flat"), want):
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()))
    assert sum(i.op == LAYOUT_CONVERT for i in r.ir.code) == 1
    assert any(b.layout.startswith("nchwc") for b in r.ir.buffers)
