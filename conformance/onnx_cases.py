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
from .harness import compile_model, intact, run_compiled, run_model

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
    return Reference.interpreter(model, options)(feeds)


class Reference:
    """The expectation of a model case, built once and run on each input: the case's oracle, ONNX's
    ReferenceEvaluator (the reference backend), or the reference interpreter compiled with the case's options
    (any other backend). A backend declaring ``flushes_subnormals()`` is expected what its flushed operands
    give (inputs and initializers flushed), its subnormal results flushed by the checker."""

    def __init__(self, run):
        self.run = run

    def __call__(self, feeds):
        with np.errstate(all="ignore"):
            return self.run(feeds)

    @classmethod
    def interpreter(cls, model, options=None, backend=None):
        """The interpreter's answers; with ``backend`` (the one under test) and a quantization recipe, the
        interpreter takes that backend's answers about the quantized primitives, so that the quantizer keeps in
        float (or emulates) the nodes the backend refuses, as it does for the backend: the same plan."""
        import glow_core
        target = "interpreter"
        if backend is not None and (options or {}).get("quantize") is not None:
            target = _SamePlan(backend)
        cm = glow_core.compile(model, target, **(options or {}))
        return cls(cm.run)

    @classmethod
    def of(cls, model, ctx, out_names, oracle=None, options=None, wide=False):
        """``wide``: on the reference backend, evaluate a float16/bfloat16 model in float32 and round the answers
        once (an accumulation's expectation: ReferenceEvaluator would accumulate in the 16-bit type)."""
        if ctx.flush:
            model = flushed_model(model)
        if ctx.is_reference and oracle == ONNXRUNTIME:
            return cls(lambda feeds: dict(zip(out_names, onnxruntime_answer(model, _flushed(ctx, feeds)))))
        if ctx.is_reference and oracle is not None:
            return cls(lambda feeds: dict(zip(out_names, oracle(_flushed(ctx, feeds)))))
        if ctx.is_reference and wide and _narrow_floats(model):
            inner = cls.of(_widened(model), ctx, out_names)
            types = {o.name: o.type.tensor_type.elem_type for o in model.graph.output}

            def run(feeds):
                got = inner({k: _widen(v) for k, v in feeds.items()})
                return {k: np.asarray(v).astype(gdtype(types[k]).np) if types.get(k) in _NARROW else v
                        for k, v in got.items()}
            return cls(run)
        if ctx.is_reference:
            from onnx.reference import ReferenceEvaluator
            try:
                ev = ReferenceEvaluator(model)
            except Exception as e:  # noqa: BLE001  (no oracle for this case: say so, never guess)
                raise _no_oracle(e) from None

            def run(feeds):
                try:
                    res = ev.run(None, _flushed(ctx, feeds))
                except Exception as e:  # noqa: BLE001
                    raise _no_oracle(e) from None
                return dict(zip(out_names, [np.asarray(r) for r in res]))
            return cls(run)
        # the interpreter with the backend's required options (its arithmetic: requant="fixed_point") and the case's
        ref = cls.interpreter(model, {**ctx.backend.required_options(), **(options or {})}, ctx.backend)
        return cls(lambda feeds: ref(_flushed(ctx, feeds)))


def _SamePlan(tested):
    """The interpreter answering is_op_supported for the quantized primitives as the backend under test does."""
    from glow_core.discovery import get_backend
    from glow_core.ops.registry import get_primitive

    from .proxy import ProxyBackend

    class SamePlan(ProxyBackend):
        def is_op_supported(self, node_info):
            p = get_primitive(node_info.op)
            if p is not None and p.quantized == "own":
                return tested.is_op_supported(node_info)
            return self.inner.is_op_supported(node_info)
    return SamePlan(type(get_backend("interpreter"))(), "interpreter")


