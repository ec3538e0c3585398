"""The high-level graph IR: typed SSA values, nodes, constants and placeholders (data only).

A ``Function`` holds placeholders (its inputs), constants (weights), nodes in
topological order and its outputs. A node's op is a high-level op (an ONNX op
type such as ``"Conv"``) or a primitive (lower case, such as ``"conv"``); the
registry in ``glow_core.ops`` describes both (``glow_core.verify`` checks a
function against it).

Control-flow nodes (If, Loop, Scan, ...) hold their subgraph bodies as
``Function`` attributes. A body is closed: its inputs are its formal inputs
followed by the outer-scope values it reads (*captures*), which the node takes
as extra inputs, named in its ``OUTER`` attribute, so every dependency is an
edge of the graph. In a body, a value whose type depends on values bound only
when the body is inlined (a loop's iteration number used as a shape operand)
has type None.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import VerifyError
from .types import TensorType, tensor_type_of

_ids = itertools.count()

OUTER = "_outer"  # attribute of a node with subgraph bodies: the outer-scope names appended to its inputs


def split_outer(inputs, attrs: dict) -> tuple[list, list]:
    """(declared inputs, captured outer-scope values) of a node with subgraph bodies."""
    k = len(attrs.get(OUTER) or [])
    return (list(inputs[:len(inputs) - k]), list(inputs[len(inputs) - k:])) if k else (list(inputs), [])


def frozen(v):
    """A hashable stand-in for an attribute value, equal for equal values (arrays by dtype, shape and bytes;
    lists, tuples and dicts element by element; anything unhashable by its repr)."""
    if isinstance(v, np.ndarray):
        return ("nd", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, (list, tuple)):
        return tuple(frozen(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, frozen(x)) for k, x in v.items()))
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)


class Value:
    """An SSA value: a placeholder (function input), a constant, or a node output."""

    __slots__ = ("name", "type", "producer", "const", "kind", "id", "onnx_name")

    def __init__(self, name: str, type: TensorType, kind: str, producer: "Node | None" = None,
                 const: np.ndarray | None = None):
        self.name = name
        self.type = type
        self.kind = kind  # "placeholder" | "constant" | "node"
        self.producer = producer
        self.const = const
        self.id = next(_ids)
        self.onnx_name: str | None = None  # the ONNX value this is (set by the importer, kept by lowering)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self):
        return self.type.dtype

    @property
    def rank(self) -> int:
        return self.type.rank

    @property
    def is_const(self) -> bool:
        return self.kind == "constant"

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type if self.type is not None else '?'}"


@dataclass(eq=False)
class Node:
    """One operation: op name, input values, attributes and output values."""

    op: str
    inputs: list[Value]
    attrs: dict[str, Any]
    outputs: list[Value] = field(default_factory=list)
    name: str = ""
    opset: int = 0
    origin: "tuple[str, str] | None" = None  # (name, op) of the model's node it was lowered from; None: itself

    @property
    def source(self) -> tuple[str, str]:
        """(name, op type) of the model's node this node computes (part of)."""
        return self.origin or (self.name, self.op)

    def __repr__(self) -> str:
        ins = ", ".join(f"%{v.name}" if v is not None else "-" for v in self.inputs)
        outs = ", ".join(f"%{v.name}" for v in self.outputs)
        return f"{outs} = {self.op}({ins}) {self.attrs or ''}".rstrip()


class NameTable:
    """Unique names: ``base`` if free, else ``base + sep + k`` with the smallest free k. Names are never given
    back, so the k last found for a base is where the next search starts (amortized O(1) per name)."""

    def __init__(self, taken=()):
        self.taken = set(taken)
        self._next: dict[str, int] = {}

    def unique(self, base: str, sep: str = "__") -> str:
        k = self._next.get(base, 0)
        name = base if k == 0 else f"{base}{sep}{k}"
        while name in self.taken:
            k += 1
            name = f"{base}{sep}{k}"
        self._next[base] = k
        self.taken.add(name)
        return name


