"""``glowc bench``: latency (median, p10, p90 over a time budget), throughput, GFLOP/s and a per-op-kind
profile of one compiled model, optionally side by side with onnxruntime in the same process, on the same
inputs, at the same thread count.

The per-op-kind table comes from ``CompiledFunction.execute_timed`` (per-instruction times); a backend whose
hook returns None gets the table of FLOPs by op kind instead, and the report says why. FLOPs come from
``glow_core.flops``.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from .api import CompiledModel
from .api import compile as glow_compile
from .errors import GlowError
from .flops import instr_flops
from .progress import Progress


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


def profile_op_kinds(compiled, feed: dict, kinds: dict[str, OpKind], budget: float, label: str,
                     min_runs: int = 3) -> float | None:
    """Fill ``OpKind.seconds`` from ``compiled.execute_timed`` runs for ``budget`` seconds; returns the median
    wall time of those runs, or None (nothing filled) when the backend does not time instructions."""
    first = compiled.execute_timed(feed)
    if first is None:
        return None
    per_run: list[dict[str, float]] = []
    walls: list[float] = []
    with Progress(f"profiling {label}", total=budget, unit="s") as p:
        start = time.perf_counter()
        while len(per_run) < min_runs or time.perf_counter() - start < budget:
            t = time.perf_counter()
            _, timings = compiled.execute_timed(feed)
            walls.append(time.perf_counter() - t)
            acc: dict[str, float] = {}
            for ins, _, sec in timings:
                acc[ins.op] = acc.get(ins.op, 0.0) + sec
            per_run.append(acc)
            p.update(time.perf_counter() - start, note=f"{len(per_run)} runs")
    for op, k in kinds.items():
        k.seconds = float(np.median([r.get(op, 0.0) for r in per_run]))
    return float(np.median(walls))


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


def ort_session(model, threads: int):
    """An onnxruntime CPU session of ``model`` (a ModelProto) with ``threads`` intra-op threads."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise GlowError("--compare onnxruntime needs onnxruntime: pip install onnxruntime") from None
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
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
