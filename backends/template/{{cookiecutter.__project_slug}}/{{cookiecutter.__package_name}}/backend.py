"""The '{{ cookiecutter.backend_name }}' backend for Glow Kit: {{ cookiecutter.description }}.

Glow Kit hands ``compile`` a planned low-level IR (``glow_core.ir.IRFunction``): a list of instructions over
buffers, each buffer at an offset in one of three memory regions. ``{{ cookiecutter.__class_name }}.compile``
binds it to a (simulated) device; ``execute`` copies the inputs in, launches one kernel per instruction and
copies the outputs out. Required: ``name``, ``is_op_supported``, ``compile``. Every optional hook is below
with its default behaviour and a comment saying when to override it (vendor_guide/backend_api.md).
"""
from __future__ import annotations

import fnmatch
from importlib import resources
from typing import Any

import numpy as np
from glow_core.backend import Backend, CompiledFunction, DeviceCosts, NodeInfo, Unsupported
from glow_core.errors import GlowError
from glow_core.fusion import FUSED_ACTIVATION, FUSED_PARAMS
from glow_core.graph import Function, Node
from glow_core.ir import PSEUDO, Buffer, IRFunction
from glow_core.ops.registry import get_op, get_primitive

from . import kernels
from .device import SimulatedDevice

REGIONS = {"constant": "constant", "mutable": "mutable", "activation": "activations"}


class DeviceFunction(CompiledFunction):
    """One compiled function, loaded on the device: weights copied in once, one launch per instruction."""

    def __init__(self, irf: IRFunction, device: SimulatedDevice):
        self.irf = irf
        self.device = device
        plan = irf.plan
        device.alloc("constant", plan.constant_size)
        device.alloc("mutable", plan.mutable_size)
        device.alloc("activations", plan.activations_size)
        device.copy_in("constant", 0, irf.constant_blob())  # DMA: the weights, once, at load time
        self.steps = []
        for ins in irf.instrs:
            if ins.op in PSEUDO:  # allocactivation / deallocactivation / tensorview: no code, only addresses
                continue
            attrs = {k: v for k, v in ins.attrs.items() if not k.startswith("_")}
            if get_primitive(ins.op) is not None:
                kern = kernels.KERNELS[ins.op]
                if ins.attrs.get(FUSED_ACTIVATION):  # glow_core.fusion folded an activation into this op
                    kern = kernels.fused(kern, ins.attrs[FUSED_ACTIVATION], ins.attrs.get(FUSED_PARAMS) or {})
            elif ins.op in kernels.WHOLE_OPS:
                kern = kernels.WHOLE_OPS[ins.op]
            else:
                ext, opt = kernels.extended(ins.op), ins.attrs.get("_optional")
                kern = (lambda e, o: lambda i, a, d: e(i, a, d, o))(ext, opt)
            outs = [self._view(b) for b in ins.outs]
            self.steps.append((ins, kern, outs, [self._view(b) for b in ins.ins], attrs))

    def memory_regions(self) -> dict[str, bytearray]:
        """The device memory by buffer kind: the conformance suite's memory tier fills the gaps between
        buffers with canaries and checks that no kernel wrote outside its output buffers."""
        return {"mutable": self.device.regions["mutable"], "activation": self.device.regions["activations"]}

    def _view(self, b: Buffer) -> np.ndarray:
        t = b.type
        return self.device.view(REGIONS[b.region], b.address, t.dtype.np, t.shape)

    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        dev = self.device
        for name, b in self.irf.inputs.items():  # DMA host -> device: each input into the mutable region
            dev.copy_in("mutable", b.offset, np.ascontiguousarray(inputs[name], dtype=b.type.dtype.np))
        for ins, kern, outs, args, attrs in self.steps:
            try:
                results = dev.launch(ins.op, kern, args, attrs, [o.dtype for o in outs])
            except GlowError as e:
                raise GlowError(f"instruction '{ins.name}' ({ins.op}): {e}") from None
            for o, r in zip(outs, results):  # the kernel's results, stored into device memory
                r = np.asarray(r)
                if np.shares_memory(r, o):
                    r = r.copy()
                if r.shape != o.shape:
                    raise GlowError(f"instruction '{ins.name}' ({ins.op}): kernel returned shape {r.shape}, "
                                    f"the IR says {o.shape}")
                o[...] = r.astype(o.dtype, copy=False)
        return {name: dev.copy_out("mutable", b.address, b.type.dtype.np, b.type.shape)  # DMA device -> host
                for name, b in self.irf.outputs.items()}


