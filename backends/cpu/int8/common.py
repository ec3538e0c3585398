"""The int8 engine's records: the target (int32 lanes per vector, register budget), the planned kernel, the packed
constants of a conv or matmul, the requantization of an output, and the checks every planner shares."""
from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np

from glow_core.errors import GlowError

from ..host import feature_flags
#: Least multiply-adds (or elements x 64 for elementwise kernels) for which a kernel opens an OpenMP region.
PARALLEL_MIN_MACS = 1 << 20
#: The integer types the engine reads and writes, with their C type and range.
QTYPES = {"int8": ("int8_t", -128, 127), "uint8": ("uint8_t", 0, 255), "int16": ("int16_t", -32768, 32767),
          "int32": ("int32_t", -2 ** 31, 2 ** 31 - 1)}


class Int8EngineError(GlowError):
    """A malformed int8 engine request (dtype, offset, multiplier or shape outside what the engine accepts)."""


@dataclass(frozen=True)
class QTarget:
    """What the kernels are laid out for: int32 lanes per vector (16: AVX-512 VNNI; 8: AVX-VNNI, AVX2 or the
    portable C path) and the vector registers the tiles may use. The C picks the instructions from the
    compiler's macros; the layout (and so the packed weights) depends only on ``lanes``. ``amx``: the CPU has
    AMX-INT8 tiles, which convs of enough channels use (tdpbsud) with the VNNI tiles as the run-time fallback
    (their weights are packed for both)."""

    name: str
    lanes: int
    registers: int
    amx: bool = False


@lru_cache(maxsize=None)
def host_qtarget() -> QTarget:
    """The machine compiling with -march=native."""
    words = feature_flags()
    if {"avx512_vnni", "avx512bw", "avx512vl"} <= words:
        if {"amx_tile", "amx_int8"} <= words:
            return TARGETS["avx512vnni-amx"]
        return QTarget("avx512vnni", 16, 32)
    if "avx_vnni" in words:
        return QTarget("avxvnni", 8, 16)
    if "avx2" in words:
        return QTarget("avx2", 8, 16)
    return QTarget("portable-" + (platform.machine() or "cpu"), 8, 16)


#: Targets by name for studies and tests (``target=`` of every planner).
TARGETS = {"avx512vnni": QTarget("avx512vnni", 16, 32), "avx512vnni-amx": QTarget("avx512vnni-amx", 16, 32, True),
           "avxvnni": QTarget("avxvnni", 8, 16),
           "avx2": QTarget("avx2", 8, 16), "portable": QTarget("portable", 8, 16)}


@dataclass(frozen=True)
class QConstants:
    """A conv's or matmul's constants as the kernel reads them (compile time, numpy): packed int8 weights,
    int32 corrections (bias and every constant term of the zero points; then the weight offsets when one is not
    zero) and float32 multipliers, one per output channel."""

    weights: np.ndarray
    corrections: np.ndarray
    multipliers: np.ndarray


@dataclass(frozen=True)
class Int8Kernel:
    """A planned int8 kernel: C ``source`` defining ``static void NAME(...)`` (signature by ``kind``, see
    int8_engine), the bytes of its @scratch operand, ``pack(w, bias) -> QConstants`` for conv/matmul (None
    otherwise), a one-line ``describe`` for ``glowc dump`` and the multiply-adds (or elements) it does."""

    name: str
    kind: str
    source: str
    scratch_bytes: int
    describe: str
    work: int
    pack: Callable | None = None


@dataclass(frozen=True)
class Requant:
    """How an int32 accumulator becomes the output: y = clamp(rint((float)acc * m) + offset, lo, hi), rint
    half-to-even, m float32 (per channel for per-channel weights); ``lo``/``hi`` are the type's range tightened by
    a fused activation. With ``dtype`` "int32" the accumulator is stored as is (ConvInteger / MatMulInteger)."""

    dtype: str
    offset: int = 0
    lo: int | None = None
    hi: int | None = None

    def bounds(self) -> tuple[int, int]:
        _, tlo, thi = QTYPES[self.dtype]
        lo = tlo if self.lo is None else self.lo
        hi = thi if self.hi is None else self.hi
        if not tlo <= lo <= hi <= thi:
            raise Int8EngineError(f"int8 engine: clamp [{lo}, {hi}] must lie within {self.dtype}'s range "
                                  f"[{tlo}, {thi}] with lo <= hi")
        return lo, hi

    def float_bounds(self) -> tuple[str, str]:
        """The clamp on the float value before rounding, as C literals: [lo - offset, hi - offset]."""
        lo, hi = self.bounds()
        return f"{float(lo - self.offset)!r}", f"{float(hi - self.offset)!r}"


@dataclass(frozen=True)
class ResidualAdd:
    """A qadd fused into a conv's epilogue: Y = clamp(rint((C - C.offset) * conv_multiplier + (B - b_offset) *
    b_multiplier) + y.offset) over the conv's requantized output C (the qadd's input ``conv_slot``, 0 or 1) and
    B (``b_dtype``), both multipliers scale / y's scale, with the qadd kernel's own arithmetic."""

    b_dtype: str
    b_offset: int
    conv_multiplier: float
    b_multiplier: float
    y: Requant
    conv_slot: int = 0


def check_name(name: str):
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name):
        raise Int8EngineError(f"int8 engine: kernel name {name!r} is not a C identifier ([A-Za-z_][A-Za-z0-9_]*, "
                              f"at most 64 characters)")


