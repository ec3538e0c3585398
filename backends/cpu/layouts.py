"""The CPU backend's answer to ``tensor_layout_requirements`` (glow_core.layout): NCHWc between convolutions.

Conv-engine convolutions read plain NCHW or NCHWc (``cb`` lanes per channel block: the host target's) and
write either; float32 elementwise kernels over operands of one shape (``AGNOSTIC``, whose results on the
finite padding lanes stay finite) read blocked buffers as flat arrays, and so do channel concats of inputs
filling whole channel blocks; a broadcast along the spatial dims only (squeeze-excite's channel gate
[N, C, 1, 1] -> [N, C, H, W]) is the broadcast of the stored [N, C/cb, 1, 1, cb] array, read in place by the
gate's mul; float32 max/avg pools index NCHWc planes lane by lane (the lanes past C pool finite values); float32
reductions over all spatial axes (global average pools) read NCHWc and write their small [N, C, 1, 1] result
plain. Everything else reads plain, so the layout pass converts back before other reductions, reshapes, gemm,
other concats and graph outputs.
"""
from __future__ import annotations

from glow_core.ir import PLAIN
from glow_core.layout import LayoutRequirement

from .kernels.codegen import KernelInstr
from .kernels.window import engine_takes
from .conv.engine import host_target

#: Elementwise ops computing the same per element on any layout, finite on finite padding lanes (a fused
#: activation of glow_core.fusion included: relu, clip, sigmoid, tanh, leaky_relu are finite on finite input).
AGNOSTIC = frozenset(("add", "sub", "mul", "max", "min", "sigmoid", "tanh", "erf", "abs", "neg"))
#: Reductions whose kernel reads an NCHWc input when they reduce every spatial axis (kernels/reduce.py).
SPATIAL_REDUCES = frozenset(("reduce_sum", "reduce_max", "reduce_min"))


def blocked_layout() -> str:
    """The blocked layout of the host: NCHWc with the conv engine's channel block."""
    return f"nchwc{host_target().cb}"


def requirements(instr) -> "LayoutRequirement | None":
    """Per instruction: engine convs accept and write NCHWc or NCHW; same-shape float32 elementwise (AGNOSTIC),
    float32 pools, channel concats of whole channel blocks and spatial broadcasts are layout-agnostic; spatial
    float32 reductions read NCHWc or NCHW and write plain; None (plain) otherwise."""
    blocked = blocked_layout()
    if instr.op == "conv":
        x = instr.ins[0]
        if len(x.type.shape) not in (3, 4) or not engine_takes(KernelInstr.of(instr)):
            return None
        return LayoutRequirement(inputs={0: (blocked, PLAIN)}, output=(blocked, PLAIN))
    if instr.op in ("max_pool", "avg_pool") and instr.ins[0].type.dtype.name == "float32" and \
            len(instr.ins[0].type.shape) in (3, 4) and len(instr.outs) == 1:
        return LayoutRequirement(agnostic=True)  # the pool kernel indexes NCHWc planes lane by lane
    if instr.op == "concat" and _block_concat(instr, host_target().cb):
        return LayoutRequirement(agnostic=True)
    if instr.op == "broadcast" and _spatial_broadcast(instr):
        return LayoutRequirement(agnostic=True)
    if instr.op in SPATIAL_REDUCES and _spatial_reduce(instr):
        return LayoutRequirement(inputs={0: (blocked, PLAIN)}, output=(PLAIN,))
    if instr.op in AGNOSTIC and len(instr.outs) == 1:
        out = instr.outs[0]
        if out.type.dtype.name == "float32" and len(out.type.shape) in (3, 4) and \
                all(b.type.shape == out.type.shape for b in instr.ins):
            return LayoutRequirement(agnostic=True)
    return None


def _block_concat(instr, cb: int) -> bool:
    """A float32 concat on the channel axis whose inputs fill whole channel blocks: over NCHWc buffers it is the
    concat of the stored [N, C/cb, *spatial, cb] arrays on axis 1 (the generic kernel, which sees stored shapes)."""
    out = instr.outs[0]
    return (out.type.dtype.name == "float32" and len(out.type.shape) in (3, 4) and instr.attrs.get("axis") == 1
            and all(b.type.shape[1] % cb == 0 for b in instr.ins))


def _spatial_broadcast(instr) -> bool:
    """A float32 broadcast of an [N, C, 1.., 1..] tensor along spatial dims only (channels kept): over NCHWc
    buffers it is the broadcast of the stored [N, C/cb, *spatial, cb] arrays (each lane its own channel)."""
    (x,), (out,) = instr.ins, instr.outs
    xs, os_ = x.type.shape, out.type.shape
    return (out.type.dtype.name == "float32" and len(os_) in (3, 4) and len(xs) == len(os_) and xs[1] == os_[1]
            and all(a in (1, b) for a, b in zip(xs, os_)))


def _spatial_reduce(instr) -> bool:
    """A float32 reduction of a 3-D or 4-D tensor over exactly its spatial axes, one output."""
    x = instr.ins[0]
    rank = len(x.type.shape)
    return (x.type.dtype.name == "float32" and rank in (3, 4) and len(instr.outs) == 1
            and sorted(a % rank for a in instr.attrs["axes"]) == list(range(2, rank)))
