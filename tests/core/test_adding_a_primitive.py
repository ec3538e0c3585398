"""Adding a primitive end to end takes three entries, made here at run time exactly as
vendor_guide/adding_a_primitive.md makes them in the files:

1. its record with its reference kernel (``glow_core.ops.registry.primitive``; in a file:
   ``glow_core/ops/primitives/elementwise.py``),
2. its CPU table entry (``glow_cpu.kernels.ew.C_MATH``; in a file: ``backends/cpu/kernels/ew.py``),
3. one conformance case line (``glow_conformance.tier_primitives.LINES``; in a file:
   ``conformance/tier_primitives.py``).

Then the conformance cases for it run on the interpreter and on the cpu backend (the real C compiler), and a
wrong CPU entry is caught. The toy primitive is ``expm1`` (e**x - 1), which the primitive set lacks.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import glow_conformance
from glow_conformance import tier_primitives
from glow_core.errors import ShapeError
from glow_core.ops.registry import PRIMITIVES, primitive
from glow_core.types import FLOATS, TensorType
from glow_cpu.kernels import codegen, elementwise, ew as kernels_ew

TOY = "expm1"


def _rule(ts):  # the shape/dtype rule: one float operand, same type out
    if ts[0].dtype.name not in FLOATS:
        raise ShapeError(f"primitive '{TOY}': dtype {ts[0].dtype} is not accepted; accepted: {', '.join(FLOATS)}")
    return [TensorType(ts[0].dtype, ts[0].shape)]


def _oracle(a, at):  # written from the definition, in float64, rounded once
    return np.expm1(a[0].astype(np.float64)).astype(a[0].dtype)


@pytest.fixture
def toy():
    """The three entries, removed again afterwards (the registries are process-wide)."""
    assert TOY not in PRIMITIVES
    primitive(TOY, "elementwise", ("x",), FLOATS, _rule, np.expm1, "e**x - 1, accurate near 0.",
              tolerance="elementwise", elementwise=True)                                      # 1. record + kernel
    kernels_ew.C_MATH[TOY] = "expm1"                                                           # 2. CPU table entry
    # (derived from C_MATH when the modules load, its C and its kernel, the elementwise loop; here they are loaded)
    kernels_ew.UNARY_C[TOY] = kernels_ew.libm(TOY)
    codegen.KERNELS[TOY] = elementwise.elementwise
    tier_primitives.LINES.append((TOY, "3x5x7", [(3, 5, 7)], {}, _oracle))                     # 3. one case line
    try:
        yield
    finally:
        codegen._MEMO.clear()
        PRIMITIVES.pop(TOY, None)
        kernels_ew.C_MATH.pop(TOY, None)
        kernels_ew.UNARY_C.pop(TOY, None)
        codegen.KERNELS.pop(TOY, None)
        tier_primitives.LINES[:] = [ln for ln in tier_primitives.LINES if ln[0] != TOY]


def run_suite(backend, tmp_path):
    report = tmp_path / "r.html"
    rc = glow_conformance.main(["--backend", backend, "-q", "-p", "no:randomly", "--case", f"primitives/{TOY}/*",
                                "--conformance-report", str(report)])
    with open(tmp_path / "r.json") as f:
        return rc, json.load(f)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_toy_primitive_passes_its_conformance_cases(toy, backend, tmp_path):
    rc, data = run_suite(backend, tmp_path)
    outcomes = {c["id"]: c["outcome"] for c in data["cases"]}
    assert sorted(outcomes) == [f"primitives/{TOY}/{dt}/3x5x7" for dt in sorted(FLOATS)]
    assert rc == 0 and set(outcomes.values()) == {"pass"}, data["counts"]


def test_a_wrong_cpu_entry_is_caught(toy, tmp_path):
    kernels_ew.C_MATH[TOY] = "exp"  # forgot the "- 1"
    codegen._MEMO.clear()  # rendered kernels are memoized per process; an edited file starts a new process
    rc, data = run_suite("cpu", tmp_path)
    failed = [c for c in data["cases"] if c["outcome"] == "fail"]
    assert rc == 1 and len(failed) == len(FLOATS), data["counts"]
    assert all(TOY in c["detail"] for c in failed)
