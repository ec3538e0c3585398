"""How the CPU backend builds: kernels shared between identical instructions, cached one by one (a changed
model recompiles only its new kernels), scratch planned as @scratch operands (no allocator in generated code,
checked with nm on a bundle's object file), the device memory limit covering scratch, compiler errors."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_conformance import example_models
from glow_core.errors import GlowError, MemoryLimitError
from glow_cpu.build import toolchain
from glow_cpu.backend import CPUBackend

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None
                                and not os.environ.get("CC"), reason="no C compiler")

ALLOCATORS = {"malloc", "calloc", "realloc", "free", "aligned_alloc", "posix_memalign"}


def scratch_model(seed=0):
    """Every scratch path: float32 convs with a constant filter (the conv engine: padded input copy and output
    blocks), float32 convs with computed filters (im2col + GEMM panels; a 1x1: direct GEMM), a float16 conv with
    constant weights (converted at compile time) and float16 matmuls with a constant and a computed B (converted
    operands), large float32 matmuls with a constant B (packed at compile time: A panels only) and a computed B
    (A and B panels), a small int32 matmul (row buffer), an int32 conv (converted
    weights and outputs at run time)."""
    rng = np.random.default_rng(seed)
    w = lambda *s: (0.2 * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(w(16, 3, 3, 3), "w1"), numpy_helper.from_array(w(16), "b1"),
             numpy_helper.from_array(w(8, 8, 3, 3).astype(np.float16), "w3"),
             numpy_helper.from_array(w(200, 96).astype(np.float16), "fc16"),
             numpy_helper.from_array(w(8, 16, 1, 1), "w2"),
             numpy_helper.from_array(w(256, 300), "fc32"),
             numpy_helper.from_array(rng.integers(-3, 4, (5, 7)).astype(np.int32), "ifc"),
             numpy_helper.from_array(rng.integers(-3, 4, (2, 4, 3, 3)).astype(np.int32), "iw"),
             numpy_helper.from_array(np.array([1, 200], np.int64), "flat")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c1", "w2"], ["c2"]),
             helper.make_node("Conv", ["x", "wd"], ["cd"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["cd", "wd1"], ["cd1"]),
             helper.make_node("Cast", ["c2"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("Conv", ["h", "w3"], ["c3"], strides=[2, 2]),
             helper.make_node("Reshape", ["c3", "flat"], ["c3f"]),
             helper.make_node("Expand", ["c3f", "rows"], ["a16"]),
             helper.make_node("MatMul", ["a16", "fc16"], ["y16"]),
             helper.make_node("Transpose", ["y16"], ["y16t"], perm=[1, 0]),
             helper.make_node("MatMul", ["y16t", "y16"], ["z16"]),
             helper.make_node("MatMul", ["big", "fc32"], ["y32"]),
             helper.make_node("MatMul", ["big", "bigb"], ["y32b"]),
             helper.make_node("MatMul", ["i", "ifc"], ["yi"]),
             helper.make_node("Conv", ["ix", "iw"], ["ci"])]
    inits.append(numpy_helper.from_array(np.array([64, 200], np.int64), "rows"))
    g = helper.make_graph(nodes, "scratch",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12]),
                           helper.make_tensor_value_info("big", TensorProto.FLOAT, [64, 256]),
                           helper.make_tensor_value_info("bigb", TensorProto.FLOAT, [256, 300]),
                           helper.make_tensor_value_info("i", TensorProto.INT32, [3, 5]),
                           helper.make_tensor_value_info("ix", TensorProto.INT32, [1, 4, 6, 6]),
                           helper.make_tensor_value_info("wd", TensorProto.FLOAT, [4, 3, 3, 3]),
                           helper.make_tensor_value_info("wd1", TensorProto.FLOAT, [2, 4, 1, 1])],
                          [helper.make_tensor_value_info("y16", TensorProto.FLOAT16, [64, 96]),
                           helper.make_tensor_value_info("z16", TensorProto.FLOAT16, [96, 96]),
                           helper.make_tensor_value_info("y32", TensorProto.FLOAT, [64, 300]),
                           helper.make_tensor_value_info("y32b", TensorProto.FLOAT, [64, 300]),
                           helper.make_tensor_value_info("yi", TensorProto.INT32, [3, 7]),
                           helper.make_tensor_value_info("ci", TensorProto.INT32, [1, 2, 4, 4]),
                           helper.make_tensor_value_info("cd1", TensorProto.FLOAT, [1, 2, 12, 12])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def scratch_feed(seed=1):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32),
            "big": rng.standard_normal((64, 256)).astype(np.float32),
            "bigb": (0.1 * rng.standard_normal((256, 300))).astype(np.float32),
            "i": rng.integers(-5, 6, (3, 5)).astype(np.int32),
            "ix": rng.integers(-5, 6, (1, 4, 6, 6)).astype(np.int32),
            "wd": (0.2 * rng.standard_normal((4, 3, 3, 3))).astype(np.float32),
            "wd1": (0.2 * rng.standard_normal((2, 4, 1, 1))).astype(np.float32)}


def test_every_scratch_path_is_planned_and_matches_the_interpreter():
    model = scratch_model()
    cm = glow_core.compile(model, "cpu", num_threads=2)
    ir = cm.ir
    choices = {c.code.choice for c in cm.last.compiled.program.calls}
    for want in ("im2col + gemm f32", "direct + gemm f32",
                 "im2col + gemm f32, weights in float32 (prepared at compile time)",
                 "gemm f32 on converted operands (b prepared at compile time)", "gemm f32 on converted operands",
                 "gemm f32", "gemm f32 (b packed at compile time)", "loops in int64_t",
                 "im2col + loops in int64_t, weights in int64 (prepared at compile time)"):
        assert want in choices, (want, choices)
    assert any(c.startswith("conv engine: direct") for c in choices), choices
    needing = [i for i in ir.code if i.op in ("conv", "matmul")]
    assert needing and all(i.scratch is not None and i.scratch.region == "activation" for i in needing)
    assert "@scratch %" in ir.dump()
    src = cm.last.compiled.source
    assert not any(f"{a}(" in src for a in ALLOCATORS)
    want = glow_core.compile(model, "interpreter").run(scratch_feed())
    got = cm.run(scratch_feed())
    for k in want:
        tol = 2e-2 if want[k].dtype == np.float16 else 1e-4
        np.testing.assert_allclose(got[k].astype(np.float64), want[k].astype(np.float64), rtol=tol,
                                   atol=tol * max(1.0, float(np.abs(want[k].astype(np.float64)).max())), err_msg=k)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("name", ["cnn", "scratch"])
def test_bundle_object_references_no_allocator(tmp_path, name):
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed: cannot list the bundle object's undefined symbols")
    model = example_models.cnn(seed=3) if name == "cnn" else scratch_model()
    cm = glow_core.compile(model, "cpu", num_threads=1)
    out = tmp_path / "bundle"
    cm.backend.emit_bundle(cm.last.ir, str(out), {"bundle_name": name})
    r = subprocess.run(["make", "-C", str(out), f"{name}.o"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["nm", "-u", str(out / f"{name}.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    undefined = {ln.split()[-1].split("@")[0] for ln in r.stdout.splitlines() if ln.strip()}
    assert not (undefined & ALLOCATORS), undefined & ALLOCATORS
    r = subprocess.run(["nm", "-g", "--defined-only", str(out / f"{name}.o")], capture_output=True, text=True)
    assert name in r.stdout.split(), r.stdout  # nm read the object: the entry point is there
    if name == "scratch":  # the bundle (-O2, no -march=native: other GEMM tiles) computes what the library does
        r = subprocess.run(["make", "-C", str(out)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        feed = scratch_feed()
        args = []
        for k in cm.last.ir.inputs:
            p = tmp_path / f"{k}.bin"
            p.write_bytes(feed[k].tobytes())
            args.append(str(p))
        res = tmp_path / "res"
        res.mkdir()
        r = subprocess.run([str(out / "bundle_main"), str(out / f"{name}.weights.bin"), *args, str(res)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        got = cm.run(feed)
        for k, v in got.items():
            b = np.frombuffer((res / f"{k}.bin").read_bytes(), v.dtype).reshape(v.shape).astype(np.float64)
            v = v.astype(np.float64)
            np.testing.assert_allclose(b, v, rtol=1e-3, atol=1e-5 * max(1.0, np.abs(v).max()), err_msg=k)


class SmallDevice(CPUBackend):
    """The CPU backend on a device whose activation memory is ``capacity`` bytes."""

    name = "cpu_small"

    def __init__(self, capacity):
        self.capacity = capacity

    def memory_capacity(self):
        return self.capacity


def test_memory_capacity_covers_scratch():
    model = example_models.cnn(seed=1)
    without = glow_core.compile(model, "interpreter").ir.plan.activations_size  # no scratch there
    plan = glow_core.compile(model, "cpu", num_threads=1).ir.plan
    scratch = [b for b in glow_core.compile(model, "cpu", num_threads=1).ir.buffers if b.name.endswith("__scratch")]
    assert scratch and plan.activations_size > without
    with pytest.raises(MemoryLimitError, match="scratch"):
        glow_core.compile(model, SmallDevice(without), num_threads=1)
    x = np.random.default_rng(0).standard_normal((1, 3, 28, 28)).astype(np.float32)
    cm = glow_core.compile(model, SmallDevice(plan.activations_size), num_threads=1)
    want = glow_core.compile(model, "interpreter").run({"input": x})["output"]
    np.testing.assert_allclose(cm.run({"input": x})["output"], want, rtol=1e-5, atol=1e-5)


def test_identical_layers_share_kernels():
    two = glow_core.compile(example_models.bert_encoder(seed=0, layers=2, hidden=64, heads=2, ffn=128, seq=16), "cpu",
                            num_threads=1).last.compiled.program
    three = glow_core.compile(example_models.bert_encoder(seed=1, layers=3, hidden=64, heads=2, ffn=128, seq=16), "cpu",
                              num_threads=1).last.compiled.program
    assert len(three.calls) > len(two.calls) > 2 * len(two.kernels)
    assert set(three.kernels) == set(two.kernels)  # a third layer (other weights) needs no new kernel


def test_changed_model_recompiles_only_its_new_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOW_CACHE_DIR", str(tmp_path))
    a = glow_core.compile(example_models.bert_encoder(seed=0, layers=2, hidden=64, heads=2, ffn=128, seq=16), "cpu",
                          num_threads=1).last.compiled
    assert sorted(a.build.compiled) == sorted(a.program.kernels) and a.build.shards >= 1
    b = glow_core.compile(example_models.bert_encoder(seed=0, layers=2, hidden=64, heads=2, ffn=96, seq=16), "cpu",
                          num_threads=1).last.compiled
    new = set(b.program.kernels) - set(a.program.kernels)
    assert 0 < len(new) < len(b.program.kernels) / 2
    assert sorted(b.build.compiled) == sorted(new)
    runs = toolchain.COMPILER_RUNS
    again = glow_core.compile(example_models.bert_encoder(seed=5, layers=1, hidden=64, heads=2, ffn=96, seq=16), "cpu",
                              num_threads=1).last.compiled
    assert again.build.compiled == [] and toolchain.COMPILER_RUNS == runs


def test_shards_split_large_work_across_cores():
    small = [glow_cpu_kernel(i, 100) for i in range(3)]
    big = [glow_cpu_kernel(i, 5000) for i in range(40)]
    assert len(toolchain._shards(small, 4)) == 1  # not worth a second compiler process
    shards = toolchain._shards(big, 4)
    assert len(shards) == 4 and sorted(k.name for s in shards for k in s) == sorted(k.name for k in big)
    sizes = [sum(len(k.source) for k in s) for s in shards]
    assert max(sizes) - min(sizes) <= 5000


def glow_cpu_kernel(i, n):
    from glow_cpu.kernels.codegen import KernelCode
    return KernelCode(f"glow_k_{i}", "x" * n, (), (), "test")


def test_compiler_failure_is_reported_with_its_output(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOW_CACHE_DIR", str(tmp_path))
    with pytest.raises(GlowError, match="C compilation failed") as e:
        glow_core.compile(example_models.linear_sigmoid(seed=2), "cpu", num_threads=1, cflags="-O2 -fno-such-flag-xyz")
    assert "no-such-flag-xyz" in str(e.value)


def test_cflags_reach_the_compiler_and_the_cache_key(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOW_CACHE_DIR", str(tmp_path))
    model = example_models.linear_sigmoid(seed=3)
    x = np.random.default_rng(0).standard_normal((3, 10)).astype(np.float32)
    want = glow_core.compile(model, "interpreter").run({"input_1": x})["output_1"]
    default = glow_core.compile(model, "cpu", num_threads=1).last.compiled
    other = glow_core.compile(model, "cpu", num_threads=1, cflags=["-O1", "-DGLOW_TEST_FLAG=1"]).last.compiled
    assert sorted(other.build.compiled) == sorted(other.program.kernels)  # other flags: other cached objects
    assert set(other.build.paths.values()).isdisjoint(default.build.paths.values())
    for f in (default, other):
        np.testing.assert_allclose(f.execute({"input_1": x})["output_1"], want, rtol=1e-6)


def test_dump_source_shows_the_algorithm_of_every_call(tmp_path):
    path = tmp_path / "cnn.onnx"
    path.write_bytes(example_models.cnn(seed=2).SerializeToString())
    r = subprocess.run([sys.executable, "-m", "glow_tools.cli", "dump", str(path), "--backend", "cpu", "--source"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "/* conv conv1_conv: conv engine: direct 3-lane input blocks, " in r.stdout
    assert ", relu fused in registers */" in r.stdout
    assert "/* max_pool pool1_max_pool: max_pool */" in r.stdout and "malloc" not in r.stdout
