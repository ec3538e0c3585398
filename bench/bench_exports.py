"""The CPU backend against onnxruntime on models exported the way users export them (bench/export_models.py:
torch dynamo exports of torchvision, timm, transformers and diffusers architectures and plain torch modules,
random weights, opsets 18-23; onnx.helper builds where torch is absent).

    python bench/bench_exports.py [--quick] [--models vit_tiny,gpt2,...] [--threads 1,2] [--rounds 5]
                                  [--layers above|all|none|NAME,...] [--cold-compile]

1. Correctness: every model's outputs on glow-cpu against onnxruntime's (max |cpu - ort| / max |ort| per
   output; exits non-zero above --tol).
2. Latency: per model and thread count, ``--rounds`` rounds alternating glow-cpu / onnxruntime, each measurement
   in a fresh process at that thread count (``num_threads`` / ``intra_op_num_threads``, OMP_NUM_THREADS); each
   process reports the median of its timed runs, the table the median over rounds and the ratio cpu/ort. Per
   thread count: the geometric mean of the ratios and the highest (issue 24's target: geometric mean <= 1.0 at 1
   and 2 threads, no model above 1.3). The compile time of each glow process (kernel cache warm) beside it.
3. Per model (``--layers``: by default those above 1.0 at the first thread count, with --quick the slowest
   one): the per-op-kind table of
   ``glowc bench`` (glow's instructions by op, time, share, GFLOP/s), the per-ONNX-op-type comparison (glow's
   layers and onnxruntime's profiled nodes summed by the op type of the model's node they compute) and the
   per-layer table (glow_tools.bench.format_layers).
4. With ``--scaling NAME,...`` (or ``all``): per model, the per-layer table at every thread count side by side
   (glow's and onnxruntime's time per layer, each runtime's speedup from the first thread count to the last, the
   ratio and the excess glow - ort at the last, and the algorithm of the layer's slowest instruction there: its
   kernel's choice, as ``glowc dump`` lists it), layers by that excess: where glow scales worse than onnxruntime.
5. With ``--cold-compile``: each model's compile time with an empty kernel cache (C compiler included).

``--quick``: the small variant of one model per kind, 1 thread, one round (tests/bench/test_bench_exports.py).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from glow_cpu.build.runtime import omp_environment  # noqa: E402

# the workers import torch (to find a model's cache key), whose libgomp.so.1 then serves the kernels: give it the
# cpu runtime's spin count now, before torch loads it (the runtime can set it only for a libgomp it loads itself)
omp_environment()
from bench import export_models as zoo  # noqa: E402
from bench.alternate import alternating_rounds, timed_runs  # noqa: E402

#: seconds of timed runs per process, min runs, max runs
BUDGET = {False: (1.5, 5, 500), True: (0.2, 3, 50)}


def ort_session(model, threads):
    from glow_tools.bench import ort_session as session
    return session(model, threads)


def glow_compile(model, threads):
    import glow_core
    return glow_core.compile(model, "cpu", num_threads=threads)


# ----------------------------------------------------------------------------------------------- workers
def worker_latency(runtime, name, threads, quick):
    model, feed = zoo.load(name, quick)
    budget, lo, hi = BUDGET[quick]
    t = time.perf_counter()
    if runtime == "glow":
        cm = glow_compile(model, threads)
        cm.run(feed)
        fn = lambda: cm.run(feed)  # noqa: E731
    else:
        sess = ort_session(model, threads)
        names = [i.name for i in sess.get_inputs()]
        ort_feed = {k: feed[k] for k in names}
        sess.run(None, ort_feed)
        fn = lambda: sess.run(None, ort_feed)  # noqa: E731
    setup = time.perf_counter() - t
    ts = timed_runs(fn, budget, lo, hi)
    return {"median": statistics.median(ts), "min": min(ts), "n": len(ts), "setup": setup}


def worker_check(name, quick):
    """Per output: max |glow - ort| / max |ort| at 1 thread (inf on a shape mismatch)."""
    model, feed = zoo.load(name, quick)
    got = glow_compile(model, 1).run(feed)
    sess = ort_session(model, 1)
    want = sess.run(None, {i.name: feed[i.name] for i in sess.get_inputs()})
    out = {}
    for o, w in zip(sess.get_outputs(), want):
        g = np.asarray(got[o.name])
        if g.shape != w.shape:
            out[o.name] = math.inf
            continue
        d = np.abs(g.astype(np.float64) - w.astype(np.float64))
        out[o.name] = float(d.max() / max(float(np.abs(w).max()), 1e-30)) if d.size else 0.0
    return {"diffs": out}


def worker_compile(name, quick):
    model, feed = zoo.load(name, quick)
    t = time.perf_counter()
    glow_compile(model, 1).run(feed)
    return {"seconds": time.perf_counter() - t}


def _op_types(model, layers, ort_times):
    """{op type: [nodes, glow s, ort s]}: glow's layers and onnxruntime's node times (already by glow's layer,
    ``ort_layer_times``) summed by the op type of the ONNX node each layer is named after; onnxruntime-only
    nodes (its layout reorders) under "(ort) NAME"."""
    kind = {n.name: n.op_type for n in model.graph.node if n.name}
    out: dict[str, list] = {}
    for lay in layers:
        row = out.setdefault(kind.get(lay.name, "(other)"), [0, 0.0, 0.0])
        row[0] += 1
        row[1] += lay.seconds
    layer_names = {x.name for x in layers}
    for nm, sec in ort_times.items():
        op = kind.get(nm, "(other)") if nm in layer_names or nm in kind else "(ort only)"
        out.setdefault(op, [0, 0.0, 0.0])[2] += sec
    return out


def worker_layers(name, threads, quick):
    """glowc bench's per-op-kind table, the per-ONNX-op-type comparison and the per-layer table, as text."""
    from glow_tools.bench import (_ms, _table, format_layers, op_kinds, ort_layer_times, ort_node_times,
                                  profile_layers, profile_op_kinds)
    model, feed = zoo.load(name, quick)
    budget = BUDGET[quick][0]
    cm = glow_compile(model, threads)
    cm.run(feed)
    res = cm.last
    kinds = op_kinds(res.ir)
    checked = cm.check_inputs(feed)
    wall = profile_op_kinds(res.compiled, {k: a for k, a in checked.items() if k in res.ir.inputs}, kinds, budget,
                            "glow")
    total = sum(k.seconds for k in kinds.values()) or 1.0
    rows = [("op", "count", "time", "share", "GFLOP/s")]
    for k in sorted(kinds.values(), key=lambda k: -k.seconds)[:14]:
        gf = f"{k.flops / k.seconds / 1e9:.2f}" if k.flops and k.seconds else "-"
        rows.append((k.op, str(k.count), _ms(k.seconds), f"{100 * k.seconds / total:.1f}%", gf))
    text = [f"per op kind, {name}, {threads} thread(s) (glow's instructions sum to {_ms(total)} of a "
            f"{_ms(wall)} run):"] + _table(rows, "lrrrr")

    layers, lwall = profile_layers(cm, feed, budget)
    ort = ort_layer_times(model, ort_node_times(model, feed, threads), layers)
    types = _op_types(model, layers, dict(ort))
    rows = [("ONNX op type", "layers", "glow", "ort", "glow/ort", "glow - ort")]
    gsum, osum = sum(v[1] for v in types.values()), sum(v[2] for v in types.values())
    for op, (n, g, o) in sorted(types.items(), key=lambda kv: -max(kv[1][1], kv[1][2]))[:14]:
        rows.append((op, str(n), _ms(g) if g else "-", _ms(o) if o else "-", f"{g / o:.2f}" if g and o else "-",
                     f"{(g - o) * 1e3:+.2f} ms"))
    text += ["", f"per ONNX op type, {name}, {threads} thread(s): glow's layers sum to {_ms(gsum)}, onnxruntime's "
             f"profiled nodes to {_ms(osum)}"] + _table(rows, "lrrrrr")
    text += ["", format_layers(f"per layer, {name}, {threads} thread(s)", layers, lwall, ort, top=15)]
    return {"table": "\n".join(text)}


