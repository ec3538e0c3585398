"""End-to-end int8 latency: a ResNet-18-style network (glow_conformance.example_models.resnet18, 224x224, batch 1).

    python bench/bench_int8_e2e.py [--threads 1,2] [--rounds 7] [--seconds 1.0] [--size 224] [--json FILE]

The float32 model (BatchNormalization folded by onnxruntime's quant_pre_process) is quantized by
``onnxruntime.quantization.quantize_static`` (QDQ, per-channel int8 weights, uint8 activations, MinMax over 8
random calibration inputs). Four implementations, per thread count, in alternating rounds within one process:

* ``glow-int8``  the CPU backend running the QDQ model (imported as quantized primitives: qconv, qadd, ... on
                 the int8 engine);
* ``glow-fp32``  the CPU backend running the float32 model;
* ``ort-int8``   onnxruntime running the QDQ model;
* ``ort-fp32``   onnxruntime running the float32 model.

Each round times every implementation for ``--seconds`` (per-call latencies, their median); the figure is the
median over rounds, with the minimum over rounds beside it (the least-disturbed figure on a shared machine).
Before timing, glow-int8's output is checked bit-exact against the interpreter running the same QDQ model, and
its difference from onnxruntime's int8 output is printed in output LSBs. OMP_WAIT_POLICY is left to libgomp's
default, as bench/bench_int8.py explains (PASSIVE: a futex wake-up per parallel region and barrier, and the int8
network at 2 threads no faster than at 1). Prints the ratios glow-int8/glow-fp32
(target <= 0.7) and glow-int8/ort-int8 (target <= 1.0), and the compile times.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static  # noqa: E402
from onnxruntime.quantization.shape_inference import quant_pre_process  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import glow_core  # noqa: E402
from bench.alternate import alternating_rounds  # noqa: E402
from glow_conformance import example_models  # noqa: E402

IMPLS = ("glow-int8", "glow-fp32", "ort-int8", "ort-fp32")


class _Reader(CalibrationDataReader):
    def __init__(self, samples):
        self.it = iter(samples)

    def get_next(self):
        return next(self.it, None)


def models(size: int, calibration: int = 8):
    """(float32 model with BN folded, its QDQ model, the input name, the input shape)."""
    model = example_models.resnet18(seed=0, size=size)
    vi = model.graph.input[0]
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)
    samples = [{vi.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(calibration)]
    with tempfile.TemporaryDirectory() as d:
        raw, folded, qdq = (os.path.join(d, n) for n in ("raw.onnx", "folded.onnx", "qdq.onnx"))
        onnx.save(model, raw)
        quant_pre_process(raw, folded, skip_symbolic_shape=True)
        quantize_static(folded, qdq, _Reader(samples), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        return onnx.load(folded), onnx.load(qdq), vi.name, shape


def ort_session(model, threads: int):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def time_call(fn, seconds: float) -> float:
    """Median per-call seconds over at least 3 calls filling ``seconds`` (after one warm-up call)."""
    fn()
    ts, start = [], time.perf_counter()
    while len(ts) < 3 or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    fp32, qdq, name, shape = models(a.size)
    x = {name: np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    ref = glow_core.compile(qdq, "interpreter").run(x)
    out_name = next(iter(ref))
    ort_q = ort_session(qdq, 1).run(None, x)[0]
    result = {"size": a.size, "rounds": a.rounds, "threads": {}}
    for nt in [int(t) for t in a.threads.split(",")]:
        t0 = time.perf_counter()
        gq = glow_core.compile(qdq, "cpu", num_threads=nt)
        tq = time.perf_counter() - t0
        t0 = time.perf_counter()
        gf = glow_core.compile(fp32, "cpu", num_threads=nt)
        tf = time.perf_counter() - t0
        got = gq.run(x)[out_name]
        if not np.array_equal(got, ref[out_name]):
            print(f"glow-int8 at {nt} thread(s) differs from the interpreter: max |diff| "
                  f"{np.abs(got.astype(np.float64) - ref[out_name]).max()}")
            return 1
        stats = gq.last.stats.get("quantization") or {}
        ops = {}
        for ins in gq.last.ir.code:
            ops[ins.op] = ops.get(ins.op, 0) + 1
        step = float(np.min(np.diff(np.unique(ort_q)))) if np.unique(ort_q).size > 1 else 1.0
        print(f"threads {nt}: glow-int8 bit-exact with the interpreter; vs onnxruntime int8 max "
              f"{np.abs(got - ort_q).max() / step:.0f} LSB; IR ops {ops}; float nodes left "
              f"{len(stats.get('float_nodes', []))}; compile int8 {tq:.2f} s, fp32 {tf:.2f} s")
        oq, of = ort_session(qdq, nt), ort_session(fp32, nt)
        calls = {"glow-int8": lambda: gq.run(x), "glow-fp32": lambda: gf.run(x),
                 "ort-int8": lambda: oq.run(None, x), "ort-fp32": lambda: of.run(None, x)}
        rounds = alternating_rounds(IMPLS, a.rounds, lambda k: time_call(calls[k], a.seconds))  # noqa: B023
        med = {k: statistics.median(v) for k, v in rounds.items()}
        low = {k: min(v) for k, v in rounds.items()}
        print(f"  {'impl':10s} {'median ms':>10s} {'min ms':>8s}")
        for k in IMPLS:
            print(f"  {k:10s} {med[k] * 1e3:10.2f} {low[k] * 1e3:8.2f}")
        r1, r2 = med["glow-int8"] / med["glow-fp32"], med["glow-int8"] / med["ort-int8"]
        print(f"  glow-int8 / glow-fp32 = {r1:.2f} (target <= 0.7); glow-int8 / ort-int8 = {r2:.2f} "
              f"(target <= 1.0); ort-int8 / ort-fp32 = {med['ort-int8'] / med['ort-fp32']:.2f}")
        result["threads"][nt] = {"median_s": med, "min_s": low, "rounds_s": rounds, "compile_s": {"int8": tq,
                                 "fp32": tf}, "int8_over_fp32": r1, "int8_over_ort_int8": r2}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
