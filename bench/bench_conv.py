"""The conv engine against onnxruntime, one convolution at a time.

    python bench/bench_conv.py [--threads 1,2] [--cases resnet18,mobilenetv2,stem,misc] [--only NAME,...]
                               [--seconds 0.6] [--clock wall|cpu] [--layout-study] [--quick]

Every case is one line of CASES. For each case and thread count the conv engine's kernel (rendered by
glow_cpu.conv.engine, compiled with the system C compiler into a shared library, called through ctypes with
numpy-packed weights, see tests.cpu.harness) and onnxruntime running a one-node Conv (ConvTranspose) model
of the same shapes (intra_op_num_threads = threads, IOBinding, default graph optimizations: onnxruntime inserts
its own NCHWc reorders) run alternately in blocks of 5 calls, 5 ms apart (so neither side's idle threads still
spin while the other runs), for about --seconds per case. The table shows GFLOP/s of the medians (2 *
multiply-adds, conventionally counted; Winograd's are the direct conv's) for:

* ``nchw``: our kernel taking and returning plain NCHW (the layout conversions inside it), as codegen calls it
  before a layout pass exists;
* ``nchwc``: the same convolution with NCHWc input and output (what runs once activations stay blocked);
* ``ort``: onnxruntime; ``ratio`` its median time / ours (nchw), ``best`` the same with the fastest times (on a
  loaded machine the closest to an idle one's), ``noise`` the interquartile range / median of its times.

With all ResNet-18 layers selected, the totals weigh each layer by how often it occurs (20 convs), and with 1
and 2 threads the 2-vs-1 speedups follow.

--clock cpu times the calling thread's CPU time instead of wall time (1 thread only: steadier on a loaded
machine). --layout-study also runs the direct kernel with NHWC in and out (ResNet-18 layers): the measurement
behind the choice of NCHWc. Correctness is not checked here (tests/cpu/test_conv_engine.py does).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from glow_cpu.conv.engine import ConvGeometry, plan_conv  # noqa: E402
from tests.cpu.harness import ConvRunner  # noqa: E402

# name: (set, batch, C, F, H, W, k, stride, pad, dilation, group, transposed)
CASES = [
    ("r18.conv1 7x7/2", "resnet18", 1, 3, 64, 224, 224, 7, 2, 3, 1, 1, False),
    ("r18.l1 3x3", "resnet18", 1, 64, 64, 56, 56, 3, 1, 1, 1, 1, False),
    ("r18.l2a 3x3/2", "resnet18", 1, 64, 128, 56, 56, 3, 2, 1, 1, 1, False),
    ("r18.l2ds 1x1/2", "resnet18", 1, 64, 128, 56, 56, 1, 2, 0, 1, 1, False),
    ("r18.l2 3x3", "resnet18", 1, 128, 128, 28, 28, 3, 1, 1, 1, 1, False),
    ("r18.l3a 3x3/2", "resnet18", 1, 128, 256, 28, 28, 3, 2, 1, 1, 1, False),
    ("r18.l3ds 1x1/2", "resnet18", 1, 128, 256, 28, 28, 1, 2, 0, 1, 1, False),
    ("r18.l3 3x3", "resnet18", 1, 256, 256, 14, 14, 3, 1, 1, 1, 1, False),
    ("r18.l4a 3x3/2", "resnet18", 1, 256, 512, 14, 14, 3, 2, 1, 1, 1, False),
    ("r18.l4ds 1x1/2", "resnet18", 1, 256, 512, 14, 14, 1, 2, 0, 1, 1, False),
    ("r18.l4 3x3", "resnet18", 1, 512, 512, 7, 7, 3, 1, 1, 1, 1, False),
    ("mb2.stem 3x3/2", "mobilenetv2", 1, 3, 32, 224, 224, 3, 2, 1, 1, 1, False),
    ("mb2.dw32 3x3", "mobilenetv2", 1, 32, 32, 112, 112, 3, 1, 1, 1, 32, False),
    ("mb2.pw32-16", "mobilenetv2", 1, 32, 16, 112, 112, 1, 1, 0, 1, 1, False),
    ("mb2.pw16-96", "mobilenetv2", 1, 16, 96, 112, 112, 1, 1, 0, 1, 1, False),
    ("mb2.dw96 3x3/2", "mobilenetv2", 1, 96, 96, 112, 112, 3, 2, 1, 1, 96, False),
    ("mb2.pw96-24", "mobilenetv2", 1, 96, 24, 56, 56, 1, 1, 0, 1, 1, False),
    ("mb2.pw24-144", "mobilenetv2", 1, 24, 144, 56, 56, 1, 1, 0, 1, 1, False),
    ("mb2.dw144 3x3", "mobilenetv2", 1, 144, 144, 56, 56, 3, 1, 1, 1, 144, False),
    ("mb2.dw192 3x3", "mobilenetv2", 1, 192, 192, 28, 28, 3, 1, 1, 1, 192, False),
    ("mb2.pw192-64", "mobilenetv2", 1, 192, 64, 14, 14, 1, 1, 0, 1, 1, False),
    ("mb2.dw576 3x3/2", "mobilenetv2", 1, 576, 576, 14, 14, 3, 2, 1, 1, 576, False),
    ("mb2.pw576-160", "mobilenetv2", 1, 576, 160, 7, 7, 1, 1, 0, 1, 1, False),
    ("mb2.dw960 3x3", "mobilenetv2", 1, 960, 960, 7, 7, 3, 1, 1, 1, 960, False),
    ("mb2.pw320-1280", "mobilenetv2", 1, 320, 1280, 7, 7, 1, 1, 0, 1, 1, False),
    ("stem 3-16 3x3@64", "stem", 1, 3, 16, 64, 64, 3, 1, 1, 1, 1, False),
    ("stem 16-16 3x3@64", "stem", 1, 16, 16, 64, 64, 3, 1, 1, 1, 1, False),
    ("dilated 3x3 d2", "misc", 1, 64, 64, 28, 28, 3, 1, 2, 2, 1, False),
    ("grouped g8 3x3", "misc", 1, 128, 128, 28, 28, 3, 1, 1, 1, 8, False),
    ("grouped g32 3x3", "misc", 1, 128, 128, 28, 28, 3, 1, 1, 1, 32, False),
    ("convT 4x4/2", "misc", 1, 64, 32, 28, 28, 4, 2, 1, 1, 1, True),
    ("batch4 3x3", "misc", 4, 64, 64, 28, 28, 3, 1, 1, 1, 1, False),
]
#: How many times each ResNet-18 layer occurs (the "ResNet-18 convs" total weighs the medians by it).
R18_COUNT = {"r18.conv1 7x7/2": 1, "r18.l1 3x3": 4, "r18.l2a 3x3/2": 1, "r18.l2ds 1x1/2": 1, "r18.l2 3x3": 3,
             "r18.l3a 3x3/2": 1, "r18.l3ds 1x1/2": 1, "r18.l3 3x3": 3, "r18.l4a 3x3/2": 1, "r18.l4ds 1x1/2": 1,
             "r18.l4 3x3": 3}
QUICK = ("r18.l3 3x3", "mb2.dw192 3x3", "stem 3-16 3x3@64", "convT 4x4/2")
ORT_IR_VERSION = 8


def geometry(case):
    _, _, n, c, f, h, w, k, s, p, d, g, tr = case
    if tr:
        geom, transform = ConvGeometry.from_conv_transpose((n, c, h, w), (c, f // g, k, k), (s, s), (d, d), (p,) * 4,
                                                           (0, 0), g)
        return geom, transform
    return ConvGeometry(n, c, f, g, (h, w), (k, k), (s, s), (d, d), (p,) * 4), None


def ort_model(case, w, b):
    _, _, n, c, f, h, ww, k, s, p, d, g, tr = case
    op = "ConvTranspose" if tr else "Conv"
    node = helper.make_node(op, ["x", "w", "b"], ["y"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                            dilations=[d, d], group=g)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, ww])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, ORT_IR_VERSION)
    return m


class OrtConv:
    def __init__(self, model, x, threads):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        self.sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        self.x = x
        self.bind = self.sess.io_binding()
        self.bind.bind_cpu_input("x", x)
        self.bind.bind_output("y", "cpu")

    def call(self):
        self.sess.run_with_iobinding(self.bind)


def measure(fns, seconds, clock, block=5, pause=0.005):
    """Alternate the callables in blocks of ``block`` timed calls, pausing ``pause`` s between blocks (so one
    side's idle threads, spinning in libgomp or onnxruntime's pool, stop before the other side runs), until
    ``seconds`` have passed (at least 7 blocks each); the per-callable lists of times."""
    times = [[] for _ in fns]
    for f in fns:
        f()  # warm up
    start = time.perf_counter()
    rounds = 0
    while rounds < 7 or (time.perf_counter() - start < seconds and rounds < 400):
        for i, f in enumerate(fns):
            time.sleep(pause)
            for _ in range(block):
                t0 = clock()
                f()
                times[i].append(clock() - t0)
        rounds += 1
    return times


def spread(ts):
    q = statistics.quantiles(ts, n=4)
    return (q[2] - q[0]) / statistics.median(ts)


def run_case(case, threads, seconds, clock, layouts):
    rng = np.random.default_rng(0)
    geom, transform = geometry(case)
    _, _, n, c, f, h, w, k, s, p, d, g, tr = case
    wshape = (c, f // g, k, k) if tr else (f, c // g, k, k)
    wt = (rng.standard_normal(wshape) / math.sqrt(c * k * k / g)).astype(np.float32)
    b = rng.standard_normal(f).astype(np.float32)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    w_conv = transform(wt) if transform else wt
    fns, labels, desc = [], [], ""
    for lay in layouts:
        kern = plan_conv(geom, num_threads=threads, in_layout=lay, out_layout=lay, name="k_" + lay)
        if not kern:
            labels.append((lay, None))
            continue
        r = ConvRunner(kern, w_conv, b)
        r.prepare(x)
        fns.append(r.call)
        labels.append((lay, len(fns) - 1))
        if lay == "nchw":
            desc = kern.describe.replace("conv engine: ", "")
    ort = OrtConv(ort_model(case, wt, b), x, threads)
    fns.append(ort.call)
    times = measure(fns, seconds, clock)
    flop = 2 * geom.macs
    meds = [statistics.median(t) for t in times]
    bests = [min(t) for t in times]
    ours = labels[0][1]
    return dict(gflop=flop / 1e9, desc=desc, spread=spread(times[-1]),
                gfs={lay: (flop / meds[i] / 1e9 if i is not None else None) for lay, i in labels},
                ort=flop / meds[-1] / 1e9, t_ours=meds[ours] if ours is not None else None, t_ort=meds[-1],
                b_ours=bests[ours] if ours is not None else None, b_ort=bests[-1],
                t_blk=meds[labels[1][1]] if labels[1][1] is not None else None)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--cases", default="resnet18,mobilenetv2,stem,misc")
    ap.add_argument("--only", default="")
    ap.add_argument("--seconds", type=float, default=0.6)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--layout-study", action="store_true")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    sets = set(a.cases.split(","))
    only = [o for o in a.only.split(",") if o]
    cases = [c for c in CASES if c[1] in sets and (not only or any(o in c[0] for o in only))]
    if a.quick:
        cases = [c for c in CASES if c[0] in QUICK]
        a.seconds = min(a.seconds, 0.2)
    layouts = ["nchw", "nchwc"] + (["nhwc"] if a.layout_study else [])
    clock = time.thread_time if a.clock == "cpu" else time.perf_counter
    threads = [int(t) for t in a.threads.split(",")]
    if a.clock == "cpu" and threads != [1]:
        ap.error("--clock cpu measures one thread: use --threads 1")
    print(f"conv engine vs onnxruntime: GFLOP/s of medians ({a.clock} clock, ~{a.seconds}s per case); "
          f"ratio = onnxruntime time / ours (nchw in/out)")
    results = {}
    for t in threads:
        cols = "".join(f"{lay:>8s}" for lay in layouts)
        print(f"\n-- {t} thread(s)\n{'case':20s} {'GFLOP':>6s}{cols}{'ort':>8s}{'ratio':>7s}{'best':>6s}{'noise':>6s}"
              f"  choice")
        for case in cases:
            r = results[t, case[0]] = run_case(case, t, a.seconds, clock, layouts)
            vals = "".join(f"{r['gfs'][lay]:8.1f}" if r["gfs"][lay] else f"{'n/a':>8s}" for lay in layouts)
            ratio = f"{r['t_ort'] / r['t_ours']:7.2f}{r['b_ort'] / r['b_ours']:6.2f}" if r["t_ours"] else " " * 13
            print(f"{case[0]:20s} {r['gflop']:6.3f}{vals}{r['ort']:8.1f}{ratio}{r['spread']:6.2f}  {r['desc']}",
                  flush=True)
    print()
    for t in threads:
        rs = [results[t, c[0]] for c in cases if results[t, c[0]]["t_ours"]]
        if rs:
            gm = math.exp(sum(math.log(r["t_ort"] / r["t_ours"]) for r in rs) / len(rs))
            print(f"{t} thread(s): geometric mean of ratios {gm:.2f} over {len(rs)} cases "
                  f"({sum(r['t_ort'] >= r['t_ours'] for r in rs)} at or above onnxruntime)")
    r18 = [c[0] for c in cases if c[0] in R18_COUNT]
    if len(r18) == len(R18_COUNT):
        for t in threads:
            tot = {k: sum(R18_COUNT[c] * results[t, c][k] for c in r18) for k in ("t_ours", "t_blk", "t_ort",
                                                                                 "b_ours", "b_ort")}
            print(f"ResNet-18 convs (20 layers), {t} thread(s): ours {tot['t_ours'] * 1e3:.2f} ms (nchw), "
                  f"{tot['t_blk'] * 1e3:.2f} ms (blocked), onnxruntime {tot['t_ort'] * 1e3:.2f} ms: ratio "
                  f"{tot['t_ort'] / tot['t_ours']:.2f} (best times: {tot['b_ort'] / tot['b_ours']:.2f})")
            results[t, "r18"] = tot
        if 1 in threads and 2 in threads:
            one, two = results[1, "r18"], results[2, "r18"]
            print(f"ResNet-18 convs, 2 threads vs 1: ours {one['t_ours'] / two['t_ours']:.2f}x (best times "
                  f"{one['b_ours'] / two['b_ours']:.2f}x), onnxruntime {one['t_ort'] / two['t_ort']:.2f}x (best "
                  f"{one['b_ort'] / two['b_ort']:.2f}x)")
    print(f"noise: median interquartile spread of onnxruntime's times "
          f"{statistics.median(r['spread'] for r in results.values() if 'spread' in r):.2f}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")


if __name__ == "__main__":
    main()
