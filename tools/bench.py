"""``glowc bench``: latency (median, p10, p90 over a time budget), throughput, GFLOP/s and a per-op-kind
profile of one compiled model, optionally side by side with onnxruntime in the same process, on the same
inputs, at the same thread count.

The per-op-kind table comes from ``CompiledFunction.execute_timed`` (per-instruction times); a backend whose
hook returns None gets the table of FLOPs by op kind instead, and the report says why. FLOPs come from
``glow_core.flops``.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from glow_core.api import CompiledModel
from glow_core.api import compile as glow_compile
from glow_core.errors import GlowError
from glow_core.flops import instr_flops
from glow_core.ir import PSEUDO
from glow_tools.progress import Progress


def random_inputs(cm: CompiledModel, seed: int = 0) -> dict[str, np.ndarray]:
    """One array per model input, of its dtype and static shape: standard normal floats, integers in [0, 10)
    (valid indices for any embedding of 10 or more rows), bools from those integers."""
    rng = np.random.default_rng(seed)
    out = {}
    for nm, _, dims in cm.specs:
        shape = cm.input_shapes.get(nm, dims)
        if any(not isinstance(d, int) for d in shape):
            raise GlowError(f"input '{nm}' has symbolic shape {shape}; pass it with --input {nm}=FILE.npy")
        dt = cm._dtypes[nm]
        a = rng.standard_normal(shape) if dt.is_float else rng.integers(0, 10, shape)
        out[nm] = a.astype(dt.np)
    return out


@dataclass
class Timing:
    """Seconds per run of one runtime, measured back to back after a warm-up."""

    label: str
    samples: list[float]

    def pct(self, q: float) -> float:
        return float(np.percentile(self.samples, q))

    @property
    def median(self) -> float:
        return self.pct(50)

    @property
    def throughput(self) -> float:
        """Runs per second over all timed runs."""
        return len(self.samples) / sum(self.samples)


def time_runs(fns: dict, budget: float, rounds: int = 5, min_runs: int = 5) -> dict[str, Timing]:
    """Time each callable of ``fns`` (label -> fn) for ``budget`` seconds, after one warm-up call each. With
    several, they take turns in ``rounds`` slices of ``budget / rounds`` seconds, so a change of machine load
    during the measurement hits all of them alike (the ratio of medians stays fair on a shared machine)."""
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {label: [] for label in fns}
    rounds = rounds if len(fns) > 1 else 1
    total = budget * len(fns)
    with Progress(f"timing {', '.join(fns)}", total=total, unit="s") as p:
        start = time.perf_counter()
        for r in range(rounds):
            for label, fn in fns.items():
                slice_end = time.perf_counter() + budget / rounds
                runs = samples[label]
                while time.perf_counter() < slice_end or (r == rounds - 1 and len(runs) < min_runs):
                    t = time.perf_counter()
                    fn()
                    runs.append(time.perf_counter() - t)
                    p.update(time.perf_counter() - start, note=f"{label}: {len(runs)} runs")
    return {label: Timing(label, s) for label, s in samples.items()}


@dataclass
class OpKind:
    """One row of the per-op-kind table: instructions of one op, their FLOPs and time per run."""

    op: str
    count: int = 0
    flops: int | None = 0  # per run; None when some instruction of this kind has no FLOP rule
    seconds: float | None = None  # median over timed runs of the kind's summed time; None when not timed


def op_kinds(irf) -> dict[str, OpKind]:
    """Instructions grouped by op, with their FLOPs per run."""
    kinds: dict[str, OpKind] = {}
    for ins in irf.code:
        k = kinds.setdefault(ins.op, OpKind(ins.op))
        k.count += 1
        f = instr_flops(ins)
        k.flops = None if f is None or k.flops is None else k.flops + f
    return kinds


def _profile(compiled, feed: dict, budget: float, label: str, key, min_runs: int = 3):
    """Per-run sums of instruction times by ``key(instr, index)`` from ``compiled.execute_timed`` runs for
    ``budget`` seconds, and the runs' wall times; None when the backend does not time instructions."""
    first = compiled.execute_timed(feed)
    if first is None:
        return None
    per_run: list[dict] = []
    walls: list[float] = []
    with Progress(f"profiling {label}", total=budget, unit="s") as p:
        start = time.perf_counter()
        while len(per_run) < min_runs or time.perf_counter() - start < budget:
            t = time.perf_counter()
            _, timings = compiled.execute_timed(feed)
            walls.append(time.perf_counter() - t)
            acc: dict = {}
            for i, (ins, _, sec) in enumerate(timings):
                k = key(ins, i)
                acc[k] = acc.get(k, 0.0) + sec
            per_run.append(acc)
            p.update(time.perf_counter() - start, note=f"{len(per_run)} runs")
    return per_run, walls


