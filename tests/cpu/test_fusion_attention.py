"""Fused attention on the CPU backend (backends/cpu/fusion/attention.py, templates/attention.c.j2): the pattern
MatMul(Q, K^T) [-> Mul/Div by a scalar] [-> Add mask] -> Softmax -> MatMul(P, V) runs as one kernel over heads x
row blocks. Checked against numpy's attention written from the ONNX ops, bit for bit against the unfused kernels
(``attention="never"``), the matcher's refusals, the cost rule, and the choice in ``glowc dump --source``."""
from __future__ import annotations

import os
import shutil

import numpy as np
from onnx import TensorProto, numpy_helper
import pytest

import glow_core
from conformance import networks as M
from conformance import tier_models
from glow_tools.cli import main as glowc
from glow_cpu.fusion import attention

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None
                              and not os.environ.get("CC"), reason="no C compiler")


def feeds(m, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for vi in m.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "mask" and vi.type.tensor_type.elem_type == TensorProto.BOOL:  # exporter's form: True attends
            out[vi.name] = rng.random(shape) >= 0.2
            continue
        a = np.where(rng.random(shape) < 0.2, -1e4, 0.0) if vi.name == "mask" else rng.standard_normal(shape)
        out[vi.name] = a.astype(np.float32)
    return out


def expected(f, kw):
    """numpy's attention in float32, step by step as the ONNX ops."""
    q, k, v = f["q"], f["k"], f["v"]
    if kw.get("q_split"):
        q = np.swapaxes(q, 1, 2)
    d = q.shape[-1]
    s = q @ np.swapaxes(k, -1, -2)
    if kw.get("scale", "mul") == "mul":
        s = s * np.float32(1.0 / np.sqrt(d))
    elif kw.get("scale") == "div":
        s = s / np.float32(np.sqrt(d))
    if kw.get("mask"):
        s = s + f["mask"]
    e = np.exp(s - s.max(-1, keepdims=True))
    o = (e / e.sum(-1, keepdims=True)) @ v
    b, h, n, dd = o.shape
    return np.swapaxes(o, 1, 2).reshape(b, n, h * dd)


def fused(cm) -> list[str]:
    return [c.code.choice for c in cm.last.compiled.program.calls if c.code.choice.startswith("attention fused")]


def run(m, f, **opts):
    cm = glow_core.compile(m, "cpu", **opts)
    return cm, cm.run(f)


#: (network arguments, threads): S not a multiple of the row block, several heads and batches, D != Dv, S != T.
CASES = [(dict(batch=2, heads=3, seq=50, mask="keys"), 2), (dict(batch=1, heads=2, seq=33, scale="div"), 1),
         (dict(batch=2, heads=2, seq=25, scale=None, mask="full"), 2), (dict(batch=1, heads=2, seq=40, keys=72,
                                                                             dim=16), 1),
         (dict(batch=1, heads=1, seq=130, dim=24, mask="keys"), 1), (dict(batch=2, heads=2, seq=30, dim=8, vdim=16), 2),
         (dict(batch=1, heads=2, seq=100, dim=32, q_split=True, mask="keys"), 1),
         (dict(batch=1, heads=2, seq=100, dim=32, q_split=True, mask="keys"), 2)]


@needs_cc
@pytest.mark.parametrize("kw,threads", CASES,
                         ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()) if isinstance(c, dict) else f"t{c}")
def test_fused_matches_numpy_and_unfused_bitwise(kw, threads):
    m = M.attention(seed=1, **kw)
    f = feeds(m)
    cm, got = run(m, f, attention="always", num_threads=threads)
    _, ref = run(m, f, attention="never", num_threads=threads)
    assert len(fused(cm)) == 1
    if kw.get("q_split"):  # the plan gives O memory of Q (freed after the first matmul): Q is copied first
        assert "Q copied: O overlaps it" in fused(cm)[0]
    out = m.graph.output[0].name
    np.testing.assert_allclose(got[out], expected(f, kw), rtol=1e-4, atol=1e-5)
    assert np.asarray(got[out]).tobytes() == np.asarray(ref[out]).tobytes()


