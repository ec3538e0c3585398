"""LLaMA-style decoders built with onnx.helper, with the I/O names optimum and onnxruntime-genai use.

``llama_decoder`` is a decoder-only model with random weights: RMSNorm, rotary position embeddings (rotate-half,
from ``position_ids``), grouped-query attention over a KV cache that grows by concatenation (inputs
``past_key_values.{i}.key|value`` [1, kv_heads, past, head_dim], outputs ``present.{i}.key|value``), a causal and
padding mask from ``attention_mask`` as transformers builds it (0 / float32 min, added to the scores), and a
SwiGLU MLP. ``attention="decomposed"`` spells attention as torch's exports do (Concat, Expand for GQA, MatMul,
Softmax, opset 18); ``attention="op"`` uses ONNX's opset-23 Attention with past_key/past_value and the boolean
mask (the same causal and padding mask, so the result does not depend on is_causal's alignment with a past), on
4-D Q, K, V; ``"op3d"`` the same on 3-D Q, K, V (q_num_heads, kv_num_heads); ``"gqa"`` is the form
onnxruntime-genai's model builder writes: com.microsoft GroupQueryAttention with the rotary inside (do_rotary, cos
and sin caches of ``max_position`` rows), ``seqlens_k`` = sum(attention_mask) - 1 and ``total_sequence_length``
from the mask's length, and no ``position_ids`` input (the positions follow from the mask).
The batch is 1; the past and the block are symbolic (``past``, ``seq``; ``total`` = past + seq).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


@dataclass(frozen=True)
class DecoderConfig:
    """The dimensions of a ``llama_decoder`` (a transformers LlamaConfig's names)."""

    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def parameters(self) -> int:
        """Number of weights (embedding and lm_head counted separately)."""
        h, d = self.hidden_size, self.head_dim
        attn = h * d * (self.num_attention_heads * 2 + self.num_key_value_heads * 2)
        mlp = 3 * h * self.intermediate_size
        return self.num_hidden_layers * (attn + mlp + 2 * h) + 2 * self.vocab_size * h + h


class _G:
    """Nodes and initializers of the graph being built, with fresh names."""

    def __init__(self):
        self.nodes, self.inits, self.k = [], [], 0

    def op(self, op, *ins, n_out=1, **attrs):
        self.k += 1
        outs = [f"{op.lower()}_{self.k}" + (f"_{i}" if n_out > 1 else "") for i in range(n_out)]
        self.nodes.append(helper.make_node(op, list(ins), outs, name=f"{op}_{self.k}", **attrs))
        return outs[0] if n_out == 1 else outs

    def init(self, name, array):
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, array, dtype=np.int64):
        self.k += 1
        return self.init(f"c_{self.k}", np.asarray(array, dtype))