def profile_op_kinds(compiled, feed: dict, kinds: dict[str, OpKind], budget: float, label: str,
                     min_runs: int = 3) -> float | None:
    """Fill ``OpKind.seconds`` from ``compiled.execute_timed`` runs for ``budget`` seconds; returns the median
    wall time of those runs, or None (nothing filled) when the backend does not time instructions."""
    prof = _profile(compiled, feed, budget, label, lambda ins, i: ins.op, min_runs)
    if prof is None:
        return None
    per_run, walls = prof
    for op, k in kinds.items():
        k.seconds = float(np.median([r.get(op, 0.0) for r in per_run]))
    return float(np.median(walls))


@dataclass
class Layer:
    """One row of the per-layer table: an ONNX node (or an instruction no node name prefixes) with the
    instructions lowered from it, their FLOPs and median time per run, the nodes it computes (``covers``: its
    own, and those fused into it: a conv writing its relu's output), and onnxruntime's time of those nodes (None
    when onnxruntime has no kernel of them: fused into another, or not profiled)."""

    name: str
    ops: list[str] = field(default_factory=list)
    flops: int | None = 0
    seconds: float = 0.0
    ort_seconds: float | None = None
    covers: set[str] = field(default_factory=set)


def _node_of(name: str, names: dict[str, str]) -> str:
    """The ONNX node ``name`` comes from: ``names[cut]`` for the longest ``cut`` that is ``name`` or its prefix
    before an underscore (the importer names instructions and values ``<node>_<primitive>``), else ``name``."""
    cut = name
    while cut:
        if cut in names:
            return names[cut]
        if "_" not in cut:
            break
        cut = cut.rsplit("_", 1)[0]
    return name


def profile_layers(cm: CompiledModel, feed: dict, budget: float, label: str = "glow") -> tuple[list[Layer], float]:
    """Per-layer times of ``cm``'s last compilation (``execute_timed``, median per layer over runs for
    ``budget`` seconds) and the median wall time of those runs. Raises GlowError when the backend does not
    time instructions."""
    res = cm.last
    nodes = {n.name: n.name for n in cm.model.graph.node if n.name}
    checked = cm.check_inputs(feed)
    prof = _profile(res.compiled, {nm: a for nm, a in checked.items() if nm in res.ir.inputs}, budget, label,
                    lambda ins, i: _node_of(ins.name, nodes))
    if prof is None:
        raise GlowError(f"backend '{cm.backend.name}' does not time single instructions: no per-layer table")
    per_run, walls = prof
    code = [ins for ins in res.ir.code if ins.op not in PSEUDO]
    own = {_node_of(ins.name, nodes) for ins in code}
    layers: dict[str, Layer] = {}
    for ins in code:
        key = _node_of(ins.name, nodes)
        lay = layers.setdefault(key, Layer(key, covers={key}))
        if ins.op not in lay.ops:
            lay.ops.append(ins.op)
        lay.covers.update(n for n in (_node_of(b.root.name, nodes) for b in ins.outs) if n not in own)
        f = instr_flops(ins)
        lay.flops = None if f is None or lay.flops is None else lay.flops + f
    for name, lay in layers.items():
        lay.seconds = float(np.median([r.get(name, 0.0) for r in per_run]))
    return list(layers.values()), float(np.median(walls))


