"""Quantization parameters: from a real range [lo, hi] to (dtype, scale, offset), by schema and precision.

Every range is first widened to contain 0, so that the real 0 (zero padding, ReLU) is represented exactly.

- ``asymmetric``: the whole integer range covers [lo, hi]: scale = (hi - lo) / (qmax - qmin), offset =
  round(qmin - lo / scale) (Glow's and onnxruntime's default for activations);
- ``symmetric``: offset 0, scale = max(|lo|, |hi|) / qmax (the range [-qmax, qmax], as onnxruntime's symmetric
  int8 uses -127..127);
- ``symmetric_uint8``: symmetric, but a tensor that is never negative is uint8 with offset 0 and scale hi / 255
  (Glow's SymmetricWithUnsigned); with int16 precision there is no unsigned type and it is ``symmetric``;
- ``power2``: symmetric with the scale rounded up to a power of two (shift-only hardware).

Scales are rounded to float32 (the type ONNX gives them) before the offset is computed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import GlowError
from ..ops.primitives.quantized import qrange
from ..types import TensorType

SCHEMAS = ("asymmetric", "symmetric", "symmetric_uint8", "power2")
PRECISIONS = ("int8", "int16")
#: The smallest range quantized: a tensor that is constantly 0 gets this scale over its integer range.
TINY = 1e-8


@dataclass(frozen=True)
class QParams:
    """The quantized type of a tensor: real = (q - offset) * scale."""

    dtype: str
    scale: float
    offset: int

    @classmethod
    def of(cls, t: TensorType) -> "QParams | None":
        return cls(t.dtype.name, t.scale, t.offset) if t.is_quantized else None

    def type(self, shape) -> TensorType:
        return TensorType(self.dtype, shape, self.scale, self.offset)

    def quantize(self, x) -> np.ndarray:
        """x (real, any shape) as this type: saturate(rint(x / scale) + offset), computed in float64."""
        lo, hi = qrange(self.dtype)
        q = np.rint(np.asarray(x, np.float64) / self.scale) + self.offset
        return np.clip(q, lo, hi).astype(np.dtype(self.dtype))

    def dequantize(self, q) -> np.ndarray:
        return ((np.asarray(q, np.float64) - self.offset) * self.scale).astype(np.float32)

    @property
    def range(self) -> tuple[float, float]:
        """The real values of the dtype's lowest and highest integers."""
        lo, hi = qrange(self.dtype)
        return (lo - self.offset) * self.scale, (hi - self.offset) * self.scale


def check(schema: str, precision: str):
    if schema not in SCHEMAS:
        raise GlowError(f"quantization schema {schema!r} is not accepted; accepted: {', '.join(SCHEMAS)}")
    if precision not in PRECISIONS:
        raise GlowError(f"quantization precision {precision!r} is not accepted; accepted: {', '.join(PRECISIONS)}")


def choose(lo: float, hi: float, schema: str = "asymmetric", precision: str = "int8",
           signed: bool = False) -> QParams:
    """The parameters of a tensor whose real values lie in [lo, hi] (``signed``: never unsigned, e.g. weights)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise GlowError(f"cannot quantize the range [{lo}, {hi}]: it is not finite")
    dt = precision
    if schema == "asymmetric":
        qmin, qmax = qrange(dt)
        scale = _f32(max(hi - lo, TINY) / (qmax - qmin))
        offset = int(np.clip(round(qmin - lo / scale), qmin, qmax))
        return QParams(dt, scale, offset)
    if schema == "symmetric_uint8" and precision == "int8" and lo >= 0 and not signed:
        return QParams("uint8", _f32(max(hi, TINY) / 255.0), 0)
    qmax = qrange(dt)[1]
    scale = _f32(max(-lo, hi, TINY) / qmax)
    if schema == "power2":
        scale = 2.0 ** math.ceil(math.log2(scale))
    return QParams(dt, scale, 0)


def _f32(x: float) -> float:
    """x rounded to float32, never to 0 (a scale must stay positive)."""
    return max(float(np.float32(x)), float(np.finfo(np.float32).tiny))


def weights(w: np.ndarray, axis: int | None, schema: str, precision: str):
    """Quantized weights: (integers, float32 scales, int32 offsets), the parameters per slice along ``axis``
    (per channel) or one set for the whole tensor (``axis`` None). Always signed (int8 or int16)."""
    w = np.asarray(w, np.float64)
    if axis is None:
        params = [choose(w.min(initial=0.0), w.max(initial=0.0), schema, precision, signed=True)]
        q = params[0].quantize(w)
    else:
        moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
        params = [choose(r.min(initial=0.0), r.max(initial=0.0), schema, precision, signed=True) for r in moved]
        q = np.moveaxis(np.stack([p.quantize(r) for p, r in zip(params, moved)]).reshape(
            (w.shape[axis],) + tuple(np.delete(w.shape, axis))), 0, axis)
    return (q, np.array([p.scale for p in params], np.float32), np.array([p.offset for p in params], np.int32))


def bias(b: np.ndarray, x_scale: float, w_scales: np.ndarray, acc: str = "int32") -> np.ndarray:
    """A float bias as the accumulator type with scale x_scale * w_scale[f] and offset 0."""
    lo, hi = qrange(acc)
    s = float(x_scale) * np.asarray(w_scales, np.float64)
    return np.clip(np.rint(np.asarray(b, np.float64) / s), lo, hi).astype(np.dtype(acc))
