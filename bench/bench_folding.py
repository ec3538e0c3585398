"""Transposes folded into batched matmuls (backends/cpu/fusion/transposes.py) against the unfolded program
(``transpose_folding=False``), both compiled in one process and timed in alternating rounds (bench/alternate.py):
latency medians, their ratio, and the transpose layers' share of the per-layer profile (glow_tools.bench).

    python bench/bench_folding.py --models vit_tiny,bert_encoder,bert12 --threads 1,2 --rounds 5
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import glow_core  # noqa: E402
from glow_tools.bench import profile_layers  # noqa: E402

from alternate import alternating_rounds, timed_runs  # noqa: E402
from bench_cpu import MODELS, build, feed_of  # noqa: E402


def transposes(cm, feed) -> tuple[int, float, float]:
    """(transpose layers running a kernel, their summed median seconds, the batched matmul layers' (those behind
    a transpose: the attention products)) in ``cm``'s per-layer profile."""
    calls = cm.last.compiled.program.calls
    kept = sum(c.instr.op == "transpose" and not c.code.choice.startswith("folded") for c in calls)
    layers, _ = profile_layers(cm, feed, 1.0)
    batched = {c.instr.name for c in calls if c.instr.op == "matmul" and len(c.instr.ins[0].type.shape) > 2}
    return (kept, sum(lay.seconds for lay in layers if lay.ops == ["transpose"]),
            sum(lay.seconds for lay in layers if lay.ops == ["matmul"] and any(n.startswith(lay.name)
                                                                               for n in batched)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="vit_tiny,bert_encoder,bert12")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.5, help="seconds of timed runs per round and program")
    a = ap.parse_args(argv)
    print(f"{'model':14s} {'threads':>7s} {'folded ms':>10s} {'unfolded ms':>12s} {'ratio':>6s}  "
          f"transposes kept (time): folded / unfolded; batched matmul layers: folded / unfolded")
    for name in a.models.split(","):
        model = build(name)
        feed = feed_of(model)
        for nt in (int(t) for t in a.threads.split(",")):
            cms = {f: glow_core.compile(model, "cpu", num_threads=nt, transpose_folding=f) for f in (True, False)}
            outs = {f: cm.run(feed) for f, cm in cms.items()}
            assert all(np.array_equal(outs[True][k], outs[False][k]) for k in outs[True]), "folding changed a result"
            times = alternating_rounds(cms, a.rounds,
                                       lambda f: float(np.median(timed_runs(lambda: cms[f].run(feed), a.budget))))
            med = {f: float(np.median(v)) * 1e3 for f, v in times.items()}
            (kf, tf, mf), (ku, tu, mu) = transposes(cms[True], feed), transposes(cms[False], feed)
            print(f"{name:14s} {nt:7d} {med[True]:10.3f} {med[False]:12.3f} {med[True] / med[False]:6.3f}  "
                  f"{kf} ({tf * 1e3:.3f} ms) / {ku} ({tu * 1e3:.3f} ms); batched matmuls {mf * 1e3:.3f} / "
                  f"{mu * 1e3:.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
