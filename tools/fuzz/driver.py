"""The differential fuzzing loop behind ``glowc fuzz``: generate, run on the reference and on the backend
(each in a child process), compare, shrink what fails, write it to the output folder, and replay it.

Graph ``i`` of a run with seed ``S`` is drawn from ``numpy.random.default_rng([S, i])``: a run is reproducible
from its seed, and one graph is reproducible alone (``--graph i``). A graph the reference rejects (onnx's
checker, the interpreter or onnxruntime raising an error) is discarded and counted; a graph the backend
declines (UnsupportedOpError) is counted as unsupported. Everything else the backend does differently is a
failure: a mismatch (the conformance checker), a crash of its process (signal), a hang (time limit), a
GlowError the reference did not raise, or any other exception. Except, against onnxruntime: onnxruntime's own
crash or hang (``ORACLE_CRASH``: recorded under ``oracle-crashes/``, a report for onnxruntime); a GlowError or
mismatch on a model the specification rejects (``INVALID``, by ``compare.SPEC_RULES``: onnxruntime is lenient
beyond the spec); a mismatch where the backend is within tolerance of the interpreter's float64 evaluation of the
model (onnxruntime is the one further off), or of the interval its rounding spread allows
(``compare.rounding_spread``: an ill-conditioned graph, where no float32 answer can be closer), or, in a model with
float16 values, of onnx.reference's evaluation in the declared types (``compare.declared_type_outputs``:
onnxruntime skips the rounding between nodes, so a float16 overflow inside the graph vanishes); outputs of ops whose
answer the specification leaves open (``compare.ORT_DIFFERENCES``, ``ORT_OPERAND_DIFFERENCES``). Each skipped or
arbitrated comparison is counted with its reason in ``Summary.notes``; ``Summary.conv_paths`` counts the graphs
reaching each conv path.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx

from glow_tools.progress import Progress
from . import runner
from .compare import (ORT_DIFFERENCES, ORT_OPERAND_DIFFERENCES, conditions, depends_on, holds, low_float, mismatch,
                      operand_differences)
from .generator import drawable_ops, generate
from .shrink import shrink, with_all_outputs

MISMATCH = "mismatch"
#: Verdicts that are not the kit's findings: the oracle (onnxruntime) crashed or hung; the model breaks the
#: specification (compare.SPEC_RULES) and the oracle ran it anyway.
ORACLE_CRASH, INVALID = "oracle-crash", "oracle-accepts-invalid"


@dataclass
class Finding:
    id: str
    signature: str
    message: str
    nodes_before: int
    nodes_after: int
    ops: list
    shrink_tests: int = 0
    duplicates: int = 0
    files: list = field(default_factory=list)


@dataclass
class Summary:
    backend: str
    against: str
    seed: int
    seconds: float = 0.0
    graphs: int = 0
    compared: int = 0
    discarded: Counter = field(default_factory=Counter)
    unsupported: int = 0
    findings: list = field(default_factory=list)
    node_rejects: Counter = field(default_factory=Counter)
    ops_drawn: Counter = field(default_factory=Counter)
    conv_paths: Counter = field(default_factory=Counter)  # graphs compared that reached each conv path
    notes: Counter = field(default_factory=Counter)  # comparisons skipped or arbitrated, with the reason
    oracle_crashes: list = field(default_factory=list)  # files of the models onnxruntime crashed or hung on

    @property
    def per_minute(self) -> float:
        return 60.0 * self.graphs / self.seconds if self.seconds else 0.0

    def as_dict(self):
        return {"backend": self.backend, "against": self.against, "seed": self.seed, "seconds": round(self.seconds, 1),
                "graphs": self.graphs, "graphs_per_minute": round(self.per_minute, 1), "compared": self.compared,
                "discarded": dict(self.discarded), "unsupported": self.unsupported,
                "node_rejects": dict(self.node_rejects), "ops_drawn": dict(self.ops_drawn),
                "conv_paths": dict(sorted(self.conv_paths.items())), "notes": dict(self.notes),
                "oracle_crashes": self.oracle_crashes,
                "findings": [f.__dict__ for f in self.findings]}


class Session:
    """The two child processes (reference and backend under test) and the comparison of one model."""

    def __init__(self, backend, against="interpreter", timeout=60.0, memory_limit=4 << 30, options=None,
                 env=None):
        self.backend, self.against = backend, against
        self.options = dict(options or {})
        self.ref = runner.Worker(timeout, memory_limit)
        self.notes: list[str] = []
        # AddressSanitizer reserves terabytes of address space: no RLIMIT_AS for a sanitized child
        self.test = runner.Worker(timeout, 0 if (env or {}).get("ASAN_OPTIONS") else memory_limit, env)

    def close(self):
        self.ref.stop()
        self.test.stop()

    def reference(self, model: onnx.ModelProto, feeds) -> runner.Outcome:
        """The reference's outputs, after onnx.checker (full check) accepted the model."""
        return self.ref.run(self.against, model.SerializeToString(), feeds, {"check": True})

    def check(self, model, feeds, want=None):
        """(verdict, reference outcome, backend outcome): verdict None (agrees), 'discard', 'unsupported',
        ORACLE_CRASH, INVALID, or the failure signature. ``self.notes`` says which comparisons were skipped or
        arbitrated, and why."""
        self.notes = []
        want = want or self.reference(model, feeds)
        if want.kind != runner.OK:
            if want.kind in (runner.GLOW_ERROR, runner.UNSUPPORTED):
                return "discard", want, None
            # onnxruntime's own crash or hang is the oracle's, not the kit's (the interpreter's is the kit's)
            return (ORACLE_CRASH if self.against == "onnxruntime" else f"reference-{want.signature}"), want, None
        got = self.test.run(self.backend, model.SerializeToString(), feeds, self.options)
        if got.kind == runner.UNSUPPORTED:
            return "unsupported", want, got
        if got.kind == runner.GLOW_ERROR:
            return self._unless_invalid(model, got.signature), want, got
        if got.kind != runner.OK:  # a crash, hang or other exception is a finding even on an invalid model
            return got.signature, want, got
        expected = dict(want.outputs)
        if self.against == "onnxruntime":
            held = conditions(list(feeds.values()) + [onnx.numpy_helper.to_array(t) for t in model.graph.initializer])
            ops = {op for op, (cond, _) in ORT_DIFFERENCES.items() if holds(cond, held)}
            skipped = depends_on(model, ops) & set(expected)
            for nm in skipped:
                expected.pop(nm)
            if skipped:
                self.notes.append("not compared (onnxruntime difference on the inputs): " + "/".join(sorted(
                    {n.op_type for n in model.graph.node if n.op_type in ops})))
        msg = mismatch(model, got.outputs, expected)
        if msg and self.against == "onnxruntime" and any(
                n.op_type in ORT_DIFFERENCES or n.op_type in ORT_OPERAND_DIFFERENCES for n in model.graph.node):
            # the conditions again on each such node's own operands (a NaN computed inside the graph)
            held = operand_differences(model, self.values(model, feeds))
            for nm in depends_on(model, (), held) & set(expected):
                expected.pop(nm)
            if held:
                self.notes.append("not compared (onnxruntime difference or undefined on the operands): " + "/".join(
                    sorted({n.op_type for n in model.graph.node if n.output and n.output[0] in held})))
            msg = mismatch(model, got.outputs, expected)
        if msg and self.against == "onnxruntime":
            agrees = self._float64_agrees(model, feeds, got, expected)
            if agrees:
                self.notes.append(f"onnxruntime beyond tolerance, the backend within it of the float64 evaluation"
                                  f"{'' if agrees == 'exact' else ' or its rounding spread (ill-conditioned)'}: "
                                  + "/".join(sorted({n.op_type for n in model.graph.node})))
                msg = None
        if msg and self.against == "onnxruntime" and low_float(model) and self._declared_types_agree(model, feeds, got,
                                                                                                    expected):
            self.notes.append("onnxruntime beyond tolerance, the backend within it of onnx.reference in the declared "
                              "float16 types (onnxruntime skips the rounding between nodes): "
                              + "/".join(sorted({n.op_type for n in model.graph.node})))
            msg = None
        if msg:
            got.message = msg
            return self._unless_invalid(model, MISMATCH), want, got
        return None, want, got

    def _declared_types_agree(self, model, feeds, got, expected) -> bool:
        """The second arbiter, for models with float16 or bfloat16 values: onnx.reference's evaluation, every node
        rounded to its declared type (``compare.declared_type_outputs``). True when the backend's outputs are within
        the usual tolerance of it."""
        out = self.ref.call("glow_tools.fuzz.compare:declared_type_outputs", model.SerializeToString(), feeds)
        if out.kind != runner.OK or not set(expected) <= set(out.outputs):
            return False
        with np.errstate(all="ignore"):
            return mismatch(model, got.outputs, {k: out.outputs[k] for k in expected}) is None

    def _unless_invalid(self, model, verdict):
        """INVALID when the specification rejects the model (compare.SPEC_RULES), which the reference ran anyway
        (for a GlowError or a mismatch of the backend: a crash is a finding on any model)."""
        out = self.ref.call("glow_tools.fuzz.compare:spec_violations", model.SerializeToString())
        if out.kind == runner.OK and out.outputs:
            self.notes.append("the oracle accepts a model the specification rejects: " + out.outputs[0][0])
            return INVALID
        return verdict

    def _float64_agrees(self, model, feeds, got, expected) -> str | None:
        """The arbiter of a disagreement with onnxruntime: the interpreter's float64 evaluation of the model (float32
        and float16 tensors widened), rounded to each output's type. "exact" when the backend's outputs are within
        the usual tolerance of it (then onnxruntime is the one further off: its float64 DFT, for one, is
        float32-accurate, and its float16 InstanceNormalization overflows in the variance); "spread" when they are
        within the tolerance of the interval [f - s, f + s] around it, s the element's rounding spread
        (``compare.rounding_spread``: how far rounding errors of the operands' types can move it, large where the
        graph is ill-conditioned); else None. Models without float32 or float16 outputs (or float64 ones, unless
        the interpreter is the backend under test: it would judge itself), or that the interpreter cannot evaluate
        in float64, are not arbitrated."""
        kinds = (np.float32, np.float16) + (() if str(self.backend) == "interpreter" else (np.float64,))
        if not any(np.asarray(v).dtype in kinds for v in got.outputs.values()):
            return None
        out = self.ref.call("glow_tools.fuzz.compare:float64_outputs", model.SerializeToString(), feeds)
        if out.kind != runner.OK or set(out.outputs) != set(got.outputs):
            return None
        exact = {k: np.asarray(v).astype(np.asarray(got.outputs[k]).dtype) for k, v in out.outputs.items()
                 if k in expected}
        with np.errstate(all="ignore"):
            if mismatch(model, got.outputs, exact) is None:
                return "exact"
        sp = self.ref.call("glow_tools.fuzz.compare:rounding_spread", model.SerializeToString(), feeds)
        if sp.kind != runner.OK or not set(exact) <= set(sp.outputs):
            return None
        banded = {}
        with np.errstate(all="ignore"):
            for k, want in exact.items():
                f, s = np.asarray(out.outputs[k], np.float64), np.asarray(sp.outputs[k], np.float64)
                g = np.asarray(got.outputs[k])
                if g.dtype.kind != "f" or g.shape != f.shape:
                    banded[k] = want
                    continue
                near = np.clip(g.astype(np.float64), f - s, f + s)  # the band's point nearest the backend's answer
                banded[k] = np.where(np.isfinite(s) & np.isfinite(f), near, f).astype(g.dtype)
            return "spread" if mismatch(model, got.outputs, banded) is None else None

    def values(self, model, feeds) -> dict:
        """Every value of ``model`` computed by the reference (graph inputs, initializers and node outputs)."""
        out = self.ref.call("glow_tools.fuzz.driver:all_values", self.against, model.SerializeToString(), feeds)
        return dict(out.outputs) if out.kind == runner.OK else {}

    def generate(self, seed, i, ops, max_nodes, dtypes):
        """(model, feeds, node rejects) of graph ``i`` of seed ``seed``, drawn in the child process."""
        out = self.ref.call("glow_tools.fuzz.driver:generate_bytes", seed, i, ops, max_nodes, dtypes)
        if out.kind != runner.OK:
            return None, None, Counter({f"generator-{out.signature}": 1})
        data, feeds, stats = out.outputs
        return (onnx.load_from_string(data) if data else None), feeds, stats


