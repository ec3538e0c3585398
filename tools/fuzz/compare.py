"""Comparing a backend's outputs with the reference's, by the conformance suite's checker and tolerance table
(``glow_conformance.checker.compare``): family "op" for a one-node graph, "model" for a larger one.

Against onnxruntime, ``ORT_DIFFERENCES`` lists the semantic differences that are not reported: each entry
names the op and the condition on the inputs under which onnxruntime's answer may differ from the
specification's reference without either being wrong. ``ORT_OPERAND_DIFFERENCES`` does the same with a
condition on the op's own operands (as the reference computed them), where onnxruntime departs from the
specification (checked against numpy written from it).
"""
from __future__ import annotations

import numpy as np
import onnx

from glow_conformance.cases import CaseFailure
from glow_conformance.checker import compare

from .recipes import RECIPES

_NAN = "onnxruntime's comparisons skip NaN, where the specification's numpy reference propagates or selects it"
_OVERFLOW = ("overflow is left undefined by the specification; onnxruntime saturates or widens where the "
             "interpreter wraps (integers) or rounds to infinity (float16)")
_OVERFLOW16 = ("onnxruntime keeps float16 intermediates of chained arithmetic wider than float16: where the "
               "specification rounds an intermediate beyond 65504 to infinity (the interpreter), onnxruntime goes "
               "on with the exact value (Sub(x, Add(x, x)) of x = -65504 gives inf there, 65504 in onnxruntime)")
#: op -> (condition on the inputs, why onnxruntime's answer may differ from the specification's there): outputs
#: computed from such an op are not compared when the condition (or one of a tuple of them) holds ("nan": some
#: input holds NaN; "overflow": some input holds an integer extreme or a float beyond 1e4; "overflow16": some
#: float16 input holds a value beyond 1e4). Each entry comes from a finding of
#: ``glowc fuzz --backend interpreter --against onnxruntime`` that was checked by hand.
ORT_DIFFERENCES = {
    "Max": ("nan", _NAN), "Min": ("nan", _NAN), "ArgMax": ("nan", _NAN), "ArgMin": ("nan", _NAN),
    "MaxPool": ("nan", _NAN), "Hardmax": ("nan", _NAN), "GlobalMaxPool": ("nan", _NAN),
    "ReduceMax": ("nan", _NAN), "ReduceMin": ("nan", _NAN), "Sign": ("nan", _NAN + " (Sign(NaN) is 0 there, NaN in "
                                                                                  "ONNX's reference)"),
    "ReduceLogSumExp": ("overflow", "onnxruntime sums exp(x) without shifting by the maximum: infinity for an "
                                    "input near 710 (float64) where log(sum(exp(x))) is finite"),
    "ReduceSum": ("overflow", _OVERFLOW), "Gemm": ("overflow", _OVERFLOW), "MatMul": ("overflow", _OVERFLOW),
    "ScatterElements": ("nan", _NAN + " (reduction min/max)"), "ScatterND": ("nan", _NAN + " (reduction min/max)"),
    "DynamicQuantizeLinear": (("overflow", "nan"), "an infinite input makes the scale infinite, which the "
                              "specification leaves undefined (onnxruntime saturates, the interpreter gives 0); "
                              + _NAN + " (the range without NaN there, a NaN scale and zeros in the interpreter)"),
    "Add": ("overflow16", _OVERFLOW16), "Sub": ("overflow16", _OVERFLOW16), "Mul": ("overflow16", _OVERFLOW16),
    "Sum": ("overflow16", _OVERFLOW16),
    "QuantizeLinear": ("nan", "the specification leaves an integer quantization of NaN undefined (round(NaN) + "
                              "zero point is no integer: onnxruntime gives 0)"),
    "Clip": ("overflow", "with max omitted the specification's text clamps to the type's largest finite "
                         "value (onnxruntime) and its reference to infinity (the interpreter)"),
}


def _flat_slice_normalized(node, operands) -> bool:
    """Some slice over ``axes`` (default [0, 2, 3]) is flat: its spread is below 1/16 of its magnitude (the
    result is ill-conditioned in float32) or below 1e-6 (the specification's epsilon 1e-9 added to the
    standard deviation, which onnxruntime leaves out, decides it; a constant slice is 0 by the specification,
    0/0 = NaN in onnxruntime)."""
    x = operands[0]
    if x is None or not x.size:
        return False
    x = np.asarray(x, np.float64)
    axes = next((list(a.ints) for a in node.attribute if a.name == "axes"), [0, 2, 3])
    axes = tuple(a % x.ndim for a in axes if -x.ndim <= a < x.ndim)
    with np.errstate(all="ignore"):
        spread = np.max(x, axis=axes) - np.min(x, axis=axes)
        mag = np.max(np.abs(x), axis=axes)
    return bool(np.any(~(spread >= np.maximum(mag / 16, 1e-6))))


