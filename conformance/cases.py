"""What a conformance case is: one line of data plus the function that runs it.

A ``Case`` has a stable id (``tier/subject/dtype/variant``, what known-failure patterns and ``--case`` match),
the subject and dtype that place it in the report's matrix, the profiles it belongs to, and ``run(ctx)``,
which compiles and runs it on the backend under test and raises ``CaseFailure`` (a mismatch, with a complete
message), ``Unsupported`` (the backend declined the case, or the case cannot be judged: a skip with its kind)
or anything else (a crash: a failure).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from glow_core.types import FLOATS, INTS

#: Kinds of skip, as the summary and the report count them.
SKIP_KINDS = {
    "refused": "refused by the backend's is_op_supported",
    "no-memory-regions": "the compiled function exposes no memory regions (memory_regions() is None)",
    "no-oracle": "no independent expectation exists for this case on the reference backend",
}


class CaseFailure(AssertionError):
    """The backend's answer is wrong (the message says where and by how much)."""


class Unsupported(Exception):
    """The case is skipped: ``kind`` is a key of SKIP_KINDS (``refused``: the backend declined it)."""

    def __init__(self, message: str, kind: str = "refused"):
        super().__init__(message)
        self.kind = kind


@dataclass
class Case:
    id: str
    tier: str
    subject: str  # primitive, ONNX op, model or pass: the report's row
    dtype: str  # the report's column
    run: Callable[["Context"], None]
    profiles: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)  # shapes, attributes, group key... (for messages)


def _noop(_phase):
    return None


@dataclass
class Context:
    """What a case runs against: the backend under test, whether it is the reference interpreter, the session
    seed, and the hooks of the process running the case (``phase`` announces "run" before compiled code runs
    and "check" after, so that the time limit of each phase applies; ``answers`` lists every is_op_supported
    answer given during the current case, to tell a refusal from a claimed-then-refused case)."""

    backend: Any
    is_reference: bool  # True: expectations come from independent oracles, never from the interpreter itself
    rerun: Callable[[str], str] = lambda case_id: f"--case '{case_id}'"
    group_compile: bool = False  # compile all cases of one primitive and dtype as one function (fast path)
    seed: int = 0  # --conformance-seed: mixed into every case's inputs
    cache: dict = field(default_factory=dict)
    phase: Callable[[str], None] = _noop
    answers: list = field(default_factory=list)

    def rng(self, case_id: str) -> np.random.Generator:
        """The input generator of ``case_id`` in this session (a function of the id and the session seed)."""
        return np.random.default_rng(case_seed(case_id, self.seed))


def case_seed(case_id: str, session_seed: int) -> int:
    """The seed of one case's inputs: the case id's CRC mixed with the session seed (reported in messages)."""
    return int(np.random.SeedSequence([zlib.crc32(case_id.encode()), int(session_seed)]).generate_state(1)[0])


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


PROFILES = ("fp32-core", "fp16", "bf16", "fp64", "int-core", "int-extended", "quantized-int8", "quantized-int16",
            "storage-formats", "models", "memory", "passes", "negative", "partition", "device")
