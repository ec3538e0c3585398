"""Bundles for embedded targets: several entry points in one bundle, cross-compiled for aarch64 with Debian's
cross compiler and run under qemu-user, weights compiled in from NAME.weights.txt; results against the
interpreter. ``.ci/run`` installs the cross compiler and qemu; where they are missing the cross tests skip with
the reason (``GLOW_REQUIRE_CROSS=1``, set by ``.ci/run`` once the install succeeded, makes that a failure)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest

import glow_core
from glow_conformance import example_models as models
from glow_core.quantization import profile

SYSROOT = "/usr/aarch64-linux-gnu"


def _missing_cross() -> str:
    need = [t for t in ("aarch64-linux-gnu-gcc", "qemu-aarch64", "make") if shutil.which(t) is None]
    if not os.path.isdir(os.path.join(SYSROOT, "lib")):
        need.append(SYSROOT)
    return ", ".join(need)


def _require_cross():
    missing = _missing_cross()
    if missing:
        reason = (f"cross tools missing: {missing} (Debian: apt-get install gcc-aarch64-linux-gnu "
                  f"libc6-dev-arm64-cross qemu-user)")
        if os.environ.get("GLOW_REQUIRE_CROSS"):
            pytest.fail(reason)
        print(f"SKIP: {reason}")
        pytest.skip(reason)


def _glowc(*args):
    return subprocess.run([sys.executable, "-m", "glow_tools.cli", *args], capture_output=True, text=True)


def _models(tmp_path):
    """Two entry points: the CNN and an MLP, with their inputs and the interpreter's outputs."""
    out = {}
    for name, m in (("cnn", models.cnn(seed=3)), ("mlp", models.mlp(batch=2, sizes=(16, 8, 4)))):
        path = tmp_path / f"{name}.onnx"
        onnx.save(m, path)
        shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
        x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
        (tmp_path / f"{name}_x.bin").write_bytes(x.astype("<f4").tobytes())
        want = glow_core.compile(m, "interpreter").run({m.graph.input[0].name: x})[m.graph.output[0].name]
        out[name] = (path, want)
    return out