def ort_node_times(model, feed: dict, threads: int, runs: int = 20, stat=np.median) -> dict[str, float]:
    """onnxruntime's kernel time per node name over ``runs`` profiled runs, the first left out (its own profiler;
    nodes its graph optimizer fused into another appear under that node's name only): ``stat`` of them, the
    median unless told."""
    so = _ort_options(threads)
    import onnxruntime as ort
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as d:
        so.profile_file_prefix = os.path.join(d, "ort")
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        ort_feed = {i.name: feed[i.name] for i in sess.get_inputs()}
        for _ in range(runs):
            sess.run(None, ort_feed)
        per = {nm: [t for t, _ in v] for nm, v in ort_kernel_times(sess.end_profiling()).items()}
    return {nm: float(stat(v[1:] if len(v) > 1 else v)) for nm, v in per.items()}


def ort_kernel_times(profile_path: str) -> dict[str, list[tuple[float, str]]]:
    """Per node name, in run order, (seconds, op type) of every kernel event of an onnxruntime profile file (the
    ``*_kernel_time`` events of ``SessionOptions.enable_profiling``)."""
    with open(profile_path) as f:
        events = json.load(f)
    per: dict[str, list[tuple[float, str]]] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            per.setdefault(e["name"][:-len("_kernel_time")], []).append((e["dur"] * 1e-6,
                                                                           e.get("args", {}).get("op_name", "?")))
    return per


def ort_layer_times(model, node_times: dict[str, float], layers: list[Layer]) -> dict[str, float]:
    """onnxruntime's node times (``ort_node_times``) by glow's layers: its optimizer's names ("conv6_nchwc",
    "relu_nchwc" after an output, "silu6/QuickGeluFusion/") go back to the model's node (``_node_of`` on the
    part before the first "/", by node or output name), then to the layer computing that node; nodes of no layer
    keep their name, and so do the nodes onnxruntime adds (layout reorders)."""
    names = {o: n.name for n in model.graph.node if n.name for o in n.output}
    names.update({n.name: n.name for n in model.graph.node if n.name})
    layer_of = {c: x.name for x in layers for c in x.covers}
    out: dict[str, float] = {}
    for nm, sec in node_times.items():
        node = _node_of(nm.split("/")[0], names)
        key = layer_of.get(node, node)
        out[key] = out.get(key, 0.0) + sec
    return out


def format_layers(title: str, layers: list[Layer], wall: float, ort: dict[str, float] | None = None,
                  top: int = 30) -> str:
    """The per-layer table: the ``top`` layers by the larger of the two times (time, GFLOP/s, share of the
    summed layer times; onnxruntime's time (``ort_layer_times``), GFLOP/s and the ratio beside them; "-" where
    one runtime has no separate kernel for the layer: fused into another layer, or a node of its own such as
    onnxruntime's layout reorders), then the rest as one row."""
    total = sum(x.seconds for x in layers) or 1.0
    ort = dict(ort or {}) if ort is not None else None
    rows_in = list(layers)
    if ort is not None:
        for x in rows_in:
            x.ort_seconds = ort.pop(x.name, None)
        rows_in += [Layer(nm, ["(onnxruntime only)"], None, 0.0, sec) for nm, sec in ort.items()]
    rows_in.sort(key=lambda x: -max(x.seconds, x.ort_seconds or 0.0))
    head = ("layer", "glow ops", "time", "share", "GFLOP/s") + (("ort time", "ort GFLOP/s", "glow/ort")
                                                              if ort is not None else ())
    rows = [head]

    def row(name, ops, sec, flops, osec):
        r = (name[:40], ops[:30], _ms(sec) if sec else "-", f"{100 * sec / total:.1f}%", _gflops(flops, sec))
        if ort is not None:
            r += (("-", "-", "-") if not osec else
                  (_ms(osec), _gflops(flops, osec), f"{sec / osec:.2f}" if sec else "-"))
        return r
    for x in rows_in[:top]:
        rows.append(row(x.name, "+".join(x.ops), x.seconds, x.flops, x.ort_seconds))
    rest = rows_in[top:]
    if rest:
        fl = [x.flops for x in rest]
        rows.append(row(f"({len(rest)} more layers)", "", sum(x.seconds for x in rest),
                        None if any(f is None for f in fl) else sum(fl),
                        sum(x.ort_seconds or 0.0 for x in rest) if ort is not None else None))
    ort_total = sum(x.ort_seconds or 0.0 for x in rows_in)
    lines = [f"{title}: glow's layers sum to {_ms(total)} of a {_ms(wall)} timed run"
             + (f", onnxruntime's profiled nodes to {_ms(ort_total)}" if ort is not None else "")]
    return "\n".join(lines + _table(rows, "llrrrrrr"))