_NARROW = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
#: ONNX ops lowering to one accumulating primitive that rounds once to a 16-bit result: on the reference backend,
#: ReferenceEvaluator (accumulating in float16 itself) gives way to the same model evaluated in float32 and rounded
#: once (an op lowering to several primitives that each round to the 16-bit type, Gemm, keeps ReferenceEvaluator)
WIDE_OPS = frozenset({"Conv", "MatMul", "ReduceSum", "ReduceMean", "ReduceL1", "AveragePool", "GlobalAveragePool"})


def _narrow_floats(model) -> bool:
    return any(v.type.tensor_type.elem_type in _NARROW for v in list(model.graph.input) + list(model.graph.output)) \
        or any(t.data_type in _NARROW for t in model.graph.initializer)


def _widen(a):
    a = np.asarray(a)
    return a.astype(np.float32) if gdtype(a.dtype).is_float and a.dtype.itemsize == 2 else a


def _widened(model):
    """A one-node model with its float16/bfloat16 inputs, outputs and initializers made float32."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for v in list(g.input) + list(g.output) + list(g.value_info):
        if v.type.tensor_type.elem_type in _NARROW:
            v.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    for i, t in enumerate(g.initializer):
        if t.data_type in _NARROW:
            g.initializer[i].CopyFrom(numpy_helper.from_array(_widen(numpy_helper.to_array(t)), t.name))
    return m


def _no_oracle(e):
    from .cases import Unsupported
    return Unsupported(f"no oracle: onnx.reference.ReferenceEvaluator cannot run this case "
                       f"({type(e).__name__}: {str(e)[:120]})", kind="no-oracle", stage="mismatch")


def _flushed(ctx, feeds):
    if not ctx.flush:
        return feeds
    from .checker import flush_subnormals
    return {k: flush_subnormals(v) for k, v in feeds.items()}


def flushed_model(model):
    """``model`` with its float initializers' subnormals flushed to zeros of their sign."""
    from .checker import flush_subnormals
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for i, t in enumerate(m.graph.initializer):
        a = numpy_helper.to_array(t)
        if gdtype(a.dtype).is_float:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(flush_subnormals(a), t.name))
    return m


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
    return Reference.of(model, ctx, out_names, oracle)(feeds)


def _abs_model(model, feeds):
    """The model with every initializer and input made non-negative (for the per-element sum of |terms|)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for i, t in enumerate(m.graph.initializer):
        a = numpy_helper.to_array(t)
        if a.dtype.kind == "f" or gdtype(a.dtype).is_float:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.abs(a), t.name))
    return m, {k: (np.abs(v) if gdtype(v.dtype).is_float else v) for k, v in feeds.items()}


class Scales:
    """(n, per-output magnitude) of each input for the tolerance classes that scale per element; (1, {}) for the
    others (the model on |operands| built once: op-acc). ``magnitude(model, feeds) -> {output: array}`` gives
    op-acc's per-element sums of |terms| where making the operands non-negative does not (weights stored packed)."""

    def __init__(self, model, ctx, out_names, tolerance, options=None, magnitude=None):
        self.model, self.ctx, self.outs, self.tolerance = model, ctx, out_names, tolerance
        self.sizes = [int(np.prod(t.dims)) for t in model.graph.initializer]
        self.abs_ref, self.magnitude = None, magnitude
        if tolerance == "op-acc" and magnitude is None:
            am, _ = _abs_model(model, {})
            self.abs_ref = Reference.of(am, ctx, out_names, options=options, wide=True)

    def __call__(self, feeds, want):
        tol, model, out_names = self.tolerance, self.model, self.outs
        if tol == "op-cancel":
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
        n = max([v.size for v in feeds.values()] + self.sizes + [1])
        if tol in ("op-rel", "op-exp"):
            return n, {}
        if tol == "op-acc" and self.magnitude is not None:
            return n, self.magnitude(model, feeds)
        if tol == "op-acc":
            _, af = _abs_model(model, feeds)
            absw = self.abs_ref(af)
            return n, {nm: np.abs(np.asarray(absw[nm]).astype(np.float64)) for nm in out_names}
        return 1, {}


