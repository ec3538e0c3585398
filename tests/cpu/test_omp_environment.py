"""The cpu runtime's OpenMP default: GOMP_SPINCOUNT is set before libgomp loads unless the user chose a policy."""
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import os, numpy as np, onnx
from onnx import helper, TensorProto
import glow_core
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
before = os.environ.get("GOMP_SPINCOUNT")
y = glow_core.compile(m, "cpu", num_threads=2).run({"x": np.array([-1, 2, -3, 4], np.float32)})["y"]
assert y.tolist() == [0, 2, 0, 4]
print(before, os.environ.get("GOMP_SPINCOUNT"), os.environ.get("OMP_WAIT_POLICY"))
"""


@pytest.mark.parametrize("env, want", [
    ({}, "None 1000 None"),
    ({"OMP_WAIT_POLICY": "PASSIVE"}, "None None PASSIVE"),
    ({"GOMP_SPINCOUNT": "50"}, "50 50 None"),
])
def test_spin_count_is_set_only_when_the_user_chose_nothing(env, want):
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env={**base, **env}, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == want
