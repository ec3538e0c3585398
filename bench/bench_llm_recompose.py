"""torch's decompositions of RMSNorm and rotary embeddings (transformers' LlamaRMSNorm and rotate_half, as
glow_conformance.llm_decompositions builds them) on the shapes of bench_llm.py's model (hidden 768, 12 query and
4 key/value heads of 64), prefill (64 tokens) and decode (one token at position 511), three ways on the same ONNX
file: the CPU backend with graph pass recompose-llm (its pipeline: RMSNormalization / RotaryEmbedding whole), the
CPU backend without it (the default pipeline: the decomposition lowered and fused elementwise), and onnxruntime
(its own graph optimizations on). Times: glow the sum of the instructions' ``execute_timed``, onnxruntime a run
with inputs and outputs bound once (IOBinding: its per-run overhead, about 10 us, included); alternating rounds,
medians. "kernel us" is the whole-op instruction alone; "its part" the decomposed program's time less what the
two programs share (the rotary's cos and sin from the positions: computed once per step for every layer in a
model), i.e. the decomposition's own instructions.

    python bench/bench_llm_recompose.py --threads 1 --rounds 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternate import alternating_rounds, timed_runs  # noqa: E402

import glow_core  # noqa: E402
from glow_conformance import llm_decompositions as D  # noqa: E402
from glow_core.passes import DEFAULT_PIPELINE  # noqa: E402
from glow_cpu.backend import CPUBackend  # noqa: E402

HIDDEN, HEADS, KV_HEADS, HEAD = 768, 12, 4, 64
WHOLE = ("RMSNormalization", "RotaryEmbedding")
PREFILL, POSITION = 64, 511


class Decomposed(CPUBackend):
    """The CPU backend with the default graph passes only (no recompose-llm)."""

    def optimization_pipeline(self):
        return list(DEFAULT_PIPELINE)


def cases():
    out = {}
    for label, s in (("decode", 1), ("prefill 64", PREFILL)):
        pos = np.full((1, s), POSITION, np.int64) if s == 1 else np.arange(s, dtype=np.int64).reshape(1, s)
        r = np.random.default_rng(s)
        out[f"rms_norm {label}"] = (D.rms_norm(opset=18, shape=(1, s, HIDDEN), eps=1e-5),
                                    {"input": r.standard_normal((1, s, HIDDEN)).astype(np.float32)})
        for what, h in (("q", HEADS), ("k", KV_HEADS)):
            out[f"rotary {what} {label}"] = (D.rotary(opset=18, heads=h, seq=s, dim=HEAD),
                                             {"input": r.standard_normal((1, h, s, HEAD)).astype(np.float32),
                                              "position_ids": pos})
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.3, help="seconds of timed calls per round")
    a = ap.parse_args(argv)
    import onnxruntime as ort
    print(f"load {open('/proc/loadavg').read().split()[:3]}")
    print(f"{'case':<24} {'thr':>3} {'whole us':>9} {'decomp us':>9} {'ort us':>9} {'whole/ort':>9} "
          f"{'decomp/ort':>10} {'kernel us':>9} {'its part':>9}  whole kernel")
    for nt in [int(t) for t in a.threads.split(",")]:
        for name, (model, feeds) in cases().items():
            whole = glow_core.compile(model, "cpu", num_threads=nt)
            ops = [i.op for i in whole.last.ir.code]
            decomposed = glow_core.compile(model, Decomposed(), num_threads=nt)
            want = decomposed.run(feeds)
            got = whole.run(feeds)
            err = max(float(np.abs(got[k] - want[k]).max()) for k in want)
            so = ort.SessionOptions()
            so.intra_op_num_threads = nt
            sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            bind = sess.io_binding()
            for k, v in feeds.items():
                bind.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(v))
            for o in sess.get_outputs():
                bind.bind_output(o.name)
            sess.run_with_iobinding(bind)
            fw, fd = whole.last.compiled, decomposed.last.compiled

            def timed(fn):
                t = time.perf_counter()
                fn()
                return time.perf_counter() - t
            kernel_times = []

            def whole_run():
                timed = fw.execute_timed(feeds)[1]
                kernel_times.append(sum(d for ins, _, d in timed if ins.op in WHOLE))
                return sum(d for _, _, d in timed)
            run = {"whole": whole_run,
                   "decomposed": lambda: sum(d for _, _, d in fd.execute_timed(feeds)[1]),
                   "ort": lambda: timed(lambda: sess.run_with_iobinding(bind))}

            def measure(k):
                fn = run[k]
                ts = []
                timed_runs(lambda: ts.append(fn()), a.budget)
                return statistics.median(ts)
            t = alternating_rounds(run, a.rounds, measure)
            w, d, o = (statistics.median(t[k]) for k in ("whole", "decomposed", "ort"))
            kinds = [op for op in ops if op in WHOLE]
            k = statistics.median(kernel_times)
            print(f"{name:<24} {nt:>3} {w * 1e6:9.1f} {d * 1e6:9.1f} {o * 1e6:9.1f} {w / o:9.2f} {d / o:10.2f} "
                  f"{k * 1e6:9.1f} {(d - (w - k)) * 1e6:9.1f}  {kinds[0] if kinds else 'NONE'} ({len(ops)} "
                  f"instructions; max |whole - decomposed| {err:.1e})", flush=True)


if __name__ == "__main__":
    main()
