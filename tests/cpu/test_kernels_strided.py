"""The strided copy (kernels/movement.py ``_strided``, templates/strided.c.j2): transposes in blocks of the input's
contiguous dim x the output's (``TRANSPOSE_TILE``), and copies above PARALLEL_MIN_WORK["elementwise"] elements split
over the threads by their outer iterations. Against numpy, at 1 and 2 threads, with the path the kernel chose."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core


def _model(node, shape, inits=()):
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _i64(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


#: (name, x shape, node, extra initializers, numpy reference, the primitive, its path at 2 threads)
CASES = [
    ("nchw_to_nhwc", (1, 40, 56, 56), helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1]), (),
     lambda x: np.transpose(x, (0, 2, 3, 1)), "transpose", "blocks of 16 x 16, 2 threads"),
    ("nhwc_to_nchw_tails", (2, 37, 29, 21), helper.make_node("Transpose", ["x"], ["y"], perm=[0, 3, 1, 2]), (),
     lambda x: np.transpose(x, (0, 3, 1, 2)), "transpose", "blocks of 16 x 16, 2 threads"),
    ("window_partition", (1, 8, 7, 8, 7, 96), helper.make_node("Transpose", ["x"], ["y"], perm=[0, 1, 3, 2, 4, 5]),
     (), lambda x: np.transpose(x, (0, 1, 3, 2, 4, 5)), "transpose", "rows, 2 threads"),
    ("small_serial", (5, 7, 6), helper.make_node("Transpose", ["x"], ["y"], perm=[2, 0, 1]), (),
     lambda x: np.transpose(x, (2, 0, 1)), "transpose", "blocks of 16 x 16"),
    ("slice_steps", (4, 192, 390), helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"]),
     (_i64("s", [1, 3]), _i64("e", [192, 389]), _i64("a", [1, 2]), _i64("st", [2, 3])),
     lambda x: x[:, 1:192:2, 3:389:3], "slice", "rows, 2 threads"),
    ("pad", (3, 128, 120), helper.make_node("Pad", ["x", "p"], ["y"], mode="constant"),
     (_i64("p", [0, 2, 1, 0, 3, 2]),), lambda x: np.pad(x, ((0, 0), (2, 3), (1, 2))), "pad", "rows, 2 threads"),
    ("expand", (64, 1, 3), helper.make_node("Expand", ["x", "sh"], ["y"]), (_i64("sh", [64, 300, 3]),),
     lambda x: np.broadcast_to(x, (64, 300, 3)), "broadcast", ", 2 threads"),
]


@pytest.mark.parametrize("name,shape,node,inits,ref,op,path", CASES, ids=[c[0] for c in CASES])
def test_strided_copy_against_numpy_at_one_and_two_threads(name, shape, node, inits, ref, op, path):
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    model = _model(node, shape, inits)
    want = ref(x)
    for threads in (1, 2):
        cm = glow_core.compile(model, "cpu", num_threads=threads)
        got = cm.run({"x": x})["y"]
        np.testing.assert_array_equal(got, want)
        (choice,) = [c.code.choice for c in cm.last.compiled.program.calls if c.instr.op == op]
        assert (", 2 threads" in choice) == (threads == 2 and ", 2 threads" in path), choice
        if threads == 2:
            assert path in choice, choice


def test_concat_pieces_split_over_threads():
    shapes = [(2, 50, 700), (2, 3, 700), (2, 61, 700)]
    xs = [np.random.default_rng(i).standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)]
    names = [f"x{i}" for i in range(len(xs))]
    g = helper.make_graph([helper.make_node("Concat", names, ["y"], axis=1)], "g",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in zip(names, shapes)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    want = np.concatenate(xs, axis=1)
    for threads in (1, 2):
        cm = glow_core.compile(model, "cpu", num_threads=threads)
        np.testing.assert_array_equal(cm.run(dict(zip(names, xs)))["y"], want)
        (choice,) = [c.code.choice for c in cm.last.compiled.program.calls if c.instr.op == "concat"]
        want_path = "piece 0 rows, 2 threads; piece 1 rows; piece 2 rows, 2 threads" if threads == 2 else "by rows"
        assert want_path in choice, choice