@dataclass
class BenchReport:
    """Everything ``glowc bench`` prints."""

    model: str
    backend: str
    threads: int
    budget: float
    inputs: dict[str, np.ndarray]
    compile_seconds: float
    instructions: int
    flops: int | None
    glow: Timing
    kinds: dict[str, OpKind]
    profiled_wall: float | None
    ort: Timing | None = None
    max_diff: float | None = None
    notes: list[str] = field(default_factory=list)


def _ort_options(threads: int):
    try:
        import onnxruntime as ort
    except ImportError:
        raise GlowError("--compare onnxruntime needs onnxruntime: pip install onnxruntime") from None
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return so


def ort_session(model, threads: int):
    """An onnxruntime CPU session of ``model`` (a ModelProto) with ``threads`` intra-op threads."""
    import onnxruntime as ort
    so = _ort_options(threads)
    try:
        return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001  (onnxruntime raises its own exception types)
        raise GlowError(f"onnxruntime could not load the model: {' '.join(str(e).split())[:300]}") from None


def bench(model, backend: str = "interpreter", threads: int | None = None, budget: float = 3.0,
          inputs: dict | None = None, compare: str | None = None, seed: int = 0, label: str = "") -> BenchReport:
    """Compile ``model`` for ``backend`` with ``num_threads=threads`` (default: every core) and measure it."""
    if compare not in (None, "onnxruntime"):
        raise GlowError(f"--compare {compare!r} is not known; accepted: onnxruntime")
    threads = threads or os.cpu_count() or 1
    model_label = label or (model if isinstance(model, str) else "model")
    with Progress(f"compiling {os.path.basename(model_label)} for {backend}", tick=True):
        t = time.perf_counter()
        cm = glow_compile(model, backend, num_threads=threads)
        feed = inputs if inputs is not None else random_inputs(cm, seed)
        cm.run(feed)  # compiles here when the shapes became known only from the inputs
        compile_seconds = time.perf_counter() - t
    res = cm.last
    kinds = op_kinds(res.ir)
    known = [k.flops for k in kinds.values()]
    total = None if any(f is None for f in known) else sum(known)
    label = f"glow {cm.backend.name}"
    fns = {label: lambda: cm.run(feed)}
    checked = cm.check_inputs(feed)
    wall = profile_op_kinds(res.compiled, {nm: a for nm, a in checked.items() if nm in res.ir.inputs}, kinds,
                            budget / 2, label)
    max_diff = None
    if compare == "onnxruntime":
        sess = ort_session(cm.model, threads)
        ort_feed = {i.name: feed[i.name] for i in sess.get_inputs()}
        ours = cm.run(feed)
        theirs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, ort_feed)))
        diffs = [float(np.max(np.abs(ours[nm].astype(np.float64) - np.asarray(theirs[nm], np.float64))))
                 for nm in ours if nm in theirs and ours[nm].size]
        max_diff = max(diffs) if diffs else 0.0
        fns["onnxruntime"] = lambda: sess.run(None, ort_feed)
    timings = time_runs(fns, budget)
    report = BenchReport(model_label, cm.backend.name, threads, budget, feed, compile_seconds, len(res.ir.code),
                         total, timings[label], kinds, wall, timings.get("onnxruntime"), max_diff)
    if wall is None:
        report.notes.append(f"backend '{cm.backend.name}' does not time single instructions "
                            f"(CompiledFunction.execute_timed returns None): the table shows FLOPs by op kind")
    return report


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f} ms" if s < 0.01 else f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.3f} s"


