"""onnxruntime's LLM ops imported and lowered (glow_core/ops/onnx_ops/onnxruntime_ops.py): a decoder layer as
onnxruntime-genai writes it (SimplifiedLayerNormalization, GroupQueryAttention with rotary and a KV cache,
SkipSimplifiedLayerNormalization, MatMul or MatMulNBits) against onnxruntime, prefill then decode; the refusals
naming what is not supported; the domain-qualified registry names. The op-by-op sweeps are the ops tier's
(conformance/ops_onnxruntime.py)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import glow_core
from glow_core.errors import GlowError, ShapeError, UnsupportedOpError
from glow_core.ops.registry import get_op
from glow_core.quantization import weight_only

ort = pytest.importorskip("onnxruntime")
MS = "com.microsoft"
F = onnx.TensorProto.FLOAT


def ort_run(model, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def decoder(seed=0, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=50, max_pos=32, past=0, s=1):
    """One decoder layer with its embedding and LM head, onnxruntime-genai's I/O names and ops; the KV cache
    of ``past`` positions in, ``past + s`` out."""
    r = np.random.default_rng(seed)
    d = hidden // heads
    w = lambda *shape: numpy_helper.from_array((r.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32))  # noqa
    inits = {}

    def init(name, arr):
        t = arr if isinstance(arr, onnx.TensorProto) else numpy_helper.from_array(np.asarray(arr), name)
        t.name = name
        inits[name] = t
        return name
    init("embed", r.standard_normal((vocab, hidden)).astype(np.float32))
    theta = np.arange(max_pos)[:, None] / 10000 ** (np.arange(d // 2) / (d // 2))
    init("cos", np.cos(theta).astype(np.float32))
    init("sin", np.sin(theta).astype(np.float32))
    for nm, shape in (("wq", (hidden, hidden)), ("wk", (hidden, kv_heads * d)), ("wv", (hidden, kv_heads * d)),
                      ("wo", (hidden, hidden)), ("wg", (hidden, ffn)), ("wu", (hidden, ffn)), ("wd", (ffn, hidden)),
                      ("lm", (hidden, vocab))):
        init(nm, w(*shape))
    for nm in ("g1", "g2", "g3"):
        init(nm, (1 + 0.1 * r.standard_normal(hidden)).astype(np.float32))
    init("one", np.array([1], np.int64))
    init("axes1", np.array([1], np.int64))
    n = helper.make_node
    nodes = [
        n("Gather", ["embed", "input_ids"], ["x"]),
        n("ReduceSum", ["attention_mask", "axes1"], ["len64"], keepdims=0),
        n("Sub", ["len64", "one"], ["sk64"]), n("Cast", ["sk64"], ["seqlens_k"], to=onnx.TensorProto.INT32),
        n("Shape", ["attention_mask"], ["mshape"]), n("Gather", ["mshape", "one"], ["tot64"], axis=0),
        n("Squeeze", ["tot64"], ["tot64s"]), n("Cast", ["tot64s"], ["total"], to=onnx.TensorProto.INT32),
        n("SimplifiedLayerNormalization", ["x", "g1"], ["h1"], epsilon=1e-5),
        n("MatMul", ["h1", "wq"], ["q"]), n("MatMul", ["h1", "wk"], ["k"]), n("MatMul", ["h1", "wv"], ["v"]),
        n("GroupQueryAttention", ["q", "k", "v", "past_key_values.0.key", "past_key_values.0.value", "seqlens_k",
                                  "total", "cos", "sin"], ["attn", "present.0.key", "present.0.value"],
          domain=MS, num_heads=heads, kv_num_heads=kv_heads, do_rotary=1),
        n("MatMul", ["attn", "wo"], ["o"]),
        n("SkipSimplifiedLayerNormalization", ["o", "x", "g2"], ["h2", "", "", "res"], domain=MS, epsilon=1e-5),
        n("MatMul", ["h2", "wg"], ["gate"]), n("MatMul", ["h2", "wu"], ["up"]),
        n("Sigmoid", ["gate"], ["sg"]), n("Mul", ["gate", "sg"], ["silu"]), n("Mul", ["silu", "up"], ["act"]),
        n("MatMul", ["act", "wd"], ["down"]),
        n("SkipSimplifiedLayerNormalization", ["down", "res", "g3"], ["h3"], domain=MS, epsilon=1e-5),
        n("MatMul", ["h3", "lm"], ["logits"]),
    ]
    ins = [helper.make_tensor_value_info("input_ids", onnx.TensorProto.INT64, [1, s]),
           helper.make_tensor_value_info("attention_mask", onnx.TensorProto.INT64, [1, past + s]),
           helper.make_tensor_value_info("past_key_values.0.key", F, [1, kv_heads, past, d]),
           helper.make_tensor_value_info("past_key_values.0.value", F, [1, kv_heads, past, d])]
    outs = [helper.make_tensor_value_info(o, F, None) for o in ("logits", "present.0.key", "present.0.value")]
    g = helper.make_graph(nodes, "decoder", ins, outs, list(inits.values()))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    m.ir_version = 10
    return m


def generate(model_of, run, prompt, steps):
    """Greedy tokens: a prefill of ``prompt`` then ``steps`` single-token decodes, the cache fed back."""
    ids = list(prompt)
    out = run(model_of(0, len(prompt)), {"input_ids": np.array([prompt], np.int64),
                                         "attention_mask": np.ones((1, len(prompt)), np.int64),
                                         "past_key_values.0.key": np.zeros((1, 2, 0, 16), np.float32),
                                         "past_key_values.0.value": np.zeros((1, 2, 0, 16), np.float32)})
    logits = [out["logits"]]
    for _ in range(steps):
        ids.append(int(np.argmax(out["logits"][0, -1])))
        n = len(ids)
        out = run(model_of(n - 1, 1), {"input_ids": np.array([[ids[-1]]], np.int64),
                                       "attention_mask": np.ones((1, n), np.int64),
                                       "past_key_values.0.key": out["present.0.key"],
                                       "past_key_values.0.value": out["present.0.value"]})
        logits.append(out["logits"])
    return ids, logits


@pytest.mark.parametrize("quantized", [None, (4, 32), (8, 64)])
def test_decoder_layer_generates_like_onnxruntime(quantized):
    """Prefill of 5 tokens and 6 greedy decode steps: the same tokens, logits within float32 roundings."""
    cache = {}

    def model_of(past, s):
        if (past, s) not in cache:
            m = decoder(past=past, s=s)
            cache[past, s] = m if quantized is None else weight_only(m, *quantized)
        return cache[past, s]
    want_ids, want_logits = generate(model_of, ort_run, [3, 17, 8, 42, 1], 6)
    got_ids, got_logits = generate(model_of, lambda m, f: glow_core.compile(m, "interpreter").run(f),
                                   [3, 17, 8, 42, 1], 6)
    assert got_ids == want_ids
    for g, w in zip(got_logits, want_logits):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * np.abs(w).max())
    if quantized:
        ops = {n.op_type for n in cache[0, 5].graph.node}
        assert "MatMulNBits" in ops and "MatMul" not in ops


def test_registry_names_com_microsoft_ops_with_their_domain():
    assert get_op("com.microsoft.RotaryEmbedding").domain == MS
    assert get_op("RotaryEmbedding").domain == ""  # ONNX's own, a different op
    assert get_op("SimplifiedLayerNormalization").domain == ""  # onnxruntime's ai.onnx extension


def _one(op, ins, outs, attrs, feeds, inits=(), domain=MS):
    node = helper.make_node(op, ins, outs, domain=domain, **attrs)
    vis = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in feeds.items()]
    g = helper.make_graph([node], "g", vis, [helper.make_tensor_value_info(o, F, None) for o in outs],
                          [numpy_helper.from_array(a, k) for k, a in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])


def _gqa_feeds(total=5, s=5):
    r = np.random.default_rng(1)
    return {"q": r.standard_normal((1, s, 64)).astype(np.float32), "k": r.standard_normal((1, s, 32)).astype(
        np.float32), "v": r.standard_normal((1, s, 32)).astype(np.float32),
        "sk": np.array([total - 1], np.int32), "tot": np.array(total, np.int32)}


def test_gqa_total_sequence_length_as_an_input_specializes():
    """total_sequence_length sets present's length: given as a graph input, the model is compiled for its value."""
    f = _gqa_feeds()
    m = _one("GroupQueryAttention", ["q", "k", "v", "", "", "sk", "tot"], ["y", "pk", "pv"],
             {"num_heads": 4, "kv_num_heads": 2}, f)
    got = glow_core.compile(m, "interpreter").run(f)
    want = ort_run(m, f)
    np.testing.assert_allclose(got["y"], want["y"], atol=1e-6)
    assert got["pk"].shape == want["pk"].shape == (1, 2, 5, 16)


