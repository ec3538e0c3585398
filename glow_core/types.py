"""Element types and tensor types.

A ``DType`` is one of a closed set of element types (the names are ONNX-like and
stable: they appear in the IR dump, in conformance case ids and in vendor code).
Low-precision floats (bfloat16, float8, float6, float4) and int4/uint4/int2/uint2 use ml_dtypes'
numpy types. A ``TensorType`` is a dtype, a static shape and, for quantized
types, a scale and offset with ``real = (q - offset) * scale``.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import ml_dtypes
import numpy as np
from onnx import TensorProto

from .errors import GlowError, ShapeError


@dataclass(frozen=True)
class DType:
    """One element type: its stable name, numpy dtype, ONNX code and class."""

    name: str
    np: np.dtype
    onnx: int
    kind: str  # "float" | "int" | "uint" | "bool"

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.name


def _d(name, npd, onnx_code, kind):
    return DType(name, np.dtype(npd), onnx_code, kind)


_ALL = [
    _d("float32", np.float32, TensorProto.FLOAT, "float"),
    _d("float16", np.float16, TensorProto.FLOAT16, "float"),
    _d("bfloat16", ml_dtypes.bfloat16, TensorProto.BFLOAT16, "float"),
    _d("float64", np.float64, TensorProto.DOUBLE, "float"),
    _d("float8e4m3fn", ml_dtypes.float8_e4m3fn, TensorProto.FLOAT8E4M3FN, "float"),
    _d("float8e4m3fnuz", ml_dtypes.float8_e4m3fnuz, TensorProto.FLOAT8E4M3FNUZ, "float"),
    _d("float8e5m2", ml_dtypes.float8_e5m2, TensorProto.FLOAT8E5M2, "float"),
    _d("float8e5m2fnuz", ml_dtypes.float8_e5m2fnuz, TensorProto.FLOAT8E5M2FNUZ, "float"),
    _d("float4e2m1", ml_dtypes.float4_e2m1fn, TensorProto.FLOAT4E2M1, "float"),
    _d("int8", np.int8, TensorProto.INT8, "int"),
    _d("uint8", np.uint8, TensorProto.UINT8, "uint"),
    _d("int16", np.int16, TensorProto.INT16, "int"),
    _d("uint16", np.uint16, TensorProto.UINT16, "uint"),
    _d("int32", np.int32, TensorProto.INT32, "int"),
    _d("uint32", np.uint32, TensorProto.UINT32, "uint"),
    _d("int64", np.int64, TensorProto.INT64, "int"),
    _d("uint64", np.uint64, TensorProto.UINT64, "uint"),
    _d("int4", ml_dtypes.int4, TensorProto.INT4, "int"),
    _d("uint4", ml_dtypes.uint4, TensorProto.UINT4, "uint"),
    _d("int2", ml_dtypes.int2, TensorProto.INT2, "int"),
    _d("uint2", ml_dtypes.uint2, TensorProto.UINT2, "uint"),
    _d("float8e8m0", ml_dtypes.float8_e8m0fnu, TensorProto.FLOAT8E8M0, "float"),
    _d("float6e2m3", ml_dtypes.float6_e2m3fn, TensorProto.FLOAT6E2M3, "float"),
    _d("float6e3m2", ml_dtypes.float6_e3m2fn, TensorProto.FLOAT6E3M2, "float"),
    _d("bool", np.bool_, TensorProto.BOOL, "bool"),
]

DTYPES: dict[str, DType] = {d.name: d for d in _ALL}
_BY_NP = {d.np: d for d in _ALL}
_BY_ONNX = {d.onnx: d for d in _ALL}

float32 = DTYPES["float32"]
float16 = DTYPES["float16"]
bfloat16 = DTYPES["bfloat16"]
float64 = DTYPES["float64"]
int8 = DTYPES["int8"]
uint8 = DTYPES["uint8"]
int32 = DTYPES["int32"]
int64 = DTYPES["int64"]
bool_ = DTYPES["bool"]

#: The dtypes numerical primitives accept (not the storage-only float8/float4/int4 ones).
FLOATS = ("float32", "float16", "bfloat16", "float64")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
INTS = SIGNED + UNSIGNED
NUMERIC = FLOATS + INTS
ALL = tuple(DTYPES)
STORAGE_ONLY = tuple(n for n in DTYPES if n not in NUMERIC and n != "bool")


def dtype(x) -> DType:
    """Return the ``DType`` for a name, numpy dtype, ONNX code, array or DType."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        if x in DTYPES:
            return DTYPES[x]
        raise GlowError(f"unknown dtype {x!r}; accepted: {', '.join(DTYPES)}")
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        if int(x) in _BY_ONNX:
            return _BY_ONNX[int(x)]
        name = TensorProto.DataType.Name(int(x)) if int(x) in TensorProto.DataType.values() else str(x)
        raise GlowError(f"ONNX element type {name} is not supported; accepted: {', '.join(DTYPES)}")
    if isinstance(x, np.ndarray):
        x = x.dtype
    try:
        npd = np.dtype(x)
    except TypeError:
        raise GlowError(f"cannot interpret {x!r} as a dtype") from None
    if npd in _BY_NP:
        return _BY_NP[npd]
    raise GlowError(f"numpy dtype {npd} is not supported; accepted: {', '.join(DTYPES)}")


#: Highest tensor rank (numpy's own limit is 64; no network comes near it).
MAX_RANK = 32


@dataclass(frozen=True)
class TensorType:
    """A dtype with a static shape, and a scale/offset when quantized."""

    dtype: DType
    shape: tuple[int, ...]
    scale: float | None = None
    offset: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", dtype(self.dtype))
        if len(self.shape) > MAX_RANK:
            raise ShapeError(f"a tensor of rank {len(self.shape)} (shape {list(self.shape[:8])}...): ranks up to "
                             f"{MAX_RANK} are accepted")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def is_quantized(self) -> bool:
        return self.scale is not None

    def with_shape(self, shape) -> "TensorType":
        return TensorType(self.dtype, tuple(shape), self.scale, self.offset)

    def __str__(self) -> str:
        dims = " x ".join(str(s) for s in self.shape)
        q = f"[S:{self.scale:.9g} O:{self.offset}]" if self.is_quantized else ""
        return f"{self.dtype.name}{q}<{dims}>"


def tensor_type_of(arr: np.ndarray) -> TensorType:
    """The TensorType of a numpy array."""
    return TensorType(dtype(arr.dtype), arr.shape)
