"""The placement report: where every node of a partitioned model runs, why, and what crosses between partitions.

``PlacementReport`` is data (``to_dict()``) with a printable form (``str(report)``, what ``glowc partition``
prints) and a Graphviz form coloured by partition (``to_dot()``). Reasons (``REASONS``) are stable keys.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

#: Why a node runs where it runs: key -> the label the report prints.
REASONS = {
    "supported": "supported by the first backend",
    "forced": "forced by the user",
    "op-refused": "op refused",
    "dtype-refused": "dtype refused",
    "kept-whole-elsewhere": "kept whole elsewhere",
    "over-memory": "over device memory",
    "island": "island too small",
}

#: Fill colours of partitions in the dot file, by backend (cycled).
COLOURS = ("#8ecae6", "#ffb703", "#b7e4c7", "#f4a3a8", "#cdb4db", "#d4a373", "#e9edc9", "#a8dadc")


@dataclass
class NodePlacement:
    """One node of the placement graph: where it runs and why (``reason`` is a key of REASONS)."""

    node: str
    op: str
    origin: str  # the model's node it was lowered from (itself when kept whole)
    origin_op: str
    backend: str
    partition: int
    reason: str
    detail: str  # the reason in words (shared by every node placed for the same reason)
    flops: int = 0
    note: str = ""  # specifics of this node's case (an island's cost figures)


@dataclass
class PartitionInfo:
    """One partition: its backend, size, work, the bytes it reads and writes, and where its inputs come from."""

    index: int
    backend: str
    nodes: int
    flops: int
    bytes_in: int
    bytes_out: int
    reads_from: list = field(default_factory=list)  # partition indices, and "input" for graph inputs
    split: str = ""  # why it was cut from a larger partition (device memory)


@dataclass
class PlacementReport:
    """Where every node of a compiled model runs, and why. ``str(report)`` prints it; ``to_dict()`` is data."""

    model: str
    backends: list[str]
    partitions: list[PartitionInfo]
    nodes: list[NodePlacement]
    edges: list[tuple[int, int, int]] = field(default_factory=list)  # (producer node, consumer node, bytes)
    inputs: dict = field(default_factory=dict)  # graph input -> consumer node indices
    outputs: dict = field(default_factory=dict)  # graph output -> producer node index

    def offloaded(self) -> list[NodePlacement]:
        """The nodes not on the first backend."""
        return [n for n in self.nodes if n.backend != self.backends[0]]

    def reasons(self) -> dict[str, int]:
        """Reason key -> number of nodes not on the first backend for that reason."""
        out: dict[str, int] = {}
        for n in self.offloaded():
            out[n.reason] = out.get(n.reason, 0) + 1
        return out

    def count(self, backend: str) -> int:
        """Number of partitions on ``backend``."""
        return sum(p.backend == backend for p in self.partitions)

    def to_dict(self) -> dict:
        return {"model": self.model, "backends": self.backends,
                "partitions": [asdict(p) for p in self.partitions], "nodes": [asdict(n) for n in self.nodes],
                "reasons": self.reasons()}

    def __str__(self) -> str:
        first = self.backends[0]
        per = ", ".join(f"{b} {self.count(b)}" for b in self.backends if self.count(b))
        on = ", ".join(f"{b} {sum(n.backend == b for n in self.nodes)}" for b in self.backends)
        lines = [f"model '{self.model}' over {', '.join(self.backends)}: {len(self.partitions)} partition(s) "
                 f"({per}); {len(self.nodes)} nodes ({on})", "",
                 f"{'#':>4}  {'backend':<14}{'nodes':>6}{'MFLOP':>11}{'bytes in':>12}{'bytes out':>12}  reads from"]
        for p in self.partitions:
            src = ", ".join(str(r) for r in p.reads_from) or "-"
            lines.append(f"{p.index:>4}  {p.backend:<14}{p.nodes:>6}{p.flops / 1e6:>11.3f}{p.bytes_in:>12}"
                         f"{p.bytes_out:>12}  {src}")
        splits = [p for p in self.partitions if p.split]
        if splits:
            lines += ["", "split for device memory:"]
            lines += [f"  partition {p.index} ({p.backend}): {p.split}" for p in splits]
        off = self.offloaded()
        lines += ["", f"nodes not on {first}: {len(off)} of {len(self.nodes)}" + (", by reason:" if off else "")]
        groups: dict[tuple[str, str], list[NodePlacement]] = {}
        for n in off:
            groups.setdefault((n.reason, n.detail), []).append(n)
        for reason, count in sorted(self.reasons().items(), key=lambda kv: -kv[1]):
            lines.append(f"  {REASONS.get(reason, reason)}: {count}")
            for (r, detail), ns in sorted(groups.items(), key=lambda kv: -len(kv[1])):
                if r != reason:
                    continue
                ops: dict[str, int] = {}
                for n in ns:
                    ops[n.op] = ops.get(n.op, 0) + 1
                where = sorted({n.backend for n in ns})
                lines.append(f"    {len(ns):>4} -> {', '.join(where)}: {detail}")
                lines.append(f"         ops: {', '.join(f'{o} x{c}' for o, c in sorted(ops.items(), key=lambda kv: -kv[1]))}")
                notes: dict[str, list[NodePlacement]] = {}
                for n in ns:
                    notes.setdefault(n.note, []).append(n)
                for note, nn in notes.items():
                    lines.append(f"         nodes{' (' + note + ')' if note else ''}: "
                                 f"{', '.join(_node_label(n) for n in nn)}")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """Graphviz source: one cluster per partition, filled by backend; edges labelled with bytes moved where
        they cross partitions. Names are quoted and escaped."""
        colour = {b: COLOURS[i % len(COLOURS)] for i, b in enumerate(self.backends)}
        lines = ["digraph placement {", "  rankdir=TB;", "  node [style=filled, shape=box, fontsize=10];"]
        for p in self.partitions:
            lines.append(f"  subgraph cluster_{p.index} {{")
            lines.append(f"    label={_q(f'partition {p.index}: {p.backend}')}; style=filled; "
                         f"color={_q(colour[p.backend])}; fillcolor=\"#f8f8f8\";")
            for i, n in enumerate(self.nodes):
                if n.partition == p.index:
                    lines.append(f"    n{i} [label={_q(n.op + chr(10) + n.node)}, fillcolor={_q(colour[n.backend])}, "
                                 f"tooltip={_q(REASONS.get(n.reason, n.reason) + ': ' + n.detail)}];")
            lines.append("  }")
        for k, (name, users) in enumerate(self.inputs.items()):
            lines.append(f"  in{k} [label={_q(name)}, shape=ellipse, fillcolor=white];")
            lines += [f"  in{k} -> n{u};" for u in users]
        for k, (name, src) in enumerate(self.outputs.items()):
            lines.append(f"  out{k} [label={_q(name)}, shape=ellipse, fillcolor=white];")
            if src is not None:
                lines.append(f"  n{src} -> out{k};")
        for a, b, nbytes in self.edges:
            cross = self.nodes[a].partition != self.nodes[b].partition
            lines.append(f"  n{a} -> n{b}" + (f" [label={_q(f'{nbytes} B')}, penwidth=2];" if cross else ";"))
        lines.append("}")
        return "\n".join(lines)


def _node_label(n: NodePlacement) -> str:
    return n.node if n.origin == n.node else f"{n.node} (of {n.origin})"


def _q(s) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
