"""The builder layer: how high-level nodes become graph nodes and primitives.

``build_node`` is THE one way a high-level (ONNX or custom) node enters a Function: the importer, subgraph
bodies and their inlined copies all use it. ``lower_node`` runs an op's lowering, and ``Builder`` is what a
lowering is handed: ``Builder.emit`` checks a primitive's attributes and types against its record and appends a
node or, when every input is a constant, evaluates it at once with the record's reference kernel (constant
folding is built in). Lowerings call primitives as methods (``b.add(x, y)``, ``b.reduce_sum(x, axes=[1])``),
use the helpers below for numpy-style broadcasting, and inline subgraph bodies with ``b.inline``.

One error mapping for everything that runs at compile time (``compile_time``): a GlowError is the user's and
propagates; MemoryError becomes MemoryLimitError; any other exception is a bug and becomes ``InternalError``
(not a GlowError) naming the node and op, chained to the original.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from .errors import GlowError, ImportError_, InternalError, MemoryLimitError, NeedsSpecialization, ShapeError
from .graph import Function, Node, Value
from .ops.registry import get_op, get_primitive
from .types import TensorType, dtype


class Builder:
    """Emits primitives into a Function for one high-level node (``where`` names it in errors)."""

    def __init__(self, fn: Function, where: str = "", opset: int = 0, fold: bool = True, name: str = "",
                 n_outputs: int = 1):
        self.fn = fn
        self.where = where
        self.opset = opset
        self.fold = fold
        self.name = name or "n"
        self.n_outputs = n_outputs  # ops like Split produce as many outputs as the node asks for

    # -- emission ------------------------------------------------------------------------------------
    def emit(self, op: str, *inputs: Value, **attrs) -> Value | list[Value]:
        p = get_primitive(op)
        if p is None:
            raise ShapeError(f"{self.where}: unknown primitive '{op}'")
        attrs = p.normalize_attrs(attrs, self.where)
        for i, v in enumerate(inputs):
            if not isinstance(v, Value):
                raise ShapeError(f"{self.where}: input {i} of primitive '{op}' is {type(v).__name__}, not a Value")
        try:
            out_types = p.out_types([v.type for v in inputs], attrs)
        except ShapeError as e:
            raise ShapeError(f"{self.where}: {e}") from None
        if self.fold and all(v.is_const for v in inputs) and not keep_lazy(op, inputs, out_types):
            arrays = p.run([v.const for v in inputs], attrs, [t.dtype.np for t in out_types])
            outs = [self.fn.constant(np.ascontiguousarray(a).reshape(t.shape), f"{self.name}_{op}")
                    for a, t in zip(arrays, out_types)]
        else:
            outs = self.fn.add_node(op, list(inputs), attrs, out_types, name=f"{self.name}_{op}").outputs
        return outs[0] if len(outs) == 1 else outs

    def __getattr__(self, op: str):
        if op.startswith("_"):
            raise AttributeError(op)
        name = {"and_": "and", "or_": "or", "not_": "not"}.get(op, op)
        if get_primitive(name) is None:
            raise AttributeError(f"Builder has no primitive or helper '{op}'")
        return lambda *ins, **attrs: self.emit(name, *ins, **attrs)

    # -- constants -----------------------------------------------------------------------------------
    def const(self, value, dt=None) -> Value:
        """A constant value from an array or Python scalar/list (dtype ``dt`` if given)."""
        arr = np.asarray(value)
        if dt is not None:
            arr = arr.astype(dtype(dt).np)
        # (np.ascontiguousarray turns a 0-d array into shape (1,): keep the shape)
        return self.fn.constant(np.ascontiguousarray(arr).reshape(arr.shape), f"{self.name}_const")

    def scalar_like(self, value, like: Value, shape=None) -> Value:
        """A constant of ``like``'s dtype broadcast to ``shape`` (default like's shape)."""
        shape = like.shape if shape is None else tuple(shape)
        if int(np.prod(shape)) <= LAZY_BROADCAST_ELEMENTS:
            return self.const(np.full(shape, value, dtype=like.dtype.np))
        # A large splat stays a broadcast of one element: weights do not grow with the activation size.
        return self.broadcast_to(self.const(np.full((1,) * len(shape), value, dtype=like.dtype.np)), shape)

    def value_of(self, v: Value | None, what: str = "input") -> np.ndarray | None:
        """The constant value of ``v``; raises when it is only known at run time."""
        if v is None:
            return None
        if not v.is_const:
            ph = _placeholders_feeding(v)
            raise NeedsSpecialization(f"{self.where}: {what} '{v.name}' must be a constant (it determines "
                                      f"a shape), but it is computed at run time", ph)
        return v.const

    def scalar_of(self, v: Value | None, what: str, default=None):
        """The one element of constant operand ``v`` (a scalar or a one-element tensor), ``default`` when it is
        missing; ShapeError naming ``what`` when it has another number of elements."""
        a = self.value_of(v, what)
        if a is None:
            return default
        a = np.asarray(a)
        if a.size != 1:
            raise ShapeError(f"{self.where}: {what} has shape {list(a.shape)} ({a.size} elements); a scalar (or one "
                             f"element) is accepted")
        return a.ravel()[0]

    # -- helpers -------------------------------------------------------------------------------------
    def reshape_(self, x: Value, shape) -> Value:
        shape = tuple(int(s) for s in shape)
        return x if x.shape == shape else self.reshape(x, shape=shape)

    def transpose_(self, x: Value, perm) -> Value:
        perm = [int(p) for p in perm]
        return x if perm == list(range(x.rank)) else self.transpose(x, perm=perm)

    def cast_(self, x: Value, to) -> Value:
        to = dtype(to)
        return x if x.dtype == to else self.cast(x, to=to.name)

    def broadcast_to(self, x: Value, shape) -> Value:
        """numpy-style (right-aligned) broadcast of x to ``shape``."""
        shape = tuple(int(s) for s in shape)
        if x.shape == shape:
            return x
        if x.rank > len(shape):
            raise ShapeError(f"{self.where}: cannot broadcast {x.shape} to {shape}")
        x = self.reshape_(x, (1,) * (len(shape) - x.rank) + x.shape)
        if any(a != b and a != 1 for a, b in zip(x.shape, shape)):
            raise ShapeError(f"{self.where}: cannot broadcast {x.shape} to {shape}")
        return x if x.shape == shape else self.broadcast(x, shape=shape)

    def broadcast_shapes(self, *shapes) -> tuple[int, ...]:
        try:
            return tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            raise ShapeError(f"{self.where}: shapes {', '.join(str(tuple(s)) for s in shapes)} do not "
                             f"broadcast (numpy rules)") from None

    def broadcast_all(self, *xs: Value) -> list[Value]:
        shape = self.broadcast_shapes(*[x.shape for x in xs])
        return [self.broadcast_to(x, shape) for x in xs]

    def binary(self, op: str, a: Value, b: Value, **attrs) -> Value:
        """Primitive ``op`` on numpy-broadcast operands."""
        a, b = self.broadcast_all(a, b)
        return self.emit(op, a, b, **attrs)

    def unary(self, op: str, x: Value, **attrs) -> Value:
        return self.emit(op, x, **attrs)

    def where_(self, c: Value, a: Value, b: Value) -> Value:
        c, a, b = self.broadcast_all(c, a, b)
        return self.select(c, a, b)

    def reduce(self, op: str, x: Value, axes, keepdims=True) -> Value:
        axes = sorted({int(a) % x.rank for a in axes}) if x.rank else []
        return self.emit(op, x, axes=axes, keepdims=int(bool(keepdims)))

    def norm_axis(self, axis: int, rank: int, what: str = "axis") -> int:
        if not -rank <= axis < max(rank, 1):
            raise ShapeError(f"{self.where}: {what} {axis} out of range for rank {rank}; accepted "
                             f"[{-rank}, {rank - 1}]")
        return axis % rank if rank else 0

    # -- subgraph bodies -----------------------------------------------------------------------------
    def inline(self, body: Function, args: list[Value], tag: str) -> list[Value]:
        """Emit a copy of subgraph ``body`` with its inputs bound to ``args`` (its formal inputs, then the
        outer-scope values it captures) and return its outputs. Every node is built again through
        ``build_node`` on the bound values, so types that depend on them (a loop's iteration number used as a
        shape operand) are decided here; ``tag`` prefixes the copies' names (one tag per branch or iteration)."""
        if len(args) != len(body.inputs):
            raise ShapeError(f"{self.where}: subgraph '{body.name}' takes {len(body.inputs)} inputs "
                             f"({', '.join(v.name for v in body.inputs)}), {len(args)} given")
        env = {v.id: a for v, a in zip(body.inputs, args)}
        for n in body.nodes:
            ins = [None if v is None else env.get(v.id, v) for v in n.inputs]
            copy = Node(n.op, ins, n.attrs, [], f"{self.name}_{tag}{n.name}", n.opset)
            outs = build_node(self.fn, copy, len(n.outputs), fold=self.fold, lower=True)
            env.update((o.id, v) for o, v in zip(n.outputs, outs))
        return [env.get(v.id, v) for v in body.outputs]


