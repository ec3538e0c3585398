"""Day-one tests of the '{{ cookiecutter.backend_name }}' backend: it is discovered and matches the reference
interpreter on Glow Kit's built-in example models. Run: python -m pytest -q"""
import subprocess
import sys

import numpy as np
import pytest

import glow_core
from glow_conformance.checker import compare
from glow_conformance import example_models
from glow_core.api import FallbackWarning
from glow_core.discovery import available_backends, get_backend

NAME = "{{ cookiecutter.backend_name }}"


def test_discovered():
    assert NAME in available_backends(), "pip install -e . registers the glow_core.backends entry point"
    assert get_backend(NAME).name == NAME
    out = subprocess.run([sys.executable, "-m", "glow_tools.cli", "backends"], capture_output=True, text=True)
    assert out.returncode == 0 and NAME in out.stdout.split(), out.stderr


def _inputs(model, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("model_name", sorted(example_models.MODELS))
def test_example_model_matches_interpreter(model_name):
    model = example_models.MODELS[model_name]()
    feeds = _inputs(model)
    want = glow_core.compile(model, backend="interpreter").run(feeds)
    got = glow_core.compile(model, backend=NAME).run(feeds)
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=f"{model_name}: output {k}")


def test_dma_is_visible():
    """The simulated device counts what crosses the bus: weights once, inputs in, outputs out."""
    model = example_models.linear_sigmoid()
    cm = glow_core.compile(model, backend=NAME)
    cm.run(_inputs(model))
    dev = cm.last.compiled.device
    p = cm.last.ir.plan
    assert dev.stats.bytes_in == p.constant_size + 3 * 10 * 4
    assert dev.stats.bytes_out == 3 * 5 * 4
    assert dev.stats.launches == len(cm.last.ir.code)


def test_starts_small_with_cpu_fallback():
    """A device that claims only conv and matmul runs whole models: the CPU backend runs the rest."""
    backend = type(get_backend(NAME))()
    backend.CLAIMS = frozenset({"conv", "matmul"})
    model = example_models.resnet()
    feeds = _inputs(model)
    with pytest.warns(FallbackWarning, match=NAME):
        cm = glow_core.compile(model, backend=backend)
    report = cm.placement()
    assert report.count(NAME) >= 1 and report.count("cpu") >= 1
    assert {n.op for n in report.nodes if n.backend == NAME} <= {"conv", "matmul"}
    want = glow_core.compile(model, backend="interpreter").run(feeds)
    compare(cm.run(feeds)["output"], want["output"], "model", "resnet with CPU fallback", rerun="")


def test_known_failures_parse():
    for pattern, reason in get_backend(NAME).known_failures():
        assert pattern and reason