@needs_cc
@pytest.mark.parametrize("also", ["probs", "scores"])
def test_intermediate_read_elsewhere_is_not_fused(also):
    kw = dict(batch=1, heads=2, seq=20, mask="keys")
    m = M.attention(seed=2, also=also, **kw)
    f = feeds(m)
    cm, got = run(m, f, attention="always", num_threads=1)
    assert fused(cm) == []
    np.testing.assert_allclose(got[m.graph.output[0].name], expected(f, kw), rtol=1e-4, atol=1e-5)


@needs_cc
def test_special_values_as_unfused():
    """A mask row of -inf gives that row NaN probabilities, a NaN in q NaN rows: as the unfused kernels."""
    m = M.attention(seed=3, batch=1, heads=2, seq=30, mask="full")
    f = feeds(m)
    f["mask"][0, 1, 4, :] = -np.inf
    f["q"][0, 0, 9, 2] = np.nan
    cm, got = run(m, f, attention="always", num_threads=2)
    _, ref = run(m, f, attention="never", num_threads=2)
    assert len(fused(cm)) == 1
    out = m.graph.output[0].name
    g = np.asarray(got[out])
    assert np.isnan(g[0, 4, 8:]).all() and np.isnan(g[0, 9, :8]).all()
    assert g.tobytes() == np.asarray(ref[out]).tobytes()


@needs_cc
def test_cost_rule_and_dump(tmp_path, capsys):
    """At one thread fused from MIN_KEYS keys on, with two threads always; the choice shows in glowc dump."""
    short, long_ = (M.attention(seed=1, seq=n, mask="keys") for n in (attention.MIN_KEYS - 1, attention.MIN_KEYS))
    cm = run(short, feeds(short), num_threads=1)[0]
    assert fused(cm) == []
    assert [c.code.choice for c in cm.last.compiled.program.calls if "attention" in c.code.choice] == [
        "gemm f32; attention not fused (cost rule: T 255 < 256 keys at 1 thread)"]
    assert len(fused(run(short, feeds(short), num_threads=2)[0])) == 1
    assert len(fused(run(long_, feeds(long_), num_threads=1)[0])) == 1
    assert fused(run(long_, feeds(long_), num_threads=1, attention="never")[0]) == []
    path = tmp_path / "attn.onnx"
    path.write_bytes(long_.SerializeToString())
    assert glowc(["dump", "--backend", "cpu", "--source", str(path)]) in (0, None)
    src = capsys.readouterr().out
    assert "attention fused (cost rule: T 256 >= 256)" in src
    assert src.count("computed in the fused attention kernel of a later matmul") == 4


def test_bad_option_is_a_clear_error():
    m = M.attention(seed=1, seq=4)
    with pytest.raises(glow_core.GlowError, match="attention='sometimes' is not one of auto, always, never"):
        glow_core.compile(m, "cpu", attention="sometimes").run(feeds(m))


@needs_cc
@pytest.mark.parametrize("name", sorted(tier_models.ATTENTION))
def test_conformance_lines_reach_the_kernel(name):
    """Each attention line of the models tier reaches the fused kernel (or, for "refused_*", does not)."""
    kw, threads, _ = tier_models.ATTENTION[name]
    m = M.attention(seed=4, **kw)
    cm, _ = run(m, feeds(m), num_threads=threads)
    assert len(fused(cm)) == (0 if name.startswith("refused") else 1)


