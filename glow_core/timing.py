"""Wall time of the stages of a compilation, recorded in its statistics.

``with stage(stats, "lowering"): ...`` adds the block's seconds to
``stats["times"]["lowering"]`` (an ordered dict: stages in the order they
first ran; a stage run twice adds up) and appends ``(name, start, seconds)``
to ``stats["spans"]`` (``start`` on the ``time.perf_counter`` clock), from
which a tracer can draw the compilation. Two clock reads per stage.
"""
from __future__ import annotations

import time
from contextlib import contextmanager


@contextmanager
def stage(stats: dict, name: str):
    """Time the block as stage ``name`` of the compilation whose statistics are ``stats``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        seconds = time.perf_counter() - start
        times = stats.setdefault("times", {})
        times[name] = times.get(name, 0.0) + seconds
        stats.setdefault("spans", []).append((name, start, seconds))
