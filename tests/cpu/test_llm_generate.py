"""Generation on the CPU backend (glow_core.llm.Generator) against onnxruntime: tokens and logits, one copy of the
weights and of the cache for both functions, no allocation per token, partitioned with the interpreter."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from glow_conformance.checker import compare
from glow_conformance.llm_models import DecoderConfig, llama_decoder, transformers_llama
from glow_core.llm import Generator
from tests.core.test_llm import PROMPT, OrtDecoder

CFG = DecoderConfig()


@pytest.fixture(scope="module")
def model():
    return llama_decoder(CFG).SerializeToString()


@pytest.fixture(scope="module")
def oracle(model):
    return OrtDecoder(model).greedy(PROMPT, 64)


@pytest.fixture(scope="module")
def generator(model):
    return Generator(model, backend="cpu", max_seq_len=80, prefill_block=4, num_threads=1)


def test_64_greedy_tokens_and_logits_equal_onnxruntime(generator, oracle):
    tokens, want = oracle
    np.testing.assert_array_equal(generator.generate(PROMPT, 64), tokens)
    n = PROMPT.shape[1]
    got = [generator.prefill(tokens[0, :n]).copy()]
    got += [generator.decode(tokens[0, t:t + 1], t).copy() for t in range(n, n + 63)]
    for step, (g, w) in enumerate(zip(got, want)):
        compare(g, w, "model", f"logits at step {step}", "pytest tests/cpu/test_llm_generate.py")


def test_group_query_attention_decoder_updates_the_cache_in_place():
    """onnxruntime-genai's form (com.microsoft GroupQueryAttention kept whole on cpu, positions from
    attention_mask): 64 greedy tokens equal onnxruntime's, and the GQA kernel writes each cache in its state buffer
    (no copy of a cache in either function)."""
    m = llama_decoder(CFG, attention="gqa").SerializeToString()
    want = OrtDecoder(m).greedy(PROMPT, 64)[0]
    g = Generator(m, backend="cpu", max_seq_len=80, prefill_block=4, num_threads=1)
    np.testing.assert_array_equal(g.generate(PROMPT, 64), want)
    for name in ("prefill", "decode"):
        (_, irf), = g.module.functions[name].parts
        ops = [i.op for i in irf.instrs]
        assert ops.count("com.microsoft.GroupQueryAttention") == CFG.num_hidden_layers, name
        assert [i.name for i in irf.instrs if i.op == "copy" and "past_key_values" in i.name] == [], name


def test_weights_and_cache_once_for_both_functions(generator):
    """The prefill and decode functions run in one state region and read the same weight arrays."""
    prefill, decode = (generator.module.functions[f].compiled for f in ("prefill", "decode"))
    assert prefill.state is decode.state
    assert prefill.state.nbytes == 2 * CFG.num_hidden_layers * CFG.num_key_value_heads * 80 * CFG.head_dim * 4
    weights = {b.name: b.data.ctypes.data for b in decode.irf.buffers if b.kind == "constant" and b.size > 4096}
    assert len(weights) == 7 * CFG.num_hidden_layers + 2
    for b in prefill.irf.buffers:
        if b.name in weights:
            assert b.data.ctypes.data == weights[b.name], b.name


def test_no_allocation_per_token(model):
    """64 decode steps allocate nothing on the host (tracemalloc counts numpy's data too): inputs are written
    into the function's placeholders, the logits read where the function left them, the cache is state. The
    GEMM panels packed from the weights exist once for both functions."""
    cfg = DecoderConfig(vocab_size=4096)
    g = Generator(llama_decoder(cfg).SerializeToString(), backend="cpu", max_seq_len=96, prefill_block=8,
                  num_threads=1)
    n = PROMPT.shape[1]
    logits = g.prefill(PROMPT[0])
    token = np.array([int(np.argmax(logits))], np.int64)
    g.decode(token, n)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for t in range(n + 1, n + 65):
            token[0] = np.argmax(g.decode(token, t))
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert logits.nbytes == 16384
    prefill, decode = (g.module.functions[f].compiled for f in ("prefill", "decode"))
    # the weights' GEMM panels (decode's GEMV reads the same layout): each packed once for both functions; the
    # lm_head's, the largest, read by prefill's GEMM and decode's GEMV alike
    arrays = [arr for f in (decode, prefill) for _, arr in f.program.derived]
    where: dict = {}
    for arr in arrays:
        where.setdefault((arr.shape, arr.tobytes()), set()).add(arr.ctypes.data)
    assert arrays and all(len(ptrs) == 1 for ptrs in where.values())
    biggest = max((arr for _, arr in decode.program.derived), key=lambda a: a.nbytes)
    assert biggest.ctypes.data in {arr.ctypes.data for _, arr in prefill.program.derived}
    assert peak - before < 2048 and current - before < 512, (peak - before, current - before)


def test_partitioned_with_the_interpreter(model, oracle):
    """backend=["cpu", "interpreter"] with the softmaxes forced to the interpreter: five partitions per function,
    the caches on the cpu (which updates them), the same tokens."""
    g = Generator(model, backend=["cpu", "interpreter"], max_seq_len=32, prefill_block=4, num_threads=1,
                  force={"Softmax": "interpreter"})
    np.testing.assert_array_equal(g.generate(PROMPT, 16), oracle[0][:, :26])
    parts = g.module.functions["decode"].parts
    assert [b.name for b, _ in parts] == ["cpu", "interpreter", "cpu", "interpreter", "cpu"]
    assert {b.name for b, irf in parts if irf.state} == {"cpu"}


def test_transformers_llama_export(tmp_path):
    """transformers' LlamaForCausalLM exported by torch with optimum's names: 32 greedy tokens as onnxruntime."""
    pytest.importorskip("transformers")
    cfg = DecoderConfig(vocab_size=128, hidden_size=32, intermediate_size=64)
    path = transformers_llama(cfg, str(tmp_path / "llama.onnx"), initializer_range=0.1)
    with open(path, "rb") as f:
        model = f.read()
    want = OrtDecoder(model, cfg).greedy(PROMPT, 32)[0]
    g = Generator(path, backend="cpu", max_seq_len=48, prefill_block=4, num_threads=1)
    assert g.rewrites[1]["softmax_masks"] == cfg.num_hidden_layers
    np.testing.assert_array_equal(g.generate(PROMPT, 32), want)


def test_int4_matmulnbits_64_greedy_tokens():
    """The 4-bit MatMulNBits decoder (weight_only, blocks of 32) on the cpu: onnxruntime's 64 greedy tokens."""
    from glow_core.quantization import weight_only
    model = weight_only(llama_decoder(CFG), bits=4, block_size=32, symmetric=True).SerializeToString()
    g = Generator(model, backend="cpu", max_seq_len=80, prefill_block=4, num_threads=1)
    assert g.rewrites[4]["one_logits_row"]
    np.testing.assert_array_equal(g.generate(PROMPT, 64), OrtDecoder(model).greedy(PROMPT, 64)[0])