def head_ctx(m, f) -> np.ndarray:
    """numpy's networks.head_transposes(softmax=True) context (before its merge), from the model's weights."""
    w = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    by_op: dict = {}
    for n in m.graph.node:
        by_op.setdefault(n.op_type, []).append(n)
    x = f["input"]
    b, s, heads, dim = w[by_op["Reshape"][0].input[1]]
    add = next(n for n in by_op["Add"] if n.input[0] == "input")
    mul = next(n for n in by_op["Mul"] if n.input[0] == "input")
    (sub,) = by_op["Sub"]
    w1, w2 = (w[n.input[1]] for n in by_op["MatMul"] if w.get(n.input[1], x).ndim == 2)
    vx = np.maximum(x @ w1, np.float32(0)) @ w2

    def heads_of(t):
        return t.reshape(b, s, heads, dim).transpose(0, 2, 1, 3)
    q, k, v = heads_of(x + w[add.input[1]]), heads_of(x * w[mul.input[1]]), heads_of(vx - w[sub.input[1]])
    sc = (q @ k.transpose(0, 1, 3, 2)) * np.float32(1 / np.sqrt(dim))
    e = np.exp(sc - sc.max(-1, keepdims=True))
    return ((e / e.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3)


def folded(cm) -> list[str]:
    return [c.code.choice for c in cm.last.compiled.program.calls
            if c.instr.op == "transpose" and c.code.choice.startswith("folded")]


#: networks.head_transposes(softmax=True) (q, k, v split from activations, the context merged into a graph
#: output), threads, the attention option: fused by the cost rule at 2 threads and from 256 keys at 1 thread.
FOLDS = [(dict(), 2, "auto"), (dict(batch=1, seq=260, heads=2, dim=16), 1, "auto"), (dict(), 1, "always")]


@needs_cc
@pytest.mark.parametrize("kw,threads,mode", FOLDS, ids=lambda c: str(c))
def test_head_transposes_fold_into_the_fused_kernel_bitwise(kw, threads, mode):
    """The head split transposes of q, k, v are read and the context merge written through strides by the fused
    kernel: numpy's result, bit for bit the unfolded fused kernel's and the unfused kernels'."""
    m = M.head_transposes(seed=1, softmax=True, **kw)
    f = feeds(m)
    cm, got = run(m, f, num_threads=threads, attention=mode)
    (choice,) = fused(cm)
    for part in ("q read through strides", "k read through strides", "v read through strides",
                 "o written through strides"):
        assert part in choice
    kernel = next(c.instr.name for c in cm.last.compiled.program.calls if c.code.choice.startswith("attention"))
    assert sum(c.startswith(f"folded: {kernel} reads its source") for c in folded(cm)) == 3
    assert sum(c.startswith(f"folded: {kernel} writes its result") for c in folded(cm)) == 1
    ctx = m.graph.output[0].name
    np.testing.assert_allclose(got[ctx], head_ctx(m, f), rtol=1e-4, atol=1e-5)
    for opts in (dict(transpose_folding=False), dict(attention="never", transpose_folding=False)):
        ref = run(m, f, num_threads=threads, **({"attention": mode} | opts))[1]
        for k in got:
            assert np.asarray(got[k]).tobytes() == np.asarray(ref[k]).tobytes(), (opts, k)
    unfolded = run(m, f, num_threads=threads, attention=mode, transpose_folding=False)[0]
    assert "through strides" not in fused(unfolded)[0]


@needs_cc
def test_a_split_of_a_graph_input_is_read_in_place():
    """q split from a graph input (its bytes are the caller's: they cannot be moved, but nothing writes them during
    the run): the kernel reads the input in place through strides, the split runs no kernel, bit for bit the
    unfolded program's result."""
    kw = dict(batch=1, heads=2, seq=100, dim=32, q_split=True, mask="keys")
    m = M.attention(seed=1, **kw)
    f = feeds(m)
    cm, got = run(m, f, num_threads=2)
    (choice,) = fused(cm)
    assert "q read through strides" in choice
    calls = cm.last.compiled.program.calls
    assert [c.code.choice for c in calls if c.instr.op == "transpose" and c.instr.ins[0].name == "q"] == [
        next(c for c in folded(cm) if "reads q in place" in c)]
    ref = run(m, f, num_threads=2, transpose_folding=False)[1]
    assert all(np.asarray(got[k]).tobytes() == np.asarray(ref[k]).tobytes() for k in got)
    np.testing.assert_allclose(got[m.graph.output[0].name], expected(f, kw), rtol=1e-4, atol=1e-5)


@needs_cc
@pytest.mark.parametrize("name,threads", [("head_transposes_attention", 2), ("head_transposes_attention_t260", 1)])
def test_conformance_lines_reach_the_folds(name, threads):
    """The models tier's head_transposes_attention lines reach the fused kernel with q, k, v and o strided."""
    m = tier_models.MODELS[name]("float32")
    (choice,) = fused(run(m, feeds(m), num_threads=threads)[0])
    assert "q read through strides" in choice and "o written through strides" in choice


@needs_cc
def test_strided_q_is_copied_where_o_overlaps_it():
    """The models tier's vit_small at 2 threads: O takes Q's memory and Q is read through strides, so the kernel
    gathers Q's rows through its strides before any store: onnxruntime's result, bit for bit the unfolded and the
    unfused programs'."""
    ort = pytest.importorskip("onnxruntime")
    m = tier_models.MODELS["vit_small"]("float32")
    f = feeds(m)
    cm, got = run(m, f, num_threads=2)
    (choice,) = fused(cm)
    assert "Q copied: O overlaps it" in choice and "q read through strides" in choice
    out = m.graph.output[0].name
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    np.testing.assert_allclose(got[out], want, rtol=1e-4, atol=1e-5)
    for opts in (dict(transpose_folding=False), dict(attention="never", transpose_folding=False)):
        assert np.asarray(run(m, f, num_threads=2, **opts)[1][out]).tobytes() == np.asarray(got[out]).tobytes()


@needs_cc
def test_dump_shows_the_folds_into_the_fused_kernel(tmp_path, capsys):
    """``glowc dump --source``: the kernel's strided operands, and "folded: ..." on the four head transposes."""
    m = tier_models.MODELS["head_transposes_attention_t260"]("float32")
    path = tmp_path / "heads.onnx"
    path.write_bytes(m.SerializeToString())
    assert glowc(["dump", "--backend", "cpu", "--source", str(path)]) in (0, None)
    src = capsys.readouterr().out
    assert "q read through strides (batch [8320, 16], rows 32, columns 1)" in src
    assert "k read through strides (batch [8320, 16], rows 1, columns 32)" in src
    assert "o written through strides (batch [8320, 16], rows 32, columns 1)" in src
    kernel = next(c.instr.name for c in run(m, feeds(m))[0].last.compiled.program.calls
                  if c.code.choice.startswith("attention fused"))
    assert src.count(f"folded: {kernel} reads its source through strides") == 3
    assert src.count(f"folded: {kernel} writes its result through strides") == 1


@needs_cc
@pytest.mark.parametrize("threads", [1, 2])
def test_exporter_decomposition_fuses_with_nan_to_zero(threads):
    """torch's dynamo decomposition of scaled_dot_product_attention (q and k^T scaled apart, Where(mask, 0, -inf)
    added, Where(IsNaN(P), 0, P) after the Softmax) is one fused kernel; a query whose keys are all masked gets 0,
    as onnxruntime computes it, and the result is bit-equal to the unfused kernels."""
    ort = pytest.importorskip("onnxruntime")
    m = M.attention(seed=5, batch=1, heads=2, seq=40, keys=70, dim=16, mask="full", exporter=True)
    f = feeds(m)
    f["mask"][0, 1, 3, :] = False
    cm, got = run(m, f, attention="always", num_threads=threads)
    _, ref = run(m, f, attention="never", num_threads=threads)
    (choice,) = fused(cm)
    assert "NaN probabilities to 0" in choice and "mask" in choice
    out = m.graph.output[0].name
    g = np.asarray(got[out])
    assert g.tobytes() == np.asarray(ref[out]).tobytes()
    assert (g[0, 3, 16:32] == 0).all() and np.isfinite(g).all()
    m.ir_version = 8
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_scratch_placed_beside_a_buffer_the_plan_laid_over_part_of_it():
    """The planner may lay the second matmul's scratch partly over Q (dead there in the unfused program; the
    exporter's Q times sqrt(scale) is such a buffer: 9 of ViT-Tiny's 12 attentions at 2 threads stayed unfused).
    The packed K^T and the threads' tiles go in the bytes of the scratch that Q does not use."""
    from glow_core.plan_queries import Span
    scratch = Span("activation", 0, 64 * 1000)
    q = Span("activation", -64 * 100, 64 * 200)  # the scratch's first 100 lines are Q's last
    kpack = attention._place([scratch], 64 * 300, [q], [])
    assert kpack == (scratch, 64 * 100, 64 * 300)
    assert attention._place([scratch], 64 * 600, [q], [kpack]) == (scratch, 64 * 400, 64 * 600)
    assert attention._place([scratch], 64 * 601, [q], [kpack]) is None
    other = Span("activation", 64 * 2000, 64 * 1000)
    assert attention._place([scratch, other], 64 * 601, [q], [kpack]) == (other, 0, 64 * 601)


def written(mask: np.ndarray, lengths: np.ndarray, off=-np.inf) -> np.ndarray:
    """``mask`` with key columns from lengths[..., row] on set to ``off`` (a cache written up to a position)."""
    cols = np.arange(mask.shape[-1])
    return np.where(cols >= lengths[..., None], off, mask).astype(mask.dtype)


#: (network arguments, threads): masks whose rows end in -inf runs of their own lengths.
TAILS = [(dict(batch=2, heads=3, seq=50, keys=300, mask="full"), 2), (dict(batch=1, heads=2, seq=7, keys=260,
                                                                          mask="full"), 1),
         (dict(batch=2, heads=2, seq=1, keys=256, dim=16, mask="keys"), 1), (dict(batch=1, heads=4, seq=1, keys=97,
                                                                                 dim=32, mask="full"), 2),
         (dict(batch=1, heads=2, seq=100, keys=130, dim=16, q_split=True, mask="keys"), 2)]


@needs_cc
@pytest.mark.parametrize("kw,threads", TAILS,
                         ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()) if isinstance(c, dict) else f"t{c}")
