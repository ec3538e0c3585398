"""``glowc``: subcommands, argument errors and output files (in process through ``cli.main``, plus the installed
console script once)."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import onnx
import pytest

from glow_tools import cli
from glow_conformance import example_models


@pytest.fixture
def ls_model(tmp_path):
    path = tmp_path / "linear_sigmoid.onnx"
    onnx.save(example_models.linear_sigmoid(seed=2), path)
    return path


def test_backends_lists_builtins(capsys):
    assert cli.main(["backends"]) == 0
    lines = dict(line.split("\t") for line in capsys.readouterr().out.splitlines())
    assert lines["interpreter"] == "glow_interpreter.backend:InterpreterBackend"
    assert "cpu" in lines


def test_run_writes_each_output(ls_model, tmp_path, capsys):
    x = np.random.default_rng(0).standard_normal((3, 10)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "nested" / "out"
    assert cli.main(["run", str(ls_model), "--input", f"input_1={tmp_path / 'x.npy'}", "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"output_1: float32 [3, 5] -> {out / 'output_1.npy'}" in printed
    y = np.load(out / "output_1.npy")
    w = {t.name: onnx.numpy_helper.to_array(t) for t in example_models.linear_sigmoid(seed=2).graph.initializer}
    z = x.astype(np.float64) @ w["classifier_0_weight"].T + w["classifier_0_bias"]
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-z)), rtol=1e-5, atol=1e-6)


def test_run_symbolic_input_needs_file(tmp_path, capsys):
    m = example_models.linear_sigmoid()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    path = tmp_path / "sym.onnx"
    onnx.save(m, path)
    assert cli.main(["run", str(path), "--output-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "'input_1'" in err and "--input input_1=FILE.npy" in err
    np.save(tmp_path / "x.npy", np.ones((4, 10), np.float32))
    assert cli.main(["run", str(path), "--input", f"input_1={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path)]) == 0
    assert np.load(tmp_path / "output_1.npy").shape == (4, 5)


def test_dump_defaults_to_graph(ls_model, capsys):
    assert cli.main(["dump", str(ls_model)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("function mymodel") and "input %input_1: float32<3 x 10>" in out
    assert "declare {" not in out


def test_dump_ir_and_graph(ls_model, capsys):
    assert cli.main(["dump", str(ls_model), "--ir", "--graph"]) == 0
    out = capsys.readouterr().out
    assert "input %input_1" in out and "declare {" in out and "code {" in out and "; memory:" in out


def test_compile_interpreter(ls_model, capsys):
    assert cli.main(["compile", str(ls_model), "--backend", "interpreter"]) == 0
    assert "for interpreter:" in capsys.readouterr().out


def test_compile_bundle_unsupported_backend(ls_model, tmp_path, capsys):
    rc = cli.main(["compile", str(ls_model), "--backend", "interpreter", "--emit-bundle", str(tmp_path / "b")])
    assert rc == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "interpreter" in err and "bundle" in err


@pytest.mark.parametrize("argv", [[], ["run"], ["frobnicate"], ["run", "m.onnx", "--bogus"], ["dump"]])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as ei:
        cli.main(argv)
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if argv:  # one line that points at the command's help
        assert len(err.splitlines()) == 1 and err.startswith("glowc") and "--help'" in err
    else:  # bare ``glowc``: the help itself, with its examples
        assert "usage: glowc" in err and "examples:" in err


def test_traceback_flag_reraises(tmp_path):
    with pytest.raises(Exception) as ei:
        cli.main(["--traceback", "run", str(tmp_path / "missing.onnx")])
    assert type(ei.value).__name__ == "ModelLoadError"


def test_internal_error_is_one_line(monkeypatch, ls_model, capsys):
    """A bug (not a GlowError) still ends in one line naming the exception, exit status 2."""
    import glow_core.api

    def boom(*a, **k):
        raise ZeroDivisionError("simulated bug")
    monkeypatch.setattr(glow_core.api, "compile", boom)
    assert cli.main(["run", str(ls_model)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == ["glowc: internal error: ZeroDivisionError: simulated bug (rerun with --traceback)"]


@pytest.mark.skipif(shutil.which("glowc") is None, reason="the glowc console script is not installed")
def test_console_script(tmp_path):
    r = subprocess.run(["glowc", "backends"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "interpreter" in r.stdout
