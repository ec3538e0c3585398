"""End-to-end int8 latency: ResNet-18-style and MobileNetV2-style networks (glow_conformance.example_models,
224x224, batch 1), the kit's own quantization flow and onnxruntime's quantized file, against onnxruntime.

    python bench/bench_int8_e2e.py [--models resnet18,mobilenetv2] [--threads 1,2] [--rounds 7] [--seconds 1.0]
                                   [--size 224] [--impls glow-kit,glow-qdq,ort-int8] [--json FILE]

The float32 model (BatchNormalization folded by onnxruntime's quant_pre_process) is quantized by
``onnxruntime.quantization.quantize_static`` with onnxruntime's fastest x86 recipe (QDQ, per-channel symmetric int8
weights, uint8 activations, MinMax over 8 random calibration inputs). The implementations, per model and thread
count, in alternating rounds within one process:

* ``glow-kit``   the CPU backend running the float32 model quantized by the kit's own flow with its default recipe
                 (``quantize=profile`` over the same 8 calibration inputs, ``per_channel=True``);
* ``glow-qdq``   the CPU backend running onnxruntime's QDQ model (imported as quantized primitives: qconv, qadd,
                 ... on the int8 engine);
* ``ort-int8``   onnxruntime running the QDQ model (the reference: onnxruntime's fastest int8 recipe);
* ``glow-fp32``  the CPU backend running the float32 model;
* ``ort-fp32``   onnxruntime running the float32 model.

Each round times every implementation for ``--seconds`` (per-call latencies, their median); the figure is the
median over rounds, with the minimum over rounds beside it (the least-disturbed figure on a shared machine).
Before timing, glow-qdq's output is checked bit-exact against the interpreter running the same QDQ model, and
glow-kit's against the interpreter running the kit's quantized model; the output SQNR of glow-kit, glow-qdq and
ort-int8 against onnxruntime's float32 output is printed. OMP_WAIT_POLICY is left to libgomp's default, as
bench/bench_int8.py explains (PASSIVE: a futex wake-up per parallel region and barrier, and the int8 network at 2
threads no faster than at 1). Prints each implementation's ratio to ort-int8 (issue 24's target: glow-kit and
glow-qdq <= 0.7), glow-qdq/glow-fp32, and the compile times.
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
from glow_core import quantization  # noqa: E402

IMPLS = ("glow-kit", "glow-qdq", "ort-int8", "glow-fp32", "ort-fp32")


class _Reader(CalibrationDataReader):
    def __init__(self, samples):
        self.it = iter(samples)

    def get_next(self):
        return next(self.it, None)


def calibration_inputs(name: str, shape, count: int = 8) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]


def models(size: int, calibration: int = 8, model: str = "resnet18"):
    """(float32 model with BN folded, its QDQ model, the input name, the input shape) of example_models.<model>."""
    net = getattr(example_models, model)(seed=0, size=size)
    vi = net.graph.input[0]
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    samples = calibration_inputs(vi.name, shape, calibration)
    with tempfile.TemporaryDirectory() as d:
        raw, folded, qdq = (os.path.join(d, n) for n in ("raw.onnx", "folded.onnx", "qdq.onnx"))
        onnx.save(net, raw)
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


def sqnr(ref, got) -> float:
    ref, got = np.float64(ref), np.float64(got)
    noise = float(np.sum((ref - got) ** 2))
    return 10 * np.log10(float(np.sum(ref ** 2)) / noise) if noise > 0 else float("inf")


def bench_model(model: str, a, impls) -> dict:
    fp32, qdq, name, shape = models(a.size, model=model)
    prof = quantization.profile(fp32, calibration_inputs(name, shape))
    x = {name: np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    ref_f = ort_session(fp32, 1).run(None, x)[0]
    ort_q = ort_session(qdq, 1).run(None, x)[0]
    sources = {"glow-kit": (fp32, {"quantize": prof, "per_channel": True}), "glow-qdq": (qdq, {}),
               "glow-fp32": (fp32, {})}
    refs = {k: glow_core.compile(m, "interpreter", **o).run(x) for k, (m, o) in sources.items() if k != "glow-fp32"}
    print(f"{model}: SQNR against float32 (onnxruntime) ort-int8 {sqnr(ref_f, ort_q):.2f} dB" + "".join(
        f", {k} {sqnr(ref_f, next(iter(r.values()))):.2f} dB" for k, r in refs.items()))
    result = {"threads": {}}
    for nt in [int(t) for t in a.threads.split(",")]:
        compiled, compile_s, calls = {}, {}, {}
        for k in impls:
            if k in sources:
                m, o = sources[k]
                t0 = time.perf_counter()
                compiled[k] = glow_core.compile(m, "cpu", num_threads=nt, **o)
                compile_s[k] = time.perf_counter() - t0
                calls[k] = (lambda g: lambda: g.run(x))(compiled[k])
            else:
                sess = ort_session(qdq if k == "ort-int8" else fp32, nt)
                calls[k] = (lambda s_: lambda: s_.run(None, x))(sess)
        for k, r in refs.items():
            if k not in compiled:
                continue
            out_name = next(iter(r))
            got = compiled[k].run(x)[out_name]
            if not np.array_equal(got, r[out_name]):
                print(f"{k} at {nt} thread(s) differs from the interpreter: max |diff| "
                      f"{np.abs(got.astype(np.float64) - r[out_name]).max()}")
                raise SystemExit(1)
            ops: dict = {}
            for ins in compiled[k].last.ir.code:
                ops[ins.op] = ops.get(ins.op, 0) + 1
            main_ops = {o: n for o, n in ops.items() if o.startswith("q") or o in ("conv", "matmul")}
            print(f"  {model} threads {nt}: {k} bit-exact with the interpreter; IR ops {main_ops}; "
                  f"compile {compile_s[k]:.2f} s")
        rounds = alternating_rounds(impls, a.rounds, lambda k: time_call(calls[k], a.seconds))  # noqa: B023
        med = {k: statistics.median(v) for k, v in rounds.items()}
        low = {k: min(v) for k, v in rounds.items()}
        base = med.get("ort-int8")
        print(f"  {model} threads {nt}   load {open('/proc/loadavg').read().split()[0]}")
        print(f"  {'impl':10s} {'median ms':>10s} {'min ms':>8s} {'/ort-int8':>10s}")
        for k in impls:
            ratio = f"{med[k] / base:10.2f}" if base else ""
            print(f"  {k:10s} {med[k] * 1e3:10.2f} {low[k] * 1e3:8.2f} {ratio}")
        result["threads"][nt] = {"median_s": med, "min_s": low, "rounds_s": rounds, "compile_s": compile_s,
                                 "over_ort_int8": {k: med[k] / base for k in impls} if base else {}}
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18,mobilenetv2")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    impls = a.impls.split(",")
    if set(impls) - set(IMPLS):
        ap.error(f"--impls: unknown {sorted(set(impls) - set(IMPLS))}; accepted: {', '.join(IMPLS)}")
    result = {"size": a.size, "rounds": a.rounds, "models": {}}
    for model in a.models.split(","):
        result["models"][model] = bench_model(model, a, impls)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