def llama_decoder(cfg: DecoderConfig = DecoderConfig(), seed: int = 0, attention: str = "decomposed",
                  scale: float = 1.0, max_position: int = 512) -> onnx.ModelProto:
    """A LLaMA-style decoder with random weights (see the module docstring). Weights are normal with standard
    deviation ``scale / sqrt(fan_in)``, so logits are well separated (greedy decoding is stable under rounding)."""
    if attention not in ("decomposed", "op", "op3d", "gqa"):
        raise ValueError(f"attention={attention!r}: 'decomposed', 'op', 'op3d' or 'gqa'")
    gqa = attention == "gqa"
    rng = np.random.default_rng(seed)
    g = _G()
    H, KV, D, Hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size

    def w(name, fan_in, shape):
        return g.init(name, (rng.standard_normal(shape) * (scale / np.sqrt(fan_in))).astype(np.float32))

    def norm_w(name):
        return g.init(name, (1.0 + 0.1 * rng.standard_normal(Hd)).astype(np.float32))

    def rmsnorm(x, wname):
        var = g.op("ReduceMean", g.op("Mul", x, x), g.const([-1]), keepdims=1)
        r = g.op("Reciprocal", g.op("Sqrt", g.op("Add", var, g.const(cfg.rms_norm_eps, np.float32))))
        return g.op("Mul", g.op("Mul", x, r), wname)

    x = g.op("Gather", w("model.embed_tokens.weight", 1, (cfg.vocab_size, Hd)), "input_ids", axis=0)
    inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(0, D, 2, dtype=np.float64) / D))
    if gqa:
        return _gqa_decoder(cfg, g, w, norm_w, rmsnorm, x, inv_freq, max_position)
    freqs = g.op("Mul", g.op("Unsqueeze", g.op("Cast", "position_ids", to=TensorProto.FLOAT), g.const([-1])),
                 g.const(inv_freq, np.float32))  # [1, S, D/2]
    emb = g.op("Concat", freqs, freqs, axis=-1)
    cos = g.op("Unsqueeze", g.op("Cos", emb), g.const([1]))  # [1, 1, S, D]
    sin = g.op("Unsqueeze", g.op("Sin", emb), g.const([1]))
    # transformers' mask: key j visible to query i when j <= past + i and attention_mask[j]; 0 or float32 min
    seq = g.op("Gather", g.op("Shape", "input_ids"), g.const(1), axis=0)
    total = g.op("Gather", g.op("Shape", "attention_mask"), g.const(1), axis=0)
    past = g.op("Sub", total, seq)
    i = g.op("Range", g.const(0), seq, g.const(1))
    j = g.op("Range", g.const(0), total, g.const(1))
    causal = g.op("LessOrEqual", g.op("Unsqueeze", j, g.const([0])),
                  g.op("Unsqueeze", g.op("Add", i, past), g.const([1])))  # [S, T]
    padding = g.op("Cast", "attention_mask", to=TensorProto.BOOL)  # [1, T]
    allowed = g.op("Unsqueeze", g.op("And", causal, padding), g.const([0, 1]))  # [1, 1, S, T]
    mask = g.op("Where", allowed, g.const(0.0, np.float32), g.const(np.finfo(np.float32).min, np.float32))

    def heads(t, n):  # [1, S, n*D] -> [1, n, S, D]
        return g.op("Transpose", g.op("Reshape", t, g.const([1, -1, n, D])), perm=[0, 2, 1, 3])

    def rope(t):
        half1 = g.op("Slice", t, g.const([0]), g.const([D // 2]), g.const([3]))
        half2 = g.op("Slice", t, g.const([D // 2]), g.const([D]), g.const([3]))
        rot = g.op("Concat", g.op("Neg", half2), half1, axis=3)
        return g.op("Add", g.op("Mul", t, cos), g.op("Mul", rot, sin))

    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "seq"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, "total"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, "seq"])]
    outputs = []
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        h = rmsnorm(x, norm_w(p + "input_layernorm.weight"))
        q = rope(heads(g.op("MatMul", h, w(p + "self_attn.q_proj.weight", Hd, (Hd, H * D))), H))
        k = rope(heads(g.op("MatMul", h, w(p + "self_attn.k_proj.weight", Hd, (Hd, KV * D))), KV))
        v = heads(g.op("MatMul", h, w(p + "self_attn.v_proj.weight", Hd, (Hd, KV * D))), KV)
        past_k, past_v = f"past_key_values.{layer}.key", f"past_key_values.{layer}.value"
        pres_k, pres_v = f"present.{layer}.key", f"present.{layer}.value"
        for nm in (past_k, past_v):
            inputs.append(helper.make_tensor_value_info(nm, TensorProto.FLOAT, [1, KV, "past", D]))
        for nm in (pres_k, pres_v):
            outputs.append(helper.make_tensor_value_info(nm, TensorProto.FLOAT, [1, KV, "total", D]))
        if attention in ("op", "op3d"):
            g.k += 1
            y = f"attn_{g.k}"
            attrs = {}
            if attention == "op3d":  # Q, K, V as [1, S, heads * D]; the pasts stay 4-D
                q, k, v = (g.op("Reshape", g.op("Transpose", t, perm=[0, 2, 1, 3]), g.const([1, -1, n * D]))
                           for t, n in ((q, H), (k, KV), (v, KV)))
                attrs = {"q_num_heads": H, "kv_num_heads": KV}
            g.nodes.append(helper.make_node("Attention", [q, k, v, allowed, past_k, past_v], [y, pres_k, pres_v],
                                            name=f"Attention_{layer}", **attrs))
            if attention == "op3d":
                y = g.op("Transpose", g.op("Reshape", y, g.const([1, -1, H, D])), perm=[0, 2, 1, 3])
        else:
            g.nodes.append(helper.make_node("Concat", [past_k, k], [pres_k], name=f"cat_k_{layer}", axis=2))
            g.nodes.append(helper.make_node("Concat", [past_v, v], [pres_v], name=f"cat_v_{layer}", axis=2))

            def repeat(t):  # [1, KV, T, D] -> [1, H, T, D]
                t5 = g.op("Unsqueeze", t, g.const([2]))
                shape = g.op("Concat", g.const([1, KV, H // KV]), g.op("Slice", g.op("Shape", t), g.const([2]),
                                                                      g.const([4])), axis=0)
                return g.op("Reshape", g.op("Expand", t5, shape), g.const([1, H, -1, D]))
            kr, vr = repeat(pres_k), repeat(pres_v)
            scores = g.op("Mul", g.op("MatMul", q, g.op("Transpose", kr, perm=[0, 1, 3, 2])),
                          g.const(1.0 / np.sqrt(D), np.float32))
            probs = g.op("Softmax", g.op("Add", scores, mask), axis=-1)
            y = g.op("MatMul", probs, vr)
        y = g.op("Reshape", g.op("Transpose", y, perm=[0, 2, 1, 3]), g.const([1, -1, H * D]))
        x = g.op("Add", x, g.op("MatMul", y, w(p + "self_attn.o_proj.weight", H * D, (H * D, Hd))))
        x = _mlp(cfg, g, w, norm_w, rmsnorm, x, p)
    _lm_head(cfg, g, w, norm_w, rmsnorm, x, outputs)
    graph = helper.make_graph(g.nodes, "llama_decoder", inputs, outputs, g.inits)
    opset = 18 if attention == "decomposed" else 23
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="glow_kit")
    model.ir_version = 10
    return model


def _mlp(cfg, g, w, norm_w, rmsnorm, x, p):
    """A layer's SwiGLU MLP with its norm and residual add."""
    Hd = cfg.hidden_size
    h = rmsnorm(x, norm_w(p + "post_attention_layernorm.weight"))
    gate = g.op("MatMul", h, w(p + "mlp.gate_proj.weight", Hd, (Hd, cfg.intermediate_size)))
    up = g.op("MatMul", h, w(p + "mlp.up_proj.weight", Hd, (Hd, cfg.intermediate_size)))
    act = g.op("Mul", g.op("Mul", gate, g.op("Sigmoid", gate)), up)
    return g.op("Add", x, g.op("MatMul", act, w(p + "mlp.down_proj.weight", cfg.intermediate_size,
                                                 (cfg.intermediate_size, Hd))))


def _lm_head(cfg, g, w, norm_w, rmsnorm, x, outputs):
    """The final norm and the vocabulary projection: output ``logits`` first."""
    x = rmsnorm(x, norm_w("model.norm.weight"))
    g.nodes.append(helper.make_node("MatMul", [x, w("lm_head.weight", cfg.hidden_size, (cfg.hidden_size,
                                                                                      cfg.vocab_size))],
                                    ["logits"], name="lm_head"))
    outputs.insert(0, helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "seq", cfg.vocab_size]))


def _gqa_decoder(cfg, g, w, norm_w, rmsnorm, x, inv_freq, max_position) -> onnx.ModelProto:
    """``llama_decoder(attention="gqa")``: the weights drawn in the same order as the other forms (the same model)."""
    H, KV, D, Hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size
    angles = np.arange(max_position, dtype=np.float64)[:, None] * inv_freq[None, :]  # [max_position, D/2]
    cos_cache, sin_cache = g.init("cos_cache", np.cos(angles).astype(np.float32)), \
        g.init("sin_cache", np.sin(angles).astype(np.float32))
    seqlens_k = g.op("Cast", g.op("Sub", g.op("ReduceSum", "attention_mask", g.const([1]), keepdims=0), g.const([1])),
                     to=TensorProto.INT32)  # [1]
    total = g.op("Cast", g.op("Gather", g.op("Shape", "attention_mask"), g.const(1), axis=0), to=TensorProto.INT32)
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "seq"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, "total"])]
    outputs = []
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        h = rmsnorm(x, norm_w(p + "input_layernorm.weight"))
        q = g.op("MatMul", h, w(p + "self_attn.q_proj.weight", Hd, (Hd, H * D)))
        k = g.op("MatMul", h, w(p + "self_attn.k_proj.weight", Hd, (Hd, KV * D)))
        v = g.op("MatMul", h, w(p + "self_attn.v_proj.weight", Hd, (Hd, KV * D)))
        past_k, past_v = f"past_key_values.{layer}.key", f"past_key_values.{layer}.value"
        pres_k, pres_v = f"present.{layer}.key", f"present.{layer}.value"
        for nm in (past_k, past_v):
            inputs.append(helper.make_tensor_value_info(nm, TensorProto.FLOAT, [1, KV, "past", D]))
        for nm in (pres_k, pres_v):
            outputs.append(helper.make_tensor_value_info(nm, TensorProto.FLOAT, [1, KV, "total", D]))
        g.k += 1
        y = f"attn_{g.k}"
        g.nodes.append(helper.make_node("GroupQueryAttention", [q, k, v, past_k, past_v, seqlens_k, total, cos_cache,
                                                                sin_cache], [y, pres_k, pres_v],
                                        name=f"GroupQueryAttention_{layer}", domain="com.microsoft", num_heads=H,
                                        kv_num_heads=KV, do_rotary=1, rotary_interleaved=0))
        x = g.op("Add", x, g.op("MatMul", y, w(p + "self_attn.o_proj.weight", H * D, (H * D, Hd))))
        x = _mlp(cfg, g, w, norm_w, rmsnorm, x, p)
    _lm_head(cfg, g, w, norm_w, rmsnorm, x, outputs)
    graph = helper.make_graph(g.nodes, "llama_decoder_gqa", inputs, outputs, g.inits)
    model = helper.make_model(graph, producer_name="glow_kit",
                              opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model


def transformers_llama(cfg: DecoderConfig, path: str, seed: int = 0, initializer_range: float = 0.02,
                       opset: int = 18) -> str:
    """Export transformers' LlamaForCausalLM built from ``cfg`` with random weights (``torch.manual_seed(seed)``)
    to ``path`` with optimum's I/O names (``input_ids``, ``attention_mask``, ``position_ids``,
    ``past_key_values.{i}.key|value`` -> ``logits``, ``present.{i}.key|value``; batch, past and block symbolic),
    eager attention, torch's TorchScript exporter at ``opset``. Needs torch and transformers; returns ``path``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.cache_utils import DynamicCache

    config = LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                         intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_hidden_layers,
                         num_attention_heads=cfg.num_attention_heads, num_key_value_heads=cfg.num_key_value_heads,
                         rope_theta=cfg.rope_theta, rms_norm_eps=cfg.rms_norm_eps, max_position_embeddings=4096,
                         initializer_range=initializer_range, attn_implementation="eager", tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    layers = cfg.num_hidden_layers

    class WithCache(torch.nn.Module):
        """The model over flat cache tensors (the exporter sees tensors, not a Cache object)."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, position_ids, *past):
            cache = DynamicCache(config=config)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=True)
            flat = [out.logits]
            for i in range(layers):
                flat += [out.past_key_values.layers[i].keys, out.past_key_values.layers[i].values]
            return tuple(flat)

    s, p = 3, 5
    ins = ["input_ids", "attention_mask", "position_ids"] + [f"past_key_values.{i}.{k}" for i in range(layers)
                                                             for k in ("key", "value")]
    outs = ["logits"] + [f"present.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
            "position_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    axes.update({nm: {0: "batch", 2: "past"} for nm in ins[3:]})
    axes.update({nm: {0: "batch", 2: "total"} for nm in outs[1:]})
    args = (torch.randint(0, cfg.vocab_size, (1, s)), torch.ones(1, p + s, dtype=torch.int64),
            torch.arange(p, p + s).reshape(1, s),
            *[torch.randn(1, cfg.num_key_value_heads, p, cfg.head_dim) for _ in range(2 * layers)])
    import warnings
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(WithCache(model), args, path, input_names=ins, output_names=outs, dynamic_axes=axes,
                          opset_version=opset, dynamo=False)
    return path
