"""Comparing a backend's outputs with the reference's, by the conformance suite's checker and tolerance table
(``glow_conformance.checker.compare``): family "op" for a one-node graph, "model" for a larger one.

Against onnxruntime, ``ORT_DIFFERENCES`` lists the documented semantic differences that are not reported:
each entry names the op and the condition under which onnxruntime's answer is not the ONNX specification's.
"""
from __future__ import annotations

import numpy as np
import onnx

from glow_conformance.cases import CaseFailure
from glow_conformance.checker import compare

#: op -> why onnxruntime's answer may differ from the specification (graphs holding these ops are compared
#: only on outputs that do not depend on them).
ORT_DIFFERENCES = {
    "Max": "onnxruntime's Max/Min do not propagate NaN the way the specification's numpy reference does",
    "Min": "onnxruntime's Max/Min do not propagate NaN the way the specification's numpy reference does",
}


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
