"""The conv family's answer to the layout pass (backends/cpu/kernels/window.py: ``engine_takes``) plans nothing
and agrees with planning the conv (``engine_conv``) on every conv geometry of the conformance suite, with a
constant filter and one fed at run time, float32 and float64, with and without a fused activation."""
from __future__ import annotations

import itertools

from glow_conformance.tier_primitives import ALL_CONV
from glow_core.fusion import FUSED_ACTIVATION, FUSED_PARAMS
from glow_core.types import TensorType, dtype as gdtype
from glow_cpu.conv.engine import ConvGeometry
from glow_cpu.kernels.codegen import KernelInstr, Operand
from glow_cpu.kernels.window import engine_conv, engine_takes


def conv_instr(xs, ws, st, dl, pd, g, dt, const, act):
    geom = ConvGeometry.from_conv(xs, ws, st, dl, pd, g)
    ys = (xs[0], ws[0]) + tuple(geom.out_spatial)
    attrs = {"strides": st, "dilations": dl, "pads": pd, "group": g}
    if act:
        attrs.update({FUSED_ACTIVATION: act[0], FUSED_PARAMS: act[1]})
    t = lambda shape: TensorType(gdtype(dt), tuple(shape))  # noqa: E731
    return KernelInstr("conv", attrs, [(Operand(0, t(ys), False), "out"), (Operand(1, t(xs), False), "in"),
                                       (Operand(2, t(ws), const), "in"), (Operand(3, t(ws[:1]), True), "in")])


def test_engine_takes_what_planning_takes():
    acts = [None, ("tanh", {})]  # one the engine applies after the conv: it takes the conv all the same
    checked = taken = 0
    for (xs, ws, st, dl, pd, g), dt, const, act in itertools.product(ALL_CONV.values(), ("float32", "float64"),
                                                                     (True, False), acts):
        ki = conv_instr(xs, ws, st, dl, pd, g, dt, const, act)
        want = bool(engine_conv(ki, 1))
        assert engine_takes(ki) == want, (xs, ws, st, dl, pd, g, dt, const, act)
        checked, taken = checked + 1, taken + want
    assert checked > 300 and 0 < taken < checked


def _conv_pool_conv(pool, channels=32, **attrs):
    """conv (engine, NCHWc out) -> pool -> conv: the pool runs over the blocked layout the layout pass keeps."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    w1 = numpy_helper.from_array((rng.standard_normal((channels, 3, 3, 3)) * 0.3).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3)) * 0.1).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node(pool, ["a"], ["b"], **attrs),
             helper.make_node("Conv", ["b", "w2"], ["y"], pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "cpc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 19, 17])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w1, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_pools_over_nchwc_walk_lanes_contiguously():
    """MaxPool (vector of the block's lanes, NaN kept) and AveragePool over NCHWc between two engine convs: against
    the interpreter at 1 and 2 threads, with NaN and infinities in the input."""
    import numpy as np
    import glow_core
    from glow_core.ir import PLAIN
    x = np.random.default_rng(4).standard_normal((1, 3, 19, 17)).astype(np.float32)
    x[0, 0, 2, 3], x[0, 1, 7, 7], x[0, 2, 11, 1] = np.nan, np.inf, -np.inf
    for pool, attrs in (("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
                        ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2])),
                        ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))):
        m = _conv_pool_conv(pool, **attrs)
        want = glow_core.compile(m, "interpreter").run({"x": x})
        for nt in (1, 2):
            cm = glow_core.compile(m, "cpu", num_threads=nt)
            (p,) = [i for i in cm.ir.code if i.op in ("max_pool", "avg_pool")]
            assert p.ins[0].layout != PLAIN, (pool, attrs)
            got = cm.run({"x": x})
            np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5, equal_nan=True,
                                       err_msg=f"{pool} {attrs} {nt}")
