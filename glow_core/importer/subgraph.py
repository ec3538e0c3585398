"""Scopes of ONNX subgraphs (the GraphProto attributes of If, Loop, Scan, ...).

A node with subgraphs reads, besides its inputs, the outer-scope names its subgraphs use. The importer appends
those values to the node's inputs (``outer_scope_names``) so that the dependency is an edge of the graph, and
passes them to each subgraph body Function as extra inputs (see ``glow_core.graph``).
"""
from __future__ import annotations

import onnx


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
