"""The CPU backend end to end: example models vs the interpreter, bundles built with make and run without
Python, the on-disk cache (parallel safety, no compiler on a cached recompile), hostile names, run-time errors
and unsupported types rejected before any C is compiled."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_conformance import example_models
from glow_core.errors import GlowError, UnsupportedOpError
from glow_cpu.build import toolchain

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None
                                and not os.environ.get("CC"), reason="no C compiler")

EXAMPLES = {
    "cnn": (lambda: example_models.cnn(seed=3), "input", (1, 3, 28, 28), "output"),
    "cnn_batch2": (lambda: example_models.cnn(seed=4, batch=2), "input", (2, 3, 28, 28), "output"),
    "linear_sigmoid": (lambda: example_models.linear_sigmoid(seed=5), "input_1", (3, 10), "output_1"),
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("threads", [1, 2])
def test_examples_match_interpreter(name, threads):
    build, inp, shape, out = EXAMPLES[name]
    model = build()
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    want = glow_core.compile(model, "interpreter").run({inp: x})[out]
    cm = glow_core.compile(model, "cpu", num_threads=threads)
    got = cm.run({inp: x})[out]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    # Runs are independent: a second input gives its own answer, and the first one again the same.
    x2 = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    assert np.abs(cm.run({inp: x2})[out] - got).max() > 1e-4
    np.testing.assert_array_equal(cm.run({inp: x})[out], got)


def test_multithreaded_kernels_match_interpreter():
    """Shapes above the OpenMP thresholds (gemm, elementwise, reduction, conv) with 2 threads."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32) * 0.1, "w")
    nodes = [helper.make_node("MatMul", ["a", "b"], ["ab"]),
             helper.make_node("Add", ["ab", "a"], ["s"]),
             helper.make_node("ReduceSum", ["s"], ["r"], keepdims=0, axes=None),
             helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMax", ["y"], ["ym"], axes=[0, 2, 3], keepdims=0)]
    model = _model(nodes, [helper.make_tensor_value_info("a", TensorProto.FLOAT, [384, 384]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [384, 384]),
                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 40, 40])],
                   [helper.make_tensor_value_info("s", TensorProto.FLOAT, [384, 384]),
                    helper.make_tensor_value_info("r", TensorProto.FLOAT, []),
                    helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32, 40, 40]),
                    helper.make_tensor_value_info("ym", TensorProto.FLOAT, [32])], [w])
    feed = {"a": rng.standard_normal((384, 384)).astype(np.float32),
            "b": rng.standard_normal((384, 384)).astype(np.float32),
            "x": rng.standard_normal((2, 16, 40, 40)).astype(np.float32)}
    want = glow_core.compile(model, "interpreter").run(feed)
    got = glow_core.compile(model, "cpu", num_threads=2).run(feed)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-3 * max(1.0, np.abs(want[k]).max()),
                                   err_msg=k)


def test_cached_recompile_runs_no_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOW_CACHE_DIR", str(tmp_path))
    model = example_models.linear_sigmoid(seed=1)
    x = np.random.default_rng(0).standard_normal((3, 10)).astype(np.float32)
    before = toolchain.COMPILER_RUNS
    first = glow_core.compile(model, "cpu", num_threads=1).run({"input_1": x})["output_1"]
    assert toolchain.COMPILER_RUNS == before + 1
    assert any(f.startswith("glow_lib_") and f.endswith(".so") for f in os.listdir(tmp_path))

    def no_compiler(*a, **k):
        raise AssertionError("the compiler ran on a cached model")
    monkeypatch.setattr(toolchain.subprocess, "Popen", no_compiler)
    again = glow_core.compile(model, "cpu", num_threads=1).run({"input_1": x})["output_1"]
    assert toolchain.COMPILER_RUNS == before + 1
    np.testing.assert_array_equal(first, again)


def test_parallel_processes_share_an_empty_cache(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    x = np.random.default_rng(0).standard_normal((1, 3, 28, 28)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    want = glow_core.compile(example_models.cnn(seed=7), "interpreter").run({"input": x})["output"]
    script = textwrap.dedent(f"""
        import numpy as np, glow_core
        from glow_conformance import example_models
        x = np.load({str(tmp_path / 'x.npy')!r})
        out = glow_core.compile(example_models.cnn(seed=7), "cpu", num_threads=1).run({{"input": x}})["output"]
        np.save(__import__("sys").argv[1], out)
    """)
    env = dict(os.environ, GLOW_CACHE_DIR=str(cache))
    one = tmp_path / "one"  # the shard libraries one build makes
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "out_one.npy")],
                   env=dict(env, GLOW_CACHE_DIR=str(one)), check=True)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / f"out{i}.npy")], env=env,
                              stderr=subprocess.PIPE, text=True) for i in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    for i in range(3):
        np.testing.assert_allclose(np.load(tmp_path / f"out{i}.npy"), want, rtol=1e-5, atol=1e-5)
    # Each kernel's cache entry links to a shard library the three processes built alike (the ones a single
    # build makes); nothing half-written is left behind.
    files = os.listdir(cache)
    links = [f for f in files if f.startswith("glow_k_")]
    libs = {os.path.realpath(cache / f) for f in links}
    single = {os.path.basename(os.path.realpath(one / f)) for f in os.listdir(one) if f.startswith("glow_k_")}
    assert links and {os.path.basename(p) for p in libs} == single and all(os.path.isfile(p) for p in libs)
    assert not [f for f in files if f.startswith(".tmp")]


HOSTILE = ['in"put', "*/ int evil; /*", "line\nbreak\\", "#include <stdio.h>", "int", "x" * 300, "ñ日本語 ü",
           "??/", "a\rb\tc", ""]


