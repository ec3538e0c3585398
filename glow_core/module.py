"""Modules: several functions compiled together, sharing their weights and their state.

Glow's Module holds the Constants and Placeholders its Functions share. Here ``compile_module`` compiles graph
Functions (a generator's prefill and decode functions) for a backend, or partitioned over several, and gives
every backend all of its IR functions at once (``Backend.compile_functions``), after ``ir.share_regions`` placed
them in one constant region (a weight in memory once) and one state region (persistent placeholders, such as a
KV cache, that keep their bytes between runs and between the functions, updated in place).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .api import _collector_paused, backend_compile, finish_compile, plan_graph, with_required_options
from .backend import CompiledFunction
from .discovery import get_backend
from .errors import GlowError, UnsupportedOpError
from .graph import Function
from .ir import IRFunction, share_regions
from .partition import PartitionedFunction, Partitioning, feeds_of, output_sources, single_report
from .placement import PlacementReport
from . import quantization


@dataclass
class ModuleFunction:
    """One function of a module: its (lowered or placement) graph, one planned IR per partition with the backend
    that runs it, the CompiledFunction that runs it whole, and its placement."""

    name: str
    graph: Function
    parts: list[tuple[object, IRFunction]]  # (backend, IR) in the order they run
    compiled: CompiledFunction | None = None
    placement: PlacementReport | None = None
    stats: dict = field(default_factory=dict)
    #: per part, state name -> (offset in the state region, TensorType), as ``ir.share_regions`` placed it
    state_layout: list = field(default_factory=list)

    @property
    def ir(self) -> IRFunction | None:
        """The IR when the function runs on one backend (None when it is partitioned)."""
        return self.parts[0][1] if len(self.parts) == 1 else None


class CompiledModule:
    """Functions compiled together (``compile_module``): ``run(name, inputs)``; the shared state through
    ``state()`` (writable numpy views of every persistent placeholder in the memory its backend runs it in)."""

    def __init__(self, functions: dict[str, ModuleFunction], regions: dict, backends: list):
        self.functions = functions
        self.regions = regions  # backend name -> share_regions statistics
        self.backends = backends

    def run(self, name: str, inputs: dict) -> dict[str, np.ndarray]:
        """Run function ``name`` once (inputs by name, already of the right dtypes and shapes)."""
        return self.functions[name].compiled.execute(inputs)

    def state(self) -> dict[str, np.ndarray]:
        """Every persistent placeholder of the module, by name: a writable view of its bytes in the state region
        of the backend that holds it (``CompiledFunction.memory_regions()["state"]``)."""
        views = {}
        for mf in self.functions.values():
            compiled = [c for c, _ in mf.compiled.steps] if isinstance(mf.compiled, PartitionedFunction) \
                else [mf.compiled]
            for c, layout in zip(compiled, mf.state_layout):
                if not layout:
                    continue
                regions = c.memory_regions()
                if regions is None or "state" not in regions:
                    raise GlowError(f"function '{mf.name}': its backend does not expose its state region")
                region = regions["state"]
                region = region if isinstance(region, np.ndarray) else np.frombuffer(region, np.uint8)
                for nm, (off, t) in layout.items():
                    views.setdefault(nm, region[off:off + t.nbytes].view(t.dtype.np).reshape(t.shape))
        return views


@_collector_paused()
def compile_module(functions: dict[str, Function], backend="interpreter", **options) -> CompiledModule:
    """Compile graph Functions (imported, state declared in ``Function.state``) as one module for ``backend`` (a
    name, spec or instance) or a list of backends in priority order (each function partitioned over them; a
    backend with ``fallback_backends()`` is partitioned with them, as ``glow_core.compile`` does). Every
    backend's IR functions are compiled together by its ``compile_functions`` after ``ir.share_regions``. A
    state must be written on the same backend by every function of the module."""
    options = quantization.prepare(dict(options))
    backends = [get_backend(b) for b in (backend if isinstance(backend, (list, tuple)) else [backend])]
    if not backends:
        raise GlowError("backend=[]: give at least one backend (a name, a 'module:attr' spec or a Backend)")
    fallback = options.pop("fallback", None)
    if len(backends) == 1 and fallback is not False:
        fallback = backends[0].fallback_backends() if fallback in (None, True) else fallback
        backends += [get_backend(b) for b in fallback]
    options = with_required_options(options, backends)
    mfs: dict[str, ModuleFunction] = {}
    for name, fn in functions.items():
        stats: dict = {}
        if len(backends) == 1:
            mfs[name] = ModuleFunction(name, fn, [(backends[0], plan_graph(fn, backends[0], options, stats))],
                                       placement=None, stats=stats)
            mfs[name].placement = single_report(fn, backends[0].name, name)
            continue
        plan = Partitioning(fn, backends, options.get("force"),
                            capacity=lambda b: options.get("memory_capacity", b.memory_capacity()))
        if len(plan.partitions) == 1:  # one backend runs it all: compiled as a function of its own
            b = plan.backends[plan.partitions[0].backend]
            mfs[name] = ModuleFunction(name, plan.fn, [(b, plan_graph(plan.fn, b, options, stats))],
                                       placement=plan.report(name), stats=stats)
            continue
        parts = []
        for i, p in enumerate(plan.partitions):
            sub = p.function(f"{name}_p{i}")
            parts.append((plan.backends[p.backend], plan_graph(sub, plan.backends[p.backend], options, stats)))
        mfs[name] = ModuleFunction(name, plan.fn, parts, placement=plan.report(name), stats=stats)
        mfs[name].stats["plan"] = plan
    owners: dict[str, str] = {}
    for mf in mfs.values():
        for b, irf in mf.parts:
            for nm in irf.state:
                if owners.setdefault(nm, b.name) != b.name:
                    raise UnsupportedOpError(f"state '{nm}' is updated on backend '{owners[nm]}' in one function "
                                             f"and on '{b.name}' in '{mf.name}': the functions of a module share "
                                             f"it, so one backend must hold it (compile option force=)")
    groups: dict[int, list] = {}
    for mf in mfs.values():
        for b, irf in mf.parts:
            groups.setdefault(id(b), []).append((b, irf))
    compiled: dict[int, CompiledFunction] = {}
    regions = {}
    for members in groups.values():
        regions[members[0][0].name] = share_regions([irf for _, irf in members])
    for mf in mfs.values():
        mf.state_layout = [{nm: (sb.offset, sb.type) for nm, sb in irf.state.items()} for _, irf in mf.parts]
    for members in groups.values():
        b = members[0][0]
        irfs = [irf for _, irf in members]
        outs = backend_compile(b, irfs, options, {}, together=True)
        compiled.update((id(irf), c) for irf, c in zip(irfs, outs))
    for mf in mfs.values():
        if len(mf.parts) == 1 and "plan" not in mf.stats:
            b, irf = mf.parts[0]
            mf.compiled = finish_compile(mf.graph, irf, compiled[id(irf)], b, options, mf.stats).compiled
            continue
        plan = mf.stats.pop("plan")
        steps = [(compiled[id(irf)], feeds_of(p)) for p, (_, irf) in zip(plan.partitions, mf.parts)]
        tracks = [f"p{i} on {b.name}" for i, (b, _) in enumerate(mf.parts)]
        mf.compiled = PartitionedFunction(steps, output_sources(plan), tracks)
    return CompiledModule(mfs, regions, backends)
