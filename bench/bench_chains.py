"""Elementwise chains on the CPU backend (backends/cpu/fusion/chains.py): one loop per chain against one kernel per
instruction (``elementwise_chains=False``) and onnxruntime.

    python bench/bench_chains.py [--models vit_tiny,bert_encoder] [--threads 1,2] [--rounds 5] [--n 1048576]

1. Kernels: per model of bench/bench_cpu.py, the instructions, the kernels that run, and the chains (with their
   sizes), with and without chains.
2. A 4-op chain at ``--n`` elements, float32 (t = x * y; t = t + z; t = t - x; out = t * y: three inputs, one
   output): glow with chains, glow without, onnxruntime; in-process, alternating rounds, medians.
3. Model latency: glow with chains, without, onnxruntime; alternating fresh processes per round (each reports
   the median of its timed runs), medians over rounds and the ratios.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.alternate import alternating_rounds, timed_runs  # noqa: E402
from bench.bench_cpu import build, glow_compile, ort_session, spawn  # noqa: E402

#: The kernel that computes nothing (fusion.STUB: every instruction a fusion absorbed).
NOTHING = ("glow_k_absorbed",)
#: name -> (bench_cpu's worker runtime, compile options)
RUNTIMES = {"chains": ("glow", {"elementwise_chains": True}), "unfused": ("glow", {"elementwise_chains": False}),
            "ort": ("ort", {})}


def kernels(names):
    print("kernels per run (1 thread): instructions, kernels that run, chains (members: count)")
    for name in names:
        model = build(name)
        row = []
        for chains in (False, True):
            calls = glow_compile(model, 1, elementwise_chains=chains).last.compiled.program.calls
            run = [c for c in calls if c.code.name not in NOTHING]
            sizes = collections.Counter(int(c.code.choice.split()[3]) for c in run
                                        if c.code.choice.startswith("elementwise chain"))
            row.append((len(calls), len(run), sizes))
        (n, before, _), (_, after, sizes) = row
        print(f"  {name:15s} {n:5d} instructions: {before:4d} -> {after:4d} kernels; chains "
              + (", ".join(f"{k}: {v}" for k, v in sorted(sizes.items())) or "none"))


def chain_model(n):
    vi = [helper.make_tensor_value_info(k, TensorProto.FLOAT, [n]) for k in "xyz"]
    nodes = [helper.make_node("Mul", ["x", "y"], ["t0"]), helper.make_node("Add", ["t0", "z"], ["t1"]),
             helper.make_node("Sub", ["t1", "x"], ["t2"]), helper.make_node("Mul", ["t2", "y"], ["out"])]
    g = helper.make_graph(nodes, "chain4", vi, [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def micro(n, threads, rounds):
    model = chain_model(n)
    rng = np.random.default_rng(0)
    feed = {k: rng.standard_normal(n).astype(np.float32) for k in "xyz"}
    for th in threads:
        fns = {rt: glow_compile(model, th, **RUNTIMES[rt][1]).run for rt in ("chains", "unfused")}
        sess = ort_session(model, th)
        fns["ort"] = lambda f: sess.run(None, f)  # noqa: E731, B023
        per = alternating_rounds(tuple(RUNTIMES), rounds,
                                 lambda rt: statistics.median(timed_runs(lambda: fns[rt](feed), 0.5, 10, 2000)))  # noqa: B023
        med = {k: statistics.median(v) for k, v in per.items()}
        print(f"  4-op chain, {n} float32, {th} thread(s): chains {med['chains'] * 1e3:.3f} ms, unfused "
              f"{med['unfused'] * 1e3:.3f} ms, ort {med['ort'] * 1e3:.3f} ms; unfused/chains "
              f"{med['unfused'] / med['chains']:.2f}, chains/ort {med['chains'] / med['ort']:.2f}", flush=True)


def latency(names, threads, rounds):
    print(f"  {'model':15s} {'threads':>7s} {'chains ms':>10s} {'unfused ms':>10s} {'ort ms':>10s} "
          f"{'unfused/chains':>14s} {'chains/ort':>10s} {'unfused/ort':>11s}")
    for name in names:
        for th in threads:
            per = alternating_rounds(tuple(RUNTIMES), rounds, lambda rt: spawn(  # noqa: B023
                ["latency", RUNTIMES[rt][0], name, str(th), json.dumps(RUNTIMES[rt][1])], th)["median"])  # noqa: B023
            c, u, o = (statistics.median(per[k]) for k in RUNTIMES)
            print(f"  {name:15s} {th:7d} {c * 1e3:10.3f} {u * 1e3:10.3f} {o * 1e3:10.3f} {u / c:14.3f} "
                  f"{c / o:10.3f} {u / o:11.3f}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="vit_tiny,bert_encoder,efficientnet")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=1 << 20, help="elements of the 4-op chain microbenchmark")
    ap.add_argument("--skip", default="", help="comma-separated phases to skip: kernels, micro, latency")
    a = ap.parse_args(argv)
    names = [m for m in a.models.split(",") if m]
    threads = [int(t) for t in a.threads.split(",") if t]
    skip = set(a.skip.split(","))
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}", flush=True)
    if "kernels" not in skip:
        kernels(names)
    if "micro" not in skip:
        micro(a.n, threads, a.rounds)
    if "latency" not in skip:
        latency(names, threads, a.rounds)
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