@pytest.mark.parametrize("attrs, extra, match", [
    ({"qk_output": 1}, {}, "qk_output = 1 is not supported; accepted: 0"),
    ({"causal": 0}, {}, "causal = 0 is not supported"),
    ({"k_quant_type": "PER_TENSOR"}, {}, "k_quant_type = 'PER_TENSOR' is not supported; accepted: 'NONE'"),
    ({"num_heads": 3}, {}, "num_heads 3 must be a positive multiple of kv_num_heads 2"),
    ({"do_rotary": 1}, {}, "do_rotary needs cos_cache and sin_cache"),
])
def test_gqa_refusals_name_what_is_not_supported(attrs, extra, match):
    f = _gqa_feeds()
    m = _one("GroupQueryAttention", ["q", "k", "v", "", "", "sk", "tot"], ["y"],
             {"num_heads": 4, "kv_num_heads": 2, **attrs}, f)
    with pytest.raises(ShapeError, match=match):
        glow_core.compile(m, "interpreter").run(f)


def test_matmul_nbits_refusals():
    a = np.ones((2, 64), np.float32)
    inits = [("B", np.zeros((8, 2, 16), np.uint8)), ("s", np.ones((8, 2), np.float32))]
    for attrs, match in (({"bits": 3}, "bits = 3; accepted: 2, 4, 8"),
                         ({"block_size": 24}, "block_size = 24; accepted: a power of two of at least 16"),
                         ({"K": 60}, "A .* must end in K = 60")):
        at = {"K": 64, "N": 8, "bits": 4, "block_size": 32, **attrs}
        m = _one("MatMulNBits", ["a", "B", "s"], ["y"], at, {"a": a}, inits)
        with pytest.raises(ShapeError, match=match):
            glow_core.compile(m, "interpreter")


def test_unknown_com_microsoft_op_and_attribute():
    f = {"x": np.ones((2, 8), np.float32)}
    with pytest.raises(UnsupportedOpError, match="op FastGelu is not registered in domain 'com.microsoft'; it has "
                                                 ".*com.microsoft.MatMulNBits"):
        glow_core.compile(_one("FastGelu", ["x"], ["y"], {}, f), "interpreter")
    m = _one("SkipSimplifiedLayerNormalization", ["x", "x", "g"], ["y"], {"alpha": 1.0}, f,
             [("g", np.ones(8, np.float32))])
    with pytest.raises(GlowError, match=r"unknown attribute\(s\) \['alpha'\]"):
        glow_core.compile(m, "interpreter")
