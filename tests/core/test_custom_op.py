"""A vendor's custom operator, registered from OUTSIDE the repository.

A small package (``acme_ops``) is written into a temporary folder and imported from there: its ``__init__``
registers ``com.acme.ScaledSoftsign`` with ``glow_core.ops.custom_op`` (attribute, shape rule, numpy reference,
conformance case lines), its ``backend`` module holds ``AcmeBackend``, a backend that claims the op and runs
it with its own kernel. A real ONNX model using the domain (built with onnx.helper) imports, runs on the
interpreter against a numpy expectation written here, reaches AcmeBackend whole, and ``pytest conformance``
runs the op's cases for AcmeBackend in a fresh process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core import errors
from glow_core.api import FallbackWarning
from glow_core.ops.registry import OPS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

INIT = '''
"""Acme's custom operators for Glow Kit."""
import numpy as np

from glow_core.errors import ShapeError
from glow_core.ops import custom_op
from glow_core.types import TensorType


def _shape(types, alpha):
    (x,) = types
    if x.rank == 0:
        raise ShapeError("ScaledSoftsign: the input must have at least one dimension")
    return [TensorType(x.dtype, x.shape)]


def scaled_softsign(x, alpha=1.0):
    """alpha * x / (1 + |x|), elementwise."""
    return (alpha * x / (1 + np.abs(x))).astype(x.dtype)


SCALED_SOFTSIGN = custom_op("com.acme", "ScaledSoftsign", _shape, scaled_softsign, attrs={"alpha": 1.0},
                            dtypes=("float32", "float64"),
                            cases=[("3x4", [(3, 4)], {}), ("alpha2/2x3x5", [(2, 3, 5)], {"alpha": 2.0})])
'''

BACKEND = '''
"""AcmeBackend: the interpreter plus Acme's own kernel for com.acme.ScaledSoftsign, which it claims."""
import numpy as np

from glow_interpreter.backend import InterpreterBackend, InterpreterFunction

from . import SCALED_SOFTSIGN  # noqa: F401  (registers the custom op)

CALLS = []


def device_scaled_softsign(x, alpha=1.0):
    CALLS.append(x.shape)
    out = np.abs(x)
    out += 1
    np.divide(x, out, out=out)
    out *= alpha
    return out


class AcmeBackend(InterpreterBackend):
    name = "acme"

    def is_op_supported(self, node_info):
        if node_info.op == "ScaledSoftsign":
            return node_info.in_dtypes[0] in ("float32", "float64")
        return super().is_op_supported(node_info)

    def compile(self, function, options):
        return InterpreterFunction(function, kernels={"ScaledSoftsign": device_scaled_softsign})
