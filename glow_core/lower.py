"""Lowering: every high-level node the backend does not keep whole becomes primitives."""
from __future__ import annotations

from .builder import lower_node
from .errors import UnsupportedOpError
from .graph import Function
from .ops.registry import get_op, is_primitive


def lower(fn: Function, should_lower=lambda node: True) -> int:
    """Replace high-level nodes by their lowering (in place), honouring ``should_lower(node)``."""
    old = fn.nodes
    uses = fn.use_lists()
    fn.nodes = []
    count = 0
    for n in old:
        if is_primitive(n.op):
            fn.nodes.append(n)
            continue
        d = get_op(n.op)
        if d is None:
            raise UnsupportedOpError(f"node '{n.name}': unknown op {n.op}")
        if d.is_extended or not should_lower(n):
            fn.nodes.append(n)
            continue
        first_new = len(fn.nodes)
        outs = lower_node(fn, n, fold=True)
        uses.discard(n)
        for m in fn.nodes[first_new:]:
            uses.add(m)
        for a, b in zip(n.outputs, outs):
            uses.replace(a, b)
        count += 1
    return count
