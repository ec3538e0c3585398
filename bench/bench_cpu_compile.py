"""Compile time of the CPU backend: cold (empty cache), cached, and after a change of a few kernels.

    python bench/bench_cpu_compile.py [--models bert12,vit_tiny] [--rounds 3] [--threads N]

Every measurement runs in a fresh process (imports excluded) with its own cache directory: ``cold`` starts from an
empty GLOW_CACHE_DIR, ``cached`` compiles the same model again into that cache, ``changed`` then compiles a
variant that differs in a few kernels (the feed-forward width of every layer) into the same cache. Each line
gives the median over ``--rounds`` of: the whole ``glow_core.compile``, its backend stage (``CPUBackend.compile``:
code generation, the C compiler, loading), the seconds spent waiting for the C compiler, each with its CPU
seconds beside it (the process's, and the compiler processes' user + system: less sensitive to a loaded
machine than wall time), and counts (instructions, distinct kernels, kernels compiled, compiler processes). onnxruntime's session creation for the
same model is timed in the same run for comparison.

Models (built here with onnx.helper): bert12, a 12-layer BERT-style encoder (hidden 384, 6 heads, FFN 1536,
sequence 128: ``glow_conformance.example_models.bert_encoder``); vit_tiny, a ViT-Tiny-style model (224x224 input, 16x16 patches
by a strided Conv, hidden 192, 3 heads, MLP 768, 12 pre-LN layers, class token, learned position embedding,
a 1000-way head).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name)


def vit_tiny(seed: int = 0, size: int = 224, patch: int = 16, hidden: int = 192, heads: int = 3, layers: int = 12,
             mlp: int = 768, classes: int = 1000):
    """A ViT-Tiny-style classifier (see the module docstring). Opset 17."""
    rng = np.random.default_rng(seed)
    tokens = (size // patch) ** 2 + 1
    dh = hidden // heads
    nodes, inits = [], [
        _init("patch_w", rng.standard_normal((hidden, 3, patch, patch)) * np.sqrt(1.0 / (3 * patch * patch))),
        _init("patch_b", 0.02 * rng.standard_normal(hidden)),
        _init("cls", 0.02 * rng.standard_normal((1, 1, hidden))),
        _init("pos", 0.02 * rng.standard_normal((1, tokens, hidden))),
        numpy_helper.from_array(np.array([1, hidden, tokens - 1], np.int64), "shape_patches"),
        numpy_helper.from_array(np.array([1, tokens, heads, dh], np.int64), "shape_heads"),
        numpy_helper.from_array(np.array([1, tokens, hidden], np.int64), "shape_hidden"),
        numpy_helper.from_array(np.array([0], np.int64), "idx0"),
        _init("scale", np.float32(1.0 / np.sqrt(dh))), _init("half", np.float32(0.5)),
        _init("one", np.float32(1.0)), _init("inv_sqrt2", np.float32(1.0 / np.sqrt(2.0)))]

    def node(op, ins, out, **kw):
        nodes.append(helper.make_node(op, ins, [out], name=out, **kw))
        return out

    def linear(x, a, b, name):
        inits.extend([_init(name + "_w", rng.standard_normal((a, b)) * np.sqrt(1.0 / a)),
                      _init(name + "_b", 0.02 * rng.standard_normal(b))])
        return node("Add", [node("MatMul", [x, name + "_w"], name + "_mm"), name + "_b"], name)

    def layernorm(x, name):
        inits.extend([_init(name + "_g", 1 + 0.1 * rng.standard_normal(hidden)),
                      _init(name + "_beta", 0.1 * rng.standard_normal(hidden))])
        return node("LayerNormalization", [x, name + "_g", name + "_beta"], name, axis=-1, epsilon=1e-6)

    def heads_of(x, name):
        return node("Transpose", [node("Reshape", [x, "shape_heads"], name + "_r")], name + "_t", perm=[0, 2, 1, 3])

    p = node("Conv", ["image", "patch_w", "patch_b"], "patch", strides=[patch, patch])
    p = node("Transpose", [node("Reshape", [p, "shape_patches"], "patch_flat")], "patch_seq", perm=[0, 2, 1])
    x = node("Add", [node("Concat", ["cls", p], "tokens", axis=1), "pos"], "embed")
    for li in range(layers):
        pre = f"l{li}_"
        h = layernorm(x, pre + "ln1")
        q, k, v = (heads_of(linear(h, hidden, hidden, pre + n), pre + n + "h") for n in ("q", "k", "v"))
        kt = node("Transpose", [k], pre + "kt", perm=[0, 1, 3, 2])
        s = node("Mul", [node("MatMul", [q, kt], pre + "qk"), "scale"], pre + "scores")
        a = node("MatMul", [node("Softmax", [s], pre + "probs", axis=-1), v], pre + "ctx")
        a = node("Reshape", [node("Transpose", [a], pre + "ctx_t", perm=[0, 2, 1, 3]), "shape_hidden"], pre + "ctx_r")
        x = node("Add", [x, linear(a, hidden, hidden, pre + "o")], pre + "res1")
        h = linear(layernorm(x, pre + "ln2"), hidden, mlp, pre + "fc1")
        g = node("Erf", [node("Mul", [h, "inv_sqrt2"], pre + "gx")], pre + "erf")
        g = node("Mul", [node("Mul", [h, node("Add", [g, "one"], pre + "g1")], pre + "g2"), "half"], pre + "gelu")
        x = node("Add", [x, linear(g, mlp, hidden, pre + "fc2")], pre + "res2")
    x = layernorm(x, "final_ln")
    c = node("Gather", [x, "idx0"], "cls_out", axis=1)
    inits.append(numpy_helper.from_array(np.array([1, hidden], np.int64), "shape_cls"))
    logits = linear(node("Reshape", [c, "shape_cls"], "cls_flat"), hidden, classes, "head")
    g = helper.make_graph(nodes, "vit_tiny", [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                                             [1, 3, size, size])],
                          [helper.make_tensor_value_info(logits, TensorProto.FLOAT, [1, classes])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def bert12(ffn: int = 1536):
    from glow_conformance import example_models
    return example_models.bert_encoder(seed=0, layers=12, hidden=384, heads=6, ffn=ffn, seq=128)


MODELS = {"bert12": (bert12, lambda: bert12(ffn=1600)),
          "vit_tiny": (vit_tiny, lambda: vit_tiny(mlp=800))}

_CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
import glow_core
from glow_cpu import backend as cpu_backend
from bench.bench_cpu_compile import MODELS
model = MODELS[{name!r}][{variant}]()
timing = {{}}
inner = cpu_backend.CPUBackend.compile
def compile_timed(self, function, options):
    t, c = time.perf_counter(), time.process_time()
    try:
        return inner(self, function, options)
    finally:
        timing["backend"], timing["backend_cpu"] = time.perf_counter() - t, time.process_time() - c
cpu_backend.CPUBackend.compile = compile_timed
t, c = time.perf_counter(), time.process_time()
cm = glow_core.compile(model, "cpu"{threads})
total, total_cpu = time.perf_counter() - t, time.process_time() - c
f = cm.last.compiled
print(json.dumps(dict(total=total, total_cpu=total_cpu, backend=timing["backend"], backend_cpu=timing["backend_cpu"],
                      cc=f.build.seconds, cc_cpu=f.build.cpu_seconds, instructions=len(f.program.calls),
                      kernels=len(f.program.kernels), compiled=len(f.build.compiled), shards=f.build.shards)))
"""

