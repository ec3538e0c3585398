"""Comparing a backend's outputs with the reference's, by the conformance suite's checker and tolerance table
(``glow_conformance.checker.compare``): family "op" for a one-node graph, "model" for a larger one.

Against onnxruntime, ``ORT_DIFFERENCES`` lists the semantic differences that are not reported: each entry
names the op and the condition on the inputs under which onnxruntime's answer may differ from the
specification's reference without either being wrong.
"""
from __future__ import annotations

import numpy as np
import onnx

from glow_conformance.cases import CaseFailure
from glow_conformance.checker import compare

_NAN = "onnxruntime's comparisons skip NaN, where the specification's numpy reference propagates or selects it"
_OVERFLOW = ("overflow is left undefined by the specification; onnxruntime saturates or widens where the "
             "interpreter wraps (integers) or rounds to infinity (float16)")
#: op -> (condition on the inputs, why onnxruntime's answer may differ from the specification's there): outputs
#: computed from such an op are not compared when the condition holds ("nan": some input holds NaN;
#: "overflow": some input holds an integer extreme or a float beyond 1e4). Each entry comes from a finding of
#: ``glowc fuzz --backend interpreter --against onnxruntime`` that was checked by hand.
ORT_DIFFERENCES = {
    "Max": ("nan", _NAN), "Min": ("nan", _NAN), "ArgMax": ("nan", _NAN), "ArgMin": ("nan", _NAN),
    "MaxPool": ("nan", _NAN), "Hardmax": ("nan", _NAN), "GlobalMaxPool": ("nan", _NAN),
    "ReduceMax": ("nan", _NAN), "ReduceMin": ("nan", _NAN),
    "ReduceSum": ("overflow", _OVERFLOW), "Gemm": ("overflow", _OVERFLOW), "MatMul": ("overflow", _OVERFLOW),
    "ScatterElements": ("nan", _NAN + " (reduction min/max)"), "ScatterND": ("nan", _NAN + " (reduction min/max)"),
    "DynamicQuantizeLinear": ("overflow", "an infinite input makes the scale infinite, which the specification "
                                          "leaves undefined (onnxruntime saturates, the interpreter gives 0)"),
    "Clip": ("overflow", "with max omitted the specification's text clamps to the type's largest finite "
                         "value (onnxruntime) and its reference to infinity (the interpreter)"),
}


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


def depends_on(model: onnx.ModelProto, ops) -> set[str]:
    """Names of the values computed (transitively) from a node whose op is in ``ops``."""
    tainted: set[str] = set()
    for n in model.graph.node:
        if n.op_type in ops or any(i in tainted for i in n.input):
            tainted.update(n.output)
    return tainted
