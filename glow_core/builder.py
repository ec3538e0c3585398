"""The Builder: how lowerings emit primitives.

``Builder.emit`` checks a primitive's attributes and types against its
definition and appends a node, or, when every input is a constant, evaluates
it at once with the reference kernel (constant folding is built in).
Lowerings call primitives as methods (``b.add(x, y)``, ``b.reduce_sum(x,
axes=[1])``) and use the helpers below for numpy-style broadcasting.
"""
from __future__ import annotations

import numpy as np

from .errors import ImportError_, NeedsSpecialization, ShapeError
from .graph import Function, Node, Value
from .ops.registry import get_op, get_primitive
from .types import DType, TensorType, dtype


def _kernels():
    from glow_interpreter import kernels
    return kernels


class Builder:
    """Emits primitives into a Function for one high-level node (``where`` names it in errors)."""

    def __init__(self, fn: Function, where: str = "", opset: int = 0, fold: bool = True, name: str = ""):
        self.fn = fn
        self.where = where
        self.opset = opset
        self.fold = fold
        self.name = name or "n"

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
            out_types = p.infer([v.type for v in inputs], **attrs)
        except ShapeError as e:
            raise ShapeError(f"{self.where}: {e}") from None
        if self.fold and all(v.is_const for v in inputs) and not _keep_lazy(op, inputs, out_types):
            arrays = _kernels().run_primitive(op, [v.const for v in inputs], attrs, [t.dtype.np for t in out_types])
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


#: Folding a broadcast of a small constant into a large one only inflates the weights: keep it a node.
LAZY_BROADCAST_ELEMENTS = 1024


def _keep_lazy(op, inputs, out_types) -> bool:
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


def lower_node(fn: Function, node: Node, fold: bool = True, n_outputs: int | None = None) -> list[Value]:
    """Emit the lowering of high-level ``node`` into ``fn`` and return its output values."""
    n_outputs = len(node.outputs) if n_outputs is None else n_outputs
    d = get_op(node.op)
    b = Builder(fn, where=f"node '{node.name}' ({node.op})", opset=node.opset, fold=fold,
                name=_c_safe_prefix(node.name))
    b.n_outputs = n_outputs  # ops like Split produce as many outputs as the node asks for
    outs = d.lower(b, *node.inputs, **node.attrs)
    if isinstance(outs, Value):
        outs = [outs]
    outs = list(outs)
    if len(outs) < n_outputs or any(o is None for o in outs[:n_outputs]):
        raise ImportError_(f"{b.where}: this importer does not produce output {len(outs)} of the op "
                           f"(the node asks for {n_outputs} outputs)")
    return outs[:n_outputs]


def _c_safe_prefix(name: str) -> str:
    return name or "n"


def infer_node_types(node: Node, n_outputs: int | None = None) -> list[TensorType]:
    """Output types of a high-level node: from its lowering run on a scratch function, or its own rule."""
    n_outputs = len(node.outputs) if n_outputs is None else n_outputs
    d = get_op(node.op)
    if d.is_extended:
        from .ops.extended import infer_extended
        return infer_extended(node, n_outputs)
    scratch = Function("scratch")
    ins = [v if (v is None or v.is_const) else scratch.add_input(v.name, v.type) for v in node.inputs]
    tmp = Node(node.op, ins, node.attrs, [], node.name, node.opset)
    outs = lower_node(scratch, tmp, fold=True, n_outputs=n_outputs)
    return [v.type for v in outs]


__all__ = ["Builder", "lower_node", "infer_node_types", "DType"]
