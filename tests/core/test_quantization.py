"""glow_core.quantization end to end: profiles (ranges against onnxruntime's float run, save/load, the mismatch
errors), compiling with quantize= (integer primitives in the IR, accuracy against onnxruntime's float run),
keep_float and backend refusals listed with reasons, float16/bfloat16 conversion, pre-quantized models written by
onnxruntime.quantization (QDQ and QOperator) imported as integer primitives and checked against onnxruntime's own
int8 run, and the glowc profile / quantize-report / --quantize commands."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

import glow_core
from glow_tools import cli
from glow_conformance import example_models
from glow_core import quantization
from glow_core.backend import Unsupported
from glow_core.errors import GlowError
from glow_core.ops.registry import get_primitive
from glow_interpreter.backend import InterpreterBackend


def samples(seed, count, shape=(1, 3, 28, 28)):
    rng = np.random.default_rng(seed)
    return [{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]


def ort_run(model, feeds):
    s = ort.InferenceSession(model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model),
                             providers=["CPUExecutionProvider"])
    return [s.run(None, f)[0] for f in feeds]


def sqnr(ref, got):
    ref, got = np.float64(ref), np.float64(got)
    return 10 * np.log10(np.sum(ref ** 2) / np.sum((ref - got) ** 2))


@pytest.fixture(scope="module")
def cnn():
    return example_models.cnn(seed=3)


@pytest.fixture(scope="module")
def prof(cnn):
    return quantization.profile(cnn, samples(0, 8))


def test_profile_ranges_match_onnxruntime(cnn, prof):
    feeds = samples(0, 8)
    x = np.stack([f["input"] for f in feeds])
    assert prof.samples == 8
    assert prof.tensors["input"].min == pytest.approx(float(x.min())) and \
        prof.tensors["input"].max == pytest.approx(float(x.max()))
    out = np.stack(ort_run(cnn, feeds))
    t = prof.tensors["output"]
    assert t.min == pytest.approx(float(out.min()), rel=1e-4, abs=1e-5)
    assert t.max == pytest.approx(float(out.max()), rel=1e-4, abs=1e-5)
    assert t.counts.sum() == pytest.approx(out.size)
    # every ONNX value of the model that is a float tensor has an entry, named as in the model
    assert {n.output[0] for n in cnn.graph.node} <= set(prof.tensors)


def test_profile_save_load_and_mismatch(cnn, prof, tmp_path):
    path = tmp_path / "p.json"
    prof.save(path)
    d = json.loads(path.read_text())
    assert d["format"] == "glow-kit-profile" and d["tool"].startswith("glow-kit ")
    assert set(d["graph"]) == {"structure", "weights", "inputs"} and d["graph"]["inputs"] == {"input": [1, 3, 28, 28]}
    back = quantization.Profile.load(path, cnn)
    assert back.samples == 8 and set(back.tensors) == set(prof.tensors)
    np.testing.assert_allclose(back.tensors["output"].counts, prof.tensors["output"].counts, rtol=1e-5)
    with pytest.raises(GlowError, match="another graph.*another model"):
        quantization.Profile.load(path, example_models.linear_sigmoid())
    with pytest.raises(GlowError, match="recorded for input shapes"):
        glow_core.compile(example_models.cnn(seed=3, batch=2), "interpreter", quantize=str(path))
    with pytest.raises(GlowError, match="other weights"):
        glow_core.compile(example_models.cnn(seed=4), "interpreter", quantize=str(path))
    path.write_text('{"format": "something else"}')
    with pytest.raises(GlowError, match="not a Glow Kit profile"):
        quantization.Profile.load(path)


@pytest.mark.parametrize("options", [dict(schema=s) for s in quantization.SCHEMAS]
                         + [dict(per_channel=True), dict(calibration="entropy"), dict(calibration="percentile"),
                            dict(precision="int16")], ids=str)
def test_quantized_cnn_on_integer_primitives(cnn, prof, options):
    cm = glow_core.compile(cnn, "interpreter", quantize=prof, **options)
    st = cm.last.stats["quantization"]
    assert st["float_nodes"] == [] and st["quantized_nodes"] >= 4
    convs = [i for i in cm.last.ir.instrs if i.op == "qconv"]
    assert len(convs) == 1 and not any(i.op == "conv" for i in cm.last.ir.instrs)
    signed = "int16" if options.get("precision") == "int16" else "int8"
    assert convs[0].ins[0].type.dtype.name == signed  # the input has negative values
    # the conv's output goes through Relu (folded into the qconv's clamp): never negative
    assert convs[0].outs[0].type.dtype.name == ("uint8" if options.get("schema") == "symmetric_uint8" else signed)
    # on the calibration inputs (no value outside the profiled ranges, so minmax clips nothing), against the
    # float model run by onnxruntime; entropy and percentile calibration clip ranges on purpose
    cal = samples(0, 8)
    ref, got = ort_run(cnn, cal), [cm.run(f)["output"] for f in cal]
    clipping = options.get("calibration") in ("entropy", "percentile")
    assert sqnr(np.stack(ref), np.stack(got)) > (65 if options.get("precision") == "int16" else 15 if clipping else 30)


def test_keep_float_by_name_and_op_type(cnn, prof):
    for keep in (["conv1"], ["Conv"]):
        cm = glow_core.compile(cnn, "interpreter", quantize=prof, keep_float=keep)
        ops = [i.op for i in cm.last.ir.instrs]
        assert "conv" in ops and "qconv" not in ops and "qmatmul" in ops
        assert ("conv1", "conv", "kept in float (keep_float)") in cm.last.stats["quantization"]["float_nodes"]
    with pytest.raises(GlowError, match="'nosuchnode' matches no node"):
        glow_core.compile(cnn, "interpreter", quantize=prof, keep_float=["nosuchnode"])


class _NoQConv(InterpreterBackend):
    """A device without an int8 convolution."""

    name = "no-qconv"

    def is_op_supported(self, node_info):
        if node_info.op == "qconv":
            return Unsupported("the MAC array has no int8 mode")
        return super().is_op_supported(node_info)


def test_refused_quantized_form_stays_float_with_reason(cnn, prof):
    cm = glow_core.compile(cnn, _NoQConv(), quantize=prof)
    floats = cm.last.stats["quantization"]["float_nodes"]
    assert ("conv1", "conv", "the MAC array has no int8 mode") in floats
    ops = [i.op for i in cm.last.ir.instrs]
    assert "conv" in ops and "qconv" not in ops and "qmatmul" in ops and "quantize" in ops
    test = samples(1, 2)
    assert sqnr(np.stack(ort_run(cnn, test)), np.stack([cm.run(f)["output"] for f in test])) > 25


@pytest.mark.parametrize("to", ["float16", "bfloat16"])
def test_convert_to(cnn, to):
    cm = glow_core.compile(cnn, "interpreter", convert_to=to, keep_float=["fc"])
    conv = next(i for i in cm.last.ir.instrs if i.op == "conv")
    assert conv.outs[0].type.dtype.name == to
    assert next(i for i in cm.last.ir.instrs if i.op == "matmul").outs[0].type.dtype.name == "float32"
    test = samples(1, 2)
    assert sqnr(np.stack(ort_run(cnn, test)), np.stack([cm.run(f)["output"] for f in test])) > \
        (50 if to == "float16" else 30)


# -- models quantized by onnxruntime ---------------------------------------------------------------------------
class _Reader(CalibrationDataReader):
    def __init__(self, feeds):
        self.it = iter(feeds)

    def get_next(self):
        return next(self.it, None)


@pytest.mark.parametrize("fmt,per_channel,act", [("QDQ", False, "int8"), ("QDQ", True, "int8"),
                                                 ("QDQ", False, "uint8"), ("QOperator", True, "uint8"),
                                                 ("QOperator", False, "int8")])
def test_onnxruntime_quantized_model_imports_as_integer_primitives(tmp_path, fmt, per_channel, act):
    f32, q = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(example_models.resnet(seed=1, size=16, widths=(8, 16), blocks=1), tmp_path / "raw.onnx")
    quant_pre_process(str(tmp_path / "raw.onnx"), str(f32), skip_symbolic_shape=True)  # folds BatchNormalization
    quantize_static(str(f32), str(q), _Reader(samples(0, 4, (1, 3, 16, 16))), per_channel=per_channel,
                    quant_format=getattr(QuantFormat, fmt),
                    activation_type=QuantType.QInt8 if act == "int8" else QuantType.QUInt8,
                    weight_type=QuantType.QInt8,
                    # QOperator: only ai.onnx ops (onnxruntime writes QLinearAdd, QGemm in its own domain)
                    op_types_to_quantize=["Conv"] if fmt == "QOperator" else None)
    cm = glow_core.compile(str(q), "interpreter")
    convs = [i for i in cm.last.ir.instrs if i.op == "qconv"]
    floats = ("conv",) if fmt == "QOperator" else ("conv", "matmul")
    assert len(convs) == 6 and not any(i.op in floats for i in cm.last.ir.instrs)
    assert {c.ins[0].type.dtype.name for c in convs} == {act} and get_primitive("qconv").quantized == "own"
    test = samples(1, 4, (1, 3, 16, 16))
    ours, theirs = np.stack([cm.run(f)["output"] for f in test]), np.stack(ort_run(q, test))
    ref = np.stack(ort_run(onnx.load(f32), test))
    assert sqnr(ref, ours) >= sqnr(ref, theirs) - 0.5
    # the output is a dequantized int8/uint8 tensor: onnxruntime's and ours differ by at most 1 LSB of it
    out_scale = max(onnx.numpy_helper.to_array(t).max() for t in onnx.load(q).graph.initializer
                    if t.name.startswith("output") and t.name.endswith("scale")) if fmt == "QDQ" else None
    if out_scale is not None:
        assert np.max(np.abs(ours - theirs)) <= out_scale * 1.001


# -- glowc -----------------------------------------------------------------------------------------------------
def test_glowc_profile_quantize_report(cnn, tmp_path, capsys):
    model = tmp_path / "cnn.onnx"
    onnx.save(cnn, model)
    np.save(tmp_path / "cal.npy", np.stack([f["input"] for f in samples(0, 6)]))
    np.save(tmp_path / "test.npy", np.stack([f["input"] for f in samples(1, 3)]))
    np.save(tmp_path / "x.npy", samples(1, 1)[0]["input"])
    prof = tmp_path / "p.json"
    assert cli.main(["profile", str(model), "--input", f"input={tmp_path / 'cal.npy'}", "-o", str(prof)]) == 0
    assert "over 6 samples" in capsys.readouterr().out
    assert quantization.Profile.load(prof, cnn).samples == 6
    assert cli.main(["dump", str(model), "--ir", "--quantize", str(prof), "--per-channel"]) == 0
    assert "qconv @out" in capsys.readouterr().out
    assert cli.main(["run", str(model), "--quantize", str(prof), "--input", f"input={tmp_path / 'x.npy'}",
                     "--output-dir", str(tmp_path / "out")]) == 0
    ref = ort_run(cnn, samples(1, 1))[0]
    assert sqnr(ref, np.load(tmp_path / "out" / "output.npy")) > 25
    assert cli.main(["quantize-report", str(model), "--profile", str(prof), "--input",
                     f"input={tmp_path / 'test.npy'}", "--keep-float", "conv1"]) == 0
    out = capsys.readouterr().out
    assert "output output: SQNR" in out and "top-1 agreement" in out and "over 3 inputs" in out
    assert "with --keep-float conv1 against everything quantized:" in out
    assert "conv1, conv: kept in float (keep_float)" in out
    assert cli.main(["run", str(model), "--quantize", str(tmp_path / "missing.json")]) != 0
    assert "cannot read profile" in capsys.readouterr().err


def test_default_weights_are_symmetric_under_asymmetric_activations(cnn, prof):
    """The default recipe is onnxruntime's: asymmetric activations, weights with offset 0 (no input-sum term in the
    accumulator); weight_schema="asymmetric" still gives weights with offsets."""
    gemms = {}
    for ws in (None, "asymmetric"):
        cm = glow_core.compile(cnn, "interpreter", quantize=prof, per_channel=True, weight_schema=ws)
        gemms[ws] = [i for i in cm.last.ir.instrs if i.op in ("qconv", "qmatmul")]
        assert len(gemms[ws]) == 2
    for i in gemms[None]:
        assert not np.asarray(i.ins[4].data).any() and np.asarray(i.ins[1].data).min() >= -127, i.op
    assert any(np.asarray(i.ins[4].data).any() for i in gemms["asymmetric"])


def test_weight_schema_symmetric_with_asymmetric_activations(cnn, prof):
    """onnxruntime's default settings: asymmetric activations, symmetric per-channel weights (offset 0)."""
    cm = glow_core.compile(cnn, "interpreter", quantize=prof, per_channel=True, weight_schema="symmetric")
    gemms = [i for i in cm.last.ir.instrs if i.op in ("qconv", "qmatmul")]
    assert len(gemms) == 2
    for i in gemms:
        w, wo = np.asarray(i.ins[1].data), np.asarray(i.ins[4].data)
        assert wo.size > 1 and not wo.any(), i.op  # per channel, symmetric
        assert w.min() >= -127  # the range [-127, 127]
    assert any(i.attrs["x_offset" if i.op == "qconv" else "a_offset"] != 0 for i in gemms)  # asymmetric
    cal = samples(0, 8)
    assert sqnr(np.stack(ort_run(cnn, cal)), np.stack([cm.run(f)["output"] for f in cal])) > 30
    with pytest.raises(GlowError, match="accepted: asymmetric"):
        glow_core.compile(cnn, "interpreter", quantize=prof, weight_schema="bogus")


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_a_dequantized_mean_over_an_empty_axis_compiles(backend):
    """DequantizeLinear -> ReduceMean of an empty tensor (found by glowc fuzz: quantize_graph crashed on the mean's
    empty divisor): the mean stays float and the answer is onnxruntime's empty (1, 0) tensor."""
    from onnx import helper
    g = helper.make_graph([helper.make_node("DequantizeLinear", ["x", "s"], ["d"]),
                           helper.make_node("ReduceMean", ["d", "a"], ["y"], keepdims=0)], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, [0, 1, 0])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                          [onnx.numpy_helper.from_array(np.array(1.0, np.float32), "s"),
                           onnx.numpy_helper.from_array(np.array([0], np.int64), "a")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    feeds = {"x": np.zeros((0, 1, 0), np.uint8)}
    (want,) = ort_run(m, [feeds])
    assert want.shape == (1, 0)
    got = glow_core.compile(m, backend).run(feeds)["y"]
    assert np.asarray(got).shape == want.shape and np.asarray(got).dtype == np.float32
