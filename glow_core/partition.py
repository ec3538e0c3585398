"""Heterogeneous partitioning (Glow's Partitioner): every node placed on one of several backends with the
reason why, the graph cut into partitions that each compile for their backend, explicit transfers between them.

Placement, in the backends' priority order (``place``):
  * a high-level node goes whole to the first backend that keeps it whole (``should_lower(node)`` False) and
    supports it (``is_op_supported``). When none does, it is lowered and each primitive of its lowering goes to
    the first backend that supports it; an extended op (it has no lowering) goes whole to the first backend
    that supports it. (As in Glow, a node one backend keeps whole is not lowered for the others.)
  * a refusal carries the backend's ``Unsupported.reason``; it is a *dtype* refusal when the backend accepts
    the same op with another dtype, an *op* refusal otherwise.
  * the ``force`` compile option, ``{node name, ONNX op type or primitive: backend name}``, overrides the order.
Partitions (``form_partitions``): nodes, in topological order, join the earliest partition of their backend
that is not before the partition of any producer on the same backend and is after the partition of any
producer on another backend. Every edge then goes forward in the sequence of partitions, which is therefore a
topological order of the partition graph: no cycle can arise, and work the dependencies let share a
partition does.
Islands (``return_islands``): a partition on device ``d`` whose producer and consumer partitions all run on
one other backend ``h`` that supports all its nodes returns to ``h`` when, by the backends' ``cost_model()``,
    h.compute_seconds(flops)  <  d.compute_seconds(flops) + d.transfer_seconds(bytes in + out, values moved)
(the island's inputs and outputs cross d's link; on h they stay where they are). Partitions are then formed
again, until no island moves.
Memory (``split_for_memory``): a partition whose estimated activation peak (live intermediate values in its
topological order, 64-byte aligned) exceeds its backend's ``memory_capacity()`` is halved in topological order
until each half fits; any prefix of a topologically ordered node list is convex, so halves add no cycle. A
partition whose memory plan still does not fit is halved again by the compile driver (``over_memory``); a
single node that does not fit goes to the next backend (reason "over device memory").
Transfers: a value computed in one partition and read by another is an output of the first partition's function
and a placeholder of the second's (``Partition.function``).
"""
from __future__ import annotations

import heapq
import time
from bisect import bisect_left
from dataclasses import dataclass, field

import numpy as np

from .backend import Backend, CompiledFunction, NodeInfo, refusal_reason
from .builder import lower_node
from .errors import GlowError, UnsupportedOpError
from .flops import node_flops as primitive_flops
from .graph import Function, Node, Value
from .memory import ALIGNMENT, align_up
from .ops.registry import get_op, is_primitive
from .passes import run_pipeline
from .placement import REASONS, NodePlacement, PartitionInfo, PlacementReport

#: dtypes tried when classifying a refusal (does the backend run this op with another dtype?)
PROBE_DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32", "int64", "bool")


@dataclass(eq=False)
class Unit:
    """One node of the placement graph (a primitive, an extended op or a node kept whole), where it runs and why."""

    node: Node
    origin: str  # the high-level node it was lowered from (itself when not lowered)
    origin_op: str
    backend: int = 0  # index into the backends
    reason: str = "supported"  # a key of placement.REASONS
    detail: str = ""  # the reason in words, shared by the nodes placed for the same reason
    note: str = ""  # specifics of this node's case (an island's figures)
    forced: bool = False


