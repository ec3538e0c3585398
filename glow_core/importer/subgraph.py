"""Subgraphs (the GraphProto attributes of If, Loop and Scan), inlined into the current function.

A control-flow node is imported with the outer-scope values its subgraphs
read appended to its inputs (``outer_scope_names`` names them, and the
importer passes them as the ``_outer`` attribute), so the dependency is
explicit in the graph. Its lowering then calls ``inline_graph`` once per
branch taken or per unrolled iteration: each subgraph node is built with the
same machinery as a top-level node (its OpDef's lowering, folded when its
inputs are constants; an extended op stays one node).
"""
from __future__ import annotations

import numpy as np
import onnx

from ..errors import ImportError_, UnsupportedOpError
from ..graph import Node, Value

OUTER = "_outer"  # the attribute listing the outer-scope names appended to a node's inputs


def _subgraphs(n: onnx.NodeProto):
    for a in n.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def free_names(g: onnx.GraphProto) -> list[str]:
    """Names a graph reads but does not define (its outer-scope references), in first-use order."""
    defined = {i.name for i in g.input} | {t.name for t in g.initializer}
    out: list[str] = []

    def use(nm):
        if nm and nm not in defined and nm not in out:
            out.append(nm)
    for n in g.node:
        for x in n.input:
            use(x)
        for sub in _subgraphs(n):
            for x in free_names(sub):
                use(x)
        defined.update(o for o in n.output if o)
    for o in g.output:
        use(o.name)
    return out


def outer_scope_names(n: onnx.NodeProto, env: dict) -> list[str]:
    """The names defined in ``env`` that the subgraphs of node ``n`` read."""
    names: list[str] = []
    for g in _subgraphs(n):
        for x in free_names(g):
            if x in env and x not in names:
                names.append(x)
    return names


def split_outer(inputs, attrs: dict):
    """(declared inputs, {outer name: Value}) of a node imported with outer-scope inputs."""
    names = list(attrs.get(OUTER) or [])
    k = len(names)
    declared = list(inputs[:len(inputs) - k]) if k else list(inputs)
    return declared, dict(zip(names, inputs[len(inputs) - k:]))


def build_node(b, node: Node, n_out: int) -> list[Value]:
    """Emit one high-level node into ``b.fn``: its lowering, its folded kernel or an extended-op node."""
    from ..builder import infer_node_types, lower_node
    from ..ops.extended import run_extended
    from ..ops.registry import get_op
    d = get_op(node.op)
    if not d.is_extended:
        return lower_node(b.fn, node, fold=b.fold, n_outputs=n_out)
    if all(v is None or v.is_const for v in node.inputs):
        arrays = run_extended(node.op, [None if v is None else v.const for v in node.inputs], node.attrs)
        return [b.fn.constant(np.ascontiguousarray(a), node.name) for a in arrays[:n_out]]
    types = infer_node_types(node, n_out)
    return b.fn.add_node(node.op, node.inputs, node.attrs, types, name=node.name, opset=node.opset).outputs


def inline_graph(b, g: onnx.GraphProto, bound: list, outer: dict, tag: str = "") -> list[Value]:
    """Inline subgraph ``g`` into ``b.fn`` with its inputs bound to ``bound`` and outer names to ``outer``."""
    from ..ops.registry import get_op
    from .onnx_import import node_attrs, tensor_to_array
    if len(bound) != len(g.input):
        raise ImportError_(f"{b.where}: subgraph '{g.name}' takes {len(g.input)} inputs, {len(bound)} given")
    env: dict = dict(outer)
    env.update({vi.name: v for vi, v in zip(g.input, bound)})
    for t in g.initializer:
        env[t.name] = b.fn.constant(tensor_to_array(t), t.name or "init")
    for idx, n in enumerate(g.node):
        where = f"{b.where}: subgraph '{g.name}' node '{n.name or n.op_type}' ({n.op_type})"
        if n.domain not in ("", "ai.onnx"):
            raise UnsupportedOpError(f"{where}: domain '{n.domain}' is not supported; accepted: ai.onnx")
        if get_op(n.op_type) is None:
            raise UnsupportedOpError(f"{where}: op {n.op_type} is not supported by the importer")
        ins = []
        for i, x in enumerate(n.input):
            if x and x not in env:
                raise ImportError_(f"{where}: input {i} '{x}' is not defined in the subgraph or its outer scope")
            ins.append(env[x] if x else None)
        while ins and ins[-1] is None:
            ins.pop()
        attrs = node_attrs(n, b.opset, where)
        nested = outer_scope_names(n, env)
        if nested:
            ins = ins + [env[x] for x in nested]
            attrs[OUTER] = nested
        name = f"{b.name}_{tag}{n.name or n.op_type + '_' + str(idx)}"
        outs = build_node(b, Node(n.op_type, ins, attrs, [], name, b.opset), len(n.output))
        for o, v in zip(n.output, outs):
            if o:
                env[o] = v
    missing = [o.name for o in g.output if o.name not in env]
    if missing:
        raise ImportError_(f"{b.where}: subgraph '{g.name}' output(s) {missing} are not produced")
    return [env[o.name] for o in g.output]


def all_nodes(g: onnx.GraphProto):
    """Every node of ``g`` and, recursively, of its nodes' subgraphs."""
    for n in g.node:
        yield n
        for sub in _subgraphs(n):
            yield from all_nodes(sub)


def node_reads(n: onnx.NodeProto) -> list[str]:
    """The names node ``n`` reads: its inputs and its subgraphs' outer-scope references."""
    out = [x for x in n.input if x]
    for g in _subgraphs(n):
        out += [x for x in free_names(g) if x not in out]
    return out
