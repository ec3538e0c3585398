"""Tier "negative": what cannot run is refused cleanly with a GlowError, never a crash or a stray write.

- backend refusals: every primitive x dtype that the primitive accepts but the backend's ``is_op_supported``
  refuses must make compilation raise UnsupportedOpError (a GlowError) naming the op; these cases depend on
  the backend (none for the reference interpreter, which supports everything);
- compiler refusals: a primitive given a dtype it does not accept, a model with an unknown op or an unknown
  domain, must raise a GlowError naming the op;
- run-time errors: indices out of range or negative for gather, gather_nd and scatter_nd (given at run time,
  so they compile), integer division and remainder by zero, and the ONNX ops lowering to them with indices
  out of range: the run must end in a GlowError naming the instruction (or, for the ONNX ops whose negative
  indices count from the end, give the documented answer: the ops tier), with every guard byte intact.
- fuzz refusals: the minimal bad models the fuzzers found escaping as other exceptions must raise a GlowError
  naming the bad element.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
from onnx import helper, numpy_helper

import glow_core
from glow_core.backend import NodeInfo
from glow_core.errors import GlowError
from glow_core.ops.registry import PRIMITIVES, get_op
from glow_core.types import DTYPES

from . import tier_primitives as P
from .cases import Case, CaseFailure, Unsupported, case_seed
from .guards import Guard, regions_of
from .harness import compile_model, compile_primitive, feed, out_types, primitive_function


def _expect_glow_error(what, fn, must_name, rerun):
    try:
        fn()
    except Unsupported as e:  # the harness's name for the backend's refusal: what we want
        msg = str(e)
    except CaseFailure as e:  # a claimed-then-refused case is still a refusal here
        msg = str(e)
    except GlowError as e:
        msg = str(e)
    except Exception as e:  # noqa: BLE001
        raise CaseFailure(f"{what}: crashed with {type(e).__name__}: {e} (expected a GlowError)\n  rerun: {rerun}")
    else:
        raise CaseFailure(f"{what}: was accepted (expected a GlowError at compile time)\n  rerun: {rerun}")
    if must_name and must_name not in msg:
        raise CaseFailure(f"{what}: the error does not name '{must_name}': {msg}\n  rerun: {rerun}")


def backend_refusal_cases(ctx):
    """One case per primitive x dtype (its first case's operands) whose op/dtype the backend refuses."""
    out, seen = [], set()
    for c in P.cases():
        key = (c.subject, c.dtype)
        # a refused quantized primitive is no compile error: its node stays float or is emulated (quantization.md)
        if key in seen or PRIMITIVES[c.subject].quantized == "own":
            continue
        seen.add(key)
        arrays = c.info["make"](np.random.default_rng(0))
        try:
            outs = out_types(c.subject, arrays, c.info["attrs"])
        except GlowError:
            continue
        info = NodeInfo(c.subject, tuple(_name(a) for a in arrays), tuple(t.dtype.name for t in outs),
                        dict(c.info["attrs"]), "case")
        if ctx.backend.is_op_supported(info):
            continue
        case_id = f"negative/{c.subject}/{c.dtype}/backend_refuses"

        def run(ctx, c=c, arrays=arrays, case_id=case_id):
            from glow_core.api import compile_graph
            fn = primitive_function(c.subject, arrays, c.info["attrs"])
            _expect_glow_error(f"negative case: backend refuses {c.subject} with {c.dtype}",
                               lambda: compile_graph(fn, ctx.backend, {"optimize": False}), c.subject,
                               ctx.rerun(case_id))
        out.append(Case(case_id, "negative", c.subject, c.dtype, run, ("negative",)))
    ctx.answers.clear()
    return out


def _name(a):
    from glow_core.types import dtype
    return dtype(np.asarray(a).dtype).name


def compiler_refusal_cases():
    out = []
    for prim, p in PRIMITIVES.items():
        if len(p.inputs) != 1 or p.variadic or prim in ("cast", "bitcast"):
            continue
        bad = [d for d in ("bool", "int32", "float32", "float8e4m3fn", "int4") if d not in p.dtypes]
        for dt in bad[:2]:
            case_id = f"negative/{prim}/{dt}/dtype_not_accepted"

            def run(ctx, prim=prim, dt=dt, case_id=case_id):
                x = np.zeros((2, 3, 4, 4), DTYPES[dt].np)
                _expect_glow_error(f"negative case: primitive {prim} given {dt}",
                                   lambda: compile_primitive(ctx, prim, [x], _attrs_for(prim)), prim,
                                   ctx.rerun(case_id))
            out.append(Case(case_id, "negative", prim, dt, run, ("negative",)))
    for label, node in (("unknown_op", helper.make_node("NoSuchOp", ["x"], ["y"])),
                        ("unknown_domain", helper.make_node("Relu", ["x"], ["y"], domain="com.vendor.none"))):
        case_id = f"negative/{label}/float32/model"

        def run(ctx, node=node, case_id=case_id):
            g = helper.make_graph([node], "neg", [helper.make_tensor_value_info("x", 1, [2, 3])],
                                  [helper.make_tensor_value_info("y", 1, [2, 3])])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)] + (
                [helper.make_opsetid(node.domain, 1)] if node.domain else []))
            _expect_glow_error(f"negative case: model with {label}", lambda: compile_model(ctx, m).run(
                {"x": np.zeros((2, 3), np.float32)}), None, ctx.rerun(case_id))
        out.append(Case(case_id, "negative", label, "float32", run, ("negative",)))
    return out


