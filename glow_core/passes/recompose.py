"""Language-model ops recomposed from the decompositions exporters write: ``recompose_llm``.

torch's exporters (TorchScript and dynamo) write transformers' LlamaRMSNorm and rotate_half rotary embedding (whole,
or Phi's partial rotary of the first features) as elementwise ops; ONNX opset 23 has RMSNormalization and
RotaryEmbedding for them. This pass finds each declared
decomposition (``RECOMPOSITIONS``: one record per pattern, its forms in its doc) and rewrites the matched subgraph
into the op, so a backend that keeps the op whole (``should_lower`` False) runs its one kernel where it ran six to
nine elementwise passes over the tensor, and a backend that lowers it gets the op's lowering: the same primitives
up to operand order (x * (1 / sqrt(v)) as reciprocal, the mean as reduce_sum / n).

It is a graph pass a backend lists in ``optimization_pipeline()`` (the CPU backend does), not in
``DEFAULT_PIPELINE``: the interpreter, the specification, computes the model's own decomposition, and a backend
choosing the recomposition is judged against it (conformance tier "passes", the "model" tolerance: a whole-op
kernel sums and rounds in its own order).

Each match is checked for exactness of the rewrite, not only for the shape of the subgraph: every intermediate
is read only inside the pattern (and is no graph output), operands broadcast only as the op would, dtypes are
what the op computes in (a float16/bfloat16 input cast to float32 and back is RMSNormalization's stash_type 1),
and the rotary's cos and sin repeat their first half in their second (cos(concat(f, f)) as transformers builds
them, a constant whose halves are equal, or ops that keep that property): RotaryEmbedding uses one cos and sin
per pair. Linear in the graph (each anchor looks at a bounded neighbourhood; the halves proof is memoized).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..builder import Builder, build_node
from ..errors import GlowError
from ..graph import Function, Node, Value
from .basic import dce

#: Opset of the ops the pass builds (RMSNormalization and RotaryEmbedding are ONNX opset 23).
OPSET = 23
#: Float dtypes that RMSNormalization's stash_type 1 widens to float32 (the decomposition's Cast to float32).
_NARROW = ("float16", "bfloat16")
#: Elementwise ops that keep "the last axis' two halves are equal" (unary, or binary when both operands keep it).
_UNARY_KEEP = frozenset({"Cast", "Identity", "Cos", "Sin", "Neg", "Abs", "Exp", "Sqrt", "Reciprocal", "Tanh",
                         "Sigmoid", "Relu"})
_BINARY_KEEP = frozenset({"Mul", "Add", "Sub", "Div"})
#: Deepest producer chain the halves proof follows.
_HALVES_DEPTH = 24


@dataclass
class Found:
    """A match: the op to build, its inputs (Values, or callables of the pass' Builder giving one) and
    attributes, the value it replaces and the matched nodes (removed once nothing else reads them)."""

    op: str
    inputs: list
    attrs: dict
    replaces: Value
    nodes: list


@dataclass(frozen=True)
class Recomposition:
    """One declared decomposition: ``anchor`` is the op its ``match(view, node) -> Found | None`` starts from,
    ``op`` the op it rebuilds; the forms it accepts are in the match function's doc."""

    name: str
    op: str
    anchor: str
    match: Callable


class _View:
    """The graph as a match sees it: users, graph outputs, constants, and the halves proof (memoized)."""

    def __init__(self, fn: Function):
        self.fn = fn
        self.uses = fn.use_lists()
        self._halves: dict = {}
        self.caches: dict = {}  # (cos or sin value id, batch) -> the [B, S, D/2] cache built for it

    def only_user(self, v: Value, op: str | tuple) -> Node | None:
        """The one node reading ``v`` when it has that op and ``v`` is no graph output; else None."""
        users = self.uses.users(v)
        if len(users) != 1 or self.uses.is_output(v):
            return None
        ops = (op,) if isinstance(op, str) else op
        return users[0] if users[0].op in ops and len(users[0].outputs) >= 1 else None

    def private(self, nodes, keep=()) -> bool:
        """Every output of ``nodes`` but those in ``keep`` is read only by ``nodes`` and is no graph output."""
        inside = {id(n) for n in nodes}
        kept = {v.id for v in keep}
        for n in nodes:
            for v in n.outputs:
                if v.id in kept:
                    continue
                if self.uses.is_output(v) or any(id(u) not in inside for u in self.uses.users(v)):
                    return False
        return True

    def halves_equal(self, v: Value, depth: int = 0) -> bool:
        """Whether ``v[..., :d/2] == v[..., d/2:]`` holds for every input of the graph (d its last dim)."""
        if v.rank == 0 or v.shape[-1] == 1:
            return True  # broadcast along the last axis: one value for both halves
        if v.shape[-1] % 2:
            return False
        key = v.id
        if key in self._halves:
            return self._halves[key]
        self._halves[key] = False  # a cycle never proves anything
        self._halves[key] = self._prove_halves(v, depth)
        return self._halves[key]

    def _prove_halves(self, v: Value, depth: int) -> bool:
        if v.is_const:
            a = np.asarray(v.const)
            h = a.shape[-1] // 2
            return bool(np.array_equal(a[..., :h], a[..., h:], equal_nan=a.dtype.kind == "f"))
        n = v.producer
        if n is None or depth > _HALVES_DEPTH:
            return False
        ins = [x for x in n.inputs if x is not None]
        last = v.rank - 1
        if n.op in _UNARY_KEEP:
            return self.halves_equal(ins[0], depth + 1)
        if n.op in _BINARY_KEEP:
            return len(ins) == 2 and all(x.rank <= v.rank and self.halves_equal(x, depth + 1) for x in ins)
        if n.op == "Concat":
            axis = n.attrs.get("axis", 0)
            return (len(ins) == 2 and ins[0] is ins[1] and axis in (-1, last)) or (
                axis not in (-1, last) and all(self.halves_equal(x, depth + 1) for x in ins))
        if n.op in ("Unsqueeze", "Reshape", "Expand", "Squeeze", "Flatten"):
            # rows of the last axis stay rows when its length is kept (a reshape moves whole rows)
            return ins[0].rank >= 1 and ins[0].shape[-1] == v.shape[-1] and self.halves_equal(ins[0], depth + 1)
        if n.op == "Transpose":
            perm = n.attrs.get("perm") or list(range(v.rank))[::-1]
            return perm[-1] == last and self.halves_equal(ins[0], depth + 1)
        if n.op == "Gather":
            axis = n.attrs.get("axis", 0)
            return ins[0].rank >= 2 and axis not in (-1, ins[0].rank - 1) and self.halves_equal(ins[0], depth + 1)
        return False


def _splat(v: Value | None) -> float | None:
    """The one value of a constant whose elements are all equal (None otherwise)."""
    if v is None or not v.is_const or v.const.size == 0:
        return None
    flat = np.asarray(v.const).reshape(-1)
    if not np.all(flat == flat[0]):
        return None
    return float(flat[0])


def _other(n: Node, v: Value) -> Value | None:
    """The other operand of a binary node ``n`` one of whose operands is ``v``."""
    if len(n.inputs) != 2:
        return None
    a, b = n.inputs
    return b if a is v else a if b is v else None


def _same(a: Value | None, b: Value) -> bool:
    """The same tensor, through Identity and casts to the dtype it already has."""
    if a is None:
        return False

    def base(v):
        while v.producer is not None and v.producer.inputs and v.producer.inputs[0] is not None and (
                v.producer.op == "Identity" or (v.producer.op == "Cast" and v.producer.inputs[0].dtype == v.dtype)):
            v = v.producer.inputs[0]
        return v
    return base(a) is base(b)


def _no_widen(operand: Value, out: Value) -> bool:
    """``operand`` broadcasts into ``out``'s shape without widening it."""
    s, t = operand.shape, out.shape
    return len(s) <= len(t) and all(a in (1, b) for a, b in zip(s[::-1], t[::-1]))


def _trailing(shape) -> tuple:
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def _reduce_axes(n: Node) -> list | None:
    """ReduceMean's axes (constant input from opset 18, else the attribute), normalized; None if unknown."""
    x = n.inputs[0]
    if len(n.inputs) > 1 and n.inputs[1] is not None:
        if not n.inputs[1].is_const:
            return None
        axes = [int(a) for a in np.asarray(n.inputs[1].const).reshape(-1)]
    else:
        axes = n.attrs.get("axes")
        if axes is None:
            return None
        axes = [int(a) for a in axes]
    return sorted(a + x.rank if a < 0 else a for a in axes)


def match_rms_norm(view: _View, mean: Node) -> Found | None:
    """LlamaRMSNorm as torch exports it, from its ReduceMean:

    ``xs = [Cast to float32](x)``; ``Pow(xs, 2)`` or ``Mul(xs, xs)``; ``ReduceMean`` over the trailing axes,
    keepdims; ``Add`` a splat epsilon; ``Sqrt``; then ``Reciprocal``, ``Div(1, .)`` and ``Mul`` by xs (either
    order), or ``Div(xs, .)``; ``[Cast back to x's dtype]``; ``[Mul by a weight]`` of the normalized shape
    (either order). -> ``RMSNormalization(x, weight or ones, axis, epsilon, stash_type=1)``. A float16/bfloat16
    x needs both casts (the op computes in float32 and casts back before the weight); a float32 x computes as
    written (its casts are no-ops)."""
    if mean.attrs.get("keepdims", 1) != 1 or len(mean.outputs) != 1:
        return None
    sq = mean.inputs[0]
    axes = _reduce_axes(mean)
    if sq is None or sq.type is None or not axes or axes != list(range(axes[0], sq.rank)):
        return None
    p = sq.producer
    if p is None or len(p.inputs) != 2:
        return None
    if p.op == "Pow" and _splat(p.inputs[1]) == 2.0 and p.inputs[1].rank <= sq.rank:
        xs = p.inputs[0]
    elif p.op == "Mul" and p.inputs[0] is p.inputs[1]:
        xs = p.inputs[0]
    else:
        return None
    if xs.dtype.name != "float32" or xs.shape != sq.shape:
        return None
    nodes = [p, mean]
    add = view.only_user(mean.outputs[0], "Add")
    if add is None:
        return None
    eps = _splat(_other(add, mean.outputs[0]))
    if eps is None or add.outputs[0].shape != mean.outputs[0].shape or not 0 <= eps < 1:
        return None
    sqrt = view.only_user(add.outputs[0], "Sqrt")
    if sqrt is None:
        return None
    nodes += [add, sqrt]
    s = sqrt.outputs[0]
    inv = view.only_user(s, ("Reciprocal", "Div"))
    if inv is None:
        return None
    if inv.op == "Div" and inv.inputs[1] is s and _same(inv.inputs[0], xs):  # xs / sqrt(...)
        y_node = inv
    else:
        if inv.op == "Div" and (inv.inputs[1] is not s or _splat(inv.inputs[0]) != 1.0
                                or not _no_widen(inv.inputs[0], s)):
            return None
        nodes.append(inv)
        y_node = view.only_user(inv.outputs[0], "Mul")
        if y_node is None or not _same(_other(y_node, inv.outputs[0]), xs):
            return None
    nodes.append(y_node)
    y = y_node.outputs[0]
    if y.shape != xs.shape or y.dtype != xs.dtype:
        return None
    # the input before its cast to float32 (a float16 / bfloat16 x: the op's stash)
    x = xs
    if xs.producer is not None and xs.producer.op == "Cast" and xs.producer.inputs[0].dtype.name in _NARROW + (
            "float32",):
        x = xs.producer.inputs[0]  # the stash cast, or a no-op one
    cast_back = view.only_user(y, "Cast")
    if cast_back is not None and cast_back.outputs[0].dtype == x.dtype:
        nodes.append(cast_back)
        y = cast_back.outputs[0]
    if y.dtype != x.dtype:
        return None
    norm = x.shape[axes[0]:]
    weight = None
    wmul = view.only_user(y, "Mul")
    if wmul is not None:
        w = _other(wmul, y)
        if w is not None and w is not y and w.dtype == x.dtype and wmul.outputs[0].shape == y.shape \
                and _no_widen(w, y) and _trailing(w.shape) == _trailing(norm) and len(w.shape) <= len(y.shape):
            weight = w
            nodes.append(wmul)
            y = wmul.outputs[0]
    if not view.private(nodes, keep=[y]):
        return None
    scale = weight if weight is not None else (lambda b: b.const(np.ones(norm, x.dtype.np)))
    return Found("RMSNormalization", [x, scale], {"axis": axes[0], "epsilon": float(np.float32(eps)),
                                                  "stash_type": 1}, y, nodes)


def _last_axis_slice(n: Node) -> tuple[int, int] | None:
    """(start, stop) of an ONNX Slice that cuts only the last axis of its input with step 1; else None."""
    x, out = n.inputs[0], n.outputs[0]
    if x is None or x.type is None or out.shape[:-1] != x.shape[:-1]:
        return None
    if len(n.inputs) > 1:
        vals = []
        for v in n.inputs[1:5]:
            if v is not None and not v.is_const:
                return None
            vals.append(None if v is None else [int(a) for a in np.asarray(v.const).reshape(-1)])
        vals += [None] * (4 - len(vals))
        starts, _, axes, steps = vals
    else:
        starts, axes, steps = n.attrs.get("starts"), n.attrs.get("axes"), None
    if starts is None:
        return None
    axes = list(range(len(starts))) if axes is None else axes
    d, last = x.shape[-1], x.rank - 1
    cut = [(s, a + x.rank if a < 0 else a, 1 if steps is None else steps[i]) for i, (s, a) in enumerate(zip(starts,
                                                                                                        axes))]
    if len(cut) != 1 or cut[0][1] != last or cut[0][2] != 1:
        return None
    start = cut[0][0] + d if cut[0][0] < 0 else cut[0][0]
    start = min(max(start, 0), d)
    return start, start + out.shape[-1]


def match_rotary(view: _View, cat: Node) -> Found | None:
    """transformers' rotate_half rotary embedding as torch exports it, from its Concat:

    ``x1 = Slice(x, :d/2)``, ``x2 = Slice(x, d/2:)`` on the last axis; ``Concat(Neg(x2), x1, axis=-1)``;
    ``Mul`` by sin; ``Mul(x, cos)``; their ``Add`` (every operand order). x is [B, H, S, D] and cos, sin
    [B or 1, 1, S, D] with equal halves (``_View.halves_equal``). -> ``RotaryEmbedding(x, cos[..., :D/2],
    sin[..., :D/2])`` as [B, S, D/2] caches without position ids (one per distinct cos and sin)."""
    if len(cat.inputs) != 2 or len(cat.outputs) != 1:
        return None
    rot = cat.outputs[0]
    if rot.type is None or rot.rank != 4 or cat.attrs.get("axis") not in (-1, 3):
        return None
    neg, x1n = cat.inputs[0].producer, cat.inputs[1].producer
    if neg is None or x1n is None or neg.op != "Neg" or x1n.op != "Slice":
        return None
    x2n = neg.inputs[0].producer
    if x2n is None or x2n.op != "Slice" or x2n.inputs[0] is not x1n.inputs[0]:
        return None
    x = x1n.inputs[0]
    if x.rank != 4:
        return None
    b, h, s, d = x.shape
    half = d // 2
    if d % 2 or not x.dtype.is_float or rot.shape != x.shape or _last_axis_slice(x1n) != (0, half) \
            or _last_axis_slice(x2n) != (half, d):
        return None
    smul = view.only_user(rot, "Mul")
    if smul is None:
        return None
    sin = _other(smul, rot)
    add = view.only_user(smul.outputs[0], "Add")
    if add is None:
        return None
    cmul = _other(add, smul.outputs[0])
    cmul = cmul.producer if cmul is not None else None
    if cmul is None or cmul.op != "Mul" or not any(v is x for v in cmul.inputs):
        return None
    cos = _other(cmul, x) if cmul.inputs[0] is not cmul.inputs[1] else None
    y = add.outputs[0]
    for c in (cos, sin):
        if c is None or c.rank != 4 or c.dtype != x.dtype or c.shape[1] != 1 or c.shape[0] not in (1, b) \
                or c.shape[2:] != (s, d) or not view.halves_equal(c):
            return None
    if y.shape != x.shape or smul.outputs[0].shape != x.shape or cmul.outputs[0].shape != x.shape:
        return None
    nodes = [x1n, x2n, neg, cat, smul, cmul, add]
    if not view.private(nodes, keep=[y]):
        return None

    def cache(c):
        def build(bld: Builder):
            key = (c.id, b)
            got = view.caches.get(key)
            if got is None:
                first = bld.slice(c, starts=[0, 0, 0, 0], ends=[c.shape[0], 1, s, half], steps=[1] * 4)
                got = bld.reshape_(first, (c.shape[0], s, half))
                if c.shape[0] != b:
                    got = bld.broadcast_to(got, (b, s, half))
                view.caches[key] = got
            return got
        return build
    return Found("RotaryEmbedding", [x, cache(cos), cache(sin)],
                 {"interleaved": 0, "num_heads": 0, "rotary_embedding_dim": 0}, y, nodes)


def match_partial_rotary(view: _View, cat: Node) -> Found | None:
    """Phi's partial rotary as torch exports it, from the rotate_half Concat of its rotated part:

    ``x_rot = Slice(x, :r)`` and ``x_pass = Slice(x, r:)`` on the last axis of x [B, H, S, D] (r < D), the rotate_half
    rotary of ``match_rotary`` on x_rot (cos and sin of length r), ``Concat(rotated, x_pass, axis=-1)``. ->
    ``RotaryEmbedding(x, cos[..., :r/2], sin[..., :r/2], rotary_embedding_dim=r)``, which rotates the first r
    features and passes the others (tried before ``match_rotary``, which would take the rotated part alone)."""
    found = match_rotary(view, cat)
    if found is None:
        return None
    xr = found.inputs[0]
    cut = xr.producer
    if cut is None or cut.op != "Slice" or cut.inputs[0] is None or cut.inputs[0].rank != 4:
        return None
    x = cut.inputs[0]
    d, r = x.shape[-1], xr.shape[-1]
    if r >= d or _last_axis_slice(cut) != (0, r):
        return None
    y = found.replaces
    join = view.only_user(y, "Concat")
    if join is None or len(join.inputs) != 2 or join.inputs[0] is not y or join.attrs.get("axis") not in (-1, 3):
        return None
    rest = join.inputs[1].producer
    if rest is None or rest.op != "Slice" or rest.inputs[0] is not x or _last_axis_slice(rest) != (r, d):
        return None
    out = join.outputs[0]
    nodes = found.nodes + [cut, rest, join]
    if out.shape != x.shape or out.dtype != x.dtype or not view.private(nodes, keep=[out]):
        return None
    return Found("RotaryEmbedding", [x] + found.inputs[1:], dict(found.attrs, rotary_embedding_dim=r), out, nodes)


def match_rotary_of_part(view: _View, join: Node) -> Found | None:
    """Phi's partial rotary as torch's dynamo exporter writes it at opset 23 (its optimizer makes the rotation of
    the part a RotaryEmbedding), from the Concat: ``Concat(RotaryEmbedding(Slice(x, :r), cos, sin), Slice(x, r:),
    axis=-1)`` on x [B, H, S, D], the inner op rotating all its r features (no position_ids). ->
    ``RotaryEmbedding(x, cos, sin, rotary_embedding_dim=r)`` with the inner op's other attributes."""
    if len(join.inputs) != 2 or len(join.outputs) != 1 or join.attrs.get("axis") not in (-1, 3):
        return None
    rot, rest = (v.producer for v in join.inputs)
    if rot is None or rest is None or rot.op != "RotaryEmbedding" or rest.op != "Slice" or len(rot.outputs) != 1:
        return None
    ins = [v for v in rot.inputs]
    if len(ins) != 3 or any(v is None for v in ins) or rot.attrs.get("rotary_embedding_dim", 0) not in (
            0, ins[0].shape[-1] if ins[0].rank else -1):
        return None
    cut = ins[0].producer
    x = rest.inputs[0]
    if cut is None or cut.op != "Slice" or x is None or cut.inputs[0] is not x or x.rank != 4:
        return None
    d, r = x.shape[-1], ins[0].shape[-1]
    out = join.outputs[0]
    if r >= d or _last_axis_slice(cut) != (0, r) or _last_axis_slice(rest) != (r, d) or out.shape != x.shape:
        return None
    nodes = [cut, rot, rest, join]
    if not view.private(nodes, keep=[out]):
        return None
    return Found("RotaryEmbedding", [x, ins[1], ins[2]], dict(rot.attrs, rotary_embedding_dim=r), out, nodes)


#: The decompositions recognized, in the order they are tried.
RECOMPOSITIONS = (
    Recomposition("rms_norm", "RMSNormalization", "ReduceMean", match_rms_norm),
    Recomposition("partial_rotary", "RotaryEmbedding", "Concat", match_partial_rotary),
    Recomposition("rotary", "RotaryEmbedding", "Concat", match_rotary),
    Recomposition("rotary_of_part", "RotaryEmbedding", "Concat", match_rotary_of_part),
)


def recompose_llm(fn: Function) -> int:
    """Rewrite every decomposition of ``RECOMPOSITIONS`` into its op (module doc). Returns the number of ops
    built. Linear in the graph."""
    by_anchor: dict = {}
    for r in RECOMPOSITIONS:
        by_anchor.setdefault(r.anchor, []).append(r)
    if not any(n.op in by_anchor for n in fn.nodes):
        return 0
    view = _View(fn)
    taken: set = set()
    count = 0
    for n in list(fn.nodes):
        for r in by_anchor.get(n.op, ()):
            if id(n) in taken:
                break
            found = r.match(view, n)
            if found is None or any(id(m) in taken for m in found.nodes):
                continue
            bld = Builder(fn, f"recomposition {r.name} at node '{n.name}'", opset=OPSET,
                          name=fn.unique_name(f"{r.name}_{n.name}"))
            start = len(fn.nodes)
            try:
                ins = [v(bld) if callable(v) else v for v in found.inputs]
                (out,) = build_node(fn, Node(found.op, ins, dict(found.attrs), [],
                                             fn.unique_name(f"{r.name}_{n.name}"), OPSET), 1)
            except GlowError:
                out = None
            if out is None or out.type != found.replaces.type:  # the op refuses or disagrees: leave the graph
                fn.nodes[start:] = []
                view.caches.clear()
                continue
            origin = found.nodes[-1].source
            for m in fn.nodes[start:]:
                m.origin = m.origin or origin
                view.uses.add(m)
            if out.onnx_name is None:
                out.onnx_name = found.replaces.onnx_name
            view.uses.replace(found.replaces, out)
            for m in found.nodes:  # dead now: nothing reads their outputs (checked by the match)
                view.uses.discard(m)
            taken.update(id(m) for m in found.nodes)
            count += 1
            break
    if count:
        fn.toposort()
        dce(fn)
    return count
