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


def test_a_bundle_that_does_not_compile_is_left_out_and_reported(golden, tmp_path):
    folder = tmp_path / "broken"
    shutil.copytree(golden, folder)
    entry = entry_name("primitives/lt/float32/17")
    src = folder / "cases" / entry / f"{entry}.c"
    src.write_text("#error this target cannot build it\n" + src.read_text())
    _make(folder)
    assert (folder / "build_failures.txt").read_text() == f"cases/{entry}/{entry}.c\n"
    r = _replay([], folder)
    assert r.returncode == 1, r.stdout
    assert f"SKIP primitives/lt/float32/17: entry {entry} is not in this build (its bundle did not compile" in r.stdout
    assert f"{len(SUBSET)} cases, {len(SUBSET) - 1} input sets: {len(SUBSET) - 1} passed, 0 failed, 1 skipped" \
        in r.stdout


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


# -- the runner's checks against the checker's, element by element ----------------------------------------------
IDENTITY_H = """#include <stdint.h>
#define {up}_CONSTANT_MEM_SIZE 0
#define {up}_MUTABLE_MEM_SIZE {mutable}
#define {up}_ACTIVATIONS_MEM_SIZE 0
#define {up}_MEM_ALIGN 64
/* input x */
#define {up}_x_OFFSET 0
#define {up}_x_SIZE {size}
/* output y */
#define {up}_y_OFFSET {out}
#define {up}_y_SIZE {size}
int {name}(uint8_t *constant_weights, uint8_t *mutable_weights, uint8_t *activations);
"""
IDENTITY_C = """#include <string.h>
#include "{name}.h"
int {name}(uint8_t *C, uint8_t *M, uint8_t *A) {{ (void)C; (void)A; memcpy(M + {out}, M, {size}); return 0; }}
"""


def _adversarial(dt, rng, n=4000):
    """(got, want): values around every rule of the checker: NaN, infinities, signed zeros, subnormals flushed or
    not, the largest value, and answers k ULPs away or just inside and outside an accumulation bound."""
    from glow_conformance.checker import finfo
    fi = finfo(dt)
    tiny, big = float(fi.tiny), float(fi.max)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, tiny / 4, -tiny / 4, tiny, big, -big, 1.0, -3.5])
    want = np.where(rng.random(n) < 0.3, rng.choice(specials, n), rng.standard_normal(n) * 10).astype(dt)
    bits = want.view(f"u{want.itemsize}").copy()
    kind = rng.integers(0, 6, n)
    step = rng.integers(-4, 5, n).astype(np.int64)
    stepped = (bits.astype(np.int64) + step).astype(bits.dtype).view(dt)  # k ULPs along the bit order
    got = np.where(kind == 0, want, stepped)
    got = np.where(kind == 1, rng.choice(specials, n).astype(dt), got)  # another special value
    got = np.where(kind == 2, -want, got)  # the sign flipped (zeros, NaN, infinities too)
    got = np.where(kind == 3, np.zeros(n, dt) * np.sign(want.astype(np.float64) + 0.0).astype(dt), got)
    return got.astype(dt), want


