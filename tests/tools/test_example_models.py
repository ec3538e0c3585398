"""The built-in example models against independent numpy computations, through the API and ``glowc``."""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import glow_core
from glow_conformance import example_models


def weights(model) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}


def np_conv2d(x, w, b, pad):
    """Direct convolution (stride 1): explicit loops over the kernel window, einsum over channels."""
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    xp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad))
    xp[:, :, pad:pad + h, pad:pad + wd] = x
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    y = np.zeros((n, f, oh, ow))
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("nchw,fc->nfhw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return y + b.reshape(1, f, 1, 1)


def np_maxpool2(x):
    n, c, h, w = x.shape
    return x[:, :, :h // 2 * 2, :w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def cnn_expected(model, x):
    p = weights(model)
    y = np.maximum(np_conv2d(x.astype(np.float64), p["conv_w"], p["conv_b"], 1), 0)
    y = np_maxpool2(y).reshape(x.shape[0], -1)
    return y @ p["fc_w"].T + p["fc_b"]


def linear_sigmoid_expected(model, x):
    p = weights(model)
    z = x.astype(np.float64) @ p["classifier_0_weight"].T + p["classifier_0_bias"]
    return 1 / (1 + np.exp(-z))


CASES = {
    "cnn": (lambda: example_models.cnn(seed=3), "input", (1, 3, 28, 28), "output", cnn_expected),
    "cnn_batch2": (lambda: example_models.cnn(seed=4, batch=2), "input", (2, 3, 28, 28), "output", cnn_expected),
    "linear_sigmoid": (lambda: example_models.linear_sigmoid(seed=5), "input_1", (3, 10), "output_1",
                       linear_sigmoid_expected),
}


def glowc(*args, check=True):
    r = subprocess.run([sys.executable, "-m", "glow_tools.cli", *map(str, args)], capture_output=True, text=True,
                       timeout=120)
    if check:
        assert r.returncode == 0, f"glowc {' '.join(map(str, args))} failed:\n{r.stdout}\n{r.stderr}"
    return r


@pytest.mark.parametrize("case", sorted(CASES))
def test_builtin_model_matches_numpy(case):
    build, inp, shape, out, expected = CASES[case]
    model = build()
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    cm = glow_core.compile(model, backend="interpreter")
    got = cm.run({inp: x})
    assert list(got) == [out]
    assert got[out].dtype == np.float32
    want = expected(model, x)
    assert got[out].shape == want.shape
    np.testing.assert_allclose(got[out], want, rtol=1e-5, atol=1e-5)
    # A second run with other data reuses the compiled function and stays correct.
    x2 = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(cm(({inp: x2}))[out], expected(model, x2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_builtin_model_matches_onnxruntime(case):
    ort = pytest.importorskip("onnxruntime")
    build, inp, shape, out, _ = CASES[case]
    model = build()
    model.ir_version = min(model.ir_version, 10)  # onnxruntime may not read the newest IR version
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(glow_core.compile(model).run({inp: x})[out], sess.run(None, {inp: x})[0],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["cnn", "linear_sigmoid"])
def test_glowc_run_writes_outputs(case, tmp_path):
    build, inp, shape, out, expected = CASES[case]
    model = build()
    path = tmp_path / f"{case}.onnx"
    onnx.save(model, path)
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    outdir = tmp_path / "out"
    r = glowc("run", path, "--input", f"{inp}={tmp_path / 'x.npy'}", "--output-dir", outdir)
    assert r.stderr == ""
    got = np.load(outdir / f"{out}.npy")
    np.testing.assert_allclose(got, expected(model, x), rtol=1e-5, atol=1e-5)
    assert out in r.stdout and str(list(shape[:1])[0]) in r.stdout


def test_glowc_run_random_inputs(tmp_path):
    path = tmp_path / "ls.onnx"
    onnx.save(example_models.linear_sigmoid(), path)
    glowc("run", path, "--output-dir", tmp_path)
    y = np.load(tmp_path / "output_1.npy")
    assert y.shape == (3, 5) and y.dtype == np.float32 and np.all((y > 0) & (y < 1))


TYPE = re.compile(r"^(\w+)<([\d x]+)>$")
NBYTES = {"float32": 4, "float64": 8, "int64": 8, "int32": 4, "float16": 2, "bool": 1, "int8": 1, "uint8": 1}


def parse_type(s):
    m = TYPE.match(s)
    assert m, f"cannot parse type {s!r}"
    dims = [int(d) for d in m.group(2).split(" x ")]
    return m.group(1), dims, int(np.prod(dims)) * NBYTES[m.group(1)]


def test_glowc_dump_ir_linear_sigmoid(tmp_path):
    model = example_models.linear_sigmoid()
    path = tmp_path / "linear_sigmoid.onnx"
    onnx.save(model, path)
    text = glowc("dump", path, "--ir").stdout
    lines = text.splitlines()
    assert "declare {" in lines and "code {" in lines
    decl = lines[lines.index("declare {") + 1:lines.index("}")]
    code = lines[lines.index("code {") + 1:]
    code = code[:code.index("}")]
    buffers = {}
    for line in decl:
        m = re.match(r"^\s+%(\S+) = WeightVar (\S+<[^>]*>) (const|mutable) // size: (\d+)", line)
        if m:
            buffers[m.group(1)] = (m.group(2), m.group(3), int(m.group(4)))
    # The placeholders: the input and output with their ONNX names, types and byte sizes.
    assert buffers["input_1"] == ("float32<3 x 10>", "mutable", 120)
    assert buffers["output_1"] == ("float32<3 x 5>", "mutable", 60)
    consts = {k: v for k, v in buffers.items() if v[1] == "const"}
    assert consts, "the weights must be declared as const"
    for name, (ty, _, size) in buffers.items():
        assert parse_type(ty)[2] == size, f"{name}: size {size} does not match its type {ty}"
    # The weights (5x10 matrix and the bias) are all there, in whatever layout the compiler chose.
    assert sum(parse_type(ty)[2] for ty, _, _ in consts.values()) >= (50 + 5) * 4
    total = re.search(r"; size = (\d+) bytes", "\n".join(decl))
    assert total and int(total.group(1)) == sum(v[2] for v in buffers.values())
    # Numbered instructions with @in / @out operands: the input is read, the output written.
    nums = [int(re.match(r"^\s+(\d+) ", line).group(1)) for line in code]
    assert nums == list(range(len(code))) and len(code) >= 2
    assert any("@in %input_1" in line for line in code)
    assert any("@out %output_1" in line for line in code)
    assert any("sigmoid" in line for line in code)
    for line in code:
        if "allocactivation" in line and "dealloc" not in line:
            ty = re.search(r"Ty: (\S+<[^>]*>)", line).group(1)
            assert int(re.search(r"size: (\d+)", line).group(1)) == parse_type(ty)[2]


def test_glowc_dump_graph_and_dot(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(example_models.cnn(), path)
    dot = tmp_path / "g.dot"
    r = glowc("dump", path, "--graph", "--dot", dot)
    assert "function cnn" in r.stdout and "conv" in r.stdout and "output output" in r.stdout
    assert f"wrote {dot}" in r.stdout
    text = dot.read_text()
    assert text.lstrip().startswith("digraph") and "->" in text and text.rstrip().endswith("}")


def test_glowc_demo():
    r = glowc("demo")
    assert "declare {" in r.stdout and "code {" in r.stdout
    assert "memory plan:" in r.stdout and "output:" in r.stdout
    # The demo's output line holds the 10 class scores of the CNN for its fixed input.
    model = example_models.cnn()
    x = np.random.default_rng(0).standard_normal((1, 3, 28, 28)).astype(np.float32)
    want = cnn_expected(model, x)[0]
    printed = r.stdout.split("output:", 1)[1]
    values = [float(v) for v in re.findall(r"-?\d+\.\d+(?:e[-+]?\d+)?", printed)]
    np.testing.assert_allclose(values, want, atol=1e-3)


def test_bench_interpreter_smoke(capsys):
    """The benchmark script runs end to end (tiny repetition counts) and checks the runtimes agree."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "bench" / "bench_interpreter.py"
    spec = importlib.util.spec_from_file_location("bench_interpreter", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--models", "cnn", "--reps", "2", "--ref-reps", "1", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "ref/interp" in out and "profile cnn:" in out and "conv x1" in out
