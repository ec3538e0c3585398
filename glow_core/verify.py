"""Checks of a graph Function against the registries: SSA form, definitions before uses, and every node's output
types against its rule (a primitive's shape rule, a kept-whole op's shape rule, or its lowering's types)."""
from __future__ import annotations

from .builder import infer_node_types
from .errors import UnsupportedOpError, VerifyError
from .graph import Function
from .ops.registry import get_op, get_primitive


def verify_function(fn: Function):
    """Raise VerifyError naming the first node or value that breaks an invariant."""
    defined = {v.id for v in fn.inputs}
    for n in fn.nodes:
        for i, v in enumerate(n.inputs):
            if v is None or v.kind == "constant":
                continue
            if v.id not in defined:
                raise VerifyError(f"node '{n.name}' ({n.op}) input {i} '%{v.name}' is used before it is defined")
        if get_primitive(n.op) is None and get_op(n.op) is None:
            raise UnsupportedOpError(f"node '{n.name}': unknown op '{n.op}'")
        expected = infer_node_types(n)
        got = [v.type for v in n.outputs]
        if [(t.dtype, t.shape) for t in expected] != [(t.dtype, t.shape) for t in got]:
            raise VerifyError(f"node '{n.name}' ({n.op}) has output types {[str(t) for t in got]} "
                              f"but its rule gives {[str(t) for t in expected]}")
        for v in n.outputs:
            if v.id in defined:
                raise VerifyError(f"value '%{v.name}' is defined twice (node '{n.name}')")
            defined.add(v.id)
    for v in fn.outputs:
        if v.kind != "constant" and v.id not in defined:
            raise VerifyError(f"function output '%{v.name}' is never defined")
