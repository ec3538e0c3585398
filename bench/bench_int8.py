"""Per-layer int8 benchmark: every convolution of ResNet-18 (224x224, batch 1) and its fc layer.

    python bench/bench_int8.py [--threads 1,2] [--rounds 7] [--seconds 0.05] [--layers 0,1,...] [--json FILE]

For each layer and thread count, in alternating rounds within one process (a load change hits every
implementation alike), the per-call latency of:

* ``glow-int8``   the int8 engine's kernel (uint8 activations, int8 per-channel weights, uint8 output with the
                  requantization fused), called through ctypes on prepared buffers; on a CPU with AMX, the convs
                  the planner gives AMX blocks run them;
* ``glow-vnni``   the same kernel planned without AMX (``force={"amx": False}``: the VNNI register tiles);
* ``ort-int8``    onnxruntime running a one-node QLinearConv / QLinearMatMul model with the same types;
* ``ort-fp32``    onnxruntime running the one-node float32 Conv / MatMul;
* ``glow-fp32``   the CPU backend compiling the same float32 one-node model (CompiledModel.run, so its Python
                  call overhead is included: a few microseconds).

It prints the median latency over rounds, GOP/s (2 x multiply-adds / latency), the ratios int8/fp32 and
glow-int8/ort-int8, the spread of the rounds (max/min of glow-int8, a noise indicator), and the totals over the
20 convolutions as the network has them (the repeated 3x3 convs counted as often as they occur), by medians and,
as the least-disturbed figure on a shared machine, by the minimum over rounds. Before timing,
every glow-int8 output is checked bit-exact against onnxruntime's int8 output (both implement round-half-even
requantization of the same integer accumulator); a mismatch is reported and exits non-zero.

OMP_WAIT_POLICY is left to libgomp's default (spin briefly, then sleep), as the CPU backend's runtime leaves it:
PASSIVE makes every parallel region and barrier of a kernel pay a futex wake-up, and the int8 kernels at 2 threads
ran slower than at 1. After a timing window the OpenMP threads spin for well under a millisecond, then sleep, so
they do not disturb onnxruntime's next window.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import glow_core  # noqa: E402
from glow_cpu.int8.engine import Requant, plan_qconv, plan_qmatmul  # noqa: E402
from tests.cpu.harness import GemmRunner  # noqa: E402

# name, x shape, w shape (conv: [F, C, k, k]; fc: [K, N]), stride, pad, occurrences in ResNet-18
LAYERS = [
    ("conv1 7x7/2", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1),
    ("l1 3x3 64", (1, 64, 56, 56), (64, 64, 3, 3), 1, 1, 4),
    ("l2 3x3/2 64-128", (1, 64, 56, 56), (128, 64, 3, 3), 2, 1, 1),
    ("l2 3x3 128", (1, 128, 28, 28), (128, 128, 3, 3), 1, 1, 3),
    ("l2 1x1/2 down", (1, 64, 56, 56), (128, 64, 1, 1), 2, 0, 1),
    ("l3 3x3/2 128-256", (1, 128, 28, 28), (256, 128, 3, 3), 2, 1, 1),
    ("l3 3x3 256", (1, 256, 14, 14), (256, 256, 3, 3), 1, 1, 3),
    ("l3 1x1/2 down", (1, 128, 28, 28), (256, 128, 1, 1), 2, 0, 1),
    ("l4 3x3/2 256-512", (1, 256, 14, 14), (512, 256, 3, 3), 2, 1, 1),
    ("l4 3x3 512", (1, 512, 7, 7), (512, 512, 3, 3), 1, 1, 3),
    ("l4 1x1/2 down", (1, 256, 14, 14), (512, 256, 1, 1), 2, 0, 1),
    ("fc 512-1000", (1, 512), (512, 1000), 1, 0, 1),
]
IMPLS = ("glow-int8", "glow-vnni", "ort-int8", "ort-fp32", "glow-fp32")
X_SCALE, X_ZP, Y_SCALE, Y_ZP = 0.02, 100, 0.05, 90


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "layer", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


class Layer:
    """One layer's data, its int8 kernel and its four runnable implementations."""

    def __init__(self, spec, threads: int, rng):
        self.name, xs, ws, s, p, self.count = spec
        self.fc = len(xs) == 2
        self.x = rng.integers(0, 256, xs).astype(np.uint8)
        self.w = rng.integers(-127, 128, ws).astype(np.int8)
        f = ws[1] if self.fc else ws[0]
        w_scale = rng.uniform(0.002, 0.006, f).astype(np.float32)
        self.bias = rng.integers(-20000, 20000, f).astype(np.int32)
        mult = (np.float32(X_SCALE) * w_scale / np.float32(Y_SCALE)).astype(np.float32)
        y = Requant("uint8", Y_ZP)
        if self.fc:
            self.macs = xs[0] * ws[0] * ws[1]
            out = (xs[0], ws[1])
            self.kernel = plan_qmatmul(xs, ws, a_dtype="uint8", a_offset=X_ZP, multiplier=mult, y=y,
                                       num_threads=threads, name="bench_k")
        else:
            oh = (xs[2] + 2 * p - ws[2]) // s + 1
            self.macs = ws[0] * ws[1] * ws[2] * ws[3] * oh * oh
            out = (1, ws[0], oh, oh)
            self.kernel = plan_qconv(xs, ws, (s, s), (1, 1), (p,) * 4, 1, x_dtype="uint8", x_offset=X_ZP,
                                     multiplier=mult, y=y, num_threads=threads, name="bench_k")
            self.vnni = plan_qconv(xs, ws, (s, s), (1, 1), (p,) * 4, 1, x_dtype="uint8", x_offset=X_ZP,
                                   multiplier=mult, y=y, num_threads=threads, name="bench_v", force={"amx": False})
        self.runner = GemmRunner(self.kernel, self.w, self.bias, out, np.uint8)
        self.runner.prepare(self.x)
        self.vnni_runner = self.runner if self.fc else GemmRunner(self.vnni, self.w, self.bias, out, np.uint8)
        self.vnni_runner.prepare(self.x)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        vi = helper.make_tensor_value_info
        if self.fc:
            qnode = helper.make_node("QLinearMatMul", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["yq"])
            fnode = helper.make_node("MatMul", ["xf", "wf"], ["y"])
            # QLinearMatMul takes a per-tensor or per-column b scale; bias is not part of it, so the fp32/int8
            # comparison uses bias 0 for the fc layer
            self.bias[:] = 0
            self.runner = GemmRunner(self.kernel, self.w, self.bias, out, np.uint8)
            self.runner.prepare(self.x)
            qinits = [numpy_helper.from_array(np.array(X_SCALE, np.float32), "xs"),
                      numpy_helper.from_array(np.array(X_ZP, np.uint8), "xz"),
                      numpy_helper.from_array(self.w, "w"),
                      numpy_helper.from_array(w_scale.reshape(1, f), "ws"),
                      numpy_helper.from_array(np.zeros((1, f), np.int8), "wz"),
                      numpy_helper.from_array(np.array(Y_SCALE, np.float32), "ys"),
                      numpy_helper.from_array(np.array(Y_ZP, np.uint8), "yz")]
            finits = [numpy_helper.from_array(self.w.astype(np.float32), "wf")]
            qout = [vi("yq", TensorProto.UINT8, list(out))]
        else:
            qnode = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["yq"],
                                     strides=[s, s], pads=[p] * 4)
            fnode = helper.make_node("Conv", ["xf", "wf", "bf"], ["y"], strides=[s, s], pads=[p] * 4)
            qinits = [numpy_helper.from_array(np.array(X_SCALE, np.float32), "xs"),
                      numpy_helper.from_array(np.array(X_ZP, np.uint8), "xz"),
                      numpy_helper.from_array(self.w, "w"),
                      numpy_helper.from_array(w_scale, "ws"),
                      numpy_helper.from_array(np.zeros(f, np.int8), "wz"),
                      numpy_helper.from_array(np.array(Y_SCALE, np.float32), "ys"),
                      numpy_helper.from_array(np.array(Y_ZP, np.uint8), "yz"),
                      numpy_helper.from_array(self.bias, "b")]
            finits = [numpy_helper.from_array(self.w.astype(np.float32), "wf"),
                      numpy_helper.from_array(self.bias.astype(np.float32), "bf")]
            qout = [vi("yq", TensorProto.UINT8, list(out))]
        qm = _model([qnode], [vi("x", TensorProto.UINT8, list(xs))], qout, qinits)
        fm = _model([fnode], [vi("xf", TensorProto.FLOAT, list(xs))], [vi("y", TensorProto.FLOAT, list(out))],
                    finits)
        self.ort_q = ort.InferenceSession(qm.SerializeToString(), so, providers=["CPUExecutionProvider"])
        self.ort_f = ort.InferenceSession(fm.SerializeToString(), so, providers=["CPUExecutionProvider"])
        self.xf = self.x.astype(np.float32)
        self.glow_f = glow_core.compile(fm, "cpu", num_threads=threads)
        if self.fc:
            self.vnni_runner = self.runner
        self.calls = {"glow-int8": self.runner.call, "glow-vnni": self.vnni_runner.call,
                      "ort-int8": lambda: self.ort_q.run(None, {"x": self.x}),
                      "ort-fp32": lambda: self.ort_f.run(None, {"xf": self.xf}),
                      "glow-fp32": lambda: self.glow_f.run({"xf": self.xf})}

    def check(self) -> int:
        """Elements where glow-int8 differs from onnxruntime's int8 output."""
        self.runner.call()
        ours = self.runner.result()
        self.vnni_runner.call()
        theirs = self.ort_q.run(None, {"x": self.x})[0]
        return int((ours != theirs).sum()) + int((self.vnni_runner.result() != theirs).sum())


