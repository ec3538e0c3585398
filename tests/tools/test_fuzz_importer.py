"""Importer fuzzing with a fixed budget (the long run is bench/fuzz_importer.py): every structure-aware mutant
of the repository's models and of ONNX's node-suite models compiles and runs or raises a GlowError naming
what is wrong; no other exception, crash or hang (each mutant runs in a child process with limits)."""
from __future__ import annotations

import numpy as np
import onnx

from glow_tools.fuzz.importer import MUTATIONS, fuzz_importer, mutate, node_suite_models, repository_models


def test_mutations_change_the_model():
    seed = repository_models()[0]
    changed = 0
    for i in range(50):
        data, what = mutate(seed, np.random.default_rng([5, i]))
        assert what
        changed += data != seed
    assert changed >= 45


def test_every_mutation_kind_applies_to_a_real_model():
    m = onnx.ModelProto()
    m.ParseFromString(repository_models()[0])
    for name, fn in MUTATIONS.items():
        c = onnx.ModelProto()
        c.CopyFrom(m)
        assert fn(c, np.random.default_rng(1)), name
        assert c.SerializeToString() != m.SerializeToString(), name


def test_mutants_raise_only_glow_errors():
    """A fixed budget: the same 1000 mutants every run (about 15 s on an idle core; the time limit only guards
    against a machine so slow that the budget cannot be met)."""
    seeds = repository_models() + node_suite_models()[::8]
    outcomes, kinds, bugs, n = fuzz_importer(seconds=600, seed=20261123, seeds=seeds, max_mutants=1000)
    assert n == 1000, f"only {n} mutants in the time limit"
    assert not bugs, "\n".join(f"{c} ({w}): {p}: {m[:800]}" for c, p, w, m in bugs[:5])
    assert outcomes["ok"] > 0 and sum(v for k, v in outcomes.items() if k.startswith("glow-error:")) > n // 3


def test_lp_pool_of_no_channels_is_empty():
    """Found by the importer fuzzer (a group-0 window sum): an input of 0 channels pools to an empty tensor of
    the pooled shape, floor((4 - 2) / 1) + 1 = 3 per spatial dim."""
    import glow_core
    from onnx import helper
    g = helper.make_graph([helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2])], "g",
                          [helper.make_tensor_value_info("x", 1, [1, 0, 4, 4])],
                          [helper.make_tensor_value_info("y", 1, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    (y,) = glow_core.compile(m, "interpreter").run({"x": np.zeros((1, 0, 4, 4), np.float32)}).values()
    assert np.asarray(y).shape == (1, 0, 3, 3)


def test_max_pool_indices_of_bfloat16():
    """Found by the importer fuzzer (the padding slot's lowest value was taken from iinfo for bfloat16): the
    indices of 2x2 windows (stride 2) of a bfloat16 input are the flat positions of numpy's window maxima."""
    import glow_core
    import ml_dtypes
    from onnx import helper
    g = helper.make_graph([helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], strides=[2, 2])],
                          "g", [helper.make_tensor_value_info("x", onnx.TensorProto.BFLOAT16, [1, 2, 4, 4])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.BFLOAT16, None),
                           helper.make_tensor_value_info("i", onnx.TensorProto.INT64, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])
    x = np.random.default_rng(0).permutation(32).astype(np.float32).reshape(1, 2, 4, 4)
    out = glow_core.compile(m, "interpreter").run({"x": x.astype(ml_dtypes.bfloat16)})
    win = x.reshape(1, 2, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(1, 2, 2, 2, 4)
    k = win.argmax(-1)
    rows, cols = 2 * np.arange(2)[:, None] + k // 2, 2 * np.arange(2)[None, :] + k % 2
    want = np.arange(2).reshape(1, 2, 1, 1) * 16 + rows * 4 + cols
    np.testing.assert_array_equal(np.asarray(out["i"]), want)
    np.testing.assert_array_equal(np.asarray(out["y"]).astype(np.float32), win.max(-1))


def test_tfidf_with_an_unbounded_skip_count_runs():
    """Found by the importer fuzzer as a hang (max_skip_count 2^63 - 1 looped over every skip): the skips are
    bounded by the row, and every ordered pair of items counts once for a bigram of the pool."""
    import glow_core
    from onnx import helper
    pool = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7]  # unigrams 2, 3, 5, 4; bigrams (5, 6), (7, 8), (6, 7)
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=2, max_gram_length=2,
                            max_skip_count=2 ** 63 - 1, ngram_counts=[0, 4], ngram_indexes=list(range(7)),
                            pool_int64s=pool)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.INT64, [12])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    x = np.array([1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8], np.int64)
    (y,) = glow_core.compile(m, "interpreter").run({"x": x}).values()
    pairs = [(int(x[i]), int(x[j])) for i in range(12) for j in range(i + 1, 12)]
    want = [0, 0, 0, 0] + [pairs.count(bg) for bg in [(5, 6), (7, 8), (6, 7)]]
    np.testing.assert_array_equal(np.asarray(y), np.array(want, np.float32))


