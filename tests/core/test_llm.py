"""Generation with a static plan (glow_core.llm.Generator) on the interpreter, against onnxruntime.

The oracle is onnxruntime running the same ONNX decoder in the loop its export expects: the cache grows by
concatenation, every step feeds the whole present back as the next past. The Generator's cache is persistent
state of fixed capacity written in place; its logits must equal onnxruntime's within the conformance tolerance
of whole networks and its greedy tokens must be identical.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from glow_conformance.checker import compare
from glow_conformance.llm_models import DecoderConfig, llama_decoder
from glow_core.backend import Backend
from glow_core.errors import GlowError, InputError, UnsupportedOpError
from glow_core.llm import Generator
from glow_interpreter.backend import InterpreterBackend

CFG = DecoderConfig()
PROMPT = np.array([[3, 14, 15, 92, 65, 35, 89, 79, 32, 38]], np.int64)
CAPACITY = 80


class OrtDecoder:
    """onnxruntime running the decoder as exported: the past starts empty and grows by the present each step."""

    def __init__(self, model: bytes, cfg: DecoderConfig = CFG):
        self.sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.sess.get_outputs()]
        self.inputs = {i.name for i in self.sess.get_inputs()}
        self.cfg = cfg

    def greedy(self, ids: np.ndarray, new: int):
        """The tokens [1, n + new] and the logits of every run's last token (prompt, then each decode step)."""
        cfg = self.cfg
        past = {f"past_key_values.{i}.{k}": np.zeros((1, cfg.num_key_value_heads, 0, cfg.head_dim), np.float32)
                for i in range(cfg.num_hidden_layers) for k in ("key", "value")}
        seq, cur, logits = list(ids[0]), ids, []
        for _ in range(new):
            total = len(seq)
            feed = {"input_ids": cur, "attention_mask": np.ones((1, total), np.int64),
                    "position_ids": np.arange(total - cur.shape[1], total, dtype=np.int64).reshape(1, -1), **past}
            outs = dict(zip(self.names, self.sess.run(None, {k: v for k, v in feed.items() if k in self.inputs})))
            logits.append(outs["logits"][0, -1])
            seq.append(int(np.argmax(outs["logits"][0, -1])))
            cur = np.array([[seq[-1]]], np.int64)
            past = {nm.replace("present", "past_key_values"): outs[nm] for nm in self.names[1:]}
        return np.array([seq], np.int64), logits


@pytest.fixture(scope="module")
def decomposed():
    return llama_decoder(CFG).SerializeToString()


@pytest.fixture(scope="module")
def oracle(decomposed):
    return OrtDecoder(decomposed).greedy(PROMPT, 64)


@pytest.fixture(scope="module")
def generator(decomposed):
    return Generator(decomposed, backend="interpreter", max_seq_len=CAPACITY, prefill_block=4)


def test_logits_equal_onnxruntime(generator, oracle):
    """The prompt's last logits (prefill in blocks of 4, the last padded) and every decode step's, against
    onnxruntime's on the same tokens, within the conformance tolerance of whole networks."""
    tokens, want = oracle
    n = PROMPT.shape[1]
    got = [generator.prefill(tokens[0, :n]).copy()]
    got += [generator.decode(tokens[0, t:t + 1], t).copy() for t in range(n, n + 63)]
    for step, (g, w) in enumerate(zip(got, want)):
        compare(g, w, "model", f"logits at step {step}", "pytest tests/core/test_llm.py")


@pytest.mark.parametrize("attention", ["decomposed", "op", "op3d", "gqa"])
def test_64_greedy_tokens_equal_onnxruntime(attention, generator, oracle):
    """The decoder with torch's attention (Concat, Expand, MatMul, Softmax), with opset 23's Attention node (on
    4-D and on 3-D Q, K, V) and as onnxruntime-genai writes it (com.microsoft GroupQueryAttention with the rotary
    inside, no position_ids: the positions follow from attention_mask)."""
    if attention == "decomposed":
        g, want = generator, oracle[0]
    else:
        model = llama_decoder(CFG, attention=attention).SerializeToString()
        g, want = Generator(model, backend="interpreter", max_seq_len=CAPACITY, prefill_block=4), \
            OrtDecoder(model).greedy(PROMPT, 64)[0]
        assert g.rewrites[1] == {"caches": 4, "attention_nodes": 2, "softmax_masks": 0}
    out = g.generate(PROMPT, 64)
    np.testing.assert_array_equal(out, want)
    stats = g.stats()
    assert stats["prompt_tokens"] == 10 and stats["decode_steps"] == 63
    assert stats["prefill_tokens_per_s"] > 0 and stats["decode_tokens_per_s"] > 0