def time_call(fn, seconds: float) -> float:
    fn()
    reps, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        t = time.perf_counter() - t0
        if t >= seconds or reps >= 1 << 16:
            return t / reps
        reps = max(reps * 2, int(reps * seconds / max(t, 1e-9)) + 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=0.05, help="timed seconds per implementation per round")
    ap.add_argument("--layers", default="", help="comma-separated layer indices (default: all)")
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    threads = [int(t) for t in a.threads.split(",")]
    if min(threads) < 1 or a.rounds < 1 or a.seconds <= 0:
        ap.error("--threads, --rounds and --seconds must be positive")
    idx = [int(i) for i in a.layers.split(",")] if a.layers else list(range(len(LAYERS)))
    rng = np.random.default_rng(0)
    results, bad = [], 0
    for nt in threads:
        print(f"\n== {nt} thread(s); median of {a.rounds} rounds, {a.seconds}s per implementation per round ==")
        print(f"{'layer':18s} {'int8 us':>8s} {'GOP/s':>6s} {'vnni us':>8s} {'ort-i8':>8s} {'ort-f32':>8s} {'glow-f32':>8s} "
              f"{'i8/ortf32':>9s} {'i8/glowf32':>10s} {'i8/orti8':>8s} {'spread':>6s}")
        tot = dict.fromkeys(IMPLS, 0.0)
        best = dict.fromkeys(IMPLS, 0.0)
        for i in idx:
            layer = Layer(LAYERS[i], nt, rng)
            diff = layer.check()
            if diff:
                bad += 1
                print(f"  {layer.name}: glow-int8 differs from onnxruntime int8 in {diff} elements")
            rounds = {k: [] for k in IMPLS}
            for _ in range(a.rounds):
                for k in IMPLS:
                    rounds[k].append(time_call(layer.calls[k], a.seconds))
            med = {k: statistics.median(v) for k, v in rounds.items()}
            spread = max(rounds["glow-int8"]) / min(rounds["glow-int8"])
            if not layer.fc:
                for k in IMPLS:
                    tot[k] += med[k] * layer.count
                    best[k] += min(rounds[k]) * layer.count
            gops = 2 * layer.macs / med["glow-int8"] / 1e9
            print(f"{layer.name:18s} {med['glow-int8'] * 1e6:8.1f} {gops:6.1f} {med['glow-vnni'] * 1e6:8.1f} "
                  f"{med['ort-int8'] * 1e6:8.1f} "
                  f"{med['ort-fp32'] * 1e6:8.1f} {med['glow-fp32'] * 1e6:8.1f} "
                  f"{med['glow-int8'] / med['ort-fp32']:9.2f} {med['glow-int8'] / med['glow-fp32']:10.2f} "
                  f"{med['glow-int8'] / med['ort-int8']:8.2f} {spread:6.2f}")
            results.append(dict(layer=layer.name, threads=nt, macs=layer.macs, count=layer.count,
                                kernel=layer.kernel.describe, mismatches=diff,
                                **{k: med[k] for k in IMPLS}, spread=spread,
                                rounds={k: rounds[k] for k in IMPLS}))
        print(f"{'20 convs (ms)':18s} {tot['glow-int8'] * 1e3:8.2f} {'':6s} {tot['glow-vnni'] * 1e3:8.2f} "
              f"{tot['ort-int8'] * 1e3:8.2f} "
              f"{tot['ort-fp32'] * 1e3:8.2f} {tot['glow-fp32'] * 1e3:8.2f} "
              f"{tot['glow-int8'] / tot['ort-fp32']:9.2f} {tot['glow-int8'] / tot['glow-fp32']:10.2f} "
              f"{tot['glow-int8'] / tot['ort-int8']:8.2f}")
        print(f"{'  by min (ms)':18s} {best['glow-int8'] * 1e3:8.2f} {'':6s} {best['glow-vnni'] * 1e3:8.2f} "
              f"{best['ort-int8'] * 1e3:8.2f} "
              f"{best['ort-fp32'] * 1e3:8.2f} {best['glow-fp32'] * 1e3:8.2f} "
              f"{best['glow-int8'] / best['ort-fp32']:9.2f} {best['glow-int8'] / best['glow-fp32']:10.2f} "
              f"{best['glow-int8'] / best['ort-int8']:8.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if bad:
        print(f"{bad} layer(s) differ from onnxruntime's int8 output")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
