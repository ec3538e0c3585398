"""The public entry point: ``glow_core.compile(model, backend=..., **options)``.

A ``CompiledModel`` checks inputs by name, dtype and shape, then runs the
function compiled for those shapes. Models with symbolic dimensions, or whose
inputs feed shape operands (Reshape's shape, Expand's shape, ...), are
compiled for the concrete shapes and values of the first inputs they see and
recompiled when those change (each specialization is cached).

``backend`` may be a list of backends in priority order: the model is then partitioned across them
(``glow_core.partition``) and ``CompiledModel.placement()`` says where each node runs and why. A backend alone
whose ``fallback_backends()`` is not empty (the CPU backend: the interpreter) is partitioned the same way when
it refuses a node, with a ``FallbackWarning`` naming the nodes moved; ``fallback=False`` refuses instead.
"""
from __future__ import annotations

import gc
import time
from contextlib import contextmanager
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .backend import Backend, NodeInfo, refusal_reason
from .errors import GlowError, InputError, MemoryLimitError, NeedsSpecialization, UnsupportedOpError
from .fusion import fuse_activations
from .graph import Function
from .importer.onnx_import import graph_input_specs, import_model, load_model, shape_operand_inputs
from .ir import IRFunction, attach_scratch, eliminate_copies, generate_ir, insert_deallocs, plan_memory, remove_dead_allocations, share_buffers, verify_ir
from .layout import assign_layouts
from .lower import lower
from .partition import PartitionedFunction, Partitioning, SplitNeeded, feeds_of, output_sources, single_report
from .passes import POST_LOWERING_PIPELINE, run_pipeline
from .placement import PlacementReport
from . import quantization
from .discovery import get_backend
from .schedule import peak_bytes, schedule
from .timing import carve, stage
from .torch_import import is_torch_model, to_onnx
from .trace import Trace
from .types import dtype
from .verify import verify_function

#: Largest memory region any backend is asked to allocate (256 TiB: beyond any host, and no size overflows).
MAX_REGION_BYTES = 1 << 48


@dataclass
class CompileResult:
    """Everything one compilation produced: graphs, IR, plan, the backend's function and statistics."""

    graph: Function
    ir: IRFunction
    compiled: Any
    stats: dict = field(default_factory=dict)


@contextmanager
def _collector_paused():
    """Hold off CPython's cycle collector during a compilation (restored after). A compilation keeps
    every node, value, buffer and instruction it makes, so each collection rescans a growing heap: on a
    20,000-node chain that cost half the compile time and made it grow faster than the graph."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass
class PartitionedResult:
    """A compilation over several backends: the partitioning, one CompileResult per partition (in the order they
    run) and the function that runs them, passing values between partitions."""

    plan: Partitioning
    parts: list[CompileResult]
    compiled: PartitionedFunction
    stats: dict = field(default_factory=dict)
    ir = None  # one IR per partition: parts[i].ir

    @property
    def graph(self) -> Function:
        """The placement graph (lowered where no backend keeps a node whole)."""
        return self.plan.fn

    def placement(self, model_name: str = "") -> PlacementReport:
        return self.plan.report(model_name)


class FallbackWarning(UserWarning):
    """A backend refused nodes of a model and they run on its fallback backends (``Backend.fallback_backends``)."""


def _import_graph(model, backend: Backend, input_shapes, constants, options, stats) -> Function:
    """Import ``model`` for fixed input shapes (and specialized input values) and run ``backend``'s graph passes."""
    with stage(stats, "import"):
        m, _ = load_model(model)
        if options.get("quantize") is not None:
            options["quantize"].check(m, input_shapes)
        try:
            fn = import_model(m, input_shapes=input_shapes, constants=constants)
        except MemoryError:
            raise MemoryLimitError("out of host memory while importing the model (a value computed at compile "
                                   "time is too large)") from None
    stats["imported_nodes"] = len(fn.nodes)
    if options.get("optimize", True):
        with stage(stats, "graph-passes"):
            stats["passes"] = run_pipeline(fn, backend.optimization_pipeline())
    return fn


@_collector_paused()
def compile_function(model, backend: Backend, input_shapes=None, constants=None, options=None) -> CompileResult:
    """Run the whole pipeline once for fixed input shapes (and specialized input values)."""
    options = quantization.prepare(options or {})
    stats: dict = {}
    fn = _import_graph(model, backend, input_shapes, constants, options, stats)
    return compile_graph(fn, backend, options, stats)


