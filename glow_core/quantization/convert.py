"""Converting a float32 graph to float16 or bfloat16 (Glow's -convert-to-fp16), for devices without float32.

Every primitive node computing in float32 whose record accepts the target type, that the backend accepts in it
and that ``keep_float`` does not name, computes in the target type instead; constants are converted at compile
time, ``cast`` nodes are inserted where a converted node meets a float32 one, and the graph's inputs and outputs
stay float32.
"""
from __future__ import annotations

from ..builder import Builder
from ..errors import GlowError
from ..graph import Function, Node, Value
from ..ops.registry import get_primitive
from ..types import dtype

TARGETS = ("float16", "bfloat16")


def convert(fn: Function, to: str, ask, keep_float=()) -> dict:
    """Rewrite ``fn`` in place; returns {"converted_nodes": n, "float32_nodes": [(node, op, reason)]}."""
    if to not in TARGETS:
        raise GlowError(f"convert_to={to!r} is not accepted; accepted: {', '.join(TARGETS)}")
    keep = set(keep_float)
    low: dict[int, Value] = {}  # float32 value id -> its converted form
    replaced: dict[int, Value] = {}  # results of converted nodes -> what readers of the old value read
    back: dict[int, Value] = {}  # float32 casts of converted results
    kept, converted = [], 0
    old, fn.nodes = fn.nodes, []

    def builder(name):
        return Builder(fn, where=f"node '{name}'", fold=False, name=name)

    def lowered(v: Value, name: str) -> Value:
        if v.id not in low:
            low[v.id] = fn.constant(v.const.astype(dtype(to).np), v.name) if v.is_const else \
                builder(name).cast(v, to=to)
        return low[v.id]

    def f32(v: Value, name: str) -> Value:
        if v.id not in replaced:
            return v
        r = replaced[v.id]
        if r.dtype.name != to:  # a non-float result: the converted node's own
            return r
        if v.id not in back:
            back[v.id] = builder(name).cast(r, to="float32")
        return back[v.id]

    for n in old:
        reason = _why_not(n, to, keep)
        if reason is None:
            start = len(fn.nodes)
            ins = [None if v is None else (lowered(v, n.name) if v.dtype.is_float else f32(v, n.name))
                   for v in n.inputs]
            out = builder(n.name).emit(n.op, *ins, **{k: a for k, a in n.attrs.items() if not k.startswith("_")})
            fn.nodes[-1].origin = n.source
            reason = ask(fn.nodes[-1])
            if reason is None:
                for a, b in zip(n.outputs, out if isinstance(out, list) else [out]):
                    replaced[a.id] = b
                    if b.dtype.name == to:
                        low[a.id] = b
                converted += 1
                continue
            del fn.nodes[start:]
        if reason != NOT_FLOAT32:
            kept.append((n.source[0], n.op, reason))
        n.inputs = [None if v is None else f32(v, n.name) for v in n.inputs]
        fn.nodes.append(n)
    fn.outputs = [f32(v, "output") for v in fn.outputs]
    return {"converted_nodes": converted, "float32_nodes": kept}


NOT_FLOAT32 = "does not compute in float32"


def _why_not(n: Node, to: str, keep: set) -> str | None:
    """Why node n stays as it is (None: it is converted)."""
    p = get_primitive(n.op)
    floats = [v for v in list(n.inputs) + n.outputs if v is not None and v.dtype.is_float]
    if p is None or not floats or any(v.dtype.name != "float32" for v in floats):
        return NOT_FLOAT32
    if {n.name, n.op, *n.source} & keep:
        return "kept in float32 (keep_float)"
    if to not in p.dtypes and n.inputs[0] is not None and n.inputs[0].dtype.is_float:
        return f"primitive {n.op} does not take {to}"
    return None
