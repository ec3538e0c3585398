"""Removal of no-op reshapes, transposes, casts and identities, and merging of chains of them."""
from __future__ import annotations

from ..graph import Function


def _is_noop(n) -> bool:
    if n.op == "Identity" or n.op == "copy":
        return True
    if n.op in ("reshape", "broadcast", "cast") and len(n.inputs) == 1:
        x, y = n.inputs[0], n.outputs[0]
        return x.type.shape == y.type.shape and x.dtype == y.dtype
    if n.op == "transpose":
        return list(n.attrs["perm"]) == list(range(len(n.attrs["perm"])))
    if n.op == "slice":
        x = n.inputs[0]
        return all(s == 0 and st == 1 and e >= d for s, e, st, d in
                   zip(n.attrs["starts"], n.attrs["ends"], n.attrs["steps"], x.shape))
    return False


def remove_noops(fn: Function) -> int:
    """Drop no-op nodes; fold reshape(reshape(x)) and transpose(transpose(x)) into one node."""
    changed, uses = 0, None
    present = set(fn.nodes)
    for n in fn.nodes:
        if _is_noop(n) and n.inputs and n.inputs[0] is not None:
            uses = uses or fn.use_lists()  # built at the first change
            uses.discard(n)
            uses.replace(n.outputs[0], n.inputs[0])
            present.discard(n)
            changed += 1
            continue
        src = n.inputs[0].producer if n.inputs and n.inputs[0] is not None else None
        if src is None or src not in present:
            continue
        if n.op == "reshape" and src.op == "reshape":
            uses = uses or fn.use_lists()
            uses.set_inputs(n, [src.inputs[0]])
            changed += 1
        elif n.op == "transpose" and src.op == "transpose":
            p1, p2 = src.attrs["perm"], n.attrs["perm"]
            n.attrs = dict(n.attrs, perm=[p1[p] for p in p2])
            uses = uses or fn.use_lists()
            uses.set_inputs(n, [src.inputs[0]])
            changed += 1
    if len(present) != len(fn.nodes):
        fn.nodes = [n for n in fn.nodes if n in present]
    return changed