def generate_bytes(seed, i, ops, max_nodes, dtypes):
    """Graph ``i`` of ``seed`` as (model bytes or None, feeds, node reject counts): run in a child process."""
    stats = Counter()
    model, feeds = generate(np.random.default_rng([seed, i]), drawable_ops(ops), max_nodes, dtypes, stats=stats)
    return (model.SerializeToString() if model is not None else None), feeds, stats


def all_values(against, model_bytes, feeds) -> dict:
    """Every value of the model as the reference computes it (run in a child process)."""
    model = onnx.load_from_string(model_bytes)
    out = runner._job("run", against, with_all_outputs(model).SerializeToString(), feeds, {})
    vals = dict(feeds)
    vals.update({t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer})
    vals.update(out.outputs if out.kind == runner.OK else {})
    return vals


def _head(message: str) -> str:
    """What kind of failure a message tells, without its numbers: an exception's first line; for a mismatch,
    whether the worst element involves NaN, an infinity, a wrong shape or only finite values."""
    m = re.search(r"got (\S+), expected (\S+)", message or "")
    if m:
        vals = " ".join(m.groups()).lower()
        return "nan" if "nan" in vals else "inf" if "inf" in vals else "finite"
    if re.search(r"got \S+\[.*\], expected", message or ""):
        return "shape"
    return re.sub(r"[0-9]+", "#", (message or "").strip().split("\n")[0])[:120]


