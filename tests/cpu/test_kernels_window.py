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
