"""Bad input never crashes or hangs: every failure is a GlowError whose message names the culprit and what was
expected, and ``glowc run`` reports it on one stderr line with a non-zero exit status (no traceback)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_tools import cli
from glow_core import errors
from glow_conformance import example_models

F, I64 = TensorProto.FLOAT, TensorProto.INT64
vi = helper.make_tensor_value_info


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "bad", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def external(location):
    t = numpy_helper.from_array(np.ones(4, np.float32), "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    e = t.external_data.add()
    e.key, e.value = "location", location
    return model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", F, [4])], [vi("y", F, [4])], [t])


def bad_raw_size():
    t = numpy_helper.from_array(np.ones(6, np.float32), "weights")
    t.dims[:] = [2, 4]  # raw_data holds 6 floats, dims say 8
    return model([helper.make_node("Add", ["x", "weights"], ["y"], name="add")], [vi("x", F, [2, 4])],
                 [vi("y", F, [2, 4])], [t])


GOOD = example_models.linear_sigmoid().SerializeToString()


def corrupt_name():
    """A node name that is not UTF-8: protobuf parses it (as bytes) without complaint."""
    data = GOOD.replace(b"Sigmoid_1", b"Sigm\xc7id_1")
    assert data != GOOD
    return data


# name -> (model: bytes | ModelProto | callable, exception class, substrings the message must hold)
LOAD_CASES = {
    "empty_file": (b"", errors.ModelLoadError, ["empty file", "ONNX"]),
    "truncated_file": (GOOD[:len(GOOD) // 2], errors.ModelLoadError, ["not a valid ONNX protobuf"]),
    "truncated_header": (GOOD[:5], errors.ModelLoadError, ["ONNX"]),
    "random_bytes": (np.random.default_rng(0).bytes(4096), errors.ModelLoadError, ["ONNX"]),
    "non_utf8_name": (corrupt_name, errors.ModelLoadError, ["UTF-8", "node[1].name"]),
    "unknown_op": (model([helper.make_node("FrobnicateTensor", ["x"], ["y"], name="frob")], [vi("x", F, [2])],
                         [vi("y", F, [2])]),
                   errors.UnsupportedOpError, ["'frob'", "FrobnicateTensor", "not supported"]),
    "unknown_domain": (model([helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.vendor")],
                             [vi("x", F, [2])], [vi("y", F, [2])]),
                       errors.UnsupportedOpError, ["com.vendor", "ai.onnx"]),
    "undefined_value": (model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add1")], [vi("x", F, [2])],
                              [vi("y", F, [2])]), errors.ImportError_, ["'add1'", "'nowhere'", "not defined"]),
    "cycle": (model([helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
                     helper.make_node("Relu", ["a"], ["b"], name="n2")],
                    [vi("x", F, [2])], [vi("a", F, [2])]), errors.ImportError_, ["cycle", "n1"]),
    "two_producers": (model([helper.make_node("Relu", ["x"], ["y"], name="p1"),
                             helper.make_node("Neg", ["x"], ["y"], name="p2")],
                            [vi("x", F, [2])], [vi("y", F, [2])]), errors.ImportError_, ["'y'", "p1", "p2"]),
    "add_shape_mismatch": (model([helper.make_node("Add", ["a", "b"], ["y"], name="bad_add")],
                                 [vi("a", F, [2, 3]), vi("b", F, [4, 5])], [vi("y", F, None)]),
                           errors.ShapeError, ["'bad_add'", "(2, 3)", "(4, 5)", "broadcast"]),
    "matmul_shape_mismatch": (model([helper.make_node("MatMul", ["a", "b"], ["y"], name="bad_mm")],
                                    [vi("a", F, [2, 3]), vi("b", F, [4, 5])], [vi("y", F, None)]),
                              errors.ShapeError, ["'bad_mm'", "(2, 3)", "(4, 5)"]),
    "dtype_mismatch": (model([helper.make_node("Add", ["a", "b"], ["y"], name="mixed")],
                             [vi("a", F, [2, 3]), vi("b", I64, [2, 3])], [vi("y", F, None)]),
                       errors.ShapeError, ["'mixed'", "float32", "int64"]),
    "conv_channel_mismatch": (model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv_bad")],
                                    [vi("x", F, [1, 3, 8, 8]), vi("w", F, [4, 2, 3, 3])], [vi("y", F, None)]),
                              errors.ShapeError, ["'conv_bad'", "3", "(4, 2, 3, 3)"]),
    "reshape_bad_size": (model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")], [vi("x", F, [2, 3])],
                               [vi("y", F, None)], [numpy_helper.from_array(np.array([4, 5], np.int64), "s")]),
                         errors.ShapeError, ["'rs'", "(2, 3)", "(4, 5)"]),
    "unknown_opset": (model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [2])], [vi("y", F, [2])], opset=99),
                      errors.ImportError_, ["opset 99", "accepts opsets"]),
    "unknown_attribute": (model([helper.make_node("Relu", ["x"], ["y"], name="r", alpha_typo=3)], [vi("x", F, [2])],
                                [vi("y", F, [2])]), errors.ImportError_, ["'r'", "alpha_typo"]),
    "raw_data_size": (bad_raw_size, errors.ImportError_, ["'weights'", "24 bytes", "32"]),
    "external_data_parent": (external("../secret.bin"), errors.ModelLoadError, ["'w'", "../secret.bin", "outside"]),
    "external_data_absolute": (external("/etc/passwd"), errors.ModelLoadError, ["'w'", "/etc/passwd", "outside"]),
    "external_data_missing": (external("weights.bin"), errors.ModelLoadError, ["'w'", "weights.bin", "does not exist"]),
    "output_not_produced": (model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [2])], [vi("z", F, [2])]),
                            errors.ImportError_, ["'z'", "not produced"]),
    "output_wrong_dtype": (model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [2])], [vi("y", I64, [2])]),
                           errors.ShapeError, ["'y'", "int64", "float32"]),
    "string_input": (model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", TensorProto.STRING, [2])],
                           [vi("y", TensorProto.STRING, [2])]), errors.UnsupportedOpError, ["'x'", "STRING"]),
    "negative_dim": (model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [-3, 2])], [vi("y", F, None)]),
                     errors.ImportError_, ["'x'", "negative"]),
    # Values far beyond any address space (petabytes): refused with MemoryLimitError, not a MemoryError.
    "huge_constant": (model([helper.make_node("ConstantOfShape", ["shp"], ["y"], name="fill")], [], [vi("y", F, None)],
                            [numpy_helper.from_array(np.array([1 << 20, 1 << 20, 1 << 10], np.int64), "shp")]),
                      errors.MemoryLimitError, ["'fill'", "memory"]),
    "huge_tensor": (model([helper.make_node("Expand", ["x", "shp"], ["y"], name="grow")], [vi("x", F, [1])],
                          [vi("y", F, None)],
                          [numpy_helper.from_array(np.array([1 << 20, 1 << 20, 1 << 10], np.int64), "shp")]),
                    errors.MemoryLimitError, ["memory plan", "mutable 4503599627370560 B"]),
    "no_opset": (helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [vi("x", F, [2])],
                                                     [vi("y", F, [2])]), opset_imports=[]),
                 errors.ImportError_, ["opset"]),
}


def write_case(tmp_path, name):
    """Write the case's model as tmp_path/models/NAME.onnx (with a secret file next to the folder)."""
    data = LOAD_CASES[name][0]
    data = data() if callable(data) else data
    if isinstance(data, onnx.ModelProto):
        data = data.SerializeToString()
    folder = tmp_path / "models"
    folder.mkdir(exist_ok=True)
    (tmp_path / "secret.bin").write_bytes(np.ones(4, np.float32).tobytes())  # ../secret.bin exists
    path = folder / f"{name}.onnx"
    path.write_bytes(data)
    return path


