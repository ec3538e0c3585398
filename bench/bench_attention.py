"""Fused attention (backends/cpu/fusion/attention.py) against the unfused kernels and onnxruntime on one attention
subgraph: Q [1, H, S, D], K^T [1, H, D, S], V [1, H, S, D] inputs, MatMul -> Mul by 1/sqrt(D) -> Add mask
[1, 1, 1, S] -> Softmax -> MatMul, over sequence lengths S, in alternating rounds (bench/alternate.py), medians.
Prints per S: fused, unfused and onnxruntime ms, fused / unfused, fused / onnxruntime, and what the cost rule
(attention.fused_wins) picks. The numbers behind attention.MIN_KEYS. With ``--models`` (bench_cpu's families)
the same alternating loop on whole models: attention "auto" against "never" and onnxruntime.

    python bench/bench_attention.py --seq 128,197,512,1024,2048 --heads 4 --dim 64 --threads 1,2 --rounds 5
    python bench/bench_attention.py --models vit_tiny,bert_encoder,bert12 --threads 1,2 --rounds 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternate import alternating_rounds, timed_runs  # noqa: E402

import glow_core.api as api  # noqa: E402
from glow_cpu.fusion import attention  # noqa: E402


def subgraph(heads: int, seq: int, dim: int) -> onnx.ModelProto:
    """The attention core as the bench models export it (heads already split: the projections' transposes are
    not part of it)."""
    f = TensorProto.FLOAT
    scale = helper.make_tensor("scale", f, [], [1.0 / np.sqrt(dim)])
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Add", ["ss", "mask"], ["sm"]), helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["o"])]
    g = helper.make_graph(nodes, "attention", [
        helper.make_tensor_value_info("q", f, [1, heads, seq, dim]),
        helper.make_tensor_value_info("kt", f, [1, heads, dim, seq]),
        helper.make_tensor_value_info("v", f, [1, heads, seq, dim]),
        helper.make_tensor_value_info("mask", f, [1, 1, 1, seq])],
        [helper.make_tensor_value_info("o", f, [1, heads, seq, dim])], [scale])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _alternate(run: dict, rounds: int, budget: float) -> dict:
    """Median ms per implementation over alternating rounds (each round's value the median of its timed calls)."""
    t = alternating_rounds(run, rounds, lambda k: statistics.median(timed_runs(run[k], budget)))
    return {k: statistics.median(v) * 1e3 for k, v in t.items()}


def models(names, threads, rounds, budget) -> None:
    """Whole models of bench_cpu: attention "auto" and "never" and onnxruntime in one alternating loop."""
    import bench_cpu
    print(f"{'model':<14} {'thr':>3} {'fused ms':>9} {'unfused':>9} {'ort':>9} {'fused/unf':>9} {'fused/ort':>9} "
          f"{'unf/ort':>8}  fused instances")
    for nt in threads:
        for name in names:
            model = bench_cpu.build(name)
            feed = bench_cpu.feed_of(model)
            impls = {m: api.compile(model, "cpu", attention=m, num_threads=nt) for m in ("auto", "never")}
            sess = bench_cpu.ort_session(model, nt)
            run = {"fused": lambda: impls["auto"].run(feed), "unfused": lambda: impls["never"].run(feed),
                   "ort": lambda: sess.run(None, feed)}
            med = _alternate(run, rounds, budget)
            n = sum(c.code.choice.startswith("attention fused") for c in impls["auto"].last.compiled.program.calls)
            print(f"{name:<14} {nt:>3} {med['fused']:>9.3f} {med['unfused']:>9.3f} {med['ort']:>9.3f} "
                  f"{med['fused'] / med['unfused']:>9.2f} {med['fused'] / med['ort']:>9.2f} "
                  f"{med['unfused'] / med['ort']:>8.2f}  {n}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", default="128,197,512,1024,2048")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.3, help="seconds of timed calls per implementation per round")
    ap.add_argument("--models", default="", help="bench_cpu models instead of the subgraph, e.g. vit_tiny,bert12")
    args = ap.parse_args(argv)
    print(f"load: {os.getloadavg()[0]:.2f}; heads {args.heads}, head dim {args.dim}; medians of {args.rounds} "
          "alternating rounds")
    if args.models:
        models(args.models.split(","), list(map(int, args.threads.split(","))), args.rounds, args.budget)
        return
    import onnxruntime as ort
    rng = np.random.default_rng(0)
    print(f"{'S':>5} {'thr':>3} {'fused ms':>9} {'unfused':>9} {'ort':>9} {'fused/unf':>9} {'fused/ort':>9} "
          f"{'unf/ort':>8}  rule")
    for nt in map(int, args.threads.split(",")):
        for s in map(int, args.seq.split(",")):
            model = subgraph(args.heads, s, args.dim)
            feeds = {"q": rng.standard_normal((1, args.heads, s, args.dim), np.float32),
                     "kt": rng.standard_normal((1, args.heads, args.dim, s), np.float32),
                     "v": rng.standard_normal((1, args.heads, s, args.dim), np.float32),
                     "mask": np.where(rng.random((1, 1, 1, s)) < 0.1, -1e4, 0).astype(np.float32)}
            impls = {m: api.compile(model, "cpu", attention=m, num_threads=nt) for m in ("always", "never")}
            so = ort.SessionOptions()
            so.intra_op_num_threads = nt
            so.inter_op_num_threads = 1
            sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            ref = sess.run(None, feeds)[0]
            for m, cm in impls.items():
                got = np.asarray(cm.run(feeds)["o"])
                assert np.allclose(got, ref, rtol=1e-4, atol=1e-5), (m, s, float(np.abs(got - ref).max()))
            run = {"fused": lambda: impls["always"].run(feeds), "unfused": lambda: impls["never"].run(feeds),
                   "ort": lambda: sess.run(None, feeds)}
            med = _alternate(run, args.rounds, args.budget)
            rule = "fused" if attention.fused_wins(s, s, args.dim, nt) else "unfused"
            print(f"{s:>5} {nt:>3} {med['fused']:>9.3f} {med['unfused']:>9.3f} {med['ort']:>9.3f} "
                  f"{med['fused'] / med['unfused']:>9.2f} {med['fused'] / med['ort']:>9.2f} "
                  f"{med['unfused'] / med['ort']:>8.2f}  {rule}", flush=True)


if __name__ == "__main__":
    main()