def with_required_options(options: dict, backends) -> dict:
    """``options`` with every backend's ``required_options()`` filled in; a value the user gave that differs from
    one a backend requires is a GlowError naming both."""
    out = dict(options)
    for b in backends:
        for k, v in b.required_options().items():
            if k in out and out[k] != v:
                raise GlowError(f"backend '{b.name}' requires the compile option {k}={v!r}; {k}={out[k]!r} was given "
                                f"(leave it out: the backend sets it)")
            out[k] = v
    return out


#: ONNX ops whose lowering yields quantized primitives (a QDQ or QOperator model)
_QUANTIZED_ONNX = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger",
                             "MatMulInteger"})


def _quantize_for_placement(fn: Function, backends: list[Backend], options: dict, stats: dict) -> None:
    """Quantize the imported graph before it is placed, when the model is quantized or ``quantize=`` is given: a
    node becomes quantized when one of ``backends`` runs its quantized form, so a device that only runs quantized
    primitives is offered them (each partition's own compilation then finds its nodes quantized already). A float
    model is left to the partitioner as it is."""
    if options.get("quantize") is None and not any(n.op in _QUANTIZED_ONNX for n in fn.nodes) \
            and not quantization.quantized(fn):
        return

    def ask(node):
        reasons = []
        for b in backends:
            why = _refusal(b, node)
            if why is None:
                return None
            reasons.append(why)
        return "; ".join(reasons)
    with stage(stats, "lowering"):
        lower(fn, lambda n: all(b.should_lower(n) for b in backends))
        q = quantization.run(fn, {**options, "convert_to": None}, ask)
    if q is not None:
        stats["quantization"] = q


def plan_partitions(model, backends, input_shapes=None, constants=None, options=None, exclude=None) -> Partitioning:
    """Import ``model`` and place it across ``backends`` (priority order; names, specs or instances) without
    compiling: the partitions, their functions and the placement report. The graph passes are the first
    backend's; a quantized model (or one compiled with ``quantize=``) is quantized before placement
    (``_quantize_for_placement``); ``options["force"]`` ({node name, op type or primitive: backend name}) places
    those nodes."""
    options = quantization.prepare(options or {})
    backends = [get_backend(b) for b in backends]
    stats: dict = {}
    fn = _import_graph(model, backends[0], input_shapes, constants, options, stats)
    _quantize_for_placement(fn, backends, options, stats)
    plan = Partitioning(fn, backends, options.get("force"), exclude,
                        capacity=lambda b: options.get("memory_capacity", b.memory_capacity()))
    plan.stats = stats
    return plan


def compile_partitioned(model, backends, input_shapes=None, constants=None, options=None) -> PartitionedResult:
    """``plan_partitions``, then ``compile_graph`` for each partition on its backend (every option but ``force``
    reaches each partition's compilation). A partition whose memory plan does not fit is halved; a node that
    alone does not fit goes to the next backend."""
    options = dict(options or {})
    exclude: dict = {}
    done: dict = {}  # partition key (backend, node names) -> CompileResult, kept across placements
    while True:
        plan = plan_partitions(model, backends, input_shapes, constants, options, exclude)
        try:  # quantize= was applied before placement: the partitions are quantized already
            parts = _compile_partitions(plan, {k: v for k, v in options.items() if k not in ("force", "quantize")},
                                        done)
            break
        except SplitNeeded as e:  # one node does not fit a device: place everything again without that choice
            exclude[(e.unit.node.name, e.backend)] = str(e)
    steps = [(r.compiled, feeds_of(p)) for p, r in zip(plan.partitions, parts)]
    tracks = [f"p{i} on {plan.backends[p.backend].name}" for i, p in enumerate(plan.partitions)]
    return PartitionedResult(plan, parts, PartitionedFunction(steps, output_sources(plan), tracks),
                             dict(plan.stats, partitions=len(plan.partitions)))


def _compile_partitions(plan: Partitioning, options, done: dict) -> list[CompileResult]:
    """compile_graph for every partition not in ``done``; a partition whose memory plan does not fit is halved
    and retried."""
    while True:
        for i, p in enumerate(plan.partitions):
            if p.key in done:
                continue
            try:
                done[p.key] = compile_graph(p.function(f"{plan.fn.name}_p{i}"), plan.backends[p.backend], options)
            except MemoryLimitError as e:
                plan.over_memory(p, str(e))
                break
        else:
            return [done[p.key] for p in plan.partitions]


