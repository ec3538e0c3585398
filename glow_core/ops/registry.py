"""The two declarative registries: primitives and high-level (ONNX) ops.

A *primitive* is one of the small closed set every backend implements. Its
``PrimitiveDef`` gives its inputs, attributes with defaults, accepted dtypes,
shape/dtype rule (``infer``) and documentation; its reference kernel lives in
``glow_interpreter.kernels`` under the same name.

A *high-level op* is an ONNX op type. Its ``OpDef`` gives the lowering into
primitives (a Python function over a ``Builder``) or, for an *extended op*, a
numpy kernel plus the reason it stays whole. Attribute defaults come from
ONNX's own schema for the model's opset version.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import ShapeError, UnsupportedOpError
from ..types import TensorType

REQUIRED = object()


@dataclass
class PrimitiveDef:
    """One primitive: the contract between the compiler and every backend."""

    name: str
    family: str  # elementwise | cast | matmul | conv | pool | reduce | movement | index
    inputs: tuple[str, ...]
    attrs: dict[str, Any]
    dtypes: tuple[str, ...]  # accepted dtypes of the first input
    infer: Callable[..., list[TensorType]]
    doc: str
    variadic: bool = False
    optional_inputs: int = 0

    def normalize_attrs(self, attrs: dict, where: str) -> dict:
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


@dataclass
class OpDef:
    """One high-level op: an ONNX op type with its lowering or extended-op kernel."""

    name: str
    lower: Callable | None = None
    kernel: Callable | None = None  # extended ops: numpy implementation (arrays, **attrs) -> arrays
    infer: Callable | None = None  # extended ops: (input types, attrs, const values) -> out types
    const_inputs: tuple[int, ...] = ()  # inputs whose *values* determine shapes
    extended_reason: str = ""
    doc: str = ""
    dtypes: tuple[str, ...] | None = None
    domain: str = ""

    @property
    def is_extended(self) -> bool:
        return self.lower is None


PRIMITIVES: dict[str, PrimitiveDef] = {}
OPS: dict[str, OpDef] = {}


def primitive(name, family, inputs, dtypes, infer, doc, attrs=None, variadic=False, optional_inputs=0):
    """Register a primitive (called once per primitive from ``primitives.py``)."""
    if name in PRIMITIVES:
        raise ValueError(f"primitive {name} defined twice")
    PRIMITIVES[name] = PrimitiveDef(name, family, tuple(inputs), dict(attrs or {}), tuple(dtypes), infer,
                                    doc, variadic, optional_inputs)
    return PRIMITIVES[name]


def onnx_op(*names, const_inputs=(), doc="", dtypes=None):
    """Decorator registering the lowering of one or more ONNX op types."""
    def deco(fn):
        for n in names:
            if n in OPS:
                raise ValueError(f"op {n} defined twice")
            OPS[n] = OpDef(n, lower=fn, const_inputs=tuple(const_inputs), doc=doc or (fn.__doc__ or "").strip(),
                           dtypes=dtypes)
        return fn
    return deco


def extended_op(name, reason, infer=None, const_inputs=(), doc=""):
    """Decorator registering an extended op: a numpy kernel kept whole, with the reason why."""
    def deco(fn):
        if name in OPS:
            raise ValueError(f"op {name} defined twice")
        OPS[name] = OpDef(name, kernel=fn, infer=infer, const_inputs=tuple(const_inputs),
                          extended_reason=reason, doc=doc or (fn.__doc__ or "").strip())
        return fn
    return deco


def _load():
    from . import primitives  # noqa: F401  (registers primitives)
    from . import onnx_ops  # noqa: F401  (registers ONNX ops)


def get_primitive(name: str) -> PrimitiveDef | None:
    _load()
    return PRIMITIVES.get(name)


def get_op(name: str) -> OpDef | None:
    _load()
    return OPS.get(name)


def is_primitive(name: str) -> bool:
    return get_primitive(name) is not None


def infer_types(op: str, in_types: list[TensorType], attrs: dict, node=None) -> list[TensorType] | None:
    """Output types of ``op`` for these input types and attributes (None when unknown)."""
    p = get_primitive(op)
    if p is not None:  # attributes named _x are backend annotations (e.g. a fused activation), not semantics
        return p.infer(in_types, **{k: v for k, v in attrs.items() if not k.startswith("_")})
    d = get_op(op)
    if d is None:
        raise UnsupportedOpError(f"unknown op '{op}'" + (f" (node '{node.name}')" if node is not None else ""))
    if node is None:
        return None
    from ..builder import infer_node_types
    return infer_node_types(node)