@dataclass(eq=False)
class Partition:
    """A convex set of units on one backend, in topological order, with the values it reads and writes."""

    backend: int
    units: list[Unit]
    inputs: list[Value] = field(default_factory=list)  # placeholders of the graph or other partitions' outputs
    outputs: list[Value] = field(default_factory=list)  # read by later partitions or graph outputs
    split: str = ""  # why it was cut from a larger partition
    #: The graph's persistent placeholders this partition reads and writes: (name, placeholder, value left in it).
    state: list = field(default_factory=list)

    @property
    def key(self) -> tuple:
        return (self.backend, tuple(u.node.name for u in self.units))

    def function(self, name: str) -> Function:
        """A fresh Function of this partition: a placeholder per input, a copy of each node, an output per value
        that leaves it (named after the value), and the graph's state it holds (``Function.state``, same names)."""
        sf = Function(name)
        vmap = {v.id: sf.add_input(v.name, v.type) for v in self.inputs}
        for u in self.units:
            n = u.node
            ins = [None if v is None else (v if v.is_const else vmap[v.id]) for v in n.inputs]
            m = sf.add_node(n.op, ins, dict(n.attrs), [v.type for v in n.outputs], n.name, n.opset)
            vmap.update((a.id, b) for a, b in zip(n.outputs, m.outputs))
        outs, names = [vmap[v.id] for v in self.outputs], [v.name for v in self.outputs]
        for nm, ph, final in self.state:
            outs.append(final if final.is_const else vmap[final.id])
            names.append(nm)
            sf.state.append(nm)
        sf.set_outputs(outs, names)
        return sf


class SplitNeeded(GlowError):
    """A single node does not fit in its backend's memory: placement must run again without that choice."""

    def __init__(self, unit: Unit, backend: str, message: str):
        super().__init__(message)
        self.unit, self.backend = unit, backend


