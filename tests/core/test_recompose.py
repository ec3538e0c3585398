"""Graph pass recompose-llm (glow_core.passes.recompose): torch's decompositions of RMS normalization and rotary
embeddings become RMSNormalization and RotaryEmbedding where the rewrite is exact, and nowhere else; the
recomposed graph, run by the interpreter (the ops' lowerings), matches onnxruntime on the decomposed model and
the ops' definitions in numpy."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from glow_conformance import llm_decompositions as D
from glow_conformance.llm_models import DecoderConfig, llama_decoder
from glow_conformance.tier_passes import RECOMPOSE_MODELS
from glow_core.api import compile_graph
from glow_core.discovery import get_backend
from glow_core.importer.onnx_import import import_model
from glow_core.passes import LLM_PIPELINE, PASSES, run_pipeline

recompose = PASSES["recompose-llm"]


def feeds_of(m, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for vi in m.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        dt = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        out[vi.name] = (rng.integers(-3, 9, shape) if dt == np.int64 else rng.standard_normal(shape)).astype(dt)
    return out


def ops_of(fn) -> list[str]:
    return [n.op for n in fn.nodes]


def recomposed(m):
    fn = import_model(m)
    return fn, recompose(fn)


def run_fn(fn, feeds):
    res = compile_graph(fn, get_backend("interpreter"), {})
    return res.compiled.execute(feeds)


@pytest.mark.parametrize("name", list(RECOMPOSE_MODELS))
def test_forms_against_onnxruntime(name):
    m = RECOMPOSE_MODELS[name]()
    fn, count = recomposed(m)
    op = "RMSNormalization" if name.startswith("rms") else "RotaryEmbedding"
    assert count == (0 if "unequal" in name else 1)
    assert ops_of(fn).count(op) == count
    if count:  # nothing of the decomposition is left
        assert not {"Pow", "ReduceMean", "Sqrt", "Reciprocal", "Neg"} & set(ops_of(fn))
    feeds = feeds_of(m)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    (got,) = run_fn(fn, feeds).values()
    tol = 2e-3 if want.dtype == np.float16 else 2e-6
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


def test_rms_norm_against_its_definition():
    m = D.rms_norm(opset=18, shape=(3, 7, 32), eps=1e-5)
    fn, count = recomposed(m)
    node = next(n for n in fn.nodes if n.op == "RMSNormalization")
    assert count == 1 and node.attrs["axis"] == 2 and node.attrs["epsilon"] == pytest.approx(1e-5)
    w = next(numpy_helper.to_array(t) for t in m.graph.initializer if t.dims == [32])
    feeds = feeds_of(m, 1)
    (got,) = run_fn(fn, feeds).values()
    np.testing.assert_allclose(got, D.rms_norm_reference(feeds["input"], w, 1e-5), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dim,rotary_dim", [(8, 8), (24, 8)])
def test_rotary_against_its_definition(dim, rotary_dim):
    """Whole and partial (Phi: the first rotary_dim features rotated) against numpy's definition."""
    m = D.rotary(opset=23, batch=2, pos_batch=2, heads=2, seq=6, dim=dim, rotary_dim=rotary_dim)
    fn, count = recomposed(m)
    assert count == 1
    assert [n.attrs.get("rotary_embedding_dim", 0) for n in fn.nodes if n.op == "RotaryEmbedding"] == [
        rotary_dim if rotary_dim < dim else 0]
    feeds = feeds_of(m, 2)
    inv = 1.0 / (10000.0 ** (np.arange(0, rotary_dim, 2) / rotary_dim))
    ang = feeds["position_ids"].astype(np.float64)[..., None] * inv
    emb = np.concatenate([ang, ang], -1)[:, None]
    (got,) = run_fn(fn, feeds).values()
    np.testing.assert_allclose(got, D.rotary_reference(feeds["input"], np.cos(emb), np.sin(emb)), rtol=1e-5,
                               atol=1e-5)