def _ops_key(model):
    return tuple(sorted({n.op_type for n in model.graph.node}))


def write_finding(out_dir, fid, model, feeds, want, got, signature, replay_args) -> list[str]:
    """DIR/<id>.onnx, <id>.inputs.npz, <id>.expected.npz, <id>.got.npz and <id>.txt (message and replay line)."""
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, fid)
    files = [base + ".onnx", base + ".inputs.npz"]
    onnx.save(model, files[0])
    np.savez(files[1], **feeds)
    if want is not None and want.kind == runner.OK:
        files.append(base + ".expected.npz")
        np.savez(files[-1], **want.outputs)
    if got is not None and got.kind == runner.OK:
        files.append(base + ".got.npz")
        np.savez(files[-1], **got.outputs)
    files.append(base + ".txt")
    replay = "glowc fuzz --replay " + shlex.quote(files[0]) + " " + " ".join(shlex.quote(a) for a in replay_args)
    with open(files[-1], "w") as f:
        f.write(f"failure: {signature}\nnodes: {len(model.graph.node)} "
                f"({', '.join(n.op_type for n in model.graph.node)})\nreplay: {replay}\n\n"
                f"{(got.message if got is not None and got.message else want.message) or ''}\n")
    return files


def status(s: Summary) -> str:
    """The progress line's note: graphs tried and their rate, failures found, compared, discarded."""
    return (f"graphs {s.graphs} ({s.per_minute:.0f}/min), failures {len(s.findings)}, compared {s.compared}, "
            f"discarded {sum(s.discarded.values())}, unsupported {s.unsupported}")


