"""Shared machinery of the ONNX-level tiers: one-node models, expectations and comparison.

Expectations: ``onnx.reference.ReferenceEvaluator`` on the model (the unlowered ops) when the backend under
test is the reference interpreter; otherwise the reference interpreter's own answer for the same model.
"""
from __future__ import annotations

import zlib

import numpy as np
import onnx
from onnx import helper, numpy_helper

from glow_core.types import dtype as gdtype

from .cases import Case, CaseFailure, profiles_for
from .checker import compare
from .harness import run_model

OPSET = 21


class Init:
    """An operand given as an initializer (a constant) rather than a graph input."""

    def __init__(self, array):
        self.array = np.asarray(array)


def one_node(op, operands, attrs=None, n_out=1, opset=OPSET, domain=""):
    """A one-node model; operands are arrays (graph inputs x0, x1, ...), Init(array) or None (missing). An ONNX op
    newer than ``opset`` gets the first opset that defines it."""
    if not domain and onnx.defs.has(op) and not onnx.defs.has(op, opset):
        opset = next(v for v in range(opset, onnx.defs.onnx_opset_version() + 1) if onnx.defs.has(op, v))
    inputs, inits, names, feeds = [], [], [], {}
    for i, a in enumerate(operands):
        if a is None:
            names.append("")
            continue
        nm = f"x{i}"
        names.append(nm)
        if isinstance(a, Init):
            inits.append(numpy_helper.from_array(a.array, nm))
        else:
            a = np.asarray(a)
            inputs.append(helper.make_tensor_value_info(nm, gdtype(a.dtype).onnx, list(a.shape)))
            feeds[nm] = a
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, name=f"{op.lower()}_node", domain=domain, **(attrs or {}))
    g = helper.make_graph([node], f"conformance_{op}", inputs, [helper.make_empty_tensor_value_info(o) for o in outs],
                          inits)
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    m = helper.make_model(g, opset_imports=imports, producer_name="glow-conformance")
    m.ir_version = min(m.ir_version, 10)
    return onnx.shape_inference.infer_shapes(m), feeds


def expected(model, feeds, ctx, out_names, oracle=None):
    if ctx.is_reference and oracle is not None:
        return dict(zip(out_names, oracle(feeds)))
    if ctx.is_reference:
        from onnx.reference import ReferenceEvaluator
        try:
            with np.errstate(all="ignore"):
                res = ReferenceEvaluator(model).run(None, feeds)
        except Exception as e:  # noqa: BLE001  (no oracle for this case: say so, never guess)
            import pytest
            pytest.skip(f"no oracle: onnx.reference.ReferenceEvaluator cannot run this case ({type(e).__name__}: "
                        f"{str(e)[:120]})")
        return dict(zip(out_names, [np.asarray(r) for r in res]))
    from glow_core.discovery import get_backend
    return run_model(get_backend("interpreter"), model, feeds)


def model_case(case_id, tier, subject, dt, build, family, profiles=None, info=None, oracle=None):
    """A case over an ONNX model: ``build(rng)`` returns (model, feeds); ``oracle(feeds)`` (a list of arrays)
    replaces ReferenceEvaluator where that is known to be wrong."""
    seed = zlib.crc32(case_id.encode())

    def run(ctx):
        model, feeds = build(np.random.default_rng(seed))
        outs = [o.name for o in model.graph.output]
        got = run_model(ctx.backend, model, feeds)
        want = expected(model, feeds, ctx, outs, oracle)
        shapes = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in feeds.items())
        attrs = {a.name: helper.get_attribute_value(a) for n in model.graph.node[:1] for a in n.attribute} \
            if len(model.graph.node) == 1 else {}
        desc = (f"{tier} case {subject} dtype {dt}: inputs {shapes or '-'}, attributes {_short(attrs)}, "
                f"seed {seed}")
        for nm in outs:
            if nm not in got:
                raise CaseFailure(f"{desc}\n  output {nm} is missing\n  rerun: {ctx.rerun(case_id)}")
            compare(np.asarray(got[nm]), np.asarray(want[nm]), family, desc, ctx.rerun(case_id), name=f"output {nm}")
    return Case(case_id, tier, subject, dt, run, profiles or profiles_for(dt), dict(info or {}, seed=seed))


def _short(attrs):
    out = {}
    for k, v in attrs.items():
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, onnx.TensorProto):
            v = f"tensor{list(v.dims)}"
        out[k] = v
    return out