def _model(nodes, inputs, outputs, inits=(), opset=21):
    g = helper.make_graph(nodes, "neg", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _feeds(**shapes):
    return {k: np.zeros(s, np.float32) for k, s in shapes.items()}


def _external_model(tmp, length):
    """A Relu + Add model whose constant is external data in weights.bin with the given length."""
    with open(os.path.join(tmp, "weights.bin"), "wb") as f:
        f.write(np.arange(6, dtype=np.float32).tobytes())
    t = numpy_helper.from_array(np.zeros((2, 3), np.float32), "c")
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    t.external_data.add(key="location", value="weights.bin")
    t.external_data.add(key="length", value=str(length))
    path = os.path.join(tmp, "model.onnx")
    onnx.save(_model([helper.make_node("Add", ["x", "c"], ["y"])], [("x", 1, [2, 3])], [("y", 1, [2, 3])], [t]),
              path)
    return path


#: Minimal models of what importer and differential fuzzing (glowc fuzz, tools/fuzz/importer.py) found
#: escaping as other exceptions: (label, must be named in the error, () -> model or path, feeds).
def _qlinear_matmul(yz_type, y_type):
    """An int8 2x4 by 4x3 QLinearMatMul whose output zero point has type ``yz_type`` and output ``y_type``."""
    return _model(
        [helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])],
        [("a", 3, [2, 4]), ("b", 3, [4, 3])], [("y", y_type, None)],
        [numpy_helper.from_array(np.array([v], t), n) for n, v, t in (
            ("as", 0.1, np.float32), ("az", 0, np.int8), ("bs", 0.1, np.float32), ("bz", 0, np.int8),
            ("ys", 0.1, np.float32))] + [helper.make_tensor("yz", yz_type, [1], [0])])


_QLINEAR_MATMUL_FEEDS = {"a": np.zeros((2, 4), np.int8), "b": np.zeros((4, 3), np.int8)}