def test_range_from_far_above_its_limit_is_empty():
    """Found by the importer fuzzer (numpy's arange failed on a length of -3.5e29): start 3.5e29, limit 2,
    delta 1 give max(ceil((limit - start) / delta), 0) = 0 elements, as the specification defines."""
    import glow_core
    from onnx import helper, numpy_helper
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("s", 3.5e29), ("l", 2.0), ("d", 1.0))]
    g = helper.make_graph([helper.make_node("Range", ["s", "l", "d"], ["y"])], "g", [],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
    (y,) = glow_core.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]),
                             "interpreter").run({}).values()
    assert np.asarray(y).shape == (0,)


def test_lrn_window_wider_than_the_channels():
    """Found by the importer fuzzer (size 2^63 - 1 made an all-ones kernel of that many rows): a window wider
    than the channels sums all of them, x / (bias + alpha / size * sum_c x^2) ** beta (numpy of the spec)."""
    import glow_core
    from onnx import helper
    size, alpha, beta, bias = 2 ** 40, 1e9, 0.75, 1.0
    g = helper.make_graph([helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias)],
                          "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 2, 2])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    x = np.random.default_rng(0).standard_normal((1, 3, 2, 2)).astype(np.float32)
    (y,) = glow_core.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
                             "interpreter").run({"x": x}).values()
    xd = x.astype(np.float64)
    want = xd / (bias + alpha / size * (xd ** 2).sum(axis=1, keepdims=True)) ** beta
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5)


def test_split_1_without_axis_splits_the_first_axis():
    """Split-1's schema gives `axis` no default value (an importer-fuzz finding: the unset attribute reached the
    lowering as None); Split-2's default 0 applies. Equal parts along axis 0, as numpy's split."""
    import glow_core
    from onnx import helper
    g = helper.make_graph([helper.make_node("Split", ["x"], ["a", "b", "c"])], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [6, 2])],
                          [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in "abc"])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 1)])
    m.ir_version = 3
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    got = glow_core.compile(m, "interpreter").run({"x": x})
    for name, want in zip("abc", np.split(x, 3, axis=0)):
        np.testing.assert_array_equal(got[name], want)


def test_concat_1_without_axis_concatenates_axis_1():
    """Concat-1's schema gives `axis` no default value; its documentation says "Default value is 1" (an
    importer-fuzz finding, as Split-1's)."""
    import glow_core
    from onnx import helper
    g = helper.make_graph([helper.make_node("Concat", ["a", "b"], ["y"])], "g",
                          [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2, 2, 2]) for n in "ab"],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 1)])
    m.ir_version = 3
    a, b = np.arange(8, dtype=np.float32).reshape(2, 2, 2), -np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    np.testing.assert_array_equal(glow_core.compile(m, "interpreter").run({"a": a, "b": b})["y"],
                                  np.concatenate([a, b], axis=1))
