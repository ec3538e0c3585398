"""Text generation on the CPU backend (glow_core.llm.Generator) against onnxruntime on the same ONNX file.

The model is LLaMA-style with random weights (GQA, RoPE, RMSNorm, SwiGLU), about 125 M parameters by default:
transformers' LlamaForCausalLM exported by torch with optimum's I/O names when transformers is installed, else
the same architecture built with onnx.helper (glow_conformance.llm_models). Both runtimes generate greedily from
the same prompt, in alternating rounds (bench/alternate.py), medians:

* prefill tokens/s: the prompt's tokens over the time to its first new token's logits (the Generator in blocks of
  --prefill-block tokens into its fixed-capacity cache, by default one block of the prompt's length; onnxruntime in
  one run of the whole prompt);
* decode tokens/s: decode steps over their time (the Generator: one token per run, the cache updated in place;
  onnxruntime: one token per run, the past fed back as the export expects, plain InferenceSession.run).
At 1 and 2 threads. Also: the greedy tokens of both (they must match), the machine's memory bandwidth over 512 MiB at
one and two threads (numpy's max-reduction and copy, and a C stream of AVX-512 loads; the bound takes the C stream:
a decode step only reads its weights, see ``bandwidth``), the weight bytes one decode step reads (every weight
but the embedding table, of which one row), and decode's fraction of the bandwidth bound (tokens/s against
bandwidth / weight bytes per token). With glow_core.quantization.weight_only (the int4 MatMulNBits model), the
same for int4.

    python bench/bench_llm.py                          # ~125 M parameters, threads 1,2
    python bench/bench_llm.py --threads 1 --rounds 3 --prompt 64 --new 32
    python bench/bench_llm.py --quick                  # a tiny model, one thread, one round (the smoke test)
    python bench/bench_llm.py --threads 1 --profile decode   # per-op-kind tables against onnxruntime's kernels
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternate import alternating_rounds  # noqa: E402

from glow_conformance.llm_models import DecoderConfig, llama_decoder, transformers_llama  # noqa: E402
from glow_core import quantization  # noqa: E402
from glow_core.llm import Generator  # noqa: E402
from glow_cpu.build.runtime import omp_environment  # noqa: E402

#: ~125 M parameters: 12 layers of hidden 768 (12 query heads, 4 key/value heads of 64), SwiGLU 2048, vocab 32000.
BENCH = DecoderConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                      num_attention_heads=12, num_key_value_heads=4)
QUICK = DecoderConfig()


def build(cfg: DecoderConfig, source: str, cache_dir: str) -> tuple[str, str]:
    """The model file (built once per configuration and source, kept in ``cache_dir``) and its source."""
    if source == "auto":
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401
            source = "transformers"
        except ImportError:
            source = "helper"
    key = "_".join(str(v) for v in (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers,
                                    cfg.num_attention_heads, cfg.num_key_value_heads))
    path = os.path.join(cache_dir, f"llama_{source}_{key}.onnx")
    if not os.path.exists(path):
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        if source == "transformers":
            transformers_llama(cfg, tmp, initializer_range=0.02)
        else:
            onnx.save(llama_decoder(cfg), tmp)
        os.replace(tmp, path)
    return path, source


#: The streaming read in C (bandwidth()): each OpenMP thread reads its contiguous share with 64-byte aligned
#: AVX-512 loads into four independent integer sums (a load's result is one vpaddq), optionally prefetching
#: `ahead` bytes in front of its loads as the MatMulNBits GEMVs do (WEIGHT_PREFETCH in backends/cpu/kernels/llm.py).
READ_C = """#include <immintrin.h>
#include <stdint.h>
#include <omp.h>
int64_t glow_stream_read(const uint8_t *p, int64_t nbytes, int threads, int64_t ahead) {
  int64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads(), lines = nbytes / 256;
    const int64_t lo = lines * t / nt * 256, hi = lines * (t + 1) / nt * 256;
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    if (ahead)
      for (int64_t i = lo; i < hi; i += 256) {
        _mm_prefetch((const char *)p + i + ahead, _MM_HINT_T0);
        _mm_prefetch((const char *)p + i + ahead + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)p + i + ahead + 128, _MM_HINT_T0);
        _mm_prefetch((const char *)p + i + ahead + 192, _MM_HINT_T0);
        a = _mm512_add_epi64(a, _mm512_load_si512(p + i));
        b = _mm512_add_epi64(b, _mm512_load_si512(p + i + 64));
        c = _mm512_add_epi64(c, _mm512_load_si512(p + i + 128));
        d = _mm512_add_epi64(d, _mm512_load_si512(p + i + 192));
      }
    else
      for (int64_t i = lo; i < hi; i += 256) {
        a = _mm512_add_epi64(a, _mm512_load_si512(p + i));
        b = _mm512_add_epi64(b, _mm512_load_si512(p + i + 64));
        c = _mm512_add_epi64(c, _mm512_load_si512(p + i + 128));
        d = _mm512_add_epi64(d, _mm512_load_si512(p + i + 192));
      }
    total += _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d)));
  }
  return total;
}
"""


def _stream_reader():
    """glow_stream_read (READ_C) built with the CPU backend's own compiler and flags, once per process."""
    import ctypes
    import subprocess
    import tempfile

    from glow_cpu.build.toolchain import default_flags, find_compiler
    d = tempfile.mkdtemp(prefix="glow_bw_")
    src, lib = os.path.join(d, "read.c"), os.path.join(d, "read.so")
    with open(src, "w") as f:
        f.write(READ_C)
    subprocess.run(find_compiler() + default_flags(2) + ["-o", lib, src], check=True)
    fn = ctypes.CDLL(lib).glow_stream_read
    fn.restype, fn.argtypes = ctypes.c_int64, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int64]
    return fn