def _rms_graph(**change):
    """D.rms_norm's float32 form edited: the graph output also reads an intermediate, or other ops / shapes."""
    return D.rms_norm(opset=18, cast=False, **change)


def test_not_recomposed_when_an_intermediate_is_read_elsewhere():
    m = _rms_graph()
    mean = next(n for n in m.graph.node if n.op_type == "ReduceMean").output[0]
    m.graph.output.append(helper.make_empty_tensor_value_info(mean))
    fn, count = recomposed(m)
    assert count == 0 and "ReduceMean" in ops_of(fn)


@pytest.mark.parametrize("edit", ["cube", "middle_axis", "vector_eps"])
def test_not_recomposed_other_math(edit):
    m = _rms_graph(shape=(2, 4, 6))
    nodes = {n.op_type: n for n in m.graph.node}
    if edit == "cube":  # x^3 is not a square
        m.graph.initializer.append(numpy_helper.from_array(np.array(3.0, np.float32), "three"))
        nodes["Pow"].input[1] = "three"
    elif edit == "middle_axis":  # the mean over axis 1 is not over the trailing axes
        m.graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64), "ax1"))
        nodes["ReduceMean"].input[1] = "ax1"
    else:  # an epsilon per row is not one epsilon
        m.graph.initializer.append(numpy_helper.from_array(np.arange(1, 5, dtype=np.float32).reshape(4, 1) * 1e-3,
                                                           "epsv"))
        nodes["Add"].input[1] = "epsv"
    fn, count = recomposed(m)
    assert count == 0


def test_weight_of_another_shape_stays_a_multiplication():
    m = _rms_graph(shape=(2, 4, 6))
    wmul = m.graph.node[-1]
    m.graph.initializer.append(numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(4, 1), "per_row"))
    wmul.input[0] = "per_row"
    fn, count = recomposed(m)
    assert count == 1 and ops_of(fn)[-1] == "Mul"
    rms = next(n for n in fn.nodes if n.op == "RMSNormalization")
    assert np.all(rms.inputs[1].const == 1.0)  # the unit scale; the weight stays outside


def test_float16_without_the_stash_casts_is_not_recomposed():
    g = helper.make_graph(
        [helper.make_node("Mul", ["input", "input"], ["sq"]),
         helper.make_node("ReduceMean", ["sq", "ax"], ["m"], keepdims=1),
         helper.make_node("Add", ["m", "eps"], ["v"]), helper.make_node("Sqrt", ["v"], ["s"]),
         helper.make_node("Div", ["input", "s"], ["y"])], "g",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT16, [2, 8])],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(np.array([-1], np.int64), "ax"), numpy_helper.from_array(np.float16(1e-3), "eps")])
    fn, count = recomposed(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))
    assert count == 0  # computed in float16, which RMSNormalization's stash_type 1 would not do


def test_llama_decoder_every_norm_and_rotation():
    cfg = DecoderConfig(num_hidden_layers=2)
    m = llama_decoder(cfg)
    shapes = {"input_ids": (1, 3), "attention_mask": (1, 5), "position_ids": (1, 3)}
    shapes.update({f"past_key_values.{i}.{k}": (1, 2, 2, 16) for i in range(2) for k in ("key", "value")})
    fn = import_model(m, input_shapes=shapes)
    counts = run_pipeline(fn, LLM_PIPELINE)
    ops = ops_of(fn)
    assert ops.count("RMSNormalization") == 2 * cfg.num_hidden_layers + 1
    assert ops.count("RotaryEmbedding") == 2 * cfg.num_hidden_layers
    assert counts["recompose-llm"] == 4 * cfg.num_hidden_layers + 1
    assert ops.count("slice") == 2  # the [B, S, D/2] cos and sin caches built once for every rotation


