"""Fusion as declared patterns over the lowered graph: an activation folded into the primitive producing its input.

After lowering, Relu is ``max(x, splat 0)``, Clip ``min(max(x, splat lo), splat hi)``, LeakyRelu (float32/64)
``select(lt(x, splat 0), mul(x, splat alpha), x)``; Sigmoid and Tanh are primitives; SiLU (x * Sigmoid(x), as
torch exports it) is ``mul(x, sigmoid(x))`` in either operand order; HardSigmoid ``min(max(add(mul(x, splat
alpha), splat beta), splat 0), splat 1)`` and HardSwish ``mul(x, that)`` (alpha 1/6, beta 1/2); GELU (ONNX Gelu's
lowering, and the Erf or Tanh form models write) is ``(x * 0.5) * (erf(x * scale) + 1)``, ``(x * (erf(x / divisor)
+ 1)) * 0.5`` (torch's TorchScript exporter) or the tanh form. ``ACTIVATIONS`` declares
these forms as data; ``fuse_activations`` finds them on the output of a producer in ``PRODUCERS`` (conv,
matmul, and the elementwise add: a residual or bias add followed by relu is one pass, and the splat of zeros
the lowered relu compares against is never materialized) and, when the backend's
``supports_fused_activation(producer op, activation)`` says yes and the producer's result has no other user,
records the activation on the producer as the annotation ``FUSED_ACTIVATION`` (its name) with ``FUSED_PARAMS``
(its parameters by name, e.g. ``{"min": 0.0, "max": 6.0}``) and removes the activation's nodes: the producer
now computes the activation's output. Annotations (attributes named ``_x``) are not semantics to the shape
rules; a backend's kernel must apply the activation exactly as the lowered primitives would (the same dtype,
the same operation order).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .graph import Function, Node, Value

#: Annotation holding the fused activation's name ("relu", "clip", "silu", "sigmoid", "tanh", "leaky_relu",
#: "hard_sigmoid", "hard_swish", "gelu_erf", "gelu_erf_div", "gelu_erf_half", "gelu_tanh").
FUSED_ACTIVATION = "_fused_activation"
#: Annotation holding its parameters by name (empty for relu, silu, sigmoid and tanh; alpha and beta for the hard ones).
FUSED_PARAMS = "_fused_params"

#: Primitives that may absorb an activation.
PRODUCERS = ("conv", "matmul", "add")


@dataclass(frozen=True)
class Step:
    """One node of a pattern: ``op`` applied to ``args``. An arg is "x" (the producer's output, or the previous
    step's result: "prev"), "splat:NAME" (a constant whose elements all equal one value, or a broadcast of one;
    NAME is the parameter it binds, or a number the value must equal), or "step:I" (step I's result)."""

    op: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class Pattern:
    """An activation as the core lowers it: steps in order; the last one's output is the activation's output."""

    name: str
    steps: tuple[Step, ...]


#: HardSigmoid as lowered: min(max(x * alpha + beta, 0), 1) (HardSwish: x times it, alpha 1/6, beta 0.5).
_HARD_SIGMOID = (Step("mul", ("x", "splat:alpha")), Step("add", ("step:0", "splat:beta")),
                 Step("max", ("step:1", "splat:0")), Step("min", ("step:2", "splat:1")))

ACTIVATIONS = (
    Pattern("clip", (Step("max", ("x", "splat:min")), Step("min", ("step:0", "splat:max")))),
    Pattern("relu", (Step("max", ("x", "splat:0")),)),
    # silu before sigmoid: both start at the sigmoid, and x's second user (the mul) rules the sigmoid alone out
    Pattern("silu", (Step("sigmoid", ("x",)), Step("mul", ("x", "step:0")))),
    Pattern("silu", (Step("sigmoid", ("x",)), Step("mul", ("step:0", "x")))),
    Pattern("sigmoid", (Step("sigmoid", ("x",)),)),
    Pattern("tanh", (Step("tanh", ("x",)),)),
    Pattern("leaky_relu", (Step("lt", ("x", "splat:0")), Step("mul", ("x", "splat:alpha")),
                           Step("select", ("step:0", "step:1", "x")))),
    # hard_swish before hard_sigmoid: both start at the mul, and x's second user rules hard_sigmoid alone out
    Pattern("hard_swish", _HARD_SIGMOID + (Step("mul", ("x", "step:3")),)),
    Pattern("hard_swish", _HARD_SIGMOID + (Step("mul", ("step:3", "x")),)),
    Pattern("hard_sigmoid", _HARD_SIGMOID),
    # GELU as ONNX Gelu lowers (and transformers write it with Erf/Tanh): (x * 0.5) * (erf(x * scale) + 1), and
    # (x * 0.5) * (tanh((x + ((x * x) * x) * cube) * scale) + 1)
    Pattern("gelu_erf", (Step("mul", ("x", "splat:scale")), Step("erf", ("step:0",)),
                         Step("add", ("step:1", "splat:1")), Step("mul", ("x", "splat:0.5")),
                         Step("mul", ("step:3", "step:2")))),
    # ... and as torch.onnx's TorchScript exporter writes it: (x * (erf(x / divisor) + 1)) * 0.5
    Pattern("gelu_erf_div", (Step("div", ("x", "splat:divisor")), Step("erf", ("step:0",)),
                             Step("add", ("step:1", "splat:1")), Step("mul", ("x", "step:2")),
                             Step("mul", ("step:3", "splat:0.5")))),
    # ... and as torch's dynamo exporter decomposes nn.GELU() before opset 20 (no Gelu op): x * (0.5 * (erf(x /
    # divisor) + 1))
    Pattern("gelu_erf_half", (Step("div", ("x", "splat:divisor")), Step("erf", ("step:0",)),
                              Step("add", ("step:1", "splat:1")), Step("mul", ("splat:0.5", "step:2")),
                              Step("mul", ("x", "step:3")))),
    Pattern("gelu_erf_half", (Step("div", ("x", "splat:divisor")), Step("erf", ("step:0",)),
                              Step("add", ("step:1", "splat:1")), Step("mul", ("splat:0.5", "step:2")),
                              Step("mul", ("step:3", "x")))),
    Pattern("gelu_tanh", (Step("mul", ("x", "x")), Step("mul", ("step:0", "x")),
                          Step("mul", ("step:1", "splat:cube")), Step("add", ("x", "step:2")),
                          Step("mul", ("step:3", "splat:scale")),
                          Step("tanh", ("step:4",)), Step("add", ("step:5", "splat:1")),
                          Step("mul", ("x", "splat:0.5")), Step("mul", ("step:7", "step:6")))),
)


def splat_value(v: Value | None, producer_of) -> "float | int | None":
    """The one value every element of ``v`` holds when ``v`` is a constant of equal elements or a broadcast of
    one; else None."""
    if v is None:
        return None
    p = producer_of.get(v.id)
    if p is not None and p.op == "broadcast":
        v = p.inputs[0]
    if not v.is_const or v.const.size == 0:
        return None
    flat = np.asarray(v.const).reshape(-1)
    if not np.all(flat == flat[0]):  # NaN splats never match: NaN != NaN
        return None
    return float(flat[0]) if v.dtype.is_float else int(flat[0])


def _match(pattern: Pattern, first: Node, x: Value, users, producer_of, outputs) -> "tuple[list[Node], dict] | None":
    """The nodes and parameters of ``pattern`` applied to ``x`` with ``first`` as its first step, or None."""
    nodes: list[Node] = []
    params: dict = {}
    for i, step in enumerate(pattern.steps):
        if i == 0:
            node = first
        else:
            # The step reads an earlier step's result (or x): find it among that value's users.
            anchor = next((a for a in step.args if a.startswith("step:")), None)
            src = nodes[int(anchor[5:])].outputs[0] if anchor else x
            cands = [n for n in users.get(src.id, []) if n.op == step.op]
            node = None
            for c in cands:
                if c not in nodes:
                    node = c
                    break
            if node is None:
                return None
        if node.op != step.op or len(node.inputs) != len(step.args) or len(node.outputs) != 1:
            return None
        for arg, v in zip(step.args, node.inputs):
            if arg == "x":
                if v is not x:
                    return None
            elif arg.startswith("step:"):
                if v is not nodes[int(arg[5:])].outputs[0]:
                    return None
            else:
                value = splat_value(v, producer_of)
                key = arg[6:]
                if value is None:
                    return None
                if key[0].isdigit() or key[0] == "-":
                    if repr(float(value)) != repr(float(key)):  # -0.0 is not 0
                        return None
                elif params.setdefault(key, value) != value:
                    return None
        if node.outputs[0].type != x.type and i == len(pattern.steps) - 1:
            return None
        nodes.append(node)
    # Every intermediate result is read only inside the pattern; x only by the pattern's nodes.
    inside = set(map(id, nodes))
    for n in nodes[:-1]:
        out = n.outputs[0]
        if out.id in outputs or any(id(u) not in inside for u in users.get(out.id, [])):
            return None
    if x.id in outputs or any(id(u) not in inside for u in users.get(x.id, [])):
        return None
    return nodes, params


def fuse_activations(fn: Function, supports) -> int:
    """Fold every declared activation into the producer of its input where ``supports(producer op, name)``
    (``Backend.supports_fused_activation``). Returns the number of activations fused. Linear in the graph."""
    producer_of = {v.id: n for n in fn.nodes for v in n.outputs}
    users = fn.users()
    outputs = {v.id for v in fn.outputs}
    removed: set[int] = set()
    fused = 0
    for p in fn.nodes:
        if p.op not in PRODUCERS or len(p.outputs) != 1 or FUSED_ACTIVATION in p.attrs or id(p) in removed:
            continue
        if all(v is None or v.is_const for v in p.inputs):  # constant folding computes it: nothing to fuse
            continue
        x = p.outputs[0]
        for first in users.get(x.id, []):
            found = None
            for pattern in ACTIVATIONS:
                if pattern.steps[0].op != first.op or not supports(p.op, pattern.name):
                    continue
                found = _match(pattern, first, x, users, producer_of, outputs)
                if found is not None:
                    found = (pattern.name, *found)
                    break
            if found is None:
                continue
            name, nodes, params = found
            y = nodes[-1].outputs[0]
            p.attrs[FUSED_ACTIVATION] = name
            p.attrs[FUSED_PARAMS] = params
            p.outputs[0] = y  # the producer now computes the activation's output; x is gone with its only users
            y.producer = p
            producer_of[y.id] = p
            removed.update(map(id, nodes))
            fused += 1
            break
    if removed:
        fn.nodes = [n for n in fn.nodes if id(n) not in removed]
    return fused