def _gelu_inexact(node, operands) -> bool:
    """Some operand element is below -1, where 1 + erf(x / sqrt 2) (or 1 + tanh(...)) cancels in float32; or a
    float64 operand of the tanh approximation, which onnxruntime computes to about float32 precision."""
    x = operands[0]
    if x is None:
        return False
    tanh = any(a.name == "approximate" and a.s == b"tanh" for a in node.attribute)
    return bool(np.any(np.asarray(x, np.float64) < -1)) or (tanh and np.asarray(x).dtype == np.float64)


def _zero_range(node, operands) -> bool:
    """max(x, 0) == min(x, 0): an input of zeros only (or no elements)."""
    x = operands[0]
    return x is not None and not np.any(np.asarray(x, np.float64))


def _empty_reduction(node, operands) -> bool:
    """The reduced input has no elements: each output element (if any) is a mean over an empty set."""
    x = operands[0]
    return x is not None and np.asarray(x).size == 0


def _float64(node, operands) -> bool:
    return operands[0] is not None and np.asarray(operands[0]).dtype == np.float64


#: op -> (condition on the node's operands, why onnxruntime's answer differs there): outputs computed from a
#: node of the op are not compared when the condition holds for its operand values. Each entry comes from a
#: finding of ``glowc fuzz --backend interpreter --against onnxruntime`` analysed against numpy of the spec.
ORT_OPERAND_DIFFERENCES = {
    "MeanVarianceNormalization": (_flat_slice_normalized, "onnxruntime divides by the standard deviation "
                                  "without the specification's epsilon (1e-9): a constant slice gives NaN (the "
                                  "specification 0), a nearly constant one infinities or a result of no correct "
                                  "digit in float32 (the interpreter follows the specification's function body)"),
    "DynamicQuantizeLinear": (_zero_range, "a zero range gives the scale 1/255 in ONNX's reference (and the "
                                           "interpreter), 1 in onnxruntime"),
    "Shrink": (_float64, "onnxruntime rounds a float64 Shrink's result to float32 (x + bias with bias 0 is x "
                         "exactly by the specification)"),
    "ReduceMean": (_empty_reduction, "the specification leaves a reduction over an empty set undefined for "
                                     "ReduceMean (its text: 'Reduction over an empty set of values yields "
                                     "undefined'): the kit gives NaN (0/0), onnxruntime 0"),
    "Gelu": (_gelu_inexact, "below -1 the specification's formula cancels (1 + erf(x/sqrt 2), 1 + tanh(...)) "
                            "in float32: the interpreter's and onnxruntime's answers both lose digits against "
                            "numpy of the formula in float64 (up to all of them below -5), differently; in "
                            "float64 onnxruntime's tanh approximation is off by ~1e-8 relative (Gelu(1) = "
                            "0.84119198579 where the formula gives 0.84119199061, as the interpreter does)"),
}


def holds(cond, held: set[str]) -> bool:
    """Whether an ``ORT_DIFFERENCES`` condition (one name, or a tuple of names any of which suffices) is in
    ``held``."""
    return any(c in held for c in ((cond,) if isinstance(cond, str) else cond))


def conditions(arrays) -> set[str]:
    """Which ``ORT_DIFFERENCES`` conditions hold for these input arrays."""
    out = set()
    for a in arrays:
        if not a.size:
            continue
        if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
            f = np.abs(a.astype(np.float64))
            if np.isnan(f).any():
                out.add("nan")
            if (f[~np.isnan(f)] > 1e4).any():
                out.add("overflow")
                if a.dtype == np.float16:
                    out.add("overflow16")
        elif a.dtype.kind in "iu":
            info = np.iinfo(a.dtype)
            if ((a == info.min) | (a == info.max)).any():
                out.add("overflow")
    return out


def family_of(model: onnx.ModelProto) -> str:
    return "op" if len(model.graph.node) == 1 else "model"


