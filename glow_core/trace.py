"""Chrome traces (the JSON that Perfetto and chrome://tracing open) of compilations and runs.

A ``Trace`` collects complete events (``"ph": "X"``, microseconds from the trace's origin on the
``time.perf_counter`` clock):

* each compilation's stages from its statistics (``stats["spans"]``, ``glow_core.timing``) on a track of the
  process "compile", and the work a backend did outside Python (``stats["backend_spans"]``, from
  ``CompiledFunction.compile_spans``: the CPU backend's C compiler) on a track of its own;
* each run: one event "run" and one event per executed instruction from ``CompiledFunction.execute_timed``,
  with the instruction's op, operand shapes, dtypes, bytes moved and FLOPs in ``args``. Instructions a backend
  timed on a device track of its own (a 4th element of a timing) get a track per device.

``glowc run MODEL --trace FILE.json`` and ``glow_core.compile(model, backend, trace=True)`` (``cm.trace``) make
one; so does the runtime, ``Host(trace=True)`` (``host.trace``): each device a track of its own with its runs
(and their instructions), each request an async span (``"ph": "b"``/``"e"``, overlapping requests each on a row)
with its queue wait and the run of each partition nested in it. A Trace may be filled from several threads.
"""
from __future__ import annotations

import json
import threading
import time

from .flops import instr_flops

#: Category of per-instruction events (tests count them by it).
INSTR = "instr"
#: Category of the runtime's request spans.
REQUEST = "request"


def instr_args(ins) -> dict:
    """What a trace event says about instruction ``ins``: op, name, output and input shapes and dtypes, bytes of
    its operands (read and written) and FLOPs (None where the op has no FLOP rule)."""
    outs, ins_ = ins.outs, ins.ins
    return {"op": ins.op, "name": ins.name,
            "outputs": [f"{b.type.dtype.name}{list(b.type.shape)}" for b in outs],
            "inputs": [f"{b.type.dtype.name}{list(b.type.shape)}" for b in ins_],
            "bytes": sum(b.type.nbytes for b in outs + ins_), "flops": instr_flops(ins)}


class Trace:
    """Events of compilations and runs, written with ``save(path)`` as a Chrome trace."""

    def __init__(self):
        self.origin = time.perf_counter()
        self.events: list[dict] = []
        self.runs = 0
        self._tracks: dict[tuple[str, str], tuple[int, int]] = {}
        self._args: dict[int, dict] = {}
        self._lock = threading.RLock()

    def _track(self, process: str, thread: str) -> tuple[int, int]:
        """(pid, tid) of a named track, with the metadata events that name it in the viewer."""
        key = (process, thread)
        if key not in self._tracks:
            pids = {p: pid for (p, _), (pid, _) in self._tracks.items()}
            pid = pids.get(process, len(pids) + 1)
            tid = sum(1 for (p, _) in self._tracks if p == process) + 1
            self._tracks[key] = (pid, tid)
            if process not in pids:
                self.events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": tid,
                                    "args": {"name": process}})
            self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}})
        return self._tracks[key]

    def complete(self, name: str, start: float, seconds: float, process: str, thread: str, cat: str,
                 args: dict | None = None):
        """Add one complete event; ``start`` on the ``time.perf_counter`` clock, in seconds."""
        with self._lock:
            pid, tid = self._track(process, thread)
            ev = {"name": name, "cat": cat, "ph": "X", "ts": self._us(start), "dur": round(seconds * 1e6, 3),
                  "pid": pid, "tid": tid}
            if args:
                ev["args"] = args
            self.events.append(ev)

    def span(self, name: str, span_id: int, start: float, seconds: float, process: str, cat: str,
             args: dict | None = None):
        """Add one async span (a ``b`` and an ``e`` event): spans of one ``cat`` and ``span_id`` nest, and spans
        that overlap in time need not. ``start`` on the ``time.perf_counter`` clock, in seconds."""
        with self._lock:
            pid, tid = self._track(process, cat)
            ev = {"name": name, "cat": cat, "ph": "b", "id": span_id, "ts": self._us(start), "pid": pid, "tid": tid}
            if args:
                ev["args"] = args
            self.events += [ev, {"name": name, "cat": cat, "ph": "e", "id": span_id,
                                 "ts": self._us(start + seconds), "pid": pid, "tid": tid}]

    def _us(self, t: float) -> float:
        return round((t - self.origin) * 1e6, 3)

    def add_compile(self, stats: dict, label: str):
        """The stages of one compilation (``stats["spans"]``) and the backend's work outside Python
        (``stats["backend_spans"]``, from ``CompiledFunction.compile_spans``), each of those on its own track."""
        for name, start, seconds in stats.get("spans", []):
            self.complete(name, start, seconds, "compile", label, "compile")
        for name, start, seconds in stats.get("backend_spans", []):
            self.complete(name, start, seconds, "compile", f"{label}: {name}", "compile")

    def add_run(self, backend: str, start: float, seconds: float, timings):
        """One run that began at ``start`` (perf_counter) and took ``seconds``, with its per-instruction timings
        (``execute_timed``'s ``(instr, start, seconds[, track])``, starts from the run's start) or None."""
        with self._lock:
            self.runs += 1
            process = f"run on {backend}"
            self.complete(f"run {self.runs}", start, seconds, process, "host", "run",
                          None if timings is not None else {"note": f"backend '{backend}' does not time instructions"})
            self.add_instrs(start, timings or (), process, "host")

    def add_instrs(self, start: float, timings, process: str, track: str):
        """One event per timed instruction of a run that began at ``start`` (``execute_timed``'s timings), on
        ``track`` of ``process`` or on the device track a timing names (its 4th element)."""
        with self._lock:
            for t in timings:
                ins, rel, secs = t[:3]
                args = self._args.get(id(ins))
                if args is None:
                    args = self._args[id(ins)] = instr_args(ins)
                self.complete(ins.op, start + rel, secs, process, t[3] if len(t) > 3 else track, INSTR, args)

    def to_json(self) -> dict:
        with self._lock:
            return {"traceEvents": list(self.events), "displayTimeUnit": "ms"}

    def save(self, path: str):
        """Write the trace as Chrome trace JSON."""
        with open(path, "w") as f:
            json.dump(self.to_json(), f)
