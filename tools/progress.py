"""Progress for long work (compiling a big model, benchmarking, profiling, fuzzing): one status line on a
terminal, nothing at all in a pipe or a file.

    with Progress("timing cpu", total=3.0, unit="s") as p:      # a bar: done / total
        while ...:
            p.update(elapsed, note=f"{runs} runs")
    with Progress("compiling model.onnx for cpu", tick=True):    # no steps to count: elapsed time ticks
        compile(...)

The line is redrawn at most every ``interval`` seconds and erased when the work ends, so what the command
prints afterwards starts on a clean line. ``GLOW_PROGRESS=0`` turns it off on a terminal too.
"""
from __future__ import annotations

import os
import sys
import threading
import time

BAR = 24


def wanted(stream) -> bool:
    """Whether progress goes to ``stream``: a terminal (isatty), not TERM=dumb, and not GLOW_PROGRESS=0."""
    if os.environ.get("GLOW_PROGRESS", "") == "0" or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):  # a closed stream
        return False


class Progress:
    """One redrawn status line: ``label [####....] 40% 1.2/3.0 s note`` (a bar when ``total`` is known), else
    ``label note 1.2 s``. ``tick=True`` redraws from a background thread, for work that reports no steps."""

    def __init__(self, label: str, total: float | None = None, unit: str = "", stream=None,
                 enabled: bool | None = None, interval: float = 0.1, tick: bool = False):
        self.label = label
        self.total = total
        self.unit = unit
        self.stream = sys.stderr if stream is None else stream
        self.enabled = wanted(self.stream) if enabled is None else enabled
        self.interval = interval
        self.done = 0.0
        self.note = ""
        self.start = time.perf_counter()
        self._last = 0.0
        self._width = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        if self.enabled and tick:
            self._thread = threading.Thread(target=self._tick, name="glow-progress", daemon=True)
            self._thread.start()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc):
        self.close()

    def update(self, done: float | None = None, note: str | None = None, advance: float = 0.0):
        """Set (or advance) the amount done and the note; redraws when due."""
        if done is not None:
            self.done = done
        self.done += advance
        if note is not None:
            self.note = note
        if self.enabled and time.perf_counter() - self._last >= self.interval:
            self._draw()

    def line(self) -> str:
        """The status line as it would be drawn now."""
        elapsed = time.perf_counter() - self.start
        parts = [self.label]
        if self.total:
            frac = min(max(self.done / self.total, 0.0), 1.0)
            fill = int(frac * BAR)
            parts.append(f"[{'#' * fill}{'.' * (BAR - fill)}] {frac * 100:3.0f}%")
        if self.note:
            parts.append(self.note)
        parts.append(f"{elapsed:.1f} s")
        return " ".join(parts)

    def _draw(self):
        with self._lock:
            if self._stop.is_set():
                return
            text = self.line()
            cols = _columns(self.stream)
            if len(text) > cols - 1:
                text = text[:cols - 4] + "..."
            pad = max(self._width - len(text), 0)
            self.stream.write("\r" + text + " " * pad)
            self.stream.flush()
            self._width = len(text)
            self._last = time.perf_counter()

    def _tick(self):
        while not self._stop.wait(self.interval):
            self._draw()

    def close(self):
        """Stop ticking and erase the line (nothing was drawn when disabled)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        self._stop.set()
        with self._lock:
            if self.enabled and self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
                self._width = 0


def _columns(stream) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 80