def mismatch(model: onnx.ModelProto, got: dict, want: dict, rerun: str = "") -> str | None:
    """None when every output of ``model`` matches, else the checker's message for the first that does not."""
    fam = family_of(model)
    ops = " -> ".join(n.op_type for n in model.graph.node[:12]) + (" ..." if len(model.graph.node) > 12 else "")
    for o in model.graph.output:
        if o.name not in got:
            return f"output {o.name} is missing from the backend's answer"
        if o.name not in want:
            continue
        try:
            with np.errstate(all="ignore"):
                compare(np.asarray(got[o.name]), np.asarray(want[o.name]), fam,
                        f"fuzz graph of {len(model.graph.node)} nodes ({ops})", rerun, name=f"output {o.name}")
        except CaseFailure as e:
            return str(e)
    return None


def depends_on(model: onnx.ModelProto, ops, nodes=frozenset()) -> set[str]:
    """Names of the values computed (transitively) from a node whose op is in ``ops`` or that is in ``nodes``
    (node output names)."""
    tainted: set[str] = set()
    for n in model.graph.node:
        if n.op_type in ops or (n.output and n.output[0] in nodes) or any(i in tainted for i in n.input):
            tainted.update(n.output)
    return tainted


def operand_differences(model: onnx.ModelProto, values: dict) -> set[str]:
    """First output names of the nodes whose ``ORT_OPERAND_DIFFERENCES`` condition, or ``ORT_DIFFERENCES``
    condition, holds on their own operands in ``values``."""
    out = set()
    for n in model.graph.node:
        operands = [values.get(i) for i in n.input]
        cond = ORT_OPERAND_DIFFERENCES.get(n.op_type)
        held = cond is not None and cond[0](n, operands)
        if not held and n.op_type in ORT_DIFFERENCES:
            held = holds(ORT_DIFFERENCES[n.op_type][0], conditions([np.asarray(a) for a in operands if a is not None]))
        if held and n.output:
            out.add(n.output[0])
    return out


# -- models the specification rejects, which onnxruntime accepts ----------------------------------------------
def _dims(shapes, node, i):
    return shapes.get(node.input[i]) if len(node.input) > i and node.input[i] else None


def _dft(node, shapes, attrs):
    for i, what in ((1, "dft_length"), (2, "axis")):
        s = _dims(shapes, node, i)
        if s is not None and len(s):
            return f"DFT {what} of shape {list(s)}: the specification takes a scalar"
    return None


