"""Per-layer gap table of the int8 ResNet-18 or MobileNetV2 (bench/bench_int8_e2e.py's QDQ models): every
instruction of the CPU backend's int8 run beside onnxruntime's per-node profile of the same model, at each thread
count.

    python bench/bench_int8_layers.py [--model resnet18|mobilenetv2] [--flow qdq|kit|kit-asymmetric-weights]
                                      [--threads 1,2] [--runs 30] [--size 224] [--top 12] [--json FILE]

``--flow kit`` runs the kit's own quantization of the float model (bench_int8_e2e's glow-kit) instead of
onnxruntime's file; onnxruntime still runs its file, and the rows match by the ONNX node names both keep.

glow-int8 is timed per instruction with ``CompiledFunction.execute_timed`` (a monotonic clock read around each
kernel call); onnxruntime with ``SessionOptions.enable_profiling`` (its ``*_kernel_time`` events). Both run the
model ``--runs`` times after a warm-up, alternating one glow run and one onnxruntime run, and each row is the
median over the runs. Rows are matched by the ONNX node a kernel comes from (onnxruntime's node name without its
``_token_N`` suffix is the prefix of ours); a node only one side has (onnxruntime's layout transposes and
Flatten) gets a row with the other side empty. The totals are the sums of the medians (a whole run costs a little
more: the call itself). Then the ``--top`` biggest absolute gaps per thread count and, with several thread counts,
the rows whose time scales worst from the first count to the last.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import glow_core  # noqa: E402
from bench.bench_int8_e2e import calibration_inputs, models  # noqa: E402
from glow_core import quantization  # noqa: E402
from glow_tools.bench import ort_kernel_times  # noqa: E402

#: --flow: the kit's quantization options beside quantize=profile, per_channel=True (None: onnxruntime's file)
FLOWS = {"qdq": None, "kit": {}, "kit-asymmetric-weights": {"weight_schema": "asymmetric"}}


def profile(qdq, feed, threads: int, runs: int, glow_model=None, options=None):
    """[(node, glow op, glow median us, ort op, ort median us)] in glow's instruction order, ort-only rows last."""
    gq = glow_core.compile(qdq if glow_model is None else glow_model, "cpu", num_threads=threads, **(options or {}))
    gq.run(feed)
    compiled = gq.last.compiled
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as d:
        so.profile_file_prefix = os.path.join(d, "ort")
        sess = ort.InferenceSession(qdq.SerializeToString(), so, providers=["CPUExecutionProvider"])
        ours: dict[str, list] = {}
        op_of: dict[str, str] = {}
        for _ in range(runs + 1):
            _, timings = compiled.execute_timed(feed)
            for ins, _start, dur in timings:
                ours.setdefault(ins.name, []).append(dur * 1e6)
                op_of[ins.name] = ins.op
            sess.run(None, feed)
        events = ort_kernel_times(sess.end_profiling())
    theirs: dict[str, list] = {}
    their_op: dict[str, str] = {}
    for name, runs_ in events.items():
        node = re.sub(r"_token_\d+$", "", name)
        theirs.setdefault(node, []).extend(t * 1e6 for t, _ in runs_)
        their_op[node] = runs_[-1][1]
    # drop the warm-up run
    ours = {k: v[1:] for k, v in ours.items()}
    theirs = {k: v[1:] for k, v in theirs.items()}
    nodes = sorted(theirs, key=len, reverse=True)
    rows, matched = [], set()
    for name, ts in ours.items():
        node = next((n for n in nodes if name.startswith(n + "_")), None)
        # several of our instructions may come from one node (a quantize and a conv): the first takes the row
        other = node if node is not None and node not in matched else None
        if other:
            matched.add(other)
        rows.append((node or name, op_of[name], statistics.median(ts), their_op.get(other, ""),
                     statistics.median(theirs[other]) if other else None))
    for n in theirs:
        if n not in matched:
            rows.append((n, "", None, their_op[n], statistics.median(theirs[n])))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18", choices=("resnet18", "mobilenetv2"))
    ap.add_argument("--flow", default="qdq", choices=tuple(FLOWS),
                    help="what glow runs: onnxruntime's QDQ file (qdq), or the float model quantized by the kit's "
                         "flow with its default recipe (kit) or with asymmetric weights (kit-asymmetric-weights)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--json", default=None)
    ap.add_argument("--top", type=int, default=12, help="rows of the gap and scaling summaries")
    a = ap.parse_args(argv)
    fp32, qdq, name, shape = models(a.size, model=a.model)
    glow_model, options = None, None
    if a.flow != "qdq":
        glow_model = fp32
        options = {"quantize": quantization.profile(fp32, calibration_inputs(name, shape)), "per_channel": True,
                   **FLOWS[a.flow]}
    feed = {name: np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    result = {}
    for nt in [int(t) for t in a.threads.split(",")]:
        rows = profile(qdq, feed, nt, a.runs, glow_model, options)
        print(f"threads {nt} (medians over {a.runs} runs, microseconds)")
        print(f"  {'node':22s} {'glow op':12s} {'glow':>8s} {'ort op':26s} {'ort':>8s} {'glow/ort':>8s}")
        for node, op, g, oop, o in rows:
            ratio = f"{g / o:8.2f}" if g is not None and o else ""
            gs = f"{g:8.1f}" if g is not None else ""
            os_ = f"{o:8.1f}" if o is not None else ""
            print(f"  {node[:22]:22s} {op:12s} {gs:>8s} {oop[:26]:26s} {os_:>8s} {ratio:>8s}")
        tg = sum(r[2] for r in rows if r[2] is not None)
        to = sum(r[4] for r in rows if r[4] is not None)
        print(f"  {'total':22s} {'':12s} {tg:8.1f} {'':26s} {to:8.1f} {tg / to:8.2f}")
        result[nt] = [dict(zip(("node", "glow_op", "glow_us", "ort_op", "ort_us"), r)) for r in rows]
    summary(result, a.top)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def summary(result: dict, top: int):
    """The ``top`` rows of biggest absolute gap (glow - ort) per thread count, and with two or more thread counts
    the rows whose glow time scales worst from the first count to the last (beside onnxruntime's scaling)."""
    for nt, rows in result.items():
        gaps = sorted((r for r in rows if r["glow_us"] is not None and r["ort_us"]),
                      key=lambda r: r["glow_us"] - r["ort_us"], reverse=True)[:top]
        print(f"threads {nt}: the {top} biggest gaps (glow - ort, us)")
        for r in gaps:
            print(f"  {r['node'][:22]:22s} {r['glow_op']:12s} {r['glow_us']:8.1f} {r['ort_us']:8.1f} "
                  f"{r['glow_us'] - r['ort_us']:+8.1f}")
    counts = list(result)
    if len(counts) > 1:
        t0, t1 = counts[0], counts[-1]
        first = {(r["node"], r["glow_op"]): r for r in result[t0]}
        scale = []
        for r in result[t1]:
            r0 = first.get((r["node"], r["glow_op"]))
            if r0 and r0["glow_us"] and r["glow_us"]:
                ort = r0["ort_us"] / r["ort_us"] if r0["ort_us"] and r["ort_us"] else None
                scale.append((r0["glow_us"] / r["glow_us"], r["node"], r["glow_op"], r0["glow_us"], r["glow_us"], ort))
        scale.sort()
        print(f"glow's scaling {t0} -> {t1} threads, the {top} worst (speed-up, us at {t0} and {t1}; onnxruntime's "
              f"speed-up on the same node)")
        for sp, node, op, g0, g1, ort in scale[:top]:
            print(f"  {node[:22]:22s} {op:12s} {g0:8.1f} {g1:8.1f} {sp:6.2f}x  ort {f'{ort:.2f}x' if ort else '-'}")
        tg = [sum(r["glow_us"] for r in result[t] if r["glow_us"] is not None) for t in (t0, t1)]
        to = [sum(r["ort_us"] for r in result[t] if r["ort_us"] is not None) for t in (t0, t1)]
        print(f"  total: glow {tg[0] / tg[1]:.2f}x, onnxruntime {to[0] / to[1]:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
