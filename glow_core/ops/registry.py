"""The two declarative registries: primitives and high-level (ONNX and custom) ops.

A *primitive* is one of the small closed set every backend implements. Its ``PrimitiveDef`` is the one
record of everything known about it: inputs, attributes with defaults, accepted dtypes, shape/dtype rule,
flags, the conformance tolerance class, documentation and the reference kernel. The interpreter, the CPU
backend, the conformance suite and ``vendor_guide/primitives.md`` derive from it.

A *high-level op* is an ONNX op type (or a vendor's custom op). Its ``OpDef`` gives the lowering into
primitives (a Python function over the ``Builder`` it is handed) or, for an *extended op* kept whole, a
numpy kernel with its shape rule and the reason it is not lowered. Attribute defaults of ONNX ops come from
ONNX's own schema for the model's opset version; custom ops declare theirs.

This module holds the records and how to register and evaluate them; the records themselves are registered
by the modules of ``glow_core.ops.primitives`` and ``glow_core.ops.onnx_ops`` (importing ``glow_core.ops``
loads them all).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import ml_dtypes
import numpy as np

from ..errors import GlowError, ShapeError
from ..types import TensorType

REQUIRED = object()

#: Low-precision floats: a primitive that computes (not one that only moves data) runs on them in float32
#: and rounds its results once to the result type.
LOW_FLOATS = frozenset(np.dtype(t) for t in (ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn,
                                              ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
                                              ml_dtypes.float8_e5m2fnuz, ml_dtypes.float4_e2m1fn))


@dataclass
class PrimitiveDef:
    """One primitive: the contract between the compiler and every backend."""

    name: str
    family: str  # the section of primitives.md: elementwise | cast | matmul | conv | pool | reduce | movement | index
    inputs: tuple[str, ...]
    attrs: dict[str, Any]
    dtypes: tuple[str, ...]  # accepted dtypes of the first input
    shape_rule: Callable[..., list[TensorType]]  # (input types, **attrs) -> output types; raises ShapeError
    kernel: Callable  # the reference kernel: (*arrays, **attrs) -> array or tuple of arrays
    doc: str
    tolerance: str  # the conformance suite's tolerance class (a key of glow_conformance.checker.TOLERANCES)
    variadic: bool = False
    elementwise: bool = False  # data-parallel: output element i depends only on input elements i
    inplace: bool = False  # may write its output over an input buffer of the same size (IR buffer sharing)
    movement: bool = False  # only moves, selects, reinterprets or converts elements: computed in the operands'
    #                         own dtypes (never in float32) and runs on storage-only 1-byte types
    exact: bool = False  # the result must be bit-exact on every dtype
    quantized: str = ""  # how it treats quantized operand types (scale/offset), see QUANTIZED
    #: State updates: ``(x, *other inputs, **attrs) -> None`` applying the primitive to input 0's array in place.
    #: Its presence says the output may be input 0's own buffer (an ``@inout`` operand: a persistent
    #: placeholder updated in place, ``glow_core.ir``); the kernel then reads input 0 only where it does not
    #: write. The reference kernel must equal a copy of x followed by this update.
    update_kernel: Callable | None = None

    def normalize_attrs(self, attrs: dict, where: str) -> dict:
        """``attrs`` with defaults filled in; ShapeError naming ``where`` for unknown or missing ones."""
        out = {}
        for k in attrs:
            if k not in self.attrs:
                raise ShapeError(f"{where}: primitive '{self.name}' has no attribute '{k}'; "
                                 f"it takes {sorted(self.attrs) or 'none'}")
        for k, default in self.attrs.items():
            if k in attrs:
                out[k] = attrs[k]
            elif default is REQUIRED:
                raise ShapeError(f"{where}: primitive '{self.name}' needs attribute '{k}'")
            else:
                out[k] = default
        return out

    def out_types(self, in_types: list[TensorType], attrs: dict) -> list[TensorType]:
        """Output types for these input types and attributes (keys starting with ``_`` are backend
        annotations, such as a fused activation, not semantics)."""
        outs = self.shape_rule(list(in_types), **{k: v for k, v in attrs.items() if not k.startswith("_")})
        return outs if self.quantized == "own" else _qparams(self.quantized == "keep", in_types, outs)

    def bind(self, attrs: dict, in_dtypes, out_dtypes) -> Callable[..., list[np.ndarray]]:
        """The reference kernel with fixed attributes, for operands of ``in_dtypes``.

        The one dtype rule shared by all kernels: low-precision float operands of a primitive that computes
        are computed in float32 and the results rounded once to ``out_dtypes``."""
        kernel = self.kernel
        upcast = not self.movement and any(np.dtype(d) in LOW_FLOATS for d in in_dtypes)
        out_dtypes = [np.dtype(d) for d in out_dtypes]

        def run(*arrays):
            if upcast:
                arrays = [a.astype(np.float32) if a.dtype in LOW_FLOATS else a for a in arrays]
            out = kernel(*arrays, **attrs)
            outs = out if isinstance(out, tuple) else (out,)
            return [o if o.dtype == d else o.astype(d) for o, d in zip(map(np.asarray, outs), out_dtypes)]
        return run

    def run(self, arrays, attrs: dict, out_dtypes=None) -> list[np.ndarray]:
        """Evaluate once (see ``bind``) on numpy arrays; ``out_dtypes`` defaults to the shape rule's."""
        arrays = [np.asarray(a) for a in arrays]
        if out_dtypes is None:
            types = self.out_types([TensorType(a.dtype, a.shape) for a in arrays], attrs)
            out_dtypes = [t.dtype.np for t in types]
        with np.errstate(all="ignore"):
            return self.bind(attrs, [a.dtype for a in arrays], out_dtypes)(*arrays)