def test_prompt_in_one_token_runs_and_a_block_past_the_capacity(decomposed, oracle):
    """prefill_block=1 runs the prompt through the decode function alone; a block that would pass the capacity
    starts earlier (capacity 12, blocks of 8: the second block runs tokens 4..11 again)."""
    tokens = oracle[0]
    one = Generator(decomposed, backend="interpreter", max_seq_len=24, prefill_block=1)
    assert set(one.module.functions) == {"decode"}
    np.testing.assert_array_equal(one.generate(PROMPT, 8), tokens[:, :18])
    late = Generator(decomposed, backend="interpreter", max_seq_len=12, prefill_block=8)
    np.testing.assert_array_equal(late.generate(PROMPT, 2), tokens[:, :12])


def test_cache_is_state_written_in_place(generator, oracle):
    """One decode step writes its position of every cache and nothing else: the state region is the same memory
    before and after (one region for both functions), every other byte unchanged."""
    tokens = oracle[0]
    n = PROMPT.shape[1]
    generator.prefill(tokens[0, :n])
    state = generator.module.state()
    assert sorted(state) == sorted(f"past_key_values.{i}.{k}" for i in range(2) for k in ("key", "value"))
    before = {nm: v.copy() for nm, v in state.items()}
    where = {nm: v.__array_interface__["data"][0] for nm, v in state.items()}
    generator.decode(tokens[0, n:n + 1], n)
    after = generator.module.state()
    for nm, v in after.items():
        assert v.shape == (1, CFG.num_key_value_heads, CAPACITY, CFG.head_dim)
        assert v.__array_interface__["data"][0] == where[nm]
        changed = np.any(v != before[nm], axis=(0, 1, 3))
        assert list(np.flatnonzero(changed)) == [n], nm
    prefill, decode = (generator.module.functions[f].compiled for f in ("prefill", "decode"))
    assert prefill.state is decode.state and prefill.constant is decode.constant


def test_decode_plan_holds_the_cache_once(generator):
    """The decode function's memory plan: each cache is one state buffer (no input or output of its size), updated
    by one scatter_nd in place, no copy reads or writes it; the state region is the caches' bytes. (The lowered
    attention's own temporaries, the GQA broadcast and the transposed keys, are planned activations.)"""
    irf = generator.module.functions["decode"].ir
    cache_bytes = CFG.num_key_value_heads * CAPACITY * CFG.head_dim * 4
    assert irf.plan.state_size == 2 * CFG.num_hidden_layers * cache_bytes
    assert all(b.size < cache_bytes for b in list(irf.inputs.values()) + list(irf.outputs.values()))
    assert not [ins for ins in irf.code if ins.op == "copy" and any(b.region == "state" for b in ins.ins + ins.outs)]
    writers = [(ins.op, k) for ins in irf.code for b, k in ins.operands if b.region == "state" and k != "in"]
    assert writers == [("scatter_nd", "inout")] * 4
    text = irf.dump()
    for nm in irf.state:
        assert text.count(f"%{nm} = WeightVar") == 1
    assert f"state {irf.plan.state_size} B" in text
    assert generator.module.regions["interpreter"]["constant_bytes_shared"] > 0.9 * CFG.parameters() * 4
    # the prefill function projects one token of its block on the vocabulary (the last real one)
    assert generator.rewrites[4]["one_logits_row"]
    assert generator.module.functions["prefill"].ir.outputs["logits"].type.shape == (1, 1, CFG.vocab_size)


def test_sampling_with_a_seed(generator, oracle):
    """Same seed, same tokens; top_k=1 is greedy whatever the seed; another seed another sequence."""
    a = generator.generate(PROMPT, 16, seed=7)
    assert a.shape == (1, 26) and (a[:, :10] == PROMPT).all()
    np.testing.assert_array_equal(generator.generate(PROMPT, 16, seed=7), a)
    assert not np.array_equal(generator.generate(PROMPT, 16, seed=8), a)
    assert (a[0, 10:] < CFG.vocab_size).all() and (a[0, 10:] >= 0).all()


def test_top_k_1_is_greedy(decomposed, oracle):
    g = Generator(decomposed, backend="interpreter", max_seq_len=32, prefill_block=4, top_k=1, temperature=0.5)
    np.testing.assert_array_equal(g.generate(PROMPT, 8, seed=3), oracle[0][:, :18])


class _Partial(InterpreterBackend):
    """A device without exp (softmax stays on the interpreter) nor scatter_nd (the cache too)."""

    name = "partial"

    def is_op_supported(self, info):
        return info.op not in ("exp", "scatter_nd") and super().is_op_supported(info)


class _Stateless(InterpreterBackend):
    """A backend that knows nothing of state: Backend.compile_functions' default."""

    name = "stateless"
    compile_functions = Backend.compile_functions


