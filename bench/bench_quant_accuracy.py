"""Accuracy of Glow Kit's quantization beside onnxruntime's, on the ResNet-18-style and MobileNetV2-style networks.

    python bench/bench_quant_accuracy.py [--size 64] [--models resnet18,mobilenetv2] [--calib 16] [--test 32]
                                         [--quick] [--json out.json]

For each network (glow_conformance.example_models, seeded weights, input [1, 3, size, size], 1000 classes), with
``--calib`` seeded standard-normal calibration inputs and ``--test`` other ones:

1. Glow Kit: ``quantization.profile`` over the calibration inputs, then, for each schema (asymmetric, symmetric,
   symmetric_uint8, power2; weights of the same schema) with per-channel weights off and on (int8, MinMax
   calibration), and asymmetric activations with symmetric weights (the default ``weight_schema`` under
   ``schema="asymmetric"``, onnxruntime's settings), the model compiled
   with ``quantize=`` for the reference interpreter and run on the test inputs.
2. onnxruntime: ``quantize_static`` (QDQ format, MinMax, int8 activations and weights, per-channel off and on)
   on the same calibration inputs, run by onnxruntime's CPU provider on the test inputs.
3. The per-channel onnxruntime QDQ model imported by Glow Kit (as integer primitives: the IR's qconv/qmatmul
   count is shown) and run on the interpreter and on the cpu backend. A backend that refuses ``qconv`` (the cpu
   backend until its int8 kernels land) runs the model's QDQ structure in float (dequantize, float conv,
   quantize): the IR column shows which.

Every figure is against the float32 model run by onnxruntime: output SQNR in dB (10 log10 of the summed squared
float output over the summed squared difference, over all test inputs) and top-1 agreement (argmax equal).
``--quick``: size 32, 4 calibration and 4 test inputs, ResNet-18 only, two schemas (a smoke run).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType  # noqa: E402
from onnxruntime.quantization import quantize_static  # noqa: E402
from onnxruntime.quantization.shape_inference import quant_pre_process  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import glow_core  # noqa: E402
from glow_conformance import example_models  # noqa: E402
from glow_core import quantization  # noqa: E402


class _Reader(CalibrationDataReader):
    def __init__(self, samples):
        self.it = iter(samples)

    def get_next(self):
        return next(self.it, None)


def inputs(seed: int, count: int, size: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"input": rng.standard_normal((1, 3, size, size)).astype(np.float32)} for _ in range(count)]


def session(path_or_model, threads: int = 1) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    src = path_or_model if isinstance(path_or_model, str) else path_or_model.SerializeToString()
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def score(ref: list, got: list) -> dict:
    """Output SQNR (dB) over all inputs and top-1 agreement of ``got`` against ``ref``."""
    sig = sum(float(np.sum(np.float64(r) ** 2)) for r in ref)
    noise = sum(float(np.sum((np.float64(r) - np.float64(g)) ** 2)) for r, g in zip(ref, got))
    agree = sum(int(np.argmax(r) == np.argmax(g)) for r, g in zip(ref, got))
    return {"sqnr": 10 * np.log10(sig / noise) if noise > 0 else float("inf"), "top1": agree / len(ref)}


def ort_qdq(model: onnx.ModelProto, calib: list, per_channel: bool, tmp: str, name: str) -> str:
    """onnxruntime's quantize_static (QDQ, MinMax, int8/int8) of ``model`` on ``calib``; the path it wrote."""
    f32, pre, out = (os.path.join(tmp, f"{name}{s}.onnx") for s in ("", "_pre", f"_qdq_pc{int(per_channel)}"))
    onnx.save(model, f32)
    quant_pre_process(f32, pre, skip_symbolic_shape=True)
    quantize_static(pre, out, _Reader(calib), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax)
    return out


def ir_ops(cm) -> dict:
    counts: dict = {}
    for ins in cm.last.ir.instrs:
        counts[ins.op] = counts.get(ins.op, 0) + 1
    return counts


def run_model(name: str, args, schemas) -> list[dict]:
    size = args.size
    model = getattr(example_models, name)(size=size)
    calib, test = inputs(1, args.calib, size), inputs(2, args.test, size)
    ref = [session(model).run(None, x)[0] for x in test]
    rows = []

    def row(who, config, got, **extra):
        r = {"model": name, "who": who, "config": config, **score(ref, got), **extra}
        rows.append(r)
        print(f"{name:12s} {who:34s} {config:34s} SQNR {r['sqnr']:6.2f} dB  top-1 {100 * r['top1']:5.1f}%"
              + "".join(f"  {k} {v}" for k, v in extra.items()), flush=True)

    t = time.perf_counter()
    prof = quantization.profile(model, calib)
    print(f"{name}: profiled {len(prof.tensors)} tensors over {prof.samples} inputs in "
          f"{time.perf_counter() - t:.1f} s", flush=True)
    configs = [(schema, None) for schema in schemas] + [("asymmetric", "symmetric")]
    for schema, wschema in configs:
        for pc in (False, True):
            cm = glow_core.compile(model, "interpreter", quantize=prof, schema=schema,
                                   weight_schema=wschema or schema, per_channel=pc)
            st = cm.last.stats["quantization"]
            label = schema if wschema is None else f"{schema}, {wschema} weights (default)"
            row("glow (interpreter)", f"{label}, per-channel {'on' if pc else 'off'}",
                [cm.run(x)["output"] for x in test], float_nodes=len(st["float_nodes"]))
    with tempfile.TemporaryDirectory() as tmp:
        qdq = {}
        for pc in (False, True):
            qdq[pc] = ort_qdq(model, calib, pc, tmp, name)
            s = session(qdq[pc])
            ort_out = [s.run(None, x)[0] for x in test]
            row("onnxruntime quantize_static", f"QDQ MinMax int8, per-channel {'on' if pc else 'off'}", ort_out)
        ort_out = [session(qdq[True]).run(None, x)[0] for x in test]
        for backend in ("interpreter", "cpu"):
            cm = glow_core.compile(qdq[True], backend)
            got = [cm.run(x)["output"] for x in test]
            ops = ir_ops(cm)
            row(f"ORT QDQ model on glow {backend}", "per-channel on", got,
                vs_ort_sqnr_db=round(score(ort_out, got)["sqnr"], 2),
                ir=f"qconv {ops.get('qconv', 0)} qmatmul {ops.get('qmatmul', 0)} float conv {ops.get('conv', 0)}")
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18,mobilenetv2")
    ap.add_argument("--size", type=int, default=64, help="input height and width (default 64)")
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--test", type=int, default=32)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    schemas = quantization.SCHEMAS
    if args.quick:
        args.models, args.size, args.calib, args.test = "resnet18", 32, 4, 4
        schemas = ("asymmetric", "symmetric")
    rows = []
    for name in args.models.split(","):
        rows += run_model(name, args, schemas)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
