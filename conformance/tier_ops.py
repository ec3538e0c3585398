"""Tier "ops": ONNX ops the importer accepts, as one-node models with sweeps of dtypes, shapes (broadcasting
patterns included), attributes and special values (NaN, +-inf, +-0, denormals, extremes for every elementwise
op, and for the reductions, pooling, arg-max/min, matmul, Gemm and Conv). Expectation: onnx.reference's
ReferenceEvaluator on the unlowered op for the interpreter, the interpreter for other backends (see
``onnx_cases.expected``). Each op's tolerance class is in ``OP_CLASS`` (per element everywhere except the ops
in ``TENSOR_RELATIVE``, judged against the tensor's largest value). Ops not listed here are reported as uncovered by
``uncovered()``.
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from glow_core.ops import custom_ops
from glow_core.ops.registry import OPS
from glow_core.types import dtype as gdtype

from . import ops_onnxruntime, paths
from .onnx_cases import ONNXRUNTIME, Init, model_case as _model_case, one_node
from .primitive_cases import acc_specials, pairs, specials, sprinkle

#: The sizes of conformance.paths these tables were made with (the plugin re-imports this module for others).
PATHS_SIGNATURE = paths.signature()

F = ("float32", "float16", "float64")
I = ("int32", "int64", "int8", "uint8")

UNARY = {  # op -> (dtypes, (lo, hi), attrs)
    "Abs": (F + I, (-10, 10), {}), "Neg": (F + ("int32", "int64", "int8"), (-10, 10), {}),
    "Exp": (F, (-5, 5), {}), "Log": (F, (0.1, 50), {}), "Sqrt": (F, (0, 50), {}),
    "Reciprocal": (F, (0.2, 5), {}), "Sin": (F, (-5, 5), {}), "Cos": (F, (-5, 5), {}), "Tan": (F, (-1.2, 1.2), {}),
    "Asin": (F, (-0.9, 0.9), {}), "Acos": (F, (-0.9, 0.9), {}), "Atan": (F, (-5, 5), {}),
    "Sinh": (F, (-3, 3), {}), "Cosh": (F, (-3, 3), {}), "Asinh": (F, (-5, 5), {}), "Acosh": (F, (1, 5), {}),
    "Atanh": (F, (-0.9, 0.9), {}), "Tanh": (F, (-4, 4), {}), "Sigmoid": (F, (-6, 6), {}), "Erf": (F, (-2, 2), {}),
    "Floor": (F, (-5, 5), {}), "Ceil": (F, (-5, 5), {}), "Round": (F, (-5, 5), {}), "Sign": (F + I, (-5, 5), {}),
    "Relu": (F + ("int32", "int8"), (-5, 5), {}), "LeakyRelu": (F, (-5, 5), {"alpha": 0.07}),
    "Elu": (F, (-5, 5), {"alpha": 0.5}), "Selu": (F, (-5, 5), {}), "Celu": (("float32",), (-5, 5), {"alpha": 2.0}),
    "Softplus": (F, (-5, 5), {}), "Softsign": (F, (-5, 5), {}), "HardSigmoid": (F, (-5, 5), {"alpha": 0.3}),
    "HardSwish": (F[:2], (-5, 5), {}), "Mish": (F, (-5, 5), {}), "Gelu": (F[:2], (-4, 4), {}),
    "ThresholdedRelu": (F, (-3, 3), {"alpha": 0.5}), "Shrink": (F, (-3, 3), {"lambd": 0.8, "bias": 0.2}),
    "IsNaN": (F, (-3, 3), {}), "IsInf": (F, (-3, 3), {}), "Not": (("bool",), (0, 1), {}),
    "BitwiseNot": (I, (-100, 100), {}), "Identity": (F + I + ("bool",), (-5, 5), {}),
    "Swish": (F, (-4, 4), {}),
}
BINARY = {  # op -> dtypes
    "Add": F + I, "Sub": F + I, "Mul": F + I, "Div": F + ("int32", "int64"), "Pow": ("float32", "float64"),
    "Max": F + I, "Min": F + I, "Mean": F, "Sum": F, "Equal": F + I + ("bool",), "Greater": F + I,
    "Less": F + I, "GreaterOrEqual": F + I, "LessOrEqual": F + I, "And": ("bool",), "Or": ("bool",),
    "Xor": ("bool",), "BitwiseAnd": I, "BitwiseOr": I, "BitwiseXor": I, "PRelu": F, "Mod": ("int32", "int64"),
}
SHAPES = [(), (7,), (3, 5, 17), (2, 0, 3)]

#: Tolerance class of each op (for float results; integer results are always exact), per element (see
#: checker.py). Unlisted elementwise ops (UNARY, BINARY) are op-ulp; a structured op must be listed here or in
#: TENSOR_RELATIVE.
OP_CLASS = {
    **dict.fromkeys(("Abs", "Neg", "Floor", "Ceil", "Round", "Sign", "Relu", "ThresholdedRelu", "IsNaN", "IsInf",
                     "Not", "Max", "Min", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Clip",
                     "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "Hardmax", "TopK",
                     "NonZero", "Unique", "Dropout", "EyeLike", "OneHot", "Trilu", "Shape", "Size",
                     "ConstantOfShape"), "op-exact"),
    **dict.fromkeys(("Identity", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split",
                     "Slice", "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Pad", "Tile",
                     "Expand", "Where", "Compress", "DepthToSpace", "SpaceToDepth", "ReverseSequence",
                     "CenterCropPad", "Cast", "CastLike", "Constant", "MaxUnpool"), "op-bitwise"),
    **dict.fromkeys(("Elu", "Selu", "Celu", "Gelu", "HardSigmoid", "HardSwish", "Softplus", "Mish", "Shrink"),
                    "op-cancel"),
    **dict.fromkeys(("MatMul", "Gemm", "Conv", "ConvTranspose", "AveragePool", "GlobalAveragePool", "ReduceSum",
                     "ReduceMean", "ReduceL1", "ReduceSumSquare", "Einsum", "CumSum", "Sum", "Mean", "GlobalLpPool",
                     "LpPool", "Resize", "Col2Im", "RoiAlign", "NegativeLogLikelihoodLoss"), "op-acc"),
    # normalizations, log-sums, recurrences, windows and grids: each element within a few roundings of the
    # scale of its own operands (x - mean, log(sum) - x, a0 - a1 cos(...): cancellation is absolute)
    **dict.fromkeys(("LogSoftmax", "ReduceLogSumExp", "ReduceLogSum", "LayerNormalization", "BatchNormalization",
                     "InstanceNormalization", "GroupNormalization", "MeanVarianceNormalization",
                     "SoftmaxCrossEntropyLoss", "HannWindow", "HammingWindow", "BlackmanWindow", "Range", "LSTM",
                     "GRU", "RNN", "AffineGrid", "GridSample", "DFT"), "op-cancel"),
    # products and quotients of sums of positive terms: relative to each element
    **dict.fromkeys(("ReduceProd", "ReduceL2", "LpNormalization", "LRN", "RMSNormalization"), "op-rel"),
    "Softmax": "op-exp",
    # onnxruntime's LLM ops (ops_onnxruntime): MatMulNBits an accumulation over its dequantized weights (per-element
    # sums of |terms| from ops_onnxruntime._nbits_magnitude), rotations sums of two products, norms quotients
    "com.microsoft.MatMulNBits": "op-acc", "com.microsoft.RotaryEmbedding": "op-cancel",
    **dict.fromkeys(("SimplifiedLayerNormalization", "com.microsoft.SkipSimplifiedLayerNormalization"), "op-rel"),
    # integer results (compared exactly whatever the class; listed so that no float allowance is implied)
    **dict.fromkeys(("BitShift", "QuantizeLinear", "MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv",
                     "NonMaxSuppression"), "op-exact"),
    # one rounding per element: (x - zero point) * scale; DynamicQuantizeLinear's scale (max - min) / 255
    **dict.fromkeys(("DequantizeLinear", "DynamicQuantizeLinear"), "op-ulp"),
}
#: The ops still judged against the tensor's largest value ("op"), and why: a determinant's rounding error
#: scales with the product of its rows' norms (Hadamard), not with its value, so no bound per element of the
#: result exists; attention's softmax turns a score's rounding error (of the order of |q| |k| head_size eps)
#: into a relative error of every weight of its row, which no magnitude of the operands bounds per element;
#: custom ops declare no tolerance class in their record.
TENSOR_RELATIVE = {"Det", "Attention", "com.microsoft.GroupQueryAttention"}
#: (op, variant) -> class, where a variant computes something else than the op's other cases: nearest Resize
#: selects; cubic Resize has negative coefficients, so running it on |x| (how op-acc gets each element's sum
#: of |terms|) does not bound its terms, and it stays tensor-relative.
VARIANT_CLASS = {("Resize", "nearest"): "op-bitwise", ("Resize", "cubic"): "op"}


def op_specials(dt):
    """NaN, +-inf, +-0, denormals and ordinary values (not the largest finite values: ONNX leaves the order of
    a composite op's operations open, and intermediate overflow depends on it)."""
    from .checker import finfo
    s = specials(dt)
    return s[np.abs(s.astype(np.float64)) != float(finfo(gdtype(dt).np).max)]


def _prelu(feeds):
    """PRelu by its definition: slope * x where x < 0, x elsewhere (onnx.reference multiplies everywhere not
    positive, so 0 * inf gives NaN there)."""
    x, s = feeds["x0"], feeds["x1"]
    with np.errstate(all="ignore"):
        return [np.where(x < 0, x * s, x).astype(x.dtype)]


def _erf(feeds):
    """Erf in float64 (onnx.reference computes it in float32)."""
    from . import oracles as O
    return [O.unary("erf", feeds["x0"])]


#: op -> oracle(feeds) used instead of onnx.reference (for every case of the op).
ORACLES = {"PRelu": _prelu, "Erf": _erf}


def _then_activation(built, act):
    """``built`` (a one-node model and its feeds) followed by Sigmoid, or by SiLU as torch exports it:
    Mul(y, Sigmoid(y)) (the CPU backend fuses either into the conv engine's epilogue)."""
    model, feeds = built
    g = model.graph
    g.node[0].output[0] = "pre"
    g.node.append(helper.make_node("Sigmoid", ["pre"], ["sig" if act == "silu" else "y0"], name="act_sigmoid"))
    if act == "silu":
        g.node.append(helper.make_node("Mul", ["pre", "sig"], ["y0"], name="act_mul"))
    return model, feeds


def _then_gelu(built, form):
    """``built`` (a one-node model and its feeds) followed by GELU written with primitives as transformers export
    it: (y * 0.5) * (Erf(y * 1/sqrt 2) + 1) ("erf"), (y * (Erf(y / sqrt 2) + 1)) * 0.5 ("erf_div", torch's
    TorchScript exporter), y * (0.5 * (Erf(y / sqrt 2) + 1)) ("erf_half", torch's dynamo exporter before opset 20)
    or (y * 0.5) * (Tanh((y + y^3 * 0.044715) * sqrt(2/pi)) + 1) ("tanh"); the CPU backend fuses each into the
    producer (glow_core.fusion's gelu_erf / gelu_erf_div / gelu_erf_half / gelu_tanh)."""
    model, feeds = built
    g = model.graph
    g.node[0].output[0] = "pre"
    k = {"erf": 1 / np.sqrt(2), "erf_div": np.sqrt(2), "erf_half": np.sqrt(2), "tanh": np.sqrt(2 / np.pi)}[form]
    g.initializer.extend(numpy_helper.from_array(np.array(v, np.float32), nm) for nm, v in
                         (("gelu_half", 0.5), ("gelu_one", 1.0), ("gelu_k", k), ("gelu_cube", 0.044715)))
    nodes = {"erf": [("Mul", ["pre", "gelu_k"], "s"), ("Erf", ["s"], "t")],
             "erf_div": [("Div", ["pre", "gelu_k"], "s"), ("Erf", ["s"], "t")],
             "erf_half": [("Div", ["pre", "gelu_k"], "s"), ("Erf", ["s"], "t")],
             "tanh": [("Mul", ["pre", "pre"], "sq"), ("Mul", ["sq", "pre"], "cu"), ("Mul", ["cu", "gelu_cube"], "c"),
                      ("Add", ["pre", "c"], "in"), ("Mul", ["in", "gelu_k"], "s"), ("Tanh", ["s"], "t")]}[form]
    if form == "erf_div":
        nodes += [("Add", ["t", "gelu_one"], "t1"), ("Mul", ["pre", "t1"], "h"), ("Mul", ["h", "gelu_half"], "y0")]
    elif form == "erf_half":
        nodes += [("Add", ["t", "gelu_one"], "t1"), ("Mul", ["gelu_half", "t1"], "h"), ("Mul", ["pre", "h"], "y0")]
    else:
        nodes += [("Add", ["t", "gelu_one"], "t1"), ("Mul", ["pre", "gelu_half"], "h"), ("Mul", ["h", "t1"], "y0")]
    g.node.extend(helper.make_node(op, ins, [out], name="gelu_" + out) for op, ins, out in nodes)
    return model, feeds


def _then_gelu_op(built, approximate, bias=None):
    """``built`` (a one-node model and its feeds) followed by (an Add of the constant ``bias``, then) the ONNX
    Gelu op (opset 20), as torch's dynamo exporter writes nn.Linear -> nn.GELU: the CPU backend lowers a Gelu
    reading a matmul, add or conv and fuses it into that kernel's store (kernels/nn.py GELU_EPILOGUE_PRODUCERS)."""
    model, feeds = built
    g = model.graph
    g.node[0].output[0] = "pre"
    if bias is not None:
        g.initializer.append(numpy_helper.from_array(bias, "gelu_bias"))
        g.node.append(helper.make_node("Add", ["pre", "gelu_bias"], ["pre_b"], name="bias_add"))
    g.node.append(helper.make_node("Gelu", ["pre_b" if bias is not None else "pre"], ["y0"], name="gelu_op",
                                   approximate=approximate))
    for o in model.opset_import:
        if o.domain == "":
            o.version = max(o.version, 20)
    return model, feeds


def model_case(case_id, tier, op, dt, build, tolerance, **kw):
    """An ops-tier case: its op's cases are first run merged into one model (one compilation)."""
    return _model_case(case_id, tier, op, dt, build, tolerance, group=("ops", op), **kw)


def op_class(op):
    """The tolerance class of an ONNX op's cases: OP_CLASS, op-ulp for other elementwise ops, "op" (tensor-
    relative) for TENSOR_RELATIVE and custom ops."""
    if op in OP_CLASS:
        return OP_CLASS[op]
    if op in UNARY or op in BINARY:
        return "op-ulp"
    if op in TENSOR_RELATIVE:
        return "op"
    raise KeyError(f"conformance/tier_ops.py: ONNX op {op!r} has cases but no tolerance class: list it in OP_CLASS "
                   f"(per element: {', '.join(sorted(set(OP_CLASS.values())))}) or, with the reason, in "
                   f"TENSOR_RELATIVE")
BROADCAST = [((3, 4, 5), (5,)), ((3, 1, 5), (1, 4, 1)), ((1,), (2, 3)), ((), (4,)), ((2, 3, 4, 5), (3, 1, 1)),
             ((0, 3), (1, 3)), ((17, 65), (17, 65))]


def rnd(dt, shape, rng, lo=-5.0, hi=5.0):
    d = gdtype(dt)
    if d.is_bool:
        return rng.random(shape) < 0.5
    if d.is_int:
        if d.kind == "uint":
            lo = 0
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(d.np)
    return rng.uniform(lo, hi, size=shape).astype(np.float32).astype(d.np)


def _tag(shape):
    return "x".join(map(str, shape)) if shape else "scalar"


def unary_cases():
    out = []
    for op, (dts, (lo, hi), attrs) in UNARY.items():
        for dt in dts:
            for shape in SHAPES:
                if op == "Softsign" and shape == ():
                    continue  # onnx.reference's Softsign fails on 0-d tensors: no oracle
                def build(rng, op=op, dt=dt, shape=shape, lo=lo, hi=hi, attrs=attrs):
                    x = rnd(dt, shape, rng, lo, hi)
                    if op in ("IsNaN", "IsInf") and x.size:
                        x.reshape(-1)[::3] = np.array([np.nan, np.inf, -np.inf] * x.size)[:len(x.reshape(-1)[::3])]
                    return one_node(op, [x], attrs)
                out.append(model_case(f"ops/{op}/{dt}/{_tag(shape)}", "ops", op, dt, build, op_class(op),
                                      oracle=ORACLES.get(op)))
            if dt in F and op not in NO_SPECIALS:
                out.append(model_case(f"ops/{op}/{dt}/specials", "ops", op, dt, lambda r, op=op, dt=dt, attrs=attrs:
                                      one_node(op, [op_specials(dt)], attrs), op_class(op), oracle=ORACLES.get(op)))
    return out


#: Ops whose ONNX definition leaves special values undefined, or whose lowering the reference cannot follow.
NO_SPECIALS = {"Not", "Identity"}


def binary_cases():
    out = []
    for op, dts in BINARY.items():
        for dt in dts:
            for sa, sb in BROADCAST:
                if op in ("PRelu", "Mean") and np.broadcast_shapes(sa, sb) != sa:
                    continue  # PRelu: the slope broadcasts to X; Mean: onnx.reference accumulates in place

                def build(rng, op=op, dt=dt, sa=sa, sb=sb):
                    a = rnd(dt, sa, rng)
                    b = rnd(dt, sb, rng)
                    if op == "Pow":
                        a = rnd(dt, sa, rng, 0.2, 3)
                        b = rnd(dt, sb, rng, -2, 2)
                    if op in ("Div", "Mod") and gdtype(dt).is_int:
                        b = np.where(b == 0, 3, b).astype(b.dtype)
                    if op == "Div" and gdtype(dt).is_float:
                        b = np.where(np.abs(b.astype(np.float64)) < 0.3, 1.5, b).astype(b.dtype)
                    return one_node(op, [a, b], {"fmod": 0} if op == "Mod" else {})
                out.append(model_case(f"ops/{op}/{dt}/{_tag(sa)}_{_tag(sb)}", "ops", op, dt, build, op_class(op),
                                      oracle=ORACLES.get(op)))
            if dt in F and op not in NO_SPECIALS:
                def build_sp(rng, op=op, dt=dt):
                    a, b = pairs(op_specials(dt))
                    return one_node(op, [a, b], {})
                out.append(model_case(f"ops/{op}/{dt}/specials", "ops", op, dt, build_sp, op_class(op),
                                      oracle=ORACLES.get(op)))
    return out


_DW_TAIL, _CHUNKED = paths.depthwise_tail_width(), paths.chunked_channels(9)


def _c(arr, dt="int64"):
    return Init(np.asarray(arr, dtype=dt))


# (op, variant, dtypes, builder(rng, dt) -> (model, feeds))
def _structured():
    S = []

    def add(op, variant, dts, fn):
        S.append((op, variant, dts, fn))
    add("MatMul", "2d", F + ("int32", "int64"), lambda r, d: one_node("MatMul", [rnd(d, (5, 7), r), rnd(d, (7, 3), r)]))
    add("MatMul", "batched_broadcast", F, lambda r, d: one_node("MatMul", [rnd(d, (2, 1, 4, 6), r),
                                                                          rnd(d, (3, 6, 5), r)]))
    add("MatMul", "vec_mat", F, lambda r, d: one_node("MatMul", [rnd(d, (6,), r), rnd(d, (2, 6, 3), r)]))
    add("MatMul", "mat_vec", F, lambda r, d: one_node("MatMul", [rnd(d, (4, 6), r), rnd(d, (6,), r)]))
    # a constant B of a GEMM-sized product (paths.gemm_shapes: the CPU backend's GEMM, not its small loops):
    # float16 B converted to float32 at compile time, float32/float64 B read in place
    gm, gk, gn = paths.gemm_shapes("f32")[0]
    add("MatMul", f"const_b_gemm_{gm}x{gk}x{gn}", F, lambda r, d: one_node(
        "MatMul", [rnd(d, (gm, gk), r), Init(rnd(d, (gk, gn), r))]))
    # constant B packed at compile time into the GEMM's panels (paths.packed_b_shapes: panel-width, kc and nc
    # edges, above the parallel threshold), 2-d and batched
    for dt, sfx in (("float32", "f32"), ("float64", "f64")):
        for pm, pk, pn in paths.packed_b_shapes(sfx):
            add("MatMul", f"const_b_packed_{pm}x{pk}x{pn}", (dt,), lambda r, d, pm=pm, pk=pk, pn=pn: one_node(
                "MatMul", [rnd(d, (pm, pk), r), Init(rnd(d, (pk, pn), r))]))
        pm, pk, pn = paths.packed_b_shapes(sfx)[0]
        add("MatMul", f"const_b_packed_batched_2x{pm}x{pk}x{pn}", (dt,), lambda r, d, pm=pm, pk=pk, pn=pn: one_node(
            "MatMul", [rnd(d, (2, pm, pk), r), Init(rnd(d, (2, pk, pn), r))]))
    for ta in (0, 1):
        for tb in (0, 1):
            add("Gemm", f"tA{ta}_tB{tb}", F, lambda r, d, ta=ta, tb=tb: one_node(
                "Gemm", [rnd(d, (5, 4)[::-1] if ta else (5, 4), r), rnd(d, (6, 4) if tb else (4, 6), r),
                         rnd(d, (6,), r)], {"transA": ta, "transB": tb, "alpha": 0.5, "beta": 2.0}))
    # one row times a constant B (the CPU backend's float32 GEMV): 2-d, a [1, 1, K] decode step, Gemm's
    # transposed B (constant, folded; or an input) with a bias
    for gk, gn in paths.gemv_shapes()[3:5]:
        add("MatMul", f"const_b_gemv_1x{gk}x{gn}", ("float32",), lambda r, d, gk=gk, gn=gn: one_node(
            "MatMul", [rnd(d, (1, gk), r), Init(rnd(d, (gk, gn), r))]))
    gk, gn = paths.gemv_shapes()[4]
    add("MatMul", f"const_b_gemv_1x1x{gk}x{gn}", ("float32",), lambda r, d: one_node(
        "MatMul", [rnd(d, (1, 1, gk), r), Init(rnd(d, (gk, gn), r))]))
    add("Gemm", f"gemv_tB1_const_1x{gk}x{gn}", ("float32",), lambda r, d: one_node(
        "Gemm", [rnd(d, (1, gk), r), Init(rnd(d, (gn, gk), r)), Init(rnd(d, (gn,), r))],
        {"transB": 1, "alpha": 0.5, "beta": 2.0}))
    add("Gemm", f"gemv_tB1_input_1x{gk}x{gn}", ("float32",), lambda r, d: one_node(
        "Gemm", [rnd(d, (1, gk), r), rnd(d, (gn, gk), r), Init(rnd(d, (gn,), r))], {"transB": 1}))
    add("Gemm", "C_scalar_broadcast", F, lambda r, d: one_node("Gemm", [rnd(d, (3, 4), r), rnd(d, (4, 2), r),
                                                                       rnd(d, (1,), r)]))
    conv = {
        "basic": ((1, 3, 7, 7), (4, 3, 3, 3), {}),
        "pads_strides": ((2, 2, 9, 8), (3, 2, 3, 3), {"pads": [1, 0, 2, 1], "strides": [2, 2]}),
        "same_upper": ((1, 2, 6, 7), (3, 2, 3, 2), {"auto_pad": "SAME_UPPER", "strides": [2, 1]}),
        "group_dilation": ((1, 4, 9, 9), (4, 2, 3, 3), {"group": 2, "dilations": [2, 2]}),
        "1d": ((1, 2, 11), (3, 2, 4), {"pads": [1, 2]}),
        # glowc fuzz (minimal model): the padding covers most of each dilated window; GCC 12's vectorizer
        # miscompiled the bounds-checked im2col and the cpu backend returned memory never written (up to 1e30)
        "fuzz_dilated_window_in_padding": ((1, 2, 5, 5), (3, 2, 5, 5), {"dilations": [2, 2], "pads": [4, 4, 4, 4]}),
        "fuzz_dilated_window_in_padding_batch": ((2, 3, 5, 5), (4, 3, 5, 5), {"dilations": [2, 2],
                                                                               "pads": [4, 4, 4, 4]}),
    }
    for v, (xs, ws, at) in conv.items():
        add("Conv", v, F, lambda r, d, xs=xs, ws=ws, at=at: one_node(
            "Conv", [rnd(d, xs, r), rnd(d, ws, r), rnd(d, (ws[0],), r)], at))
    # Constant filters (the CPU backend's conv engine; see backends/cpu/conv/engine.py for its algorithms): a
    # 3-channel strided stem, Winograd F(4x4) (24x24 maps) and F(2x2) (12x12), strided 1x1, depthwise,
    # grouped + dilated, 1-d, in-place 1x1, depthwise in several strips.
    conv_const = {
        "const_stem": ((1, 3, 20, 20), (16, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
        "const_winograd4": ((1, 16, 24, 24), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
        "const_winograd2": ((1, 16, 12, 12), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
        "const_1x1_stride2": ((1, 16, 9, 9), (24, 16, 1, 1), {"strides": [2, 2]}),
        "const_depthwise": ((2, 16, 10, 10), (16, 1, 3, 3), {"group": 16, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
        "const_group_dilation": ((1, 8, 11, 11), (8, 2, 3, 3), {"group": 4, "dilations": [2, 2], "pads": [2] * 4}),
        "const_1d": ((1, 4, 15), (6, 4, 3), {"pads": [1, 1]}),
        # 1x1, stride 1, unpadded: reads nchw in place; depthwise over rows wider than one strip's budget
        "const_1x1_in_place": ((2, 24, 9, 11), (16, 24, 1, 1), {}),
        "const_depthwise_strips": ((1, 8, 6, paths.depthwise_strip_width()), (8, 1, 3, 3),
                                   {"group": 8, "pads": [1, 1, 1, 1]}),
        # a row of whole depthwise tiles and a tail tile; the direct kernel over several input-channel chunks
        "const_depthwise_tail_tile": ((1, 16, 5, _DW_TAIL), (16, 1, 3, 3), {"group": 16, "pads": [1, 1, 1, 1]}),
        "const_input_chunks": ((1, _CHUNKED, 5, 5), (16, _CHUNKED, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    }
    for v, (xs, ws, at) in conv_const.items():
        add("Conv", v, ("float32",), lambda r, d, xs=xs, ws=ws, at=at: one_node(
            "Conv", [rnd(d, xs, r), Init(rnd(d, ws, r)), Init(rnd(d, (ws[0],), r))], at))
    # ... with a fused SiLU / Sigmoid epilogue (the engine's vector exp): outputs over about +-150 (exp underflow,
    # subnormal results) and NaN, +-inf, +-0 and denormal inputs (acc_specials)
    for v, (xs, ws, at), act in (("const_silu_specials", conv_const["const_stem"], "silu"),
                                 ("const_depthwise_sigmoid_specials", conv_const["const_depthwise"], "sigmoid")):
        add("Conv", v, ("float32",), lambda r, d, xs=xs, ws=ws, at=at, act=act: _then_activation(one_node(
            "Conv", [sprinkle(rnd(d, xs, r), r, 0.03, acc_specials(d)), Init(rnd(d, ws, r)),
                     Init(rnd(d, (ws[0],), r, -50, 50))], at), act))
    # ... followed by GELU (erf and tanh forms) written with primitives: fused after the conv engine; after the
    # GEMM with B packed at compile time (its epilogue); after Gemm's bias add (the add's loop)
    add("Conv", "const_gelu_tanh", ("float32",), lambda r, d: _then_gelu(one_node("Conv", [
        rnd(d, (1, 3, 20, 20), r), Init(rnd(d, (16, 3, 3, 3), r, -0.4, 0.4)), Init(rnd(d, (16,), r))],
        {"pads": [1, 1, 1, 1], "strides": [2, 2]}), "tanh"))
    pm, pk, pn = paths.packed_b_shapes("f32")[0]
    for form in ("erf", "erf_div", "erf_half", "tanh"):
        add("MatMul", f"const_b_packed_gelu_{form}", ("float32",), lambda r, d, form=form: _then_gelu(one_node(
            "MatMul", [rnd(d, (pm, pk), r), Init(rnd(d, (pk, pn), r, -3 / np.sqrt(pk), 3 / np.sqrt(pk)))]), form))
        add("MatMul", f"const_b_gemv_gelu_{form}", ("float32",), lambda r, d, form=form: _then_gelu(one_node(
            "MatMul", [rnd(d, (1, pk), r), Init(rnd(d, (pk, pn), r, -3 / np.sqrt(pk), 3 / np.sqrt(pk)))]), form))
        add("Gemm", f"bias_gelu_{form}", ("float32",), lambda r, d, form=form: _then_gelu(one_node(
            "Gemm", [rnd(d, (pm, pk), r), Init(rnd(d, (pk, pn), r, -3 / np.sqrt(pk), 3 / np.sqrt(pk))),
                     Init(rnd(d, (pn,), r))]), form))
    # ... followed by the Gelu op (opset 20) through a bias Add (ViT's, BERT's MLP as the dynamo exporter writes
    # it) or straight after a conv: lowered, fused into the add's loop / the conv's epilogue
    for approx in ("none", "tanh"):
        add("MatMul", f"bias_gelu_op_{approx}", ("float32",), lambda r, d, approx=approx: _then_gelu_op(one_node(
            "MatMul", [rnd(d, (2, 50, 64), r), Init(rnd(d, (64, 96), r, -3 / 8, 3 / 8))]), approx,
            bias=rnd(d, (96,), r)))
    add("Conv", "const_gelu_op", ("float32",), lambda r, d: _then_gelu_op(one_node("Conv", [
        rnd(d, (1, 3, 20, 20), r), Init(rnd(d, (16, 3, 3, 3), r, -0.4, 0.4)), Init(rnd(d, (16,), r))],
        {"pads": [1, 1, 1, 1]}), "none"))
    add("ConvTranspose", "const_stride2", ("float32",), lambda r, d: one_node(
        "ConvTranspose", [rnd(d, (1, 8, 6, 5), r), Init(rnd(d, (8, 4, 3, 3), r))], {"strides": [2, 2]}))
    add("ConvTranspose", "stride2", ("float32",), lambda r, d: one_node(
        "ConvTranspose", [rnd(d, (1, 2, 4, 5), r), rnd(d, (2, 3, 3, 3), r)], {"strides": [2, 2]}))
    # kernel = stride: one matmul (glow_core.ops.onnx_ops.nn.conv_transpose_tiles), as U-Net's 2x2 upsampling
    add("ConvTranspose", "tiles_const_k2s2_bias", ("float32",), lambda r, d: one_node(
        "ConvTranspose", [rnd(d, (1, 16, 6, 5), r), Init(rnd(d, (16, 8, 2, 2), r)), Init(rnd(d, (8,), r))],
        {"strides": [2, 2]}))
    add("ConvTranspose", "tiles_k2x3_batch2", ("float32",), lambda r, d: one_node(
        "ConvTranspose", [rnd(d, (2, 3, 4, 5), r), rnd(d, (3, 5, 2, 3), r)], {"strides": [2, 3]}))
    add("ConvTranspose", "pads_output_padding", ("float32",), lambda r, d: one_node(
        "ConvTranspose", [rnd(d, (1, 2, 4, 4), r), rnd(d, (2, 2, 3, 3), r)],
        {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}))
    pools = {"k2s2": {"kernel_shape": [2, 2], "strides": [2, 2]},
             "k3_pads_ceil": {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
             "same_upper": {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER"}}
    for v, at in pools.items():
        ints = ("int8", "uint8") if "auto_pad" not in at else ()  # onnx.reference: no int SAME padding
        add("MaxPool", v, F + ints, lambda r, d, at=at: one_node("MaxPool", [rnd(d, (1, 3, 9, 8), r)], at))
        add("AveragePool", v, F, lambda r, d, at=at: one_node("AveragePool", [rnd(d, (1, 3, 9, 8), r)], at))
    add("AveragePool", "count_include_pad", F, lambda r, d: one_node(
        "AveragePool", [rnd(d, (1, 2, 7, 7), r)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                                   "count_include_pad": 1}))
    for op in ("GlobalAveragePool", "GlobalMaxPool"):
        add(op, "4d", F, lambda r, d, op=op: one_node(op, [rnd(d, (2, 3, 5, 7), r)]))
    for op in ("Softmax", "LogSoftmax", "Hardmax"):
        for axis in (-1, 0, 1):
            add(op, f"axis{axis}", F, lambda r, d, op=op, axis=axis: one_node(op, [rnd(d, (3, 4, 17), r)],
                                                                               {"axis": axis}))
    # an empty axis: an empty output of the input's shape (found by glowc fuzz)
    add("Hardmax", "empty_axis", ("float32", "float16"), lambda r, d: one_node("Hardmax", [rnd(d, (1, 0, 1, 1), r)],
                                                                              {"axis": 1}))
    reds = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
            "ReduceLogSumExp", "ReduceSumSquare", "ReduceLogSum")
    for op in reds:
        for axes, kd in (([1], 1), ([0, 2], 0), (None, 1), ([-1], 0)):
            tag = f"axes{'_'.join(map(str, axes)) if axes else 'all'}_kd{kd}"
            dts = F + (("int32", "int64") if op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd") else ())

            def b(r, d, op=op, axes=axes, kd=kd):
                lo, hi = (0.1, 3) if op in ("ReduceLogSum", "ReduceProd") else (-3, 3)
                ops = [rnd(d, (3, 4, 5), r, lo, hi)] + ([_c(axes)] if axes is not None else [])
                return one_node(op, ops, {"keepdims": kd})
            add(op, tag, dts, b)
    for op in ("ArgMax", "ArgMin"):
        for axis, kd, last in ((0, 1, 0), (1, 0, 1), (-1, 1, 1)):
            add(op, f"axis{axis}_kd{kd}_last{last}", F + ("int32",), lambda r, d, op=op, axis=axis, kd=kd, last=last:
                one_node(op, [rnd(d, (3, 4, 5), r, 0, 2).round().astype(gdtype(d).np)],
                         {"axis": axis, "keepdims": kd, "select_last_index": last}))
        # an empty axis whose output is empty too: no index to return, an empty answer (found by glowc fuzz)
        add(op, "empty_axis_empty_output", ("float32", "int8"), lambda r, d, op=op: one_node(
            op, [rnd(d, (2, 0, 0), r)], {"axis": 1}))
    mv = F + ("int64", "int8", "bool")
    add("Transpose", "perm021", mv, lambda r, d: one_node("Transpose", [rnd(d, (2, 3, 4), r)], {"perm": [0, 2, 1]}))
    add("Transpose", "default", mv, lambda r, d: one_node("Transpose", [rnd(d, (2, 3, 4), r)]))
    add("Reshape", "minus1_zero", mv, lambda r, d: one_node("Reshape", [rnd(d, (2, 3, 4), r), _c([0, -1])]))
    add("Flatten", "axis2", mv, lambda r, d: one_node("Flatten", [rnd(d, (2, 3, 4, 5), r)], {"axis": 2}))
    add("Squeeze", "axes", mv, lambda r, d: one_node("Squeeze", [rnd(d, (1, 3, 1, 4), r), _c([0, 2])]))
    add("Unsqueeze", "axes", mv, lambda r, d: one_node("Unsqueeze", [rnd(d, (3, 4), r), _c([0, 3])]))
    add("Concat", "axis1", mv, lambda r, d: one_node("Concat", [rnd(d, (2, 3), r), rnd(d, (2, 5), r),
                                                                rnd(d, (2, 1), r)], {"axis": 1}))
    add("Concat", "axis_neg", mv, lambda r, d: one_node("Concat", [rnd(d, (2, 3, 4), r), rnd(d, (2, 3, 2), r)],
                                                        {"axis": -1}))
    add("Split", "uneven", mv, lambda r, d: one_node("Split", [rnd(d, (7, 3), r), _c([2, 5])], {"axis": 0}, n_out=2))
    add("Split", "equal3", mv, lambda r, d: one_node("Split", [rnd(d, (2, 9), r)], {"axis": 1}, n_out=3))
    # more outputs than a backend keeping 8 output slots returns
    add("Split", "equal12", mv, lambda r, d: one_node("Split", [rnd(d, (2, 36), r)], {"axis": 1}, n_out=12))
    add("Slice", "steps", mv, lambda r, d: one_node("Slice", [rnd(d, (9, 8), r), _c([1, -1]), _c([8, 0]), _c([0, 1]),
                                                              _c([3, -2])]))
    add("Slice", "clamped", mv, lambda r, d: one_node("Slice", [rnd(d, (5, 6), r), _c([-100]), _c([100]), _c([1])]))
    add("Gather", "axis1", mv, lambda r, d: one_node("Gather", [rnd(d, (3, 7), r), Init(np.array([[0, 6], [-1, 2]]))],
                                                     {"axis": 1}))
    add("Gather", "runtime_indices", mv, lambda r, d: one_node("Gather", [rnd(d, (5, 3), r), r.integers(0, 5, (4,))]))
    add("GatherElements", "axis0", mv, lambda r, d: one_node("GatherElements", [rnd(d, (3, 4), r),
                                                                               r.integers(0, 3, (2, 4))]))
    add("GatherND", "k2", mv, lambda r, d: one_node("GatherND", [rnd(d, (3, 4, 2), r), _c([[0, 1], [2, 3]])]))
    add("ScatterND", "rows", ("float32", "int64"), lambda r, d: one_node(
        "ScatterND", [rnd(d, (5, 3), r), _c([[4], [0]]), rnd(d, (2, 3), r)]))
    add("ScatterElements", "axis1", ("float32", "int64"), lambda r, d: one_node(
        "ScatterElements", [rnd(d, (3, 5), r), _c([[1, 3], [0, 4], [2, 2]]), rnd(d, (3, 2), r)], {"axis": 1}))
    for mode in ("constant", "reflect", "edge", "wrap"):
        add("Pad", mode, ("float32", "int32") if mode != "constant" else mv, lambda r, d, mode=mode: one_node(
            "Pad", [rnd(d, (3, 4), r), _c([1, 2, 2, 1])], {"mode": mode}))
    add("Tile", "2x3", mv, lambda r, d: one_node("Tile", [rnd(d, (2, 3), r), _c([2, 3])]))
    add("Expand", "broadcast", mv, lambda r, d: one_node("Expand", [rnd(d, (3, 1), r), _c([2, 3, 4])]))
    add("Where", "broadcast", F + ("int32",), lambda r, d: one_node("Where", [rnd("bool", (3, 1), r), rnd(d, (4,), r),
                                                                             rnd(d, (3, 4), r)]))
    # NaN in either operand of Max and Min, broadcast both ways (the specials cases pair every special value)
    for op in ("Max", "Min"):
        add(op, "nan_broadcast", F, lambda r, d, op=op: one_node(op, [
            np.where(r.random((3, 1, 65)) < 0.1, np.nan, rnd(d, (3, 1, 65), r)).astype(gdtype(d).np),
            np.where(r.random((4, 65)) < 0.1, np.nan, rnd(d, (4, 65), r)).astype(gdtype(d).np)]))
    add("Clip", "min_max", F + ("int32",), lambda r, d: one_node("Clip", [rnd(d, (4, 5), r), Init(np.array(-1).astype(
        gdtype(d).np)), Init(np.array(2).astype(gdtype(d).np))]))
    for to in ("float32", "float16", "int32", "int8", "uint8", "bool", "float64", "bfloat16"):
        add("Cast", f"to_{to}", ("float32", "int32", "float16"), lambda r, d, to=to: one_node(
            "Cast", [rnd(d, (4, 6), r, -100, 100)], {"to": gdtype(to).onnx}))
    add("LayerNormalization", "last_axis", F, lambda r, d: one_node(
        "LayerNormalization", [rnd(d, (2, 3, 8), r), rnd(d, (8,), r), rnd(d, (8,), r)], {"axis": -1}))
    add("LayerNormalization", "axis1", ("float32",), lambda r, d: one_node(
        "LayerNormalization", [rnd(d, (2, 3, 4), r), rnd(d, (3, 4), r), rnd(d, (3, 4), r)], {"axis": 1}))
    add("BatchNormalization", "inference", F, lambda r, d: one_node(
        "BatchNormalization", [rnd(d, (2, 3, 4, 5), r), rnd(d, (3,), r), rnd(d, (3,), r), rnd(d, (3,), r),
                               rnd(d, (3,), r, 0.5, 2)]))
    add("InstanceNormalization", "4d", ("float32",), lambda r, d: one_node(
        "InstanceNormalization", [rnd(d, (2, 3, 4, 5), r), rnd(d, (3,), r), rnd(d, (3,), r)]))
    # one element per instance: x - mean = 0 exactly, the output is B (onnxruntime 1.32 is ~90 ULP off there)
    add("InstanceNormalization", "spatial1", ("float32",), lambda r, d: one_node(
        "InstanceNormalization", [rnd(d, (2, 3, 1), r), rnd(d, (3,), r), rnd(d, (3,), r)]))
    add("GroupNormalization", "g2", ("float32",), lambda r, d: one_node(
        "GroupNormalization", [rnd(d, (2, 4, 3, 3), r), rnd(d, (4,), r), rnd(d, (4,), r)], {"num_groups": 2}))
    add("LpNormalization", "l2", ("float32",), lambda r, d: one_node("LpNormalization", [rnd(d, (3, 5), r)]))
    add("MeanVarianceNormalization", "default", ("float32",), lambda r, d: one_node(
        "MeanVarianceNormalization", [rnd(d, (2, 3, 4, 5), r)]))
    for mode, extra in (("nearest", {}), ("linear", {}), ("cubic", {}),
                        ("linear", {"coordinate_transformation_mode": "align_corners"})):
        tag = mode + ("_align" if extra else "")
        add("Resize", tag, ("float32",), lambda r, d, mode=mode, extra=extra: one_node(
            "Resize", [rnd(d, (1, 2, 4, 5), r), None, Init(np.array([1, 1, 2, 1.5], np.float32))],
            dict(mode=mode, **extra)))
    add("DepthToSpace", "DCR", ("float32", "int32"), lambda r, d: one_node("DepthToSpace", [rnd(d, (1, 8, 2, 3), r)],
                                                                          {"blocksize": 2}))
    add("DepthToSpace", "CRD", ("float32",), lambda r, d: one_node("DepthToSpace", [rnd(d, (1, 8, 2, 3), r)],
                                                                  {"blocksize": 2, "mode": "CRD"}))
    add("SpaceToDepth", "b2", ("float32", "int32"), lambda r, d: one_node("SpaceToDepth", [rnd(d, (1, 2, 4, 6), r)],
                                                                         {"blocksize": 2}))
    add("CumSum", "axis1", ("float32", "int32"), lambda r, d: one_node("CumSum", [rnd(d, (3, 5), r), _c(1)]))
    add("CumSum", "reverse_exclusive", ("float32",), lambda r, d: one_node("CumSum", [rnd(d, (3, 5), r), _c(0)],
                                                                          {"reverse": 1, "exclusive": 1}))
    add("Einsum", "bij_bjk", ("float32",), lambda r, d: one_node("Einsum", [rnd(d, (2, 3, 4), r), rnd(d, (2, 4, 5), r)],
                                                                {"equation": "bij,bjk->bik"}))
    add("Trilu", "upper_k1", ("float32", "int64"), lambda r, d: one_node("Trilu", [rnd(d, (4, 5), r), _c(1)]))
    add("Trilu", "lower", ("float32",), lambda r, d: one_node("Trilu", [rnd(d, (2, 4, 4), r)], {"upper": 0}))
    add("OneHot", "depth5", ("int64",), lambda r, d: one_node("OneHot", [r.integers(0, 5, (3,)), _c(5),
                                                                         _c([0.0, 1.0], "float32")]))
    add("Range", "float", ("float32",), lambda r, d: one_node("Range", [_c(1.0, "float32"), _c(5.5, "float32"),
                                                                        _c(0.5, "float32")]))
    add("Shape", "4d", ("float32",), lambda r, d: one_node("Shape", [rnd(d, (2, 3, 4, 5), r)]))
    add("Size", "3d", ("float32",), lambda r, d: one_node("Size", [rnd(d, (2, 3, 4), r)]))
    add("ConstantOfShape", "2x3", ("float32",), lambda r, d: one_node("ConstantOfShape", [_c([2, 3])]))
    add("EyeLike", "k1", ("float32", "int32"), lambda r, d: one_node("EyeLike", [rnd(d, (3, 4), r)], {"k": 1}))
    add("TopK", "k3", ("float32",), lambda r, d: one_node("TopK", [rnd(d, (3, 7), r), _c([3])], n_out=2))
    add("ReverseSequence", "batch", ("float32",), lambda r, d: one_node(
        "ReverseSequence", [rnd(d, (4, 3), r), _c([4, 2, 1])], {"batch_axis": 1, "time_axis": 0}))
    add("QuantizeLinear", "uint8", ("float32",), lambda r, d: one_node(
        "QuantizeLinear", [rnd(d, (3, 4), r), _c(0.05, "float32"), _c(128, "uint8")]))
    add("DequantizeLinear", "int8", ("int8",), lambda r, d: one_node(
        "DequantizeLinear", [rnd(d, (3, 4), r, -100, 100), _c(0.05, "float32"), _c(3, "int8")]))
    # a per-tensor (scalar) scale leaves `axis` unused, even out of range for the input's rank (the specification)
    add("DequantizeLinear", "per_tensor_axis_unused", ("int8",), lambda r, d: one_node(
        "DequantizeLinear", [rnd(d, (5,), r, -100, 100), _c(0.05, "float32"), _c(3, "int8")], {"axis": 1}))
    add("QuantizeLinear", "per_tensor_axis_unused", ("float32",), lambda r, d: one_node(
        "QuantizeLinear", [rnd(d, (5,), r), _c(0.05, "float32"), _c(-3, "int8")], {"axis": 3}))
    # glowc fuzz --against onnxruntime: a float16 input with a float32 scale is divided in float32 (opset 23: in the
    # scale's type): 3 / 0.031087851 = 96.5007 rounds to 97 (the scale rounded to float16 gave 96.5, then 96)
    add("QuantizeLinear", "float32_scale", ("float16",), lambda r, d: one_node(
        "QuantizeLinear", [np.concatenate([[3.0], rnd(d, (7,), r, -3, 3)]).astype(d).reshape(2, 4),
                           _c(0.031087851, "float32"), _c(1, "uint8")], opset=25))
    add("QLinearMatMul", "uint8", ("uint8",), lambda r, d: one_node(
        "QLinearMatMul", [rnd(d, (3, 4), r, 0, 255), _c(0.02, "float32"), _c(128, "uint8"),
                          rnd(d, (4, 2), r, 0, 255), _c(0.03, "float32"), _c(120, "uint8"), _c(0.1, "float32"),
                          _c(100, "uint8")]))
    add("MatMulInteger", "uint8", ("uint8",), lambda r, d: one_node(
        "MatMulInteger", [rnd(d, (3, 4), r, 0, 255), rnd(d, (4, 2), r, 0, 255), _c(12, "uint8"), _c(7, "uint8")]))
    # zero points of [D1, D2, M, 1] and [D1, D2, 1, N] (N-D per row / column; glowc fuzz: reshaped to 2-D they failed)
    add("MatMulInteger", "nd_zero_points", ("uint8",), lambda r, d: one_node(
        "MatMulInteger", [rnd(d, (2, 3, 4), r, 0, 255), rnd("int8", (2, 4, 5), r, -128, 127),
                          rnd(d, (2, 3, 1), r, 0, 255), rnd("int8", (2, 1, 5), r, -128, 127)]))
    add("ConvInteger", "uint8", ("uint8",), lambda r, d: one_node(
        "ConvInteger", [rnd(d, (1, 2, 5, 5), r, 0, 255), rnd(d, (3, 2, 3, 3), r, 0, 255), _c(100, "uint8")]))
    add("BitShift", "left", ("uint8", "uint32"), lambda r, d: one_node(
        "BitShift", [rnd(d, (7,), r, 0, 200), rnd(d, (7,), r, 0, 7)], {"direction": "LEFT"}))
    add("BitShift", "right", ("uint16", "uint64"), lambda r, d: one_node(
        "BitShift", [rnd(d, (7,), r, 0, 200), rnd(d, (7,), r, 0, 7)], {"direction": "RIGHT"}))
    add("Dropout", "inference", ("float32",), lambda r, d: one_node("Dropout", [rnd(d, (3, 4), r)]))
    add("CastLike", "to_int32", ("float32",), lambda r, d: one_node("CastLike", [rnd(d, (3, 4), r, -50, 50),
                                                                                 _c([1], "int32")]))
    add("RMSNormalization", "last", ("float32",), lambda r, d: one_node(
        "RMSNormalization", [rnd(d, (2, 3, 8), r), rnd(d, (8,), r)], opset=23))
    # recurrences, signal, losses, data-dependent shapes and other whole (extended) ops
    for op in ("LSTM", "GRU", "RNN"):
        gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
        add(op, "fwd_bias", ("float32",), lambda r, d, op=op, gates=gates: one_node(
            op, [rnd(d, (4, 2, 3), r, -1, 1), rnd(d, (1, gates * 5, 3), r, -0.5, 0.5),
                 rnd(d, (1, gates * 5, 5), r, -0.5, 0.5), rnd(d, (1, 2 * gates * 5), r, -0.5, 0.5)],
            {"hidden_size": 5}, n_out=2))
    # LSTM with constant weights (the CPU backend packs them: blocks of kernels_nn.LSTM_UNITS hidden units, the
    # last one partial; an odd hidden size leaves one recurrent row after the kernel's pairs)
    add("LSTM", "const_weights", ("float32",), lambda r, d: one_node(
        "LSTM", [rnd(d, (4, 2, 3), r, -1, 1), Init(rnd(d, (1, 4 * 21, 3), r, -0.5, 0.5)),
                 Init(rnd(d, (1, 4 * 21, 21), r, -0.5, 0.5)), Init(rnd(d, (1, 8 * 21), r, -0.5, 0.5))],
        {"hidden_size": 21}, n_out=3))
    add("GRU", "linear_before_reset", ("float32",), lambda r, d: one_node(  # PyTorch's GRU exports it so
        "GRU", [rnd(d, (4, 2, 3), r, -1, 1), rnd(d, (1, 15, 3), r, -0.5, 0.5), rnd(d, (1, 15, 5), r, -0.5, 0.5),
                rnd(d, (1, 30), r, -0.5, 0.5)], {"hidden_size": 5, "linear_before_reset": 1}, n_out=2))
    add("LSTM", "wide", ("float32",), lambda r, d: one_node(  # input and hidden above the CPU kernel's 32-lane dot
        "LSTM", [rnd(d, (3, 2, 36), r, -1, 1), rnd(d, (1, 160, 36), r, -0.2, 0.2),
                 rnd(d, (1, 160, 40), r, -0.2, 0.2), rnd(d, (1, 320), r, -0.2, 0.2)], {"hidden_size": 40}, n_out=2))
    # the CPU backend's whole-op kernels with the initial states torch exports (kernels/nn.py): the packed LSTM
    # (constant weights), the packed GRU (linear_before_reset, constant weights, hidden not a multiple of the
    # 16-unit block), the plain loops (weights at run time), a constant full-length sequence_lens, and a
    # bidirectional LSTM (graph pass rnn-directions: two forward kernels)
    add("LSTM", "const_weights_states", ("float32",), lambda r, d: one_node(
        "LSTM", [rnd(d, (5, 2, 3), r, -1, 1), Init(rnd(d, (1, 4 * 21, 3), r, -0.5, 0.5)),
                 Init(rnd(d, (1, 4 * 21, 21), r, -0.5, 0.5)), Init(rnd(d, (1, 8 * 21), r, -0.5, 0.5)), None,
                 rnd(d, (1, 2, 21), r, -1, 1), rnd(d, (1, 2, 21), r, -1, 1)], {"hidden_size": 21}, n_out=3))
    add("LSTM", "states", ("float32",), lambda r, d: one_node(
        "LSTM", [rnd(d, (4, 2, 3), r, -1, 1), rnd(d, (1, 20, 3), r, -0.5, 0.5), rnd(d, (1, 20, 5), r, -0.5, 0.5),
                 rnd(d, (1, 40), r, -0.5, 0.5), Init(np.full(2, 4, np.int32)), rnd(d, (1, 2, 5), r, -1, 1),
                 rnd(d, (1, 2, 5), r, -1, 1)], {"hidden_size": 5}, n_out=3))
    add("LSTM", "bidirectional_const_states", ("float32",), lambda r, d: one_node(
        "LSTM", [rnd(d, (4, 2, 3), r, -1, 1), Init(rnd(d, (2, 4 * 18, 3), r, -0.5, 0.5)),
                 Init(rnd(d, (2, 4 * 18, 18), r, -0.5, 0.5)), Init(rnd(d, (2, 8 * 18), r, -0.5, 0.5)), None,
                 rnd(d, (2, 2, 18), r, -1, 1), rnd(d, (2, 2, 18), r, -1, 1)],
        {"hidden_size": 18, "direction": "bidirectional"}, n_out=3))
    add("GRU", "const_linear_before_reset", ("float32",), lambda r, d: one_node(
        "GRU", [rnd(d, (5, 2, 3), r, -1, 1), Init(rnd(d, (1, 3 * 21, 3), r, -0.5, 0.5)),
                Init(rnd(d, (1, 3 * 21, 21), r, -0.5, 0.5)), Init(rnd(d, (1, 6 * 21), r, -0.5, 0.5))],
        {"hidden_size": 21, "linear_before_reset": 1}, n_out=2))
    add("GRU", "const_linear_before_reset_states", ("float32",), lambda r, d: one_node(
        "GRU", [rnd(d, (5, 1, 4), r, -1, 1), Init(rnd(d, (1, 3 * 33, 4), r, -0.5, 0.5)),
                Init(rnd(d, (1, 3 * 33, 33), r, -0.5, 0.5)), Init(rnd(d, (1, 6 * 33), r, -0.5, 0.5)), None,
                rnd(d, (1, 1, 33), r, -1, 1)], {"hidden_size": 33, "linear_before_reset": 1}, n_out=2))
    add("GRU", "bidirectional_const_states", ("float32",), lambda r, d: one_node(
        "GRU", [rnd(d, (4, 2, 3), r, -1, 1), Init(rnd(d, (2, 3 * 16, 3), r, -0.5, 0.5)),
                Init(rnd(d, (2, 3 * 16, 16), r, -0.5, 0.5)), Init(rnd(d, (2, 6 * 16), r, -0.5, 0.5)), None,
                rnd(d, (2, 2, 16), r, -1, 1)], {"hidden_size": 16, "linear_before_reset": 1,
                                                "direction": "bidirectional"}, n_out=2))
    add("GRU", "states", ("float32",), lambda r, d: one_node(
        "GRU", [rnd(d, (4, 2, 3), r, -1, 1), rnd(d, (1, 15, 3), r, -0.5, 0.5), rnd(d, (1, 15, 5), r, -0.5, 0.5),
                None, None, rnd(d, (1, 2, 5), r, -1, 1)], {"hidden_size": 5}, n_out=2))
    # sequence_lens shorter than the sequence (rows past their length keep their state, Y zero): at run time
    # through the packed LSTM and GRU, a constant through the plain loops (weights at run time)
    add("LSTM", "const_weights_seq_lens", ("float32",), lambda r, d: one_node(
        "LSTM", [rnd(d, (5, 3, 3), r, -1, 1), Init(rnd(d, (1, 4 * 21, 3), r, -0.5, 0.5)),
                 Init(rnd(d, (1, 4 * 21, 21), r, -0.5, 0.5)), Init(rnd(d, (1, 8 * 21), r, -0.5, 0.5)),
                 np.array([5, 2, 1], np.int32), rnd(d, (1, 3, 21), r, -1, 1), rnd(d, (1, 3, 21), r, -1, 1)],
        {"hidden_size": 21}, n_out=3))
    add("LSTM", "seq_lens", ("float32",), lambda r, d: one_node(
        "LSTM", [rnd(d, (4, 2, 3), r, -1, 1), rnd(d, (1, 20, 3), r, -0.5, 0.5), rnd(d, (1, 20, 5), r, -0.5, 0.5),
                 rnd(d, (1, 40), r, -0.5, 0.5), Init(np.array([3, 1], np.int32))], {"hidden_size": 5}, n_out=3))
    add("GRU", "const_linear_before_reset_seq_lens", ("float32",), lambda r, d: one_node(
        "GRU", [rnd(d, (5, 3, 4), r, -1, 1), Init(rnd(d, (1, 3 * 17, 4), r, -0.5, 0.5)),
                Init(rnd(d, (1, 3 * 17, 17), r, -0.5, 0.5)), Init(rnd(d, (1, 6 * 17), r, -0.5, 0.5)),
                np.array([2, 5, 1], np.int32), rnd(d, (1, 3, 17), r, -1, 1)],
        {"hidden_size": 17, "linear_before_reset": 1}, n_out=2))
    add("GRU", "seq_lens", ("float32",), lambda r, d: one_node(
        "GRU", [rnd(d, (4, 2, 3), r, -1, 1), rnd(d, (1, 15, 3), r, -0.5, 0.5), rnd(d, (1, 15, 5), r, -0.5, 0.5),
                None, Init(np.array([1, 3], np.int32))], {"hidden_size": 5}, n_out=2))
    add("LpPool", "k2_p2", ("float32",), lambda r, d: one_node("LpPool", [rnd(d, (1, 2, 5, 6), r)],
                                                              {"kernel_shape": [2, 2], "p": 2}))
    add("NonZero", "2d", ("float32", "int32"), lambda r, d: one_node(
        "NonZero", [np.where(r.random((4, 5)) < 0.5, 0, rnd(d, (4, 5), r, 1, 5)).astype(gdtype(d).np)]))
    add("Compress", "axis0", ("float32",), lambda r, d: one_node(
        "Compress", [rnd(d, (4, 3), r), Init(np.array([True, False, True, True]))], {"axis": 0}))
    add("Unique", "sorted", ("float32", "int64"), lambda r, d: one_node(
        "Unique", [rnd(d, (9,), r, 0, 4).round().astype(gdtype(d).np)], {"sorted": 1}, n_out=4))
    add("Det", "batched", ("float32",), lambda r, d: one_node("Det", [rnd(d, (2, 3, 3), r)]))
    for op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
        add(op, "size10", ("float32",), lambda r, d, op=op: one_node(op, [_c(10)]))
    add("DynamicQuantizeLinear", "default", ("float32",), lambda r, d: one_node(
        "DynamicQuantizeLinear", [rnd(d, (3, 4), r)], n_out=3))
    add("QLinearConv", "uint8", ("uint8",), lambda r, d: one_node(
        "QLinearConv", [rnd(d, (1, 2, 5, 5), r, 0, 255), _c(0.02, "float32"), _c(120, "uint8"),
                        rnd(d, (3, 2, 3, 3), r, 0, 255), _c(0.03, "float32"), _c(128, "uint8"),
                        _c(0.5, "float32"), _c(100, "uint8")]))
    add("NegativeLogLikelihoodLoss", "mean", ("float32",), lambda r, d: one_node(
        "NegativeLogLikelihoodLoss", [rnd(d, (3, 5), r), r.integers(0, 5, (3,))], {"reduction": "mean"}))
    add("SoftmaxCrossEntropyLoss", "mean", ("float32",), lambda r, d: one_node(
        "SoftmaxCrossEntropyLoss", [rnd(d, (3, 5), r), r.integers(0, 5, (3,))], {"reduction": "mean"}))
    add("CenterCropPad", "crop_pad", ("float32",), lambda r, d: one_node(
        "CenterCropPad", [rnd(d, (5, 4), r), _c([3, 6])]))
    add("MaxUnpool", "k2s2", ("float32",), lambda r, d: one_node(
        "MaxUnpool", [rnd(d, (1, 1, 2, 2), r), _c([[[[5, 2], [8, 15]]]])], {"kernel_shape": [2, 2],
                                                                              "strides": [2, 2]}))
    add("Col2Im", "2x2", ("float32",), lambda r, d: one_node(
        "Col2Im", [rnd(d, (1, 4, 9), r), _c([4, 4]), _c([2, 2])]))
    add("GridSample", "bilinear", ("float32",), lambda r, d: one_node(
        "GridSample", [rnd(d, (1, 2, 4, 5), r), rnd(d, (1, 3, 3, 2), r, -1, 1)], {"align_corners": 1}))
    add("AffineGrid", "2d", ("float32",), lambda r, d: one_node(
        "AffineGrid", [rnd(d, (2, 2, 3), r, -1, 1), _c([2, 1, 3, 4])], {"align_corners": 1}))
    add("DFT", "real_onesided", ("float32",), lambda r, d: one_node(
        "DFT", [rnd(d, (2, 8, 1), r), None, _c(1)], {"onesided": 1}, opset=20))
    # dft_length beyond the axis (the signal zero-padded: the lowering's pad lacked `interior`, found by glowc fuzz's
    # DFT family) and short of it (the signal cut), on a complex input and along the first axis
    add("DFT", "zero_padded", ("float32",), lambda r, d: one_node(
        "DFT", [rnd(d, (2, 5, 2), r), _c(8), _c(1)], opset=20))
    add("DFT", "empty_axis", ("float32",), lambda r, d: one_node(  # an empty spectrum (found by glowc fuzz)
        "DFT", [rnd(d, (1, 2, 0, 1), r)], opset=20))
    add("DFT", "truncated_axis0_inverse", ("float32",), lambda r, d: one_node(
        "DFT", [rnd(d, (6, 3, 1), r), _c(4), _c(0)], {"inverse": 1}, opset=20))
    add("RoiAlign", "avg", ("float32",), lambda r, d: one_node(
        "RoiAlign", [rnd(d, (1, 2, 6, 6), r), Init(np.array([[0, 0, 4, 4], [1, 1, 5, 3]], np.float32)),
                     Init(np.array([0, 0], np.int64))], {"output_height": 2, "output_width": 2, "sampling_ratio": 2}))
    add("NonMaxSuppression", "center", ("float32",), lambda r, d: one_node(
        "NonMaxSuppression", [Init(np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 5, 1, 6]]], np.float32)),
                              Init(np.array([[[0.9, 0.8, 0.7]]], np.float32)), _c([2]), _c([0.5], "float32")]))
    add("Constant", "tensor", ("float32",), lambda r, d: one_node(
        "Constant", [], {"value": _tensor(rnd(d, (2, 3), r))}))
    # special values (NaN, +-inf, +-0, denormals) into accumulations, windows, reductions and arg-max/min; sums
    # and products get no finite extremes (acc_specials): whether max*2 - max*2 overflows depends on the order of
    # the sum and on FMA contraction, which IEEE leaves to the implementation (inf and NaN are both right)
    sp = lambda d, shape, r: sprinkle(rnd(d, shape, r), r, 0.08)  # noqa: E731
    acc = lambda d, shape, r: sprinkle(rnd(d, shape, r), r, 0.08, acc_specials(d))  # noqa: E731
    add("MatMul", "specials", F, lambda r, d: one_node("MatMul", [acc(d, (6, 9), r), acc(d, (9, 5), r)]))
    add("Gemm", "specials", F, lambda r, d: one_node("Gemm", [acc(d, (4, 7), r), acc(d, (7, 3), r),
                                                              acc(d, (3,), r)]))
    add("Conv", "specials", F, lambda r, d: one_node("Conv", [acc(d, (1, 2, 6, 6), r), acc(d, (3, 2, 3, 3), r)],
                                                     {"pads": [1, 1, 1, 1]}))
    for op, vals in (("MaxPool", sp), ("AveragePool", acc)):  # NaN in pooling is left open by ONNX: SPEC_ORACLES
        add(op, "specials", F, lambda r, d, op=op, vals=vals: one_node(op, [vals(d, (1, 2, 7, 7), r)],
                                                                       {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}))
    for op, vals in (("GlobalMaxPool", sp), ("GlobalAveragePool", acc)):
        add(op, "specials", F, lambda r, d, op=op, vals=vals: one_node(op, [vals(d, (2, 3, 4, 5), r)]))
    for op, vals in (("ReduceSum", acc), ("ReduceMax", sp), ("ReduceMin", sp), ("ReduceMean", acc)):
        add(op, "specials", F, lambda r, d, op=op, vals=vals: one_node(op, [vals(d, (3, 4, 5), r), _c([1])]))
    for op in ("ArgMax", "ArgMin"):
        add(op, "specials", F, lambda r, d, op=op: one_node(op, [sp(d, (3, 4, 5), r)], {"axis": 1}))
    add("Softmax", "specials", F, lambda r, d: one_node("Softmax", [sp(d, (3, 7), r)], {"axis": -1}))
    # the CPU backend's whole softmax: rows below, at and across its 16 max/sum lanes, specials sprinkled; its
    # vectorized erf (glow_erff) across vector tails over both of its ranges (|x| below and above 0.921875)
    for n in SOFTMAX_TAILS:
        add("Softmax", f"last_axis_{n}_specials", ("float32",), lambda r, d, n=n: one_node(
            "Softmax", [sprinkle(rnd(d, (5, n), r, -20, 20), r, 0.04)], {"axis": -1}))
        add("Erf", f"length_{n}", F, lambda r, d, n=n: one_node("Erf", [rnd(d, (n,), r, -4.5, 4.5)]))
    # indices given at run time, negative ones included (ONNX counts them from the end)
    add("Gather", "runtime_negative_indices", ("float32", "int8"), lambda r, d: one_node(
        "Gather", [rnd(d, (5, 3), r), np.array([-5, -1, 0, 4, -3], np.int64)], {"axis": 0}))
    add("Gather", "runtime_negative_indices_axis1_int32", ("float32",), lambda r, d: one_node(
        "Gather", [rnd(d, (2, 6, 3), r), np.array([[-6, 5], [-1, 0]], np.int32)], {"axis": 1}))
    add("GatherND", "runtime_negative_indices", ("float32",), lambda r, d: one_node(
        "GatherND", [rnd(d, (3, 4, 2), r), np.array([[-1, -4], [2, -1], [0, 3]], np.int64)]))
    add("GatherElements", "runtime_negative_indices", ("float32",), lambda r, d: one_node(
        "GatherElements", [rnd(d, (3, 4), r), np.array([[-1, 0, 2, -3], [1, -2, -1, 0]], np.int64)], {"axis": 0}))
    add("ScatterElements", "runtime_negative_indices", ("float32",), lambda r, d: one_node(
        "ScatterElements", [rnd(d, (3, 5), r), np.array([[-1, 3], [0, -5], [2, -2]], np.int64), rnd(d, (3, 2), r)],
        {"axis": 1}))
    return S


def _tensor(a):
    from onnx import numpy_helper
    return numpy_helper.from_array(a, "value")


QUANT = {"QuantizeLinear", "DequantizeLinear", "QLinearMatMul", "MatMulInteger", "ConvInteger", "QLinearConv",
         "DynamicQuantizeLinear"}


def _lrn_oracle(feeds, size=3, alpha=1e-4, beta=0.75, bias=1.0):
    """LRN by its ONNX definition (onnx.reference's LRN disagrees with the spec's window/scale); attributes are
    float32 in the model, so their float32 values are the specification's."""
    x = feeds["x0"].astype(np.float64)
    alpha, beta, bias = (float(np.float32(v)) for v in (alpha, beta, bias))
    sq, C = x ** 2, x.shape[1]
    ss = np.zeros_like(x)
    for c in range(C):
        lo, hi = max(0, c - (size - 1) // 2), min(C - 1, c + (size - 1) - (size - 1) // 2)
        ss[:, c] = sq[:, lo:hi + 1].sum(1)
    return [(x / (bias + alpha / size * ss) ** beta).astype(feeds["x0"].dtype)]


def _lp_oracle(x, p):
    """LpNormalization over axis 1 by its definition in float64 (0 where the norm is 0), rounded once."""
    xf = x.astype(np.float64)
    norm = np.sum(np.abs(xf) ** p, axis=1, keepdims=True) ** (1.0 / p)
    return np.where(norm == 0, 0.0, xf / np.where(norm == 0, 1.0, norm)).astype(x.dtype)


def _pool_oracle(kind):
    """Pooling (3x3 window, pads 1) by the primitive's contract, which propagates NaN (ONNX leaves it open;
    onnx.reference's float64 pooling skips NaN)."""
    from . import oracles as O

    def oracle(feeds):
        x = feeds["x0"]
        fn = O.max_pool if kind == "max" else O.avg_pool
        return [fn(x, [3, 3], [1, 1], [1, 1], [1, 1, 1, 1])[0]]
    return oracle


def _softmax_oracle(axis):
    """Softmax by its definition in float64, rounded once to the input's dtype (onnx.reference computes float16
    in float16 arithmetic, several ULP from the exact value an accurate device kernel returns)."""
    def oracle(feeds):
        x = feeds["x0"]
        xf = x.astype(np.float64)
        with np.errstate(all="ignore"):
            e = np.exp(xf - xf.max(axis=axis, keepdims=True))
            return [(e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)]
    return oracle


#: Row lengths of the softmax and erf cases across the CPU kernels' vector widths (8, 16 lanes) and tails.
SOFTMAX_TAILS = (15, 16, 17, 32, 33, 49, 197)
SPEC_ORACLES = {("MaxPool", "specials"): _pool_oracle("max"), ("AveragePool", "specials"): _pool_oracle("avg"),
                ("Softmax", "specials"): _softmax_oracle(-1),
                **{("Softmax", f"last_axis_{n}_specials"): _softmax_oracle(-1) for n in SOFTMAX_TAILS},
                **{("Erf", f"length_{n}"): _erf for n in SOFTMAX_TAILS},
                **{("Softmax", f"axis{a}"): _softmax_oracle(a) for a in (-1, 0, 1)},
                # onnx.reference's LSTM / GRU ignore sequence_lens; onnxruntime applies it
                **{k: ONNXRUNTIME for k in (("LSTM", "const_weights_seq_lens"), ("LSTM", "seq_lens"),
                                            ("GRU", "const_linear_before_reset_seq_lens"), ("GRU", "seq_lens"))},
                # onnx.reference's DFT refuses an empty signal axis (numpy's fft: 0 points); onnxruntime's is empty
                ("DFT", "empty_axis"): ONNXRUNTIME,
                # round(x / scale) + zero point with the division in the float32 scale's type
                ("QuantizeLinear", "float32_scale"): lambda f: [np.clip(np.round(
                    f["x0"].astype(np.float32) / np.float32(0.031087851)) + 1, 0, 255).astype(np.uint8)],
                # onnx.reference's ArgMax / ArgMin call numpy's, which refuses an empty axis even for an empty output
                **{(op, "empty_axis_empty_output"): ONNXRUNTIME for op in ("ArgMax", "ArgMin")}}


def structured_cases():
    from .cases import profiles_for
    out = [model_case(f"ops/LRN/{dt}/size3", "ops", "LRN", dt,
                      lambda r, dt=dt: one_node("LRN", [rnd(dt, (1, 5, 4, 4), r)], {"size": 3}), op_class("LRN"),
                      oracle=_lrn_oracle) for dt in ("float32", "float64")]
    # glowc fuzz --backend cpu (minimal model): an empty batch (the lowering divided by N * C)
    out.append(model_case("ops/LRN/float16/fuzz_empty_batch", "ops", "LRN", "float16",
                          lambda r: one_node("LRN", [rnd("float16", (0, 1, 1, 1), r)], {"size": 1}), op_class("LRN"),
                          oracle=_lrn_oracle))
    out += [model_case(f"ops/GlobalLpPool/{dt}/p{p}", "ops", "GlobalLpPool", dt,
                       lambda r, dt=dt, p=p: one_node("GlobalLpPool", [rnd(dt, (2, 3, 4, 5), r)], {"p": p}),
                       op_class("GlobalLpPool"),
                       oracle=lambda f, p=p: [(np.sum(np.abs(f["x0"].astype(np.float64)) ** p, axis=(2, 3),
                                                      keepdims=True) ** (1.0 / p)).astype(f["x0"].dtype)])
            for dt in ("float32", "float64") for p in (1, 2, 3)]
    # glowc fuzz --against onnxruntime (minimal model: a float16 6e-8 normalized to 0): rows whose squares (p=2) or
    # sums (p=1) leave the type's range (float16 subnormals and 12000s, float32 1e-25 and 1e25); by the definition
    # in float64, rounded once
    out += [model_case(f"ops/LpNormalization/{dt}/fuzz_range_p{p}", "ops", "LpNormalization", dt,
                       lambda r, dt=dt, sc=sc, p=p: one_node("LpNormalization", [(
                           rnd("float32", (len(sc), 3), r) * np.float32(sc)[:, None]).astype(dt)], {"axis": 1, "p": p}),
                       op_class("LpNormalization"), oracle=lambda f, p=p: [_lp_oracle(f["x0"], p)])
            for dt, sc in (("float16", (6e-8, 1e-4, 1, 3000, 12000)), ("float32", (1e-25, 1, 1e25, 3e37)))
            for p in (1, 2)]
    # ReduceL2 of rows whose squares leave float32's range while their norm does not (1e-25, 1e25): by the
    # definition in float64, rounded once (squaring in float32 gives 0 and inf)
    out.append(model_case("ops/ReduceL2/float32/range", "ops", "ReduceL2", "float32",
                          lambda r: one_node("ReduceL2", [rnd("float32", (4, 3), r) * np.float32(
                              (1e-25, 1, 1e25, 3e37))[:, None], _c([1])], {"keepdims": 0}), op_class("ReduceL2"),
                          oracle=lambda f: [np.sqrt(np.sum(f["x0"].astype(np.float64) ** 2, axis=1)).astype(
                              np.float32)]))
    # glowc fuzz --against onnxruntime (minimal model): a negative step from a start below -n clamps the start to
    # 0 (the specification; onnxruntime agrees), where Python's slices (and onnx.reference) give nothing
    out.append(model_case("ops/Slice/float32/fuzz_negative_step_start_below_range", "ops", "Slice", "float32",
                          lambda r: one_node("Slice", [rnd("float32", (3, 2), r), _c([-5]), _c([-4]), _c([0]),
                                                       _c([-1])]), op_class("Slice"),
                          oracle=lambda f: [f["x0"][0:1]]))
    for op, variant, dts, fn in _structured():
        for dt in dts:
            prof = profiles_for(dt, quantized=op in QUANT)
            out.append(model_case(f"ops/{op}/{dt}/{variant}", "ops", op, dt, lambda r, fn=fn, dt=dt: fn(r, dt),
                                  VARIANT_CLASS.get((op, variant), op_class(op)), profiles=prof,
                                  oracle=SPEC_ORACLES.get((op, variant))))
    for op, variant, dts, fn, oracle, magnitude in ops_onnxruntime.cases():
        for dt in dts:
            out.append(model_case(f"ops/{op}/{dt}/{variant}", "ops", op, dt, lambda r, fn=fn, dt=dt: fn(r, dt),
                                  op_class(op), oracle=oracle, magnitude=magnitude))
    return out


def custom_cases():
    """The cases of every registered custom op (``glow_core.ops.custom_op``), from its record: one per case line
    and accepted dtype, in a one-node model of the op's domain. The expectation is the record's reference run
    directly on the inputs (the op's specification; on the interpreter this checks the pipeline around it)."""
    out = []
    for d in custom_ops():
        for variant, shapes, attrs in d.cases:
            full = {**d.attrs, **attrs}
            for dt in d.dtypes:
                def build(rng, d=d, dt=dt, shapes=shapes, attrs=attrs, full=full):
                    operands = [rnd(dt, s, rng) for s in shapes]
                    n_out = len(d.run(operands, full))
                    return one_node(d.name, operands, attrs, n_out=n_out, domain=d.domain)

                def oracle(feeds, d=d, full=full, n=len(shapes)):
                    return d.run([feeds[f"x{i}"] for i in range(n)], full)
                out.append(model_case(f"ops/{d.name}/{dt}/{variant}", "ops", d.name, dt, build, "op",
                                      oracle=oracle, info={"domain": d.domain}))
    return out


def covered() -> set[str]:
    return (set(UNARY) | set(BINARY) | {s[0] for s in _structured()} | {"LRN", "GlobalLpPool"}
            | {d.name for d in custom_ops()} | {c[0] for c in ops_onnxruntime.cases()})


def uncovered() -> list[str]:
    """ONNX ops the importer accepts that this tier does not exercise yet."""
    return sorted(set(OPS) - covered())


def cases():
    return unary_cases() + binary_cases() + structured_cases() + custom_cases()