#: Folding a broadcast of a small constant into a large one only inflates the weights: keep it a node.
LAZY_BROADCAST_ELEMENTS = 1024


def keep_lazy(op, inputs, out_types) -> bool:
    """Whether a primitive with constant inputs stays a node: a large broadcast of a small constant, and the
    dequantization of quantized weights (the quantization passes fuse it into integer primitives, and fold
    what they leave)."""
    if op == "dequantize":
        return inputs[0].type.numel > 1
    return (op == "broadcast" and out_types[0].numel > LAZY_BROADCAST_ELEMENTS
            and out_types[0].numel > inputs[0].type.numel)


def _placeholders_feeding(v: Value) -> set[str]:
    seen, out, stack = set(), set(), [v]
    while stack:
        x = stack.pop()
        if x.id in seen:
            continue
        seen.add(x.id)
        if x.kind == "placeholder":
            out.add(x.name)
        elif x.producer is not None:
            stack.extend(x.producer.inputs)
    return out


@contextmanager
def compile_time(node: Node):
    """The one error mapping of code that runs lowerings, shape rules or kernels at compile time."""
    where = f"node '{node.name}' ({node.op})"
    try:
        yield
    except (GlowError, InternalError):
        raise
    except MemoryError:
        raise MemoryLimitError(f"{where}: out of host memory computing its value at compile time (inputs "
                               f"{_types(node)})") from None
    except Exception as e:  # noqa: BLE001  (anything else is a bug in a lowering, shape rule or kernel)
        raise InternalError(f"{where}: internal error with inputs {_types(node)}: {type(e).__name__}: {e}") from e


