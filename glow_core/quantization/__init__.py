"""Quantization: profiles, the quantizer, imported quantized models, float16/bfloat16 conversion.

- ``profile(model, samples) -> Profile`` records every tensor's range (``Profile.save`` / ``Profile.load``);
- ``glow_core.compile(model, backend, quantize=PROFILE_OR_PATH, schema=..., precision=..., per_channel=...,
  calibration=..., keep_float=[...], weight_schema=...)`` quantizes with it (``rewrite.ProfileSource``;
  ``weight_schema`` chooses the conv and matmul weights' parameters apart from the activations': by default
  "symmetric" under ``schema="asymmetric"`` (onnxruntime's recipe, no weight offsets), else the ``schema``);
- a model that is already quantized (QDQ: QuantizeLinear/DequantizeLinear around float ops, or QOperator:
  QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger) runs as quantized primitives (``rewrite.ModelSource``);
- ``convert_to="float16" | "bfloat16"`` converts the float32 parts;
- ``requant="float32" | "fixed_point"`` chooses the requantization arithmetic of every quantized primitive that
  requantizes (their attribute ``requant``, see glow_core/ops/primitives/quantized.py): ``float32`` (default)
  leaves the nodes as they are, ``fixed_point`` sets it on every such node, the quantizer's as it creates them
  (so the backend's ``is_op_supported`` sees the mode) and an imported model's (``set_requant``).
- ``weight_only(model, bits=4, block_size=32, symmetric=True) -> onnx.ModelProto``: MatMul/Gemm with constant
  weights become com.microsoft MatMulNBits (block-wise 4- or 8-bit weights, the format onnxruntime runs).

``run(fn, options, ask)`` is the pass ``glow_core.api.compile_graph`` runs after lowering: the quantizer or the
QDQ fusion, the conversion, then the emulation of quantized primitives the backend refuses (``emulate``). The
reference semantics of the quantized primitives: glow_core/ops/primitives/quantized.py and
vendor_guide/quantization.md.
"""
from __future__ import annotations

import os

from ..errors import GlowError
from ..ops.primitives.quantized import REQUANT_MODES
from ..graph import Function
from ..passes import POST_LOWERING_PIPELINE, run_pipeline
from .calibrate import CALIBRATIONS
from .calibrate import check as check_calibration
from .convert import TARGETS, convert
from .emulate import emulate
from .profile import Profile, TensorStats, lowered_graph, profile
from .report import Report, quantize_report
from .rewrite import quantize_graph, quantized, set_requant
from .schema import PRECISIONS, SCHEMAS, QParams
from .schema import check as check_schema
from .weight_only import weight_only

#: compile options of this package, with their defaults
OPTIONS = {"quantize": None, "schema": "asymmetric", "precision": "int8", "per_channel": False,
           "calibration": "minmax", "keep_float": (), "convert_to": None, "weight_schema": None,
           "requant": "float32"}

__all__ = ["profile", "Profile", "TensorStats", "QParams", "SCHEMAS", "PRECISIONS", "CALIBRATIONS", "TARGETS",
           "OPTIONS", "prepare", "run", "lowered_graph", "quantize_graph", "quantize_report", "Report", "set_requant",
           "REQUANT_MODES", "weight_only"]


def prepare(options: dict) -> dict:
    """``options`` with the quantization options checked and a profile path loaded (a GlowError names what is
    wrong and what is accepted)."""
    out = dict(options)
    q = out.get("quantize")
    if isinstance(q, (str, os.PathLike)):
        out["quantize"] = Profile.load(q)
    elif q is not None and not isinstance(q, Profile):
        raise GlowError(f"quantize= takes a Profile or the path of a profile file, got {type(q).__name__}")
    check_schema(out.get("schema", OPTIONS["schema"]), out.get("precision", OPTIONS["precision"]))
    if out.get("weight_schema") is not None:
        check_schema(out["weight_schema"], out.get("precision", OPTIONS["precision"]))
    check_calibration(out.get("calibration", OPTIONS["calibration"]))
    kf = out.get("keep_float") or ()
    if isinstance(kf, str) or not all(isinstance(k, str) for k in kf):
        raise GlowError(f"keep_float= takes a list of node names or op types, got {kf!r}")
    rq = out.get("requant", OPTIONS["requant"])
    if rq not in REQUANT_MODES:
        raise GlowError(f"requant={rq!r} is not accepted; accepted: {', '.join(map(repr, REQUANT_MODES))}")
    to = out.get("convert_to")
    if to is not None and to not in TARGETS:
        raise GlowError(f"convert_to={to!r} is not accepted; accepted: {', '.join(TARGETS)}")
    return out


def run(fn: Function, options: dict, ask) -> dict | None:
    """The quantization pass of ``compile_graph`` (None when there is nothing to do). ``ask(node)``: None when
    the backend runs the node, else why not."""
    o = {k: options.get(k, d) for k, d in OPTIONS.items()}
    if o["quantize"] is None and o["convert_to"] is None and not quantized(fn):
        return None
    run_pipeline(fn, POST_LOWERING_PIPELINE)
    stats = {}
    if o["quantize"] is not None or quantized(fn):
        stats = quantize_graph(fn, ask, o["quantize"], o["schema"], o["precision"], o["per_channel"],
                               o["calibration"], o["keep_float"], weight_schema=o["weight_schema"],
                               requant=o["requant"])
        run_pipeline(fn, ("dce",))
        stats["requant"] = o["requant"]
    if o["convert_to"] is not None:
        stats["conversion"] = convert(fn, o["convert_to"], ask, o["keep_float"])
    stats["emulated"] = emulate(fn, ask)
    fn.toposort()
    return stats