def compile_for(model, backends: list[Backend], input_shapes=None, constants=None, options=None, fallbacks=()):
    """One compilation for ``backends`` (several: partitioned). A single backend that refuses a node is
    partitioned with ``fallbacks`` after it, with a FallbackWarning naming the nodes moved."""
    if len(backends) > 1:
        return compile_partitioned(model, backends, input_shapes, constants, options)
    try:
        return compile_function(model, backends[0], input_shapes, constants, options)
    except UnsupportedOpError:
        if not fallbacks:
            raise
    res = compile_partitioned(model, list(backends) + list(fallbacks), input_shapes, constants, options)
    moved = res.placement().offloaded()
    names = ", ".join(f"'{n.origin}' ({n.origin_op}{'' if n.op == n.origin_op else ': its ' + n.op}) -> {n.backend}"
                      for n in moved[:10])
    warnings.warn(FallbackWarning(
        f"backend '{backends[0].name}' does not run {len(moved)} node(s) of model '{res.graph.name}': {names}"
        + (f" and {len(moved) - 10} more" if len(moved) > 10 else "")
        + " (CompiledModel.placement() says why; fallback=False refuses instead)"), stacklevel=5)
    return res


@_collector_paused()
def compile_graph(fn: Function, backend: Backend, options=None, stats=None, before_compile=None) -> CompileResult:
    """The back half of the pipeline on a graph Function: lowering, post-lowering passes, backend checks, IR,
    memory plan and ``backend.compile`` (``before_compile(irf)`` may inspect or adjust the planned IR).
    ``stats["times"]`` gives the seconds of each stage (``glow_core.timing.stage``; work the backend did outside
    Python, ``CompiledFunction.compile_spans``, is a stage of its own, its span in ``stats["backend_spans"]``).
    Option ``schedule=False`` keeps the node order the passes left instead of trying ``glow_core.schedule``'s."""
    options = with_required_options(options or {}, [backend])
    stats = {} if stats is None else stats
    irf = plan_graph(fn, backend, options, stats)
    if before_compile is not None:
        before_compile(irf)
    return finish_compile(fn, irf, None, backend, options, stats)


def plan_graph(fn: Function, backend: Backend, options: dict, stats: dict) -> IRFunction:
    """``compile_graph`` up to the planned IR (lowering, post-lowering passes, checks, scheduling, IR passes and
    the memory plan): what ``backend.compile`` or ``backend.compile_functions`` is then given."""
    with stage(stats, "lowering"):  # lowering, then quantization (when asked for), then activation fusion
        stats["lowered"] = lower(fn, backend.should_lower)
        q = quantization.run(fn, options, lambda node: _refusal(backend, node))
        if q is not None:
            stats["quantization"] = q
        stats["fused_activations"] = fuse_activations(fn, backend.supports_fused_activation)
    with stage(stats, "post-lowering"):
        backend.transform_post_lowering(fn)
        if options.get("optimize", True):
            stats["post_passes"] = run_pipeline(fn, POST_LOWERING_PIPELINE)
    with stage(stats, "verify"):
        fn.toposort()
        verify_function(fn)
        answers = [(n, backend.is_op_supported(NodeInfo.of(n))) for n in fn.nodes]
    bad = [(n, a) for n, a in answers if not a]
    if bad:
        lines = [f"node '{n.name}': op {n.op} with dtypes {', '.join(v.dtype.name for v in n.inputs if v)}"
                 + (f" ({refusal_reason(a)})" if refusal_reason(a) else "") for n, a in bad[:10]]
        raise UnsupportedOpError(f"backend '{backend.name}' does not support: " + "; ".join(lines)
                                 + (f" (and {len(bad) - 10} more)" if len(bad) > 10 else ""))
    orders = [list(fn.nodes)]
    if options.get("schedule", True):
        with stage(stats, "schedule"):
            scheduled = schedule(fn)
            if peak_bytes(fn, scheduled) < peak_bytes(fn, orders[0]):
                orders.append(scheduled)
    # Plan the imported order and, when the scheduler's order promises less memory, that one too: keep the smaller.
    plans = []
    for nodes in orders:
        fn.nodes = nodes
        plans.append(_planned_ir(fn, backend, stats))
    best = min(range(len(plans)), key=lambda i: plans[i][0].plan.activations_size)
    irf, counts = plans[best]
    fn.nodes = orders[best]
    stats.update(counts)
    if options.get("schedule", True):
        irf.plan.unscheduled_size = plans[0][0].plan.activations_size
        stats["schedule"] = {"activations_before": irf.plan.unscheduled_size,
                             "activations_after": irf.plan.activations_size, "reordered": best > 0}
    capacity = options.get("memory_capacity", backend.memory_capacity())
    if capacity is not None and irf.plan.activations_size > capacity:
        plan_memory(irf, capacity=capacity)  # raises MemoryLimitError with the need and the largest buffer
    return irf


