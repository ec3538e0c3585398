"""The CPU backend: generates one relocatable C kernel per distinct instruction, compiles the ones not cached
on disk with the system C compiler (in parallel shards) and runs them through ctypes; it also writes standalone
bundles (one C translation unit + weights + main)."""
from __future__ import annotations

import math
import os

from glow_core.backend import Backend, CompiledFunction, NodeInfo, Unsupported
from glow_core.layout import LAYOUT_CONVERT
from glow_core.ops.registry import get_primitive
from glow_core.passes import LLM_PIPELINE

from . import layouts
from .build import sanitize, toolchain
from .build.bundle import write_bundle
from .build.runtime import CPUFunction, aligned_bytes
from .conv import algorithms as conv_algorithms
from .fusion.attention import planned_scratch
from .int8 import common as int8_common
from .int8 import elementwise as int8_elementwise
from .kernels import gemm_blocking
from .kernels import nn as kernels_nn
from .kernels.codegen import KernelInstr, scratch_layout
from .kernels.ctypes_map import supported
from .kernels.ew import ACTIVATION_PARAMS
from .kernels.quantized import supported as quantized_supported
from .kernels.storage_cast import ONE_BYTE_STORAGE
from .kernels.window import ENGINE_SCRATCH_THREADS
from .program import Program
from .templates import PARALLEL_MIN_WORK, prelude_text

#: (producer, activation) pairs whose activation the kernels apply in their store (glow_core.fusion).
FUSED_ACTIVATIONS = frozenset([(op, act) for op in ("conv", "matmul", "add") for act in ACTIVATION_PARAMS]
                              + [("conv", "hard_sigmoid"), ("conv", "hard_swish")])


