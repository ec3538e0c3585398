"""The optimized, lowered graph as an ONNX model (``glowc dump MODEL --onnx FILE``), for Netron and friends.

Every node is what the backend receives after lowering and its post-lowering transforms: primitives (and
extended ops kept whole) as nodes of the ``glow`` domain, with their attributes, backend annotations (names
starting with ``_``) included; every value carries its dtype and shape in ``value_info``; constants are
initializers. A node result that is only a graph output takes the output's name (the IR writes it straight
into the output buffer); so does an input or a constant of the output's name; any other output (a value also read by nodes, output
twice or under another name) is written by a ``glow.copy`` node, as in the IR. The model passes ``onnx.checker`` (the ``glow`` domain is declared in ``opset_import``);
no ONNX runtime can execute it, nor is it meant to.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from glow_core.flops import node_flops
from glow_core.graph import Function, Value
from glow_core.types import DType, TensorType

DOMAIN = "glow"
DOMAIN_VERSION = 1


def _attr(name: str, v):
    """An AttributeProto for a primitive attribute, or None for an absent (None) one."""
    if v is None:
        return None
    if isinstance(v, DType):
        v = v.name
    if isinstance(v, (bool, np.bool_)):
        v = int(v)
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, np.ndarray):
        return helper.make_attribute(name, numpy_helper.from_array(np.ascontiguousarray(v), name))
    if isinstance(v, (list, tuple)):
        items = [x.item() if isinstance(x, np.generic) else x for x in v]
        if all(isinstance(x, (bool, int)) for x in items):
            return helper.make_attribute(name, [int(x) for x in items], attr_type=onnx.AttributeProto.INTS)
        if all(isinstance(x, (bool, int, float)) for x in items):
            return helper.make_attribute(name, [float(x) for x in items], attr_type=onnx.AttributeProto.FLOATS)
        if all(isinstance(x, str) for x in items):
            return helper.make_attribute(name, items, attr_type=onnx.AttributeProto.STRINGS)
        return helper.make_attribute(name, repr(v))
    if isinstance(v, (int, float, str)):
        return helper.make_attribute(name, v)
    return helper.make_attribute(name, repr(v))  # anything else (a subgraph Function, a dict) as readable text


def _value_info(name: str, t: TensorType) -> onnx.ValueInfoProto:
    vi = helper.make_tensor_value_info(name, t.dtype.onnx, list(t.shape))
    if t.is_quantized:
        vi.doc_string = f"quantized: scale {t.scale!r}, offset {t.offset}"
    return vi


def to_onnx(fn: Function, backend: str = "") -> onnx.ModelProto:
    """``fn`` (an optimized, lowered graph Function) as a ModelProto of ``glow``-domain nodes."""
    names: dict[int, str] = {}
    used: set[str] = set(fn.output_names)
    direct: set[int] = set()
    read = {v.id for n in fn.nodes for v in n.inputs if v is not None}
    for out_name, v in zip(fn.output_names, fn.outputs):
        # an input or constant of the output's own name is the output itself (ONNX allows that)
        if v.id not in direct and (v.name == out_name if v.kind != "node" else v.id not in read):
            direct.add(v.id)
            names[v.id] = out_name

    def name_of(v: Value) -> str:
        if v.id not in names:
            base, k, nm = v.name or "v", 0, v.name or "v"
            while nm in used:
                k += 1
                nm = f"{base}__{k}"
            used.add(nm)
            names[v.id] = nm
        return names[v.id]

    inputs = [_value_info(name_of(v), v.type) for v in fn.inputs]
    initializers, value_info, nodes = [], [], []
    seen_const: set[int] = set()

    def use(v: Value | None) -> str:
        if v is None:
            return ""
        nm = name_of(v)
        if v.is_const and v.id not in seen_const:
            seen_const.add(v.id)
            initializers.append(numpy_helper.from_array(np.ascontiguousarray(v.const), nm))
        return nm

    for n in fn.nodes:
        ins = [use(v) for v in n.inputs]
        outs = [name_of(v) for v in n.outputs]
        attrs = [a for a in (_attr(k, v) for k, v in n.attrs.items()) if a is not None]
        node = helper.make_node(n.op, ins, outs, name=n.name, domain=DOMAIN)
        node.attribute.extend(attrs)
        f = node_flops(n)
        if f is not None:
            node.doc_string = f"{f} FLOPs"
        nodes.append(node)
        value_info += [_value_info(nm, v.type) for nm, v in zip(outs, n.outputs) if v.id not in direct]
    outputs = []
    for out_name, v in zip(fn.output_names, fn.outputs):
        src = use(v)
        if src != out_name:
            nodes.append(helper.make_node("copy", [src], [out_name], name=f"copy_{out_name}", domain=DOMAIN))
        outputs.append(_value_info(out_name, v.type))
    graph = helper.make_graph(nodes, fn.name, inputs, outputs, initializers, value_info=value_info,
                              doc_string=f"optimized and lowered for backend '{backend}' by Glow Kit")
    model = helper.make_model(graph, producer_name="glow-kit",
                              opset_imports=[helper.make_opsetid(DOMAIN, DOMAIN_VERSION),
                                             helper.make_opsetid("", onnx.defs.onnx_opset_version())])
    model.doc_string = ("Glow Kit's graph of primitives: nodes in the 'glow' domain, as the backend receives "
                        "them (not executable by an ONNX runtime)")
    return model