@dataclass
class OpDef:
    """One high-level op: an ONNX (or custom-domain) op type with its lowering, or kept whole with its kernel."""

    name: str
    lower: Callable | None = None  # (builder, *inputs, **attrs) -> output Value(s)
    kernel: Callable | None = None  # kept-whole ops: numpy reference (*arrays, **attrs) -> array(s)
    shape_rule: Callable | None = None  # kept-whole ops: (builder, *inputs, **attrs) -> output TensorTypes
    const_inputs: tuple[int, ...] = ()  # inputs whose *values* determine shapes
    extended_reason: str = ""  # why a kept-whole op is not lowered
    doc: str = ""
    domain: str = ""  # "" for ai.onnx; a vendor's own domain for custom ops; a LOWERED_DOMAINS one (name qualified)
    attrs: dict[str, Any] = field(default_factory=dict)  # custom and LOWERED_DOMAINS ops: attribute defaults
    #                                                       (ONNX ops: the schema's)
    dtypes: tuple[str, ...] | None = None  # custom ops: accepted dtypes of the first input
    cases: tuple = ()  # custom ops: conformance case specs (see glow_core.ops.custom)
    shape_only: bool = False  # the value depends only on the static input shapes: always a constant
    foldable: bool = True  # False for ops whose value must not be computed at compile time (random, stateful)
    #: output index -> input index: a backend keeping the op whole computes that output correctly in the input's own
    #: buffer (a KV cache updated in place); the IR then gives a state's update that buffer instead of a copy
    in_place: dict[int, int] = field(default_factory=dict)

    @property
    def is_extended(self) -> bool:
        """Kept whole (a numpy kernel, no lowering): extended and custom ops."""
        return self.lower is None

    def run(self, arrays, attrs: dict) -> list[np.ndarray]:
        """Evaluate a kept-whole op's kernel once (None in the places of missing optional inputs)."""
        with np.errstate(all="ignore"):
            out = self.kernel(*arrays, **attrs)
        return [np.asarray(x) for x in (out if isinstance(out, (tuple, list)) else [out])]


#: The values of ``PrimitiveDef.quantized``: how a primitive treats operands of quantized types.
QUANTIZED = {
    "": "computes on the stored integers; its results are plain (unquantized) types",
    "keep": "only moves, selects or compares stored values: results of the operands' dtype keep the scale and "
            "offset the quantized operands share (plain when they disagree)",
    "own": "a quantized primitive: its attributes say how it reads its operands and give its result's type",
}


def _qparams(keep: bool, in_types, outs):
    """Output types with the quantization parameters a non-``own`` primitive gives them (see QUANTIZED)."""
    q = {(t.dtype, t.scale, t.offset) for t in in_types if t is not None and t.is_quantized}
    by_dtype = {}
    for dt, scale, offset in q:
        by_dtype[dt] = (scale, offset) if dt not in by_dtype else None
    out = []
    for t in outs:
        params = by_dtype.get(t.dtype) if keep else None
        if params is None and not t.is_quantized:
            out.append(t)
        else:
            out.append(TensorType(t.dtype, t.shape, *(params or (None, None))))
    return out