def _export_recomposed(torch, block, x, pos, path, opset, dynamo):
    """(the recompose-llm pipeline's graph of torch's export of ``block()`` to ``path``, torch's outputs q and k)."""
    import warnings

    import onnx
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        blk = block().eval()
        want = [t.numpy() for t in blk(x, pos)]
        torch.onnx.export(blk, (x, pos), path, input_names=["x", "position_ids"], output_names=["q", "k"],
                          opset_version=opset, dynamo=dynamo)
    fn = import_model(onnx.load(path))
    run_pipeline(fn, LLM_PIPELINE)
    return fn, want


@pytest.mark.parametrize("dynamo, opset", [(False, 18), (False, 20), (True, 18), (True, 23)])
def test_torch_exports_of_llama_norm_and_rotary(tmp_path, dynamo, opset):
    """transformers' LlamaRMSNorm and apply_rotary_pos_emb exported by torch (TorchScript and dynamo exporters):
    one RMSNormalization and two RotaryEmbedding, and the interpreter on the recomposed graph gives torch's
    result."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if dynamo:
        pytest.importorskip("onnxscript")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb
    cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    s = 5

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = LlamaRMSNorm(64, eps=1e-6)
            self.rope = LlamaRotaryEmbedding(cfg)
            with torch.no_grad():
                self.norm.weight.uniform_(0.5, 1.5)

        def forward(self, x, position_ids):
            h = self.norm(x)
            q = h.view(1, s, 4, 16).transpose(1, 2)
            k = h[..., :32].reshape(1, s, 2, 16).transpose(1, 2)
            cos, sin = self.rope(h, position_ids)
            return apply_rotary_pos_emb(q, k, cos, sin)

    x = torch.randn(1, s, 64)
    pos = torch.arange(3, 3 + s).reshape(1, s)
    fn, want = _export_recomposed(torch, Block, x, pos, str(tmp_path / "block.onnx"), opset, dynamo)
    ops = ops_of(fn)
    assert (ops.count("RMSNormalization"), ops.count("RotaryEmbedding")) == (1, 2), ops
    got = run_fn(fn, {"x": x.numpy(), "position_ids": pos.numpy()})
    for g, w in zip(got.values(), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dynamo, opset", [(False, 18), (True, 23)])
def test_torch_exports_of_phi_partial_rotary(tmp_path, dynamo, opset):
    """transformers' Phi attention rotates the first half of each head (partial_rotary_factor 0.5) and passes the
    rest; exported by torch, the query's and the key's each become one RotaryEmbedding with
    rotary_embedding_dim 8, and the interpreter on the recomposed graph gives torch's result."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if dynamo:
        pytest.importorskip("onnxscript")
    from transformers import PhiConfig
    from transformers.models.phi.modeling_phi import PhiRotaryEmbedding, apply_rotary_pos_emb
    cfg = PhiConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, partial_rotary_factor=0.5)
    s, r = 5, 8

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rope = PhiRotaryEmbedding(cfg)

        def forward(self, x, position_ids):
            q = x.view(1, s, 4, 16).transpose(1, 2)
            k = (2 * x).view(1, s, 4, 16).transpose(1, 2)
            cos, sin = self.rope(x, position_ids)
            q_rot, k_rot = apply_rotary_pos_emb(q[..., :r], k[..., :r], cos, sin)
            return torch.cat((q_rot, q[..., r:]), dim=-1), torch.cat((k_rot, k[..., r:]), dim=-1)

    x = torch.randn(1, s, 64)
    pos = torch.arange(3, 3 + s).reshape(1, s)
    fn, want = _export_recomposed(torch, Block, x, pos, str(tmp_path / "phi.onnx"), opset, dynamo)
    rot = [n for n in fn.nodes if n.op == "RotaryEmbedding"]
    assert [n.attrs.get("rotary_embedding_dim") for n in rot] == [r, r], ops_of(fn)
    got = run_fn(fn, {"x": x.numpy(), "position_ids": pos.numpy()})
    for g, w in zip(got.values(), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
