"""PyTorch in, the parts that need no torch: the error without it, and importer gaps found through exporter output
(rebuilt here with onnx.helper so they run everywhere)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

import glow_core
from glow_core.errors import ShapeError


def test_without_torch_the_error_says_how_to_get_it():
    code = ("import sys; sys.modules['torch'] = None\n"  # as if torch were not installed
            "import numpy as np, glow_core\n"
            "try:\n"
            "    glow_core.compile(object(), 'interpreter', example_inputs=(np.zeros(2),))\n"
            "except glow_core.GlowError as e:\n"
            "    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "needs torch, which is not installed" in r.stdout and "pip install 'glow-kit[torch]'" in r.stdout


def test_lstm_state_of_the_wrong_shape_is_named():
    """torch exports LSTM(proj_size=...) as an ONNX LSTM whose initial_c is wider than hidden_size (ONNX has no
    projection); the importer must name the input and the expected shape instead of failing inside a mul."""
    nd, n, h, i, s = 1, 2, 4, 6, 5
    w = helper.make_tensor("W", TensorProto.FLOAT, (nd, 4 * h, i), np.zeros(nd * 4 * h * i))
    r = helper.make_tensor("R", TensorProto.FLOAT, (nd, 4 * h, h), np.zeros(nd * 4 * h * h))
    node = helper.make_node("LSTM", ["X", "W", "R", "", "", "h0", "c0"], ["Y"], hidden_size=h, name="lstm")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, (s, n, i)),
                                        helper.make_tensor_value_info("h0", TensorProto.FLOAT, (nd, n, h)),
                                        helper.make_tensor_value_info("c0", TensorProto.FLOAT, (nd, n, 2 * h))],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], [w, r])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    with pytest.raises(ShapeError, match=r"'lstm'.*initial_c has shape \(1, 2, 8\), expected \(1, 2, 4\)"):
        glow_core.compile(m, "interpreter")
