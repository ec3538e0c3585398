"""Benchmark: the Glow Kit interpreter against onnx.reference.ReferenceEvaluator (and onnxruntime if installed).

    python bench/bench_interpreter.py [--reps N] [--models resnet,cnn,resnet_b4] [--threads 1]

For each model: compile once, check that the three agree, then time ``--reps`` runs of each (after a warm-up)
and print the median latency and the ratios reference/interpreter and onnxruntime/interpreter. The target is an
interpreter at least 10x faster than the reference evaluator on convolutional models.

BLAS runs single-threaded unless OPENBLAS_NUM_THREADS / OMP_NUM_THREADS are set (both numpy runtimes share it;
a multi-threaded BLAS on a busy machine makes timings meaningless), and onnxruntime gets ``--threads``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy is imported

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import glow_core  # noqa: E402
from glow_conformance import example_models as models  # noqa: E402

MODELS = {
    # name: (builder, input shape)
    "resnet": (lambda: models.resnet(seed=0, batch=1, size=32), (1, 3, 32, 32)),
    "resnet_b4": (lambda: models.resnet(seed=0, batch=4, size=32), (4, 3, 32, 32)),
    "resnet_nobn": (lambda: models.resnet(seed=0, batch=1, size=32, batchnorm=False), (1, 3, 32, 32)),
    "cnn": (lambda: models.cnn(seed=0, batch=1), (1, 3, 28, 28)),
    "cnn_b8": (lambda: models.cnn(seed=0, batch=8), (8, 3, 28, 28)),
}


def median_times(runners: dict, reps: int, slow: str, slow_reps: int) -> dict:
    """Median seconds of each runner, interleaved (one warm-up each) so that a change in machine load hits all
    of them alike; the ``slow`` one runs only ``slow_reps`` times, spread over the ``reps`` rounds."""
    times = {name: [] for name in runners}
    for fn in runners.values():
        fn()
    every = max(1, reps // max(slow_reps, 1))
    for i in range(reps):
        for name, fn in runners.items():
            if name == slow and (i % every or len(times[name]) >= slow_reps):
                continue
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in times.items()}


def profile_interpreter(cm, feeds, reps):
    """Milliseconds per run spent in each primitive's kernel (the rest is the interpreter's own overhead)."""
    fn = cm.last.compiled
    spent, calls = {}, {}
    original = fn.steps

    def timed(op, run):
        def wrapper(*args):
            t = time.perf_counter()
            try:
                return run(*args)
            finally:
                spent[op] = spent.get(op, 0.0) + time.perf_counter() - t
                calls[op] = calls.get(op, 0) + 1
        return wrapper

    fn.steps = [(ins, timed(ins.op, run), args, outs) for ins, run, args, outs in original]
    try:
        t = time.perf_counter()
        for _ in range(reps):
            cm.run(feeds)
        total = time.perf_counter() - t
    finally:
        fn.steps = original
    parts = ", ".join(f"{k} x{calls[k] // reps} {v / reps * 1e3:.2f}" for k, v in
                      sorted(spent.items(), key=lambda kv: -kv[1]))
    return f"{total / reps * 1e3:.2f} ms per run: {parts}"


def bench_model(name, reps, ref_reps, threads, profile=False):
    from onnx.reference import ReferenceEvaluator
    build, shape = MODELS[name]
    model = build()
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    feeds = {"input": x}
    t = time.perf_counter()
    cm = glow_core.compile(model, backend="interpreter")
    compile_s = time.perf_counter() - t
    ref = ReferenceEvaluator(model)
    got = cm.run(feeds)["output"]
    want = ref.run(None, feeds)[0]
    err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-12))
    row = {"model": name, "compile_s": compile_s, "rel_err": err}
    runners = {"interp_s": lambda: cm.run(feeds), "ref_s": lambda: ref.run(None, feeds)}
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    if ort is not None:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        m = type(model)()
        m.CopyFrom(model)
        m.ir_version = min(m.ir_version, 10)  # onnxruntime may not know the newest IR version onnx writes
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        row["ort_err"] = float(np.abs(got - sess.run(None, feeds)[0]).max() / max(np.abs(want).max(), 1e-12))
        runners["ort_s"] = lambda: sess.run(None, feeds)
    row.update(median_times(runners, reps, "ref_s", ref_reps))
    if profile:
        row["profile"] = profile_interpreter(cm, feeds, reps)
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=20, help="timed runs of the interpreter and onnxruntime")
    p.add_argument("--ref-reps", type=int, default=5, help="timed runs of the (slow) reference evaluator")
    p.add_argument("--models", default="resnet,resnet_b4,cnn,cnn_b8", help=f"comma list of {', '.join(MODELS)}")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    p.add_argument("--profile", action="store_true", help="also print the interpreter's time per primitive")
    args = p.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {unknown}; choose from {', '.join(MODELS)}")
    rows = [bench_model(n, args.reps, args.ref_reps, args.threads, args.profile) for n in names]
    has_ort = any("ort_s" in r for r in rows)
    head = f"{'model':<12} {'compile':>8} {'interp':>9} {'reference':>10} {'ref/interp':>10}"
    head += f" {'onnxruntime':>11} {'ort/interp':>10}" if has_ort else ""
    print(f"median of {args.reps} runs (reference: {args.ref_reps}); times in ms; numpy {np.__version__}, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, onnxruntime threads {args.threads}")
    print(head)
    for r in rows:
        line = (f"{r['model']:<12} {r['compile_s'] * 1e3:8.1f} {r['interp_s'] * 1e3:9.2f} {r['ref_s'] * 1e3:10.2f} "
                f"{r['ref_s'] / r['interp_s']:9.1f}x")
        if "ort_s" in r:
            line += f" {r['ort_s'] * 1e3:11.2f} {r['ort_s'] / r['interp_s']:9.2f}x"
        print(line)
    for r in rows:
        if "profile" in r:
            print(f"profile {r['model']}: {r['profile']}")
    worst = max(max(r["rel_err"], r.get("ort_err", 0)) for r in rows)
    print(f"max relative difference between runtimes: {worst:.2e}")
    conv = [r for r in rows if r["model"].startswith(("resnet", "cnn"))]
    ok = all(r["ref_s"] / r["interp_s"] >= 10 for r in conv)
    print(f"target (interpreter >= 10x faster than the reference on conv models): {'met' if ok else 'NOT met'}")
    return 0 if worst < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