class {{ cookiecutter.__class_name }}(Backend):
    """{{ cookiecutter.vendor }}: {{ cookiecutter.description }}."""

    #: The name users select the backend by; must equal the entry-point name in pyproject.toml.
    name = "{{ cookiecutter.backend_name }}"

    #: Ops the device claims (primitive names, ONNX op types kept whole, extended ops); None = all of them.
    #: Start small, e.g. frozenset({"conv", "matmul"}): what the device does not claim runs on FALLBACK.
    CLAIMS = None

    #: Backends that run what this one refuses, in order (the CPU backend, then the interpreter for the
    #: extended ops the CPU has no kernels for). `glowc partition MODEL --backend NAME` shows who runs what.
    FALLBACK = ("cpu", "interpreter")

    #: The device's cost model for the partitioner (glow_core.backend.DeviceCosts: FLOP/s, link bytes/s, latency
    #: per transfer); None = the default (computes in host memory: every claimed node is offloaded).
    COSTS = None

    #: dtypes the device computes in; None = every dtype the reference kernel of the primitive accepts.
    #: e.g. ("float32", "float16", "int8", "int32", "int64", "bool")
    SUPPORTED_DTYPES = None

    #: ONNX op types kept whole (not lowered); each needs a kernel registered with @whole_op in kernels.py.
    KEEP_WHOLE = frozenset()

    #: (primitive, activation) pairs the device runs as one kernel, e.g. {("conv", "relu"), ("matmul", "clip")}.
    #: Primitives: glow_core.fusion.PRODUCERS; activations: "relu", "clip", "sigmoid", "tanh", "leaky_relu".
    FUSED_ACTIVATIONS = frozenset()

    #: Bytes of on-chip activation memory; None = no limit (see memory_capacity).
    ACTIVATION_MEMORY = None

    # -- required ------------------------------------------------------------------------------------------
    def is_op_supported(self, node_info: NodeInfo) -> bool | Unsupported:
        """Whether the device runs ``node_info.op`` with these dtypes. Asked for every node after lowering. A
        refusal says why (``Unsupported("reason")``): the partition report shows it to the user."""
        if self.CLAIMS is not None and node_info.op not in self.CLAIMS:
            return Unsupported(f"{self.name} does not claim {node_info.op} yet (CLAIMS in backend.py)")
        dtypes = node_info.in_dtypes + node_info.out_dtypes
        bad = [d for d in dtypes if self.SUPPORTED_DTYPES is not None and d not in self.SUPPORTED_DTYPES]
        if bad:
            return Unsupported(f"{self.name} computes in {', '.join(self.SUPPORTED_DTYPES)}, not {bad[0]}")
        p = get_primitive(node_info.op)
        if p is not None:
            return node_info.op in kernels.KERNELS and (not node_info.in_dtypes or node_info.in_dtypes[0] in p.dtypes)
        if node_info.op in kernels.WHOLE_OPS:
            return True
        d = get_op(node_info.op)  # extended ops (TopK, NonZero, ...) run on their reference kernels
        return d is not None and d.is_extended and d.kernel is not None

    def compile(self, function: IRFunction, options: dict[str, Any]) -> CompiledFunction:
        """Bind the planned IR to a device. A code generator would emit device code here. The simulation gives
        each compiled function a device of its own; a driver would allocate its regions on the board."""
        return DeviceFunction(function, SimulatedDevice(f"{self.name}0"))

    # -- optional hooks: defaults shown; override when the comment says so -----------------------------
    def should_lower(self, node: Node) -> bool:
        """Override to keep a high-level op whole when the device has a native kernel for it (Softmax,
        LayerNormalization, ...) that beats the lowered primitives. Default: lower everything."""
        keep = node.op in self.KEEP_WHOLE and node.op in kernels.WHOLE_OPS \
            and node.opset >= kernels.WHOLE_OPS_SINCE.get(node.op, 1)
        return not keep

    def transform_post_lowering(self, function: Function) -> bool:
        """Override for backend-specific graph rewrites after lowering (the core has already fused the
        activations supports_fused_activation accepts). Default: no change."""
        return super().transform_post_lowering(function)

    def supports_fused_activation(self, op: str, activation: str) -> bool:
        """Override (or fill FUSED_ACTIVATIONS) when the device applies an activation in the same pass as
        ``op``, e.g. a MAC array with a ReLU stage: glow_core.fusion then folds the activation into ``op`` as the
        annotations FUSED_ACTIVATION (its name) and FUSED_PARAMS (e.g. clip's min and max), and ``kernels.fused``
        runs them as one launch. Default: nothing is fused."""
        return (op, activation) in self.FUSED_ACTIVATIONS

    def verify(self, function: IRFunction) -> list[str]:
        """Override to refuse IR the device cannot run for reasons other than op/dtype support (a tensor
        larger than a DMA descriptor can address, a rank above the hardware's...). Default: is_op_supported."""
        return super().verify(function)

    def optimization_pipeline(self) -> list[str]:
        """Override to drop or reorder graph passes (names in glow_core.passes.PASSES), e.g. keep BatchNorm
        unfolded when the device has a BatchNorm unit. Default: the standard pipeline."""
        return super().optimization_pipeline()

    def should_share_buffers(self) -> bool:
        """Override to return False when kernels cannot write in place (an output aliasing an input).
        Default: in-place buffer sharing is allowed."""
        return True

    def memory_capacity(self) -> int | None:
        """Override (or set ACTIVATION_MEMORY) for a device with a small on-chip memory: compilation then
        fails with MemoryLimitError when the activations do not fit (glow_core.memory places them)."""
        return self.ACTIVATION_MEMORY

    def fallback_backends(self) -> list:
        """Override (or set FALLBACK) to choose who runs what the device refuses when a model is compiled for
        it alone; the model is then partitioned, with a notice naming the nodes moved. Default here: FALLBACK."""
        return list(self.FALLBACK)

    def cost_model(self) -> DeviceCosts:
        """Override (or set COSTS) with the device's compute rate and host link: the partitioner then returns a
        small island to the host when moving its data would cost more than computing it there."""
        return self.COSTS or super().cost_model()

    def known_failures(self) -> list[tuple[str, str]]:
        """Conformance cases expected to fail, with reasons: read from known_failures.txt. Keep it short."""
        out = []
        text = resources.files(__package__).joinpath("known_failures.txt").read_text(encoding="utf-8")
        for line in text.splitlines():
            pattern, _, reason = line.partition("#")
            if pattern.strip():
                out.append((pattern.strip(), reason.strip() or "no reason given"))
        return out

    def emit_bundle(self, function: IRFunction, out_dir: str, options: dict[str, Any]) -> list[str]:
        """Override to write a standalone artifact (firmware image, C bundle: see vendor_guide/bundles.md).
        Default: refused."""
        return super().emit_bundle(function, out_dir, options)
