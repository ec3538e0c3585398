"""Int8 ResNet-18 and MobileNetV2 (small inputs) end to end on the NPU with cpu fallback: quantized by the kit's
profile flow and by onnxruntime's quantize_static (QDQ), outputs identical to the interpreter's fixed-point int8
run, every conv and matmul MAC on the NPU, statistics through CompiledModel.stats(), a trace with the engines'
tracks, and the model-level options (npu_config=, requant=)."""
from __future__ import annotations

import json
import os
import tempfile
import warnings

import numpy as np
import onnx
import pytest

import glow_core
from glow_conformance import example_models
from glow_core import quantization
from glow_core.errors import GlowError


def _feeds(model, rng):
    i = model.graph.input[0]
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)}


def _ort_qdq(model, calib):
    q = pytest.importorskip("onnxruntime.quantization")
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
        q.quantize_static(pre, out, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                          activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8)
        return onnx.load(out)


def _npu_and_reference(model, opts, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        npu = glow_core.compile(model, "npu", **opts)
    ref = glow_core.compile(model, "interpreter", requant="fixed_point", **opts)
    return npu, npu.run(x), ref.run(x)


def _macs(cm):
    """(conv and matmul MACs placed on the npu, all of them)."""
    res = cm.last
    on = total = 0
    for p, r in zip(res.plan.partitions, res.parts):
        for n in r.graph.nodes:
            if n.op in ("qconv", "conv", "qmatmul", "matmul"):
                w = n.inputs[1].type.shape
                k = int(np.prod(w[1:])) if "conv" in n.op else n.inputs[0].type.shape[-1]
                total += n.outputs[0].type.numel * k
                on += n.outputs[0].type.numel * k if res.plan.backends[p.backend].name == "npu" else 0
    return on, total


@pytest.mark.parametrize("name,flow", [("resnet18", "kit"), ("resnet18", "qdq"), ("mobilenetv2", "kit"),
                                       ("mobilenetv2", "qdq")])
def test_network_identical_to_the_interpreter_fixed_point(name, flow):
    build = example_models.resnet18 if name == "resnet18" else example_models.mobilenetv2
    m = build(seed=0, size=32, classes=10)
    rng = np.random.default_rng(0)
    calib = [_feeds(m, rng) for _ in range(2)]
    x = _feeds(m, rng)
    model, opts = (m, {"quantize": quantization.profile(m, calib), "per_channel": True}) if flow == "kit" else \
        (_ort_qdq(m, calib), {})
    npu, got, want = _npu_and_reference(model, opts, x)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    on, total = _macs(npu)
    assert total > 0 and on / total >= 0.99
    stats = npu.stats()
    st = stats["npu"]
    assert set(stats) == {"npu"}
    assert st["macs"] == on
    assert st["cycles"] > 0 and 0 < st["mac_utilization"] <= 1 and st["dram_bytes"] > 0
    assert all(lay["cycles"] >= 0 and lay["bound_cycles"] > 0 for lay in st["layers"])
    assert sum(lay["cycles"] for lay in st["layers"]) <= st["cycles"]
    if name == "resnet18":  # every residual add runs in its conv's epilogue, whatever the memory plan
        ops = [lay["op"] for lay in st["layers"]]
        assert ops.count("qconv+qadd") == 8 and "qadd" not in ops, ops
    placement = str(npu.placement())
    assert "quantize runs on the fallback" in placement


def test_npu_config_option_trace_and_requant_conflict(tmp_path):
    m = example_models.resnet(seed=1, size=16, widths=(8, 16), blocks=1)
    rng = np.random.default_rng(1)
    prof = quantization.profile(m, [_feeds(m, rng)])
    x = _feeds(m, rng)
    cfg = tmp_path / "npu.json"
    cfg.write_text(json.dumps({"input_spm_bytes": 8192, "weight_spm_bytes": 8192, "acc_spm_bytes": 16384}))
    trace = tmp_path / "trace.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        small = glow_core.compile(m, "npu", quantize=prof, npu_config=str(cfg), trace=str(trace))
        big = glow_core.compile(m, "npu", quantize=prof)
    a, b = small.run(x), big.run(x)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    s_small, s_big = small.stats()["npu"], big.stats()["npu"]
    assert s_small["config"]["input_spm_bytes"] == 8192
    assert s_small["dram_bytes"] >= s_big["dram_bytes"]
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert {t for t in tracks if t.endswith((": load", ": compute", ": store"))}, tracks
    with pytest.raises(GlowError, match="requires the compile option requant='fixed_point'"):
        glow_core.compile(m, "npu", quantize=prof, requant="float32")


def test_glowc_dump_asm_prints_tilings_and_program(tmp_path, capsys):
    from glow_tools.cli import main
    m = example_models.resnet(seed=1, size=16, widths=(8, 16), blocks=1)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    prof = quantization.profile(m, [_feeds(m, np.random.default_rng(2))])
    prof.save(str(tmp_path / "p.json"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["dump", str(path), "--backend", "npu", "--quantize", str(tmp_path / "p.json"), "--asm"]) == 0
    out = capsys.readouterr().out
    assert "npu program for" in out and "ConvJob tile oh=" in out
    assert "order f>sp>c" in out or "order sp>f>c" in out
    lines = [ln for ln in out.splitlines() if ln.strip()[:1].isdigit() and " GEMM " in ln]
    assert lines and "; conv" in lines[0]
    from glow_npu.isa import assemble
    assert assemble("\n".join(ln for ln in out.splitlines() if ln.strip()[:1].isdigit()))
