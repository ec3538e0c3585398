"""Squeeze-excite on the CPU backend's blocked layout (backends/cpu/layouts.py): the spatial reductions read NCHWc
and write a plain [N, C, 1, 1] result, the channel gate's broadcast and mul stay NCHWc (the mul reads the gate
in place), so no conversion runs between the convs. Checked against numpy written from the ONNX definitions."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from glow_core.api import compile_function
from glow_core.discovery import get_backend
from glow_core.ir import PLAIN
from glow_core.layout import LAYOUT_CONVERT

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None
                              and not os.environ.get("CC"), reason="no C compiler")


def _weights(c, seed):
    rng = np.random.default_rng(seed)
    r = max(1, c // 4)
    return {"wd": rng.standard_normal((c, 1, 3, 3)), "bd": rng.standard_normal(c) * 0.1,
            "w1": rng.standard_normal((r, c, 1, 1)) / np.sqrt(c), "b1": rng.standard_normal(r) * 0.1,
            "w2": rng.standard_normal((c, r, 1, 1)) / np.sqrt(r), "b2": rng.standard_normal(c) * 0.1,
            "w3": rng.standard_normal((c + 3, c, 1, 1)) / np.sqrt(c), "b3": rng.standard_normal(c + 3) * 0.1}


def _model(shape, w):
    """y = depthwise 3x3 conv(x); gate = sigmoid(conv(relu(conv(mean_hw(y))))); outputs conv1x1(y * gate),
    max_hw(y) (no kept dims) and sum_hw(y) (kept dims)."""
    c = shape[1]
    nodes = [helper.make_node("Conv", ["x", "wd", "bd"], ["y"], group=c, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["y"], ["s"]),
             helper.make_node("Conv", ["s", "w1", "b1"], ["h0"]),
             helper.make_node("Relu", ["h0"], ["h"]),
             helper.make_node("Conv", ["h", "w2", "b2"], ["g0"]),
             helper.make_node("Sigmoid", ["g0"], ["g"]),
             helper.make_node("Mul", ["y", "g"], ["yg"]),
             helper.make_node("Conv", ["yg", "w3", "b3"], ["z"]),
             helper.make_node("ReduceMax", ["y", "axes"], ["mx"], keepdims=0),
             helper.make_node("ReduceSum", ["y", "axes"], ["sm"], keepdims=1)]
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in w.items()]
    inits.append(numpy_helper.from_array(np.array([2, 3], np.int64), "axes"))
    g = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("z", "mx", "sm")],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


def _conv1x1(x, w, b):
    return np.einsum("nchw,fc->nfhw", x, w[:, :, 0, 0]) + b[None, :, None, None]


def _expected(x, w):
    """The ONNX definitions in float64 numpy: Conv (group = C, pads 1), GlobalAveragePool, ReduceMax/ReduceSum."""
    n, c, hgt, wid = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.broadcast_to(w["bd"][None, :, None, None], x.shape).copy()
    for dy in range(3):
        for dx in range(3):
            y += xp[:, :, dy:dy + hgt, dx:dx + wid] * w["wd"][None, :, 0, dy, dx, None, None]
    s = y.mean(axis=(2, 3), keepdims=True)
    gate = 1 / (1 + np.exp(-_conv1x1(np.maximum(_conv1x1(s, w["w1"], w["b1"]), 0), w["w2"], w["b2"])))
    return {"z": _conv1x1(y * gate, w["w3"], w["b3"]), "mx": y.max(axis=(2, 3)),
            "sm": y.sum(axis=(2, 3), keepdims=True)}


def _run(shape, threads, x, seed=0):
    w = _weights(shape[1], seed)
    r = compile_function(_model(shape, w), get_backend("cpu"), options={"num_threads": threads})
    return r, r.compiled.execute({"x": x}), _expected(x, w)


@needs_cc
@pytest.mark.parametrize("shape,threads", [((2, 20, 9, 9), 1), ((2, 32, 9, 9), 1), ((2, 20, 40, 40), 2),
                                           ((1, 48, 40, 40), 2)])
def test_squeeze_excite_stays_blocked_and_matches_numpy(shape, threads):
    """C = 20: a partial channel block (its padding lanes are read by the gate and the mul, never stored by the
    reductions); 32 and 48 fill whole blocks (of 8 or 16); 40x40 planes pass the parallel thresholds."""
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    r, got, want = _run(shape, threads, x)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-4, atol=1e-4 * float(np.abs(v).max()), err_msg=k)
    code = r.ir.code
    assert not [i for i in code if i.op == LAYOUT_CONVERT]
    by_op = {i.op: i for i in code}
    for op in ("reduce_sum", "reduce_max", "broadcast", "mul"):
        assert by_op[op].ins[0].layout.startswith("nchwc"), op
    assert by_op["reduce_sum"].outs[0].layout == PLAIN and by_op["broadcast"].outs[0].layout.startswith("nchwc")
    choices = [c.code.choice for c in r.compiled.program.calls]
    assert any("reduce_sum over NCHWc" in ch for ch in choices) and any("reduce_max over NCHWc" in ch for ch in choices)
    assert any(ch.startswith("mul, input 1 read in place") and "+ j" in ch for ch in choices), choices


@needs_cc
@pytest.mark.parametrize("threads", [1, 2])
def test_blocked_reductions_propagate_special_values_per_channel(threads):
    """NaN and +-inf in channels 1 and 19 (the partial block's last) reach only their channels' maxima and
    sums; every other channel stays finite and exact to numpy."""
    shape = (2, 20, 40, 40)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    x[0, 1, 5, 7], x[1, 1, 30, 2] = np.nan, np.inf
    x[0, 19, 0, 0], x[1, 19, 39, 39], x[1, 19, 20, 20] = -np.inf, np.inf, -0.0
    _, got, want = _run(shape, threads, x, seed=3)
    for k in ("mx", "sm"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-4 * float(np.nanmax(np.abs(
            np.where(np.isfinite(want[k]), want[k], 0)))), err_msg=k)
        assert not np.isfinite(got[k].reshape(2, 20)[:, [1, 19]]).all()
        assert np.isfinite(np.delete(got[k].reshape(2, 20), [1, 19], axis=1)).all()