class Partitioning:
    """The placement of one graph over ``backends`` and its partitions (see the module docstring).

    ``fn`` is lowered in place where no backend keeps a node whole (it becomes the placement graph). ``force``
    maps node names, ONNX op types or primitives to a backend name; ``exclude`` maps (node name, backend name)
    to a reason the node may not run there (the compile driver's memory feedback)."""

    def __init__(self, fn: Function, backends: list[Backend], force=None, exclude=None, capacity=None):
        if not backends:
            raise GlowError("partitioning needs at least one backend")
        self.fn = fn
        self.backends = list(backends)
        self.names = [b.name for b in self.backends]
        self.force = self._check_force(force or {})
        self.exclude = dict(exclude or {})
        self.capacity = capacity or (lambda b: b.memory_capacity())
        self._refusals: dict = {}
        self.stats: dict = {}  # the compile driver's (imported nodes, passes)
        self.units = self._place_all()
        self._order = {id(u): i for i, u in enumerate(self.units)}
        self._graph_outputs = {id(v) for v in fn.outputs}
        self._consumers: dict[int, list[Node]] = {}
        for u in self.units:
            for v in u.node.inputs:
                if v is not None:
                    self._consumers.setdefault(id(v), []).append(u.node)
        self._flops = {id(u.node): node_flops(u.node) for u in self.units}
        self.partitions = self.form_partitions()
        while self.return_islands():
            self.partitions = self.form_partitions()
        self.split_for_memory()

    # -- placement ----------------------------------------------------------------------------------------
    def _check_force(self, force: dict) -> dict:
        out = {}
        for key, b in force.items():
            name = b.name if isinstance(b, Backend) else b
            if name not in self.names:
                raise GlowError(f"force: {key!r} is forced onto backend {name!r}, which is not one of the backends "
                                f"compiled for ({', '.join(self.names)})")
            out[key] = self.names.index(name)
        return out

    def _forced(self, *keys) -> int | None:
        for k in keys:
            if k in self.force:
                self._force_used.add(k)
                return self.force[k]
        return None

    def _place_all(self) -> list[Unit]:
        """Lower where no backend keeps a node whole, placing every resulting node (module docstring)."""
        fn = self.fn
        fn.toposort()
        self._force_used: set = set()
        old, fn.nodes = fn.nodes, []
        remap: dict[int, Value] = {}
        units: list[Unit] = []
        seen: set[str] = set()

        def unique(n: Node) -> Node:  # the report, transfers and backends' refusals name nodes: one name each
            base, k = n.name or n.op, 0
            n.name = base
            while n.name in seen:
                k += 1
                n.name = f"{base}__{k}"
            seen.add(n.name)
            return n

        for n in old:
            n.inputs = [None if v is None else remap.get(v.id, v) for v in n.inputs]
            unique(n)
            d = None if is_primitive(n.op) else get_op(n.op)
            if d is not None and not d.is_extended:
                keeper, _ = self._choose(n, n, self._forced(n.name, n.op), whole=True)
                if keeper is None:
                    start = len(fn.nodes)
                    outs = lower_node(fn, n, fold=True)
                    remap.update((a.id, b) for a, b in zip(n.outputs, outs))
                    forced = self._forced(n.name, n.op)
                    for m in fn.nodes[start:]:
                        units.append(self._place_unit(unique(m), n, forced if forced is not None
                                                      else self._forced(m.op)))
                    continue
                fn.nodes.append(n)
                units.append(keeper)
                continue
            fn.nodes.append(n)
            units.append(self._place_unit(n, n, self._forced(n.name, n.op)))
        fn.outputs = [remap.get(v.id, v) for v in fn.outputs]
        unused = set(self.force) - self._force_used
        if unused:
            raise GlowError(f"force: {', '.join(map(repr, sorted(unused)))} names no node, ONNX op type or primitive "
                            f"of the model; give a node name, an op type (e.g. 'Softmax') or a primitive (e.g. 'add')")
        run_pipeline(fn, ("dce",))  # a lowering may leave outputs nobody reads
        live = {id(n) for n in fn.nodes}
        return [u for u in units if id(u.node) in live]

    def _choose(self, n: Node, origin: Node, forced: int | None, whole: bool):
        """The Unit of ``n`` on the first backend (in priority order, or the forced one) that runs it (``whole``:
        that keeps it whole and supports it), and the refusals met before it; (None, refusals) when none does."""
        info = NodeInfo.of(n)
        refusals: list[tuple[str, str]] = []
        for i in ([forced] if forced is not None else range(len(self.backends))):
            b = self.backends[i]
            if whole and b.should_lower(n):
                refusals.append(("kept-whole-elsewhere", b.name))
                continue
            why = self.exclude.get((n.name, b.name))
            answer = False if why else b.is_op_supported(info)
            if not answer:
                refusals.append(("over-memory", f"{b.name}: {why}") if why else self._why_not(b, info, answer))
                continue
            oname, oop = origin.source if origin is n else (origin.name, origin.op)  # lowered before placement
            u = Unit(n, oname, oop, i, forced=forced is not None)
            if forced is not None:
                key = next(k for k in (n.name, origin.name, origin.op, n.op) if k in self.force)
                u.reason, u.detail = "forced", f"force={{{key!r}: {b.name!r}}}"
            elif refusals:
                u.reason, u.detail = refusals[0]
                if u.reason == "kept-whole-elsewhere":
                    u.detail = f"{b.name} keeps {n.op} whole; {refusals[0][1]} would lower it"
            return u, refusals
        return None, refusals

    def _place_unit(self, n: Node, origin: Node, forced: int | None) -> Unit:
        """Place a primitive or extended-op node on the first backend that supports it."""
        u, refusals = self._choose(n, origin, forced, whole=False)
        if u is not None:
            return u
        dts = ", ".join(v.dtype.name for v in n.inputs if v is not None) or "-"
        raise UnsupportedOpError(
            f"node '{n.name}' ({n.op} with dtypes {dts}" + (f", lowered from '{origin.name}' ({origin.op})"
                                                           if origin is not n else "")
            + ") runs on none of the backends" + (" it was forced onto" if forced is not None else "") + ": "
            + "; ".join(d for _, d in refusals) + "; add a backend that supports it (e.g. 'interpreter')")

    def _why_not(self, b: Backend, info: NodeInfo, answer) -> tuple[str, str]:
        """(reason, detail) of backend ``b`` refusing ``info``: a dtype refusal when it runs the op with another
        dtype, an op refusal otherwise; the detail carries the backend's own reason when it gave one."""
        key = (id(b), info.op, info.in_dtypes, info.out_dtypes)
        if key not in self._refusals:
            main = (info.in_dtypes or info.out_dtypes or ("",))[0]
            kind = "op-refused"
            for d in PROBE_DTYPES:
                if d == main:
                    continue
                probe = NodeInfo(info.op, tuple(d if x == main else x for x in info.in_dtypes),
                                 tuple(d if x == main else x for x in info.out_dtypes), info.attrs, info.name,
                                 info.in_shapes, info.out_shapes)
                try:
                    ok = b.is_op_supported(probe)
                except Exception:  # noqa: BLE001  (a probe with a dtype the vendor never expected: a refusal)
                    ok = False
                if ok:
                    kind = "dtype-refused"
                    break
            self._refusals[key] = kind
        kind = self._refusals[key]
        why = refusal_reason(answer)
        if not why:
            why = f"no {info.op} with {', '.join(info.in_dtypes) or 'no inputs'}" if kind == "dtype-refused" \
                else f"does not support {info.op}"
        return kind, f"{b.name}: {why}"

    # -- partitions ---------------------------------------------------------------------------------------
    def form_partitions(self) -> list[Partition]:
        """Partitions in a topological order of the partition graph (module docstring). A node that reads only
        constants (a broadcast of a constant) waits for its first reader and joins its partition (on another
        backend: the latest partition of its own before the reader's), not the first partition of its backend."""
        part_of: dict[int, int] = {}
        parts: list[Partition] = []
        by_backend: dict[int, list[int]] = {}

        def slot(backend: int, lo: int) -> int:
            idxs = by_backend.setdefault(backend, [])
            k = bisect_left(idxs, lo)
            if k == len(idxs):
                idxs.append(len(parts))
                parts.append(Partition(backend, []))
            return idxs[k]

        def put(u: Unit, idx: int):
            parts[idx].units.append(u)
            part_of[id(u.node)] = idx

        waiting: dict[int, Unit] = {}
        front: dict[int, Partition] = {}
        for u in self.units:
            ins = [v for v in u.node.inputs if v is not None and not v.is_const]
            if not ins:
                waiting[id(u.node)] = u
                continue
            sources = list({id(v.producer): waiting.pop(id(v.producer)) for v in ins
                            if v.producer is not None and id(v.producer) in waiting}.values())
            lo = 0
            for v in ins:
                q = part_of.get(id(v.producer)) if v.producer is not None else None
                if q is not None:
                    lo = max(lo, q if parts[q].backend == u.backend else q + 1)
            mine = by_backend.get(u.backend, [])
            k = bisect_left(mine, lo)
            target = mine[k] if k < len(mine) else len(parts)  # where u goes, unless a source moves it later
            for s in sources:
                if s.backend == u.backend:
                    continue
                theirs = by_backend.get(s.backend, [])
                j = bisect_left(theirs, target) - 1  # the latest partition of s's backend before u's
                if j >= 0:
                    put(s, theirs[j])
                else:  # none yet: a partition ahead of all others (it reads nothing, so it may run first)
                    front.setdefault(s.backend, Partition(s.backend, [])).units.append(s)
                    part_of[id(s.node)] = -1
            idx = slot(u.backend, lo)
            for s in sources:
                if s.backend == u.backend:
                    put(s, idx)
            put(u, idx)
        for s in waiting.values():  # read by graph outputs only
            put(s, slot(s.backend, 0))
        parts[:0] = front.values()
        return self._merge(parts)

    def _merge(self, parts: list[Partition]) -> list[Partition]:
        """Merge each partition into the next one of its backend unless another partition lies on a path between
        them (then their union would be on a cycle); return the partitions in a topological order. Ancestor and
        descendant sets are bit sets over partition indices, updated at each merge."""
        self._connect(parts)
        k = len(parts)
        deps = [{self._home[id(v)] for v in p.inputs if id(v) in self._home} for p in parts]
        anc, desc = [0] * k, [0] * k
        for i in range(k):
            for d in deps[i]:
                anc[i] |= anc[d] | (1 << d)
        for i in reversed(range(k)):
            for d in deps[i]:
                desc[d] |= desc[i] | (1 << i)
        alive = [True] * k
        last: dict[int, int] = {}
        for i in range(k):
            j = last.get(parts[i].backend)
            last[parts[i].backend] = i
            if j is None or desc[j] & anc[i]:
                continue
            both = ~((1 << i) | (1 << j))
            m_anc, m_desc = (anc[i] | anc[j]) & both, (desc[i] | desc[j]) & both
            for x in _bits(m_desc):
                anc[x] = (anc[x] & ~(1 << j)) | m_anc | (1 << i)
            for y in _bits(m_anc):
                desc[y] = (desc[y] & ~(1 << j)) | m_desc | (1 << i)
            anc[i], desc[i] = m_anc, m_desc
            parts[i].units = sorted(parts[j].units + parts[i].units, key=lambda u: self._order[id(u)])
            alive[j] = False
        kept = [p for p, a in zip(parts, alive) if a]
        self._connect(kept)
        return self._toposort(kept)

    def _toposort(self, parts: list[Partition]) -> list[Partition]:
        """The partitions in a topological order of their graph (ties kept in their current order)."""
        deps = [{self._home[id(v)] for v in p.inputs if id(v) in self._home} for p in parts]
        users: list[list[int]] = [[] for _ in parts]
        for i, ds in enumerate(deps):
            for d in ds:
                users[d].append(i)
        left = [len(ds) for ds in deps]
        ready = [i for i in range(len(parts)) if not left[i]]
        heapq.heapify(ready)
        order = []
        while ready:
            i = heapq.heappop(ready)
            order.append(parts[i])
            for u in users[i]:
                left[u] -= 1
                if not left[u]:
                    heapq.heappush(ready, u)
        if len(order) != len(parts):
            raise GlowError("internal error: the partitions form a cycle")
        self._connect(order)
        return order

    def _connect(self, parts: list[Partition]):
        """Fill each partition's inputs (values it reads from outside) and outputs (values read outside it)."""
        home = {id(v): i for i, p in enumerate(parts) for u in p.units for v in u.node.outputs}
        leaving: set[int] = set()
        for i, p in enumerate(parts):
            p.inputs, seen = [], set()
            for u in p.units:
                for v in u.node.inputs:
                    if v is None or v.is_const or id(v) in seen:
                        continue
                    if home.get(id(v)) != i:
                        seen.add(id(v))
                        p.inputs.append(v)
                        leaving.add(id(v))
        leaving.update(id(v) for nm, v in zip(self.fn.output_names, self.fn.outputs) if nm not in self.fn.state)
        for p in parts:
            p.outputs = [v for u in p.units for v in u.node.outputs if id(v) in leaving]
            p.state = []
        self._home = home
        placeholders = {v.name: v for v in self.fn.inputs}
        for nm, final in zip(self.fn.output_names, self.fn.outputs):
            if nm not in self.fn.state:
                continue
            ph = placeholders[nm]
            readers = {i for i, p in enumerate(parts) if any(v is ph for v in p.inputs)}
            owner = home.get(id(final), min(readers, default=None))
            if owner is None:
                continue
            if readers - {owner}:
                raise GlowError(f"state '{nm}' is read in partition(s) {sorted(readers - {owner})} but written in "
                                f"partition {owner}: a state lives on one backend (place its readers with its "
                                f"writer: compile option force=)")
            parts[owner].state.append((nm, ph, final))

    def flops(self, p: Partition) -> int:
        return sum(self._flops[id(u.node)] for u in p.units)

    def return_islands(self) -> bool:
        """Move islands whose transfers cost more than they save back to the surrounding backend; True if any."""
        parts, moved = self.partitions, False
        readers: dict[int, set[int]] = {}
        for i, p in enumerate(parts):
            for v in p.inputs:
                if id(v) in self._home:
                    readers.setdefault(self._home[id(v)], set()).add(i)
        for i, p in enumerate(parts):
            around = {self._home[id(v)] for v in p.inputs if id(v) in self._home} | readers.get(i, set())
            hosts = {parts[j].backend for j in around}
            if len(hosts) != 1 or p.backend in hosts or any(u.forced for u in p.units):
                continue
            h = hosts.pop()
            host = self.backends[h]
            if not all(self._runs_whole_on(host, u) for u in p.units):
                continue
            dev, hc = self.backends[p.backend].cost_model(), host.cost_model()
            flops = self.flops(p)
            moved_bytes = sum(v.type.nbytes for v in p.inputs + p.outputs)
            here = dev.compute_seconds(flops) + dev.transfer_seconds(moved_bytes, len(p.inputs) + len(p.outputs))
            there = hc.compute_seconds(flops)
            if there < here:
                detail = (f"between {host.name} partitions, moving its values to {self.names[p.backend]} and back "
                          f"costs more than computing it on {host.name} (cost_model)")
                note = (f"{len(p.units)} node(s), {flops / 1e6:.3f} MFLOP: on {self.names[p.backend]} "
                        f"{here * 1e6:.1f} us with {moved_bytes} bytes moved, on {host.name} {there * 1e6:.1f} us")
                for u in p.units:
                    u.backend, u.reason, u.detail, u.note = h, "island", detail, note
                moved = True
        return moved

    def _runs_whole_on(self, b: Backend, u: Unit) -> bool:
        n = u.node
        if (n.name, b.name) in self.exclude:
            return False
        if not is_primitive(n.op) and not get_op(n.op).is_extended and b.should_lower(n):
            return False
        return bool(b.is_op_supported(NodeInfo.of(n)))

    # -- memory -------------------------------------------------------------------------------------------
    def activation_peak(self, units: list[Unit]) -> int:
        """Estimated activation bytes of a partition made of ``units``: the peak of its live intermediate values
        (a value read outside it is a placeholder in the mutable region; a reshape is a view of its input)."""
        inside = {id(u.node) for u in units}
        root: dict[int, int] = {}  # reshape output -> the value it views
        size: dict[int, int] = {}
        last: dict[int, int] = {}
        start: dict[int, int] = {}
        for i, u in enumerate(units):
            for v in u.node.inputs:
                r = None if v is None else root.get(id(v), id(v))
                if r in size:
                    last[r] = i
            for v in u.node.outputs:
                if id(v) in self._graph_outputs or any(id(c) not in inside for c in self._consumers.get(id(v), ())):
                    continue
                if u.node.op == "reshape" and root.get(id(u.node.inputs[0]), id(u.node.inputs[0])) in size:
                    root[id(v)] = root.get(id(u.node.inputs[0]), id(u.node.inputs[0]))
                    continue
                size[id(v)] = align_up(v.type.nbytes, ALIGNMENT)
                start[id(v)] = last[id(v)] = i
        born: dict[int, int] = {}
        dies: dict[int, int] = {}
        for vid, nbytes in size.items():
            born[start[vid]] = born.get(start[vid], 0) + nbytes
            dies[last[vid]] = dies.get(last[vid], 0) + nbytes
        peak = live = 0
        for i in range(len(units)):
            live += born.get(i, 0)
            peak = max(peak, live)
            live -= dies.get(i, 0)
        return peak

    def split_for_memory(self):
        """Halve every partition whose estimated activation peak exceeds its backend's capacity."""
        out: list[Partition] = []
        todo = list(self.partitions)
        while todo:
            p = todo.pop(0)
            cap = self.capacity(self.backends[p.backend])
            need = self.activation_peak(p.units) if cap is not None and len(p.units) > 1 else 0
            if cap is not None and need > cap:
                todo[:0] = self._halves(p, f"over device memory: about {need} bytes of activations, "
                                           f"{self.names[p.backend]} has {cap}")
                continue
            out.append(p)
        self.partitions = out
        self._connect(out)

    def _halves(self, p: Partition, why: str) -> list[Partition]:
        mid = len(p.units) // 2
        return [Partition(p.backend, p.units[:mid], split=why), Partition(p.backend, p.units[mid:], split=why)]

    def over_memory(self, p: Partition, message: str):
        """The memory plan of ``p`` did not fit: halve it, or (a single node) exclude that node from the backend
        (raises SplitNeeded: placement must run again)."""
        if len(p.units) == 1:
            u = p.units[0]
            raise SplitNeeded(u, self.names[p.backend], f"node '{u.node.name}' does not fit in "
                                                        f"{self.names[p.backend]}'s memory: {message}")
        i = self.partitions.index(p)
        self.partitions[i:i + 1] = self._halves(p, f"over device memory: {message}")
        self._connect(self.partitions)

    # -- results ------------------------------------------------------------------------------------------
    def report(self, model_name: str = "") -> PlacementReport:
        """The placement as data (``PlacementReport``), printable."""
        index = {id(u.node): i for i, u in enumerate(u for p in self.partitions for u in p.units)}
        nodes, infos, edges = [], [], []
        inputs: dict[str, list[int]] = {}
        for pi, p in enumerate(self.partitions):
            reads = sorted({self._home[id(v)] for v in p.inputs if id(v) in self._home})
            if any(id(v) not in self._home for v in p.inputs):
                reads = ["input"] + reads
            infos.append(PartitionInfo(pi, self.names[p.backend], len(p.units), self.flops(p),
                                       sum(v.type.nbytes for v in p.inputs), sum(v.type.nbytes for v in p.outputs),
                                       reads, p.split))
            for u in p.units:
                nodes.append(NodePlacement(u.node.name, u.node.op, u.origin, u.origin_op, self.names[u.backend], pi,
                                           u.reason, u.detail, self._flops[id(u.node)], u.note))
                for v in u.node.inputs:
                    if v is None or v.is_const:
                        continue
                    if v.producer is not None and id(v.producer) in index:
                        edges.append((index[id(v.producer)], index[id(u.node)], v.type.nbytes))
                    elif v.kind == "placeholder":
                        inputs.setdefault(v.name, []).append(index[id(u.node)])
        outputs = {nm: index.get(id(v.producer)) for nm, v in zip(self.fn.output_names, self.fn.outputs)
                   if v.producer is not None}
        return PlacementReport(model_name or self.fn.name, self.names, infos, nodes, edges, inputs, outputs)