def _types(node: Node) -> list:
    return [None if v is None else str(v.type) for v in node.inputs]


def lower_node(fn: Function, node: Node, fold: bool = True, n_outputs: int | None = None) -> list[Value]:
    """Emit the lowering of high-level ``node`` into ``fn`` and return its output values; the nodes it adds
    record ``node`` as their origin."""
    n_outputs = len(node.outputs) if n_outputs is None else n_outputs
    d = get_op(node.op)
    b = Builder(fn, where=f"node '{node.name}' ({node.op})", opset=node.opset, fold=fold, name=node.name or "n",
                n_outputs=n_outputs)
    start = len(fn.nodes)
    with compile_time(node):
        outs = d.lower(b, *node.inputs, **node.attrs)
    for m in fn.nodes[start:]:
        m.origin = m.origin or node.source
    if isinstance(outs, Value):
        outs = [outs]
    outs = list(outs)
    if len(outs) < n_outputs or any(o is None for o in outs[:n_outputs]):
        raise ImportError_(f"{b.where}: this importer does not produce output {len(outs)} of the op "
                           f"(the node asks for {n_outputs} outputs)")
    return outs[:n_outputs]


def infer_node_types(node: Node, n_outputs: int | None = None) -> list[TensorType]:
    """Output types of a node: a primitive's rule, a kept-whole op's shape rule, or the types its lowering
    gives on a scratch function."""
    n_outputs = len(node.outputs) if n_outputs is None else n_outputs
    p = get_primitive(node.op)
    if p is not None:
        return p.out_types([v.type for v in node.inputs], node.attrs)
    d = get_op(node.op)
    if d.is_extended:
        b = Builder(Function("scratch"), where=f"node '{node.name}' ({node.op})", opset=node.opset,
                    name=node.name, n_outputs=n_outputs)
        with compile_time(node):
            types = list(d.shape_rule(b, *node.inputs, **_semantic(node.attrs)))
        if len(types) < n_outputs:
            raise ImportError_(f"{b.where}: the op has {len(types)} outputs, the node asks for {n_outputs}")
        return types[:n_outputs]
    scratch = Function("scratch")
    ins = [v if (v is None or v.is_const) else scratch.add_input(v.name, v.type) for v in node.inputs]
    tmp = Node(node.op, ins, node.attrs, [], node.name, node.opset)
    return [v.type for v in lower_node(scratch, tmp, fold=True, n_outputs=n_outputs)]