def worker_layer_times(name, threads, quick, runs=40):
    """Per layer at ``threads``, over ``runs`` timed runs: glow's least time (the layer's instructions summed per run,
    the least over runs: on a shared machine the least is what the code costs, a median also what the load
    does), its ops and the choice of its slowest instruction, and onnxruntime's least profiled time of the nodes
    it computes (per node over runs, summed by layer as ``ort_layer_times`` does; nodes of no layer keep their
    name)."""
    from glow_tools.bench import _node_of, ort_layer_times, ort_node_times, profile_layers
    model, feed = zoo.load(name, quick)
    cm = glow_compile(model, threads)
    cm.run(feed)
    layers, _ = profile_layers(cm, feed, 0.0)  # the layers (names, ops, covered nodes)
    nodes = {n.name: n.name for n in model.graph.node if n.name}
    compiled = cm.last.compiled
    checked = cm.check_inputs(feed)
    inputs = {k: a for k, a in checked.items() if k in cm.last.ir.inputs}
    keys = [_node_of(c.instr.name, nodes) for c in compiled.program.calls]
    per_run, slow = [], {}
    for _ in range(runs):
        _, timings = compiled.execute_timed(inputs)
        acc: dict = {}
        for i, (k, (_, _, sec)) in enumerate(zip(keys, timings)):
            acc[k] = acc.get(k, 0.0) + sec
            slow.setdefault(i, []).append(sec)
        per_run.append(acc)
    slowest: dict = {}
    for i, k in enumerate(keys):
        sec = min(slow[i])
        if sec >= slowest.get(k, (-1.0, ""))[0]:
            call = compiled.program.calls[i]
            slowest[k] = (sec, f"{call.instr.op}: {call.code.choice}")
    ort = ort_layer_times(model, ort_node_times(model, feed, threads, runs, stat=min), layers)
    out = {x.name: ["+".join(x.ops), min(r.get(x.name, 0.0) for r in per_run), ort.pop(x.name, None),
                    slowest.get(x.name, (0, ""))[1]] for x in layers}
    out.update({nm: ["(onnxruntime only)", 0.0, sec, ""] for nm, sec in ort.items()})
    return {"layers": out}


