"""Decode reads the KV cache in place whichever form the attention arrives in: torch's decomposition, ONNX's
opset-23 Attention (4-D and 3-D Q, K, V) and com.microsoft GroupQueryAttention. Of the kernels the decode function
runs (the CPU backend's fusion stage absorbs the broadcasts and transposes the products read through strides), only
the cache update (scatter_nd, or the GroupQueryAttention kernel) writes and only the attention products (matmul, or
the kernel) read a buffer of a cache's size: no transposed, broadcast or scaled copy of the keys per token."""
from __future__ import annotations

import numpy as np
import pytest

from glow_conformance.llm_models import DecoderConfig, llama_decoder
from glow_core.llm import Generator
from tests.core.test_llm import PROMPT, OrtDecoder

CFG = DecoderConfig()
CAPACITY = 64


@pytest.mark.parametrize("attention", ["decomposed", "op", "op3d", "gqa"])
def test_decode_touches_the_cache_only_in_the_attention(attention):
    model = llama_decoder(CFG, attention=attention).SerializeToString()
    g = Generator(model, backend="cpu", max_seq_len=CAPACITY, prefill_block=4, num_threads=1)
    cache = CFG.num_key_value_heads * CAPACITY * CFG.head_dim
    program = g.module.functions["decode"].compiled.program  # the kernels that run (absorbed ones do not)
    touching = sorted({c.instr.op for c in program.calls if c.code.name != "glow_k_absorbed" and any(
        b.type.numel >= cache for b in program.fused.touched(c.instr) if b.region != "constant")})
    assert touching == (["com.microsoft.GroupQueryAttention"] if attention == "gqa" else ["matmul", "scatter_nd"])
    np.testing.assert_array_equal(g.generate(PROMPT, 8), OrtDecoder(model).greedy(PROMPT, 8)[0])


def test_attention_computes_the_written_positions_only():
    """torch's decomposition at 2 threads (the cost rule fuses): prefill and decode run one fused attention kernel
    per layer (the Generator keeps the export's node order: each layer's repeated K/V heads and the mask come
    before its products), the cache's 0 / -inf bias joins the export's mask, and each row of the kernel ends at
    its last written key, found at run time from the mask's -inf tail. Logits and greedy tokens are
    onnxruntime's. (ONNX's Attention op is lowered with its softmax as reductions: not this kernel.)"""
    model = llama_decoder(CFG).SerializeToString()
    g = Generator(model, backend="cpu", max_seq_len=CAPACITY, prefill_block=4, num_threads=2)
    for name in ("prefill", "decode"):
        program = g.module.functions[name].compiled.program
        choices = [c.code.choice for c in program.calls if c.code.choice.startswith("attention fused")]
        assert len(choices) == CFG.num_hidden_layers, (name, [c.code.choice for c in program.calls])
        assert all("each row's keys up to its mask's last column not -inf" in c for c in choices)
    tokens, logits = OrtDecoder(model).greedy(PROMPT, 8)
    np.testing.assert_allclose(g.prefill(PROMPT[0]), logits[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(g.generate(PROMPT, 8), tokens)