def _run(cmd, res_dir, want, tmp_path):
    res_dir.mkdir(exist_ok=True)
    r = subprocess.run(cmd + [str(res_dir)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    (out_file,) = list(res_dir.iterdir())
    got = np.frombuffer(out_file.read_bytes(), dtype="<f4").reshape(want.shape)
    return float(np.abs(got - want).max())


def test_aarch64_bundle_with_two_entry_points_runs_under_qemu(tmp_path):
    _require_cross()
    ms = _models(tmp_path)
    out = tmp_path / "bundle"
    r = _glowc("compile", str(ms["cnn"][0]), str(ms["mlp"][0]), "--bundle-name", "cnn", "--bundle-name", "mlp",
               "--emit-bundle", str(out), "--target", "aarch64-linux-gnu", "--cpu", "cortex-a53")
    assert r.returncode == 0, r.stderr
    exe = out / "bundle_main"
    head = exe.read_bytes()[:20]
    assert head[:4] == b"\x7fELF" and head[4] == 2 and int.from_bytes(head[18:20], "little") == 183  # EM_AARCH64
    qemu = ["qemu-aarch64", "-L", SYSROOT, str(exe)]
    for name, (_, want) in ms.items():
        diff = _run(qemu + [name, str(out / f"{name}.weights.bin"), str(tmp_path / f"{name}_x.bin")],
                    tmp_path / f"res_{name}", want, tmp_path)
        print(f"aarch64 bundle under qemu, entry {name}: max |bundle - interpreter| = {diff:.3g}")
        assert diff <= 1e-5 * max(1.0, float(np.abs(want).max()))
    # Weights compiled in (NAME.weights.txt), no weights file: a target without a file system.
    r = subprocess.run(["make", "-C", str(out), "clean", "bundle_main", "EMBED=1"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    diff = _run(qemu + ["cnn", str(tmp_path / "cnn_x.bin")], tmp_path / "res_embed", ms["cnn"][1], tmp_path)
    print(f"aarch64 bundle, weights compiled in: max |bundle - interpreter| = {diff:.3g}")
    assert diff <= 1e-5 * max(1.0, float(np.abs(ms["cnn"][1]).max()))
    r = subprocess.run(qemu + ["resnet"], capture_output=True, text=True)
    assert r.returncode == 2 and "cnn mlp" in r.stderr


def _quantized_cnn(tmp_path):
    """The CNN, a calibration profile of it, and the int8 interpreter's output on the CNN's input."""
    cnn = models.cnn(seed=3)
    rng = np.random.default_rng(7)
    prof = profile(cnn, [{"input": rng.standard_normal((1, 3, 28, 28)).astype(np.float32)} for _ in range(4)])
    x = np.fromfile(tmp_path / "cnn_x.bin", "<f4").reshape(1, 3, 28, 28)
    return cnn, prof, glow_core.compile(cnn, "interpreter", quantize=prof).run({"input": x})["output"]


def test_quantized_aarch64_bundle_with_shared_weights_under_qemu(tmp_path):
    """An int8-quantized CNN next to the float one, cross-built for aarch64 with shared weights: under qemu both
    compute what the interpreter computes (the quantized one bit for bit)."""
    _require_cross()
    ms = _models(tmp_path)
    cnn, prof, want_q = _quantized_cnn(tmp_path)
    out = tmp_path / "bundle"
    for k, (name, q) in enumerate((("cnn", None), ("cnn_int8", prof))):
        cm = glow_core.compile(cnn, "cpu", num_threads=1, **({"quantize": q} if q else {}))
        cm.backend.emit_bundle(cm.last.ir, str(out), {"bundle_name": name, "bundle_append": k > 0, "shared_weights":
                                                      True, "target": "aarch64-linux-gnu", "build": k == 1})
    qemu = ["qemu-aarch64", "-L", SYSROOT, str(out / "bundle_main")]
    for name, want, tol in (("cnn", ms["cnn"][1], 1e-5 * max(1.0, float(np.abs(ms["cnn"][1]).max()))),
                            ("cnn_int8", want_q, 0.0)):
        diff = _run(qemu + [name, str(out / "bundle.weights.bin"), str(tmp_path / "cnn_x.bin")],
                    tmp_path / f"res_{name}", want, tmp_path)
        print(f"aarch64 bundle under qemu, shared weights, entry {name}: max |bundle - interpreter| = {diff:.3g}")
        assert diff <= tol


def _hard_activation_convs():
    """Two convolutions with HardSwish and HardSigmoid fused into the conv engine's epilogue: the product rounded
    before the add (GCE_ROUNDED) on the host's channel blocks (16 floats with AVX-512, wider than one NEON
    register)."""
    from onnx import helper, numpy_helper
    r = np.random.default_rng(11)
    inits = [numpy_helper.from_array((r.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(np.float32), n)
             for n, s in (("w", (16, 8, 3, 3)), ("b", (16,)), ("w2", (16, 16, 3, 3)))]  # unit-variance outputs
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c"], ["h"]),
             helper.make_node("Conv", ["h", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("HardSigmoid", ["c2"], ["y"], alpha=0.3, beta=0.4)]
    g = helper.make_graph(nodes, "hard", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8, 10, 10])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 16, 10, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_aarch64_bundle_with_fused_hard_activations_runs_under_qemu(tmp_path):
    """The conv epilogue's rounding barrier compiles for aarch64 whatever the channel block (NEON's "w" operand is
    16 bytes), and the bundle computes what the interpreter computes."""
    _require_cross()
    m = _hard_activation_convs()
    onnx.save(m, tmp_path / "hard.onnx")
    x = np.random.default_rng(5).standard_normal((1, 8, 10, 10)).astype(np.float32)
    (tmp_path / "hard_x.bin").write_bytes(x.astype("<f4").tobytes())
    want = glow_core.compile(m, "interpreter").run({"x": x})["y"]
    out = tmp_path / "bundle"
    r = _glowc("compile", str(tmp_path / "hard.onnx"), "--bundle-name", "hard", "--emit-bundle", str(out),
               "--target", "aarch64-linux-gnu")
    assert r.returncode == 0, r.stderr
    assert "gce_hard_swish" in (out / "hard.c").read_text()
    diff = _run(["qemu-aarch64", "-L", SYSROOT, str(out / "bundle_main"), str(out / "hard.weights.bin"),
                 str(tmp_path / "hard_x.bin")], tmp_path / "res", want, tmp_path)
    print(f"aarch64 bundle, fused HardSwish/HardSigmoid: max |bundle - interpreter| = {diff:.3g}")
    assert diff <= 1e-5 * max(1.0, float(np.abs(want).max()))


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None, reason="no make or cc")
def test_weights_txt_is_the_weights_file_compiled_in(tmp_path):
    """On the host: NAME.weights.txt holds exactly NAME.weights.bin's bytes, and the driver built with EMBED=1
    runs from them alone."""
    ms = _models(tmp_path)
    out = tmp_path / "bundle"
    r = _glowc("compile", str(ms["cnn"][0]), "--bundle-name", "cnn", "--emit-bundle", str(out))
    assert r.returncode == 0, r.stderr
    text = (out / "cnn.weights.txt").read_text()
    assert bytes(int(t, 16) for t in text.replace("\n", "").split(",") if t.strip()) == \
        (out / "cnn.weights.bin").read_bytes()
    r = subprocess.run(["make", "-C", str(out), "EMBED=1"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    diff = _run([str(out / "bundle_main"), str(tmp_path / "cnn_x.bin")], tmp_path / "res", ms["cnn"][1], tmp_path)
    assert diff <= 1e-5 * max(1.0, float(np.abs(ms["cnn"][1]).max()))


def test_bundle_command_errors_are_one_line(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(models.cnn(), path)
    cases = [
        (["compile", str(path), str(path), "--bundle-name", "a", "--emit-bundle", str(tmp_path / "b")],
         "2 model(s) but 1 --bundle-name(s)"),
        (["compile", str(path), "--target", "aarch64-linux-gnu"], "--target, --cpu and --shared-weights apply to"),
        (["compile", str(path), "--shared-weights"], "--target, --cpu and --shared-weights apply to bundles"),
        (["compile", str(path), "--emit-bundle", str(tmp_path / "c"), "--target", "aarch64 linux;rm"],
         "is not a GNU target triple"),
    ]
    if shutil.which("nosuchcpu-linux-gnu-gcc") is None:
        cases.append((["compile", str(path), "--emit-bundle", str(tmp_path / "d"), "--target", "nosuchcpu-linux-gnu"],
                      "apt-get install gcc-nosuchcpu-linux-gnu"))
    for args, want in cases:
        r = _glowc(*args)
        assert r.returncode == 1, (args, r.stderr)
        assert len(r.stderr.splitlines()) == 1 and want in r.stderr, r.stderr


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None, reason="no make or cc")
def test_shared_weights_store_each_tensor_once(tmp_path):
    """``--shared-weights``: one bundle.weights.bin for every entry point. An entry point whose tensors are all
    there already (the same CNN again) adds no byte; each entry point, the int8-quantized CNN too, computes what
    the interpreter computes (the quantized one bit for bit), from the file and with the weights compiled in."""
    ms = _models(tmp_path)
    _, prof, want_q = _quantized_cnn(tmp_path)
    alone = tmp_path / "alone"
    r = _glowc("compile", str(ms["cnn"][0]), "--bundle-name", "cnn", "--emit-bundle", str(alone))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "bundle"
    sizes = []
    for k, (name, model) in enumerate((("cnn", "cnn"), ("cnn_again", "cnn"), ("mlp", "mlp"), ("cnn_int8", "cnn"))):
        m = onnx.load(ms[model][0])
        cm = glow_core.compile(m, "cpu", num_threads=1, **({"quantize": prof} if name == "cnn_int8" else {}))
        cm.backend.emit_bundle(cm.last.ir, str(out), {"bundle_name": name, "bundle_append": k > 0,
                                                      "shared_weights": True})
        sizes.append((out / "bundle.weights.bin").stat().st_size)
    assert sizes[0] == (alone / "cnn.weights.bin").stat().st_size and sizes[1] == sizes[0]
    assert sizes[3] > sizes[2] > sizes[1]
    assert not list(out.glob("cnn*.weights.*")) and not list(out.glob("mlp.weights.*"))
    for embed in ([], ["EMBED=1"]):
        r = subprocess.run(["make", "-C", str(out), "clean", "bundle_main", *embed], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        weights = [] if embed else [str(out / "bundle.weights.bin")]
        for name, model in (("cnn", "cnn"), ("cnn_again", "cnn"), ("mlp", "mlp"), ("cnn_int8", "cnn")):
            want = want_q if name == "cnn_int8" else ms[model][1]
            diff = _run([str(out / "bundle_main"), name, *weights, str(tmp_path / f"{model}_x.bin")],
                        tmp_path / f"res_{name}{len(embed)}", want, tmp_path)
            tol = 0.0 if name == "cnn_int8" else 1e-5 * max(1.0, float(np.abs(want).max()))
            assert diff <= tol, (name, embed, diff)
    r = _glowc("compile", str(ms["mlp"][0]), "--bundle-name", "mlp2", "--emit-bundle", str(out))
    assert r.returncode == 0, r.stderr  # a new bundle: the directory's manifest is replaced, not appended to
    m = onnx.load(ms["mlp"][0])
    cm = glow_core.compile(m, "cpu", num_threads=1)
    with pytest.raises(glow_core.errors.GlowError, match="made without shared weights; every entry point"):
        cm.backend.emit_bundle(cm.last.ir, str(out), {"bundle_name": "x", "bundle_append": True,
                                                      "shared_weights": True})