def backend_compile(backend: Backend, irfs: list[IRFunction], options: dict, stats: dict, together: bool = False):
    """``backend.compile`` for one planned IR (``together``: ``backend.compile_functions`` for several, a module),
    timed as the "backend-compile" stage, host memory exhaustion reported as MemoryLimitError."""
    try:
        with stage(stats, "backend-compile"):
            return backend.compile_functions(irfs, options) if together else backend.compile(irfs[0], options)
    except MemoryError:
        p = irfs[0].plan
        raise MemoryLimitError(f"backend '{backend.name}': out of host memory for the memory plan of "
                               f"'{irfs[0].name}' (constant {p.constant_size} B, mutable {p.mutable_size} B, "
                               f"state {p.state_size} B, activations {p.activations_size} B)") from None


def finish_compile(fn: Function, irf: IRFunction, compiled, backend: Backend, options: dict,
                   stats: dict) -> CompileResult:
    """The CompileResult of a planned IR: ``compiled`` (None: compile it now), the backend's native compile spans
    carved out of its "backend-compile" stage."""
    if compiled is None:
        compiled = backend_compile(backend, [irf], options, stats)
    spans = compiled.compile_spans()
    for name, _, seconds in spans:
        carve(stats, "backend-compile", name, seconds)
    stats["backend_spans"] = spans
    return CompileResult(fn, irf, compiled, stats)


def _planned_ir(fn: Function, backend: Backend, stats: dict) -> tuple[IRFunction, dict]:
    """The IR of ``fn`` in its node order through the IR passes, checked, with scratch attached and its memory
    planned (no capacity check); and the passes' counts."""
    with stage(stats, "ir-gen"):
        irf = generate_ir(fn)
    counts = {}
    with stage(stats, "ir-passes"):
        counts["dead_instructions"] = remove_dead_allocations(irf)
        counts["layout_conversions"] = assign_layouts(irf, backend.tensor_layout_requirements)
        counts["shared_buffers"] = share_buffers(irf) if backend.should_share_buffers() else 0
        counts["copies_removed"] = eliminate_copies(irf)
        verify_ir(irf)
        problems = backend.verify(irf)
    if problems:
        raise UnsupportedOpError("; ".join(problems[:10]))
    with stage(stats, "memory-plan"):
        irf.groups = [list(g) for g in backend.instruction_groups(irf) if len(g) > 1]
        if irf.groups:
            insert_deallocs(irf)
        attach_scratch(irf, backend.scratch_bytes)
        plan_memory(irf)
    p = irf.plan
    if max(p.constant_size, p.mutable_size, p.activations_size) > MAX_REGION_BYTES:
        raise MemoryLimitError(f"'{irf.name}': the memory plan needs constant {p.constant_size} B, mutable "
                               f"{p.mutable_size} B, activations {p.activations_size} B; no host has more than "
                               f"{MAX_REGION_BYTES} B (a tensor shape in the model is far too large)")
    return irf, counts


def input_dtypes(specs) -> dict:
    """Graph input name -> DType, from ``graph_input_specs``; an input of an unsupported type is refused."""
    out = {}
    for nm, elem, _ in specs:
        try:
            out[nm] = dtype(elem)
        except GlowError as e:
            raise UnsupportedOpError(f"graph input '{nm}': {e}") from None
    return out


