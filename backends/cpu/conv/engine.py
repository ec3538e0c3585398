"""The conv engine: per convolution, Python chooses layout, algorithm and blocking; templates hold the loops.

Interface with codegen (the whole of it)::

    geom = ConvGeometry.from_conv(x_shape, w_shape, strides, dilations, pads, group)   # a `conv` instruction
    geom, w_transform = ConvGeometry.from_conv_transpose(x_shape, w_shape, strides, dilations, pads,
                                                         output_padding, group)         # a ConvTranspose node
    geom = ConvGeometry.from_padded_conv(x_shape, pad_pads, interior, w_shape, strides, dilations, pads, group)
                                                                                        # `pad` -> `conv`
    plan = plan_conv(geom, dtype="float32", epilogue=Epilogue(("residual", "relu")), num_threads=2,
                     in_layout="nchw", out_layout="nchw")   # name: by default a hash of all of the above
    if not plan: ...            # Unsupported(reason): keep the generic kernel; plan.reason says why
    plan.source                 # C: static helpers + `static void NAME(x, w, bias, y, scratch, res[, wf])`
    plan.scratch_bytes          # bytes of the @scratch operand (64-byte aligned), 0 when none
    plan.pack_weights(w)        # numpy, at compile time: w as the instruction holds it -> packed float32 constant
    plan.reads_filter           # the kernel takes a seventh argument: w as the instruction holds it (Winograd)
    plan.describe               # one line for `glowc dump`
    plan.name                   # the C function (same parameters -> same name and source: emit once)

The kernel's C signature is fixed: ``void NAME(const float *x, const float *w_packed, const float *bias,
float *y, uint8_t *scratch, const float *res)``, and with ``plan.reads_filter`` a seventh parameter ``const float
*wf``, the filter as the instruction holds it (``[F, C/group, *kernel]`` float32: Winograd recomputes the tiles
whose outputs are not all finite by the direct formula from it, so no copy of it is packed); all geometry is
baked in, nothing is allocated, ``res`` is the residual input (same shape and layout as ``y``; pass NULL without
a residual step). ``bias`` is the plain ``[F]`` vector. ``y`` must not alias ``x``, ``res`` or ``scratch``
(partial sums are kept in ``y``). With
``num_threads > 1`` the kernel opens one OpenMP region of exactly ``num_threads`` threads when the work is large
enough (``PARALLEL_MIN_MACS``), else it runs serially; compiled without -fopenmp it is serial and correct.

Layouts: "nchw" is the plain layout; "nchwc" is [N, ceil(C/cb), *spatial, cb] with cb lanes per channel block
(``target.cb``: 16 with AVX-512, else 8; pass the Target of the machine the code is for, the default is the
host's) and zeros in the lanes past C. Kernels read those lanes only with zero weights, so they must hold finite
values: the layout kernels write zeros, the conv kernels finite values. ``layout_kernel`` renders the standalone
NCHW <-> NCHWc conversions a layout pass will place.

Epilogue (applied in registers before the final store): bias, then ``Epilogue.steps`` in order: "relu",
("clip", lo, hi), "sigmoid", "silu", "gelu_erf", "gelu_tanh", ("hard_sigmoid", alpha, beta), ("hard_swish", alpha,
beta) (x * hard_sigmoid(x)) and "residual" (adds ``res``; with ``Epilogue.in_place`` adds what ``y`` holds on
entry instead: the residual planned in y's own memory. Invariant of that mode, direct kernel only: every output
position is stored exactly once, by the thread that has just read its residual from the same position, and
nothing reads y after storing it; so partial sums over input-channel chunks stay in registers (one chunk) or in
scratch (nchw output, converted from the blocked copy after the residuals are read)).
"""
from __future__ import annotations

import hashlib
import re

from glow_core.backend import Unsupported

from ..templates import template
from .algorithms import (PARALLEL_MIN_MACS, plan_depthwise, plan_direct, plan_winograd,
                              winograd_choice, winograd_fits)
from .geometry import (ACTIVATIONS, ConvEngineError, ConvGeometry, ConvKernel, Epilogue, LayoutKernel, Target,
                            host_target)

LAYOUTS = ("nchw", "nchwc", "nhwc")
ALGORITHMS = ("direct", "depthwise", "winograd2", "winograd4")
#: What ``force`` may override (studies and tests): the algorithm and the blocking the chooser would pick.
FORCIBLE = ("algorithm", "tile", "chunk", "rblocks", "icb", "tb", "strip")
__all__ = ["ACTIVATIONS", "ALGORITHMS", "ConvEngineError", "ConvGeometry", "ConvKernel", "Epilogue", "LAYOUTS",
           "LayoutKernel", "Target", "host_target", "layout_kernel", "plan_conv", "refusal"]


def _check_name(name: str):
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name):
        raise ConvEngineError(f"conv engine: kernel name {name!r} is not a C identifier ([A-Za-z_][A-Za-z0-9_]*, "
                              f"at most 64 characters)")