def check_dtype(what: str, dtype: str, accepted: tuple[str, ...]):
    if dtype not in accepted:
        raise Int8EngineError(f"int8 engine: {what} dtype {dtype!r} is not accepted; accepted: {', '.join(accepted)}")


def check_offset(what: str, offset: int, dtype: str):
    _, lo, hi = QTYPES[dtype]
    if int(offset) != offset or not lo <= offset <= hi:
        raise Int8EngineError(f"int8 engine: {what} offset {offset!r} must be an integer in {dtype}'s range "
                              f"[{lo}, {hi}]")


def per_channel(what: str, value, count: int, dtype) -> np.ndarray:
    """A scalar or a [count] vector of ``value`` as a [count] array of ``dtype`` (a per-tensor value repeated)."""
    a = np.asarray(value)
    if a.ndim == 0:
        a = np.full(count, a)
    if a.shape != (count,):
        raise Int8EngineError(f"int8 engine: {what} must be a scalar or have {count} entries (one per output "
                              f"channel), got shape {a.shape}")
    out = a.astype(dtype)
    if np.dtype(dtype).kind == "f" and not np.all(np.isfinite(out)):
        raise Int8EngineError(f"int8 engine: {what} must be finite")
    if np.dtype(dtype).kind != "f" and not np.array_equal(out, a):
        raise Int8EngineError(f"int8 engine: {what} must be integers, got {a.dtype} values")
    return out


#: Planner choices a study may force (``force=`` of plan_qconv and plan_qmatmul): the register tile, and whether
#: a conv may use AMX tiles (False: the VNNI tiles only), whether a depthwise conv may run direct (False: the planes),
#: whether a parallel 1x1 conv splits by pixel chunks (False: the transform, a barrier, then the tiles).
FORCIBLE = ("mr", "nv", "amx", "dwdirect", "pxsplit")


def check_weighted(op: str, name: str, x_dtype: str, x_offset: int, w_dtype: str, y: Requant, force) -> dict:
    """The checks plan_qconv and plan_qmatmul share before any shape is known: the kernel name, the input,
    weight and output dtypes, the input offset, the output's clamp and the forced choices (returned as a dict)."""
    check_name(name)
    check_dtype(f"{op} input", x_dtype, ("int8", "uint8"))
    check_dtype(f"{op} weight", w_dtype, ("int8", "uint8"))
    check_dtype(f"{op} output", y.dtype, ("int8", "uint8", "int32"))
    check_offset(f"{op} input", x_offset, x_dtype)
    y.bounds()
    force = dict(force or {})
    if set(force) - set(FORCIBLE):
        raise Int8EngineError(f"int8 engine: force {force} has unknown keys; accepted: {', '.join(FORCIBLE)}")
    return force


@dataclass(frozen=True)
class WeightTerms:
    """A conv's or matmul's zero-point algebra over ``count`` output channels: the input offset of the unsigned
    input bytes (``xo_u``; int8 inputs are flipped by ``flip`` = 128), the weights' shift to int8 (``wshift`` =
    128 for uint8 weights) and their signed offsets ``wo_s`` [count], the float32 multipliers [count], and
    whether a weight offset is non-zero (``xsum``: the kernel needs per-pixel or per-row input sums)."""

    op: str
    w_dtype: str
    flip: int
    xo_u: int
    wshift: int
    wo_s: np.ndarray
    mult: np.ndarray

    @property
    def xsum(self) -> bool:
        return bool(np.any(self.wo_s != 0))

    @classmethod
    def of(cls, op: str, x_dtype: str, x_offset: int, w_dtype: str, w_offset, multiplier, count: int):
        wo = per_channel("weight offset", w_offset, count, np.int64)
        for v in set(wo.tolist()):
            check_offset(f"{op} weight", v, w_dtype)
        flip = 128 if x_dtype == "int8" else 0
        wshift = 128 if w_dtype == "uint8" else 0
        return cls(op, w_dtype, flip, x_offset + flip, wshift, wo - wshift,
                   per_channel("multiplier", multiplier, count, np.float32))

    def signed(self, weights, shape, given_shape) -> np.ndarray:
        """The weights (of ``given_shape``) as int64 values of int8's range, reshaped to ``shape``."""
        wt = np.asarray(weights)
        if wt.shape != tuple(given_shape):
            raise Int8EngineError(f"int8 engine: {self.op} weights of shape {wt.shape}, expected {tuple(given_shape)}")
        wt = wt.reshape(shape).astype(np.int64) - self.wshift
        if wt.min(initial=0) < -128 or wt.max(initial=0) > 127:
            raise Int8EngineError(f"int8 engine: {self.op} weights outside {self.w_dtype}'s range")
        return wt

    def bias(self, bias) -> np.ndarray:
        """The bias as int64 [count] (zeros when None)."""
        count = self.wo_s.size
        return np.zeros(count, np.int64) if bias is None else per_channel("bias", bias, count, np.int64)


def c_float(v: float) -> str:
    """A float32 as an exact C literal."""
    return np.float32(v).item().hex() + "f"


def threads_for(work: int, num_threads: int) -> int:
    """Threads a kernel of ``work`` multiply-adds opens: 1 below PARALLEL_MIN_MACS."""
    if num_threads < 1:
        raise Int8EngineError(f"int8 engine: num_threads must be >= 1, got {num_threads}")
    return num_threads if work >= PARALLEL_MIN_MACS else 1