'''


@pytest.fixture(scope="module")
def vendor(tmp_path_factory):
    """The vendor package, written outside the repository and imported from there."""
    root = tmp_path_factory.mktemp("vendor")
    pkg = root / "acme_ops"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(INIT))
    (pkg / "backend.py").write_text(textwrap.dedent(BACKEND))
    sys.path.insert(0, str(root))
    try:
        import acme_ops.backend
        assert acme_ops.__file__.startswith(str(root))
        yield root, acme_ops.backend
    finally:
        sys.path.remove(str(root))
        for m in [m for m in sys.modules if m == "acme_ops" or m.startswith("acme_ops.")]:
            del sys.modules[m]
        OPS.pop("ScaledSoftsign", None)


def acme_model(alpha=2.0, domain="com.acme", op="ScaledSoftsign"):
    """y = ScaledSoftsign(x, alpha) + c, with the domain in the opset imports."""
    c = numpy_helper.from_array(np.array([0.5, -1.0, 2.0, 0.0], np.float32), "c")
    nodes = [helper.make_node(op, ["x"], ["s"], name="acme_node", domain=domain, alpha=alpha),
             helper.make_node("Add", ["s", "c"], ["y"], name="add")]
    g = helper.make_graph(nodes, "acme", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], [c])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])


X = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)


def expected(x, alpha):
    return (alpha * x.astype(np.float64) / (1 + np.abs(x.astype(np.float64)))
            + np.array([0.5, -1.0, 2.0, 0.0])).astype(np.float32)


def test_model_runs_on_the_interpreter(vendor):
    cm = glow_core.compile(acme_model(alpha=2.0), "interpreter")
    np.testing.assert_allclose(cm.run({"x": X})["y"], expected(X, 2.0), rtol=1e-6)
    kept = [i for i in cm.last.ir.code if i.op == "ScaledSoftsign"]
    assert len(kept) == 1 and kept[0].attrs["alpha"] == 2.0  # kept whole, never lowered


def test_default_attribute_and_constant_folding(vendor):
    m = acme_model()
    del m.graph.node[0].attribute[:]  # alpha defaults to 1.0
    np.testing.assert_allclose(glow_core.compile(m).run({"x": X})["y"], expected(X, 1.0), rtol=1e-6)
    m.graph.initializer.append(numpy_helper.from_array(X, "x"))  # a constant input: folded by the reference
    del m.graph.input[:]
    cm = glow_core.compile(m)
    assert not any(n.op == "ScaledSoftsign" for n in cm.last.graph.nodes)
    np.testing.assert_allclose(cm.run({})["y"], expected(X, 1.0), rtol=1e-6)


def test_reaches_the_backend_that_claims_it(vendor):
    _, backend_module = vendor
    backend_module.CALLS.clear()
    cm = glow_core.compile(acme_model(alpha=0.5), backend_module.AcmeBackend())
    np.testing.assert_allclose(cm.run({"x": X})["y"], expected(X, 0.5), rtol=1e-6)
    assert backend_module.CALLS == [(3, 4)]  # the vendor's own kernel ran, on the whole op
    with pytest.raises(errors.UnsupportedOpError, match="ScaledSoftsign"):
        glow_core.compile(acme_model(), "cpu", fallback=False)  # a backend that does not claim it refuses it by name
    with pytest.warns(FallbackWarning, match="ScaledSoftsign"):  # by default it runs on the cpu's fallback
        cm = glow_core.compile(acme_model(alpha=0.5), "cpu")
    np.testing.assert_allclose(cm.run({"x": X})["y"], expected(X, 0.5), rtol=1e-6)


def test_importer_refuses_unknown_domains_and_ops(vendor):
    with pytest.raises(errors.UnsupportedOpError, match=r"domain 'com\.other' is not supported.*com\.acme"):
        glow_core.compile(acme_model(domain="com.other"))
    with pytest.raises(errors.UnsupportedOpError, match=r"Frobnicate is not registered in domain 'com\.acme'"):
        glow_core.compile(acme_model(op="Frobnicate"))
    m = acme_model()
    m.graph.node[0].attribute.append(helper.make_attribute("beta", 1.0))
    with pytest.raises(errors.ImportError_, match="beta"):
        glow_core.compile(m)
    bad = acme_model()
    bad.graph.input[0].type.tensor_type.elem_type = TensorProto.INT32
    with pytest.raises(errors.ShapeError, match="int32 is not accepted by com.acme.ScaledSoftsign"):
        glow_core.compile(bad)


def test_conformance_cases_from_the_record(vendor, tmp_path):
    root, _ = vendor
    report = tmp_path / "r.html"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "pytest", "conformance", "--backend", "acme_ops.backend:AcmeBackend",
                        "-q", "-p", "no:randomly", "--case", "ops/ScaledSoftsign/*", "--conformance-report",
                        str(report)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with open(tmp_path / "r.json") as f:
        data = json.load(f)
    ids = sorted(c["id"] for c in data["cases"])
    assert ids == sorted(f"ops/ScaledSoftsign/{dt}/{v}" for dt in ("float32", "float64") for v in ("3x4", "alpha2/2x3x5"))
    assert {c["outcome"] for c in data["cases"]} == {"pass"}


def test_a_reserved_domain_or_taken_name_is_refused(vendor):
    from glow_core.ops import custom_op
    with pytest.raises(errors.GlowError, match="reserved for ONNX"):
        custom_op("ai.onnx", "Mine", lambda ts: ts, lambda x: x)
    with pytest.raises(errors.GlowError, match="already defined"):
        custom_op("com.acme", "Relu", lambda ts: ts, lambda x: x)


def test_not_foldable_custom_op_stays_a_node():
    from glow_core.ops import custom_op
    custom_op("com.acme.test", "Draw", lambda ts: [ts[0]], lambda x: x + np.ones((), x.dtype), foldable=False)
    try:
        m = helper.make_model(helper.make_graph(
            [helper.make_node("Draw", ["c"], ["y"], domain="com.acme.test")], "g", [],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
            [numpy_helper.from_array(np.zeros(2, np.float32), "c")]),
            opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.acme.test", 1)])
        cm = glow_core.compile(m, optimize=True)
        assert [i.op for i in cm.last.ir.code] == ["Draw"]
        np.testing.assert_array_equal(cm.run({})["y"], np.ones(2, np.float32))
    finally:
        OPS.pop("Draw", None)