def check_inputs(inputs, specs, dtypes, input_shapes) -> dict[str, np.ndarray]:
    """Inputs as arrays, checked by name, dtype and shape against the model's ``specs`` (``input_shapes`` fixes
    symbolic dimensions)."""
    names = [s[0] for s in specs]
    if not isinstance(inputs, dict):
        raise InputError(f"inputs must be a dict of name -> array; the model takes {names}")
    unknown = [k for k in inputs if k not in dtypes]
    if unknown:
        raise InputError(f"unknown input(s) {unknown}; the model takes {names}")
    missing = [k for k in names if k not in inputs]
    if missing:
        raise InputError(f"missing input(s) {missing}; the model takes {names}")
    out = {}
    for nm, _, dims in specs:
        a = np.asarray(inputs[nm])
        want = dtypes[nm]
        if a.dtype != want.np:
            raise InputError(f"input '{nm}': dtype {a.dtype} given, the model expects {want.name}")
        fixed = input_shapes.get(nm, dims)
        if a.ndim != len(fixed) or any(isinstance(d, int) and d != s for d, s in zip(fixed, a.shape)):
            raise InputError(f"input '{nm}': shape {a.shape} given, the model expects "
                             f"{tuple(fixed)}")
        out[nm] = np.ascontiguousarray(a).reshape(a.shape)  # keep 0-d inputs 0-d
    return out


def _refusal(backend: Backend, node) -> str | None:
    """None when ``backend`` runs ``node``, else why not (its Unsupported reason, or a generic one)."""
    answer = backend.is_op_supported(NodeInfo.of(node))
    return None if answer else refusal_reason(answer, f"backend '{backend.name}' does not run {node.op} on "
                                                      f"{', '.join(v.dtype.name for v in node.inputs if v)}")


