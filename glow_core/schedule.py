"""The node scheduler: the order in which a lowered graph's nodes run, chosen to lower the peak of live
activations (Glow's ``ChildMemSizeBasedScheduler``, lib/IR/ChildMemSizeBasedScheduler.cpp).

Each node gets ``result`` (bytes of its outputs) and ``need`` (bytes live at the worst moment of computing it
and everything it depends on, as if those formed a tree). Starting from the nodes nobody reads, the scheduler
walks depth-first through inputs, taking the input whose ``need - result`` is largest first: the subtree that
needs the most memory runs while the fewest finished results wait (Sethi and Ullman's order, optimal on
trees, among depth-first orders). ``peak_bytes`` measures an order in the same model. IR generation follows
the order; when the model says the scheduled order is better, ``api.compile_graph`` plans both it and the
imported one and keeps the smaller plan, so scheduling never makes a plan worse.
"""
from __future__ import annotations

from .graph import Function, Node


def _result_bytes(node: Node, outputs: set[int]) -> int:
    """Activation bytes a node's results hold (function outputs live in the mutable region instead)."""
    return sum(v.type.nbytes for v in node.outputs if v.id not in outputs)


def schedule(fn: Function) -> list[Node]:
    """A topological order of ``fn.nodes`` (which must be topologically ordered) that computes the inputs
    needing the most memory first, depth-first. O(nodes + edges), plus sorting each node's inputs."""
    producer = {v.id: n for n in fn.nodes for v in n.outputs}
    outputs = {v.id for v in fn.outputs}
    result: dict[Node, int] = {}
    need: dict[Node, int] = {}
    children: dict[Node, list[Node]] = {}
    used: set[Node] = set()
    for n in fn.nodes:
        kids = list(dict.fromkeys(producer[v.id] for v in n.inputs if v is not None and v.id in producer))
        kids.sort(key=lambda c: result[c] - need[c])  # stable: ties keep input order
        held = peak = 0
        for c in kids:
            peak = max(peak, held + need[c])
            held += result[c]
        result[n] = _result_bytes(n, outputs)
        need[n] = max(peak, held + result[n])
        children[n] = kids
        used.update(kids)
    order: list[Node] = []
    done: set[Node] = set()
    for root in fn.nodes:
        if root in used or root in done:
            continue
        done.add(root)
        stack = [(root, iter(children[root]))]
        while stack:
            node, it = stack[-1]
            for c in it:
                if c not in done:
                    done.add(c)
                    stack.append((c, iter(children[c])))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def peak_bytes(fn: Function, order: list[Node]) -> int:
    """Bytes live at the worst step of ``order`` in the scheduler's model: each node's results from its step to
    its last reader's (results nobody reads die at once; function outputs count nothing). O(nodes + edges)."""
    outputs = {v.id for v in fn.outputs}
    last = {}
    for i, n in enumerate(order):
        for v in n.inputs:
            if v is not None:
                last[v.id] = i
    freed: dict[int, int] = {}  # step -> bytes whose last reader runs at that step
    live = peak = 0
    for i, n in enumerate(order):
        for v in n.outputs:
            if v.id not in outputs:
                live += v.type.nbytes
                freed[last.get(v.id, i)] = freed.get(last.get(v.id, i), 0) + v.type.nbytes
        peak = max(peak, live)
        live -= freed.pop(i, 0)
    return peak