def scaling(name, thread_list, quick, top=25):
    """The per-layer table of ``name`` at each thread count side by side (see the module's docstring, item 4)."""
    per = {th: spawn(["layer_times", name, str(th), str(int(quick))], th) for th in thread_list}
    t0, t1 = thread_list[0], thread_list[-1]
    names = list(per[t1]["layers"])
    rows = [("layer", "glow ops") + tuple(f"glow {t}t" for t in thread_list) + (f"x{t1}",)
            + tuple(f"ort {t}t" for t in thread_list) + (f"x{t1}", f"cpu/ort {t1}t", "glow - ort", "slowest at "
                                                          f"{t1}t")]

    def cell(th, nm, k):
        v = per[th]["layers"].get(nm)
        return v[k] if v else None

    def excess(nm):
        return (cell(t1, nm, 1) or 0.0) - (cell(t1, nm, 2) or 0.0)
    for nm in sorted(names, key=excess, reverse=True)[:top]:
        g = [cell(t, nm, 1) for t in thread_list]
        o = [cell(t, nm, 2) for t in thread_list]
        rows.append((nm[:36], cell(t1, nm, 0)[:24]) + tuple(_msec(v) for v in g) + (_x(g[0], g[-1]),)
                    + tuple(_msec(v) for v in o) + (_x(o[0], o[-1]), _x(g[-1], o[-1]), f"{excess(nm) * 1e3:+.3f} ms",
                                                  cell(t1, nm, 3)[:110]))
    sums = {t: (sum(v[1] for v in per[t]["layers"].values()), sum(v[2] or 0.0 for v in per[t]["layers"].values()))
            for t in thread_list}
    head = (f"per layer by thread count, {name}: glow's layers sum to "
            + ", ".join(f"{_msec(sums[t][0])} at {t}t" for t in thread_list) + "; onnxruntime's profiled nodes to "
            + ", ".join(f"{_msec(sums[t][1])} at {t}t" for t in thread_list)
            + f" (least time over runs); the {min(top, len(names))} layers whose glow time exceeds onnxruntime's most "
            f"at {t1} threads (x{t1}: speedup from {t0} thread(s))")
    from glow_tools.bench import _table
    return "\n".join([head] + _table(rows, "ll" + "r" * (2 * len(thread_list) + 5) + "l"))


