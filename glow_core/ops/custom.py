"""Custom operators: a vendor's own ONNX domain (Glow's CustomOp; ONNX custom domains).

``custom_op(domain, op_type, shape_rule, reference, ...)`` registers one operator with its attributes and their
defaults, its shape/dtype rule and its numpy reference. A model using it imports (the importer accepts every
registered domain), runs on the interpreter (the reference), is kept whole (never lowered) so that it reaches a
backend whose ``is_op_supported`` accepts its op type, and the conformance suite's ops tier generates cases for
it from the same record (``cases``).
"""
from __future__ import annotations

from typing import Callable

from ..errors import GlowError, ShapeError
from ..types import DTYPES, NUMERIC, TensorType
from .registry import OPS, OpDef, register_op

RESERVED_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.training")


def custom_op(domain: str, op_type: str, shape_rule: Callable, reference: Callable, *, attrs: dict | None = None,
              dtypes=NUMERIC, doc: str = "", cases=(), foldable: bool = True) -> OpDef:
    """Register operator ``op_type`` of the vendor's ONNX domain ``domain``.

    - ``shape_rule(input_types, **attrs) -> list[TensorType]`` (or one TensorType): output types from the input
      types (None for a missing optional input); raise ``glow_core.errors.ShapeError`` for inputs it refuses;
    - ``reference(*arrays, **attrs) -> array or tuple of arrays``: the numpy semantics (the interpreter runs it,
      constant folding evaluates it, conformance compares with it);
    - ``attrs``: attribute name -> default (``glow_core.ops.registry.REQUIRED`` for one the node must give);
    - ``dtypes``: the accepted dtypes of the first input;
    - ``cases``: conformance cases, one line each: ``(variant, [input shapes], {attributes})``, run for every
      accepted dtype (inputs seeded random values of the case's dtype);
    - ``foldable=False`` keeps a node with constant inputs from being evaluated at compile time (random or
      stateful ops).
    Returns the op's record (``glow_core.ops.registry.OpDef``)."""
    if not domain or domain in RESERVED_DOMAINS:
        raise GlowError(f"custom op {op_type}: domain {domain!r} is reserved for ONNX; a custom op needs a domain "
                        f"of its own (e.g. 'com.acme')")
    if not op_type.isidentifier():
        raise GlowError(f"custom op {domain}.{op_type}: the op type must be an identifier")
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise GlowError(f"custom op {domain}.{op_type}: unknown dtype(s) {bad}; accepted: {', '.join(DTYPES)}")
    attrs = dict(attrs or {})
    for variant, shapes, case_attrs in cases:
        unknown = sorted(set(case_attrs) - set(attrs))
        if unknown:
            raise GlowError(f"custom op {domain}.{op_type}: case '{variant}' sets unknown attribute(s) {unknown}")
    accepted = tuple(dtypes)

    def rule(b, *inputs, **node_attrs):
        first = next((v for v in inputs if v is not None), None)
        if first is not None and first.dtype.name not in accepted:
            raise ShapeError(f"{b.where}: dtype {first.dtype.name} is not accepted by {domain}.{op_type}; "
                             f"accepted: {', '.join(accepted)}")
        out = shape_rule([None if v is None else v.type for v in inputs], **node_attrs)
        return [out] if isinstance(out, TensorType) else list(out)

    return register_op(OpDef(op_type, kernel=reference, shape_rule=rule, domain=domain, attrs=attrs,
                             dtypes=accepted, cases=tuple(cases), foldable=foldable,
                             extended_reason=f"custom op of domain '{domain}': kept whole for the backend that "
                                             f"implements it", doc=doc or (reference.__doc__ or "").strip()))


def custom_ops() -> list[OpDef]:
    """Every registered custom op (kept whole, of a vendor's domain), by domain and name."""
    return sorted((d for d in OPS.values() if d.domain and d.is_extended), key=lambda d: (d.domain, d.name))