def _semantic(attrs: dict) -> dict:
    """Attributes without the compiler's annotations (``_outer`` and the like)."""
    return {k: v for k, v in attrs.items() if not k.startswith("_")}


def build_node(fn: Function, node: Node, n_outputs: int, *, fold: bool = True, lower: bool = False,
               template: bool = False) -> list[Value]:
    """THE one way a high-level node (``node``, not yet in any function) enters ``fn``; returns its outputs.

    - every input constant (and the op foldable), or a shape-only op (Shape, Size, ...): the op is lowered
      with folding, so its outputs are constants;
    - a kept-whole (extended or custom) op with constant inputs: folded through its reference kernel;
    - otherwise: with ``lower`` (inlining inside a lowering) a lowered op is emitted as its primitives; else
      the node is appended with its inferred output types (kept-whole ops keep it whole in both cases).
    ``template`` builds a subgraph body: a node whose types depend on values bound only when the body is
    inlined (an input of unknown type, or a shape operand computed from a body input) is appended untyped
    (its outputs have type None); ``Builder.inline`` builds every node again on the bound values.
    """
    d = get_op(node.op)
    if template and any(v is not None and v.type is None for v in node.inputs):
        return _append(fn, node, [None] * n_outputs)
    all_const = all(v is None or v.is_const for v in node.inputs)
    try:
        if not d.is_extended and ((all_const and d.foldable) or d.shape_only or lower):
            return lower_node(fn, node, fold=fold, n_outputs=n_outputs)
        if d.is_extended and all_const and d.foldable and fold:
            infer_node_types(node, n_outputs)  # the shape rule checks the operands before the kernel meets them
            with compile_time(node):
                arrays = d.run([None if v is None else v.const for v in node.inputs], _semantic(node.attrs))
            if len(arrays) < n_outputs:
                raise ImportError_(f"node '{node.name}' ({node.op}): the op has {len(arrays)} outputs, the node "
                                   f"asks for {n_outputs}")
            return [fn.constant(np.ascontiguousarray(a).reshape(np.shape(a)), node.name) for a in arrays[:n_outputs]]
        types = infer_node_types(node, n_outputs)
    except NeedsSpecialization:
        if template:
            return _append(fn, node, [None] * n_outputs)
        raise
    return _append(fn, node, types)


def _append(fn: Function, node: Node, types: list) -> list[Value]:
    fn.nodes.append(node)
    node.outputs = [Value(fn.unique_name(node.name + (f"_{i}" if len(types) > 1 else "")), t, "node", node)
                    for i, t in enumerate(types)]
    return node.outputs


__all__ = ["Builder", "build_node", "lower_node", "infer_node_types", "compile_time"]
