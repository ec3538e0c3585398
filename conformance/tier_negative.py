"""Tier "negative": what cannot run is refused cleanly at compile time with a GlowError, never a crash.

- backend refusals: every primitive x dtype that the primitive accepts but the backend's ``is_op_supported``
  refuses must make compilation raise UnsupportedOpError (a GlowError) naming the op; these cases depend on
  the backend (none for the reference interpreter, which supports everything);
- compiler refusals: a primitive given a dtype it does not accept, a model with an unknown op or an unknown
  domain, must raise a GlowError naming the op;
- fuzz refusals: the minimal bad models the fuzzers found escaping as other exceptions must raise a GlowError
  naming the bad element.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
from onnx import helper, numpy_helper

from glow_core.backend import NodeInfo
from glow_core.errors import GlowError
from glow_core.ops.registry import PRIMITIVES
from glow_core.types import DTYPES

from . import tier_primitives as P
from .cases import Case, CaseFailure, Unsupported



def _expect_glow_error(what, fn, must_name, rerun):
    try:
        fn()
    except Unsupported as e:  # the harness's name for the backend's UnsupportedOpError: what we want
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
    """One case per primitive case shape (the first variant) whose op/dtype the backend refuses."""
    out, seen = [], set()
    for c in P.cases():
        key = (c.subject, c.dtype)
        if key in seen:
            continue
        seen.add(key)
        arrays = c.info["make"](np.random.default_rng(0))
        from .harness import out_types
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
            from .harness import primitive_function
            fn = primitive_function(c.subject, arrays, c.info["attrs"])
            _expect_glow_error(f"negative case: backend refuses {c.subject} with {c.dtype}",
                               lambda: compile_graph(fn, ctx.backend, {"optimize": False}), c.subject,
                               ctx.rerun(case_id))
        out.append(Case(case_id, "negative", c.subject, c.dtype, run, ("negative",)))
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
                from .harness import run_primitive
                x = np.zeros((2, 3, 4, 4), DTYPES[dt].np)
                attrs = {k: v for k, v in _attrs_for(prim).items()}
                _expect_glow_error(f"negative case: primitive {prim} given {dt}",
                                   lambda: run_primitive(ctx.backend, prim, [x], attrs), prim, ctx.rerun(case_id))
            out.append(Case(case_id, "negative", prim, dt, run, ("negative",)))
    for label, node in (("unknown_op", helper.make_node("NoSuchOp", ["x"], ["y"])),
                        ("unknown_domain", helper.make_node("Relu", ["x"], ["y"], domain="com.vendor.none"))):
        case_id = f"negative/{label}/float32/model"

        def run(ctx, node=node, case_id=case_id):
            from .harness import compile_model
            g = helper.make_graph([node], "neg", [helper.make_tensor_value_info("x", 1, [2, 3])],
                                  [helper.make_tensor_value_info("y", 1, [2, 3])])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)] + (
                [helper.make_opsetid(node.domain, 1)] if node.domain else []))
            _expect_glow_error(f"negative case: model with {label}", lambda: compile_model(ctx.backend, m).run(
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


#: Minimal models of what importer and differential fuzzing (glowc fuzz, glow_core/fuzz/importer.py) found
#: escaping as other exceptions: (label, must be named in the error, () -> model or path, feeds).
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
    # found by the importer fuzzer on the layered core, where a lowering's stray exception became InternalError
    ("attribute_of_an_older_opset", "broadcast", lambda tmp: _model(
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], broadcast=1)],
        [("a", 1, [2, 3]), ("b", 1, [3, 4]), ("c", 1, [4])], [("y", 1, None)], opset=6),
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
)



def fuzz_refusal_cases():
    out = []
    for label, must_name, build, feeds in FUZZ_REFUSALS:
        case_id = f"negative/{label}/float32/fuzz"

        def run(ctx, label=label, must_name=must_name, build=build, feeds=feeds, case_id=case_id):
            from glow_core.ops.registry import get_op

            from .harness import compile_model
            with tempfile.TemporaryDirectory() as tmp:
                model = build(tmp)
                for n in (model.graph.node if isinstance(model, onnx.ModelProto) else ()):
                    d = get_op(n.op_type)
                    if d is not None and d.is_extended and not ctx.backend.is_op_supported(
                            NodeInfo(n.op_type, (), (), {}, n.name)):
                        raise Unsupported(f"backend '{ctx.backend.name}' does not run the extended op {n.op_type}")
                _expect_glow_error(f"negative case: {label}", lambda: compile_model(ctx.backend, model).run(feeds),
                                   must_name, ctx.rerun(case_id))
        out.append(Case(case_id, "negative", label, "float32", run, ("negative",)))
    return out


def _attrs_for(prim):
    return {"reduce_sum": {"axes": [1]}, "reduce_prod": {"axes": [1]}, "reduce_max": {"axes": [1]},
            "reduce_min": {"axes": [1]}, "argmax": {"axis": 1}, "argmin": {"axis": 1},
            "max_pool": {"kernel": [2, 2], "strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0]},
            "avg_pool": {"kernel": [2, 2], "strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0]}}.get(prim, {})


def cases(ctx=None):
    out = compiler_refusal_cases() + fuzz_refusal_cases()
    if ctx is not None:
        out += backend_refusal_cases(ctx)
    return out

