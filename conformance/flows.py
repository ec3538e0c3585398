"""Flows: the recipes a backend is judged under (ExecuTorch's "flows"), one record each.

A flow is a way a model reaches a device: float32 as trained, converted to float16 or bfloat16, quantized with
int8 per-tensor or per-channel weights, with int16 activations, with int4 weights only, or with int4 weights and
int8 activations. ``--flow NAME``
(repeatable) runs the cases of those flows; a backend claims the flows it supports
(``Backend.conformance_flows()``, default every flow) and the report has a column per flow.

A case belongs to flows by what it exercises (``flows_of``): a primitive or ONNX-op case by its dtype (float32:
fp32, float16: fp16, bfloat16: bf16) or, for the quantized primitives, by its weights (per tensor, per channel)
and precision (int16); a model case of the models tier is the float32 network under the flow's recipe
(``Flow.options``: the compile options of ``glow_core.compile``; ``quantize`` a profile calibrated on seeded
inputs), judged against the interpreter compiled with the same recipe, or, on the reference interpreter itself,
against the float32 network by ONNX's ReferenceEvaluator within the flow's SQNR (``Flow.sqnr_db``: no bit-exact
independent oracle of a network under a reduced-precision recipe exists, so the report says that bound is plain;
the floors sit below what the kit's recipes give on these networks with 4 calibration samples over seeds 0-2:
int8 9.5 dB and int16 10.3 at worst (inputs outside the calibrated range clip: that, not the precision,
dominates), int4 weight-only 15.4, bfloat16 43, float16 58: they catch a broken recipe, not a weak one). A network converted to float16
or bfloat16 rounds every intermediate in that type, and a backend may keep one in float32 (a fused epilogue), so
other backends agree with the interpreter under that recipe within ``Flow.agreement_db`` of SQNR, not per
element; quantized networks are held to the ``model`` class (their integer parts are exact).
Cases of float64, integer, bool and storage types, and the negative tier, belong to no flow: they run in every
full run.

Each flow has its own profiles (``Flow.profiles``): the report judges each over the flow's cases, one column per
flow. A flow whose recipe the kit does not have yet (``requires``: a glow_core name) is declared and its cases are
skipped with that reason (kind ``flow-unavailable``).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

#: the ``quantize`` option of a flow's recipe: the case calibrates a profile of its network
PROFILE = "calibrated profile"


@dataclass(frozen=True)
class Flow:
    """One recipe: its name (``--flow NAME``), what it is, the dtype of its primitive and ONNX-op cases, the
    compile options of its model cases, the SQNR its networks keep against float32 on the reference backend,
    and the glow_core name it needs (None: available)."""

    name: str
    title: str
    dtypes: tuple[str, ...] = ()
    options: dict = field(default_factory=dict)
    sqnr_db: float | None = None
    requires: str | None = None
    agreement_db: float | None = None  # other backends against the interpreter under the recipe (None: "model")
    agreement_why: str | None = None  # why other backends differ from the interpreter (None: the converted types')
    profiles: tuple[str, ...] = ("models",)  # the profiles judged over the flow's cases (its report column)

    def unavailable(self) -> str | None:
        """Why this flow cannot run yet (its recipe is missing from glow_core), or None."""
        if self.requires is None:
            return None
        module, _, attr = self.requires.rpartition(".")
        try:
            if hasattr(importlib.import_module(module), attr):
                return None
        except ImportError:
            pass
        return f"flow {self.name}: glow_core has no {self.requires} yet (the recipe of this flow)"


FLOWS = {f.name: f for f in (
    Flow("fp32", "float32 as trained", ("float32",),
         profiles=("fp32-core", "models", "memory", "passes", "partition")),
    Flow("fp16", "float16: the float32 network converted (convert_to=float16)", ("float16",),
         {"convert_to": "float16"}, sqnr_db=40.0, agreement_db=45.0, profiles=("fp16", "models", "memory")),
    Flow("bf16", "bfloat16: the float32 network converted (convert_to=bfloat16)", ("bfloat16",),
         {"convert_to": "bfloat16"}, sqnr_db=30.0, agreement_db=30.0, profiles=("bf16", "models", "memory")),
    Flow("int8-per-tensor", "int8 activations and weights, one scale per weight tensor (quantize=profile)", (),
         {"quantize": PROFILE, "per_channel": False}, sqnr_db=5.0, profiles=("quantized-int8", "models")),
    Flow("int8-per-channel", "int8 activations, int8 weights with a scale per output channel (per_channel=True)",
         (), {"quantize": PROFILE, "per_channel": True}, sqnr_db=5.0, profiles=("quantized-int8", "models")),
    Flow("int16", "int16 activations and weights (precision=int16)", (), {"quantize": PROFILE,
                                                                          "precision": "int16"}, sqnr_db=5.0,
         profiles=("quantized-int16", "models")),
    Flow("int4-weight-only", "int4 weights in blocks of 32, float activations (MatMulNBits semantics: "
         "glow_core.quantization.weight_only)", (), {}, sqnr_db=12.0,
         requires="glow_core.quantization.weight_only"),
    Flow("int4-int8-act", "int4 weights in blocks of 32 with MatMulNBits' accuracy_level 4: a backend may quantize "
         "each MatMulNBits' activations to int8 per block (onnxruntime's license; the interpreter keeps them float)",
         (), {}, sqnr_db=12.0, agreement_db=30.0, requires="glow_core.quantization.weight_only",
         agreement_why="accuracy_level 4 licenses a backend to round each MatMulNBits' activations to int8 per "
                       "block (the interpreter keeps them float): an error of about 1/254 of each block's largest "
                       "value, compounding through layers, so it agrees with the interpreter under the same "
                       "recipe by SQNR, at least 30 dB"),
)}


def flows_of(case) -> tuple[str, ...]:
    """The flows ``case`` belongs to (its own ``flows`` when it names them)."""
    if case.flows is not None:
        return tuple(case.flows)
    if case.tier == "negative":
        return ()
    if case.tier in ("primitives", "memory") and _quantized(case.subject):
        if "quantized-int16" in case.profiles or case.dtype == "int16":
            return ("int16",)
        if "per_channel" in case.id or "per_column" in case.id:
            return ("int8-per-channel",)
        if "per_tensor" in case.id:
            return ("int8-per-tensor",)
        return ("int8-per-tensor", "int8-per-channel")  # activations only: the same in both
    return tuple(f.name for f in FLOWS.values() if case.dtype in f.dtypes)


def _quantized(subject) -> bool:
    from glow_core.ops.registry import PRIMITIVES
    p = PRIMITIVES.get(subject)
    return p is not None and p.quantized == "own"


def check(names, backend) -> list[str]:
    """The flows asked for with ``--flow``, checked: known, and claimed by the backend (a UsageError's text
    otherwise: returned as the list's only element prefixed with "error: ")."""
    unknown = [n for n in names if n not in FLOWS]
    if unknown:
        return [f"error: --flow {unknown[0]}: unknown flow; flows: {', '.join(FLOWS)}"]
    claimed = claimed_flows(backend)
    refused = [n for n in names if n not in claimed]
    if refused:
        return [f"error: --flow {refused[0]}: backend '{backend.name}' does not claim this flow "
                f"(conformance_flows(): {', '.join(claimed) or 'none'})"]
    return list(dict.fromkeys(names))


def claimed_flows(backend) -> tuple[str, ...]:
    """The flows ``backend`` claims (``conformance_flows()``; None: every flow); an unknown name is an error."""
    declared = backend.conformance_flows()
    if declared is None:
        return tuple(FLOWS)
    unknown = [n for n in declared if n not in FLOWS]
    if unknown:
        raise ValueError(f"backend '{backend.name}': conformance_flows() names {unknown[0]!r}, which is no flow; "
                         f"flows: {', '.join(FLOWS)}")
    return tuple(declared)