def test_rows_end_at_their_last_key_not_masked(kw, threads):
    """Rows of a mask that end in -inf (a cache written up to a position, bottom-right causal rows over a past,
    a row -inf throughout, -inf inside the written part): the kernel computes each row's keys up to its mask's
    last column that is not -inf (found at run time), whose omitted probabilities are exactly 0. numpy's result
    over all keys, and bit for bit the unfused kernels' (which compute every key)."""
    m = M.attention(seed=6, **kw)
    f = feeds(m)
    rng = np.random.default_rng(7)
    mask = f["mask"]
    t, s = mask.shape[-1], kw["seq"]
    lengths = rng.integers(1, t + 1, size=mask.shape[:-1])
    if kw["mask"] == "full":
        lengths[0, 0] = t - s + 1 + np.arange(s)  # bottom-right causal: row i sees the past and keys up to i
        lengths[-1, -1, 0] = 0  # -inf throughout: NaN, as over all keys
        mask[0, -1, -1, :3] = -np.inf  # -inf inside the written part stays computed
    f["mask"] = written(mask, lengths)
    cm, got = run(m, f, num_threads=threads)
    _, ref = run(m, f, attention="never", num_threads=threads)
    (choice,) = fused(cm)
    assert "each row's keys up to its mask's last column not -inf" in choice
    out = m.graph.output[0].name
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(got[out], expected(f, kw), rtol=1e-4, atol=1e-5)
    assert np.asarray(got[out]).tobytes() == np.asarray(ref[out]).tobytes()


