"""The float residual add folded into a conv-engine conv's epilogue on the planned IR (backends/cpu/fusion/residual.py):
when it applies, what the listing says, and exactness: bit-equal to the same code with the add as its own kernel,
equal to onnxruntime."""
from __future__ import annotations

import os
import shutil

import numpy as np
import onnxruntime as ort
import pytest

import glow_core
import glow_cpu.fusion as fusion
from conformance import networks as M
from glow_conformance import example_models

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None
                              and not os.environ.get("CC"), reason="no C compiler")


def feeds(model, seed=5, scale=3.0):
    rng = np.random.default_rng(seed)
    return {vi.name: (rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]) * scale)
            .astype(np.float32) for vi in model.graph.input}


def fused_pairs(cm):
    """(conv name, add name) of every add the program runs in a conv's epilogue."""
    calls = cm.last.compiled.program.calls
    return [(calls[i - 1].instr.name, c.instr.name) for i, c in enumerate(calls)
            if c.code.name == fusion.STUB.name and c.instr.op == "add" and "epilogue of the conv" in c.code.choice]


def unfused(model, threads, monkeypatch):
    """The model compiled with the residual rule off (the add as its own kernel)."""
    with monkeypatch.context() as m:
        m.setattr(fusion, "RULES", tuple(r for r in fusion.RULES if r.name != "residual"))
        return glow_core.compile(model, "cpu", num_threads=threads)


IN_PLACE = "fused in registers (the residual read from the output's own memory)"
CASES = {  # name -> (network, its arguments, threads, the residual read from the output's memory)
    "winograd_relu_blocked": (M.residual, dict(act="Relu", x=(1, 16, 12, 12), w=(16, 16, 3, 3), blocked=True), 1,
                              False),
    "direct_1x1_plain_2t": (M.residual, dict(act=None, x=(1, 32, 32, 32), w=(40, 32, 1, 1), blocked=False), 2, False),
    "direct_5x5_clip_partial_block": (M.residual, dict(act="Clip", x=(1, 20, 13, 13), w=(20, 20, 5, 5),
                                                       blocked=True), 2, False),
    "depthwise_sigmoid_plain": (M.residual, dict(act="Sigmoid", x=(1, 20, 11, 11), w=(20, 1, 3, 3), blocked=False,
                                                 group=20), 1, False),
    # downsampling blocks: the sum over the main branch's output, the add in the shortcut conv (one channel chunk
    # for 512 channels; nchw output: partial sums in scratch, batch 2)
    "downsample_wide_blocked_2t": (M.downsample, dict(act=None, x=(1, 512, 6, 6), filters=256, tail="conv"), 2,
                                   True),
    "downsample_clip_plain_batch2": (M.downsample, dict(act="Clip", x=(2, 24, 10, 10), filters=40, tail="pool"), 1,
                                     True),
}


@needs_cc
@pytest.mark.parametrize("name", list(CASES))
def test_residual_add_runs_in_the_conv_epilogue_exactly(name, monkeypatch):
    """conv -> Add(conv, earlier) [-> activation]: one kernel (the add's call does nothing), the listing says so,
    bit-equal to the unfused kernels over inputs with infinities, NaN and -0, and equal to onnxruntime."""
    network, args, threads, in_place = CASES[name]
    model = network(seed=2, **args)
    feed = feeds(model)
    first = next(iter(feed))
    feed[first].reshape(-1)[:6] = [np.inf, -np.inf, np.nan, -0.0, 1e-40, 3e38]
    cm = glow_core.compile(model, "cpu", num_threads=threads)
    assert len(fused_pairs(cm)) == 1
    choices = [c.code.choice for c in cm.last.compiled.program.calls if c.instr.op == "conv"]
    assert any("residual add" in c and c.endswith(IN_PLACE if in_place else "fused in registers")
               for c in choices), choices
    got = cm.run(feed)
    plain = unfused(model, threads, monkeypatch)
    assert fused_pairs(plain) == []
    want = plain.run(feed)
    for k in got:
        np.testing.assert_array_equal(got[k], want[k])
    clean = feeds(model)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, clean)[0]
    np.testing.assert_allclose(next(iter(cm.run(clean).values())), ref, rtol=1e-4, atol=1e-4)