_ORT = """
import sys, time, onnxruntime as ort
sys.path.insert(0, {root!r})
from bench.bench_cpu_compile import MODELS
m = MODELS[{name!r}][0]()
m.ir_version = min(m.ir_version, 8)
data = m.SerializeToString()
t, c = time.perf_counter(), time.process_time()
ort.InferenceSession(data, providers=["CPUExecutionProvider"])
print(time.perf_counter() - t, time.process_time() - c)
"""


def child(name, variant, cache, threads):
    env = dict(os.environ, GLOW_CACHE_DIR=cache)
    code = _CHILD.format(root=ROOT, name=name, variant=variant,
                         threads=f", num_threads={threads}" if threads else "")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if r.returncode:
        raise SystemExit(f"{name}: compile failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="num_threads (default: all cores)")
    args = ap.parse_args(argv)
    print(f"{'model':9} {'stage':8} {'total s':>8} {'(cpu)':>6} {'backend s':>9} {'(cpu)':>6} {'cc s':>6} {'(cpu)':>6} "
          f"{'instrs':>6} {'kernels':>7} {'compiled':>8} {'shards':>6}")
    for name in args.models.split(","):
        runs = {"cold": [], "cached": [], "changed": []}
        ort_s = []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="glow_bench_cache_") as cache:
                runs["cold"].append(child(name, 0, cache, args.threads))
                runs["cached"].append(child(name, 0, cache, args.threads))
                runs["changed"].append(child(name, 1, cache, args.threads))
            r = subprocess.run([sys.executable, "-c", _ORT.format(root=ROOT, name=name)], capture_output=True,
                               text=True)
            if r.returncode == 0:
                ort_s.append([float(v) for v in r.stdout.strip().splitlines()[-1].split()])
        for stage, rs in runs.items():
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(f"{name:9} {stage:8} {med['total']:8.2f} {med['total_cpu']:6.2f} {med['backend']:9.3f} "
                  f"{med['backend_cpu']:6.3f} {med['cc']:6.2f} {med['cc_cpu']:6.2f} "
                  f"{med['instructions']:6.0f} {med['kernels']:7.0f} {med['compiled']:8.0f} {med['shards']:6.0f}")
        if ort_s:
            print(f"{name:9} onnxruntime session creation {statistics.median(o[0] for o in ort_s):.2f} s "
                  f"(cpu {statistics.median(o[1] for o in ort_s):.2f} s)")


if __name__ == "__main__":
    main()
