"""A device on its first day: ``cma_npu`` claims only conv, matmul and add in float32 (a SubsetBackend over the CPU
backend's generated C, with an accelerator's cost model) and runs ResNet-18-, MobileNetV2- and BERT-style models
with CPU fallback.

For each model: the placement (partitions per backend, the reasons table, as ``glowc partition`` prints it), the
result against the model compiled for the CPU backend alone (the conformance suite's model tolerance, and the
largest absolute difference), compile times, and run latency (median of ``--runs``) partitioned and unpartitioned.

    python bench/bench_partition.py [--models resnet18,mobilenetv2,bert_encoder] [--runs 15] [--threads 1]
                                    [--reports DIR]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

import glow_core
from glow_conformance.checker import compare
from glow_conformance.subset import conv_matmul_add
from glow_conformance import example_models as models
from glow_core.placement import REASONS

MODELS = {"resnet18": models.resnet18, "mobilenetv2": models.mobilenetv2, "bert_encoder": models.bert_encoder}


def feeds(model):
    rng = np.random.default_rng(0)
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def latencies(a, b, x, runs):
    """Median run times of compiled models ``a`` and ``b``, measured alternately (a shared machine's load then
    weighs on both alike)."""
    ts: tuple[list, list] = ([], [])
    for cm in (a, b):
        cm.run(x)
    for _ in range(runs):
        for cm, t in zip((a, b), ts):
            t0 = time.perf_counter()
            cm.run(x)
            t.append(time.perf_counter() - t0)
    return statistics.median(ts[0]), statistics.median(ts[1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1, help="num_threads of the CPU code (1: least noise on a shared "
                                                          "machine)")
    ap.add_argument("--reports", metavar="DIR", help="write each model's full placement report and dot file here")
    args = ap.parse_args(argv)
    for name in args.models.split(","):
        model = MODELS[name]()
        x = feeds(model)
        t0 = time.perf_counter()
        part = glow_core.compile(model, backend=[conv_matmul_add(), "cpu"], num_threads=args.threads)
        t_part = time.perf_counter() - t0
        t0 = time.perf_counter()
        alone = glow_core.compile(model, backend="cpu", num_threads=args.threads)
        t_alone = time.perf_counter() - t0
        got, want = part.run(x), alone.run(x)
        for k in want:
            compare(got[k], want[k], "model", f"{name}: output {k}", rerun="")
        diff = max(float(np.max(np.abs(got[k].astype(np.float64) - want[k]))) for k in want)
        rep = part.placement()
        print(f"== {name}: {len(rep.nodes)} nodes in {len(rep.partitions)} partitions "
              f"(cma_npu {rep.count('cma_npu')}, cpu {rep.count('cpu')}); on cma_npu "
              f"{sum(n.backend == 'cma_npu' for n in rep.nodes)} nodes, "
              f"{sum(n.flops for n in rep.nodes if n.backend == 'cma_npu') / 1e6:.1f} of "
              f"{sum(n.flops for n in rep.nodes) / 1e6:.1f} MFLOP")
        print("   reasons (nodes not on cma_npu): " + ", ".join(f"{REASONS[r]} {c}" for r, c in rep.reasons().items()))
        print(f"   matches cpu alone within the model tolerance; max abs difference {diff:.3g}")
        lp, la = latencies(part, alone, x, args.runs)
        print(f"   compile {t_part:.1f} s partitioned, {t_alone:.1f} s cpu alone (C compiler cache as found); run "
              f"{lp * 1e3:.1f} ms partitioned, {la * 1e3:.1f} ms cpu alone (medians of {args.runs}, alternating, "
              f"{args.threads} thread(s))")
        if args.reports:
            os.makedirs(args.reports, exist_ok=True)
            with open(os.path.join(args.reports, f"{name}.txt"), "w") as f:
                f.write(str(rep) + "\n")
            with open(os.path.join(args.reports, f"{name}.dot"), "w") as f:
                f.write(rep.to_dot())
    return 0


if __name__ == "__main__":
    sys.exit(main())
