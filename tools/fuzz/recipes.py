"""Op recipes for the graph generator, as data: for each ONNX op (or op family) which dtypes it is drawn
with, which family builder picks its operands (``generator.FAMILIES``), the attribute choices, the input
domain, and two flags:

- ``exact``: with exact operands the op's result is bit-identical on every correct implementation (data
  movement, Abs, Max, integer arithmetic, ...). Float arithmetic is not exact (rounding, FMA contraction,
  reassociation are allowed within the conformance tolerance).
- ``needs_exact``: the op is discontinuous in its float operands (Floor, comparisons, ArgMax, casts to
  integers, ...) or has a domain edge or pole (Log, Sqrt, Acosh, Pow, Tan, ...: a value that cancels to about
  0 or 1 gives NaN or a number depending on its last bit): a 1-ULP difference upstream changes the result by
  a whole step, so its float operands are drawn only from exact values (graph inputs, data movement) and
  never from inexact arithmetic.

- ``finite``: the op accumulates many terms (convolution, matrix products, sums): with NaN, infinities or
  values near the largest float among them, the result depends on the order of accumulation (overflow,
  absorption, inf - inf), which no tolerance captures; its operands never carry special values.

Attribute choices are lists (one is drawn; ``OMIT`` leaves the attribute at its default) or callables
``f(rng, shape)`` for values that depend on the operand's shape. Ops without a recipe here are drawn with
``generic`` (operands from ONNX's schema, no attributes); ops that cannot be drawn say why in ``SKIP``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

OMIT = object()
F = ("float32", "float16", "float64")
FB = F + ("bfloat16",)
I = ("int32", "int64", "int8", "uint8")
SI = ("int32", "int64", "int8")
ALL = F + I + ("bool",)


@dataclass(frozen=True)
class Recipe:
    family: str
    dtypes: tuple = F
    attrs: dict = field(default_factory=dict)
    domain: tuple = (-4.0, 4.0)  # range of fresh float inputs (integers: clipped to the dtype)
    exact: bool = False
    needs_exact: bool = False
    finite: bool = False  # accumulates many terms: operands without special values (see the module doc)
    params: dict = field(default_factory=dict)  # family-specific knobs


def R(family, dtypes=F, attrs=None, domain=(-4.0, 4.0), exact=False, needs_exact=False, finite=False, **params):
    return Recipe(family, tuple(dtypes), dict(attrs or {}), domain, exact, needs_exact, finite, params)


def _axis(rng, shape):
    return int(rng.integers(-len(shape), len(shape))) if shape else 0


def _axis_or_omit(rng, shape):
    return OMIT if rng.random() < 0.3 or not shape else _axis(rng, shape)


UNARY = {
    "Abs": R("unary", F + SI, exact=True), "Neg": R("unary", F + SI, exact=True),
    "Exp": R("unary"), "Log": R("unary", domain=(0.01, 20), needs_exact=True),
    "Sqrt": R("unary", domain=(0, 20), needs_exact=True),
    "Reciprocal": R("unary", domain=(0.1, 5), needs_exact=True), "Sin": R("unary"), "Cos": R("unary"),
    "Tan": R("unary", domain=(-1.2, 1.2), needs_exact=True), "Asin": R("unary", domain=(-1, 1), needs_exact=True),
    "Acos": R("unary", domain=(-1, 1), needs_exact=True),
    "Atan": R("unary"), "Sinh": R("unary"), "Cosh": R("unary"), "Asinh": R("unary"),
    "Acosh": R("unary", domain=(1, 6), needs_exact=True), "Atanh": R("unary", domain=(-0.99, 0.99), needs_exact=True),
    "Tanh": R("unary"),
    "Sigmoid": R("unary"), "Erf": R("unary"),
    "Floor": R("unary", needs_exact=True), "Ceil": R("unary", needs_exact=True),
    "Round": R("unary", needs_exact=True), "Sign": R("unary", F + SI, needs_exact=True),
    "Relu": R("unary", F + ("int32", "int8"), exact=True),
    "LeakyRelu": R("unary", attrs={"alpha": [OMIT, 0.1, 0.5]}),
    "Elu": R("unary", attrs={"alpha": [OMIT, 0.5]}), "Selu": R("unary"), "Celu": R("unary", ("float32",)),
    "Softplus": R("unary"), "Softsign": R("unary"), "HardSigmoid": R("unary", attrs={"alpha": [OMIT, 0.3]}),
    "HardSwish": R("unary", F[:2]), "Mish": R("unary"), "Gelu": R("unary", attrs={"approximate": [OMIT, "tanh"]}),
    "ThresholdedRelu": R("unary", attrs={"alpha": [OMIT, 0.5]}, needs_exact=True),
    "Shrink": R("unary", attrs={"lambd": [OMIT, 0.8], "bias": [OMIT, 0.2]}, needs_exact=True),
    "IsNaN": R("unary", exact=True), "IsInf": R("unary", exact=True, attrs={"detect_negative": [OMIT, 0]}),
    "Not": R("unary", ("bool",), exact=True), "BitwiseNot": R("unary", I, exact=True),
    "Identity": R("unary", ALL, exact=True), "Swish": R("unary", attrs={"alpha": [OMIT, 0.7]}),
    "Dropout": R("unary", attrs={"seed": [OMIT]}, exact=True),
}
BINARY = {
    "Add": R("binary", F + I), "Sub": R("binary", F + I), "Mul": R("binary", F + I),
    "Div": R("binary", F + ("int32", "int64"), nonzero_rhs=True),
    "Pow": R("binary", ("float32", "float64"), domain=(0.1, 3), needs_exact=True),
    "Mod": R("binary", ("int32", "int64") + F, attrs={"fmod": [0, 1]}, needs_exact=True,
             nonzero_rhs=True),
    "PRelu": R("binary", F, unidirectional=True),
    "And": R("binary", ("bool",), exact=True), "Or": R("binary", ("bool",), exact=True),
    "Xor": R("binary", ("bool",), exact=True),
    "BitwiseAnd": R("binary", I, exact=True), "BitwiseOr": R("binary", I, exact=True),
    "BitwiseXor": R("binary", I, exact=True),
    "BitShift": R("binary", ("uint8", "uint32", "uint64"), attrs={"direction": ["LEFT", "RIGHT"]}, exact=True,
                  shift=True),
    "Equal": R("binary", F + I + ("bool",), exact=True, needs_exact=True),
    "Greater": R("binary", F + I, exact=True, needs_exact=True),
    "Less": R("binary", F + I, exact=True, needs_exact=True),
    "GreaterOrEqual": R("binary", F + I, exact=True, needs_exact=True),
    "LessOrEqual": R("binary", F + I, exact=True, needs_exact=True),
    "Max": R("variadic", F + I, exact=True), "Min": R("variadic", F + I, exact=True),
    "Sum": R("variadic", F), "Mean": R("variadic", F),
    "Where": R("where", ALL, exact=True), "Clip": R("clip", F + SI, exact=True),
}
REDUCE = {op: R("reduce", F, attrs={"keepdims": [OMIT, 0, 1], "noop_with_empty_axes": [OMIT, 0, 1]},
                exact=op in ("ReduceMax", "ReduceMin"), finite=op not in ("ReduceMax", "ReduceMin"))
          for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                     "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")}
REDUCE["ReduceSum"] = R("reduce", F + ("int32", "int64"), attrs=REDUCE["ReduceSum"].attrs, finite=True)
REDUCE["ReduceMax"] = R("reduce", F + I, attrs=REDUCE["ReduceMax"].attrs, exact=True)
REDUCE["ReduceMin"] = R("reduce", F + I, attrs=REDUCE["ReduceMin"].attrs, exact=True)
REDUCE["ReduceLogSum"] = R("reduce", F, attrs=REDUCE["ReduceLogSum"].attrs, domain=(0.1, 4), finite=True,
                         needs_exact=True)
REDUCE.update({
    "ArgMax": R("axis", F + I, attrs={"axis": _axis_or_omit, "keepdims": [OMIT, 0], "select_last_index": [OMIT, 1]},
                exact=True, needs_exact=True),
    "ArgMin": R("axis", F + I, attrs={"axis": _axis_or_omit, "keepdims": [OMIT, 0], "select_last_index": [OMIT, 1]},
                exact=True, needs_exact=True),
    "Softmax": R("axis", F, attrs={"axis": _axis_or_omit}, finite=True),
    "LogSoftmax": R("axis", F, attrs={"axis": _axis_or_omit}, finite=True),
    "Hardmax": R("axis", F, attrs={"axis": _axis_or_omit}, exact=True, needs_exact=True),
    "CumSum": R("cumsum", F + ("int32", "int64"), attrs={"exclusive": [OMIT, 1], "reverse": [OMIT, 1]}, finite=True),
    "CumProd": R("cumsum", F + ("int32", "int64"), attrs={"exclusive": [OMIT, 1], "reverse": [OMIT, 1]},
                 domain=(0.5, 1.5), finite=True),
    "LpNormalization": R("axis", F, attrs={"axis": _axis_or_omit, "p": [OMIT, 1, 2]}, min_rank=1, finite=True),
    "TopK": R("topk", F + ("int32", "int64"), attrs={"largest": [OMIT, 0], "sorted": [OMIT, 1]}, exact=True,
              needs_exact=True),
})
MOVEMENT = {
    "Transpose": R("transpose", ALL, exact=True), "Reshape": R("reshape", ALL, exact=True),
    "Flatten": R("axis", ALL, attrs={"axis": lambda rng, s: int(rng.integers(-len(s), len(s) + 1)) if s else 0},
                 exact=True),
    "Squeeze": R("squeeze", ALL, exact=True), "Unsqueeze": R("unsqueeze", ALL, exact=True),
    "Slice": R("slice", ALL, exact=True), "Expand": R("expand", ALL, exact=True),
    "Concat": R("concat", ALL, exact=True), "Split": R("split", ALL, exact=True), "Tile": R("tile", ALL, exact=True),
    "Pad": R("pad", F + I, exact=True, modes=(None, "constant", "reflect", "edge", "wrap")),
    "Gather": R("gather", ALL, exact=True), "GatherElements": R("gather_elements", ALL, exact=True),
    "GatherND": R("gather_nd", ALL, exact=True),
    "ScatterElements": R("scatter_elements", F + I, attrs={"reduction": [OMIT, "add", "max", "min", "mul"]}),
    "ScatterND": R("scatter_nd", F + I, attrs={"reduction": [OMIT, "add", "max", "min", "mul"]}),
    "DepthToSpace": R("depth_to_space", ALL, attrs={"mode": [OMIT, "CRD"]}, exact=True),
    "SpaceToDepth": R("space_to_depth", ALL, exact=True),
    "Shape": R("shape", ALL, exact=True), "Size": R("unary", ALL, exact=True),
    "Trilu": R("trilu", ALL, attrs={"upper": [OMIT, 0]}, exact=True),
    "Cast": R("cast", F + I + ("bool",), exact=True, needs_exact=True),
    "CastLike": R("castlike", F + I + ("bool",), exact=True, needs_exact=True),
    "ReverseSequence": R("reverse_sequence", ALL, exact=True),
    "Compress": R("compress", ALL, exact=True), "EyeLike": R("unary", F + I, exact=True, min_rank=2, max_rank=2),
    "ConstantOfShape": R("constant_of_shape", F + I, exact=True), "Range": R("range", ("float32", "int32", "int64"),
                                                                               exact=True),
    "OneHot": R("onehot", F + ("int32", "int64"), exact=True), "CenterCropPad": R("center_crop_pad", ALL, exact=True),
    "NonZero": R("unary", F + I + ("bool",), exact=True, needs_exact=True),
    "Unique": R("unique", ("float32", "int64"), exact=True, needs_exact=True),
}
NN = {
    # half the convs from families.conv_paths: constant filters and the CPU conv engine's geometries
    "Conv": R("conv", F, finite=True, paths=0.5),
    "ConvTranspose": R("conv_transpose", ("float32", "float64"), finite=True),
    "MaxPool": R("pool", F + ("int8", "uint8"), exact=True), "AveragePool": R("pool", F, finite=True),
    "LpPool": R("pool", F, attrs={"p": [OMIT, 1, 3]}, finite=True),
    "GlobalAveragePool": R("unary", F, min_rank=3, finite=True),
    "GlobalMaxPool": R("unary", F, min_rank=3, exact=True),
    "GlobalLpPool": R("unary", F, min_rank=3, attrs={"p": [OMIT, 1]}, finite=True),
    "MatMul": R("matmul", F + ("int32", "int64"), finite=True), "Gemm": R("gemm", F, finite=True),
    "Einsum": R("einsum", F, finite=True), "Det": R("generic", F, finite=True),
    "BatchNormalization": R("batchnorm", F, attrs={"epsilon": [OMIT, 1e-3]}, finite=True),
    "InstanceNormalization": R("channel_norm", F, finite=True),
    "GroupNormalization": R("channel_norm", F, finite=True),
    "LayerNormalization": R("layernorm", F, attrs={"epsilon": [OMIT, 1e-3]}, finite=True),
    "RMSNormalization": R("layernorm", F, finite=True), "MeanVarianceNormalization": R("mvn", F, finite=True),
    "DFT": R("dft", F, finite=True),
    # drawn at opset 25 at most: onnxruntime 1.32 has no kernel for their version 28 (a graph holding one would
    # never be compared against it)
    # rounding x / scale (or, dynamic, -min / scale) is discontinuous: exact operands only (needs_exact)
    "QuantizeLinear": R("quantize", ("float32", "float16"), needs_exact=True, max_opset=25),
    "DynamicQuantizeLinear": R("generic", ("float32",), needs_exact=True),
    "DequantizeLinear": R("quantize", ("int8", "uint8", "int32"), max_opset=25),
    "LRN": R("lrn", F, attrs={"alpha": [OMIT, 1e-3], "beta": [OMIT, 0.5], "bias": [OMIT, 2.0]}, finite=True),
}

RECIPES: dict[str, Recipe] = {**UNARY, **BINARY, **REDUCE, **MOVEMENT, **NN}

#: Ops the generator does not draw, with the reason (everything else in glow_core.ops.registry.OPS is drawn,
#: by its recipe or by ``generic``).
SKIP = {
    "If": "needs subgraph attributes (covered by the conformance suite's control-flow cases)",
    "Loop": "needs a subgraph body", "Scan": "needs a subgraph body",
    "Constant": "constants are drawn as initializers", "FlexAttention": "has no ONNX schema (custom op)",
    "OptionalGetElement": "takes optional-typed values, which the generator does not draw",
    "OptionalHasElement": "takes optional-typed values, which the generator does not draw",
    **dict.fromkeys(("SimplifiedLayerNormalization", "com.microsoft.MatMulNBits", "com.microsoft.GroupQueryAttention",
                     "com.microsoft.RotaryEmbedding", "com.microsoft.SkipSimplifiedLayerNormalization"),
                    "onnxruntime's op, no ONNX schema for the checker (its conformance cases: ops_onnxruntime)"),
}
