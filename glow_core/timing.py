"""Wall time of the stages of a compilation, recorded in its statistics.

``with stage(stats, "lowering"): ...`` adds the block's seconds to
``stats["times"]["lowering"]`` (an ordered dict: stages in the order they
first ran; a stage run twice adds up) and appends ``(name, start, seconds)``
to ``stats["spans"]`` (``start`` on the ``time.perf_counter`` clock), from
which a tracer can draw the compilation. Two clock reads per stage.
``carve`` moves work that ran inside a stage (a backend's C compiler inside
"backend-compile") into a stage of its own, so the times still add up. An
exception leaving a stage carries the innermost stage's name as its
``compile_stage`` attribute (where a compilation failed).
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
    except BaseException as e:
        if getattr(e, "compile_stage", None) is None:  # the innermost stage an error left: where it happened
            try:
                e.compile_stage = name
            except AttributeError:
                pass
        raise
    finally:
        seconds = time.perf_counter() - start
        times = stats.setdefault("times", {})
        times[name] = times.get(name, 0.0) + seconds
        stats.setdefault("spans", []).append((name, start, seconds))


def carve(stats: dict, within: str, name: str, seconds: float):
    """Count ``seconds`` of stage ``within`` as stage ``name`` instead (its span is the caller's to record)."""
    times = stats.setdefault("times", {})
    times[within] = times.get(within, 0.0) - seconds
    times[name] = times.get(name, 0.0) + seconds
