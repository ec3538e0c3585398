"""The Backend ABC: what a vendor implements, and the defaults of everything else.

Required: ``name``, ``is_op_supported(node_info)`` and ``compile(function,
options)``. Every other hook has a default that suits a device which runs
the primitive set and nothing more.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import BackendError
from .graph import Function, Node
from .ir import IRFunction, state_as_io
from .layout import LayoutRequirement
from .passes import DEFAULT_PIPELINE


@dataclass(frozen=True)
class NodeInfo:
    """What ``is_op_supported`` is asked about: an op with its input/output dtypes and attributes (and, when known,
    the operands' shapes: ``in_shapes`` / ``out_shapes``, empty when the asker does not know them)."""

    op: str
    in_dtypes: tuple[str, ...]
    out_dtypes: tuple[str, ...]
    attrs: dict = field(default_factory=dict, compare=False, hash=False)
    name: str = ""
    in_shapes: tuple = field(default=(), compare=False, hash=False)
    out_shapes: tuple = field(default=(), compare=False, hash=False)

    @classmethod
    def of(cls, node_or_instr) -> "NodeInfo":
        if isinstance(node_or_instr, Node):
            n = node_or_instr
            return cls(n.op, tuple(v.dtype.name for v in n.inputs if v is not None),
                       tuple(v.dtype.name for v in n.outputs), dict(n.attrs), n.name,
                       tuple(tuple(v.shape) for v in n.inputs if v is not None), tuple(tuple(v.shape) for v in n.outputs))
        ins = node_or_instr
        return cls(ins.op, tuple(b.type.dtype.name for b in ins.ins), tuple(b.type.dtype.name for b in ins.outs),
                   dict(ins.attrs), ins.name, tuple(tuple(b.type.shape) for b in ins.ins),
                   tuple(tuple(b.type.shape) for b in ins.outs))


class Unsupported:
    """A refusal with its reason: ``is_op_supported`` may return ``Unsupported("no int8 conv yet")``.

    It is falsy, so every caller that tests ``if backend.is_op_supported(info)`` reads it as False; the
    partitioner and the error messages show ``reason``."""

    __slots__ = ("reason",)

    def __init__(self, reason: str = ""):
        self.reason = str(reason)

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"Unsupported({self.reason!r})"

    __str__ = __repr__


def refusal_reason(answer, default: str = "") -> str:
    """The reason carried by an ``is_op_supported`` answer (``Unsupported.reason``), or ``default``."""
    return answer.reason if isinstance(answer, Unsupported) and answer.reason else default



@dataclass(frozen=True)
class DeviceCosts:
    """A device as the partitioner's cost model sees it (``Backend.cost_model()``).

    ``flops_per_second``: sustained compute rate. ``link_bytes_per_second`` and ``transfer_latency``: the
    host <-> device link, per value moved (a device that computes in host memory, like the CPU backend, has an
    infinite link and no latency: moving a value to it is free)."""

    flops_per_second: float
    link_bytes_per_second: float = float("inf")
    transfer_latency: float = 0.0

    def compute_seconds(self, flops: int) -> float:
        """Estimated time to compute ``flops`` on this device."""
        return flops / self.flops_per_second

    def transfer_seconds(self, nbytes: int, values: int) -> float:
        """Estimated time to move ``values`` tensors of ``nbytes`` bytes in total across the link."""
        return values * self.transfer_latency + nbytes / self.link_bytes_per_second


#: The default cost model: a device that computes in host memory (10 GFLOP/s, moving a value to it is free), so
#: the partitioner never returns an island from it: without figures, everything the device claims is offloaded.
HOST = DeviceCosts(flops_per_second=1e10)

#: Figures for an accelerator card on a PCIe-class link (100 GFLOP/s, 10 GB/s, 10 microseconds per transfer): a
#: starting point for a vendor's ``cost_model()``.
ACCELERATOR = DeviceCosts(flops_per_second=1e11, link_bytes_per_second=1e10, transfer_latency=1e-5)

class CompiledFunction(abc.ABC):
    """A function compiled for one backend; ``execute`` maps input arrays by name to output arrays by name."""

    @abc.abstractmethod
    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once. Inputs are already checked against the function's types by the caller."""

    def execute_timed(self, inputs: dict[str, np.ndarray]) -> "tuple[dict[str, np.ndarray], list] | None":
        """Run once like ``execute`` and time every instruction: returns ``(outputs, timings)``, ``timings`` a
        list of ``(instr, start, seconds)`` in execution order (``instr`` an ``ir.Instr``; ``start`` in seconds
        from the run's start, both from ``time.perf_counter`` or a device clock converted to seconds). ``glowc
        bench`` builds its per-op-kind table from it, traces (``glow_core.trace``) one event per instruction.
        Device events: an entry may carry a 4th element, the name of the track it ran on (``"dsp0"``,
        ``"dma"``), and the trace draws each track on its own row; convert device timestamps to seconds from
        the run's start on the host. Default None: this backend cannot time single instructions (a backend
        that runs the whole function in one native call needs instrumented code for it, used only here so that
        ``execute`` pays nothing)."""
        return None

    def placeholders(self) -> "dict[str, np.ndarray] | None":
        """Writable numpy views of the input and output placeholders (by name) in the memory this function runs
        in, when the host reaches it: a caller writes the inputs there, calls ``run_placeholders()`` and reads the
        outputs there, with no copy and no allocation per run (a generator's decode loop). Default None: the
        caller uses ``execute``."""
        return None

    def run_placeholders(self):
        """Run once on the inputs as they are in ``placeholders()``, leaving the outputs there."""
        raise NotImplementedError(f"{type(self).__name__} has no placeholders() to run on")

    def compile_spans(self) -> "list[tuple[str, float, float]]":
        """Work ``Backend.compile`` did outside Python for this function, as ``(name, start, seconds)`` with
        ``start`` on the ``time.perf_counter`` clock (the CPU backend: its C compiler). Compile statistics
        count it as a stage of its own (taken out of "backend-compile") and traces draw it on its own track.
        Default: none."""
        return []

    def stats(self) -> "dict | None":
        """Statistics this backend reports about the compiled function (a device's cycle counts, utilization,
        traffic), for ``CompiledModel.stats()``: a dict of plain values, or None (the default) for none."""
        return None

    def memory_regions(self) -> "dict[str, bytearray | np.ndarray] | None":
        """The device memory this function runs in, for observability: ``{"mutable": ..., "activation": ...}``
        (optionally ``"constant"``; ``"state"`` for a function with persistent placeholders), each a writable byte
        buffer (bytearray or uint8 array) laid out exactly as the memory plan says (``Buffer.region`` names the
        key, ``Buffer.address`` the offset). The conformance
        suite's memory tier fills every unplanned byte with guard bytes before a run and checks them after.
        Default None: the backend cannot expose its memory, and those checks are skipped with that reason."""
        return None


class StateOnHost(CompiledFunction):
    """A function whose backend keeps no state (``Backend.compile_functions``' default): its state buffers are
    ordinary inputs and outputs of ``inner``, and the host keeps their bytes in ``region`` (the module's state
    region, shared with the other functions of the module), passing them in before and taking them back after
    every run."""

    def __init__(self, inner: CompiledFunction, views: dict[str, np.ndarray], region: np.ndarray):
        self.inner, self.views, self.region = inner, views, region

    def execute(self, inputs):
        outs = self.inner.execute({**inputs, **self.views})
        for nm, view in self.views.items():
            view[...] = outs.pop(nm)
        return outs

    def execute_timed(self, inputs):
        timed = self.inner.execute_timed({**inputs, **self.views})
        if timed is None:
            return None
        outs, timings = timed
        for nm, view in self.views.items():
            view[...] = outs.pop(nm)
        return outs, timings

    def compile_spans(self):
        return self.inner.compile_spans()

    def stats(self):
        return self.inner.stats()

    def memory_regions(self):
        return {**(self.inner.memory_regions() or {}), "state": self.region}


class Backend(abc.ABC):
    """Base class of every backend, built-in or vendor. Register it in the ``glow_core.backends`` entry points."""

    #: The name users select it by (also its entry-point name).
    name: str = ""

    @abc.abstractmethod
    def is_op_supported(self, node_info: NodeInfo) -> "bool | Unsupported":
        """Whether this backend can execute ``node_info.op`` with these dtypes (after lowering). A refusal may
        be ``Unsupported("reason")`` (falsy) naming what is missing; the reason reaches the user."""

    @abc.abstractmethod
    def compile(self, function: IRFunction, options: dict[str, Any]) -> CompiledFunction:
        """Turn the planned low-level IR (with ``function.graph`` and ``function.plan``) into something runnable."""

    # -- optional hooks ------------------------------------------------------------------------------
    def should_lower(self, node: Node) -> bool:
        """Return False to keep a high-level node whole (the backend then implements it). Default: lower all."""
        return True

    def transform_post_lowering(self, function: Function) -> bool:
        """Backend-specific graph rewrites after lowering (fusions). Return True if anything changed."""
        return False

    def supports_fused_activation(self, op: str, activation: str) -> bool:
        """Whether ``op`` may absorb ``activation`` (e.g. conv + relu) in ``transform_post_lowering``."""
        return False

    def verify(self, function: IRFunction) -> list[str]:
        """Messages for anything this backend cannot run; empty when it can. Default: check is_op_supported."""
        bad = []
        for ins in function.code:
            info = NodeInfo.of(ins)
            answer = self.is_op_supported(info)
            if not answer:
                why = refusal_reason(answer)
                bad.append(f"instruction '{ins.name}': op {info.op} with input dtypes "
                           f"{', '.join(info.in_dtypes) or '-'} is not supported by backend '{self.name}'"
                           + (f": {why}" if why else ""))
        return bad

    def required_options(self) -> dict[str, Any]:
        """Compile options whose values this backend's results depend on and which it requires, e.g. an
        integer-only device's ``{"requant": "fixed_point"}``. ``glow_core.compile`` and ``compile_graph`` fill
        them in (a different value given by the user is a GlowError), and the conformance suite compiles its
        expectation (the interpreter, the reference kernels) with them, so both sides use the same arithmetic.
        Default: none."""
        return {}

    def merge_stats(self, stats: list[dict]) -> dict:
        """One entry of ``CompiledModel.stats()`` from the ``CompiledFunction.stats()`` of each partition run on
        this backend, in run order. Default: the only one's, else ``{"partitions": stats}``."""
        return stats[0] if len(stats) == 1 else {"partitions": list(stats)}

    def optimization_pipeline(self) -> list[str]:
        """Names of the graph passes to run (see ``glow_core.passes.PASSES``), in order."""
        return list(DEFAULT_PIPELINE)

    def scratch_bytes(self, instr) -> int:
        """Bytes of scratch memory instruction ``instr`` (an ``ir.Instr``) needs while it runs (im2col columns,
        packed panels, partial sums). The memory planner places it as an ``@scratch`` operand with every other
        buffer, so the device allocates nothing at run time. Default 0."""
        return 0

    def tensor_layout_requirements(self, instr) -> "LayoutRequirement | None":
        """The layouts instruction ``instr`` (an ``ir.Instr``) reads and writes its activations in, as a
        ``glow_core.layout.LayoutRequirement``: per input position the layouts it accepts (preferred first),
        the layouts it may write its output in, or ``agnostic=True`` for an instruction that computes the same on
        any layout its operands share (elementwise over same-shape operands). ``glow_core.layout.assign_layouts``
        turns the answers into a layout per activation and ``layout_convert`` instructions at the boundaries;
        a backend answering anything but None must implement ``layout_convert`` and the blocked layouts it
        names (``ir.stored_shape``). Default None: every tensor plain, nothing inserted."""
        return None

    def instruction_groups(self, function: IRFunction) -> list[list]:
        """Instructions of ``function`` (its IR after the IR passes, before the memory plan) this backend runs as
        one kernel, e.g. a convolution and the residual add that reads its result: a list of groups, each a list
        of ``ir.Instr`` of ``function.code``. The memory planner keeps every activation a group names live from the
        group's first instruction to its last, so no output of the group is placed over an input it still reads;
        ``function.groups`` holds them for ``compile``. Default: none."""
        return []

    def should_share_buffers(self) -> bool:
        """Whether IR buffer sharing (in-place reuse) may run for this backend."""
        return True

    def memory_capacity(self) -> int | None:
        """Bytes of activation memory the device has, or None for no limit."""
        return None

    def fallback_backends(self) -> list:
        """Backends (names, ``module:attr`` specs or instances, in priority order) that run what this one
        refuses when a model is compiled for it alone: ``compile(model, backend=self)`` then partitions the model
        over ``[self, *fallback_backends()]`` with a notice naming the nodes moved, instead of failing. The
        ``fallback=`` compile option overrides it (``fallback=False``: refuse). Default: none."""
        return []

    def cost_model(self) -> DeviceCosts:
        """How fast the device computes and what moving a value between host memory and the device costs
        (``DeviceCosts``). The partitioner returns a small island of nodes to the neighbouring
        backend when moving its inputs and outputs here and computing here would take longer than computing
        there. Default: a device computing in host memory (``HOST``: moving values is free, so nothing
        returns); an accelerator states its figures (``ACCELERATOR`` is a PCIe card's)."""
        return HOST

    def known_failures(self) -> list[tuple[str, str]]:
        """Conformance case patterns (fnmatch) expected to fail, each with its reason: they become strict xfails
        (temporary: a known failure that passes fails the run, so the list only shrinks)."""
        return []

    # -- what the conformance suite asks (glow_conformance; vendor_guide/conformance.md) -------------------------
    def unsupported_cases(self) -> list[tuple[str, str]]:
        """Conformance case patterns (fnmatch) this backend will never run, each with its reason (a dtype the
        silicon lacks, a rank its DMA cannot address): the suite skips them without running them, apart from
        the temporary ``known_failures``. Default: none."""
        return []

    def conformance_flows(self) -> "tuple[str, ...] | None":
        """The conformance flows (recipes: ``fp32``, ``fp16``, ``bf16``, ``int8-per-tensor``,
        ``int8-per-channel``, ``int16``, ``int4-weight-only``; ``glow_conformance.flows``) this backend claims.
        A flow it does not claim is refused by ``--flow`` and its cases are skipped in a full run. Default None:
        every flow (what ``is_op_supported`` refuses is still skipped case by case)."""
        return None

    def claimed_ops(self) -> "frozenset[str]":
        """Ops (primitive or kept-whole op names) this backend promises to run itself: a conformance case in which
        ``is_op_supported`` refuses one of them (it would run on a fallback device) fails instead of being
        skipped, like the ops of ``--require-ops FILE``. Default: none."""
        return frozenset()

    def flushes_subnormals(self) -> bool:
        """Whether the device flushes subnormal floats to zero (results and operands: FTZ and DAZ). The
        conformance suite then expects flushed answers everywhere (computed from flushed operands, subnormal
        results as zeros of their sign), else subnormals everywhere; the two are never mixed. Default False."""
        return False

    def interesting_shapes(self, op: str) -> dict:
        """The sizes where this backend's kernels for ``op`` change path (tile sizes, vector widths, parallel
        thresholds, algorithm-selecting geometries), by the keys ``glow_conformance.paths`` reads (listed in
        vendor_guide/backend_api.md): the conformance suite builds cases on both sides of each. Default: none
        (the suite uses generic sizes)."""
        return {}

    def enable_sanitizers(self, names: tuple[str, ...], log_dir: str) -> None:
        """``glowc conformance --sanitize``: build the code this backend generates from now on, in this process and
        the processes it starts, with these sanitizers (its own names, e.g. ``("address", "undefined")``),
        each process writing its reports into ``log_dir`` as files named ``<anything>.<pid>``. May re-execute the
        process (a sanitizer runtime that must be loaded first). Default: BackendError (no sanitizer builds)."""
        raise BackendError(f"backend '{self.name}' has no sanitizer builds (Backend.enable_sanitizers)")

    def coverage_build(self, work_dir: str) -> "Backend":
        """``glowc conformance --coverage``: an instance of this backend whose generated code records which of its
        source lines run, its data kept under ``work_dir`` (set up by the first process to ask; the others find
        it there). Default: BackendError (no coverage builds)."""
        raise BackendError(f"backend '{self.name}' has no coverage builds (Backend.coverage_build)")

    def coverage_report(self, work_dir: str) -> dict:
        """The line coverage recorded under ``work_dir`` by ``coverage_build``'s backend, after the run:
        ``{"builds": n, "builds_run": n, "work": work_dir, "templates": {source name: {"c_lines": n,
        "executable": n, "executed": [line, ...], "never_executed": [...], "never_generated": [...],
        "text": {line: source text}}}}``. Default: {}."""
        return {}

    def compile_functions(self, functions: list[IRFunction], options: dict[str, Any]) -> list[CompiledFunction]:
        """Compile functions that run on this device as one module (a generator's prefill and decode functions),
        one CompiledFunction each, in order.

        ``ir.share_regions`` has placed them in one constant region and one state region: a weight several
        functions read has one offset (and one array) in all of them, to be in device memory once; each
        persistent placeholder (``IRFunction.state``, buffers of region "state") has one offset in all of them.
        The state contract: the state region is allocated once for the module and outlives every run; a run
        finds it as the last run of any function of the module left it; instructions update it in place (a
        primitive with an ``update_kernel`` names it as its ``@inout`` operand 0 and writes only the elements it
        updates, ``scatter_nd`` for a KV cache; or a kept-whole op whose record declares ``OpDef.in_place``
        writes it as the output aliasing its input) and nothing copies it per run; ``memory_regions()["state"]`` gives
        the host its bytes (a generator reads and resets it there).

        A backend that keeps state overrides this (the interpreter and the CPU backend do). The default keeps
        every backend able to run a stateful module without knowing about state: each function is compiled
        alone by ``compile`` with its state buffers made ordinary inputs and outputs (``ir.state_as_io``), and
        the host holds the state region and passes each state in and out around every run (``StateOnHost``).
        That is correct, but the state crosses the host link twice per run and the weights are loaded once per
        function."""
        layout = {}
        for irf in functions:
            for name, b in irf.state.items():
                layout[name] = (b.offset, b.type)
        size = max((irf.plan.state_size for irf in functions), default=0)
        host = np.zeros(max(size, 1), np.uint8)
        views = {nm: host[off:off + t.nbytes].view(t.dtype.np).reshape(t.shape) for nm, (off, t) in layout.items()}
        out = []
        for irf in functions:
            names = list(irf.state)
            state_as_io(irf)
            out.append(StateOnHost(self.compile(irf, options), {nm: views[nm] for nm in names}, host))
        return out

    def emit_bundle(self, function: IRFunction, out_dir: str, options: dict[str, Any]) -> list[str]:
        """Write a standalone bundle for ``function`` into ``out_dir``; returns the files written."""
        raise BackendError(f"backend '{self.name}' cannot emit bundles")

    def device_manager(self) -> "type | None":
        """The ``glow_core.runtime.DeviceManager`` subclass that drives this backend's devices (``Host.add_device``
        uses it when given no ``device_class``; the conformance suite's device tier checks it against the runtime
        contract). Default None: the kit's DeviceManager (functions kept in host memory, a worker thread)."""
        return None
