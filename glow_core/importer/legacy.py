"""Models of ai.onnx opsets older than 7, upgraded before import.

Opset 7 replaced the legacy broadcasting of opsets 1-6 (the ``broadcast``/``axis`` attributes of Add, Gemm, ...,
and PRelu's per-channel slope) by numpy-style broadcasting, which is what the importer's lowerings implement.
A model declaring an older opset is first upgraded to ``NATIVE_MIN_OPSET`` with onnx's version converter
(``onnx.version_converter.convert_version``). The converter keeps PRelu's operands as they are, so a 1-d slope
of C > 1 elements, which opsets 1-6 apply per channel (axis 1), is first unsqueezed to ``[C, 1, ..., 1]``.

When the converter cannot upgrade a model (it has no adapter for some op), ``upgrade`` returns None and says
why: the importer then imports the model at its own opset, which works for the ops whose old schemas it still
reads (e.g. Split-1, Concat-1), and adds the converter's reason to any error it raises.
"""
from __future__ import annotations

import re

import onnx
from onnx import helper

#: The oldest ai.onnx opset the importer's lowerings implement directly (numpy-style broadcasting).
NATIVE_MIN_OPSET = 7


def ai_onnx_opset(m: onnx.ModelProto) -> int | None:
    """The model's ai.onnx opset, or None when it imports none."""
    ops = {o.domain or "": o.version for o in m.opset_import}
    return ops.get("", ops.get("ai.onnx"))


def needs_upgrade(m: onnx.ModelProto) -> bool:
    v = ai_onnx_opset(m)
    return v is not None and v < NATIVE_MIN_OPSET


def _shapes(m: onnx.ModelProto) -> dict[str, list]:
    """The dims (an int, or None where unknown) of every value whose rank ONNX's inference knows."""
    try:
        g = onnx.shape_inference.infer_shapes(m).graph
    except Exception:  # noqa: BLE001  (nothing known: nothing is rewritten; the importer will name the node)
        g = m.graph
    out = {t.name: [int(d) for d in t.dims] for t in g.initializer}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if vi.name not in out and vi.type.HasField("tensor_type") and tt.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    return out


def channelwise_prelu(m: onnx.ModelProto) -> int:
    """Rewrite, in place, every PRelu of the main graph whose slope is 1-d with more than one element and whose
    input has rank > 2: the slope gets an ``Unsqueeze`` to ``[C, 1, ..., 1]`` (opsets 1-6 apply it per
    channel, axis 1). Returns the number of nodes rewritten."""
    shapes = _shapes(m)
    nodes, done = [], 0
    taken = {o for n in m.graph.node for o in n.output} | {i.name for i in m.graph.input} | \
        {t.name for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "PRelu" and n.domain in ("", "ai.onnx") and len(n.input) == 2:
            x, slope = n.input
            xs, s = shapes.get(x) or [], shapes.get(slope)
            rx = len(xs)
            if rx > 2 and s is not None and len(s) == 1 and (s[0] or 0) > 1 and xs[1] in (s[0], None):
                name = f"{slope}__per_channel"
                while name in taken:
                    name += "_"
                taken.add(name)
                nodes.append(helper.make_node("Unsqueeze", [slope], [name], axes=list(range(1, rx - 1)),
                                              name=f"{n.name or 'PRelu'}__slope_per_channel"))
                n.input[1] = name
                done += 1
        nodes.append(_copy(n))
    if done:
        del m.graph.node[:]
        m.graph.node.extend(nodes)
    return done


def upgrade(m: onnx.ModelProto) -> tuple[onnx.ModelProto | None, str]:
    """(the model upgraded to NATIVE_MIN_OPSET, "") or (None, why the converter could not upgrade it)."""
    from onnx import version_converter
    work = onnx.ModelProto()
    work.CopyFrom(m)
    v = ai_onnx_opset(m)
    # the converter reads an initializer only when it is also a graph input (IR version 3's rule): list the
    # others as inputs while converting
    listed = {i.name for i in work.graph.input}
    extra = [t for t in work.graph.initializer if t.name not in listed]
    work.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in extra)
    try:
        channelwise_prelu(work)
        out = version_converter.convert_version(work, NATIVE_MIN_OPSET)
    except Exception as e:  # noqa: BLE001  (the converter raises RuntimeError/ValidationError/...: report it)
        text = " ".join(str(e).split())
        text = re.sub(r"^\S+:\d+: \w+: Assertion `.*?` failed: ", "", text)  # the C++ assertion's location
        return None, (f"onnx's version converter could not upgrade this ai.onnx opset {v} model to opset "
                      f"{NATIVE_MIN_OPSET}: {text[:300]}")
    drop = {t.name for t in extra}
    if drop:
        keep = [_copy(i) for i in out.graph.input if i.name not in drop]
        del out.graph.input[:]
        out.graph.input.extend(keep)
    return out, ""


def _copy(message):
    out = type(message)()
    out.CopyFrom(message)
    return out
