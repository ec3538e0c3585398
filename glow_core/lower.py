"""Lowering: every high-level node the backend does not keep whole becomes primitives."""
from __future__ import annotations

from .builder import lower_node
from .errors import UnsupportedOpError
from .graph import Function
from .ops.registry import get_op, is_primitive


def lower(fn: Function, should_lower=lambda node: True) -> int:
    """Replace high-level nodes by their lowering (in place), honouring ``should_lower(node)``."""
    old = fn.nodes
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
        outs = lower_node(fn, n, fold=True)
        for a, b in zip(n.outputs, outs):
            if b.onnx_name is None and b.kind == "node":
                b.onnx_name = a.onnx_name
            _replace(fn, old, a, b)
        count += 1
    return count


def _replace(fn, pending, old, new):
    for n in pending:
        n.inputs = [new if v is old else v for v in n.inputs]
    fn.replace_uses(old, new)