def layout_kernel(shape, src_layout: str, dst_layout: str, *, num_threads: int = 1, target: Target | None = None,
                  name: str = "gce_layout") -> LayoutKernel:
    """NCHW <-> NCHWc conversion of an activation of plain ``shape`` [N, C, *spatial] (1-d and 2-d spatial)."""
    _check_name(name)
    cb = (target or host_target()).cb
    if {src_layout, dst_layout} != {"nchw", "nchwc"}:
        raise ConvEngineError(f"conv engine: layout kernels convert nchw <-> nchwc, not {src_layout} -> {dst_layout}")
    if len(shape) not in (3, 4):
        raise ConvEngineError(f"conv engine: layout kernels take [N, C, *spatial] with 1 or 2 spatial dims, "
                              f"not {shape}")
    n, c = shape[:2]
    h, w = (1, shape[2]) if len(shape) == 3 else shape[2:]
    nb = -(-c // cb)
    parallel = num_threads > 1 and n * nb * cb * h * w >= PARALLEL_MIN_MACS // 8
    prep = None
    if dst_layout == "nchwc":
        prep = dict(src_layout="nchw", c=c, h=h, w=w, src_cb=cb, nblk=nb, icb=cb, hp=h, wp=w, pt=0, pl=0, sh=1, sw=1,
                    mult=1)
    desc = (f"layout {src_layout}->{dst_layout} cb{cb} of {'x'.join(map(str, shape))}, "
            f"{num_threads if parallel else 1} thread(s)")
    src = template("conv_layout.c.j2").render(
        name=name, describe=desc, cb=cb, nt=num_threads, parallel=parallel, batch=n, prep=prep, c=c, hw=h * w,
        img_in=nb * cb * h * w, img_out=nb * cb * h * w)
    return LayoutKernel(name, src, "conv engine: " + desc, src_layout, dst_layout, tuple(shape), cb)


def refusal(geom: ConvGeometry, dtype: str = "float32") -> "Unsupported | None":
    """Why the engine does not take a convolution whatever its layouts and epilogue, or None: what ``plan_conv``
    checks before planning (its planners refuse nothing more on nchw / nchwc without a residual in y's own
    memory), so a caller that only asks whether the engine runs a conv plans nothing."""
    if dtype != "float32":
        return Unsupported(f"conv engine: float32 only (got {dtype})")
    if len(geom.spatial) not in (1, 2):
        return Unsupported(f"conv engine: 1-d and 2-d convolutions only (this one is {len(geom.spatial)}-d)")
    if any(o <= 0 for o in geom.out_spatial) or geom.batch == 0 or geom.channels == 0 or geom.filters == 0:
        return Unsupported("conv engine: empty output or input")
    if any(u != 1 for u in geom.input_dilation) and any(s != 1 for s in geom.strides):
        return Unsupported("conv engine: input dilation (transposed conv) with a stride")
    return None


def plan_conv(geom: ConvGeometry, *, dtype: str = "float32", epilogue: Epilogue | None = None,
              num_threads: int = 1, in_layout: str = "nchw", out_layout: str = "nchw", target: Target | None = None,
              name: str | None = None, force: dict | None = None):
    """A ConvKernel for ``geom``, or Unsupported(reason) when the engine does not cover it (the caller keeps its
    generic kernel). ``force`` overrides choices (FORCIBLE: algorithm, tile (J, T), chunk, rblocks, icb, tb, strip) for
    studies and tests. Without ``name`` the kernel is named by a hash of everything that shapes its source, so
    identical convolutions render identical C (codegen can keep one copy)."""
    if name is None:
        key = repr((geom, dtype, epilogue, num_threads, in_layout, out_layout, target, sorted((force or {}).items())))
        name = "gce_" + hashlib.sha1(key.encode()).hexdigest()[:16]
    _check_name(name)
    epilogue = epilogue or Epilogue()
    target = target or host_target()
    force = dict(force or {})
    unknown = set(force) - set(FORCIBLE)
    if unknown or force.get("algorithm") not in (None,) + ALGORITHMS:
        raise ConvEngineError(f"conv engine: force {force} has unknown keys or algorithm; accepted keys "
                              f"{', '.join(FORCIBLE)}, algorithms {', '.join(ALGORITHMS)}")
    if in_layout not in LAYOUTS or out_layout not in LAYOUTS:
        raise ConvEngineError(f"conv engine: layouts {in_layout!r} -> {out_layout!r}; accepted: {', '.join(LAYOUTS)}")
    refused = refusal(geom, dtype)
    if refused is not None:
        return refused
    if num_threads < 1:
        raise ConvEngineError(f"conv engine: num_threads must be >= 1, got {num_threads}")
    algorithm = force.get("algorithm")
    depthwise = geom.channels == geom.group and all(u == 1 for u in geom.input_dilation)
    if epilogue.in_place and (algorithm not in (None, "direct") or depthwise or
                              (algorithm is None and winograd_fits(geom) and winograd_choice(geom))):
        return Unsupported("conv engine: a residual in y's own memory (Epilogue.in_place) runs on the direct "
                           "kernel only (Winograd stores a tile again after reading its residual)")
    if algorithm == "depthwise" or (algorithm is None and depthwise):
        if not depthwise:
            raise ConvEngineError("conv engine: depthwise needs one input channel per group and no input dilation")
        return plan_depthwise(geom, target, epilogue, num_threads, in_layout, out_layout, name, force)
    if algorithm is None and winograd_fits(geom):
        algorithm = winograd_choice(geom)
    if algorithm in ("winograd2", "winograd4"):
        if not winograd_fits(geom):
            raise ConvEngineError("conv engine: winograd needs a dense 2-d 3x3 conv, stride 1, dilation 1")
        return plan_winograd(geom, target, epilogue, num_threads, in_layout, out_layout, name, force,
                              int(algorithm[-1]))
    return plan_direct(geom, target, epilogue, num_threads, in_layout, out_layout, name, force)