def _msec(v):
    return "-" if not v else f"{v * 1e3:.3f}"


def _x(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def spawn(args, threads, env_extra=None):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               **(env_extra or {}))
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", *args], env=env,
                       capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"worker {args} failed (rc {p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------ phases
def check(names, quick, tol):
    ok = True
    print("correctness (glow-cpu vs onnxruntime, 1 thread): max |cpu - ort| / max |ort| over each output")
    for name in names:
        try:
            diffs = spawn(["check", name, str(int(quick))], 1)["diffs"]
        except RuntimeError as e:
            print(f"  {name:20s} FAILED: {str(e).strip().splitlines()[-1][:300]}")
            ok = False
            continue
        worst = max(diffs.values()) if diffs else 0.0
        bad = not worst <= tol
        ok &= not bad
        print(f"  {name:20s} {worst:.2e} over {len(diffs)} output(s){'   <-- WRONG (tol %.0e)' % tol if bad else ''}",
              flush=True)
    return ok


def latency(names, thread_list, rounds, quick):
    res = {}
    print(f"  {'model':20s} {'threads':>7s} {'glow-cpu ms':>12s} {'ort ms':>10s} {'cpu/ort':>8s} "
          f"{'glow setup s':>12s} {'ort setup s':>11s}")
    for name in names:
        for th in thread_list:
            per = alternating_rounds(("glow", "ort"), rounds,
                                     lambda rt: spawn(["latency", rt, name, str(th), str(int(quick))], th))  # noqa: B023
            gm = statistics.median(r["median"] for r in per["glow"])
            om = statistics.median(r["median"] for r in per["ort"])
            res[name, th] = (gm, om)
            gs = statistics.median(r["setup"] for r in per["glow"])
            os_ = statistics.median(r["setup"] for r in per["ort"])
            print(f"  {name:20s} {th:7d} {gm * 1e3:12.3f} {om * 1e3:10.3f} {gm / om:8.2f} {gs:12.2f} {os_:11.2f}",
                  flush=True)
    return res