def fuzz(backend, against="interpreter", seconds=60.0, seed=0, out_dir="fuzz-out", ops=None, dtypes=None,
         max_nodes=30, timeout=60.0, shrink_seconds=300.0, max_graphs=None, graph=None, options=None, env=None,
         log=print, progress=None, max_findings=None) -> Summary:
    """Run the fuzzing loop for ``seconds`` (or ``max_graphs`` graphs, or the one graph ``graph``, or until
    ``max_findings`` distinct failures). ``env``: environment of the backend's child process only."""
    drawable_ops(ops)  # unknown op names fail here, before any child starts
    summary = Summary(str(backend), against, seed)
    sess = Session(backend, against, timeout, options=options, env=env)
    progress = progress or Progress(f"fuzz {backend}", total=max_graphs or seconds,
                                    unit="graphs" if max_graphs else "s")
    replay_args = ["--backend", str(backend), "--against", against]
    t0 = time.monotonic()
    i = graph if graph is not None else 0
    try:
        while True:
            summary.seconds = time.monotonic() - t0
            if graph is not None and i > graph:
                break
            if graph is None and (summary.seconds >= seconds or (max_graphs and summary.graphs >= max_graphs)
                                  or (max_findings and len(summary.findings) >= max_findings)):
                break
            gid = f"s{seed}-g{i}"
            model, feeds, rejects = sess.generate(seed, i, ops, max_nodes, dtypes)
            i += 1
            summary.node_rejects.update(rejects)
            summary.graphs += 1
            progress.update(summary.graphs if max_graphs else summary.seconds, note=status(summary))
            if model is None:
                summary.discarded["invalid"] += 1
                continue
            summary.ops_drawn.update(n.op_type for n in model.graph.node)
            verdict, want, got = sess.check(model, feeds)
            summary.notes.update(sess.notes)
            if verdict == "discard":
                summary.discarded["reference-rejects"] += 1
                continue
            if verdict == ORACLE_CRASH:  # recorded, not shrunk: a bug report for onnxruntime, not the kit
                summary.discarded[ORACLE_CRASH] += 1
                summary.oracle_crashes.append(write_finding(os.path.join(out_dir, "oracle-crashes"), gid, model,
                                                            feeds, want, got, want.signature, replay_args)[0])
                continue
            if verdict == INVALID:
                summary.discarded[INVALID] += 1
                continue
            if verdict == "unsupported":
                summary.unsupported += 1
                continue
            summary.compared += 1
            if got is not None:
                summary.conv_paths.update(got.reach)
            if verdict is None:
                continue
            dup = next((f for f in summary.findings if f.signature == verdict and f.ops and f.ops[-1] in
                        _ops_key(model) and _head(f.message) == _head((got or want).message)), None)
            if dup is not None:  # very likely the same bug again: counted, not shrunk again
                dup.duplicates += 1
                continue
            log(f"\n{gid}: {verdict} in a graph of {len(model.graph.node)} nodes; shrinking")
            small, sfeeds, tests = shrink(model, feeds, lambda m, f, v=verdict: sess.check(m, f)[0] == v,
                                          sess.values, shrink_seconds)
            first = (want, got)
            again, want, got = sess.check(small, sfeeds)
            if again != verdict:  # the shrunk model does not fail the same way when checked again: keep the graph
                log(f"{gid}: the shrunk model gives {again or 'agreement'} when checked again; the graph is kept")
                small, sfeeds, (want, got) = model, feeds, first
            files = write_finding(out_dir, gid, small, sfeeds, want, got, verdict, replay_args)
            message = ((got.message if got is not None else "") or want.message)[:3000]
            f = Finding(gid, verdict, message, len(model.graph.node),
                        len(small.graph.node), [n.op_type for n in small.graph.node], tests, files=files)
            summary.findings.append(f)
            log(f"{gid}: shrunk to {f.nodes_after} nodes ({', '.join(f.ops)}) in {tests} tests -> {files[0]}")
    finally:
        sess.close()
        progress.close()
    summary.seconds = time.monotonic() - t0
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "summary.json"), "w") as fh:
        json.dump(summary.as_dict(), fh, indent=1, default=str)
    return summary


def replay(path, backend, against="interpreter", timeout=60.0, options=None, env=None, log=print) -> str | None:
    """Run a written finding again: None when the backend now agrees, else the failure signature."""
    model = onnx.load(path)
    inputs = path[:-len(".onnx")] + ".inputs.npz" if path.endswith(".onnx") else path + ".inputs.npz"
    with np.load(inputs) as z:
        feeds = {k: z[k] for k in z.files}
    sess = Session(backend, against, timeout, options=options, env=env)
    try:
        verdict, want, got = sess.check(model, feeds)  # as written (the shrinker keeps a failing unread node)
    finally:
        sess.close()
    if verdict in (None, "unsupported", "discard", ORACLE_CRASH, INVALID):
        log(f"{path}: {verdict or 'agrees with ' + against}" + "".join(f"; {n}" for n in sess.notes))
        return None
    log(f"{path}: {verdict}\n{(got.message if got is not None else want.message) or ''}")
    return verdict