@pytest.mark.parametrize("backend", [[_Partial(), "interpreter"], _Stateless()], ids=["partitioned", "stateless"])
def test_partitioned_and_stateless_backends_generate(backend, decomposed, oracle):
    """A partitioned model (the cache on the backend that updates it) and a backend with the default state
    contract (the state passed in and out around each run) generate the same tokens."""
    g = Generator(decomposed, backend=backend, max_seq_len=32, prefill_block=4)
    np.testing.assert_array_equal(g.generate(PROMPT, 12), oracle[0][:, :22])
    decode = g.module.functions["decode"]
    if isinstance(backend, list):
        assert len(decode.parts) > 1
        assert {b.name for b, irf in decode.parts if irf.state} == {"interpreter"}
    assert sorted(g.module.state()) == sorted(f"past_key_values.{i}.{k}" for i in range(2) for k in ("key", "value"))


def test_prompt_longer_than_the_cache_is_refused(generator):
    with pytest.raises(InputError, match="max_seq_len=80"):
        generator.generate(np.zeros((1, 81), np.int64), 1)
    with pytest.raises(InputError, match="need 90 positions"):
        generator.generate(np.zeros((1, 70), np.int64), 20)
    with pytest.raises(InputError, match=r"\[1, n\]"):
        generator.generate(np.zeros((2, 3), np.int64), 1)


def _mlp():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    return helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))


def test_model_without_the_expected_names_is_refused(decomposed):
    with pytest.raises(UnsupportedOpError, match=r"lacks \['input_ids', 'logits', 'past_key_values.0.key'\]"):
        Generator(_mlp(), backend="interpreter")
    m = onnx.load_from_string(decomposed)
    m.graph.output[1].name = "kv_0"  # present.0.key renamed
    for n in m.graph.node:
        n.output[:] = ["kv_0" if o == "present.0.key" else o for o in n.output]
        n.input[:] = ["kv_0" if o == "present.0.key" else o for o in n.input]
    with pytest.raises(UnsupportedOpError, match=r"lacks \['present.0.key'\]"):
        Generator(m, backend="interpreter")
    m = onnx.load_from_string(decomposed)
    del m.graph.input[2]  # position_ids
    m.graph.input.append(helper.make_tensor_value_info("position_ids_x", TensorProto.INT64, [1, "seq"]))
    with pytest.raises(UnsupportedOpError, match="position_ids"):
        Generator(m, backend="interpreter")


def test_present_not_a_concatenation_is_refused(decomposed):
    """present.1.value computed by an Add of the concatenation: the rewrite cannot place the update."""
    m = onnx.load_from_string(decomposed)
    for n in m.graph.node:
        if "present.1.value" in n.output:
            n.output[:] = ["cat_v1"]
        n.input[:] = ["cat_v1" if i == "present.1.value" else i for i in n.input]
    m.graph.node.append(helper.make_node("Add", ["cat_v1", "cat_v1"], ["present.1.value"], name="twice"))
    with pytest.raises(GlowError, match=r"'present.1.value' is computed by Add node 'twice'"):
        Generator(m, backend="interpreter", max_seq_len=16, prefill_block=4)


def test_bad_generator_options_are_refused(decomposed):
    with pytest.raises(GlowError, match="prefill_block=16"):
        Generator(decomposed, backend="interpreter", max_seq_len=16, prefill_block=16)
    with pytest.raises(GlowError, match="top_p"):
        Generator(decomposed, backend="interpreter", max_seq_len=16, prefill_block=4, top_p=0)


def test_int4_matmulnbits_decoder_equals_onnxruntime():
    """The decoder with its MatMuls quantized to 4-bit MatMulNBits (glow_core.quantization.weight_only, blocks of
    32): 64 greedy tokens and every step's logits as onnxruntime's MatMulNBits kernels give them."""
    from glow_core.quantization import weight_only
    model = weight_only(llama_decoder(CFG), bits=4, block_size=32, symmetric=True).SerializeToString()
    tokens, want = OrtDecoder(model).greedy(PROMPT, 64)
    g = Generator(model, backend="interpreter", max_seq_len=CAPACITY, prefill_block=4)
    assert g.rewrites[4]["one_logits_row"]  # the MatMulNBits lm_head projects one token of the prefill block
    np.testing.assert_array_equal(g.generate(PROMPT, 64), tokens)
    n = PROMPT.shape[1]
    got = [g.prefill(tokens[0, :n]).copy()] + [g.decode(tokens[0, t:t + 1], t).copy() for t in range(n, n + 63)]
    for step, (a, w) in enumerate(zip(got, want)):
        compare(a, w, "model", f"int4 logits at step {step}", "pytest tests/core/test_llm.py")
