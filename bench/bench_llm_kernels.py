"""The CPU backend's language-model kernels (backends/cpu/kernels/llm.py) against onnxruntime's, one-node models on
the shapes of a LLaMA-style model of about 150 M parameters (hidden 768, 12 heads of 64, 4 KV heads, SwiGLU 2048,
vocabulary 32000), prefill (128 tokens) and decode (one token after 511): the fp32 decode MatMuls (one row times
the weights: the GEMV of backends/cpu/kernels/matmul.py), com.microsoft MatMulNBits (4 bits, block 32) as GEMV and
GEMM, GroupQueryAttention (rotary, KV cache), SkipSimplifiedLayerNormalization and RotaryEmbedding: the kernel's
time (glow: the instruction's time from ``execute_timed``; onnxruntime: a run with inputs and outputs bound once,
IOBinding), in alternating rounds (bench/alternate.py); medians, ratios glow / onnxruntime. The GEMVs (fp32 and
MatMulNBits) also report the bytes they stream (weights; packed weights and scales) per second against the
machine's memory read bandwidth, measured here by one thread reading 256 MiB (a C loop built with the backend's
compiler).

    python bench/bench_llm_kernels.py --threads 1,2 --rounds 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import onnx
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternate import alternating_rounds  # noqa: E402

import glow_core  # noqa: E402

MS = "com.microsoft"
HIDDEN, HEADS, KV_HEADS, HEAD, FFN, VOCAB = 768, 12, 4, 64, 2048, 32000
PREFILL, CACHE = 128, 512


def one_node(op, feeds, outs, attrs, inits=(), domain=MS):
    names = list(feeds) + [k for k, _ in inits]
    node = helper.make_node(op, names, outs, domain=domain, **attrs)
    vis = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()]
    g = helper.make_graph([node], op, vis, [helper.make_empty_tensor_value_info(o) for o in outs if o],
                          [numpy_helper.from_array(a, k) for k, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    m.ir_version = 10
    return m


def matmul_nbits(m, k, n, r, accuracy_level=0):
    """accuracy_level 4: both runtimes quantize A to int8 per block (onnxruntime's CompInt8; the CPU backend's
    templates/matmul_nbits_a8.c.j2)."""
    kb = k // 32
    inits = [("B", r.integers(0, 256, (n, kb, 16), dtype=np.uint8)), ("s", r.uniform(0.01, 0.1, (n, kb)).astype(
        np.float32))]
    model = one_node("MatMulNBits", {"a": r.uniform(-1, 1, (m, k)).astype(np.float32)}, ["y"],
                     {"K": k, "N": n, "bits": 4, "block_size": 32, "accuracy_level": accuracy_level}, inits)
    return model, {"a": r.uniform(-1, 1, (m, k)).astype(np.float32)}, n * kb * (16 + 4)


def matmul_f32(k, n, r):
    """A decode step's fp32 x @ W (W an initializer [k, n]: the CPU backend's GEMV) and the weight bytes it reads."""
    model = one_node("MatMul", {"a": r.uniform(-1, 1, (1, k)).astype(np.float32)}, ["y"], {},
                     [("W", r.uniform(-1, 1, (k, n)).astype(np.float32))], domain="")
    return model, {"a": r.uniform(-1, 1, (1, k)).astype(np.float32)}, 4 * k * n


def gqa(s, past, total, r):
    th = np.arange(CACHE)[:, None] / 10000 ** (np.arange(HEAD // 2) / (HEAD // 2))
    feeds = {"q": r.uniform(-1, 1, (1, s, HEADS * HEAD)).astype(np.float32),
             "k": r.uniform(-1, 1, (1, s, KV_HEADS * HEAD)).astype(np.float32),
             "v": r.uniform(-1, 1, (1, s, KV_HEADS * HEAD)).astype(np.float32),
             "pk": r.uniform(-1, 1, (1, KV_HEADS, past, HEAD)).astype(np.float32),
             "pv": r.uniform(-1, 1, (1, KV_HEADS, past, HEAD)).astype(np.float32),
             "sk": np.array([total - 1], np.int32)}
    inits = [("tot", np.array(total, np.int32)), ("cos", np.cos(th).astype(np.float32)),
             ("sin", np.sin(th).astype(np.float32))]
    return one_node("GroupQueryAttention", feeds, ["y", "pk_out", "pv_out"],
                    {"num_heads": HEADS, "kv_num_heads": KV_HEADS, "do_rotary": 1}, inits), feeds, 0


def skip_rms(s, r):
    feeds = {"x": r.standard_normal((1, s, HIDDEN)).astype(np.float32),
             "skip": r.standard_normal((1, s, HIDDEN)).astype(np.float32)}
    return one_node("SkipSimplifiedLayerNormalization", feeds, ["y", "", "", "sum"], {"epsilon": 1e-5},
                    [("g", np.ones(HIDDEN, np.float32))]), feeds, 0


def rotary(s, start, r):
    th = np.arange(CACHE)[:, None] / 10000 ** (np.arange(HEAD // 2) / (HEAD // 2))
    feeds = {"x": r.standard_normal((1, s, HEADS * HEAD)).astype(np.float32),
             "pos": (start + np.arange(s, dtype=np.int64)).reshape(1, s)}
    return one_node("RotaryEmbedding", feeds, ["y"], {"num_heads": HEADS},
                    [("cos", np.cos(th).astype(np.float32)), ("sin", np.sin(th).astype(np.float32))]), feeds, 0


def cases(r):
    return {
        "matmul fp32 decode q/o 768x768": matmul_f32(HIDDEN, HIDDEN, r),
        "matmul fp32 decode k/v 768x256": matmul_f32(HIDDEN, KV_HEADS * HEAD, r),
        "matmul fp32 decode gate/up 768x2048": matmul_f32(HIDDEN, FFN, r),
        "matmul fp32 decode down 2048x768": matmul_f32(FFN, HIDDEN, r),
        "matmul fp32 decode lm_head 768x32000": matmul_f32(HIDDEN, VOCAB, r),
        "matmul_nbits decode q/o 768x768": matmul_nbits(1, HIDDEN, HIDDEN, r),
        "matmul_nbits decode k/v 768x256": matmul_nbits(1, HIDDEN, KV_HEADS * HEAD, r),
        "matmul_nbits decode gate/up 768x2048": matmul_nbits(1, HIDDEN, FFN, r),
        "matmul_nbits decode down 2048x768": matmul_nbits(1, FFN, HIDDEN, r),
        "matmul_nbits decode lm_head 768x32000": matmul_nbits(1, HIDDEN, VOCAB, r),
        "matmul_nbits decode 4096x8192 (20 MB)": matmul_nbits(1, 4096, 8192, r),
        "matmul_nbits prefill 128 x 768x2048": matmul_nbits(PREFILL, HIDDEN, FFN, r),
        "matmul_nbits prefill 16 x 768x2048": matmul_nbits(16, HIDDEN, FFN, r),
        "matmul_nbits a8 decode gate/up 768x2048": matmul_nbits(1, HIDDEN, FFN, r, 4),
        "matmul_nbits a8 prefill 16 x 768x2048": matmul_nbits(16, HIDDEN, FFN, r, 4),
        "matmul_nbits a8 prefill 128 x 768x2048": matmul_nbits(PREFILL, HIDDEN, FFN, r, 4),
        "matmul_nbits a8 prefill 16 x 768x32000": matmul_nbits(16, HIDDEN, VOCAB, r, 4),
        "gqa decode (cache 512)": gqa(1, CACHE, CACHE, r),
        "gqa prefill 128": gqa(PREFILL, 0, PREFILL, r),
        "skip_rms decode": skip_rms(1, r),
        "skip_rms prefill 128": skip_rms(PREFILL, r),
        "rotary decode": rotary(1, CACHE - 1, r),
        "rotary prefill 128": rotary(PREFILL, 0, r),
    }


READ_C = """#include <stdint.h>
typedef uint64_t v8 __attribute__((vector_size(64)));
uint64_t glow_read(const uint64_t *p, int64_t n) {  /* n a multiple of 32: four 64-byte loads per step */
  v8 a = {0}, b = {0}, c = {0}, d = {0};
  for (int64_t i = 0; i < n; i += 32) {
    v8 x, y, z, w;
    __builtin_memcpy(&x, p + i, 64); __builtin_memcpy(&y, p + i + 8, 64);
    __builtin_memcpy(&z, p + i + 16, 64); __builtin_memcpy(&w, p + i + 24, 64);
    a += x; b += y; c += z; d += w;
  }
  a += b + c + d;
  uint64_t s = 0;
  for (int l = 0; l < 8; ++l) s += a[l];
  return s;
}
"""


def read_bandwidth(mib=256):
    """``measure() -> seconds`` of one thread reading ``mib`` MiB (a C loop of 64-byte vector loads, built with
    the CPU backend's compiler), and the bytes it reads."""
    import ctypes
    import subprocess
    import tempfile
    from glow_cpu.build.toolchain import find_compiler
    d = tempfile.mkdtemp(prefix="glow_bw_")
    src, lib = os.path.join(d, "read.c"), os.path.join(d, "read.so")
    with open(src, "w") as f:
        f.write(READ_C)
    subprocess.run(find_compiler() + ["-O3", "-march=native", "-fPIC", "-shared", "-o", lib, src], check=True)
    fn = ctypes.CDLL(lib).glow_read
    fn.restype, fn.argtypes = ctypes.c_uint64, [ctypes.c_void_p, ctypes.c_int64]
    a = np.ones(mib << 17, np.uint64)
    return (lambda: _timed(lambda: fn(a.ctypes.data, a.size))), a.nbytes


def _calls(measure, budget: float, warmup: int = 3) -> list[float]:
    """Seconds ``measure()`` reports per call, over calls for ``budget`` seconds (at least 3)."""
    for _ in range(warmup):
        measure()
    out, start = [], time.perf_counter()
    while len(out) < 3 or time.perf_counter() - start < budget:
        out.append(measure())
    return out


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.3, help="seconds of timed calls per round")
    ap.add_argument("--only", default="", help="comma-separated substrings of the case names")
    a = ap.parse_args(argv)
    import onnxruntime as ort
    read, read_bytes = read_bandwidth()
    bw = read_bytes / statistics.median(_calls(read, 1.0))
    print(f"memory read bandwidth (one thread, 256 MiB): {bw / 1e9:.1f} GB/s; load {os.getloadavg()[0]:.1f} "
          f"(GEMVs whose weights fit in the caches read faster than that)")
    print(f"{'case':<40} {'thr':>3} {'glow us':>9} {'ort us':>9} {'glow/ort':>8}  {'GB/s':>6} {'of bw':>6}")
    r = np.random.default_rng(0)
    for nt in [int(t) for t in a.threads.split(",")]:
        for name, (model, feeds, nbytes) in cases(r).items():
            if a.only and not any(s in name for s in a.only.split(",")):
                continue
            fn = glow_core.compile(model, "cpu", num_threads=nt).last.compiled
            so = ort.SessionOptions()
            so.intra_op_num_threads = nt
            sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            bind = sess.io_binding()  # inputs and outputs bound once: the kernel's time, no copies
            for k, v in feeds.items():
                bind.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(v))
            for o in sess.get_outputs():
                bind.bind_output(o.name)
            sess.run_with_iobinding(bind)
            run = {"glow": lambda: sum(d for _, _, d in fn.execute_timed(feeds)[1]),
                   "ort": lambda: _timed(lambda: sess.run_with_iobinding(bind))}
            t = alternating_rounds(run, a.rounds, lambda k: statistics.median(_calls(run[k], a.budget)))
            g, o = (statistics.median(t[k]) for k in ("glow", "ort"))
            rate = f"{nbytes / g / 1e9:6.1f} {nbytes / g / bw:6.0%}" if nbytes else ""
            print(f"{name:<40} {nt:>3} {g * 1e6:9.0f} {o * 1e6:9.0f} {g / o:8.2f}  {rate}", flush=True)


if __name__ == "__main__":
    main()