def bandwidth(nbytes: int = 512 << 20, threads: int = 1, repeats: int = 5) -> dict:
    """GB/s of reading and copying ``nbytes`` (the best of ``repeats``, ``threads`` threads), three ways:

    * "read": numpy's max-reduction of float32 (Python threads; numpy releases the GIL in these loops);
    * "copy": numpy's copy, read + write bytes counted;
    * "stream": C, AVX-512 loads (READ_C, OpenMP threads), the faster of plain loads and loads with the GEMVs'
      4 KB software prefetch.
    A decode step's GEMVs only read their weights, so the bound is "stream": the best a read-only stream
    achieves here (numpy's reduction is slower than memory on this machine, and a copy's bytes are not a read's)."""
    n = nbytes // 4
    src = aligned_floats(nbytes)
    dst = np.empty_like(src)
    edges = np.linspace(0, n, threads + 1).astype(np.int64)
    bounds = list(zip(edges[:-1], edges[1:]))

    def best_of(call):
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            call()
            best = min(best, time.perf_counter() - t0)
        return best

    def run(fn):
        def call():
            ts = [threading.Thread(target=fn, args=b) for b in bounds]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        return best_of(call)

    read = run(lambda lo, hi: np.maximum.reduce(src[lo:hi]))
    copy = run(lambda lo, hi: np.copyto(dst[lo:hi], src[lo:hi]))
    gbs = {"read": nbytes / read / 1e9, "copy": 2 * nbytes / copy / 1e9, "stream": stream_gbs(src, threads, repeats)}
    gbs["bound"] = gbs["stream"]  # the bandwidth the bound assumes: the C read-only stream
    gbs["nbytes"] = nbytes
    return gbs


def stream_gbs(src: np.ndarray, threads: int, repeats: int = 5) -> float:
    """GB/s of the C read-only stream (READ_C) over ``src`` (64-byte aligned), read again and again as a decode step
    reads its weights: the best of ``repeats``, of plain loads and of loads with the GEMVs' software prefetch. Over
    a buffer the size of one step's weights it is the bound of that working set on this machine (its last-level
    cache may hold all of it: 300 MiB of L3 on the Sapphire Rapids this was written on)."""
    from glow_cpu.kernels.llm import WEIGHT_PREFETCH
    stream_fn = _stream_reader()
    stream_fn(src.ctypes.data, src.nbytes, threads, 0)  # the OpenMP team started, the pages touched
    best = float("inf")
    for ahead in (0, WEIGHT_PREFETCH):
        for _ in range(repeats):
            t0 = time.perf_counter()
            stream_fn(src.ctypes.data, src.nbytes, threads, ahead)
            best = min(best, time.perf_counter() - t0)
    return src.nbytes / best / 1e9


