"""Floating-point (or integer) operations of one primitive, from its operand types: bench's GFLOP/s, partition
reports, traces.

Conventions: one multiply-add counts 2; every other arithmetic operation counts 1 whatever its cost
(an ``exp`` counts as much as an ``add``); data movement, indexing and casts count 0. Ops without a rule
(extended ops such as TopK, primitives added later) give None: "unknown", never a guessed number.

``RULES`` maps a primitive family (``PrimitiveDef.family``) to its rule, which fits every primitive of the
family today. The rules belong with each primitive's record; they live here until the records carry them.
"""
from __future__ import annotations

from math import prod
from typing import Callable

from .ops.registry import get_primitive
from .types import TensorType

Rule = Callable[[list, list, dict], int]


def _elementwise(ins: list[TensorType], outs: list[TensorType], attrs: dict) -> int:
    """One operation per output element."""
    return outs[0].numel


def _matmul(ins, outs, attrs) -> int:
    """[..., M, K] x [..., K, N]: 2*K per output element."""
    return 2 * outs[0].numel * ins[0].shape[-1]


def _conv(ins, outs, attrs) -> int:
    """Per output element: 2 * (C/group) * prod(kernel) for the products and sums, plus 1 for the bias."""
    w = ins[1]
    return outs[0].numel * (2 * w.shape[1] * prod(w.shape[2:]) + 1)


def _pool(ins, outs, attrs) -> int:
    """One comparison or addition per window element of every output element (padding included)."""
    return outs[0].numel * prod(attrs["kernel"])


def _reduce(ins, outs, attrs) -> int:
    """One operation per input element (sum, product, max, min, arg-max, arg-min)."""
    return ins[0].numel


def _none(ins, outs, attrs) -> int:
    """Moves, indexes or converts data: no arithmetic."""
    return 0


RULES: dict[str, Rule] = {
    "elementwise": _elementwise, "matmul": _matmul, "conv": _conv, "pool": _pool, "reduce": _reduce,
    "movement": _none, "index": _none, "cast": _none,
}


def flops(op: str, ins: list[TensorType], outs: list[TensorType], attrs: dict) -> int | None:
    """Operations of primitive ``op`` with these input and output types and attributes (None: no rule)."""
    p = get_primitive(op)
    rule = RULES.get(p.family) if p is not None else None
    if rule is None:
        return None
    return int(rule([t for t in ins if t is not None], outs, attrs))


def instr_flops(instr) -> int | None:
    """``flops`` of one low-level IR instruction (an ``ir.Instr``)."""
    return flops(instr.op, [b.type for b in instr.ins], [b.type for b in instr.outs], instr.attrs)


def node_flops(node) -> int | None:
    """``flops`` of one graph node (a ``graph.Node``) that is a primitive."""
    return flops(node.op, [v.type if v is not None else None for v in node.inputs],
                 [v.type for v in node.outputs], node.attrs)