class Function:
    """A graph function: placeholders, constants, nodes (topologically ordered), outputs, and the names of its
    persistent placeholders (``state``)."""

    def __init__(self, name: str = "main"):
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.output_names: list[str] = []
        self.nodes: list[Node] = []
        #: Persistent placeholders (state): names that are both an input placeholder and an output of this
        #: function. The input's memory persists between runs and holds the output's value after each run (a
        #: KV cache, written in place where the output is an in-place update of the input: ``glow_core.ir``).
        self.state: list[str] = []
        self._names = NameTable()

    def __repr__(self) -> str:
        return f"<Function {self.name}: {len(self.inputs)} inputs, {len(self.nodes)} nodes>"

    # -- construction -------------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        """``base``, or ``base__k`` with the smallest k that is free."""
        return self._names.unique(base or "v")

    def add_input(self, name: str, type: TensorType) -> Value:
        v = Value(self.unique_name(name), type, "placeholder")
        self.inputs.append(v)
        return v

    def constant(self, array: np.ndarray, name: str = "const") -> Value:
        array = np.asarray(array)
        return Value(self.unique_name(name), tensor_type_of(array), "constant", const=array)

    def add_node(self, op: str, inputs: list[Value], attrs: dict, out_types: list[TensorType],
                 name: str = "", opset: int = 0) -> Node:
        node = Node(op, list(inputs), dict(attrs), [], name or op, opset)
        for i, t in enumerate(out_types):
            node.outputs.append(Value(self.unique_name(f"{node.name}" + (f"_{i}" if len(out_types) > 1 else "")),
                                      t, "node", producer=node))
        self.nodes.append(node)
        return node

    def set_outputs(self, values: list[Value], names: list[str]):
        self.outputs = list(values)
        self.output_names = list(names)

    # -- queries --------------------------------------------------------------------------
    def constants(self) -> list[Value]:
        seen: dict[int, Value] = {}
        for n in self.nodes:
            for v in n.inputs:
                if v is not None and v.is_const:
                    seen.setdefault(v.id, v)
        for v in self.outputs:
            if v.is_const:
                seen.setdefault(v.id, v)
        return list(seen.values())

    def users(self) -> dict[int, list[Node]]:
        u: dict[int, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                if v is not None:
                    u.setdefault(v.id, []).append(n)
        return u

    def use_lists(self) -> "UseLists":
        """The users of every value, built in one walk; a pass that rewrites many uses makes its changes
        through it (``UseLists.replace`` is O(uses), this function's ``replace_uses`` is O(graph))."""
        return UseLists(self)

    def remove_nodes(self, dead) -> int:
        """Drop the nodes in the set ``dead`` in one walk (a pass collects them and removes them at its end)."""
        before = len(self.nodes)
        if dead:
            self.nodes = [n for n in self.nodes if n not in dead]
        return before - len(self.nodes)

    def replace_uses(self, old: Value, new: Value):
        """Make every use of ``old`` (node inputs and function outputs) use ``new``. Walks the whole graph:
        for many replacements use ``use_lists()``."""
        for n in self.nodes:
            n.inputs = [new if v is old else v for v in n.inputs]
        self.outputs = [new if v is old else v for v in self.outputs]

    def toposort(self):
        """Re-order nodes topologically; raise VerifyError naming a node on a cycle."""
        producers = {v.id: n for n in self.nodes for v in n.outputs}
        state: dict[int, int] = {}
        order: list[Node] = []
        for root in self.nodes:
            if id(root) in state:
                continue
            stack = [(root, iter(root.inputs))]
            state[id(root)] = 1
            while stack:
                node, it = stack[-1]
                for v in it:
                    if v is None:
                        continue
                    p = producers.get(v.id)
                    if p is None:
                        continue
                    s = state.get(id(p))
                    if s == 1:
                        raise VerifyError(f"cycle in graph: node '{p.name}' ({p.op}) depends on its own output")
                    if s is None:
                        state[id(p)] = 1
                        stack.append((p, iter(p.inputs)))
                        break
                else:
                    stack.pop()
                    state[id(node)] = 2
                    order.append(node)
        self.nodes = order

    def dump(self) -> str:
        """A readable text form of the graph."""
        lines = [f"function {self.name}"]
        for v in self.inputs:
            lines.append(f"  input {v!r}")
        for v in self.constants():
            lines.append(f"  const {v!r}")
        for n in self.nodes:
            ins = ", ".join(f"%{v.name}" if v is not None else "-" for v in n.inputs)
            outs = ", ".join(repr(v) for v in n.outputs)
            attrs = ", ".join(f"{k}={_fmt(v)}" for k, v in n.attrs.items())
            lines.append(f"  {outs} = {n.op}({ins})" + (f" {{{attrs}}}" if attrs else ""))
        for name, v in zip(self.output_names, self.outputs):
            lines.append(f"  {'state' if name in self.state else 'output'} {name} = %{v.name}")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """The graph as Graphviz source; names are quoted and escaped."""
        def q(s):
            return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
        lines = ["digraph glow {", "  rankdir=TB;"]
        index = {id(n): i for i, n in enumerate(self.nodes)}
        for v in self.inputs:
            lines.append(f"  v{v.id} [shape=box, label={q(v.name + chr(10) + str(v.type))}];")
        for i, n in enumerate(self.nodes):
            lines.append(f"  n{i} [shape=record, label={q(n.op + chr(10) + n.name)}];")
            for v in n.inputs:
                if v is None:
                    continue
                if v.producer is not None and id(v.producer) in index:
                    lines.append(f"  n{index[id(v.producer)]} -> n{i};")
                elif v.kind == "placeholder":
                    lines.append(f"  v{v.id} -> n{i};")
        for name, v in zip(self.output_names, self.outputs):
            lines.append(f"  o_{abs(hash(name))} [shape=box, label={q(name)}];")
            if v.producer is not None and id(v.producer) in index:
                lines.append(f"  n{index[id(v.producer)]} -> o_{abs(hash(name))};")
        lines.append("}")
        return "\n".join(lines)


class UseLists:
    """The users of every value of a function (as Glow keeps them on its nodes), built in one walk.

    ``replace(old, new)`` redirects every use of ``old`` (node inputs and function outputs) in O(uses of
    ``old``). The lists stay exact as long as the pass that built them makes its rewrites through ``add``
    (a new node), ``set_inputs`` and ``discard`` (a removed node); a node appears once per value it reads."""

    def __init__(self, fn: Function):
        self.fn = fn
        self._users: dict[int, dict[Node, None]] = {}
        self._outputs: dict[int, list[int]] = {}
        for n in fn.nodes:
            self.add(n)
        for i, v in enumerate(fn.outputs):
            self._outputs.setdefault(v.id, []).append(i)

    def add(self, node: Node):
        """Record the uses of a node added to the function."""
        for v in node.inputs:
            if v is not None:
                self._users.setdefault(v.id, {})[node] = None

    def discard(self, node: Node):
        """Forget the uses of a node removed from the function."""
        for v in node.inputs:
            if v is not None:
                self._users.get(v.id, {}).pop(node, None)

    def set_inputs(self, node: Node, inputs: list):
        """Give ``node`` new inputs."""
        self.discard(node)
        node.inputs = list(inputs)
        self.add(node)

    def users(self, v: Value) -> list[Node]:
        """The nodes that read ``v`` (each once)."""
        return list(self._users.get(v.id, ()))

    def num_users(self, v: Value) -> int:
        return len(self._users.get(v.id, ()))

    def is_output(self, v: Value) -> bool:
        return v.id in self._outputs

    def replace(self, old: Value, new: Value):
        """Make every use of ``old`` use ``new``."""
        if old is new:
            return
        users = self._users.pop(old.id, None)
        if users:
            into = self._users.setdefault(new.id, {})
            for n in users:
                n.inputs = [new if v is old else v for v in n.inputs]
                into[n] = None
        slots = self._outputs.pop(old.id, None)
        if slots:
            for i in slots:
                self.fn.outputs[i] = new
            self._outputs.setdefault(new.id, []).extend(slots)


def _fmt(v):
    if isinstance(v, Function):
        return f"{{{v.dump()}}}".replace("\n", "\n    ")
    if isinstance(v, np.ndarray):
        return f"array{v.shape}"
    if isinstance(v, (list, tuple)) and len(v) > 8:
        return f"[{', '.join(map(str, v[:8]))}, ...]"
    return repr(v)