def aligned_floats(nbytes: int) -> np.ndarray:
    """``nbytes`` of float32 ones, 64-byte aligned (for the C loads)."""
    n = nbytes // 4
    src = np.ones(n + 16, np.float32)
    return src[(-src.ctypes.data % 64) // 4:][:n]


def weight_bytes_per_token(model: onnx.ModelProto) -> int:
    """Bytes of weights one decode step reads: every initializer, the embedding table but one row."""
    total = 0
    for t in model.graph.initializer:
        size = int(np.prod(t.dims)) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        if "embed" in t.name and len(t.dims) == 2:
            size = int(t.dims[1]) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        total += size
    return total


class OrtLoop:
    """onnxruntime generating greedily as the export expects: the prompt in one run, then one token per run with
    the presents fed back as the next pasts."""

    def __init__(self, path: str, threads: int):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        self.sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        self.outs = [o.name for o in self.sess.get_outputs()]
        self.pasts = [i for i in self.sess.get_inputs() if i.name.startswith("past_key_values.")]

    def generate(self, ids: np.ndarray, new: int):
        past = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32) for i in self.pasts}
        seq, cur = list(ids[0]), ids
        t0 = time.perf_counter()
        for step in range(new):
            total = len(seq)
            res = dict(zip(self.outs, self.sess.run(None, {
                "input_ids": cur, "attention_mask": np.ones((1, total), np.int64),
                "position_ids": np.arange(total - cur.shape[1], total, dtype=np.int64).reshape(1, -1), **past})))
            seq.append(int(np.argmax(res["logits"][0, -1])))
            cur = np.array([[seq[-1]]], np.int64)
            past = {nm.replace("present", "past_key_values"): res[nm] for nm in self.outs[1:]}
            if step == 0:
                t1 = time.perf_counter()
        t2 = time.perf_counter()
        return np.array([seq]), ids.shape[1] / (t1 - t0), (new - 1) / (t2 - t1) if new > 1 else 0.0


def compare(path: str, label: str, threads: list[int], rounds: int, prompt: np.ndarray, new: int, capacity: int,
            block: int, bound_bytes: int, bw: dict) -> None:
    print(f"\n{label}: prompt {prompt.shape[1]} tokens, {new} new, cache {capacity} positions, prefill blocks of "
          f"{block}; weight bytes per decode step {bound_bytes / 1e6:.1f} MB")
    print(f"{'thr':>3} {'':>5} {'prefill tok/s':>14} {'decode tok/s':>13} {'ms/token':>9} {'glow/ort':>9} "
          f"{'of bound':>9} {'of ws bound':>12}  compile")
    ws_buf = aligned_floats(bound_bytes)
    for nt in threads:
        ws_bound = stream_gbs(ws_buf, nt) * 1e9 / bound_bytes  # the same stream over the weights' bytes only
        t0 = time.perf_counter()
        gen = Generator(path, backend="cpu", max_seq_len=capacity, prefill_block=block, num_threads=nt)
        compile_s = time.perf_counter() - t0
        ort_loop = OrtLoop(path, nt)
        runs = {}

        def glow():
            out = gen.generate(prompt, new)
            st = gen.stats()
            runs["glow_tokens"] = out
            return st["prefill_tokens_per_s"], st["decode_tokens_per_s"]

        def ort():
            out, p, d = ort_loop.generate(prompt, new)
            runs["ort_tokens"] = out
            return p, d
        impls = {"glow": glow, "ort": ort}
        glow(), ort()  # warm-up (and the tokens)
        got = alternating_rounds(impls, rounds, lambda k: impls[k]())
        med = {k: (statistics.median(p for p, _ in v), statistics.median(d for _, d in v)) for k, v in got.items()}
        bound = bw[nt]["bound"] * 1e9 / bound_bytes
        for k in ("glow", "ort"):
            p, d = med[k]
            ratio = (f"{med['glow'][1] / med['ort'][1]:.2f}" if k == "glow" else "")
            print(f"{nt:>3} {k:>5} {p:>14.1f} {d:>13.2f} {1e3 / d if d else float('nan'):>9.2f} {ratio:>9} "
                  f"{d / bound:>8.0%} {d / ws_bound:>11.0%}  " + (f"{compile_s:.1f} s" if k == "glow" else ""))
        print(f"    prefill glow/ort {med['glow'][0] / med['ort'][0]:.2f}; bandwidth bound at {nt} thread(s) "
              f"{bound:.1f} tokens/s (stream over {bw[nt]['nbytes'] >> 20} MiB), {ws_bound:.1f} tokens/s (ws: the same stream "
              f"over the {bound_bytes / 1e6:.1f} MB of weights, as cache-resident as decode's)")
        same = np.array_equal(runs["glow_tokens"], runs["ort_tokens"])
        print(f"    greedy tokens {'match' if same else 'MISMATCH'} onnxruntime's ({runs['glow_tokens'].shape[1]} "
              f"tokens)")


def _op_kind(ins) -> str:
    if ins.op == "com.microsoft.MatMulNBits":  # by shape: each its own GB/s
        return f"{ins.op} (weights {ins.attrs['K']}x{ins.attrs['N']})"
    if ins.op == "matmul" and len(ins.ins) > 1:
        return f"{ins.op} (weights)" if ins.ins[1].region == "constant" else f"{ins.op} (attention: QK^T, PV)"
    return ins.op


