"""Day-one tests of the '{{ cookiecutter.backend_name }}' backend: it is discovered, runs Glow Kit's example models
(int8, with cpu fallback) bit-identical to the interpreter's fixed-point run, its own max/min job computes what
numpy says, tiles fit a small scratchpad, and it reports cycles against the roofline. Run: python -m pytest -q"""
import subprocess
import sys
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import glow_core
from glow_conformance import example_models
from glow_core import quantization
from glow_core.discovery import available_backends, get_backend

NAME = "{{ cookiecutter.backend_name }}"


def _inputs(model, seed=0):
    rng = np.random.default_rng(seed)
    return {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
            for vi in model.graph.input}


def _compile(model, **opts):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the FallbackWarning naming what runs on the cpu
        return glow_core.compile(model, backend=NAME, **opts)


def _device_functions(cm):
    """The compiled functions of the partitions the device runs."""
    res = cm.last
    if not hasattr(res, "parts"):  # the whole model on the device: not partitioned
        return [res.compiled]
    return [r.compiled for p, r in zip(res.plan.partitions, res.parts) if res.plan.backends[p.backend].name == NAME]


def test_discovered():
    assert NAME in available_backends(), "pip install -e . registers the glow_core.backends entry point"
    assert get_backend(NAME).name == NAME
    out = subprocess.run([sys.executable, "-m", "glow_tools.cli", "backends"], capture_output=True, text=True)
    assert out.returncode == 0 and NAME in out.stdout.split(), out.stderr


@pytest.mark.parametrize("model_name", sorted(example_models.MODELS))
def test_example_model_int8_matches_interpreter(model_name):
    """Quantized by the kit's flow; what the device claims runs on it, the rest on the cpu; the outputs equal the
    interpreter's int8 run in fixed-point mode, bit for bit."""
    model = example_models.MODELS[model_name]()
    opts = {"quantize": quantization.profile(model, [_inputs(model, seed=1)])}
    feeds = _inputs(model)
    cm = _compile(model, **opts)
    want = glow_core.compile(model, backend="interpreter", requant="fixed_point", **opts).run(feeds)
    got = cm.run(feeds)
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=f"{model_name}: output {k}")
    assert cm.placement().count(NAME) >= 1, cm.placement()


def test_float_model_runs_on_the_fallback():
    """A float model: the device claims none of it (it computes int8), the cpu runs it all."""
    model = example_models.cnn()
    feeds = _inputs(model)
    cm = _compile(model)
    want = glow_core.compile(model, backend="interpreter").run(feeds)
    np.testing.assert_allclose(cm.run(feeds)["output"], want["output"], rtol=1e-4, atol=1e-5)
    assert {n.backend for n in cm.placement().nodes} == {"cpu"}


@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("n", [7, 256 * 3 + 5, 70000])
def test_max_min_run_the_emitters_job(op, n):
    """max and min run emitter.MinMaxJob (tiles of whole rows and a tail; several double-buffered tiles for the
    largest): numpy's answer on int8 values."""
    vi = lambda name: helper.make_tensor_value_info(name, TensorProto.INT8, [n])
    model = helper.make_model(helper.make_graph([helper.make_node(op, ["a", "b"], ["y"])], "g", [vi("a"), vi("b")],
                                                [vi("y")]), opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(n)
    a, b = (rng.integers(-128, 128, n).astype(np.int8) for _ in range(2))
    cm = _compile(model)
    got = cm.run({"a": a, "b": b})["y"]
    np.testing.assert_array_equal(got, np.maximum(a, b) if op == "Max" else np.minimum(a, b))
    (fn,) = _device_functions(cm)
    assert [type(job).__name__ for layer in fn.layers for job, _ in layer.jobs] == ["MinMaxJob"]
    assert "MinMaxJob tile r=" in fn.describe()


def test_tiles_fit_a_small_scratchpad():
    """16 KiB scratchpads: the tiling adapts (more DRAM traffic), the answer does not change."""
    model = example_models.resnet()
    opts = {"quantize": quantization.profile(model, [_inputs(model, seed=1)])}
    feeds = _inputs(model)
    small = _compile(model, npu_config={"input_spm_bytes": 16384, "weight_spm_bytes": 16384,
                                        "acc_spm_bytes": 16384}, **opts)
    default = _compile(model, **opts)
    np.testing.assert_array_equal(small.run(feeds)["output"], default.run(feeds)["output"])
    assert small.stats()[NAME]["dram_bytes"] > default.stats()[NAME]["dram_bytes"]


def test_stats_against_the_roofline():
    model = example_models.resnet()
    cm = _compile(model, quantize=quantization.profile(model, [_inputs(model, seed=1)]))
    cm.run(_inputs(model))
    st = cm.stats()[NAME]
    assert st["cycles"] > 0 and st["macs"] > 0 and 0 < st["mac_utilization"] <= 1
    assert all(lay["cycles"] >= 0 and lay["bound_cycles"] > 0 for lay in st["layers"])
    assert any(lay["op"] == "qconv+qadd" for lay in st["layers"])  # the residual adds run in the convs' epilogues
    (fn, *_) = _device_functions(cm)
    assert type(fn.sim).__name__ == "Device" and fn.asm().split()[1] in ("LOAD", "GEMM", "VEC", "REQ", "STORE")


def test_known_failures_parse():
    for pattern, reason in get_backend(NAME).known_failures():
        assert pattern and reason