@needs_cc
def test_resnet18_identity_blocks_fuse_and_stay_exact(monkeypatch):
    """ResNet-18 at 64x64: the five identity blocks' adds (the conv right before them, the sum written in place of
    the conv's output; the last block's sum feeds the global average pool, which reads NCHWc: no conversion in
    between) and the three downsampling blocks' (the sum written over the main branch's output: the shortcut conv
    reads the residual from its own output) run in the conv's epilogue. Bit-equal to the unfused run."""
    model = example_models.resnet18(seed=1, size=64)
    feed = feeds(model, scale=1.0)
    cm = glow_core.compile(model, "cpu", num_threads=2)
    pairs = fused_pairs(cm)
    assert len(pairs) == 8 and all(a.startswith("add_s") for _, a in pairs), pairs
    assert sum(c.code.choice.endswith(IN_PLACE) for c in cm.last.compiled.program.calls) == 3
    plain = unfused(model, 2, monkeypatch)
    np.testing.assert_array_equal(next(iter(cm.run(feed).values())), next(iter(plain.run(feed).values())))


HARD = [(("HardSwish", {}), "hard_swish", {"alpha": float(np.float32(1 / 6)), "beta": 0.5}),
        (("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), "hard_sigmoid",
         {"alpha": float(np.float32(0.3)), "beta": float(np.float32(0.4))})]


@needs_cc
@pytest.mark.parametrize("producer", ["conv", "depthwise"])
@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("act,name,params", HARD, ids=[h[1] for h in HARD])
def test_hard_swish_and_hard_sigmoid_fused_on_conv_exactly(producer, dt, act, name, params):
    """HardSwish and HardSigmoid after a conv and a depthwise conv: one fused activation (its alpha and beta as
    the lowered splats hold them), in the conv engine's registers for float32, in the generic kernels' store
    for float64; bit-equal to the unfused mul, add, max, min (and mul) over inputs with infinities, NaN, -0 and
    values on the clip's corners, equal to onnxruntime (float32)."""
    from onnx import TensorProto
    from tests.core.test_fusion import NoFusionCPU, activation_model, fused
    npd = np.float32 if dt == "float32" else np.float64
    model, xs = activation_model(act, producer, dtype=TensorProto.FLOAT if dt == "float32" else TensorProto.DOUBLE,
                                 npd=npd)
    x = (np.random.default_rng(9).standard_normal(xs) * 4).astype(npd)
    x.reshape(-1)[:10] = [np.inf, -np.inf, np.nan, -0.0, 3.0, -3.0, 1e-40, 3e38, -3e38, 2.5]
    cm = glow_core.compile(model, "cpu", num_threads=1)
    want_params = params if dt == "float32" else {"alpha": pytest.approx(params["alpha"], rel=1e-7),
                                                  "beta": pytest.approx(params["beta"], rel=1e-7)}
    assert fused(cm.ir) == [("conv", name, want_params)]
    choices = [c.code.choice for c in cm.last.compiled.program.calls if c.instr.op == "conv"]
    if dt == "float32":
        assert any(c.startswith("conv engine") and c.endswith(f"{name} fused in registers") for c in choices), choices
    got = cm.run({"x": x})["y"]
    plain = glow_core.compile(model, NoFusionCPU(), num_threads=1)
    assert fused(plain.ir) == [("conv", None, None)]
    np.testing.assert_array_equal(got, plain.run({"x": x})["y"])
    if dt == "float32":
        clean = (np.random.default_rng(3).standard_normal(xs) * 4).astype(npd)
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": clean})[0]
        np.testing.assert_allclose(cm.run({"x": clean})["y"], want, rtol=1e-5, atol=1e-5)