def _quantize(node, shapes, attrs):
    x, s, z = _dims(shapes, node, 0), _dims(shapes, node, 1), _dims(shapes, node, 2)
    if x is None or s is None:
        return None
    if z is not None and list(z) != list(s):
        return f"{node.op_type} zero point of shape {list(z)} and scale of shape {list(s)}: must be equal"
    r, axis, bs = len(x), attrs.get("axis", 1), attrs.get("block_size", 0)
    if not s:
        return None  # per-tensor: the axis is unused
    if not -r <= axis < r and not (node.op_type == "QuantizeLinear" and r == 1):
        return f"{node.op_type} axis {axis} out of range for an input of rank {r} with a scale of shape {list(s)}"
    a = axis % r if r else 0
    if not bs:
        if len(s) != 1 or (s[0] != x[a] and not (node.op_type == "QuantizeLinear" and r == 1 and s[0] == x[0])):
            return (f"{node.op_type} scale of shape {list(s)} for an input {list(x)}, axis {axis}, no block_size: "
                    f"the specification takes a scalar or a 1-D scale of the axis' length")
        return None
    if len(s) != r or any(s[i] != x[i] for i in range(r) if i != a) or s[a] != -(-x[a] // bs):
        return f"{node.op_type} scale of shape {list(s)} does not block an input {list(x)} by {bs} on axis {axis}"
    return None


def _per_channel(node, shapes, attrs):
    x = _dims(shapes, node, 0)
    if x is None or len(x) < 2:
        return None
    for i in range(1, len(node.input)):
        s = _dims(shapes, node, i)
        if s is not None and list(s) != [x[1]]:
            return f"{node.op_type} input {i} of shape {list(s)} for {x[1]} channels: must be 1-D of the channel count"
    return None


def _scalar_or_1d(node, shapes, operands):
    """Why one of ``operands`` ((input index, name) pairs: QLinear* scales and zero points) is of rank above 1."""
    for i, what in operands:
        s = _dims(shapes, node, i)
        if s is not None and len(s) > 1:
            return f"{node.op_type} {what} of shape {list(s)}: the specification takes a scalar or a 1-D tensor"
    return None


def _qlinear_matmul(node, shapes, attrs):
    return _scalar_or_1d(node, shapes, ((1, "a_scale"), (2, "a_zero_point"), (4, "b_scale"), (5, "b_zero_point"),
                                        (6, "y_scale"), (7, "y_zero_point")))


def _qlinear_conv(node, shapes, attrs):
    why = _scalar_or_1d(node, shapes, ((1, "x_scale"), (2, "x_zero_point"), (4, "w_scale"), (5, "w_zero_point"),
                                       (6, "y_scale"), (7, "y_zero_point")))
    b = _dims(shapes, node, 8)
    if why is None and b is not None and len(b) != 1:
        return f"QLinearConv bias of shape {list(b)}: the specification takes a 1-D bias"
    return why


def _loss(node, shapes, attrs):
    x, t, w = _dims(shapes, node, 0), _dims(shapes, node, 1), _dims(shapes, node, 2)
    if x is not None and len(x) < 2:
        return f"{node.op_type} scores of shape {list(x)}: the specification takes (N, C) or (N, C, D1, ..., Dk)"
    if x is not None and t is not None and list(t) != [x[0]] + list(x[2:]):
        return f"{node.op_type} labels of shape {list(t)} for scores {list(x)}: must be (N, D1, ..., Dk)"
    if x is not None and w is not None and list(w) != [x[1]]:
        return f"{node.op_type} weights of shape {list(w)} for {x[1]} classes: must be 1-D of the class count"
    return None


def _matmul_integer(node, shapes, attrs):
    for i, zi, what in ((0, 2, "a_zero_point"), (1, 3, "b_zero_point")):
        x, z = _dims(shapes, node, i), _dims(shapes, node, zi)
        if x is not None and z is not None and len(z) > 1 and (len(z) != len(x) or len(x) < 2):
            return (f"MatMulInteger {what} of shape {list(z)} for an operand of shape {list(x)}: the specification "
                    f"takes a scalar, a 1-D tensor, or an N-D tensor of the operand's rank")
    return None


def _rotary(node, shapes, attrs):
    cos, sin, pos = _dims(shapes, node, 1), _dims(shapes, node, 2), _dims(shapes, node, 3)
    want = 2 if len(node.input) > 3 and node.input[3] else 3
    for what, s in (("cos_cache", cos), ("sin_cache", sin)):
        if s is not None and len(s) != want:
            return (f"RotaryEmbedding {what} of shape {list(s)}: the specification takes (max_position_id + 1, "
                    f"rotary_dim / 2) with position_ids, (batch, sequence, rotary_dim / 2) without")
    if pos is not None and len(pos) != 2:
        return f"RotaryEmbedding position_ids of shape {list(pos)}: the specification takes (batch, sequence)"
    return None


def _arg_empty(node, shapes, attrs):
    x = _dims(shapes, node, 0)
    if x is None or not x:
        return None
    a = attrs.get("axis", 0)
    if -len(x) <= a < len(x) and x[a] == 0 and all(d for i, d in enumerate(x) if i != a % len(x)):
        return (f"{node.op_type} over the empty axis {a} of an input {list(x)} into a non-empty output: there is no "
                f"index to return")
    return None


#: op -> rule(node, operand shapes, attributes) -> why the specification rejects the node, or None. A graph the kit
#: refuses (or computes differently) that breaks one of these is not a finding: onnxruntime accepts some models
#: beyond the specification (a DFT axis given as a vector; a scale of the input's rank without block_size; or never
#: runs the node because only its statically known shape is used).
SPEC_RULES = {"DFT": _dft, "QuantizeLinear": _quantize, "DequantizeLinear": _quantize,
              "InstanceNormalization": _per_channel, "BatchNormalization": _per_channel,
              "QLinearMatMul": _qlinear_matmul, "QLinearConv": _qlinear_conv, "SoftmaxCrossEntropyLoss": _loss, "NegativeLogLikelihoodLoss": _loss,
              "ArgMax": _arg_empty, "ArgMin": _arg_empty, "MatMulInteger": _matmul_integer,
              "RotaryEmbedding": _rotary}


def spec_violations(model_bytes) -> list[tuple[str, str]]:
    """(op, why) of each node of the model the specification rejects (``SPEC_RULES``, on the shapes ONNX's
    inference gives): run in a child process (ONNX's inference aborts on some invalid models)."""
    model = onnx.load_from_string(model_bytes)
    if not any(n.op_type in SPEC_RULES for n in model.graph.node):
        return []
    try:
        g = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    except Exception:  # noqa: BLE001  (no shapes: the declared ones below)
        g = model.graph
    shapes = {t.name: list(t.dims) for t in g.initializer}
    for v in list(g.input) + list(g.value_info) + list(g.output):
        t = v.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[v.name] = [d.dim_value for d in t.shape.dim]
    out = []
    for n in model.graph.node:
        rule = SPEC_RULES.get(n.op_type)
        why = rule(n, shapes, {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}) if rule else None
        if why:
            out.append((n.op_type, f"{n.name}: {why}"))
    return out


# -- a float64 evaluation of a float32 / float16 model: the arbiter when the kit and onnxruntime disagree ------
_F32, _F16, _F64 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE
_WIDENED = (_F32, _F16)


def _retype(t: onnx.TensorProto):
    if t.data_type in _WIDENED:
        t.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t).astype(np.float64), t.name))


