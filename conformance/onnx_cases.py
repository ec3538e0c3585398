"""Shared machinery of the ONNX-level tiers: one-node models, expectations and comparison.

Expectations: ``onnx.reference.ReferenceEvaluator`` on the model (the unlowered ops) when the backend under
test is the reference interpreter (or an oracle of the case's own where ReferenceEvaluator is known to be
wrong or less precise); otherwise the reference interpreter's answer for the same model. Per-element scales
for the tolerance classes that need one: ``op-cancel`` takes max(1, |operands|) broadcast to the output,
``op-acc`` the answer of the same model on |operands| (every input and initializer made non-negative: the
per-element sum of |terms| of a multilinear op), with n the size of the largest operand; ``op-rel`` that n
alone (each element relative to itself).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from glow_core.types import dtype as gdtype

from .cases import Case, CaseFailure, case_seed, profiles_for
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


def reference_answer(model, feeds, out_names, options=None):
    """The reference interpreter's outputs for ``model`` (the expectation for any other backend), compiled with
    ``options`` (the backend's ``required_options()``: the same arithmetic)."""
    import glow_core
    with np.errstate(all="ignore"):
        return glow_core.compile(model, "interpreter", **(options or {})).run(feeds)


#: ``oracle=ONNXRUNTIME``: the case's expectation is onnxruntime's CPU kernels on the model (the oracle of
#: onnxruntime's own ops, com.microsoft's, which onnx.reference does not know)
ONNXRUNTIME = "onnxruntime"


def onnxruntime_answer(model, feeds):
    """onnxruntime's outputs for ``model`` (one thread, CPU kernels, no graph optimizations: the ops as written)."""
    try:
        import onnxruntime as ort
    except ImportError:
        from .cases import Unsupported
        raise Unsupported("no oracle: this case's oracle is onnxruntime, which is not installed",
                          kind="no-oracle") from None
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return s.run(None, feeds)
    except Exception as e:  # noqa: BLE001  (onnxruntime refuses the case: no oracle, never a guess)
        from .cases import Unsupported
        raise Unsupported(f"no oracle: onnxruntime cannot run this case ({type(e).__name__}: {str(e)[:160]})",
                          kind="no-oracle") from None


def expected(model, feeds, ctx, out_names, oracle=None):
    if ctx.is_reference and oracle == ONNXRUNTIME:
        return dict(zip(out_names, onnxruntime_answer(model, feeds)))
    if ctx.is_reference and oracle is not None:
        return dict(zip(out_names, oracle(feeds)))
    if ctx.is_reference:
        from onnx.reference import ReferenceEvaluator
        try:
            with np.errstate(all="ignore"):
                res = ReferenceEvaluator(model).run(None, feeds)
        except Exception as e:  # noqa: BLE001  (no oracle for this case: say so, never guess)
            from .cases import Unsupported
            raise Unsupported(f"no oracle: onnx.reference.ReferenceEvaluator cannot run this case "
                              f"({type(e).__name__}: {str(e)[:120]})", kind="no-oracle") from None
        return dict(zip(out_names, [np.asarray(r) for r in res]))
    return reference_answer(model, feeds, out_names, ctx.backend.required_options())


def _abs_model(model, feeds):
    """The model with every initializer and input made non-negative (for the per-element sum of |terms|)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for i, t in enumerate(m.graph.initializer):
        a = numpy_helper.to_array(t)
        if a.dtype.kind == "f" or gdtype(a.dtype).is_float:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.abs(a), t.name))
    return m, {k: (np.abs(v) if gdtype(v.dtype).is_float else v) for k, v in feeds.items()}


def scales(model, feeds, ctx, out_names, tolerance, want, magnitude=None):
    """(n, per-output magnitude) for tolerance classes that scale per element; (1, {}) for the others.
    ``magnitude(model, feeds) -> {output: array}`` gives op-acc's per-element sums of |terms| where making the
    operands non-negative does not (weights stored packed)."""
    if tolerance == "op-cancel":
        arrays = [np.abs(v.astype(np.float64)) for v in feeds.values() if gdtype(v.dtype).is_float]
        arrays += [np.abs(numpy_helper.to_array(t).astype(np.float64)) for t in model.graph.initializer
                   if gdtype(numpy_helper.to_array(t).dtype).is_float]
        mags = {}
        for nm in out_names:
            m = np.ones(np.shape(want[nm]))
            for a in arrays:
                try:
                    m = np.maximum(m, np.broadcast_to(a, m.shape))
                except ValueError:
                    m = np.maximum(m, a.max(initial=0.0))
            mags[nm] = m
        return 1, mags
    if tolerance in ("op-rel", "op-exp"):
        return max([v.size for v in feeds.values()] + [int(np.prod(t.dims)) for t in model.graph.initializer] + [1]), {}
    if tolerance == "op-acc" and magnitude is not None:
        sizes = [v.size for v in feeds.values()] + [int(np.prod(t.dims)) for t in model.graph.initializer]
        return max(sizes + [1]), magnitude(model, feeds)
    if tolerance == "op-acc":
        am, af = _abs_model(model, feeds)
        absw = expected(am, af, ctx, out_names)
        sizes = [v.size for v in feeds.values()] + [int(np.prod(t.dims)) for t in model.graph.initializer]
        return max(sizes + [1]), {nm: np.abs(np.asarray(absw[nm]).astype(np.float64)) for nm in out_names}
    return 1, {}


def model_case(case_id, tier, subject, dt, build, tolerance, profiles=None, info=None, oracle=None, group=None,
               threads=1, magnitude=None):
    """A case over an ONNX model: ``build(rng)`` returns (model, feeds); ``oracle(feeds)`` (a list of arrays)
    replaces ReferenceEvaluator where that is known to be wrong or less precise (``ONNXRUNTIME``: onnxruntime
    on the model); ``magnitude``: see ``scales``. Cases with the same ``group``
    are first run merged into one model (one compilation; see ``grouped_outputs``). ``threads``: the compile's
    ``num_threads`` (case ids of 2 end in /t2)."""
    def run(ctx):
        seed = case_seed(case_id, ctx.seed)
        model, feeds = build(np.random.default_rng(seed))
        outs = [o.name for o in model.graph.output]
        want = expected(model, feeds, ctx, outs, oracle)
        shapes = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in feeds.items())
        attrs = {a.name: helper.get_attribute_value(a) for n in model.graph.node[:1] for a in n.attribute} \
            if len(model.graph.node) == 1 else {}
        desc = (f"{tier} case {subject} dtype {dt}: inputs {shapes or '-'}, attributes {_short(attrs)}, "
                f"seed {seed}")
        n, mags = scales(model, feeds, ctx, outs, tolerance, want, magnitude)

        def check(got):
            for nm in outs:
                if nm not in got:
                    raise CaseFailure(f"{desc}\n  output {nm} is missing\n  rerun: {ctx.rerun(case_id)}")
                compare(np.asarray(got[nm]), np.asarray(want[nm]), tolerance, desc, ctx.rerun(case_id), n=n,
                        magnitude=mags.get(nm), name=f"output {nm}")
        got = grouped_outputs(ctx, group, case_id, model) if ctx.group_compile and group else None
        if got is not None:
            try:
                check(got)
                return
            except CaseFailure:
                pass  # judged alone
        ctx.answers.clear()
        check(run_model(ctx, model, feeds, threads))
    if group is not None:
        GROUPS.setdefault(group, {})[case_id] = build
    return Case(case_id, tier, subject, dt, run, profiles or profiles_for(dt),
                dict(info or {}, group=group, threads=threads))


#: group key -> {case id: build}: the model cases first run merged into one model
GROUPS: dict = {}


def _opsets(model):
    return tuple(sorted((o.domain, o.version) for o in model.opset_import))


def merge(parts):
    """One model holding every (case id, model, feeds) of ``parts``, each renamed with a prefix of its own;
    returns (model, feeds, {case id: {output: merged output name}})."""
    from onnx import compose
    nodes, inputs, outputs, inits, infos, feeds, names = [], [], [], [], [], {}, {}
    for k, (cid, m, f) in enumerate(parts):
        p = f"c{k}_"
        g = compose.add_prefix(m, prefix=p).graph
        nodes += g.node
        inputs += g.input
        outputs += g.output
        inits += g.initializer
        infos += g.value_info
        feeds.update({p + nm: v for nm, v in f.items()})
        names[cid] = {o.name: p + o.name for o in m.graph.output}
    graph = helper.make_graph(nodes, "conformance_group", inputs, outputs, inits, value_info=infos)
    merged = helper.make_model(graph, opset_imports=list(parts[0][1].opset_import), producer_name="glow-conformance")
    merged.ir_version = min(parts[0][1].ir_version, 10)
    return merged, feeds, names


def grouped_outputs(ctx, group, case_id, model):
    """This case's outputs from one model merging every case of ``group`` with the same opsets, compiled and
    run once per process; None when unavailable (any trouble: every case of the group runs alone)."""
    key = ("models", group, _opsets(model))
    if key not in ctx.cache:
        ctx.cache[key] = {}
        from .harness import compile_model, run_compiled
        try:
            parts = []
            for cid, build in GROUPS[group].items():
                m, f = build(np.random.default_rng(case_seed(cid, ctx.seed)))
                if _opsets(m) == key[2]:
                    parts.append((cid, m, f))
            merged, feeds, names = merge(parts)
            outs = run_compiled(ctx, compile_model(ctx, merged), feeds)
            ctx.cache[key] = {cid: {o: outs[n] for o, n in nm.items()} for cid, nm in names.items()}
        except Exception:  # noqa: BLE001
            ctx.cache[key] = {}
    return ctx.cache[key].get(case_id)


def _short(attrs):
    out = {}
    for k, v in attrs.items():
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, onnx.TensorProto):
            v = f"tensor{list(v.dims)}"
        out[k] = v
    return out