def _identity_case(root, cid, got, want, dt, check, param, files_data, n=1, statistics=False, flush=True):
    """A hand-made replayable case whose bundle copies its input to its output (the "device" answers ``got``)."""
    from glow_conformance import golden
    entry = golden.entry_name(cid)
    d = root / "cases" / entry
    (d / "set0").mkdir(parents=True)
    size, out = got.nbytes, -(-got.nbytes // 64) * 64
    (d / f"{entry}.h").write_text(IDENTITY_H.format(up=entry.upper(), name=entry, size=size, out=out,
                                                    mutable=2 * out + 64))
    (d / f"{entry}.c").write_text(IDENTITY_C.format(name=entry, size=size, out=out))
    got.tofile(d / "set0" / "in0.bin")
    files = {}
    for kind, a in dict(files_data, expected=want).items():
        name = f"set0/{kind}0.{'bin' if kind == 'expected' else 'f64'}"
        (a if kind == "expected" else np.asarray(a, "<f8")).tofile(d / name)
        files[kind] = name
    meta = {"id": cid, "tier": "synthetic", "entry": entry, "host_outcome": "pass",
            "artifact": {"kind": "bundle", "replayable": True, "weights": None,
                         "inputs": [dict(name="x", macro=f"{entry.upper()}_x", offset=0, size=size)],
                         "outputs": [dict(name="y", macro=f"{entry.upper()}_y", offset=out, size=size)]},
            "inputs": [dict(name="x", dtype=dt, shape=[got.size])],
            "outputs": [dict(name="y", index=0, dtype=dt, shape=[got.size], check=check, param=param, flush=flush,
                             n=n, statistics=statistics)],
            "sets": [{"inputs": ["set0/in0.bin"], "outputs": {"0": files}}]}
    (d / "case.json").write_text(json.dumps(meta))


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None, reason="no make or cc")
def test_runner_checks_agree_with_the_checker_element_by_element(tmp_path):
    """Hand-made identity bundles (output = input) carry adversarial answers to the runner: for every float type
    and check, it counts the same bad elements as the checker and reports the same first one."""
    from glow_conformance import golden
    from glow_conformance.checker import BITWISE, EXACT, Tol, float_verdict, _equal_bits
    rng = np.random.default_rng(0)
    expect = {}
    for dt in ("float16", "bfloat16", "float32", "float64"):
        import ml_dtypes
        npdt = np.dtype(ml_dtypes.bfloat16) if dt == "bfloat16" else np.dtype(dt)
        for tol_name, tol in (("bitwise", BITWISE), ("exact", EXACT), ("ulp2", Tol(ulp=2)),
                              ("acc", Tol(acc=2.0)), ("tensor", Tol(ulp=1, tensor=64.0))):
            got, want = _adversarial(npdt, rng)
            cid = f"synthetic/{dt}/{tol_name}"
            magnitude = np.abs(rng.standard_normal(want.shape)) * 50
            data = {}
            if tol in (BITWISE, EXACT):
                check, param = ("bitwise" if tol.bitwise else "exact"), 0
                gf, wf = got.astype(np.float64), want.astype(np.float64)
                bad = ~_equal_bits(got, want) if tol.bitwise else ~((gf == wf) | (np.isnan(gf) & np.isnan(wf)))
            else:
                check, param = "bound", tol.ulp
                bad, _, _, allowed = float_verdict(got, want, tol, 8, magnitude if tol.acc else None)
                data["bound"] = np.broadcast_to(allowed, want.shape)
            assert bad.any() and not bad.all()
            expect[cid] = (int(bad.sum()), int(np.flatnonzero(bad)[0]))
            _identity_case(tmp_path / "g", cid, got, want, dt, check, param, data)
    for dt in ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "float8e8m0", "float4e2m1",
               "float6e2m3", "float6e3m2"):  # the storage formats' codes: every NaN matches any NaN, -0 == +0
        from glow_core.types import dtype as gdtype
        npdt = gdtype(dt).np
        bits = 0x10 if dt == "float4e2m1" else 0x40 if dt.startswith("float6") else 0x100
        want = np.tile(np.arange(bits, dtype=np.uint8), 4)
        got = np.concatenate([want[:bits], rng.permutation(want[:bits]), want[:bits] ^ (bits >> 1),
                              rng.integers(0, bits, bits, dtype=np.uint8)]).astype(np.uint8)
        for tol_name, tol in (("bitwise", BITWISE), ("exact", EXACT)):
            g, w = got.view(npdt), want.view(npdt)
            gf, wf = g.astype(np.float64), w.astype(np.float64)
            bad = ~_equal_bits(g, w) if tol.bitwise else ~((gf == wf) | (np.isnan(gf) & np.isnan(wf)))
            cid = f"synthetic/{dt}/{tol_name}"
            expect[cid] = (int(bad.sum()), int(np.flatnonzero(bad)[0]))
            _identity_case(tmp_path / "g", cid, g, w, dt, tol_name, 0, {})
    counts = golden.finish(str(tmp_path / "g"))
    assert counts["replayable"] == len(expect)
    _make(tmp_path / "g")
    r = _replay([], tmp_path / "g")
    assert r.returncode == 1 and f"0 passed, {len(expect)} failed" in r.stdout, r.stdout
    for line in r.stdout.splitlines():
        if line.startswith("FAIL "):
            cid = line.split()[1].rstrip(":")
            n_bad, first = expect.pop(cid)
            assert f": {n_bad} of " in line and f" elements differ; first at index {first}:" in line, (line, n_bad)
    assert not expect