def _gflops(flops, seconds) -> str:
    if not flops or not seconds:
        return "-"
    return f"{flops / seconds / 1e9:.2f}"


def _unit(total) -> tuple[str, float]:
    """The FLOP unit of the per-op-kind table: GFLOP, or MFLOP for models under one GFLOP per run."""
    return ("GFLOP", 1e9) if total is not None and total >= 1e9 else ("MFLOP", 1e6)


def format_report(r: BenchReport) -> str:
    """The text ``glowc bench`` prints."""
    shapes = ", ".join(f"{nm} {a.dtype}{list(a.shape)}" for nm, a in r.inputs.items())
    unit, scale = _unit(r.flops)
    gf = "FLOPs unknown (some ops have no FLOP rule)" if r.flops is None else f"{r.flops / scale:.4g} {unit} per run"
    lines = [f"model {r.model}: inputs {shapes}; {r.instructions} instructions, {gf}",
             f"backend {r.backend}, {r.threads} thread{'s' if r.threads != 1 else ''}, "
             f"{r.budget:g} s per runtime, compile {r.compile_seconds:.2f} s", ""]
    rows = [("runtime", "runs", "median", "p10", "p90", "runs/s", "GFLOP/s")]
    for t in [r.glow] + ([r.ort] if r.ort else []):
        rows.append((t.label, str(len(t.samples)), _ms(t.median), _ms(t.pct(10)), _ms(t.pct(90)),
                     f"{t.throughput:.1f}", _gflops(r.flops, t.median)))
    lines += _table(rows, "lrrrrrr")
    if r.ort:
        ratio = r.glow.median / r.ort.median
        lines.append(f"ratio glow/onnxruntime (median latency, timed in alternating rounds): {ratio:.2f} "
                     f"({'glow' if ratio < 1 else 'onnxruntime'} faster); outputs: max |glow - onnxruntime| = "
                     f"{r.max_diff:.3g}")
    lines.append("")
    kinds = list(r.kinds.values())
    if r.profiled_wall is not None:
        total = sum(k.seconds for k in kinds) or 1.0
        kinds.sort(key=lambda k: -k.seconds)
        lines.append(f"per op kind ({r.glow.label}, per-instruction timing: instructions sum to "
                     f"{_ms(total)} of a {_ms(r.profiled_wall)} timed run):")
        rows = [("op", "count", "time", "share", unit, "GFLOP/s")]
        for k in kinds:
            rows.append((k.op, str(k.count), _ms(k.seconds), f"{100 * k.seconds / total:.1f}%",
                         _amount(k.flops, scale), _gflops(k.flops, k.seconds)))
    else:
        known = sum(k.flops or 0 for k in kinds) or 1
        kinds.sort(key=lambda k: (-(k.flops or 0), k.op))
        lines.append(f"per op kind ({r.glow.label}): FLOPs only")
        rows = [("op", "count", unit, "share of FLOPs")]
        for k in kinds:
            rows.append((k.op, str(k.count), _amount(k.flops, scale),
                         "-" if k.flops is None else f"{100 * k.flops / known:.1f}%"))
    lines += _table(rows, "lrrrrr")
    lines += [f"note: {n}" for n in r.notes]
    return "\n".join(lines)


def _amount(flops, scale) -> str:
    return "-" if flops is None else "0" if flops == 0 else f"{flops / scale:.4g}"


def _table(rows, align) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(row, widths, align)]
        out.append("  ".join(cells).rstrip())
    return out