FUZZ_REFUSALS = (
    ("external_data_negative_length", "length", lambda tmp: _external_model(tmp, -5),
     {"x": np.zeros((2, 3), np.float32)}),
    ("attribute_type_mismatch", "alpha", lambda tmp: _model(
        [helper.make_node("LeakyRelu", ["x"], ["y"], alpha=2)], [("x", 1, [3])], [("y", 1, [3])]),
     {"x": np.zeros(3, np.float32)}),
    ("split_num_outputs_mismatch", "num_outputs", lambda tmp: _model(
        [helper.make_node("Split", ["x"], ["a", "b"], num_outputs=2147483647)], [("x", 1, [4])],
        [("a", 1, [2]), ("b", 1, [2])]), {"x": np.zeros(4, np.float32)}),
    ("input_shape_too_large", "x", lambda tmp: _model(
        [helper.make_node("Relu", ["x"], ["y"])], [("x", 1, [2 ** 40, 2 ** 20])], [("y", 1, [2 ** 40, 2 ** 20])]),
     {"x": np.zeros((1, 1), np.float32)}),
    ("deform_conv_offset_shape", "offset", lambda tmp: _model(
        [helper.make_node("DeformConv", ["x", "w", "off"], ["y"])],
        [("x", 1, [1, 2, 4, 4]), ("w", 1, [3, 2, 3, 3]), ("off", 1, [1, 5, 2, 2])], [("y", 1, None)]),
     {"x": np.zeros((1, 2, 4, 4), np.float32), "w": np.zeros((3, 2, 3, 3), np.float32),
      "off": np.zeros((1, 5, 2, 2), np.float32)}),
    ("roi_align_batch_index", "batch_indices", lambda tmp: _model(
        [helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"])],
        [("x", 1, [1, 2, 4, 4]), ("rois", 1, [1, 4]), ("bi", 7, [1])], [("y", 1, None)], opset=16),
     {"x": np.zeros((1, 2, 4, 4), np.float32), "rois": np.array([[0, 0, 2, 2]], np.float32),
      "bi": np.array([2], np.int64)}),
    # found by the importer fuzzer on the layered core, where a lowering's stray exception became InternalError;
    # Gemm-6's broadcast in an opset-7 model (an opset-6 model is upgraded first: glow_core/importer/legacy.py)
    ("attribute_of_an_older_opset", "broadcast", lambda tmp: _model(
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], broadcast=1)],
        [("a", 1, [2, 3]), ("b", 1, [3, 4]), ("c", 1, [4])], [("y", 1, None)], opset=7),
     _feeds(a=(2, 3), b=(3, 4), c=(4,))),
    ("required_input_left_empty", "required", lambda tmp: _model(
        [helper.make_node("Relu", [""], ["y"])], [("x", 1, [3])], [("y", 1, None)]), _feeds(x=(3,))),
    ("op_newer_than_the_opset", "opset 21", lambda tmp: _model(
        [helper.make_node("RMSNormalization", ["x", "s"], ["y"])], [("x", 1, [2, 4]), ("s", 1, [4])],
        [("y", 1, None)]), _feeds(x=(2, 4), s=(4,))),
    ("reshape_shape_not_int64", "shape", lambda tmp: _model(
        [helper.make_node("Reshape", ["x", "s"], ["y"])], [("x", 1, [2, 3])], [("y", 1, None)],
        [numpy_helper.from_array(np.array([3, 2], np.float32), "s")]), _feeds(x=(2, 3))),
    ("max_pool_negative_kernel", "kernel", lambda tmp: _model(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, -3])], [("x", 1, [1, 1, 4, 4])],
        [("y", 1, None)]), _feeds(x=(1, 1, 4, 4))),
    ("conv_negative_pad", "pads", lambda tmp: _model(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[0, 0, 0, -1])], [("x", 1, [1, 1, 5, 5]),
                                                                         ("w", 1, [1, 1, 3, 3])],
        [("y", 1, None)]), _feeds(x=(1, 1, 5, 5), w=(1, 1, 3, 3))),
    ("conv_weight_rank", "weight", lambda tmp: _model(
        [helper.make_node("Conv", ["x", "w"], ["y"])], [("x", 1, [2, 3, 3]), ("w", 1, [])], [("y", 1, None)]),
     _feeds(x=(2, 3, 3), w=())),
    ("resize_zero_scale", "scales", lambda tmp: _model(
        [helper.make_node("Resize", ["x", "", "sc"], ["y"])], [("x", 1, [1, 1, 4, 4])], [("y", 1, None)],
        [numpy_helper.from_array(np.array([1, 1, 0, 2], np.float32), "sc")]), _feeds(x=(1, 1, 4, 4))),
    ("range_too_many_elements", "elements", lambda tmp: _model(
        [helper.make_node("Range", ["s", "l", "d"], ["y"])], [], [("y", 7, None)],
        [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("s", 0), ("l", 1 << 40), ("d", 1))]), {}),
    ("scatter_nd_index_too_deep", "indices", lambda tmp: _model(
        [helper.make_node("ScatterND", ["x", "i", "u"], ["y"])], [("x", 1, [4, 4]), ("u", 1, [2])],
        [("y", 1, None)], [numpy_helper.from_array(np.zeros((2, 3), np.int64), "i")]), _feeds(x=(4, 4), u=(2,))),
    ("lstm_sequence_too_long", "steps", lambda tmp: _model(
        [helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=1)],
        [("x", 1, [1 << 20, 1, 1]), ("w", 1, [1, 4, 1]), ("r", 1, [1, 4, 1])], [("y", 1, None)]),
     _feeds(x=(1 << 20, 1, 1), w=(1, 4, 1), r=(1, 4, 1))),
    ("trilu_k_not_scalar", "k", lambda tmp: _model(
        [helper.make_node("Trilu", ["x", "k"], ["y"])], [("x", 1, [3, 3])], [("y", 1, None)],
        [numpy_helper.from_array(np.zeros(3, np.int64), "k")]), _feeds(x=(3, 3))),
    # found by glowc fuzz --backend cpu: the reference interpreter's argmax failed on an empty axis at run time
    ("argmax_over_an_empty_axis", "empty", lambda tmp: _model(
        [helper.make_node("ArgMax", ["x"], ["y"])], [("x", 1, [0, 2])], [("y", 7, None)]), _feeds(x=(0, 2))),
    ("space_to_depth_blocksize_zero", "blocksize", lambda tmp: _model(
        [helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=0)], [("x", 1, [1, 1, 4, 4])],
        [("y", 1, None)]), _feeds(x=(1, 1, 4, 4))),
    # found by the importer fuzzer on mutants of ONNX's node-suite models (bench/fuzz_importer.py, seeds 0 to 8)
    ("cum_prod_of_a_scalar", "rank", lambda tmp: _model(
        [helper.make_node("CumProd", ["x", "a"], ["y"])], [("x", 1, [])], [("y", 1, None)],
        [numpy_helper.from_array(np.array(0, np.int64), "a")], opset=26), _feeds(x=())),
    ("top_k_k_empty", "K", lambda tmp: _model(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"])], [("x", 1, [4])], [("v", 1, None), ("i", 7, None)],
        [numpy_helper.from_array(np.zeros(0, np.int64), "k")]), _feeds(x=(4,))),
    ("range_limit_empty", "limit", lambda tmp: _model(
        [helper.make_node("Range", ["s", "l", "d"], ["y"])], [], [("y", 7, None)],
        [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("s", 0), ("l", []), ("d", 1))]), {}),
    ("if_condition_empty", "cond", lambda tmp: _model(
        [helper.make_node("If", ["c"], ["y"], then_branch=_branch("t", 1.0), else_branch=_branch("e", 2.0))],
        [("c", 9, [0])], [("y", 1, None)]), {"c": np.zeros(0, bool)}),
    ("mel_weight_matrix_edges", "sample_rate", lambda tmp: _model(
        [helper.make_node("MelWeightMatrix", ["n", "d", "r", "lo", "hi"], ["y"])], [], [("y", 1, None)],
        [numpy_helper.from_array(np.array(v, t), n) for n, v, t in (
            ("n", 2, np.int32), ("d", 1, np.int32), ("r", 1, np.int32), ("lo", 0.64, np.float32),
            ("hi", 0.1, np.float32))], opset=17), {}),
    ("reverse_sequence_time_axis", "time_axis", lambda tmp: _model(
        [helper.make_node("ReverseSequence", ["x", "n"], ["y"], time_axis=1 << 40)], [("x", 1, [4, 4])],
        [("y", 1, None)], [numpy_helper.from_array(np.full(4, 2, np.int64), "n")]), _feeds(x=(4, 4))),
    ("attention_no_key_value_heads", "key/value heads", lambda tmp: _model(
        [helper.make_node("Attention", ["q", "k", "v"], ["y"])],
        [("q", 1, [1, 2, 2, 8]), ("k", 1, [1, 0, 2, 8]), ("v", 1, [1, 2, 2, 8])], [("y", 1, None)], opset=23),
     _feeds(q=(1, 2, 2, 8), k=(1, 0, 2, 8), v=(1, 2, 2, 8))),
    ("lstm_weight_rank", "W", lambda tmp: _model(
        [helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=3, direction="bidirectional")],
        [("x", 1, [3, 1, 2]), ("w", 1, []), ("r", 1, [2, 12, 3])], [("y", 1, None)]),
     _feeds(x=(3, 1, 2), w=(), r=(2, 12, 3))),
    ("non_max_suppression_scores_rank", "scores", lambda tmp: _model(
        [helper.make_node("NonMaxSuppression", ["b", "s"], ["y"])], [], [("y", 7, None)],
        [numpy_helper.from_array(np.zeros(s, np.float32), n) for n, s in (("b", (1, 6, 4)), ("s", (1, 6)))]), {}),
    # an explicit dft_length of 0 (an empty signal axis without dft_length is an empty spectrum: ops tier)
    ("dft_length_zero", "dft_length", lambda tmp: _model(
        [helper.make_node("DFT", ["x", "n", "a"], ["y"])], [("x", 1, [1, 10, 4, 2])], [("y", 1, None)],
        [numpy_helper.from_array(np.array(0, np.int64), "n"), numpy_helper.from_array(np.array(2, np.int64), "a")],
        opset=20), _feeds(x=(1, 10, 4, 2))),
    ("scan_state_left_empty", "empty", lambda tmp: _model(
        [helper.make_node("Scan", ["", "x"], ["y", "z"], num_scan_inputs=1, body=_scan_sum_body())],
        [("x", 1, [5])], [("y", 1, None), ("z", 1, None)], opset=9), _feeds(x=(5,))),
    ("gather_nd_batch_dims_too_large", "batch_dims", lambda tmp: _model(
        [helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=3)], [("x", 6, [2, 2, 2]), ("i", 7, [2, 1])],
        [("y", 6, None)], opset=13), {"x": np.zeros((2, 2, 2), np.int32), "i": np.zeros((2, 1), np.int64)}),
    ("deform_conv_kernel_shape_length", "kernel", lambda tmp: _model(
        [helper.make_node("DeformConv", ["x", "w", "off"], ["y"], kernel_shape=[2, 2, 2])],
        [("x", 1, [1, 1, 3, 3]), ("w", 1, [1, 1, 2, 2]), ("off", 1, [1, 8, 2, 2])], [("y", 1, None)], opset=22),
     _feeds(x=(1, 1, 3, 3), w=(1, 1, 2, 2), off=(1, 8, 2, 2))),
    ("celu_alpha_zero", "alpha", lambda tmp: _model(
        [helper.make_node("Celu", ["x"], ["y"], alpha=0.0)], [("x", 1, [3])], [("y", 1, None)]), _feeds(x=(3,))),
    ("group_normalization_without_channels", "channel", lambda tmp: _model(
        [helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=1)],
        [("x", 1, [4]), ("s", 1, [4]), ("b", 1, [4])], [("y", 1, None)]), _feeds(x=(4,), s=(4,), b=(4,))),
    # found by glowc fuzz --against onnxruntime (which broadcasts such a scale): a scale of 5 for one channel
    ("instance_normalization_scale_length", "scale", lambda tmp: _model(
        [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])],
        [("x", 1, [1, 1, 1, 1]), ("s", 1, [5]), ("b", 1, [5])], [("y", 1, None)]),
     _feeds(x=(1, 1, 1, 1), s=(5,), b=(5,))),
    ("loop_trip_count_too_large", "100000", lambda tmp: _model(
        [helper.make_node("Loop", ["m", "", "v"], ["w"], body=helper.make_graph(
            [helper.make_node("Identity", ["c"], ["co"]), helper.make_node("Identity", ["x"], ["xo"])], "body",
            [helper.make_tensor_value_info(n, t, []) for n, t in (("i", 7), ("c", 9), ("x", 1))],
            [helper.make_tensor_value_info(n, t, []) for n, t in (("co", 9), ("xo", 1))]))], [("v", 1, [])],
        [("w", 1, None)], [numpy_helper.from_array(np.array(1 << 40, np.int64), "m")]), _feeds(v=())),
    ("lp_pool_p_zero", "p", lambda tmp: _model(
        [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=0)], [("x", 1, [1, 1, 4, 4])],
        [("y", 1, None)]), _feeds(x=(1, 1, 4, 4))),
    # found by glowc fuzz --backend cpu (the reference interpreter failed): a zero point of another shape
    ("quantize_zero_point_shape", "y_zero_point", lambda tmp: _model(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], [("x", 1, [])], [("y", 3, None)],
        [numpy_helper.from_array(np.array(0.5, np.float32), "s"),
         numpy_helper.from_array(np.array([[[[-11, -1, 10]]]], np.int8), "z")]), _feeds(x=())),
    ("qlinear_matmul_float8_output", "float8e4m3fn",
     lambda tmp: _qlinear_matmul(onnx.TensorProto.FLOAT8E4M3FN, 17), _QLINEAR_MATMUL_FEEDS),
    # refused with the schema's reason (glow_core.importer's ONNX inference when a lowering fails internally)
    ("qlinear_matmul_zero_point_type", "y_zero_point",
     lambda tmp: _qlinear_matmul(onnx.TensorProto.UINT2, 3), _QLINEAR_MATMUL_FEEDS),
    ("conv_transpose_group_zero", "group", lambda tmp: _model(
        [helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=0)],
        [("x", 1, [1, 2, 3, 3]), ("w", 1, [2, 1, 3, 3])], [("y", 1, None)]), _feeds(x=(1, 2, 3, 3), w=(2, 1, 3, 3))),
    ("unique_axis_out_of_range", "axis", lambda tmp: _model(
        [helper.make_node("Unique", ["x"], ["y"], axis=-2 ** 31)], [], [("y", 1, None)],
        [numpy_helper.from_array(np.eye(3, dtype=np.float32), "x")]), {}),
    ("max_pool_pad_overflow", "pads", lambda tmp: _model(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[5, 5], pads=[2, 2, 2 ** 63 - 1, 2])],
        [("x", 1, [1, 1, 5, 5])], [("y", 1, None)], opset=7), _feeds(x=(1, 1, 5, 5))),
    ("reshape_rank_255", "rank", lambda tmp: _model(
        [helper.make_node("Reshape", ["x", "s"], ["y"])], [("x", 1, [2])], [("y", 1, None)],
        [numpy_helper.from_array(np.array([2] + [1] * 254, np.int64), "s")]), _feeds(x=(2,))),
    ("constant_of_shape_rank_255", "rank", lambda tmp: _model(
        [helper.make_node("ConstantOfShape", ["s"], ["y"])], [], [("y", 1, None)],
        [numpy_helper.from_array(np.array([0] + [1] * 254, np.int64), "s")]), {}),
    ("graph_input_rank_70", "'x'", lambda tmp: _model(
        [helper.make_node("Identity", ["x"], ["y"])], [("x", 1, [1] * 70)], [("y", 1, None)]), {}),
    ("scan_too_many_steps", "steps", lambda tmp: _model(
        [helper.make_node("Scan", ["s", "x"], ["y", "z"], num_scan_inputs=1, body=_scan_sum_body())],
        [("s", 1, []), ("x", 1, [2 ** 31 - 1])], [("y", 1, None), ("z", 1, None)], opset=9), {}),
    ("lp_pool_kernel_beyond_int", "kernel", lambda tmp: _model(
        [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2 ** 63 - 1], p=3)],
        [("x", 1, [1, 3, 32])], [("y", 1, None)], opset=22), _feeds(x=(1, 3, 32))),
    ("average_pool_same_upper_kernel_beyond_int", "kernel", lambda tmp: _model(
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2 ** 63 - 1], strides=[2, 2],
                          auto_pad="SAME_UPPER")], [("x", 1, [1, 1, 5, 5])], [("y", 1, None)], opset=22),
     _feeds(x=(1, 1, 5, 5))),
    ("max_pool_window_larger_than_input", "window", lambda tmp: _model(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[7, 7])], [("x", 1, [1, 1, 5, 5])],
        [("y", 1, None)]), _feeds(x=(1, 1, 5, 5))),
    ("rnn_empty_sequence", "steps", lambda tmp: _model(
        [helper.make_node("RNN", ["x", "w", "r", "b"], ["", "y_h"], hidden_size=5)],
        [("x", 1, [0, 3, 3]), ("w", 1, [1, 5, 3]), ("r", 1, [1, 5, 5]), ("b", 1, [1, 10])], [("y_h", 1, None)]),
     _feeds(x=(0, 3, 3), w=(1, 5, 3), r=(1, 5, 5), b=(1, 10))),
)


