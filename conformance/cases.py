"""What a conformance case is: one line of data plus the function that runs it.

A ``Case`` has a stable id (``tier/subject/dtype/variant``, what known-failure patterns and ``--case`` match),
the subject and dtype that place it in the report's matrix, the profiles it belongs to, and ``run(ctx)``,
which compiles and runs it on the backend under test and raises ``CaseFailure`` (a mismatch, with a complete
message), ``Unsupported`` (the backend declined the case: a skip) or anything else (a crash: a failure).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from glow_core.types import FLOATS, INTS


class CaseFailure(AssertionError):
    """The backend's answer is wrong (the message says where and by how much)."""


class Unsupported(Exception):
    """The backend declines this case (is_op_supported / UnsupportedOpError): the case is skipped."""


@dataclass
class Case:
    id: str
    tier: str
    subject: str  # primitive, ONNX op, model or pass: the report's row
    dtype: str  # the report's column
    run: Callable[["Context"], None]
    profiles: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)  # shapes, attributes, seed... (for messages)


@dataclass
class Context:
    """What a case runs against: the backend under test and whether it is the reference interpreter."""

    backend: Any
    is_reference: bool  # True: expectations come from independent oracles, never from the interpreter itself
    rerun: Callable[[str], str] = lambda case_id: f"--case '{case_id}'"
    group_compile: bool = False  # compile all cases of one primitive and dtype as one function (fast path)
    cache: dict = field(default_factory=dict)


def profiles_for(dtype: str, family: str = "", quantized: bool = False) -> tuple[str, ...]:
    """TOSA-style profiles: fp32-core, fp64, fp16, bf16, int-core, bool, storage-formats, quantized-int8."""
    out = []
    if dtype == "float32":
        out.append("fp32-core")
    elif dtype == "float64":
        out.append("fp64")
    elif dtype == "float16":
        out.append("fp16")
    elif dtype == "bfloat16":
        out.append("bf16")
    elif dtype in INTS:
        out.append("int-core" if dtype in ("int8", "int16", "int32", "int64", "uint8") else "int-extended")
    elif dtype == "bool":
        out.append("int-core")
    elif dtype not in FLOATS:
        out.append("storage-formats")
    if quantized:
        out.append("quantized-int8")
    return tuple(out)


PROFILES = ("fp32-core", "fp16", "bf16", "fp64", "int-core", "int-extended", "quantized-int8", "storage-formats",
            "models", "memory", "passes", "negative", "partition")