def hostile_model():
    names = HOSTILE
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) * 0.1, names[3])
    nodes = [
        helper.make_node("Add", [names[0], names[3]], [names[1]], name=names[5]),
        helper.make_node("Relu", [names[1]], [names[2]], name=names[1]),
        helper.make_node("Mul", [names[2], names[0]], [names[6]], name=names[7]),
        helper.make_node("Neg", [names[6]], [names[4]], name=names[8]),
    ]
    g = helper.make_graph(nodes, "*/ #define main\n",
                          [helper.make_tensor_value_info(names[0], TensorProto.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info(names[4], TensorProto.FLOAT, [3, 4]),
                           helper.make_tensor_value_info(names[6], TensorProto.FLOAT, [3, 4])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_hostile_names(tmp_path):
    model = hostile_model()
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    w = np.arange(12, dtype=np.float32).reshape(3, 4) * 0.1
    cm = glow_core.compile(model, "cpu", num_threads=1)
    out = cm.run({HOSTILE[0]: x})
    m = np.maximum(x + w, 0) * x
    np.testing.assert_allclose(out[HOSTILE[6]], m, rtol=1e-6)
    np.testing.assert_allclose(out[HOSTILE[4]], -m, rtol=1e-6)
    src = cm.last.compiled.source
    for n in HOSTILE:
        if len(n) > 3:
            assert n not in src
    # The bundle of the same model builds too (sanitized macro and file names).
    if shutil.which("make"):
        files = cm.backend.emit_bundle(cm.last.ir, str(tmp_path / "b"), {"bundle_name": "*/evil name"})
        r = subprocess.run(["make", "-C", str(tmp_path / "b")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert any(f.endswith(".weights.bin") for f in files)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_cnn_bundle_builds_and_runs_without_python(tmp_path):
    model = example_models.cnn(seed=3)
    onnx_path = tmp_path / "cnn.onnx"
    onnx_path.write_bytes(model.SerializeToString())
    out_dir = tmp_path / "bundle"
    r = subprocess.run([sys.executable, "-m", "glow_tools.cli", "compile", str(onnx_path), "--backend", "cpu",
                        "--emit-bundle", str(out_dir), "--bundle-name", "cnn"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    header = (out_dir / "cnn.h").read_text()
    for macro in ("CNN_CONSTANT_MEM_SIZE", "CNN_MUTABLE_MEM_SIZE", "CNN_ACTIVATIONS_MEM_SIZE", "CNN_MEM_ALIGN",
                  "CNN_input_OFFSET", "CNN_output_OFFSET"):
        assert macro in header
    r = subprocess.run(["make", "-C", str(out_dir)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    x = np.random.default_rng(5).standard_normal((1, 3, 28, 28)).astype(np.float32)
    (tmp_path / "x.bin").write_bytes(x.astype("<f4").tobytes())
    res = tmp_path / "res"
    res.mkdir()
    env = {"PATH": "/usr/bin:/bin"}
    r = subprocess.run([str(out_dir / "bundle_main"), str(out_dir / "cnn.weights.bin"), str(tmp_path / "x.bin"),
                        str(res)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    got = np.frombuffer((res / "output.bin").read_bytes(), dtype="<f4").reshape(1, 10)
    want = glow_core.compile(model, "interpreter").run({"input": x})["output"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # A wrongly sized input is refused.
    (tmp_path / "bad.bin").write_bytes(b"\0" * 10)
    r = subprocess.run([str(out_dir / "bundle_main"), str(out_dir / "cnn.weights.bin"), str(tmp_path / "bad.bin"),
                        str(res)], capture_output=True, text=True, env=env)
    assert r.returncode != 0


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_out_of_range_gather_is_an_error_naming_the_instruction():
    model = _model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name="my_gather")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
                    helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    cm = glow_core.compile(model, "cpu", num_threads=1)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(cm.run({"x": x, "i": np.array([3, 1])})["y"], x[[3, 1]])
    with pytest.raises(GlowError, match="gather"):
        cm.run({"x": x, "i": np.array([0, 400])})


def test_integer_division_by_zero_is_an_error_not_a_crash():
    model = _model([helper.make_node("Div", ["a", "b"], ["c"], name="idiv")],
                   [helper.make_tensor_value_info("a", TensorProto.INT32, [4]),
                    helper.make_tensor_value_info("b", TensorProto.INT32, [4])],
                   [helper.make_tensor_value_info("c", TensorProto.INT32, [4])])
    cm = glow_core.compile(model, "cpu", num_threads=1)
    a = np.array([7, -7, -2 ** 31, 5], np.int32)
    np.testing.assert_array_equal(cm.run({"a": a, "b": np.array([2, 2, -1, -5], np.int32)})["c"],
                                  np.array([3, -3, -2 ** 31, -1], np.int32))
    with pytest.raises(GlowError, match="division"):
        cm.run({"a": a, "b": np.array([1, 0, 1, 1], np.int32)})


def test_extended_ops_are_rejected_before_compiling(monkeypatch):
    model = _model([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=0)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                    helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
                   [helper.make_tensor_value_info("v", TensorProto.FLOAT, [2]),
                    helper.make_tensor_value_info("i", TensorProto.INT64, [2])], )
    monkeypatch.setattr(toolchain, "build_kernels", lambda *a, **k: pytest.fail("compiled C"))
    with pytest.raises(UnsupportedOpError, match="TopK"):
        glow_core.compile(model, "cpu", fallback=False).run({"x": np.ones(4, np.float32), "k": np.array([2])})


def test_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/compiler-xyz")
    with pytest.raises(GlowError, match="compiler"):
        toolchain.find_compiler()
