"""Extended ops: high-level ops kept whole, with a numpy kernel and the reason.

An extended op does not decompose sensibly into the primitive set (its output
shape depends on data, or the decomposition would be quadratic or a loop). The
interpreter runs its kernel; a backend may claim it through
``is_op_supported``. Output types come from ONNX's own shape inference on a
one-node model, so no second shape rule is written by hand.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ShapeError
from ..types import TensorType, dtype


def _value_info(name, t: TensorType):
    return helper.make_tensor_value_info(name, t.dtype.onnx, list(t.shape))


def infer_extended(node, n_outputs: int) -> list[TensorType]:
    """Output types of an extended-op node by ONNX shape inference (constants folded in)."""
    from ..importer.onnx_import import attrs_to_proto
    inputs, inits, names = [], [], []
    for i, v in enumerate(node.inputs):
        if v is None:
            names.append("")
            continue
        nm = f"in{i}"
        names.append(nm)
        if v.is_const:
            inits.append(numpy_helper.from_array(np.asarray(v.const), nm))
        inputs.append(_value_info(nm, v.type))
    outs = [f"out{i}" for i in range(n_outputs)]
    n = helper.make_node(node.op, names, outs, **attrs_to_proto(node.attrs))
    g = helper.make_graph([n], "infer", inputs, [helper.make_empty_tensor_value_info(o) for o in outs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", node.opset or onnx.defs.onnx_opset_version())])
    try:
        m = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
    except Exception as e:  # noqa: BLE001  (onnx raises several unrelated types)
        raise ShapeError(f"node '{node.name}' ({node.op}): shape inference failed: {str(e).splitlines()[0]}") from None
    found = {vi.name: vi for vi in list(m.graph.output) + list(m.graph.value_info)}
    types = []
    for o in outs:
        vi = found.get(o)
        tt = vi.type.tensor_type if vi is not None else None
        if tt is None or not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
            raise ShapeError(f"node '{node.name}' ({node.op}): output {o[3:]} has no static shape (it depends on "
                             f"input values); give the inputs that determine it as constants")
        types.append(TensorType(dtype(tt.elem_type), tuple(d.dim_value for d in tt.shape.dim)))
    return types


def run_extended(node_op: str, arrays, attrs):
    """Run an extended op's kernel on numpy arrays (None for missing optional inputs)."""
    from .registry import get_op
    out = get_op(node_op).kernel(*arrays, **attrs)
    return list(out) if isinstance(out, (tuple, list)) else [out]
