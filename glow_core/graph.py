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


class Function:
    """A graph function: placeholders, constants, nodes (topologically ordered), outputs."""

    def __init__(self, name: str = "main"):
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.output_names: list[str] = []
        self.nodes: list[Node] = []
        self._names: set[str] = set()

    def __repr__(self) -> str:
        return f"<Function {self.name}: {len(self.inputs)} inputs, {len(self.nodes)} nodes>"

    # -- construction -------------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        base = base or "v"
        name, k = base, 0
        while name in self._names:
            k += 1
            name = f"{base}__{k}"
        self._names.add(name)
        return name

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

    def replace_uses(self, old: Value, new: Value):
        """Make every use of ``old`` (node inputs and function outputs) use ``new``."""
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
            lines.append(f"  output {name} = %{v.name}")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """The graph as Graphviz source; names are quoted and escaped."""
        def q(s):
            return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
        lines = ["digraph glow {", "  rankdir=TB;"]
        for v in self.inputs:
            lines.append(f"  v{v.id} [shape=box, label={q(v.name + chr(10) + str(v.type))}];")
        for i, n in enumerate(self.nodes):
            lines.append(f"  n{i} [shape=record, label={q(n.op + chr(10) + n.name)}];")
            for v in n.inputs:
                if v is None:
                    continue
                if v.producer is not None and v.producer in self.nodes:
                    lines.append(f"  n{self.nodes.index(v.producer)} -> n{i};")
                elif v.kind == "placeholder":
                    lines.append(f"  v{v.id} -> n{i};")
        for name, v in zip(self.output_names, self.outputs):
            lines.append(f"  o_{abs(hash(name))} [shape=box, label={q(name)}];")
            if v.producer is not None and v.producer in self.nodes:
                lines.append(f"  n{self.nodes.index(v.producer)} -> o_{abs(hash(name))};")
        lines.append("}")
        return "\n".join(lines)


def _fmt(v):
    if isinstance(v, Function):
        return f"{{{v.dump()}}}".replace("\n", "\n    ")
    if isinstance(v, np.ndarray):
        return f"array{v.shape}"
    if isinstance(v, (list, tuple)) and len(v) > 8:
        return f"[{', '.join(map(str, v[:8]))}, ...]"
    return repr(v)