class CompiledModel:
    """A model compiled for one backend; call ``run(inputs)`` (or the object) with numpy arrays by name."""

    def __init__(self, model, backend="interpreter", **options):
        example_inputs = options.pop("example_inputs", None)
        if example_inputs is not None or is_torch_model(model):
            model = to_onnx(model, example_inputs)
        self.model, _ = load_model(model)
        self.backends = [get_backend(b) for b in (backend if isinstance(backend, (list, tuple)) else [backend])]
        if not self.backends:
            raise GlowError("backend=[]: give at least one backend (a name, a 'module:attr' spec or a Backend)")
        self.backend = self.backends[0]
        fallback = options.pop("fallback", None)
        if len(self.backends) > 1 or fallback is False:
            fallback = []
        elif fallback is None or fallback is True:
            fallback = self.backend.fallback_backends()
        self.fallbacks = [get_backend(b) for b in fallback]
        self.input_shapes = dict(options.pop("input_shapes", None) or {})
        trace = options.pop("trace", False)
        #: With ``trace=True`` (or a file name: the whole trace rewritten after every compilation and run, so
        #: for many runs prefer True and one ``cm.trace.save(path)``), the Chrome trace of this model's
        #: compilations and runs (``glow_core.trace.Trace``).
        self.trace = Trace() if trace else None
        self._trace_path = trace if isinstance(trace, str) else None
        self.options = quantization.prepare(with_required_options(options, self.backends))
        self.specs = graph_input_specs(self.model)
        self.input_names = [s[0] for s in self.specs]
        self.output_names = [o.name for o in self.model.graph.output]
        self._dtypes = input_dtypes(self.specs)
        self.specialized = shape_operand_inputs(self.model)
        self._cache: dict = {}
        self.last: CompileResult | None = None
        static = all(all(isinstance(d, int) for d in dims) or nm in self.input_shapes for nm, _, dims in self.specs)
        if static and not self.specialized:
            try:
                self._get(self._static_key())
            except NeedsSpecialization as e:
                self.specialized |= e.inputs

    def _static_key(self):
        shapes = tuple((nm, tuple(self.input_shapes.get(nm, dims))) for nm, _, dims in self.specs)
        return shapes, ()

    def _get(self, key, values=None):
        if key not in self._cache:
            shapes, spec = key
            constants = {nm: values[nm] for nm, _ in spec} if spec else None
            self._cache[key] = compile_for(self.model, self.backends, dict(shapes), constants, self.options,
                                           self.fallbacks)
            if self.trace is not None:
                res = self._cache[key]
                if isinstance(res, PartitionedResult):
                    self.trace.add_compile(res.stats, f"{res.graph.name}: import and placement")
                    for part, r in zip(res.plan.partitions, res.parts):
                        self.trace.add_compile(r.stats, f"{r.ir.name} for {res.plan.backends[part.backend].name}")
                else:
                    self.trace.add_compile(res.stats, f"{res.ir.name} for {self.backend.name}")
                self._save_trace()
        self.last = self._cache[key]
        return self.last

    @property
    def ir(self) -> IRFunction:
        """The low-level IR of the most recent compilation (None when it is partitioned: see ``last.parts``)."""
        return self.last.ir if self.last else None

    def placement(self) -> PlacementReport:
        """Where each node of the most recent compilation runs and why (printable; ``to_dict()`` for data)."""
        if self.last is None:
            raise GlowError("the model is not compiled yet (symbolic or value-dependent input shapes): run it once "
                            "or give input_shapes=")
        if isinstance(self.last, PartitionedResult):
            return self.last.placement(self.model.graph.name)
        return single_report(self.last.graph, self.backend.name, self.model.graph.name)

    def stats(self) -> dict:
        """Statistics of the most recent compilation, one entry per backend that reports them
        (``CompiledFunction.stats()``; several partitions on one backend combined by its ``merge_stats``), e.g.
        ``{"npu": {"cycles": ..., "macs": ..., "mac_utilization": ..., "dram_bytes": ..., "layers": [...]}}``."""
        if self.last is None:
            raise GlowError("the model is not compiled yet (symbolic or value-dependent input shapes): run it once "
                            "or give input_shapes=")
        if isinstance(self.last, PartitionedResult):
            pairs = [(self.last.plan.backends[p.backend], r.compiled)
                     for p, r in zip(self.last.plan.partitions, self.last.parts)]
        else:
            pairs = [(self.backend, self.last.compiled)]
        per: dict = {}
        for b, compiled in pairs:
            st = compiled.stats()
            if st is not None:
                per.setdefault(b.name, (b, []))[1].append(st)
        return {name: b.merge_stats(sts) for name, (b, sts) in per.items()}

    def check_inputs(self, inputs: dict) -> dict[str, np.ndarray]:
        """Inputs as arrays, checked by name, dtype and shape against the model."""
        return check_inputs(inputs, self.specs, self._dtypes, self.input_shapes)

    def run(self, inputs: dict) -> dict[str, np.ndarray]:
        """Run the model: inputs and outputs are numpy arrays by name."""
        arrays = self.check_inputs(inputs)
        for _ in range(8):
            shapes = tuple((nm, arrays[nm].shape) for nm in self.input_names)
            spec = tuple((nm, (arrays[nm].dtype.str, arrays[nm].tobytes())) for nm in self.input_names
                         if nm in self.specialized)
            try:
                res = self._get((shapes, spec), arrays)
                break
            except NeedsSpecialization as e:
                new = e.inputs - self.specialized
                if not new:
                    raise
                self.specialized |= new
        else:
            raise GlowError("could not specialize the model's shape inputs")
        feed = arrays if res.ir is None else {nm: a for nm, a in arrays.items() if nm in res.ir.inputs}
        try:
            if self.trace is None:
                return res.compiled.execute(feed)
            return self._traced_run(res.compiled, feed)
        except MemoryError:
            raise MemoryLimitError(f"out of host memory while running '{res.ir.name}' on backend "
                                   f"'{self.backend.name}'") from None

    def _traced_run(self, compiled, feed):
        """One run with per-instruction timing (when the backend has it) added to the trace."""
        start = time.perf_counter()
        timed = compiled.execute_timed(feed)
        outs, timings = timed if timed is not None else (compiled.execute(feed), None)
        self.trace.add_run(self.backend.name, start, time.perf_counter() - start, timings)
        self._save_trace()
        return outs

    def _save_trace(self):
        if self._trace_path:
            self.trace.save(self._trace_path)

    __call__ = run


def compile(model, backend: str | Backend = "interpreter", **options) -> CompiledModel:  # noqa: A001
    """Compile ``model`` for ``backend`` (or a list of backends in priority order, partitioning the model across
    them); returns a CompiledModel.

    ``model`` is an ONNX model (a path, bytes or onnx.ModelProto), or a torch.nn.Module with
    ``example_inputs=(x, ...)`` (or a torch.export.ExportedProgram), exported with torch.onnx.export first.
    ``trace=True`` (or ``trace="file.json"``) records a Chrome trace of compilations and runs in ``cm.trace``."""
    return CompiledModel(model, backend, **options)
