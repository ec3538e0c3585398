"""C spellings of Glow Kit dtypes: storage type, compute type, load and store expressions.

float16 is stored as ``_Float16``; bfloat16 as ``uint16_t`` with explicit conversions (round to nearest
even). Both compute in float, as the interpreter does. The storage-only float8/float4/int4 types are not
supported by this backend.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CType:
    """How one dtype looks in generated C."""

    storage: str
    compute: str
    load: str  # format with {x}
    store: str  # format with {x}
    is_float: bool
    bits: int
    signed: bool = True

    def ld(self, x: str) -> str:
        return self.load.format(x=x)

    def st(self, x: str) -> str:
        return self.store.format(x=x)


def _same(t, is_float, bits, signed=True):
    return CType(t, t, "{x}", "{x}", is_float, bits, signed)


CTYPES = {
    "float32": _same("float", True, 32),
    "float64": _same("double", True, 64),
    "float16": CType("_Float16", "float", "((float)({x}))", "((_Float16)({x}))", True, 16),
    "bfloat16": CType("uint16_t", "float", "glow_bf16_to_f32({x})", "glow_f32_to_bf16({x})", True, 16),
    "int8": _same("int8_t", False, 8), "int16": _same("int16_t", False, 16),
    "int32": _same("int32_t", False, 32), "int64": _same("int64_t", False, 64),
    "uint8": _same("uint8_t", False, 8, False), "uint16": _same("uint16_t", False, 16, False),
    "uint32": _same("uint32_t", False, 32, False), "uint64": _same("uint64_t", False, 64, False),
    "bool": CType("uint8_t", "uint8_t", "{x}", "(uint8_t)(({x}) != 0)", False, 8, False),
}

INT_LIMITS = {
    "int8": ("INT8_MIN", "INT8_MAX"), "int16": ("INT16_MIN", "INT16_MAX"), "int32": ("INT32_MIN", "INT32_MAX"),
    "int64": ("INT64_MIN", "INT64_MAX"), "uint8": ("0", "UINT8_MAX"), "uint16": ("0", "UINT16_MAX"),
    "uint32": ("0", "UINT32_MAX"), "uint64": ("0", "UINT64_MAX"), "bool": ("0", "1"),
}


#: Storage-only 1-byte types (float8, float6, float4, int4/uint4, int2/uint2): raw bytes to this backend.
BYTE = CType("uint8_t", "uint8_t", "{x}", "{x}", False, 8, False)


def supported(dtype_name: str) -> bool:
    """Whether the backend computes with this dtype (storage-only types are only moved and cast)."""
    return dtype_name in CTYPES


def ctype(dtype_name: str) -> CType:
    return CTYPES.get(dtype_name, BYTE)