class CPUBackend(Backend):
    """Every primitive for float32/64, float16, bfloat16, all integer types and bool where the primitive takes
    it; the quantized primitives on int8/uint8 activations (kernels/quantized.py, the int8 engine); float32 Softmax,
    LayerNormalization, Gelu, LSTM and GRU kept whole (kernels/nn.py). Storage-only
    float8/float4/int4 types and extended (non-primitive) ops are declared unsupported."""

    name = "cpu"

    def is_op_supported(self, node_info: NodeInfo) -> "bool | Unsupported":
        if node_info.op == LAYOUT_CONVERT:  # placed by glow_core.layout on this backend's answers
            return node_info.in_dtypes == ("float32",)
        p = get_primitive(node_info.op)
        if p is None:
            return kernels_nn.supported(node_info)
        if p.quantized == "own":
            if node_info.attrs.get("requant", "float32") != "float32":
                return Unsupported(f"requant={node_info.attrs['requant']!r}: the cpu backend's int8 kernels "
                                   "requantize in float32 only")
            return quantized_supported(node_info)
        if node_info.in_dtypes and node_info.in_dtypes[0] not in p.dtypes:
            return False
        dts = node_info.in_dtypes + node_info.out_dtypes
        if all(supported(d) for d in dts):
            return True
        # Storage-only 1-byte types: the movement primitives move them as bytes, casts use tables (see
        # storage_cast.py).
        if not all(supported(d) or d in ONE_BYTE_STORAGE for d in dts):
            return False
        if node_info.op == "scatter_nd":
            return node_info.attrs.get("reduction", "none") == "none"
        return p.movement

    def should_lower(self, node) -> bool:
        """Softmax over the last axis, LayerNormalization, and forward LSTM/GRU with default activations on
        float32 run whole (kernels_nn: one kernel instead of the lowering's reductions, elementwise
        instructions and per-step recurrences), and so do the language-model ops of kernels/llm.py (MatMulNBits,
        RMS normalizations, rotary embeddings, GroupQueryAttention); everything else is lowered."""
        return not kernels_nn.keeps_whole(node)

    def optimization_pipeline(self) -> list[str]:
        """The default passes and "recompose-llm" (glow_core.passes.recompose): torch's decompositions of RMS
        normalization and rotary embeddings become RMSNormalization and RotaryEmbedding, which run whole."""
        return list(LLM_PIPELINE)

    def supports_fused_activation(self, op: str, activation: str) -> bool:
        """conv (the conv engine, im2col/direct GEMM and depthwise), matmul and the elementwise add apply every
        activation of glow_core.fusion in their kernel: relu, clip, silu, sigmoid, tanh, leaky_relu, gelu_erf,
        gelu_erf_div, gelu_erf_half, gelu_tanh; conv also hard_sigmoid and hard_swish."""
        return (op, activation) in FUSED_ACTIVATIONS

    def tensor_layout_requirements(self, instr):
        """NCHWc between conv-engine convolutions, same-shape elementwise instructions, pools and block-aligned
        channel concats (layouts.py)."""
        return layouts.requirements(instr)

    def scratch_bytes(self, instr) -> int:
        """The conv engine's input copy and output blocks (planned for ENGINE_SCRATCH_THREADS), im2col columns,
        converted weights/outputs, converted matmul operands, row buffers and the GEMM's packed panels; the int8
        engine's conv planes and matmul row panels (codegen.scratch_layout); a batched matmul of activations also
        the fused attention kernel's tiles (attention.planned_scratch)."""
        return max(scratch_layout(KernelInstr.of(instr)).total, planned_scratch(instr, ENGINE_SCRATCH_THREADS))

    def fallback_backends(self) -> list:
        """Extended ops (TopK, RoiAlign, GridSample, ...) have no C kernels: they run on the interpreter."""
        return ["interpreter"]

    @staticmethod
    def _threads(options) -> int:
        n = options.get("num_threads")
        return max(1, int(n)) if n else (os.cpu_count() or 1)

    def compile(self, function, options, state=None, shared=None) -> CompiledFunction:
        """``state``: the module's state region; ``shared``: its derived constants (``compile_functions``)."""
        options = dict(options or {})
        nt = self._threads(options)
        program = Program(function, nt, chains=options.get("elementwise_chains", True),
                          attention=options.get("attention", "auto"),
                          folds=options.get("transpose_folding", True), shared=shared)
        flags = options.get("cflags")
        flags = list(flags.split() if isinstance(flags, str) else flags) if flags else toolchain.default_flags(nt)
        # Whatever the user's flags, the libraries must be position-independent and shared, and integer
        # arithmetic must wrap as numpy's does.
        for required in ("-fPIC", "-shared", "-fwrapv") + (("-fopenmp",) if nt > 1 else ()):
            if required not in flags:
                flags.append(required)
        sanitizers = sanitize.requested(options)
        sanitize.require_runtime(sanitizers)
        flags += sanitize.flags(sanitizers)
        return CPUFunction(program, toolchain.build_kernels(list(program.kernels.values()), flags), state)

    def compile_functions(self, functions, options) -> list[CompiledFunction]:
        """One state region for all the functions; their weights are the same arrays (the plans share them), and so
        are the constants kernels prepare from them (packed GEMM panels)."""
        state = aligned_bytes(max((f.plan.state_size for f in functions), default=0))
        shared: dict = {}
        return [self.compile(f, options, state, shared) for f in functions]

    # -- the conformance suite's hooks ---------------------------------------------------------------------------
    def interesting_shapes(self, op: str) -> dict:
        """The sizes where the generated kernels change path, from the code generator's tables: the OpenMP
        thresholds (templates.PARALLEL_MIN_WORK, conv_algorithms.PARALLEL_MIN_MACS), the GEMM blocking and
        micro-tiles for every candidate vector length (gemm_blocking), the conv engine's algorithm-selecting
        geometries (conv_algorithms), the int8 engine's threading thresholds (int8_common, int8_elementwise)."""
        p = get_primitive(op)
        family = p.family if p is not None else op
        if op in ("matmul", "gemm"):
            tiles = {}
            for dt, sfx in (("float32", "f32"), ("float64", "f64")):
                t = gemm_blocking.GEMM_TILES[sfx]
                size = 8 if sfx == "f64" else 4
                tiles[dt] = {"kc": t["kc"], "mc": t["mc"], "nc": t["nc"], "mr": (t["mr_wide"], t["mr_narrow"]),
                             "nr": tuple(sorted({2 * vb // size for vb in (16, 32, 64)})),
                             "pack_width": gemm_blocking.gemm_pack_width(sfx)}
            from .kernels.matmul import GEMM_MIN_WORK, GEMV
            return {"tiles": tiles, "parallel_work": PARALLEL_MIN_WORK["gemm"],
                    "gemv": {"min_weights_per_thread": GEMV["min_weights_per_thread"], "min_work": GEMM_MIN_WORK}}
        if op == "conv":
            return {"parallel_work": PARALLEL_MIN_WORK["window"], "parallel_macs": conv_algorithms.PARALLEL_MIN_MACS,
                    "geometries": _engine_geometries(),
                    "chunked_channels": conv_algorithms.SLAB_BYTES // (4 * 9 * 4) + 4,
                    "depthwise_tail_width": _prime_above(32 - 2),
                    "depthwise_strip_width": conv_algorithms.DW_STRIP_BYTES // (8 * 4 * 8)}
        if op in ("qadd", "qmul", "rescale"):
            return {"parallel_elements": int8_common.PARALLEL_MIN_MACS // int8_elementwise.ELEMENT_WORK}
        if op in ("qconv", "qmatmul"):
            return {"parallel_macs": int8_common.PARALLEL_MIN_MACS}
        if family in ("pool", "reduce"):
            return {"parallel_work": PARALLEL_MIN_WORK["window"]}
        if family in ("elementwise",):
            return {"parallel_work": PARALLEL_MIN_WORK["elementwise"]}
        return {}

    def enable_sanitizers(self, names, log_dir):
        """AddressSanitizer and UndefinedBehaviorSanitizer builds of the generated C (glow_cpu.build.sanitize),
        re-executing this process with the ASan runtime preloaded when it is not."""
        sanitize.reexec(sanitize.requested({"sanitize": ",".join(names)}), log_dir)

    def coverage_build(self, work_dir):
        """This backend rebuilt from a copy of its package whose templates emit #line directives, its C compiled
        with gcov at -O0 into a cache of its own (glow_cpu.build.coverage)."""
        from .build import coverage
        return coverage.instrumented(type(self), work_dir)

    def coverage_report(self, work_dir):
        """Per template: the C lines executed, generated but never run, never generated (glow_cpu.build.coverage)."""
        from .build import coverage
        return coverage.collect(work_dir)

    def emit_bundle(self, function, out_dir, options) -> list[str]:
        options = dict(options or {})
        return write_bundle(Program(function, 1, chains=options.get("elementwise_chains", True),
                                    attention=options.get("attention", "auto"),
                                    folds=options.get("transpose_folding", True)), out_dir, options, prelude_text())


def _parallel_side(work: int, per_point: int, channels: int) -> int:
    """The side of a square output plane that makes ``channels * side**2 * per_point`` exceed ``work``."""
    return math.isqrt(work // (channels * per_point)) + 2


def _prime_above(w: int) -> int:
    """The least prime >= w: an output width no depthwise tile width (at most the registers less 3) divides."""
    while any(w % d == 0 for d in range(2, math.isqrt(w) + 1)):
        w += 1
    return w


def _engine_geometries() -> dict:
    """name -> (x shape, w shape, strides, pads, group) of float32 convs that the conv engine (constant filters)
    runs by each of its algorithms (conv_algorithms), with output planes large enough for its OpenMP region at two
    threads (PARALLEL_MIN_MACS; a quarter of it for depthwise). Winograd: every F(m x m) of WINOGRAD_LEAST_SIDE,
    on an output side from its least one up to below the next larger m's, not a multiple of m (a ragged last
    tile row), with the fewest channels it takes (WINOGRAD_MIN_CHANNELS) and half as many filters more (a partial
    filter block); padded (pad1) and not (pad0, two images). The direct kernel just below Winograd's channel
    count (two images), strided 3x3 and 1x1 reading x in place; depthwise (two images)."""
    ca = conv_algorithms
    work, c = ca.PARALLEL_MIN_MACS, ca.WINOGRAD_MIN_CHANNELS
    f = c + c // 2
    g = {}
    sides = sorted(least for _, least in ca.WINOGRAD_LEAST_SIDE)
    for m, least in ca.WINOGRAD_LEAST_SIDE:
        side = max(least, _parallel_side(work, 9 * c, f))
        side += 1 - side % 2 if side % m == 0 else 0
        larger = [s for s in sides if s > least]
        assert not larger or side < larger[0], (m, side, larger)
        g[f"winograd{m}_pad1"] = ((1, c, side, side), (f, c, 3, 3), [1, 1], [1] * 4, 1)
        g[f"winograd{m}_pad0_batch2"] = ((2, c, side + 2, side + 2), (f, c, 3, 3), [1, 1], [0] * 4, 1)
    side = _parallel_side(work, 9 * (c - 1), c)
    g["direct_3x3_below_winograd"] = ((2, c - 1, side, side), (c, c - 1, 3, 3), [1, 1], [1] * 4, 1)
    side = _parallel_side(work, 9 * c, f)
    g["direct_3x3_stride2"] = ((1, c, 2 * side + 1, 2 * side + 1), (f, c, 3, 3), [2, 2], [0] * 4, 1)
    side = _parallel_side(work, f, c)
    g["direct_1x1_in_place"] = ((1, f, side, side + 3), (c, f, 1, 1), [1, 1], [0] * 4, 1)
    side = _parallel_side(work // 4, 9, c)
    g["depthwise_3x3"] = ((2, c, side, side), (c, 1, 3, 3), [1, 1], [1] * 4, c)
    return g