def to_float64(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every float32 and float16 tensor (inputs, outputs, initializers, constants, cast targets) in
    float64."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    del g.value_info[:]
    for v in list(g.input) + list(g.output):
        if v.type.tensor_type.elem_type in _WIDENED:
            v.type.tensor_type.elem_type = _F64
    for t in g.initializer:
        _retype(t)
    for n in g.node:
        for a in n.attribute:
            if a.name in ("to", "dtype", "output_dtype") and a.type == onnx.AttributeProto.INT and a.i in _WIDENED:
                a.i = _F64
            elif a.type == onnx.AttributeProto.TENSOR:
                _retype(a.t)
            elif a.type == onnx.AttributeProto.GRAPH:
                raise ValueError("subgraphs are not converted")
        if n.op_type == "Constant" and any(a.name in ("value_float", "value_floats") for a in n.attribute):
            raise ValueError("Constant value_float(s) is float32 by definition")
    return m


def float64_outputs(model_bytes, feeds) -> dict:
    """The interpreter's outputs of the model in float64 (float32 and float16 inputs widened): run in a child
    process."""
    from glow_core.api import compile as glow_compile
    m = to_float64(onnx.load_from_string(model_bytes))
    wide = {k: (v.astype(np.float64) if v.dtype in (np.float32, np.float16) else v) for k, v in feeds.items()}
    return {k: np.asarray(v) for k, v in glow_compile(m.SerializeToString(), "interpreter").run(wide).items()}


def low_float(model: onnx.ModelProto) -> bool:
    """Whether a value of the model is float16 or bfloat16 (inputs, outputs, initializers, inferred values, casts)."""
    low = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # an invalid model is judged elsewhere; its declared values still count
        pass
    g = model.graph
    return any(v.type.tensor_type.elem_type in low for v in (*g.input, *g.output, *g.value_info)) \
        or any(t.data_type in low for t in g.initializer) \
        or any(a.name == "to" and a.i in low for n in g.node if n.op_type == "Cast" for a in n.attribute)


def declared_type_outputs(model_bytes, feeds) -> dict:
    """onnx.reference's outputs of the model: every node computed and rounded in the type the graph declares for
    its output, as the specification defines it (onnxruntime runs some float16 chains in float32 without rounding
    between the nodes, so a float16 overflow to inf inside the graph is not one there): run in a child process."""
    from onnx.reference import ReferenceEvaluator
    m = onnx.load_from_string(model_bytes)
    with np.errstate(all="ignore"):
        outs = ReferenceEvaluator(m).run(None, feeds)
    return {o.name: np.asarray(v) for o, v in zip(m.graph.output, outs)}


#: The condition estimate of an arbitrated output (``rounding_spread``): each float operand of each node that rounds
#: is multiplied by 1 + e, e uniform in [-ROUNDING_UNITS * u, ROUNDING_UNITS * u] (u: the unit roundoff of its type,
#: 2^-24 for float32, 2^-11 for float16), in ROUNDING_TRIALS evaluations.
ROUNDING_TRIALS, ROUNDING_UNITS = 4, 4
_UNIT_ROUNDOFF = {_F32: 2.0 ** -24, _F16: 2.0 ** -11}


def _rounds(op: str) -> bool:
    """Whether a node of ``op`` reads perturbed operands in ``rounding_spread``: not the ops whose result is exact
    or that need exact operands (``recipes``: data movement, Max, comparisons, Floor, ArgMax, TopK, casts...), whose
    float operands the generator draws from exact values only (a tie or a step there is the answer, not noise)."""
    r = RECIPES.get(op)
    return r is None or not (r.exact or r.needs_exact)


def _perturbed(m64: onnx.ModelProto, units: dict, shapes: dict, scales: dict, rng) -> onnx.ModelProto:
    """The float64 model ``m64`` where each node that ``_rounds`` reads each float operand ``v`` (of unit roundoff
    ``units[v]`` and shape ``shapes[v]``) times 1 + e, e drawn per element uniform in [-ROUNDING_UNITS * u, ...];
    a result of an op that accumulates many terms (``recipes``: finite) plus e * ``scales[v]`` instead (its largest
    magnitude: a sum that cancels to about 0 keeps an error of the order of its terms, not of itself)."""
    m = onnx.ModelProto()
    m.CopyFrom(m64)
    g = m.graph
    read = {i for n in g.node if _rounds(n.op_type) for i in n.input if i in units and i in shapes}
    nodes = []

    def perturb(v):
        if v in read:
            e = rng.uniform(-1.0, 1.0, shapes[v]) * (ROUNDING_UNITS * units[v])
            add = v in scales
            g.initializer.append(onnx.numpy_helper.from_array(np.asarray(e * scales[v] if add else 1.0 + e,
                                                                         np.float64), v + "__rounding"))
            nodes.append(onnx.helper.make_node("Add" if add else "Mul", [v, v + "__rounding"], [v + "__rounded"]))

    for v in dict.fromkeys([i.name for i in g.input] + [t.name for t in g.initializer]):
        perturb(v)
    for n in list(g.node):
        if _rounds(n.op_type):
            n.input[:] = [i + "__rounded" if i in read else i for i in n.input]
        nodes.append(n)
        for o in n.output:
            perturb(o)
    del g.node[:]
    g.node.extend(nodes)
    return m


def rounding_spread(model_bytes, feeds, trials=ROUNDING_TRIALS, seed=0) -> dict:
    """A per-element condition estimate of each output of a float32 / float16 model: the largest move of its
    float64 evaluation (``float64_outputs``) over ``trials`` evaluations where the float operands of the nodes that
    round (``_rounds``) are perturbed by a random relative error of a few unit roundoffs of their type
    (``_perturbed``: the backward error of a rounded computation; Monte Carlo arithmetic). Large where the graph
    amplifies rounding (Sin of a thousand, the determinant of a rank-deficient product, a product of a hundred
    normalized values); NaN where an evaluation is NaN. Run in a child process."""
    from glow_core.api import compile as glow_compile
    from .shrink import with_all_outputs
    model = onnx.load_from_string(model_bytes)
    try:
        inf = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001  (the declared types below)
        inf = model.graph
    units = {t.name: _UNIT_ROUNDOFF[t.data_type] for t in model.graph.initializer if t.data_type in _UNIT_ROUNDOFF}
    for v in list(inf.input) + list(inf.value_info) + list(inf.output):
        if v.type.tensor_type.elem_type in _UNIT_ROUNDOFF:
            units[v.name] = _UNIT_ROUNDOFF[v.type.tensor_type.elem_type]
    m64 = to_float64(model)
    wide = {k: (v.astype(np.float64) if v.dtype in (np.float32, np.float16) else v) for k, v in feeds.items()}
    everything = glow_compile(with_all_outputs(m64).SerializeToString(), "interpreter").run(wide)
    shapes = {k: np.shape(v) for k, v in everything.items()}
    shapes.update({k: np.shape(v) for k, v in wide.items()})
    shapes.update({t.name: tuple(t.dims) for t in m64.graph.initializer})
    scales = {}
    for n in model.graph.node:
        r = RECIPES.get(n.op_type)
        for o in n.output if r is not None and r.finite else ():
            v = np.abs(np.asarray(everything.get(o, np.zeros(0)), np.float64))
            if v.dtype.kind == "f" and np.isfinite(v).any():
                scales[o] = float(np.max(v[np.isfinite(v)]))
    names = [o.name for o in model.graph.output]
    base = {k: np.asarray(everything[k], np.float64) for k in names}
    spread = {k: np.zeros(np.shape(v)) for k, v in base.items()}
    lost = {k: np.zeros(np.shape(v), bool) for k, v in base.items()}
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        out = glow_compile(_perturbed(m64, units, shapes, scales, rng).SerializeToString(), "interpreter").run(wide)
        with np.errstate(all="ignore"):
            for k in names:
                moved = np.abs(np.asarray(out[k], np.float64) - base[k])
                lost[k] |= np.isnan(moved) & ~np.isnan(base[k])
                spread[k] = np.fmax(spread[k], moved)
    return {k: np.where(lost[k], np.nan, v) for k, v in spread.items()}