def check_message(exc, parts):
    msg = str(exc)
    for p in parts:
        assert p in msg, f"message {msg!r} should mention {p!r}"


@pytest.mark.parametrize("case", sorted(LOAD_CASES))
def test_bad_model_raises_glow_error(case, tmp_path):
    path = write_case(tmp_path, case)
    _, cls, parts = LOAD_CASES[case]
    with pytest.raises(errors.GlowError) as ei:
        cm = glow_core.compile(str(path))
        cm.run({nm: np.zeros([d if isinstance(d, int) else 1 for d in dims], np.float32) for nm, _, dims in cm.specs})
    assert isinstance(ei.value, cls), f"{type(ei.value).__name__}: {ei.value}"
    check_message(ei.value, parts)


@pytest.mark.parametrize("case", sorted(LOAD_CASES))
def test_glowc_run_bad_model_one_line(case, tmp_path, capsys):
    path = write_case(tmp_path, case)
    rc = cli.main(["run", str(path), "--output-dir", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert rc == 1, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("glowc: error: "), err
    assert "Traceback" not in err and "internal error" not in err
    check_message(lines[0], LOAD_CASES[case][2])
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_bad_model_bytes_and_proto():
    """Bytes and ModelProto objects go through the same checks as files."""
    with pytest.raises(errors.ModelLoadError, match="not a valid ONNX protobuf"):
        glow_core.compile(GOOD[:len(GOOD) // 2])
    with pytest.raises(errors.ModelLoadError, match="external data"):
        glow_core.compile(external("w.bin").SerializeToString())
    with pytest.raises(errors.ShapeError, match="bad_add"):
        glow_core.compile(LOAD_CASES["add_shape_mismatch"][0])
    with pytest.raises(errors.ModelLoadError, match="path, bytes or onnx.ModelProto"):
        glow_core.compile(12345)


def test_fuzzed_models_never_crash():
    """Random byte corruptions of real models: a GlowError or a working model, never another exception."""
    rng = np.random.default_rng(0)
    sources = [GOOD, example_models.cnn(seed=1).SerializeToString()]
    kinds = set()
    for i in range(200):
        b = bytearray(sources[i % 2])
        for _ in range(rng.integers(1, 4)):
            # the small model anywhere; the CNN in its header or its tail (graph structure, not weights)
            pos = rng.integers(len(b)) if i % 2 == 0 else \
                int(rng.choice([rng.integers(300), len(b) - 1 - rng.integers(300)]))
            b[pos] = rng.integers(256)
        try:
            cm = glow_core.compile(bytes(b))
            if cm.last is not None:
                cm.run({nm: np.ones([d if isinstance(d, int) else 1 for d in dims], cm._dtypes[nm].np)
                        for nm, _, dims in cm.specs})
            kinds.add("ok")
        except errors.GlowError as e:
            kinds.add(type(e).__name__)
    assert "ModelLoadError" in kinds and len(kinds) >= 3


def test_truncations_never_crash():
    for n in range(0, len(GOOD), 5):
        with pytest.raises(errors.GlowError):
            glow_core.compile(GOOD[:n]).run({"input_1": np.zeros((3, 10), np.float32)})


# -- run-time inputs ------------------------------------------------------------------------------------
def two_input_model():
    return model([helper.make_node("Add", ["a", "b"], ["y"], name="add")], [vi("a", F, [2, 3]), vi("b", F, [2, 3])],
                 [vi("y", F, [2, 3])])


OK = np.zeros((2, 3), np.float32)
INPUT_CASES = {
    "missing_input": ({"a": OK}, ["missing", "'b'"]),
    "unknown_input": ({"a": OK, "b": OK, "c": OK}, ["unknown", "'c'", "['a', 'b']"]),
    "wrong_shape": ({"a": OK, "b": np.zeros((3, 2), np.float32)}, ["'b'", "(3, 2)", "(2, 3)"]),
    "wrong_rank": ({"a": OK, "b": np.zeros((2, 3, 1), np.float32)}, ["'b'", "(2, 3, 1)", "(2, 3)"]),
    "wrong_dtype": ({"a": OK, "b": np.zeros((2, 3), np.float64)}, ["'b'", "float64", "float32"]),
    "int_for_float": ({"a": np.zeros((2, 3), np.int64), "b": OK}, ["'a'", "int64", "float32"]),
}


@pytest.mark.parametrize("case", sorted(INPUT_CASES))
def test_bad_run_inputs(case):
    inputs, parts = INPUT_CASES[case]
    cm = glow_core.compile(two_input_model())
    with pytest.raises(errors.InputError) as ei:
        cm.run(inputs)
    check_message(ei.value, parts)
    np.testing.assert_array_equal(cm.run({"a": OK + 1, "b": OK + 2})["y"], OK + 3)  # still usable


def test_inputs_not_a_dict():
    cm = glow_core.compile(two_input_model())
    with pytest.raises(errors.InputError, match="dict"):
        cm.run([OK, OK])


@pytest.mark.parametrize("case", sorted(INPUT_CASES))
def test_glowc_run_bad_inputs(case, tmp_path, capsys):
    path = tmp_path / "add.onnx"
    onnx.save(two_input_model(), path)
    inputs, parts = INPUT_CASES[case]
    args = ["run", str(path), "--output-dir", str(tmp_path)]
    for nm, a in inputs.items():
        np.save(tmp_path / f"{nm}.npy", a)
        args += ["--input", f"{nm}={tmp_path / (nm + '.npy')}"]
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("glowc: error: ") and "Traceback" not in err
    check_message(err, parts)


def test_glowc_unreadable_npy(tmp_path, capsys):
    path = tmp_path / "add.onnx"
    onnx.save(two_input_model(), path)
    (tmp_path / "a.npy").write_bytes(b"not numpy")
    assert cli.main(["run", str(path), "--input", "b", "--input", f"a={tmp_path / 'a.npy'}"]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "'b'" in err and "NAME=FILE.npy" in err
    assert cli.main(["run", str(path), "--input", f"a={tmp_path / 'a.npy'}"]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--input a" in err and "a.npy" in err and "cannot read" in err


def test_nonexistent_file(tmp_path, capsys):
    missing = tmp_path / "nope" / "model.onnx"
    with pytest.raises(errors.ModelLoadError, match="model.onnx.*No such file"):
        glow_core.compile(str(missing))
    assert cli.main(["run", str(missing)]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and str(missing) in err


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(errors.ModelLoadError, match=str(tmp_path)):
        glow_core.compile(str(tmp_path))


def test_unknown_backend(tmp_path, capsys):
    with pytest.raises(errors.BackendError) as ei:
        glow_core.compile(example_models.linear_sigmoid(), backend="no-such-npu")
    check_message(ei.value, ["'no-such-npu'", "interpreter"])
    path = tmp_path / "m.onnx"
    onnx.save(example_models.linear_sigmoid(), path)
    assert cli.main(["run", str(path), "--backend", "no-such-npu"]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "no-such-npu" in err and "interpreter" in err


# -- the real command, in a subprocess ------------------------------------------------------------------
def glowc(*args):
    return subprocess.run([sys.executable, "-m", "glow_tools.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})


@pytest.mark.parametrize("case", ["add_shape_mismatch"])
def test_glowc_subprocess_one_line(case, tmp_path):
    path = write_case(tmp_path, case)
    r = glowc("run", path, "--output-dir", tmp_path)
    assert r.returncode == 1
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("glowc: error: "), r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    # --traceback shows where it failed instead.
    r = glowc("--traceback", "run", path, "--output-dir", tmp_path)
    assert r.returncode != 0 and "Traceback (most recent call last)" in r.stderr
    assert type(LOAD_CASES[case][1]()).__name__ in r.stderr