@needs_cc
def test_boolean_mask_rows_end_at_their_last_key_attended():
    """torch's form (Where(mask, 0, -inf), Where(IsNaN(P), 0, P)) over a partly written cache: keys past a row's
    last True are not computed; a row with no True key gives 0. onnxruntime's result, bit for bit the unfused
    kernels'."""
    ort = pytest.importorskip("onnxruntime")
    m = M.attention(seed=8, batch=1, heads=3, seq=5, keys=272, dim=16, mask="full", exporter=True)
    f = feeds(m)
    lengths = np.random.default_rng(9).integers(1, 273, size=(1, 3, 5))
    lengths[0, 2, 4] = 0
    f["mask"] = written(f["mask"], lengths, False)
    cm, got = run(m, f, num_threads=1)
    _, ref = run(m, f, attention="never", num_threads=1)
    (choice,) = fused(cm)
    assert "each row's keys up to" in choice and "the mask a select of a boolean" in choice
    out = m.graph.output[0].name
    g = np.asarray(got[out])
    assert g.tobytes() == np.asarray(ref[out]).tobytes()
    assert (g[0, 4, 32:48] == 0).all() and np.isfinite(g).all()
    m.ir_version = 8
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


@needs_cc
def test_finite_masks_compute_every_key():
    """A mask whose tail is large but finite (finfo.min, as transformers writes it) is not skipped: those keys
    decide a row that is masked throughout (uniform probabilities), so every key is computed."""
    kw = dict(batch=1, heads=2, seq=3, keys=64, dim=16, mask="full")
    m = M.attention(seed=10, **kw)
    f = feeds(m)
    lengths = np.array([[[5, 64, 0], [17, 1, 33]]])
    f["mask"] = written(f["mask"], lengths, np.finfo(np.float32).min)
    cm, got = run(m, f, num_threads=2)
    _, ref = run(m, f, attention="never", num_threads=2)
    out = m.graph.output[0].name
    assert np.asarray(got[out]).tobytes() == np.asarray(ref[out]).tobytes()
    np.testing.assert_allclose(got[out], expected(f, kw), rtol=1e-4, atol=1e-5)
    assert np.isfinite(np.asarray(got[out])).all()