def node_flops(node: Node) -> int:
    """FLOPs of a node of the placement graph (``glow_core.flops`` conventions): a primitive by its family's
    rule, a high-level node kept whole by its lowering (on a scratch function), and 0 for what has no rule (an
    extended op such as TopK): unknown work is not guessed, so the cost model never moves it for its FLOPs."""
    if is_primitive(node.op):
        return primitive_flops(node) or 0
    d = get_op(node.op)
    if d is None or d.is_extended:
        return 0
    scratch = Function("flops")
    ins = [v if (v is None or v.is_const) else scratch.add_input(v.name, v.type) for v in node.inputs]
    lower_node(scratch, Node(node.op, ins, node.attrs, [], node.name, node.opset), fold=True,
               n_outputs=len(node.outputs))
    return sum(node_flops(n) for n in scratch.nodes)


def _bits(mask: int):
    """The indices of the set bits of ``mask``."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


class PartitionedFunction(CompiledFunction):
    """Partitions run one after another in topological order; values cross between them by name.

    ``steps``: (compiled function, [(placeholder name, value name)]) per partition; ``outputs``: graph output
    name -> a value name (computed, or a graph input) or a constant array; ``tracks``: each partition's trace
    track (its device)."""

    def __init__(self, steps, outputs, tracks=None):
        self.steps = steps
        self.outputs = outputs
        self.tracks = tracks or [f"p{i}" for i in range(len(steps))]

    def execute(self, inputs):
        env = dict(inputs)
        for compiled, feeds in self.steps:
            env.update(compiled.execute({ph: env[src] for ph, src in feeds}))
        return gather_outputs(self.outputs, env, inputs)

    def execute_timed(self, inputs):
        """Every partition's instruction timings (one partition untimed: None), each on its partition's track
        (a device's own track, an entry's 4th element, becomes "<partition track>: <device track>"), with starts
        from this run's start."""
        env, timings = dict(inputs), []
        t0 = time.perf_counter()
        for (compiled, feeds), track in zip(self.steps, self.tracks):
            start = time.perf_counter() - t0
            timed = compiled.execute_timed({ph: env[src] for ph, src in feeds})
            if timed is None:
                return None
            outs, part = timed
            env.update(outs)
            timings += [(ins, start + s, d, f"{track}: {rest[0]}" if rest else track) for ins, s, d, *rest in part]
        return gather_outputs(self.outputs, env, inputs), timings