def scales(model, feeds, ctx, out_names, tolerance, want, magnitude=None):
    """(n, per-output magnitude) for tolerance classes that scale per element; (1, {}) for the others."""
    return Scales(model, ctx, out_names, tolerance, magnitude=magnitude)(feeds, want)


def second_feeds(build, seed: int, feeds: dict) -> dict:
    """A model case's second input: its builder's feeds on another seed (the model itself, compiled, is the
    first one's); a float input that comes out the same (a deterministic builder) is taken reversed."""
    from .harness import _same_bytes
    try:
        _, f2 = build(np.random.default_rng(seed))
    except Exception:  # noqa: BLE001  (a builder that cannot be re-drawn: the first inputs again)
        f2 = {}
    out = {}
    for k, a in feeds.items():
        b = f2.get(k)
        if b is None or np.shape(b) != np.shape(a) or np.asarray(b).dtype != np.asarray(a).dtype:
            b = a
        b = np.asarray(b)
        if _same_bytes(b, a) and b.size > 1 and gdtype(b.dtype).is_float:
            b = np.ascontiguousarray(b.reshape(-1)[::-1]).reshape(b.shape)
        out[k] = b
    return out


def model_case(case_id, tier, subject, dt, build, tolerance, profiles=None, info=None, oracle=None, group=None,
               threads=1, options=None, flows=None, reference_tolerance=None, magnitude=None):
    """A case over an ONNX model: ``build(rng)`` returns (model, feeds); ``oracle(feeds)`` (a list of arrays)
    replaces ReferenceEvaluator where that is known to be wrong or less precise (``ONNXRUNTIME``: onnxruntime
    on the model); ``magnitude``: see ``Scales``. Cases with the same ``group``
    are first run merged into one model (one compilation; see ``grouped_outputs``). ``threads``: the compile's
    ``num_threads`` (case ids of 2 end in /t2); ``options``: more compile options (a flow's recipe), or a
    function of the model returning them (made at stage quantize: a calibrated profile), the interpreter's
    expectation compiled with them too; ``reference_tolerance``: the class on the reference
    backend when it differs (an oracle that is a foreign implementation). Every case also runs on a second
    input and is judged on both."""
    def run(ctx):
        from .primitive_cases import group_verdict, judge_group, second_seed
        seed = case_seed(case_id, ctx.seed)
        ctx.stage = "import"
        model, feeds = build(np.random.default_rng(seed))
        feeds2 = second_feeds(build, second_seed(case_id, ctx.seed), feeds)
        outs = [o.name for o in model.graph.output]
        tol = reference_tolerance if ctx.is_reference and reference_tolerance else tolerance
        ctx.stage = "quantize"
        opts = options(model) if callable(options) else options
        ref = Reference.of(model, ctx, outs, oracle, opts, wide=tol == "op-acc" and subject in WIDE_OPS)
        wants = [ref(feeds), ref(feeds2)]
        shapes = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in feeds.items())
        attrs = {a.name: helper.get_attribute_value(a) for n in model.graph.node[:1] for a in n.attribute} \
            if len(model.graph.node) == 1 else {}
        desc = (f"{tier} case {subject} dtype {dt}: inputs {shapes or '-'}, attributes {_short(attrs)}, "
                f"seed {seed}" + (f", options {_short(opts)}" if opts else ""))
        rr = ctx.rerun(case_id)
        scale = Scales(model, ctx, outs, tol, opts, magnitude)
        flush = ctx.flush and tol not in ("op-bitwise",)

        def check(got, fds, want, d):
            n, mags = scale(fds, want)
            for nm in outs:
                if nm not in got:
                    raise CaseFailure(f"{d}\n  output {nm} is missing\n  rerun: {rr}", stage="run")
                compare(np.asarray(got[nm]), np.asarray(want[nm]), tol, d, rr, n=n, magnitude=mags.get(nm),
                        name=f"output {nm}", flush=flush)

        def check_both(got):
            ctx.stage = "mismatch"
            check(got[0], feeds, wants[0], desc)
            check(got[1], feeds2, wants[1], desc + " [second input]")
        got = grouped_outputs(ctx, group, case_id, model) if ctx.group_compile and group else None
        outcome = judge_group(ctx, got, check_both, desc)
        if outcome == "passed":
            return
        ctx.answers.clear()
        cm = compile_model(ctx, model, threads=threads, **(opts or {}))
        o1 = run_compiled(ctx, cm, feeds, desc, rr)
        copies = {k: np.array(v, copy=True) for k, v in o1.items()}
        o2 = run_compiled(ctx, cm, feeds2, desc + " [second input]", rr)
        intact(o1, copies, o2, desc, rr)
        check_both((o1, o2))
        if outcome is not None:
            group_verdict(outcome, desc, rr)
    if group is not None:
        GROUPS.setdefault(group, {})[case_id] = build
    return Case(case_id, tier, subject, dt, run, profiles or profiles_for(dt),
                dict(info or {}, group=group, threads=threads, options=options, tolerance=tolerance), flows=flows)


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
    """This case's outputs (first input, second input) from one model merging every case of ``group`` with the
    same opsets, compiled and run on both inputs once per process; None when the group could not be compiled
    (every case then runs alone); a ``GroupError`` when its run went wrong for this case."""
    from .primitive_cases import GroupError, second_seed
    key = ("models", group, _opsets(model))
    if key not in ctx.cache:
        ctx.cache[key] = {}
        from .harness import intact
        try:
            parts, parts2 = [], {}
            for cid, build in GROUPS[group].items():
                m, f = build(np.random.default_rng(case_seed(cid, ctx.seed)))
                if _opsets(m) == key[2]:
                    parts.append((cid, m, f))
                    parts2[cid] = second_feeds(build, second_seed(cid, ctx.seed), f)
            merged, feeds, names = merge(parts)
            feeds2 = {f"c{k}_{nm}": v for k, (cid, _, _) in enumerate(parts) for nm, v in parts2[cid].items()}
            cm = compile_model(ctx, merged)
        except Exception:  # noqa: BLE001  (the group cannot be compiled: each case alone)
            return None
        desc = f"compile group {group[1] if len(group) > 1 else group} ({len(parts)} one-node models in one)"
        try:
            o1 = run_compiled(ctx, cm, feeds, desc, ctx.rerun(case_id))
            copies = {k: np.array(v, copy=True) for k, v in o1.items()}
            o2 = run_compiled(ctx, cm, feeds2, desc + " [second input]", ctx.rerun(case_id))
            intact(o1, copies, o2, desc, ctx.rerun(case_id))
        except Exception as e:  # noqa: BLE001  (the group's run went wrong: charged per case)
            text = str(e) if isinstance(e, CaseFailure) else f"{type(e).__name__}: {e}"
            missing = set(getattr(e, "missing", ()))
            lost = [cid for cid, nm in names.items() if missing & set(nm.values())]
            err = GroupError(text, getattr(e, "stage", "run"))
            ctx.cache[key] = {cid: err for cid in (lost or names)}
            return ctx.cache[key].get(case_id)
        ctx.cache[key] = {cid: ({o: o1[n] for o, n in nm.items()}, {o: o2[n] for o, n in nm.items()})
                          for cid, nm in names.items()}
    return ctx.cache[key].get(case_id)


def _short(attrs):
    out = {}
    for k, v in attrs.items():
        if type(v).__name__ == "Profile":
            v = "calibrated profile"
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, onnx.TensorProto):
            v = f"tensor{list(v.dims)}"
        out[k] = v
    return out
