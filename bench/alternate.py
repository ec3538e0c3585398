"""The measurement loop the bench scripts share: implementations timed in alternating rounds (the order reversed
every other round, so that a change of load on a shared machine hits every implementation alike), and the timed
runs of one call within a round."""
from __future__ import annotations

import time


def alternating_rounds(impls, rounds: int, measure) -> dict:
    """``{impl: [measure(impl) for each round]}``; each round measures every impl, in reverse order on odd rounds."""
    impls = list(impls)
    out = {k: [] for k in impls}
    for r in range(rounds):
        for k in (impls if r % 2 == 0 else impls[::-1]):
            out[k].append(measure(k))
    return out


def timed_runs(fn, budget: float, lo: int = 3, hi: int | None = None, warmup: int = 3) -> list[float]:
    """Per-call seconds of ``fn``: ``warmup`` untimed calls, then calls until ``budget`` seconds have passed (at
    least ``lo`` calls, at most ``hi``)."""
    for _ in range(warmup):
        fn()
    ts, start = [], time.perf_counter()
    while (hi is None or len(ts) < hi) and (len(ts) < lo or time.perf_counter() - start < budget):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return ts
