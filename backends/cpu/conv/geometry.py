"""The conv engine's records: the target, a convolution's geometry, the fused epilogue, the planned kernel, and
per spatial dimension how the kernels read it (phases of a transposed conv, padding, subsampling)."""
from __future__ import annotations

import dataclasses
import math
import platform
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np

from glow_core.errors import GlowError

from ..host import feature_flags


class ConvEngineError(GlowError):
    """A conv engine request that is malformed (unknown layout or epilogue step, shapes that disagree)."""



# -- target ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """What the blocking is tuned for: floats per hardware vector and vector registers (``cb`` lanes per channel
    block; a block wider than a register spans several)."""

    name: str
    vector_floats: int
    registers: int

    @property
    def cb(self) -> int:
        return 16 if self.vector_floats >= 16 else 8

    @property
    def regs_per_block(self) -> int:
        return max(1, self.cb // self.vector_floats)


@lru_cache(maxsize=None)
def host_target() -> Target:
    """The machine compiling with -march=native: AVX-512F, AVX2/FMA, NEON (aarch64) or plain SSE2."""
    words = feature_flags()
    if "avx512f" in words:
        return Target("avx512", 16, 32)
    if "avx2" in words and "fma" in words:
        return Target("avx2", 8, 16)
    if platform.machine() in ("aarch64", "arm64"):
        return Target("neon", 4, 32)
    return Target("sse", 4, 16)


# -- geometry ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConvGeometry:
    """One convolution: x [batch, channels, *spatial], w [filters, channels/group, *kernel], explicit begin+end
    pads; ``input_dilation`` > 1 inserts zeros between input samples (a transposed convolution)."""

    batch: int
    channels: int
    filters: int
    group: int
    spatial: tuple
    kernel: tuple
    strides: tuple
    dilations: tuple
    pads: tuple
    input_dilation: tuple = ()

    def __post_init__(self):
        n = len(self.spatial)
        if not self.input_dilation:
            object.__setattr__(self, "input_dilation", (1,) * n)
        for nm in ("kernel", "strides", "dilations", "input_dilation"):
            if len(getattr(self, nm)) != n:
                raise ConvEngineError(f"conv engine: {nm} {getattr(self, nm)} needs {n} entries")
        if len(self.pads) != 2 * n:
            raise ConvEngineError(f"conv engine: pads {self.pads} needs {2 * n} entries (begins then ends)")
        if self.group < 1 or self.channels % self.group or self.filters % self.group:
            raise ConvEngineError(f"conv engine: group {self.group} must divide channels {self.channels} and "
                                  f"filters {self.filters}")

    @classmethod
    def from_conv(cls, x_shape, w_shape, strides, dilations, pads, group=1) -> "ConvGeometry":
        """The geometry of a `conv` primitive (x, w shapes and its attributes)."""
        if w_shape[1] * group != x_shape[1]:
            raise ConvEngineError(f"conv engine: filter {tuple(w_shape)} with group {group} does not match "
                                  f"input {tuple(x_shape)}")
        return cls(x_shape[0], x_shape[1], w_shape[0], group, tuple(x_shape[2:]), tuple(w_shape[2:]),
                   tuple(strides), tuple(dilations), tuple(pads))

    @classmethod
    def from_padded_conv(cls, x_shape, pad_pads, interior, w_shape, strides, dilations, pads, group=1):
        """A zero-valued `pad` (begin+end ``pad_pads`` and ``interior`` over all of x's axes, as the primitive
        holds them) feeding a `conv`: one geometry reading the unpadded x, which is how ConvTranspose reaches
        codegen today (pad with interior, then a stride-1 conv); the conv's weight is used as it is."""
        r = len(x_shape)
        n = r - 2
        interior = list(interior or [0] * r)
        if any(pad_pads[i] or pad_pads[r + i] or interior[i] for i in range(2)):
            raise ConvEngineError(f"conv engine: only spatial padding folds into a conv, not pads {pad_pads} "
                                  f"interior {interior}")
        if any(p < 0 for p in pad_pads):
            raise ConvEngineError(f"conv engine: negative pads {pad_pads} (a crop) do not fold into a conv")
        g = cls.from_conv(x_shape, w_shape, strides, dilations, pads, group)
        folded = [pad_pads[2 + i] + pads[i] for i in range(n)] + [pad_pads[r + 2 + i] + pads[n + i] for i in range(n)]
        return dataclasses.replace(g, pads=tuple(folded), input_dilation=tuple(d + 1 for d in interior[2:]))

    @classmethod
    def from_conv_transpose(cls, x_shape, w_shape, strides, dilations, pads, output_padding, group=1):
        """(geometry, weight transform) of an ONNX ConvTranspose with explicit pads: the same as a stride-1 conv
        over the input with zeros inserted (input_dilation = strides), the kernel flipped and its channel axes
        swapped per group. The transform maps the ConvTranspose weight [C, F/group, *k] to [F, C/group, *k]."""
        n = len(x_shape) - 2
        k = tuple(w_shape[2:])
        C, fg = x_shape[1], w_shape[1]
        eff = [(k[i] - 1) * dilations[i] + 1 for i in range(n)]
        begin = [eff[i] - 1 - pads[i] for i in range(n)]
        end = [eff[i] - 1 - pads[n + i] + output_padding[i] for i in range(n)]

        def transform(w):
            w = np.asarray(w).reshape((group, C // group, fg) + k).swapaxes(1, 2).reshape((group * fg, C // group) + k)
            return np.ascontiguousarray(w[(slice(None), slice(None)) + (slice(None, None, -1),) * n])
        return cls(x_shape[0], C, group * fg, group, tuple(x_shape[2:]), k, (1,) * n, tuple(dilations),
                   tuple(begin + end), tuple(strides)), transform

    @property
    def out_spatial(self) -> tuple:
        n = len(self.spatial)
        return tuple(((self.spatial[i] - 1) * self.input_dilation[i] + 1 + self.pads[i] + self.pads[n + i]
                      - (self.kernel[i] - 1) * self.dilations[i] - 1) // self.strides[i] + 1 for i in range(n))

    @property
    def macs(self) -> int:
        """Multiply-adds as conventionally counted: every kernel tap of every output (padding included); for a
        transposed convolution every tap of every input sample (the inserted zeros excluded)."""
        cg, k = self.channels // self.group, math.prod(self.kernel)
        if all(d == 1 for d in self.input_dilation):
            return self.batch * self.filters * cg * k * math.prod(self.out_spatial)
        return self.batch * self.channels * (self.filters // self.group) * k * math.prod(self.spatial)

    def describe(self) -> str:
        sp = "x".join(map(str, self.spatial))
        k = "x".join(map(str, self.kernel))
        extra = [f"s{','.join(map(str, self.strides))}"] if any(s != 1 for s in self.strides) else []
        if any(d != 1 for d in self.dilations):
            extra.append(f"d{','.join(map(str, self.dilations))}")
        if any(self.pads):
            extra.append(f"p{','.join(map(str, self.pads))}")
        if self.group != 1:
            extra.append(f"g{self.group}")
        if any(d != 1 for d in self.input_dilation):
            extra.append(f"up{','.join(map(str, self.input_dilation))}")
        return f"{self.batch}x{self.channels}x{sp} -> {self.filters} k{k} " + " ".join(extra)


# -- epilogue ---------------------------------------------------------------------------------------------------
#: Activation -> number of float parameters (every step is one of these or "residual").
ACTIVATIONS = {"relu": 0, "clip": 2, "sigmoid": 0, "silu": 0, "gelu_erf": 0, "gelu_tanh": 0, "hard_sigmoid": 2,
               "hard_swish": 2}

#: Activations whose vector code is long (an exp and a division): a register tile applies them in one loop
#: (Epilogue.looped) instead of once per register, where j * t inlined copies overflow the micro-op cache.
LOOPED = frozenset(("sigmoid", "silu", "gelu_erf", "gelu_tanh"))


def c_float(v: float) -> str:
    v = float(np.float32(v))
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    return float.hex(v) + "f"


@dataclass(frozen=True)
class Epilogue:
    """What happens to each output after the bias: ``steps`` in order, each an activation name, a tuple
    (name, *params) (("clip", lo, hi), ("hard_sigmoid", alpha, beta), ("hard_swish", alpha, beta)), or "residual"
    (adds the ``res`` input, at most once). ``in_place``: the residual is what ``y`` holds when the kernel starts
    (planned in y's own memory, same layout, element for element; ``res`` is unused): the kernel reads each
    output position's residual before it stores that position, and stores it once (no partial sums in y)."""

    steps: tuple = ()
    in_place: bool = False

    def __post_init__(self):
        norm = []
        for s in self.steps:
            name, params = (s, ()) if isinstance(s, str) else (s[0], tuple(float(p) for p in s[1:]))
            if name == "residual" and not params:
                norm.append("residual")
                continue
            if name not in ACTIVATIONS:
                raise ConvEngineError(f"conv engine: epilogue step {s!r} is not one of residual, "
                                      f"{', '.join(ACTIVATIONS)}")
            if len(params) != ACTIVATIONS[name] or any(math.isnan(p) for p in params):
                raise ConvEngineError(f"conv engine: epilogue step {s!r} takes {ACTIVATIONS[name]} non-NaN "
                                      f"parameters")
            norm.append((name,) + params if params else name)
        if norm.count("residual") > 1:
            raise ConvEngineError("conv engine: an epilogue adds at most one residual")
        if self.in_place and "residual" not in norm:
            raise ConvEngineError("conv engine: an in-place epilogue needs a residual step")
        object.__setattr__(self, "steps", tuple(norm))

    @property
    def residual(self) -> bool:
        return "residual" in self.steps

    @property
    def looped(self) -> bool:
        """Whether a register tile applies this epilogue in a loop (a LOOPED activation among the steps)."""
        return any(s in LOOPED for s in self.steps if isinstance(s, str))

    def c_steps(self, cb: int) -> list[str]:
        """"residual", or a C expression of the vector ``v`` (gce_v<cb>) per step."""
        out = []
        for s in self.steps:
            if s == "residual":
                out.append(s)
            elif isinstance(s, tuple):  # clip(lo, hi), hard_sigmoid / hard_swish(alpha, beta)
                out.append(f"gce_{s[0]}{cb}(v, {', '.join(c_float(p) for p in s[1:])})")
            elif s == "silu":
                out.append(f"v * gce_sigmoid{cb}(v)")
            else:
                out.append(f"gce_{s}{cb}(v)")
        return out

    def describe(self) -> str:
        return "+".join(("residual in y" if self.in_place else s) if s == "residual" else
                        s if isinstance(s, str) else f"{s[0]}({s[1]:g},{s[2]:g})" for s in self.steps)


# -- the plan codegen receives ------------------------------------------------------------------------------------
@dataclass
class ConvKernel:
    """A planned conv kernel: C source (helpers + ``static void name(x, w, bias, y, scratch, res)``, with a
    seventh parameter ``wf`` when ``reads_filter``: the filter as the instruction holds it), scratch bytes, the
    compile-time weight repacking and a one-line description of the choice."""

    name: str
    source: str
    scratch_bytes: int
    pack_weights: Callable[[np.ndarray], np.ndarray]
    describe: str
    algorithm: str
    in_layout: str
    out_layout: str
    cb: int
    geometry: ConvGeometry
    epilogue: Epilogue
    packed_size: int = 0
    details: dict = field(default_factory=dict)
    reads_filter: bool = False

    def __bool__(self) -> bool:
        return True


def align(n: int, a: int = 64) -> int:
    return (n + a - 1) // a * a


# -- per-dimension phases -------------------------------------------------------------------------------------------
@dataclass
class SpatialDim:
    """One spatial dimension as the kernels see it. The input copy holds source index ``i * sub - pad`` at
    index ``i`` (zero outside the source), ``padded`` long; the kernel reads it at ``stride`` with taps
    ``sub_dil`` apart; each phase writes every ``step``-th output from ``start`` (``count`` of them) with
    kernel taps ``taps`` starting at copy offset ``xoff``."""

    size: int
    out: int
    stride: int
    sub_dil: int
    step: int
    pad: int
    padded: int
    phases: list  # [(taps, xoff, start, count)]
    sub: int = 1

    @property
    def trivial(self) -> bool:
        """A 1-tap, stride-1 dimension read in place: rows of it can be flattened into one."""
        return (self.stride == self.step == self.sub == 1 and self.pad == 0 and self.padded == self.size == self.out
                and self.phases == [([0], 0, 0, self.out)])


def spatial_dim(size, k, s, d, pb, pe, up) -> SpatialDim:
    out = ((size - 1) * up + 1 + pb + pe - (k - 1) * d - 1) // s + 1
    if up == 1:
        raw = [(list(range(k)), -pb, 0, out)]
        sub_d, stride, step = d, s, 1
    else:
        sub_d, stride, step = d // math.gcd(d, up), 1, up
        raw = []
        for rho in range(min(up, out)):
            taps = [t for t in range(k) if (rho + t * d - pb) % up == 0]
            raw.append((taps, (rho + taps[0] * d - pb) // up if taps else 0, rho, len(range(rho, out, up))))
    live = [r for r in raw if r[0] and r[3] > 0]
    lo = min((r[1] for r in live), default=0)
    hi = max(((r[3] - 1) * stride + r[1] + (len(r[0]) - 1) * sub_d for r in live), default=0)
    pad = max(0, -lo)
    return SpatialDim(size, out, stride, sub_d, step, pad, max(pad + hi + 1, 1),
                [(t, (e + pad) if t else 0, st, c) for t, e, st, c in raw])


def subsampled(d: SpatialDim) -> SpatialDim:
    """A one-tap dimension with its stride and padding moved into the input copy (output j reads copy j)."""
    if d.step != 1 or len(d.phases) != 1 or len(d.phases[0][0]) != 1:
        return d
    xoff = d.phases[0][1]
    return SpatialDim(d.size, d.out, 1, 1, 1, d.pad - xoff, d.out, [([0], 0, 0, d.out)], d.stride)


def flat_dim(n: int) -> SpatialDim:
    return SpatialDim(n, n, 1, 1, 1, 0, n, [([0], 0, 0, n)])


def spatial_dims(geom: ConvGeometry) -> list[SpatialDim]:
    """Two dims (h, w) of the geometry; a 1-d conv is a 2-d one with a unit height."""
    n = len(geom.spatial)
    ds = [spatial_dim(geom.spatial[i], geom.kernel[i], geom.strides[i], geom.dilations[i], geom.pads[i],
               geom.pads[n + i], geom.input_dilation[i]) for i in range(n)]
    return ([flat_dim(1)] + ds) if n == 1 else ds



@dataclass
class LayoutKernel:
    """A standalone layout conversion: ``static void name(const float *x, float *y)``."""

    name: str
    source: str
    describe: str
    src_layout: str
    dst_layout: str
    shape: tuple
    cb: int