def tosa_dot_product_statistics(got, ref, m, n, mant):
    """TOSA's dot-product tests, written from its specification: err = (got - ref) / (m * 2^-(M+1)) over the
    finite elements whose unit is at least 16 smallest subnormals; |sum err| <= 2 sqrt(n T), sum err^2 <= 0.4 n T."""
    unit = m * 2.0 ** -(mant + 1)
    use = np.isfinite(got) & np.isfinite(ref) & (unit >= 16 * 2.0 ** -149)
    err = (got[use].astype(np.float64) - ref[use]) / unit[use]
    t = int(use.sum())
    return abs(err.sum()) <= 2 * np.sqrt(n * t) and (err ** 2).sum() <= 0.4 * n * t


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None, reason="no make or cc")
def test_runner_measures_from_the_float64_reference_and_applies_the_dot_product_statistics(tmp_path):
    """A DOT_PRODUCT output: the bound is measured from the float64 reference (center), and answers whose every
    element is within the bound still fail when their errors are biased or too spread."""
    from glow_conformance import golden
    rng = np.random.default_rng(1)
    n, t = 64, 1000
    ref = rng.standard_normal(t) * 4
    m = np.abs(ref) + rng.uniform(1, 4, t)
    unit = m * 2.0 ** -24
    bound = 2 * n * 2.0 ** -23 * m  # every answer below is within it
    want = ref.astype(np.float32)
    answers = {"rounded": want, "biased": (ref + 3 * unit).astype(np.float32),
               "spread": (ref + 7 * unit * rng.choice([-1.0, 1.0], t)).astype(np.float32)}
    verdicts = {}
    for name, got in answers.items():
        assert np.all(np.abs(got - ref) <= bound)
        verdicts[name] = tosa_dot_product_statistics(got, ref, m, n, 23)
        _identity_case(tmp_path / "g", f"synthetic/dot/{name}", got, want, "float32", "bound", 0,
                       {"bound": bound, "center": ref, "magnitude": m}, n=n, statistics=True, flush=False)
    assert verdicts == {"rounded": True, "biased": False, "spread": False}
    # one ULP from the expected value, but 1.5 bounds from the reference the bound is measured from: fails
    one_ulp = np.nextafter(want, np.float32(np.inf))
    _identity_case(tmp_path / "g", "synthetic/dot/measured_from_center", one_ulp, want, "float32", "bound", 0,
                   {"bound": bound, "center": ref + 1.5 * bound}, n=n, flush=False)
    verdicts["measured_from_center"] = False
    golden.finish(str(tmp_path / "g"))
    _make(tmp_path / "g")
    r = _replay([], tmp_path / "g")
    fails = {ln.split()[1].rstrip(":").rsplit("/", 1)[1]: ln for ln in r.stdout.splitlines() if ln.startswith("FAIL")}
    assert set(fails) == {k for k, ok in verdicts.items() if not ok}, r.stdout
    assert "the errors are biased" in fails["biased"] and "too spread" in fails["spread"]
