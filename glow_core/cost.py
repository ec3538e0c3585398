"""Work and traffic estimates: FLOPs of a node, and the device cost model the partitioner weighs islands with.

``node_flops`` counts arithmetic the way profilers do (a multiply-add is two FLOPs): matmul ``2*M*N*K`` per
batch, convolution ``2 * out_elements * C/group * prod(kernel)``, pooling ``out_elements * prod(kernel)``,
reductions one per input element, elementwise and casts one per output element, data movement none. A
high-level node kept whole counts what its lowering would compute; an extended op one per output element.

``DeviceCosts`` is what a backend tells the partitioner about its device (``Backend.cost_model()``): how fast
it computes and what it costs to move a value between host memory and the device.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from .builder import lower_node
from .graph import Function, Node
from .ops.registry import get_op, get_primitive

_MOVEMENT = ("movement", "index")


@dataclass(frozen=True)
class DeviceCosts:
    """A device as the partitioner's cost model sees it.

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


#: The default of ``Backend.cost_model()``: a device that computes in host memory (10 GFLOP/s, moving a value to
#: it is free), so the partitioner never returns an island from it: without figures, offload all it claims.
HOST = DeviceCosts(flops_per_second=1e10)

#: Figures for an accelerator card on a PCIe-class link (100 GFLOP/s, 10 GB/s, 10 microseconds per transfer):
#: a starting point for a vendor's ``cost_model()``.
ACCELERATOR = DeviceCosts(flops_per_second=1e11, link_bytes_per_second=1e10, transfer_latency=1e-5)


def node_flops(node: Node) -> int:
    """Estimated floating-point (or integer) operations of one node (see the module docstring)."""
    p = get_primitive(node.op)
    outs = sum(v.type.numel for v in node.outputs)
    if p is None:
        return _high_level_flops(node) if node.outputs else 0
    if p.family in _MOVEMENT:
        return 0
    if node.op == "matmul":
        a, b = node.inputs[0].shape, node.inputs[1].shape
        return 2 * prod(a[:-2]) * a[-2] * a[-1] * b[-1]
    if node.op == "conv":
        w = node.inputs[1].shape
        return 2 * outs * w[1] * prod(w[2:])
    if p.family == "pool":
        return outs * prod(node.attrs["kernel"])
    if p.family == "reduce":
        return node.inputs[0].type.numel
    return outs


def _high_level_flops(node: Node) -> int:
    """What a whole high-level node computes: the FLOPs of its lowering (on a scratch function), or one per
    output element for an extended op, which has no lowering."""
    d = get_op(node.op)
    if d is None or d.is_extended:
        return sum(v.type.numel for v in node.outputs)
    scratch = Function("flops")
    ins = [v if (v is None or v.is_const) else scratch.add_input(v.name, v.type) for v in node.inputs]
    lower_node(scratch, Node(node.op, ins, node.attrs, [], node.name, node.opset), fold=True,
               n_outputs=len(node.outputs))
    return sum(node_flops(n) for n in scratch.nodes)
