"""Dead-code elimination, common-subexpression elimination and constant folding."""
from __future__ import annotations

import numpy as np

from ..builder import Builder, compile_time, keep_lazy, lower_node
from ..graph import Function, frozen
from ..ops.registry import get_op, get_primitive


def _foldable(n) -> bool:
    d = get_op(n.op)
    return d is None or d.foldable


def dce(fn: Function) -> int:
    """Remove nodes none of whose outputs reach a function output."""
    live = {v.id for v in fn.outputs}
    keep = []
    for n in reversed(fn.nodes):
        if any(v.id in live for v in n.outputs):
            keep.append(n)
            live.update(v.id for v in n.inputs if v is not None)
    removed = len(fn.nodes) - len(keep)
    fn.nodes = keep[::-1]
    return removed


def _const_key(v):
    return ("c", v.dtype.name, v.shape, np.ascontiguousarray(v.const).tobytes()) if v.const.size <= 64 else ("id", v.id)


def cse(fn: Function) -> int:
    """Merge nodes with the same op, inputs and attributes (and equal small constants)."""
    seen, dead, uses = {}, set(), None
    for n in fn.nodes:
        if not _foldable(n):  # two random draws are not the same value
            continue
        ins = tuple(None if v is None else (_const_key(v) if v.is_const else ("id", v.id)) for v in n.inputs)
        key = (n.op, ins, frozen(n.attrs), len(n.outputs))
        other = seen.get(key)
        if other is None:
            seen[key] = n
            continue
        uses = uses or fn.use_lists()  # built at the first change
        uses.discard(n)
        for a, b in zip(n.outputs, other.outputs):
            uses.replace(a, b)
        dead.add(n)
    return fn.remove_nodes(dead)


def constant_fold(fn: Function) -> int:
    """Evaluate nodes whose inputs are all constants (primitives with their kernel, ops by lowering)."""
    dead, uses = set(), None
    for n in list(fn.nodes):
        if not _foldable(n) or not all(v is None or v.is_const for v in n.inputs):
            continue
        if get_primitive(n.op) is not None and keep_lazy(n.op, n.inputs, [v.type for v in n.outputs]):
            continue
        d = get_op(n.op)
        with compile_time(n):
            if d is None:
                b = Builder(fn, where=f"node '{n.name}' ({n.op})", name=n.name)
                outs = b.emit(n.op, *n.inputs, **n.attrs)
                outs = outs if isinstance(outs, list) else [outs]
            elif d.is_extended:
                arrays = d.run([None if v is None else v.const for v in n.inputs],
                               {k: v for k, v in n.attrs.items() if not k.startswith("_")})
                outs = [fn.constant(np.ascontiguousarray(a).reshape(np.shape(a)), n.name) for a in arrays]
            else:
                before = len(fn.nodes)
                outs = lower_node(fn, n, fold=True)
                del fn.nodes[before:]
        if any(not o.is_const for o in outs[:len(n.outputs)]):
            continue
        dead.add(n)
        uses = uses or fn.use_lists()  # built at the first change
        uses.discard(n)
        for a, c in zip(n.outputs, outs):
            uses.replace(a, c)
    return fn.remove_nodes(dead)
