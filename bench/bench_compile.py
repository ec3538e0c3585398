"""Compile time of every stage of the pipeline, side by side with onnxruntime's session creation.

    python bench/bench_compile.py [--quick] [--models cnn,bert12,chain10000,...] [--backends interpreter,cpu]
                                  [--rounds 3] [--cold-rounds 1] [--cpu-chains]

Every measurement runs in a fresh process that builds the model with ``onnx.helper``
(glow_conformance.example_models), then times ``glow_core.compile`` on its serialized bytes: the seconds of each stage
(``stats["times"]``), the total, and the rest ("other": what a process does once, on its first compile: loading
the op registry and finding the backend). Tables show the median over ``--rounds`` processes (``--cold-rounds``
for cold CPU compiles) next to the median time onnxruntime takes to create an InferenceSession from the same
bytes (1 thread, default graph optimizations), the ratio of the two, and the process CPU seconds of the compile
(less sensitive than wall time to other work on the machine; the C compiler's child processes are not in it).
Backends: ``interpreter``; ``cpu`` cold (GLOW_CACHE_DIR a fresh temporary folder, the C compiler runs) and
cached (the same folder again, in a new process). Then the activations each model's memory plan needs before
and after scheduling, and how the chains' compile time grows.

Models: cnn, linear_sigmoid, resnet, mlp, resnet18, mobilenetv2, bert_encoder (glow_conformance.example_models), bert12
(12 post-LN layers, hidden 384, 6 heads, seq 128, FFN 1536), vit_tiny (patch-16 stem at 224, 12 layers, hidden
192, 3 heads), and chainN: N elementwise nodes (example_models.elementwise_chain; 2500, 5000 and 10000 by
default; the CPU backend compiles chains only with --cpu-chains, as it builds one C kernel per node).
``--quick`` is a smoke run (cnn and a 500-node chain, one round).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.bench_cpu import ORT_IR_VERSION, ort_session  # noqa: E402
from glow_conformance import example_models  # noqa: E402

MODELS = {
    "cnn": example_models.cnn,
    "linear_sigmoid": example_models.linear_sigmoid,
    "resnet": example_models.resnet,
    "mlp": example_models.mlp,
    "resnet18": example_models.resnet18,
    "mobilenetv2": example_models.mobilenetv2,
    "bert_encoder": example_models.bert_encoder,
    "bert12": lambda: example_models.bert_encoder(layers=12, hidden=384, heads=6, ffn=1536),
    "vit_tiny": example_models.vit_tiny,
}
CHAINS = (2500, 5000, 10000)
SHORT = {"import": "import", "graph-passes": "passes", "lowering": "lower", "post-lowering": "post", "verify": "verify",
         "schedule": "sched", "ir-gen": "ir-gen", "ir-passes": "ir-pass", "memory-plan": "plan",
         "backend-compile": "backend"}


def build(name):
    m = example_models.elementwise_chain(int(name[5:])) if name.startswith("chain") else MODELS[name]()
    m.ir_version = min(m.ir_version, ORT_IR_VERSION)  # onnxruntime may not read the newest IR version yet
    return m


# ----------------------------------------------------------------------------------------------- workers
def worker(kind, name):
    data = build(name).SerializeToString()
    if kind == "ort":
        import onnx
        model = onnx.load_from_string(data)
        t, c = time.perf_counter(), time.process_time()
        ort_session(model, 1)
        return {"total": time.perf_counter() - t, "cpu": time.process_time() - c}
    import glow_core
    options = {"num_threads": 1} if kind == "cpu" else {}
    t, c = time.perf_counter(), time.process_time()
    cm = glow_core.compile(data, kind, **options)
    total, cpu = time.perf_counter() - t, time.process_time() - c
    res = cm.last
    return {"total": total, "cpu": cpu, "times": res.stats["times"], "nodes": res.stats["imported_nodes"],
            "activations": res.ir.plan.activations_size, "unscheduled": res.ir.plan.unscheduled_size}


def spawn(kind, name, env_extra=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", **(env_extra or {}))
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", kind, name], env=env,
                       capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"worker {kind} {name} failed (rc {p.returncode}):\n{p.stdout}\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def median_run(runs):
    """Per-stage and total medians over runs."""
    out = {k: statistics.median(r[k] for r in runs) for k in ("total", "cpu")}
    if "times" in runs[0]:
        out["times"] = {k: statistics.median(r["times"].get(k, 0.0) for r in runs) for k in runs[0]["times"]}
        out.update({k: runs[0][k] for k in ("nodes", "activations", "unscheduled")})
    return out


# ------------------------------------------------------------------------------------------------ tables
def table(title, rows, ort):
    stages = list(next(iter(rows.values()))["times"])
    print(f"\n{title}")
    print(f"  {'model':14s} {'nodes':>6s} " + " ".join(f"{SHORT.get(s, s):>7s}" for s in stages)
          + f" {'other':>7s} {'total':>7s} {'ort':>7s} {'/ort':>6s} {'cpu-s':>7s}")
    for name, r in rows.items():
        o = ort.get(name)
        other = r["total"] - sum(r["times"].values())  # first use in the process: op registry, backend lookup
        vs = f"{o['total']:7.3f} {r['total'] / o['total']:6.1f}" if o else ""
        print(f"  {name:14s} {r['nodes']:6d} " + " ".join(f"{r['times'].get(s, 0.0):7.3f}" for s in stages)
              + f" {other:7.3f} {r['total']:7.3f} {vs:14s} {r['cpu']:7.3f}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smoke run: cnn and a 500-node chain, one round")
    ap.add_argument("--models", default=None, help="comma-separated, from " + ", ".join(MODELS) + ", chainN")
    ap.add_argument("--backends", default="interpreter,cpu", help="comma-separated: interpreter, cpu")
    ap.add_argument("--rounds", type=int, default=None, help="processes per measurement (default 3)")
    ap.add_argument("--cold-rounds", type=int, default=1, help="processes per cold CPU compile (default 1)")
    ap.add_argument("--cpu-chains", action="store_true", help="compile the chains for the CPU backend too")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(*a.worker)))
        return 0
    names = a.models.split(",") if a.models else (["cnn", "chain500"] if a.quick else
                                                  list(MODELS) + [f"chain{n}" for n in CHAINS])
    bad = [n for n in names if n not in MODELS and not (n.startswith("chain") and n[5:].isdigit())]
    if bad:
        ap.error(f"unknown models {bad}; choose from {', '.join(MODELS)} or chainN")
    backends = [b for b in a.backends.split(",") if b]
    rounds = a.rounds or (1 if a.quick else 3)
    import onnxruntime
    print(f"compile time, seconds: median of {rounds} fresh processes (cold CPU compiles: {a.cold_rounds}); "
          f"onnxruntime {onnxruntime.__version__} session creation beside it; {os.cpu_count()} cores", flush=True)
    t0 = time.perf_counter()
    ort = {n: median_run([spawn("ort", n) for _ in range(rounds)]) for n in names}
    interp = {}
    if "interpreter" in backends:
        interp = {n: median_run([spawn("interpreter", n) for _ in range(rounds)]) for n in names}
        table("interpreter", interp, ort)
    if "cpu" in backends:
        cpu_names = [n for n in names if not n.startswith("chain") or a.cpu_chains or a.quick]
        cold, cached = {}, {}
        for n in cpu_names:
            runs = []
            for _ in range(a.cold_rounds):
                with tempfile.TemporaryDirectory() as d:
                    runs.append(spawn("cpu", n, {"GLOW_CACHE_DIR": d}))
                    warm = [spawn("cpu", n, {"GLOW_CACHE_DIR": d}) for _ in range(rounds)]
            cold[n], cached[n] = median_run(runs), median_run(warm)
        table("cpu, cold (empty GLOW_CACHE_DIR: the C compiler runs)", cold, ort)
        table("cpu, cached (same GLOW_CACHE_DIR, new process)", cached, ort)
    plans = interp or {}
    if plans:
        print("\nactivations of the memory plan (interpreter), bytes")
        print(f"  {'model':14s} {'imported order':>15s} {'scheduled':>15s} {'change':>8s}")
        for n, r in plans.items():
            before, after = r["unscheduled"], r["activations"]
            print(f"  {n:14s} {before:15d} {after:15d} {(after - before) / max(before, 1):8.1%}")
        chains = sorted((int(n[5:]), r["total"]) for n, r in plans.items() if n.startswith("chain"))
        if len(chains) > 1:
            print("\nchain compile time (interpreter): " + ", ".join(f"{k} nodes {t:.2f} s" for k, t in chains)
                  + "; growth per doubling " + ", ".join(f"x{b[1] / a[1]:.2f}" for a, b in zip(chains, chains[1:])))
    print(f"\nbench time {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
