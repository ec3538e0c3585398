"""A newcomer's first five minutes, through the installed ``glowc`` in a subprocess: every help gives an example,
and every error they can hit is one line on stderr that says what to do."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import onnx
import pytest

from glow_conformance import example_models as models
from glow_tools.cli import build_parser

GLOWC = shutil.which("glowc", path=os.path.dirname(sys.executable)) or shutil.which("glowc")
pytestmark = pytest.mark.skipif(GLOWC is None, reason="the glowc console script is not installed")


def glowc(*args, env=None, cwd=None):
    return subprocess.run([GLOWC, *map(str, args)], capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


def _subcommands():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


@pytest.mark.parametrize("cmd", [None] + _subcommands())
def test_every_help_gives_an_example(cmd):
    """Every subcommand the parser has, whoever added it (give it an entry in cli.EXAMPLES)."""
    r = glowc(*(["--help"] if cmd is None else [cmd, "--help"]))
    assert r.returncode == 0
    text = r.stdout
    assert "example" in text
    shown = [line.strip() for line in text.splitlines() if line.strip().startswith("glowc ")]
    assert shown, text
    if cmd is not None:
        assert any(line.startswith(f"glowc {cmd}") for line in shown)


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    d = tmp_path_factory.mktemp("newcomer")
    onnx.save(models.cnn(), d / "cnn.onnx")
    return d


def one_line_error(r):
    assert r.returncode != 0 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in lines[0]
    return lines[0]


def test_missing_model_file(cnn):
    err = one_line_error(glowc("run", cnn / "nope.onnx"))
    assert "cannot read model file" in err and "No such file" in err and "check the path" in err


def test_model_file_that_is_not_onnx(cnn):
    (cnn / "notes.txt").write_text("this is not a model\n")
    err = one_line_error(glowc("run", cnn / "notes.txt"))
    assert "not a valid ONNX protobuf" in err and "give an ONNX model file (.onnx" in err


def test_pytorch_checkpoint_instead_of_onnx(cnn):
    with zipfile.ZipFile(cnn / "model.pt", "w") as z:  # torch.save writes a zip archive
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
    err = one_line_error(glowc("run", cnn / "model.pt"))
    assert "torch.onnx.export(model, args, 'model.onnx')" in err and "example_inputs" in err


def test_unknown_backend(cnn):
    err = one_line_error(glowc("run", cnn / "cnn.onnx", "--backend", "gpu"))
    assert "unknown backend 'gpu'" in err and "cpu, interpreter" in err


def test_wrong_input_name(cnn):
    np.save(cnn / "x.npy", np.zeros((1, 3, 28, 28), np.float32))
    err = one_line_error(glowc("run", cnn / "cnn.onnx", "--input", f"image={cnn / 'x.npy'}"))
    assert err == "glowc: error: unknown input(s) ['image']; the model takes ['input']"


def test_wrong_input_shape(cnn):
    np.save(cnn / "small.npy", np.zeros((1, 3, 14, 14), np.float32))
    err = one_line_error(glowc("run", cnn / "cnn.onnx", "--input", f"input={cnn / 'small.npy'}"))
    assert "shape (1, 3, 14, 14) given, the model expects (1, 3, 28, 28)" in err


def test_no_c_compiler(cnn, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CC"}
    env["PATH"] = str(tmp_path)  # nothing on it: no cc, gcc or clang
    err = one_line_error(glowc("run", cnn / "cnn.onnx", "--backend", "cpu", "--output-dir", tmp_path, env=env))
    assert "no C compiler found" in err and "apt-get install gcc" in err and "--backend interpreter" in err


def test_unwritable_output(cnn):
    err = one_line_error(glowc("dump", cnn / "cnn.onnx", "--onnx", cnn / "no" / "such" / "dir.onnx"))
    assert "dir.onnx" in err and "check the path" in err


@pytest.mark.parametrize("argv", [["run"], ["bench", "m.onnx", "--compare", "tflite"], ["bench", "m.onnx", "--threads", "0"],
                                  ["frobnicate"]])
def test_usage_errors_are_one_line_pointing_at_help(argv):
    err = one_line_error(glowc(*argv))
    assert err.endswith("--help')")


def test_demo_runs(tmp_path):
    r = glowc("demo", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "memory plan:" in r.stdout and "output:" in r.stdout
