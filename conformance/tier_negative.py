"""Tier "negative": what cannot run is refused cleanly at compile time with a GlowError, never a crash.

- backend refusals: every primitive x dtype that the primitive accepts but the backend's ``is_op_supported``
  refuses must make compilation raise UnsupportedOpError (a GlowError) naming the op; these cases depend on
  the backend (none for the reference interpreter, which supports everything);
- compiler refusals: a primitive given a dtype it does not accept, a model with an unknown op or an unknown
  domain, must raise a GlowError naming the op.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from glow_core.backend import NodeInfo
from glow_core.errors import GlowError
from glow_core.ops.registry import PRIMITIVES
from glow_core.types import DTYPES

from . import tier_primitives as P
from .cases import Case, CaseFailure, Unsupported



def _expect_glow_error(what, fn, must_name, rerun):
    try:
        fn()
    except Unsupported as e:  # the harness's name for the backend's UnsupportedOpError: what we want
        msg = str(e)
    except GlowError as e:
        msg = str(e)
    except Exception as e:  # noqa: BLE001
        raise CaseFailure(f"{what}: crashed with {type(e).__name__}: {e} (expected a GlowError)\n  rerun: {rerun}")
    else:
        raise CaseFailure(f"{what}: was accepted (expected a GlowError at compile time)\n  rerun: {rerun}")
    if must_name and must_name not in msg:
        raise CaseFailure(f"{what}: the error does not name '{must_name}': {msg}\n  rerun: {rerun}")


def backend_refusal_cases(ctx):
    """One case per primitive case shape (the first variant) whose op/dtype the backend refuses."""
    out, seen = [], set()
    for c in P.cases():
        key = (c.subject, c.dtype)
        # a refused quantized primitive is no compile error: its node stays float or is emulated (quantization.md)
        if key in seen or PRIMITIVES[c.subject].quantized == "own":
            continue
        seen.add(key)
        arrays = c.info["make"](np.random.default_rng(0))
        from .harness import out_types
        try:
            outs = out_types(c.subject, arrays, c.info["attrs"])
        except GlowError:
            continue
        info = NodeInfo(c.subject, tuple(_name(a) for a in arrays), tuple(t.dtype.name for t in outs),
                        dict(c.info["attrs"]), "case")
        if ctx.backend.is_op_supported(info):
            continue
        case_id = f"negative/{c.subject}/{c.dtype}/backend_refuses"

        def run(ctx, c=c, arrays=arrays, case_id=case_id):
            from glow_core.api import compile_graph
            from .harness import primitive_function
            fn = primitive_function(c.subject, arrays, c.info["attrs"])
            _expect_glow_error(f"negative case: backend refuses {c.subject} with {c.dtype}",
                               lambda: compile_graph(fn, ctx.backend, {"optimize": False}), c.subject,
                               ctx.rerun(case_id))
        out.append(Case(case_id, "negative", c.subject, c.dtype, run, ("negative",)))
    return out


def _name(a):
    from glow_core.types import dtype
    return dtype(np.asarray(a).dtype).name


def compiler_refusal_cases():
    out = []
    for prim, p in PRIMITIVES.items():
        if len(p.inputs) != 1 or p.variadic or prim in ("cast", "bitcast"):
            continue
        bad = [d for d in ("bool", "int32", "float32", "float8e4m3fn", "int4") if d not in p.dtypes]
        for dt in bad[:2]:
            case_id = f"negative/{prim}/{dt}/dtype_not_accepted"

            def run(ctx, prim=prim, dt=dt, case_id=case_id):
                from .harness import run_primitive
                x = np.zeros((2, 3, 4, 4), DTYPES[dt].np)
                attrs = {k: v for k, v in _attrs_for(prim).items()}
                _expect_glow_error(f"negative case: primitive {prim} given {dt}",
                                   lambda: run_primitive(ctx.backend, prim, [x], attrs), prim, ctx.rerun(case_id))
            out.append(Case(case_id, "negative", prim, dt, run, ("negative",)))
    for label, node in (("unknown_op", helper.make_node("NoSuchOp", ["x"], ["y"])),
                        ("unknown_domain", helper.make_node("Relu", ["x"], ["y"], domain="com.vendor.none"))):
        case_id = f"negative/{label}/float32/model"

        def run(ctx, node=node, case_id=case_id):
            from .harness import compile_model
            g = helper.make_graph([node], "neg", [helper.make_tensor_value_info("x", 1, [2, 3])],
                                  [helper.make_tensor_value_info("y", 1, [2, 3])])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)] + (
                [helper.make_opsetid(node.domain, 1)] if node.domain else []))
            _expect_glow_error(f"negative case: model with {label}", lambda: compile_model(ctx.backend, m).run(
                {"x": np.zeros((2, 3), np.float32)}), None, ctx.rerun(case_id))
        out.append(Case(case_id, "negative", label, "float32", run, ("negative",)))
    return out


def _attrs_for(prim):
    return {"reduce_sum": {"axes": [1]}, "reduce_prod": {"axes": [1]}, "reduce_max": {"axes": [1]},
            "reduce_min": {"axes": [1]}, "argmax": {"axis": 1}, "argmin": {"axis": 1},
            "max_pool": {"kernel": [2, 2], "strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0]},
            "avg_pool": {"kernel": [2, 2], "strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0]}}.get(prim, {})


def cases(ctx=None):
    out = compiler_refusal_cases()
    if ctx is not None:
        out += backend_refusal_cases(ctx)
    return out

