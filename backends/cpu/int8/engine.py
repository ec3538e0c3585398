"""The int8 engine: per quantized instruction, Python chooses algorithm and blocking and renders C; templates
(qcommon.h.j2, qconv.c.j2, qgemm.c.j2, qelementwise.c.j2, qpool.c.j2) hold the loops.

Interface with codegen (the whole of it)::

    y = Requant("int8", offset=out_offset, lo=None, hi=None)       # lo/hi: a fused activation's tighter clamp
    k = plan_qconv(x_shape, w_shape, strides, dilations, pads, group, x_dtype="uint8", x_offset=xo,
                   w_dtype="int8", w_offset=wo_or_[F], multiplier=m_or_[F], y=y, num_threads=2, name="k7",
                   residual=None)  # or ResidualAdd(b_dtype, b_offset, sc/sy, sb/sy, y_add, conv_slot): a qadd fused
    k = plan_qmatmul(a_shape, w_shape, a_dtype=..., a_offset=..., w_offset=..., multiplier=..., y=y, ...)
    k = plan_qrescale(shape, x_dtype=..., x_offset=..., multiplier=m, y=y, ...)
    k = plan_qadd(shape, a_dtype=..., a_offset=..., a_multiplier=sa/sy, b_dtype=..., b_offset=...,
                  b_multiplier=sb/sy, y=y, ...)
    k = plan_qmul(shape, a_dtype=..., a_offset=..., b_dtype=..., b_offset=..., multiplier=sa*sb/sy, y=y, ...)
    k = plan_qlookup(shape, x_dtype=..., y_dtype=..., ...)
    k = plan_qpool("max" | "avg", x_shape, kernel, strides, dilations, pads, x_dtype=..., x_offset=..., y=y,
                   count_include_pad=0, ...)
    if not k: ...                # Unsupported(reason): keep the generic path; k.reason says why
    k.source                     # C: static helpers + `static void NAME(...)` (signature below)
    k.scratch_bytes              # bytes of the @scratch operand (64-byte aligned), 0 when none
    k.pack(w, bias)              # conv/matmul, numpy at compile time -> QConstants(weights int8, corrections int32,
                                 #   multipliers float32): three constants for the kernel's w, corr, mult
    k.describe                   # one line for `glowc dump`

Signatures (all geometry and per-tensor parameters are baked in; nothing is allocated):

* conv, matmul: ``void NAME(const uint8_t *x, const int8_t *w, const int32_t *corr, const float *mult,
  void *y, uint8_t *scratch)`` (a conv with a residual, kind "conv+add", then ``const void *b, void *yadd``);
  x is the int8/uint8 input, y the int8/uint8/int32 output (``y`` must not alias ``x`` or ``scratch``; ``yadd``
  may be ``b``, ``y``, or ``x`` of a batch of 1).
* rescale: ``void NAME(const void *x, void *y)``; add: ``void NAME(const void *a, const void *b, void *y)``
  (add and mul; a, b and y of one shape; y may alias a or b); lookup: ``void NAME(const void *x, const uint8_t *table,
  void *y)`` with the 256-entry table indexed by x - min(x's type); pool: ``void NAME(const void *x,
  const float *mult, void *y)``, mult = ``avg_pool_multipliers(x_scale, y_scale, kh * kw)`` for "avg" (any
  pointer for "max").

Semantics (the reference interpreter's): real = (q - offset) * scale; acc = sum (x - xo)(w - wo) + bias in
int32; y = clamp(rint((float)acc * M) + out_offset, lo, hi) with rint half-to-even and M float32 (per output
channel when per-channel). With ``num_threads > 1`` a kernel above PARALLEL_MIN_MACS opens one OpenMP region of
that many threads with a static split; compiled without -fopenmp it is serial and correct. The C picks AVX-512
VNNI, AVX-VNNI, AVX2 (an exact vpdpbusd emulation) or portable C from the compiler's macros (-DGLOW_Q_PORTABLE
forces the latter); the packed layout depends only on ``target.lanes`` (host_qtarget(): 16 with AVX-512 VNNI,
else 8) and ``target.amx`` (convs planned for AMX tiles append their AMX-packed weights to the VNNI ones and pick
the path at run time; -DGLOW_Q_NO_AMX forces VNNI), so pack with the same target the source was rendered for.
"""
from __future__ import annotations

from .common import (PARALLEL_MIN_MACS, TARGETS, Int8EngineError, Int8Kernel, QConstants, QTarget, Requant,
                          ResidualAdd, host_qtarget)
from .conv import plan_qconv
from .elementwise import avg_pool_multipliers, plan_qadd, plan_qlookup, plan_qmul, plan_qpool, plan_qrescale
from .matmul import plan_qmatmul

__all__ = ["PARALLEL_MIN_MACS", "TARGETS", "Int8EngineError", "Int8Kernel", "QConstants", "QTarget", "Requant",
           "ResidualAdd",
           "avg_pool_multipliers", "host_qtarget", "plan_qadd", "plan_qconv", "plan_qlookup", "plan_qmatmul",
           "plan_qmul", "plan_qpool", "plan_qrescale"]