def gather_outputs(outputs: dict, env: dict, inputs: dict) -> dict:
    """The graph outputs from the values computed (``env``): constants and graph inputs are copied, and so is a
    value returned under a second name, so that no two outputs (or an output and an input) share memory."""
    out, given = {}, set()
    for name, src in outputs.items():
        a = src if isinstance(src, np.ndarray) else env[src]
        out[name] = a.copy() if isinstance(src, np.ndarray) or src in inputs or id(a) in given else a
        given.add(id(a))
    return out


def single_report(fn: Function, backend: str, model_name: str = "") -> PlacementReport:
    """The placement report of a function compiled for one backend: one partition holding every node."""
    index = {id(n): i for i, n in enumerate(fn.nodes)}
    nodes = [NodePlacement(n.name, n.op, n.name, n.op, backend, 0, "supported", "", node_flops(n)) for n in fn.nodes]
    edges = [(index[id(v.producer)], index[id(n)], v.type.nbytes) for n in fn.nodes for v in n.inputs
             if v is not None and v.producer is not None and id(v.producer) in index]
    inputs: dict[str, list[int]] = {}
    for n in fn.nodes:
        for v in n.inputs:
            if v is not None and v.kind == "placeholder":
                inputs.setdefault(v.name, []).append(index[id(n)])
    outputs = {nm: index.get(id(v.producer)) for nm, v in zip(fn.output_names, fn.outputs) if v.producer is not None}
    info = PartitionInfo(0, backend, len(nodes), sum(n.flops for n in nodes), sum(v.type.nbytes for v in fn.inputs),
                         sum(v.type.nbytes for v in fn.outputs), ["input"] if fn.inputs else [])
    return PlacementReport(model_name or fn.name, [backend], [info], nodes, edges, inputs, outputs)


def output_sources(plan: Partitioning) -> dict:
    """Graph output name -> the value name it is read from, or its constant array (the state is no output)."""
    return {nm: (np.asarray(v.const) if v.is_const else v.name) for nm, v in zip(plan.fn.output_names, plan.fn.outputs)
            if nm not in plan.fn.state}


def feeds_of(p: Partition) -> list[tuple[str, str]]:
    """(placeholder name, value name) pairs of a partition: placeholders are named after the values they carry
    (its state placeholders are no feeds: the state stays in its backend's memory)."""
    held = {id(ph) for _, ph, _ in p.state}
    return [(v.name, v.name) for v in p.inputs if id(v) not in held]


__all__ = ["Partitioning", "Partition", "PartitionedFunction", "SplitNeeded", "REASONS", "output_sources",
           "feeds_of", "single_report", "gather_outputs"]