def _branch(name, value):
    """A subgraph of no inputs returning the float32 constant ``value`` (an If branch)."""
    return helper.make_graph([helper.make_node("Constant", [], [name + "_y"], value=numpy_helper.from_array(
        np.array(value, np.float32)))], name, [], [helper.make_tensor_value_info(name + "_y", 1, [])])


def _scan_sum_body():
    """Scan body (sum_in, next) -> (sum_out, scan_out): a running sum."""
    return helper.make_graph([helper.make_node("Add", ["s", "n"], ["so"]), helper.make_node("Identity", ["so"], ["o"])],
                             "scan_body", [helper.make_tensor_value_info(n, 1, []) for n in ("s", "n")],
                             [helper.make_tensor_value_info(n, 1, []) for n in ("so", "o")])



def fuzz_refusal_cases():
    out = []
    for label, must_name, build, feeds in FUZZ_REFUSALS:
        case_id = f"negative/{label}/float32/fuzz"

        def run(ctx, label=label, must_name=must_name, build=build, feeds=feeds, case_id=case_id):
            with tempfile.TemporaryDirectory() as tmp:
                model = build(tmp)
                for n in (model.graph.node if isinstance(model, onnx.ModelProto) else ()):
                    d = get_op(n.op_type)
                    if d is not None and d.is_extended and not ctx.backend.is_op_supported(
                            NodeInfo(n.op_type, (), (), {}, n.name)):
                        raise Unsupported(f"backend '{ctx.backend.name}' does not run the extended op {n.op_type}")
                _expect_glow_error(f"negative case: {label}", lambda: glow_core.compile(model, ctx.backend, fallback=False).run(feeds),
                                   must_name, ctx.rerun(case_id))
        out.append(Case(case_id, "negative", label, "float32", run, ("negative",)))
    return out


