"""The gate's declarations and extension points: stages in JSON, JUnit and HTML; error statistics of every
compared output; unsupported cases apart from known failures; --require-ops and claimed_ops(); flows (--flow,
claims, an unavailable recipe); a vendor case module installed from a package of its own and collected."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from glow_core.backend import Unsupported
from glow_core.ops.registry import get_primitive
from glow_interpreter.backend import InterpreterBackend, InterpreterFunction

from .test_power import run_suite

SPEC = "tests.conformance.test_gate:"


class Declares(InterpreterBackend):
    """add float32 unsupported (declared), sub float32 a known failure (broken), mul refused by is_op_supported."""

    def unsupported_cases(self):
        return [("primitives/add/float32/*", "no float32 adder on this device")]

    def known_failures(self):
        return [("primitives/sub/float32/*", "sub is off by one (demo)")]

    def is_op_supported(self, node_info):
        if node_info.op == "mul":
            return Unsupported("no multiplier")
        return super().is_op_supported(node_info)

    def compile(self, function, options):
        real = get_primitive("sub").kernel
        return InterpreterFunction(function, kernels={
            "sub": lambda a, b: (real(a, b) + np.ones((), a.dtype)).astype(a.dtype)})


class ClaimsMul(Declares):
    def claimed_ops(self):
        return frozenset({"mul"})


class Fp32Only(InterpreterBackend):
    def conformance_flows(self):
        return ("fp32",)


def test_unsupported_cases_skip_unrun_and_known_failures_stay_strict(tmp_path):
    rc, data = run_suite(SPEC + "Declares", ["primitives/add/float32/*", "primitives/sub/float32/*",
                                             "primitives/mul/float32/*"], tmp_path / "r.html")
    by = {c["id"]: c for c in data["cases"]}
    add = [c for c in by.values() if c["subject"] == "add"]
    assert add and all(c["outcome"] == "skip" and c["skip"] == "unsupported" and c["stage"] == "partition"
                       and "no float32 adder" in c["detail"] and c["duration"] < 1 for c in add)
    sub = [c for c in by.values() if c["subject"] == "sub"]
    assert {c["outcome"] for c in sub} == {"xfail", "xpass"}  # the empty case passes: strict, so it fails the run
    assert by["primitives/sub/float32/0"]["outcome"] == "xpass" and rc == 1
    mul = [c for c in by.values() if c["subject"] == "mul"]
    assert all(c["outcome"] == "skip" and c["skip"] == "refused" and c["stage"] == "partition" for c in mul)
    assert data["skips"]["unsupported"] == len(add) and data["counts"]["claimed"] == data["counts"]["total"] - len(
        mul)


def test_a_required_op_refused_fails_at_partition(tmp_path):
    ops = tmp_path / "ops.txt"
    ops.write_text("# what we ship\nmul\nconv  # the MAC array\n")
    rc, data = run_suite(SPEC + "Declares", ["primitives/mul/float32/17"], tmp_path / "r.html",
                         ["--require-ops", str(ops)])
    c = data["cases"][0]
    assert rc == 1 and c["outcome"] == "fail" and c["stage"] == "partition" and "required op refused" in c["detail"]
    rc, data = run_suite(SPEC + "ClaimsMul", ["primitives/mul/float32/17"], tmp_path / "r2.html")
    assert rc == 1 and data["cases"][0]["stage"] == "partition"
    ops.write_text("mull\n")
    r = subprocess.run([sys.executable, "-m", "glow_tools.cli", "conformance", "--backend", "interpreter",
                        "--require-ops", str(ops), "--case", "primitives/mul/float32/17", "-q"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "'mull' is no primitive" in r.stdout + r.stderr


def test_flows_select_cases_and_backends_claim_them(tmp_path):
    rc, data = run_suite("interpreter", ["primitives/add/*"], tmp_path / "r.html", ["--flow", "fp16"])
    assert rc == 0 and {c["dtype"] for c in data["cases"]} == {"float16"}
    assert data["flows"]["fp16"]["counts"]["total"] == data["counts"]["total"]
    rc, data = run_suite(SPEC + "Fp32Only", ["primitives/add/float32/17", "primitives/add/float16/17",
                                             "primitives/add/int32/17"], tmp_path / "r2.html")
    got = {c["id"]: c for c in data["cases"]}
    assert got["primitives/add/float16/17"]["skip"] == "flow" and got["primitives/add/float32/17"]["outcome"] == "pass"
    assert got["primitives/add/int32/17"]["outcome"] == "pass"  # in no flow: always run
    r = subprocess.run([sys.executable, "-m", "glow_tools.cli", "conformance", "--backend", SPEC + "Fp32Only",
                        "--flow", "int8-per-channel", "-q", "--case", "primitives/add/*"],
                       capture_output=True, text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                           os.path.abspath(__file__)))))
    assert r.returncode != 0 and "does not claim this flow" in r.stdout + r.stderr


def test_an_unavailable_recipe_is_a_declared_flow_skipped_with_its_reason(tmp_path, monkeypatch):
    """A flow whose recipe glow_core lacks (as int4-weight-only before glow_core.quantization.weight_only) is
    declared, and its cases skip at stage quantize saying why."""
    import dataclasses

    from glow_conformance import flows
    assert flows.FLOWS["int4-weight-only"].unavailable() is None  # weight_only exists now: the flow runs
    missing = dataclasses.replace(flows.FLOWS["int4-weight-only"], requires="glow_core.quantization.no_such_recipe")
    assert "no glow_core.quantization.no_such_recipe" in missing.unavailable()
    monkeypatch.setitem(flows.FLOWS, "int4-weight-only", missing)
    rc, data = run_suite("interpreter", ["models/mlp/int4-weight-only/recipe", "models/mlp/int16/recipe"],
                         tmp_path / "r.html")
    got = {c["id"]: c for c in data["cases"]}
    c = got["models/mlp/int4-weight-only/recipe"]
    assert c["skip"] == "flow-unavailable" and c["stage"] == "quantize" and "no_such_recipe" in c["detail"]
    assert got["models/mlp/int16/recipe"]["outcome"] == "pass" and rc == 0
    assert data["flows"]["int4-weight-only"]["note"] and not data["flows"]["int4-weight-only"]["profiles"]


def test_stages_and_statistics_in_json_junit_and_html(tmp_path):
    junit = tmp_path / "j.xml"
    rc, data = run_suite(SPEC + "Declares", ["primitives/sub/int8/17", "primitives/matmul/float32/3x5@5x7",
                                             "primitives/exp/float32/17", "primitives/mul/int8/17"],
                         tmp_path / "r.html", ["--junitxml", str(junit)])
    by = {c["id"]: c for c in data["cases"]}
    assert by["primitives/sub/int8/17"]["stage"] == "mismatch" and by["primitives/mul/int8/17"]["stage"] == "partition"
    mm = by["primitives/matmul/float32/3x5@5x7"]
    assert mm["stage"] == "pass" and [s["output"] for s in mm["stats"]] == ["output y0", "output y0"]
    st = mm["stats"][0]
    assert st["mode"] == "DOT_PRODUCT" and "sum|a*b|" in st["bound"] and st["out_of_bound"] == 0
    assert all(k in st for k in ("max_abs", "max_ulp", "mae", "sqnr_db", "err_sum", "limit_sum"))
    assert by["primitives/exp/float32/17"]["stats"][0]["mode"] == "ULP"
    assert data["stages"]["pass"] == 2 and data["stages"]["mismatch"] == 1 and data["stages"]["partition"] == 1
    cases = {tc.get("name"): tc for tc in ET.parse(junit).getroot().iter("testcase")}
    props = {name: {p.get("name"): p.get("value") for p in tc.iter("property")} for name, tc in cases.items()}
    assert props["primitives/sub/int8/17"]["stage"] == "mismatch"
    assert props["primitives/matmul/float32/3x5@5x7"]["stage"] == "pass"
    assert "[stage mismatch]" in ET.tostring(cases["primitives/sub/int8/17"]).decode()
    page = (tmp_path / "r.html").read_text()
    assert "data-id='primitives/sub/int8/17' data-outcome='fail' data-stage='mismatch'" in page
    assert "<table id='stages'>" in page and "<table id='flows'>" in page


VENDOR_MODULE = '''
"""Acme's own conformance cases: a 5x5 stem conv and a custom activation chain, judged like the kit's."""
import numpy as np
from glow_conformance.onnx_cases import one_node, model_case


def cases(ctx):
    def stem(rng):
        x = rng.uniform(-1, 1, (1, 3, 11, 11)).astype(np.float32)
        w = rng.uniform(-1, 1, (4, 3, 5, 5)).astype(np.float32)
        return one_node("Conv", [x, w], {"pads": [2, 2, 2, 2]})

    def chain(rng):
        return one_node("Sigmoid", [rng.uniform(-6, 6, (2, 40)).astype(np.float32)])
    return [model_case("acme/Conv/float32/stem_5x5", "acme", "Conv", "float32", stem, "op-acc"),
            model_case("acme/Sigmoid/float32/chain", "acme", "Sigmoid", "float32", chain, "op-ulp")]
'''

VENDOR_PYPROJECT = '''
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "acme-npu-cases"
version = "0.1"

[tool.setuptools]
py-modules = ["acme_npu_cases"]

[project.entry-points."glow_conformance.cases"]
acme = "acme_npu_cases"
'''


def test_a_vendor_case_module_installed_from_its_own_package_is_collected(tmp_path):
    """A separate distribution (built from a folder of its own, installed into a target directory) adds cases
    through the entry-point group glow_conformance.cases; glowc conformance collects and runs them."""
    src, site = tmp_path / "acme-npu-cases", tmp_path / "site"
    src.mkdir()
    (src / "pyproject.toml").write_text(textwrap.dedent(VENDOR_PYPROJECT))
    (src / "acme_npu_cases.py").write_text(textwrap.dedent(VENDOR_MODULE))
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", str(site), str(src)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    for k in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_CURRENT_TEST"):
        env.pop(k, None)
    report = tmp_path / "r.html"
    r = subprocess.run([sys.executable, "-m", "glow_tools.cli", "conformance", "--backend", "cpu", "-q", "--case",
                        "acme/*", "--conformance-report", str(report)], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads((tmp_path / "r.json").read_text())
    assert sorted(c["id"] for c in data["cases"]) == ["acme/Conv/float32/stem_5x5", "acme/Sigmoid/float32/chain"]
    assert all(c["outcome"] == "pass" and c["stage"] == "pass" and c["tier"] == "acme" for c in data["cases"])
    print("\n" + "\n".join(line for line in r.stdout.splitlines() if "acme" in line or "cases" in line))