def summary(names, thread_list, res):
    out = {}
    for th in thread_list:
        ratios = {m: res[m, th][0] / res[m, th][1] for m in names}
        gm = math.exp(sum(map(math.log, ratios.values())) / len(ratios))
        worst = max(ratios, key=ratios.get)
        above = sorted((m for m in ratios if ratios[m] > 1.3), key=lambda m: -ratios[m])
        print(f"geometric mean of cpu/ort at {th} thread(s) over {len(ratios)} models: {gm:.2f} (target <= 1.0); "
              f"highest {worst} {ratios[worst]:.2f} (target <= 1.3)"
              + (f"; above 1.3: {', '.join(f'{m} {ratios[m]:.2f}' for m in above)}" if above else ""))
        out[th] = (gm, ratios)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small models, one per kind, 1 thread, 1 round")
    ap.add_argument("--models", default=None, help="comma-separated, from: " + ",".join(zoo.BY_NAME))
    ap.add_argument("--threads", default=None, help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--rounds", type=int, default=None, help="fresh-process rounds per runtime (default 5)")
    ap.add_argument("--tol", type=float, default=1e-3, help="max relative difference against onnxruntime")
    ap.add_argument("--layers", default=None,
                    help="per-op tables for: 'above' (models above 1.0 at the first thread count; the default), "
                         "'slowest' (the highest ratio; the default with --quick), 'all', 'none' or comma-separated "
                         "names")
    ap.add_argument("--scaling", default=None,
                    help="per-layer tables at every thread count side by side for these models ('all' or "
                         "comma-separated names)")
    ap.add_argument("--cold-compile", action="store_true", help="each model's compile time with an empty cache")
    ap.add_argument("--no-check", action="store_true", help="skip the correctness phase")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        kind, *r = a.worker
        out = (worker_latency(r[0], r[1], int(r[2]), bool(int(r[3]))) if kind == "latency" else
               worker_check(r[0], bool(int(r[1]))) if kind == "check" else
               worker_layers(r[0], int(r[1]), bool(int(r[2]))) if kind == "layers" else
               worker_layer_times(r[0], int(r[1]), bool(int(r[2]))) if kind == "layer_times" else
               worker_compile(r[0], bool(int(r[1]))))
        print(json.dumps(out))
        return 0

    quick = a.quick
    names = [m for m in (a.models.split(",") if a.models else []) if m]
    unknown = [m for m in names if m not in zoo.BY_NAME]
    if unknown:
        ap.error(f"unknown models {unknown}; known: {list(zoo.BY_NAME)}")
    wanted = names or None
    names = zoo.available(wanted, quick)
    skipped = [m for m in (wanted or [c.name for c in zoo.CASES]) if m not in names]
    thread_list = [int(t) for t in (a.threads or ("1" if quick else "1,2")).split(",") if t]
    rounds = a.rounds or (1 if quick else 5)
    import onnxruntime as ort
    src = "torch dynamo exports" if zoo.have_torch() else "onnx.helper builds (torch not installed)"
    print(f"glow-cpu vs onnxruntime {ort.__version__}; {os.cpu_count()} cores; load {_load()}; {src}; "
          f"{'quick' if quick else 'full'} sizes; threads {thread_list}; {rounds} round(s)", flush=True)
    if skipped and not quick:
        print(f"skipped (need torch and their library): {', '.join(skipped)}")
    t0 = time.perf_counter()
    for n in names:
        zoo.paths(n, quick)

    if not a.no_check and not check(names, quick, a.tol):
        print("FAIL: glow-cpu output differs from onnxruntime (see above)", file=sys.stderr)
        return 1

    print("\nlatency: median over rounds of per-process medians (fresh process each, alternating glow/ort); "
          "setup = compile (glow, kernel cache warm) or session creation (ort) and the first run")
    res = latency(names, thread_list, rounds, quick)
    print(f"load after: {_load()}")
    summ = summary(names, thread_list, res)

    th = thread_list[0]
    layers = a.layers or ("slowest" if quick else "above")
    if layers == "all":
        lay = names
    elif layers == "slowest":
        lay = [max(names, key=lambda m: summ[th][1][m])]
    elif layers == "above":
        lay = [m for m in names if summ[th][1][m] > 1.0]
    elif layers == "none":
        lay = []
    else:
        lay = [m for m in layers.split(",") if m in names]
    for m in lay:
        print(f"\n{spawn(['layers', m, str(th), str(int(quick))], th)['table']}", flush=True)

    for m in (names if a.scaling == "all" else [x for x in (a.scaling or "").split(",") if x in names]):
        print(f"\n{scaling(m, thread_list, quick)}", flush=True)

    cold = {}
    if a.cold_compile:
        print("\ncold compile (fresh process, empty GLOW_CACHE_DIR, C compiler included, 1 thread):")
        for m in names:
            with tempfile.TemporaryDirectory() as d:
                cold[m] = spawn(["compile", m, str(int(quick))], 1, {"GLOW_CACHE_DIR": d})["seconds"]
            print(f"  {m:20s} {cold[m]:.2f} s", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"load": _load(), "quick": quick, "rounds": rounds,
                       "latency": {f"{m}@{t}": v for (m, t), v in res.items()}, "cold_compile": cold}, f, indent=1)
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


def _load() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
