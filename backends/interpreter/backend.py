"""The interpreter backend: runs the low-level IR over the planned memory regions with the reference kernels.

The kernels are the primitives' own (``glow_core.ops.primitives``: each record holds its numpy kernel) and the
kept-whole ops' (``OpDef.kernel``); this module only binds them to the IR. Every buffer is a numpy view into one
of the byte arrays (constant, mutable, activations, and state for persistent placeholders) at the offset the
memory plan gave it, so every run exercises the plan: two live buffers that overlapped would corrupt each other's
results. The functions of a module (``compile_functions``) share one constant and one state array; a state
update (an ``@inout`` operand 0 of a primitive with an ``update_kernel``) is applied to the state's view itself.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from glow_core.backend import Backend, CompiledFunction, NodeInfo
from glow_core.errors import GlowError
from glow_core.ir import PSEUDO, IRFunction
from glow_core.memory import align_up
from glow_core.ops.registry import get_op, get_primitive


class InterpreterFunction(CompiledFunction):
    """An IRFunction bound to its three memory regions. ``kernels`` (primitive or kept-whole op name -> kernel)
    replaces reference kernels: a device kernel under bring-up, a vendor's custom op, or a deliberately broken one
    in a test. ``shared`` gives the "constant" and "state" byte arrays of a module (``compile_functions``)."""

    def __init__(self, irf: IRFunction, kernels: dict | None = None, shared: dict | None = None):
        self.irf = irf
        plan = irf.plan
        shared = shared or {}
        self.constant = shared["constant"] if "constant" in shared else bytearray(irf.constant_blob())
        self.state = shared["state"] if "state" in shared else bytearray(plan.state_size)
        self.mutable = bytearray(plan.mutable_size)
        self.activations = bytearray(plan.activations_size)
        self._views = {}
        self.steps = []  # (instruction, bound kernel, input views, output views)
        for ins in irf.instrs:
            if ins.op in PSEUDO:
                continue
            outs = [self._view(b) for b in ins.outs]
            args = [self._view(b) for b in ins.ins]
            attrs = {k: v for k, v in ins.attrs.items() if not k.startswith("_")}
            p = get_primitive(ins.op)
            if p is not None and ins.operands[0][1] == "inout" and p.update_kernel is not None:
                run = _bind_update(p, attrs)
            elif p is not None:
                if kernels and ins.op in kernels:
                    p = replace(p, kernel=kernels[ins.op])
                run = p.bind(attrs, [a.dtype for a in args], [o.dtype for o in outs])
            else:
                d = get_op(ins.op)
                if kernels and ins.op in kernels:
                    d = replace(d, kernel=kernels[ins.op])
                run = _bind_kept_whole(d, attrs, ins.attrs.get("_optional"))
            self.steps.append((ins, run, args, outs))

    def _region(self, kind):
        return {"constant": self.constant, "mutable": self.mutable, "activation": self.activations,
                "state": self.state}[kind]

    def _view(self, b):
        if id(b) not in self._views:
            t = b.type
            region = self._region(b.region)
            arr = np.frombuffer(region, dtype=t.dtype.np, count=t.numel, offset=b.address).reshape(t.shape)
            self._views[id(b)] = arr
        return self._views[id(b)]

    def memory_regions(self):
        """The byte arrays every buffer is a view into (guard bytes in the conformance memory tier)."""
        regions = {"constant": self.constant, "mutable": self.mutable, "activation": self.activations}
        return {**regions, "state": self.state} if self.irf.state else regions

    def execute(self, inputs):
        return self._run(inputs, None)

    def placeholders(self):
        """Views of the inputs and outputs in the mutable array."""
        return {name: self._view(b) for name, b in {**self.irf.inputs, **self.irf.outputs}.items()}

    def run_placeholders(self):
        self._run(None, None)

    def execute_timed(self, inputs):
        """Each bound step timed with time.perf_counter (its kernel and the copy into the planned buffer)."""
        timings = []
        return self._run(inputs, timings), timings

    def _run(self, inputs, timings):
        for name, b in self.irf.inputs.items() if inputs is not None else ():
            self._view(b)[...] = inputs[name]
        timed = timings is not None
        clock = time.perf_counter
        t0 = clock()
        with np.errstate(all="ignore"):
            for ins, run, args, outs in self.steps:
                start = clock() if timed else 0.0
                try:
                    results = run(*args)
                except GlowError as e:
                    raise GlowError(f"instruction '{ins.name}' ({ins.op}): {e}") from None
                for o, r in zip(outs, results):
                    if r is o:  # a state updated in place
                        continue
                    if r.shape != o.shape:
                        raise GlowError(f"instruction '{ins.name}' ({ins.op}): kernel returned shape {r.shape}, "
                                        f"the IR says {o.shape}")
                    if np.may_share_memory(r, o):
                        r = r.copy()
                    o[...] = r
                if timed:
                    timings.append((ins, start - t0, clock() - start))
        if inputs is None:
            return None
        return {name: self._view(b).copy() for name, b in self.irf.outputs.items()}


def _bind_update(p, attrs):
    """A state update: ``p.update_kernel`` applied to the state's view (input 0) in place; the view is also the
    instruction's output, so the result is that view."""
    def run(x, *rest):
        p.update_kernel(x, *rest, **attrs)
        return [x]
    return run


def _bind_kept_whole(d, attrs, optional):
    """A callable running a kept-whole op's kernel, with None in the places of missing optional inputs."""
    def run(*args):
        it = iter(args)
        return d.run([None if missing else next(it) for missing in optional] if optional else list(args), attrs)
    return run


class InterpreterBackend(Backend):
    """The reference backend: every primitive and kept-whole (extended or custom) op, with every dtype its
    record accepts."""

    name = "interpreter"

    def is_op_supported(self, node_info: NodeInfo) -> bool:
        p = get_primitive(node_info.op)
        if p is not None:
            return not node_info.in_dtypes or node_info.in_dtypes[0] in p.dtypes
        d = get_op(node_info.op)
        if d is None or not d.is_extended:
            return False
        return d.dtypes is None or not node_info.in_dtypes or node_info.in_dtypes[0] in d.dtypes

    def compile(self, function: IRFunction, options) -> CompiledFunction:
        return InterpreterFunction(function)

    def compile_functions(self, functions: list[IRFunction], options) -> list[CompiledFunction]:
        """One constant array and one state array for all the functions (their plans place them together)."""
        size = max((f.plan.constant_size for f in functions), default=0)
        constant = bytearray(align_up(size))
        for f in functions:
            for b in f.buffers:
                if b.kind == "constant":
                    raw = memoryview(b.data.reshape(-1).view("uint8") if b.data.flags.c_contiguous
                                     else b.data.copy().reshape(-1).view("uint8"))
                    constant[b.offset:b.offset + b.size] = raw
        state = bytearray(max((f.plan.state_size for f in functions), default=0))
        return [InterpreterFunction(f, shared={"constant": constant, "state": state}) for f in functions]
