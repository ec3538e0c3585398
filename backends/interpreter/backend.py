"""The interpreter backend: runs the low-level IR over the planned memory regions with the reference kernels.

The kernels are the primitives' own (``glow_core.ops.primitives``: each record holds its numpy kernel) and the
kept-whole ops' (``OpDef.kernel``); this module only binds them to the IR. Every buffer is a numpy view into one
of three byte arrays (constant, mutable, activations) at the offset the memory plan gave it, so every run
exercises the plan: two live buffers that overlapped would corrupt each other's results.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from glow_core.backend import Backend, CompiledFunction, NodeInfo
from glow_core.errors import GlowError
from glow_core.ir import PSEUDO, IRFunction
from glow_core.ops.registry import get_op, get_primitive


class InterpreterFunction(CompiledFunction):
    """An IRFunction bound to its three memory regions. ``kernels`` (primitive or kept-whole op name -> kernel)
    replaces reference kernels: a device kernel under bring-up, a vendor's custom op, or a deliberately broken one
    in a test."""

    def __init__(self, irf: IRFunction, kernels: dict | None = None):
        self.irf = irf
        plan = irf.plan
        self.constant = bytearray(irf.constant_blob())
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
            if p is not None:
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
        return {"constant": self.constant, "mutable": self.mutable, "activation": self.activations}[kind]

    def _view(self, b):
        if id(b) not in self._views:
            t = b.type
            region = self._region(b.region)
            arr = np.frombuffer(region, dtype=t.dtype.np, count=t.numel, offset=b.address).reshape(t.shape)
            self._views[id(b)] = arr
        return self._views[id(b)]

    def memory_regions(self):
        """The three byte arrays every buffer is a view into (guard bytes in the conformance memory tier)."""
        return {"constant": self.constant, "mutable": self.mutable, "activation": self.activations}

    def execute(self, inputs):
        return self._run(inputs, None)

    def execute_timed(self, inputs):
        """Each bound step timed with time.perf_counter (its kernel and the copy into the planned buffer)."""
        timings = []
        return self._run(inputs, timings), timings

    def _run(self, inputs, timings):
        for name, b in self.irf.inputs.items():
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
                    if r.shape != o.shape:
                        raise GlowError(f"instruction '{ins.name}' ({ins.op}): kernel returned shape {r.shape}, "
                                        f"the IR says {o.shape}")
                    if np.may_share_memory(r, o):
                        r = r.copy()
                    o[...] = r
                if timed:
                    timings.append((ins, start - t0, clock() - start))
        return {name: self._view(b).copy() for name, b in self.irf.outputs.items()}


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
