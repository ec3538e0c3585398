"""Benchmark of the CPU backend: matmul GFLOP/s against numpy, and model latency against the interpreter.

    OPENBLAS_NUM_THREADS=1 python bench/bench_cpu.py [--n 1024] [--reps 5] [--threads 1] [--models cnn,resnet]

Measure numpy single-threaded (OPENBLAS_NUM_THREADS=1) for the matmul ratio; the target is >= 60% of numpy.
Also prints the CNN's compile time cold (empty cache directory) and cached.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import glow_core  # noqa: E402
from glow_core import models  # noqa: E402


def best(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def matmul_model(n):
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "mm",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="cnn,resnet")
    a = ap.parse_args(argv)
    n = a.n
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    cm = glow_core.compile(matmul_model(n), "cpu", num_threads=a.threads)
    feed = {"a": x, "b": y}
    np.testing.assert_allclose(cm.run(feed)["c"], x @ y, rtol=1e-3, atol=1e-3)
    tg, tn = best(lambda: cm.run(feed), a.reps), best(lambda: x @ y, a.reps)
    fl = 2.0 * n ** 3
    print(f"matmul {n}^3 float32: cpu backend {fl / tg / 1e9:.1f} GFLOP/s, numpy {fl / tn / 1e9:.1f} GFLOP/s "
          f"({100 * tn / tg:.0f}% of numpy; threads={a.threads}, OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')})")

    with tempfile.TemporaryDirectory() as d:
        old = os.environ.get("GLOW_CACHE_DIR")
        os.environ["GLOW_CACHE_DIR"] = d
        try:
            t = time.perf_counter()
            glow_core.compile(models.cnn(seed=0), "cpu", num_threads=a.threads)
            cold = time.perf_counter() - t
            t = time.perf_counter()
            glow_core.compile(models.cnn(seed=0), "cpu", num_threads=a.threads)
            cached = time.perf_counter() - t
        finally:
            if old is None:
                os.environ.pop("GLOW_CACHE_DIR")
            else:
                os.environ["GLOW_CACHE_DIR"] = old
    print(f"cnn compile: cold {cold:.2f} s, cached {cached:.3f} s")

    builders = {"cnn": (lambda: models.cnn(seed=0), (1, 3, 28, 28)),
                "resnet": (lambda: models.resnet(seed=0, batch=1, size=32), (1, 3, 32, 32))}
    for name in [m for m in a.models.split(",") if m]:
        build, shape = builders[name]
        model = build()
        inp = model.graph.input[0].name
        xin = rng.standard_normal(shape).astype(np.float32)
        c = glow_core.compile(model, "cpu", num_threads=a.threads)
        i = glow_core.compile(model, "interpreter")
        np.testing.assert_allclose(c.run({inp: xin})[model.graph.output[0].name],
                                   i.run({inp: xin})[model.graph.output[0].name], rtol=1e-4, atol=1e-4)
        tc = best(lambda: c.run({inp: xin}), a.reps * 4)
        ti = best(lambda: i.run({inp: xin}), a.reps)
        print(f"{name}: cpu {tc * 1e3:.3f} ms, interpreter {ti * 1e3:.3f} ms ({ti / tc:.1f}x)")


if __name__ == "__main__":
    main()