def _attrs_for(prim):
    return {"reduce_sum": {"axes": [1]}, "reduce_prod": {"axes": [1]}, "reduce_max": {"axes": [1]},
            "reduce_min": {"axes": [1]}, "argmax": {"axis": 1}, "argmin": {"axis": 1},
            "max_pool": {"kernel": [2, 2], "strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0]},
            "avg_pool": {"kernel": [2, 2], "strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0]}}.get(prim, {})


# -- run-time errors ----------------------------------------------------------------------------------------
def _error_naming(ctx, run, names, desc, rerun) -> None:
    """``run()`` must raise a GlowError that names one of the instructions ``names``."""
    ctx.phase("run")
    try:
        run()
    except GlowError as e:
        msg = str(e)
    except Exception as e:  # noqa: BLE001
        raise CaseFailure(f"{desc}\n  the run raised {type(e).__name__}: {e} (expected a GlowError naming the "
                          f"instruction)\n  rerun: {rerun}") from None
    else:
        raise CaseFailure(f"{desc}\n  the run succeeded (expected a GlowError naming the instruction: "
                          f"{' or '.join(names)})\n  rerun: {rerun}")
    finally:
        ctx.phase("check")
    if not any(f"'{n}'" in msg or f" {n} " in msg or msg.startswith(n) for n in names):
        raise CaseFailure(f"{desc}\n  the error does not name the instruction ({' or '.join(names)}): {msg}\n"
                          f"  rerun: {rerun}")


def _run_expecting_error(ctx, res, feeds, desc, rerun, ops):
    """Run once with the guards armed; the run must raise a GlowError naming an instruction of ``ops``, and no
    guard byte may change."""
    regs = regions_of(res.compiled)
    guard = Guard(res.ir, regs) if regs is not None else None
    if guard is not None:
        guard.arm()
    _error_naming(ctx, lambda: res.compiled.execute({k: v for k, v in feeds.items() if k in res.ir.inputs}),
                  [i.name for i in res.ir.code if i.op in ops], desc, rerun)
    if guard is not None:
        guard.check(desc + " (after the run-time error)", rerun)


# (primitive, label, make(rng, dt) -> operands, attrs)
BAD_INDICES = [
    ("gather", "index_eq_dim", lambda r, d: [P._mv(d, (5, 3), r), np.array([0, 5, 2], np.int64)], {"axis": 0}),
    ("gather", "negative_index", lambda r, d: [P._mv(d, (5, 3), r), np.array([1, -1], np.int64)], {"axis": 0}),
    ("gather", "int64_max_int32_idx", lambda r, d: [P._mv(d, (4, 6), r), np.array([[2, 2147483647]], np.int32)],
     {"axis": 1}),
    ("gather", "huge_negative", lambda r, d: [P._mv(d, (4, 6), r), np.array([-2 ** 62], np.int64)], {"axis": 1}),
    ("gather_nd", "index_eq_dim", lambda r, d: [P._mv(d, (4, 5, 3), r), np.array([[1, 2], [3, 5]], np.int64)],
     {"batch_dims": 0}),
    ("gather_nd", "negative_index", lambda r, d: [P._mv(d, (4, 5), r), np.array([[0, 1], [-1, 0]], np.int64)],
     {"batch_dims": 0}),
    ("gather_nd", "batch_dims1_out_of_range", lambda r, d: [P._mv(d, (2, 5, 3), r),
                                                           np.array([[[4]], [[5]]], np.int64)], {"batch_dims": 1}),
    ("scatter_nd", "index_eq_dim", lambda r, d: [P._mv(d, (6, 4), r), np.array([[2], [6]], np.int64),
                                                 P._mv(d, (2, 4), r)], {"reduction": "none"}),
    ("scatter_nd", "negative_index", lambda r, d: [P._mv(d, (6, 4), r), np.array([[-1], [3]], np.int64),
                                                   P._mv(d, (2, 4), r)], {"reduction": "none"}),
    ("scatter_nd", "add_out_of_range", lambda r, d: [P._mv(d, (6, 4), r), np.array([[0], [1000]], np.int64),
                                                     P._mv(d, (2, 4), r)], {"reduction": "add"}),
]
DIV_ZERO_DTYPES = ("int8", "uint8", "int16", "int32", "uint32", "int64", "uint64")


def runtime_error_cases():
    out = []
    for prim, label, make, attrs in BAD_INDICES:
        for dt in ("float32", "int8", "float16"):
            if attrs.get("reduction", "none") != "none" and dt == "float16":
                continue
            out.append(_runtime_case(prim, dt, label, lambda r, make=make, dt=dt: make(r, dt), attrs))
    for prim in ("div", "mod"):
        for dt in DIV_ZERO_DTYPES:
            for attrs in ([{"fmod": 0}, {"fmod": 1}] if prim == "mod" else [{}]):
                tag = f"fmod{attrs['fmod']}/" if attrs else ""

                def make(r, dt=dt):
                    a = P.full_range(dt, (9,), r)
                    b = P.full_range(dt, (9,), r)
                    b = np.where(b == 0, np.ones_like(b), b)
                    b[4] = 0
                    return [a, b]
                out.append(_runtime_case(prim, dt, f"{tag}by_zero", make, attrs))
    return out + onnx_runtime_error_cases()


def _runtime_case(prim, dt, label, make, attrs):
    case_id = f"negative/{prim}/{dt}/runtime_{label}"

    def run(ctx):
        seed = case_seed(case_id, ctx.seed)
        arrays = make(np.random.default_rng(seed))
        desc = f"run-time error case: primitive {prim} dtype {dt} ({label}), attributes {attrs}, seed {seed}"
        res = compile_primitive(ctx, prim, arrays, attrs)
        _run_expecting_error(ctx, res, feed(arrays), desc, ctx.rerun(case_id), (prim,))
    return Case(case_id, "negative", prim, dt, run, ("negative",))


def onnx_runtime_error_cases():
    """ONNX ops lowering to gather/gather_nd/scatter_nd/div given out-of-range indices (or zero divisors) at run
    time: a GlowError naming the instruction."""
    from .onnx_cases import Init, one_node
    rows = [
        ("Gather", lambda r: one_node("Gather", [r.standard_normal((5, 3)).astype(np.float32),
                                                 np.array([0, 5], np.int64)], {"axis": 0}), ("gather",)),
        ("Gather", lambda r: one_node("Gather", [r.standard_normal((5, 3)).astype(np.float32),
                                                 np.array([-6, 1], np.int64)], {"axis": 0}), ("gather",)),
        ("GatherND", lambda r: one_node("GatherND", [r.standard_normal((3, 4)).astype(np.float32),
                                                     np.array([[2, 4]], np.int64)]), ("gather_nd",)),
        ("GatherElements", lambda r: one_node("GatherElements", [r.standard_normal((3, 4)).astype(np.float32),
                                                                 np.array([[0, 3, 1, 2]], np.int64)], {"axis": 0}),
         ("gather", "gather_nd")),
        ("ScatterND", lambda r: one_node("ScatterND", [r.standard_normal((5, 3)).astype(np.float32),
                                                       np.array([[4], [5]], np.int64),
                                                       r.standard_normal((2, 3)).astype(np.float32)]),
         ("scatter_nd",)),
        ("Div", lambda r: one_node("Div", [np.arange(1, 7, dtype=np.int32), np.array([1, 2, 0, 3, 1, 2], np.int32)]),
         ("div",)),
        ("Mod", lambda r: one_node("Mod", [np.arange(1, 7, dtype=np.int64), Init(np.array([3, 0, 1, 2, 3, 4]))],
                                   {"fmod": 0}), ("mod",)),
    ]
    out = []
    for k, (op, build, prims) in enumerate(rows):
        dt = {"Div": "int32", "Mod": "int64"}.get(op, "float32")
        case_id = f"negative/{op}/{dt}/runtime_error_{k}"

        def run(ctx, op=op, build=build, prims=prims, case_id=case_id):
            seed = case_seed(case_id, ctx.seed)
            model, feeds = build(np.random.default_rng(seed))
            cm = compile_model(ctx, model)
            desc = f"run-time error case: ONNX {op} with inputs {[(k, v.tolist()) for k, v in feeds.items()][-1]}"
            _error_naming(ctx, lambda: cm.run(feeds), [i.name for i in cm.ir.code if i.op in prims], desc,
                          ctx.rerun(case_id))
        out.append(Case(case_id, "negative", op, dt, run, ("negative",)))
    return out


def cases(ctx=None):
    out = compiler_refusal_cases() + runtime_error_cases() + fuzz_refusal_cases()
    if ctx is not None:
        out += backend_refusal_cases(ctx)
    return out