#: Weight projections by node name in transformers' exports (the rest of MatMul / FusedMatMul is attention).
WEIGHT_NAMES = ("proj", "lm_head")


def _ort_kind(name: str, op: str) -> str:
    if op in ("MatMul", "FusedMatMul", "MatMulNBits"):
        return f"{op} (weights)" if any(w in name for w in WEIGHT_NAMES) else f"{op} (attention: QK^T, PV)"
    return op


def profile(path: str, fn: str, threads: int, runs: int, prompt: np.ndarray, capacity: int, block: int,
            top: int = 12) -> None:
    """Per-op-kind tables of the Generator's ``fn`` function ("prefill": one block after the prompt's; "decode":
    one token after the prompt) from ``CompiledFunction.execute_timed``, and of onnxruntime's run of the same
    tokens (its profiler's kernel times: the whole prompt, or one token after it), the best of ``runs`` runs."""
    import tempfile

    import onnxruntime as ort
    from glow_tools.bench import ort_kernel_times
    gen = Generator(path, backend="cpu", max_seq_len=capacity, prefill_block=block, num_threads=threads)
    gen.generate(prompt, 2)
    run = gen._runs[fn]
    c = run.compiled
    feed = {k: v.copy() for k, v in c.placeholders().items() if k in run.feed}
    per, walls = [], []
    for _ in range(runs):
        t = time.perf_counter()
        _, timed = c.execute_timed(feed)
        walls.append(time.perf_counter() - t)
        acc: dict = {}
        for ins, _, sec in timed:
            acc[_op_kind(ins)] = acc.get(_op_kind(ins), 0.0) + sec
        per.append(acc)
    best = {k: min(r.get(k, 0.0) for r in per) for k in set().union(*per)}
    streamed: dict = {}  # bytes of packed weights, scales and zero points each MatMulNBits kind reads per run
    for ins, _, _ in timed:
        if ins.op == "com.microsoft.MatMulNBits":
            streamed[_op_kind(ins)] = streamed.get(_op_kind(ins), 0) + sum(v.type.numel * v.type.dtype.itemsize
                                                                           for v in ins.ins[1:4])

    def table(title, times, rates=None):
        tot = sum(times.values())
        print(title)
        for k, v in sorted(times.items(), key=lambda kv: -kv[1])[:top]:
            rate = f" {rates[k] / v / 1e9:6.1f} GB/s" if rates and k in rates and v else ""
            print(f"  {k:45s} {1e3 * v:9.2f} ms {100 * v / tot:5.1f}%{rate}")
    rows = block if fn == "prefill" else 1
    table(f"glow {fn} ({rows} rows, cache {capacity}, {threads} thread(s)): best run {1e3 * min(walls):.1f} ms", best,
          streamed)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.enable_profiling = threads, 1, True
    with tempfile.TemporaryDirectory() as d:
        so.profile_file_prefix = os.path.join(d, "ort")
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        n, past = (prompt.shape[1], 0) if fn == "prefill" else (1, prompt.shape[1])
        ids = prompt if fn == "prefill" else prompt[:, :1]
        f = {"input_ids": ids, "attention_mask": np.ones((1, past + n), np.int64),
             "position_ids": np.arange(past, past + n, dtype=np.int64).reshape(1, -1)}
        f.update({i.name: np.zeros((1, i.shape[1], past, i.shape[3]), np.float32) for i in sess.get_inputs()
                  if i.name.startswith("past_key_values.")})
        ws = []
        for _ in range(runs + 1):
            t = time.perf_counter()
            sess.run(None, f)
            ws.append(time.perf_counter() - t)
        events = ort_kernel_times(sess.end_profiling())
    by_op: dict = {}
    for name, v in events.items():
        for i, (sec, op) in enumerate(v[1:]):
            by_op.setdefault(_ort_kind(name, op), [0.0] * (len(v) - 1))[i] += sec
    table(f"onnxruntime ({n} token(s) after {past}): best run {1e3 * min(ws[1:]):.1f} ms",
          {k: min(v) for k, v in by_op.items()})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a tiny model, one thread, one round (smoke test)")
    ap.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens (default 64)")
    ap.add_argument("--new", type=int, default=32, help="new tokens (default 32)")
    ap.add_argument("--max-seq-len", type=int, default=256, help="the cache's capacity (default 256)")
    ap.add_argument("--prefill-block", type=int, default=0,
                    help="prefill block (default 0: the prompt's length, one run as onnxruntime's; a smaller block "
                         "runs the prompt in several, each streaming every weight at fewer rows per GEMM)")
    ap.add_argument("--source", choices=["auto", "transformers", "helper"], default="auto",
                    help="transformers' export (when installed: auto) or onnx.helper")
    ap.add_argument("--omp-wait-policy", choices=["passive", "active"],
                    help="OMP_WAIT_POLICY for the CPU backend's OpenMP threads (default: the cpu runtime's "
                         "GOMP_SPINCOUNT=1000, backends/cpu/README.md 'OpenMP wait policy')")
    ap.add_argument("--precisions", default="fp32,int4", help="models to compare (default fp32,int4; int4a8: the "
                    "int4 model with accuracy_level 4, int8 activations)")
    ap.add_argument("--profile", choices=["prefill", "decode"],
                    help="instead: per-op-kind tables of one function against onnxruntime's kernels (the fp32 model, or "
                         "the int4 one when --precisions starts with int4)")
    ap.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "glow_kit", "bench_llm"))
    args = ap.parse_args(argv)
    if args.omp_wait_policy:  # read by libgomp when it loads: torch's copy, if the model is exported here
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()
    omp_environment()  # else the cpu runtime's spin count, set before torch loads libgomp.so.1 (shared by the kernels)
    if args.quick:
        cfg, threads, args.rounds, args.prompt, args.new = QUICK, [1], 1, 8, 8
        args.max_seq_len, args.prefill_block, args.source = 32, 4, "helper"
        bw_bytes = 64 << 20
    else:
        cfg, threads, bw_bytes = BENCH, [int(t) for t in args.threads.split(",")], 512 << 20
    print(f"load {open('/proc/loadavg').read().split()[:3]}, {os.cpu_count()} cores, OMP_WAIT_POLICY "
          f"{os.environ.get('OMP_WAIT_POLICY', 'unset')}, GOMP_SPINCOUNT {os.environ.get('GOMP_SPINCOUNT', 'unset')}")
    path, source = build(cfg, args.source, args.cache_dir)
    model = onnx.load(path, load_external_data=False)
    print(f"model: {source}, {cfg.parameters() / 1e6:.1f} M parameters ({os.path.getsize(path) / 1e6:.0f} MB), "
          f"{cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, {cfg.num_attention_heads} heads / "
          f"{cfg.num_key_value_heads} kv heads, vocab {cfg.vocab_size}: {path}")
    prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, args.prompt)).astype(np.int64)
    args.prefill_block = args.prefill_block or min(args.prompt, args.max_seq_len - 1)
    if args.profile:
        if args.precisions.split(",")[0] == "int4":  # else the fp32 model
            path = path.replace(".onnx", "_int4.onnx")
            onnx.save(quantization.weight_only(model, bits=4, block_size=32, symmetric=True), path)
        for nt in threads:
            profile(path, args.profile, nt, max(args.rounds, 5), prompt, args.max_seq_len, args.prefill_block)
        return 0
    bw = {nt: bandwidth(bw_bytes, nt) for nt in threads}
    for nt, b in bw.items():
        print(f"memory bandwidth, {nt} thread(s): read {b['read']:.1f} GB/s, copy {b['copy']:.1f} GB/s (numpy); "
              f"C stream read {b['stream']:.1f} GB/s (AVX-512 loads: the bound's)")
    if "fp32" in args.precisions.split(","):
        compare(path, "fp32", threads, args.rounds, prompt, args.new, args.max_seq_len, args.prefill_block,
                weight_bytes_per_token(model), bw)
    precisions = args.precisions.split(",")
    if "int4" not in precisions and "int4a8" not in precisions:
        return 0
    weight_only = getattr(quantization, "weight_only", None)
    if weight_only is None:
        print("\nint4: glow_core.quantization.weight_only is not available yet (MatMulNBits import: branch llmops)")
        return 0
    if "int4" in precisions:
        q = weight_only(model, bits=4, block_size=32, symmetric=True)
        qpath = path.replace(".onnx", "_int4.onnx")
        onnx.save(q, qpath)
        compare(qpath, "int4 (MatMulNBits, block 32)", threads, args.rounds, prompt, args.new, args.max_seq_len,
                args.prefill_block, weight_bytes_per_token(q), bw)
    if "int4a8" in precisions:  # accuracy_level 4: both runtimes quantize A to int8 per block
        q = weight_only(model, bits=4, block_size=32, symmetric=True, accuracy_level=4)
        qpath = path.replace(".onnx", "_int4a8.onnx")
        onnx.save(q, qpath)
        compare(qpath, "int4, int8 activations (MatMulNBits accuracy_level 4, block 32)", threads, args.rounds,
                prompt, args.new, args.max_seq_len, args.prefill_block, weight_bytes_per_token(q), bw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
