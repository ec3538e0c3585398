"""Int8 networks for the NPU's benchmarks: ResNet-18 and MobileNetV2 (glow_conformance.example_models), quantized by the
kit's profile flow or by onnxruntime's ``quantize_static`` (QDQ), and the MAC share of a compiled model."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx

from glow_conformance import example_models
from glow_core import quantization


def feeds(model, rng, n=1):
    out = []
    for _ in range(n):
        d = {}
        for i in model.graph.input:
            shape = [x.dim_value for x in i.type.tensor_type.shape.dim]
            d[i.name] = rng.standard_normal(shape).astype(np.float32)
        out.append(d)
    return out


def build(name: str, size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    if name == "resnet18":
        return example_models.resnet18(seed=0, size=size, classes=classes)
    if name == "mobilenetv2":
        return example_models.mobilenetv2(seed=0, size=size, classes=classes)
    raise ValueError(name)


def kit_quantized(model, calib):
    """(model, compile options): the kit's flow, a profile of the float model (per-channel weights)."""
    return model, {"quantize": quantization.profile(model, calib), "per_channel": True}


def ort_qdq(model, calib, per_channel=True, act="uint8"):
    """onnxruntime.quantization.quantize_static's QDQ model (MinMax, asymmetric activations, symmetric weights)."""
    from onnxruntime import quantization as q
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)
    with tempfile.TemporaryDirectory() as tmp:
        f32, pre, out = (os.path.join(tmp, f) for f in ("f32.onnx", "pre.onnx", "qdq.onnx"))
        onnx.save(model, f32)
        quant_pre_process(f32, pre, skip_symbolic_shape=True)
        q.quantize_static(pre, out, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=per_channel,
                          activation_type=q.QuantType.QInt8 if act == "int8" else q.QuantType.QUInt8,
                          weight_type=q.QuantType.QInt8, calibrate_method=q.CalibrationMethod.MinMax)
        return onnx.load(out)


def mac_share(cm) -> tuple[int, int]:
    """(MACs of qconv/qmatmul run on the npu, MACs of every conv/matmul of the compiled model) from the placement
    graph's partitions."""
    res = cm.last
    on_npu = total = 0
    parts = [(res.plan.backends[p.backend].name, r) for p, r in zip(res.plan.partitions, res.parts)] \
        if hasattr(res, "plan") else [(cm.backend.name, res)]
    for backend, r in parts:
        for n in r.graph.nodes:
            if n.op in ("qconv", "conv"):
                w = n.inputs[1].type.shape
                macs = n.outputs[0].type.numel * int(np.prod(w[1:]))
            elif n.op in ("qmatmul", "matmul"):
                macs = n.outputs[0].type.numel * n.inputs[0].type.shape[-1]
            else:
                continue
            total += macs
            on_npu += macs if backend == "npu" else 0
    return on_npu, total
