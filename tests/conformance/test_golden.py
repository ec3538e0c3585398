"""Golden artifacts (conformance/golden.py, ``--export-golden``): a small subset of the suite exported for the CPU
backend is built with the C replay runner (conformance/replay) and replayed natively, and cross-built for aarch64
and replayed under qemu-user (skipped with the reason when the cross tools are missing; ``GLOW_REQUIRE_CROSS=1``,
set by .ci/run once it installed them, makes that a failure). The runner's checks are the checker's: a bundle
made wrong and an expectation moved past its bound fail, naming the case; one moved by one ULP, inside its
bound, passes in C as in Python."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from glow_conformance import checker
from glow_conformance.golden import entry_name
from tests.conformance.test_power import run_suite

SYSROOT = "/usr/aarch64-linux-gnu"
#: the subset: integers (exact, an empty and a rank-0 tensor), a bit-exact transpose, float16 special values (ULP
#: bound, flushing), an accumulation bound, a comparison (bool), an ONNX op, a network and a memory-tier case
SUBSET = ["primitives/add/int8/17", "primitives/add/int8/0", "primitives/add/int8/scalar",
          "primitives/transpose/uint8/3d_201", "primitives/exp/float16/specials",
          "primitives/matmul/float32/16x17@17x15", "primitives/lt/float32/17", "ops/Softmax/float32/axis1",
          "models/mlp/float32/seeded", "memory/add/float32/17"]


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    d = tmp_path_factory.mktemp("golden")
    rc, data = run_suite("cpu", SUBSET, d / "r.html", ["--export-golden", str(d / "g")])
    assert rc == 0 and data["counts"]["pass"] == len(SUBSET), data["counts"]
    return d / "g"


def _make(folder, *extra):
    r = subprocess.run(["make", "-s", "-C", str(folder), *extra], capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]


def _replay(cmd, folder, *args):
    return subprocess.run([*cmd, str(folder / "replay"), str(folder), *args], capture_output=True, text=True,
                          timeout=600)


def _manifest(folder):
    with open(folder / "manifest.json") as f:
        return json.load(f)


def _native(golden, tmp_path):
    if shutil.which("make") is None or shutil.which("cc") is None:
        pytest.skip("no make or cc")
    folder = tmp_path / "native"
    shutil.copytree(golden, folder)
    _make(folder)
    return folder


def test_manifest_records_artifact_data_and_checks(golden):
    m = _manifest(golden)
    assert m["counts"] == {"cases": len(SUBSET), "replayable": len(SUBSET), "data_only": 0, "not_exported": 0}
    cases = {c["id"]: c for c in m["cases"]}
    assert set(cases) == set(SUBSET) and all(c["host_outcome"] == "pass" for c in cases.values())
    checks = {cid: [(o["tolerance_class"], o["check"], o["param"]) for o in c["outputs"]] for cid, c in cases.items()}
    assert checks["primitives/add/int8/17"] == [("elementwise-exact", "exact", 0)]
    assert checks["primitives/transpose/uint8/3d_201"] == [("movement", "exact", 0)]  # integers: exact values
    assert checks["primitives/exp/float16/specials"] == [("elementwise", "bound", 1)]
    assert checks["primitives/matmul/float32/16x17@17x15"] == [("matmul", "bound", 0)]
    assert checks["models/mlp/float32/seeded"][0][:2] == ("model", "bound")
    mm = cases["primitives/matmul/float32/16x17@17x15"]
    folder = golden / "cases" / entry_name(mm["id"])
    assert (folder / f"{mm['entry']}.c").exists() and (folder / f"{mm['entry']}.h").exists()
    a, b = (np.fromfile(folder / "set0" / f"in{k}.bin", "<f4") for k in (0, 1))
    want = np.fromfile(folder / "set0" / "out0.bin", "<f4").reshape(16, 15)
    bound = np.fromfile(folder / "set0" / "bound0.f64", "<f8").reshape(16, 15)
    a64, b64 = a.reshape(16, 17).astype(np.float64), b.reshape(17, 15).astype(np.float64)
    assert np.all(np.abs(want - a64 @ b64) <= bound)  # the expectation is the reference's, its bound the checker's
    assert np.all(bound >= 2 * 17 * np.finfo(np.float32).eps * (np.abs(a64) @ np.abs(b64)))


def test_replay_natively(golden, tmp_path):
    folder = _native(golden, tmp_path)
    r = _replay([], folder, "-v")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"golden replay: {len(SUBSET)} cases, {len(SUBSET)} input sets: {len(SUBSET)} passed, 0 failed" in r.stdout
    assert r.stdout.count("PASS ") == len(SUBSET)
    r = _replay([], folder, "--case", "primitives/add/")
    assert "golden replay: 3 cases" in r.stdout and r.returncode == 0


def test_replay_catches_a_wrong_bundle_and_judges_bounds_as_the_checker(golden, tmp_path):
    folder = _native(golden, tmp_path)
    add = entry_name("primitives/add/int8/17")
    src = folder / "cases" / add / f"{add}.c"
    text = src.read_text()
    assert text.count("in0[i] + in1[i]") == 1
    src.write_text(text.replace("in0[i] + in1[i]", "in0[i] - in1[i]"))  # a device computing the wrong thing
    mm = entry_name("primitives/matmul/float32/16x17@17x15")
    out = folder / "cases" / mm / "set0" / "out0.bin"
    want = np.fromfile(out, "<f4")
    bound = np.fromfile(folder / "cases" / mm / "set0" / "bound0.f64", "<f8")
    moved = want.copy()
    moved[3] = np.float32(np.float64(want[3]) + 3 * bound[3])  # an expectation the device's answer is far from
    moved[5] = np.nextafter(want[5], np.float32(np.inf))  # one ULP: inside the bound
    moved.tofile(out)
    got = want  # what the bundle computes (it is the host's answer: the host run passed)
    with pytest.raises(AssertionError, match=r"1 of 240 elements out of tolerance"):
        checker.compare(got.reshape(16, 15), moved.reshape(16, 15), "matmul", "d", "r", n=17,
                        magnitude=_magnitude(folder / "cases" / mm))
    _make(folder)
    r = _replay([], folder)
    assert r.returncode == 1
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("FAIL ")]
    assert len(lines) == 2, r.stdout
    assert lines[0].startswith("FAIL primitives/add/int8/17: input set 0: output y0 (int8, check exact 0): ")
    assert lines[1].startswith("FAIL primitives/matmul/float32/16x17@17x15: input set 0: output y0 (float32, "
                               "check bound 0): 1 of 240 elements differ; first at index 3:")
    assert f"{len(SUBSET) - 2} passed, 2 failed" in r.stdout


def _magnitude(folder):
    a = np.fromfile(folder / "set0" / "in0.bin", "<f4").reshape(16, 17).astype(np.float64)
    b = np.fromfile(folder / "set0" / "in1.bin", "<f4").reshape(17, 15).astype(np.float64)
    return np.abs(a) @ np.abs(b)


def _missing_cross() -> str:
    need = [t for t in ("aarch64-linux-gnu-gcc", "qemu-aarch64", "make") if shutil.which(t) is None]
    if not os.path.isdir(os.path.join(SYSROOT, "lib")):
        need.append(SYSROOT)
    return ", ".join(need)


def test_replay_on_aarch64_under_qemu(golden, tmp_path):
    missing = _missing_cross()
    if missing:
        reason = (f"cross tools missing: {missing} (Debian: apt-get install gcc-aarch64-linux-gnu "
                  f"libc6-dev-arm64-cross qemu-user)")
        if os.environ.get("GLOW_REQUIRE_CROSS"):
            pytest.fail(reason)
        pytest.skip(reason)
    folder = tmp_path / "aarch64"
    shutil.copytree(golden, folder)
    _make(folder, "CC=aarch64-linux-gnu-gcc")
    head = (folder / "replay").read_bytes()[:20]
    assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == 183  # EM_AARCH64
    r = _replay(["qemu-aarch64", "-L", SYSROOT], folder)
    print(r.stdout.splitlines()[-1])
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{len(SUBSET)} passed, 0 failed" in r.stdout


def test_a_backend_without_bundles_exports_data_only(tmp_path):
    rc, data = run_suite("interpreter", ["primitives/add/float32/17"], tmp_path / "r.html",
                         ["--export-golden", str(tmp_path / "g")])
    assert rc == 0
    m = _manifest(tmp_path / "g")
    assert m["counts"] == {"cases": 1, "replayable": 0, "data_only": 1, "not_exported": 0}
    (case,) = m["cases"]
    assert case["artifact"] is None and "cannot emit bundles" in case["no_artifact"]
    assert case["outputs"][0]["check"] == "exact" and len(case["sets"]) == 1
    assert (tmp_path / "g" / "golden.txt").read_text() == "glow-golden 1\n"