PRIMITIVES: dict[str, PrimitiveDef] = {}
OPS: dict[str, OpDef] = {}


def primitive(name, family, inputs, dtypes, shape_rule, kernel, doc, *, tolerance, attrs=None, variadic=False,
              elementwise=False, inplace=None, movement=False, exact=False, quantized=None,
              update_kernel=None) -> PrimitiveDef:
    """Register a primitive: its record, with its reference kernel (``inplace`` defaults to ``elementwise``,
    ``quantized`` to "keep" for movement primitives, else "")."""
    if name in PRIMITIVES:
        raise GlowError(f"primitive {name} is defined twice")
    if not callable(kernel):
        raise GlowError(f"primitive {name}: the reference kernel must be a function, got {kernel!r}")
    quantized = ("keep" if movement else "") if quantized is None else quantized
    if quantized not in QUANTIZED:
        raise GlowError(f"primitive {name}: quantized={quantized!r}; accepted: {', '.join(map(repr, QUANTIZED))}")
    PRIMITIVES[name] = PrimitiveDef(name, family, tuple(inputs), dict(attrs or {}), tuple(dtypes), shape_rule,
                                    kernel, doc, tolerance, variadic, elementwise,
                                    elementwise if inplace is None else inplace, movement, exact, quantized,
                                    update_kernel)
    return PRIMITIVES[name]


def register_op(d: OpDef) -> OpDef:
    """Add a high-level op record; a name is registered once, across all domains."""
    if d.name in OPS or d.name in PRIMITIVES:
        other = OPS.get(d.name)
        where = f"in domain '{other.domain or 'ai.onnx'}'" if other else "as a primitive"
        raise GlowError(f"op {d.name} is already defined {where}; give the new op a name of its own")
    OPS[d.name] = d
    return d


def qualified(domain: str, op_type: str) -> str:
    """The registry name of ``op_type`` of ``domain``: plain for ai.onnx and for custom ops, ``domain.op_type``
    for the lowered ops of another runtime's domain (``com.microsoft.RotaryEmbedding`` is not ONNX's)."""
    return f"{domain}.{op_type}" if domain in LOWERED_DOMAINS else op_type


#: Domains other than ai.onnx whose ops lower to primitives (onnxruntime's contrib ops). Their records are
#: named ``domain.op_type`` (``qualified``) and declare their attributes with defaults, as custom ops do.
LOWERED_DOMAINS = ("com.microsoft",)


def onnx_op(*names, const_inputs=(), doc="", shape_only=False, domain="", attrs=None, in_place=None):
    """Decorator registering the lowering of one or more ONNX op types. ``domain`` (one of LOWERED_DOMAINS)
    registers ops of that domain as ``domain.name`` with their attribute defaults ``attrs`` (there is no ONNX
    schema to take them from). ``in_place``: see ``OpDef.in_place``."""
    if domain and domain not in LOWERED_DOMAINS:
        raise GlowError(f"onnx_op: domain {domain!r} is not one whose ops lower ({', '.join(LOWERED_DOMAINS)}); "
                        f"a vendor's domain registers custom ops (glow_core.ops.custom_op)")

    def deco(fn):
        for n in names:
            register_op(OpDef(qualified(domain, n), lower=fn, const_inputs=tuple(const_inputs),
                              doc=doc or (fn.__doc__ or "").strip(), shape_only=shape_only, domain=domain,
                              attrs=dict(attrs or {}), in_place=dict(in_place or {})))
        return fn
    return deco


def extended_op(name, reason, shape_rule, const_inputs=(), doc=""):
    """Decorator registering an extended op: a numpy kernel kept whole, its shape rule and the reason."""
    def deco(fn):
        register_op(OpDef(name, kernel=fn, shape_rule=shape_rule, const_inputs=tuple(const_inputs),
                          extended_reason=reason, doc=doc or (fn.__doc__ or "").strip()))
        return fn
    return deco


def get_primitive(name: str) -> PrimitiveDef | None:
    return PRIMITIVES.get(name)


def get_op(name: str) -> OpDef | None:
    return OPS.get(name)


def is_primitive(name: str) -> bool:
    return name in PRIMITIVES

