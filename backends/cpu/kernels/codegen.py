"""C code generation for the CPU backend: one relocatable kernel per distinct instruction.

A kernel's C depends only on what ``KernelInstr`` holds: the instruction's op, attributes, operand types (and
whether a weight is a constant) and the thread count. Operands come in as addresses, ``uint8_t *const *p``:
the instruction's operands in order (outputs, inputs, its @scratch operand), then the constants this module
prepares at compile time (``KernelCode.derived``). So identical instructions (a BERT encoder's twelve layers)
share one kernel, named by a hash of its source, and the toolchain caches each kernel's object code.

Templates (templates/*.c.j2) hold loop skeletons; this module computes everything static: strides, coalesced
dims, dtype conversions, the algorithm (``KernelCode.choice``), tiling and the scratch layout, which
``scratch_layout`` gives the memory planner through ``CPUBackend.scratch_bytes``. Generated code calls no
allocator. Model names never reach C except through ``c_comment`` (escaped).
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
from dataclasses import dataclass
from math import prod
from typing import Callable

import numpy as np

from glow_core.backend import Unsupported
from glow_core.errors import BackendError
from glow_core.fusion import FUSED_ACTIVATION, FUSED_PARAMS
from glow_core.graph import frozen
from glow_core.ir import PLAIN, stored_shape
from glow_core.layout import LAYOUT_CONVERT
from glow_core.memory import align_up
from glow_core.types import TensorType, dtype as to_dtype

from .quantized import BAKED, QuantizedKernels
from .quantized import scratch_bytes as int8_scratch_bytes
from ..conv.engine import ConvGeometry, Epilogue, layout_kernel, plan_conv
from .gemm_blocking import GEMM_TILES, gemm_pack_width, gemm_scratch_bytes, pack_b
from .ctypes_map import INT_LIMITS, ctype, supported
from . import ew as kernels_ew
from . import nn as kernels_nn
from . import storage_cast
from ..templates import PARALLEL_MIN_WORK, prelude_text, template


# Error kinds (see glow_prelude.h): the entry returns (1-based instruction number) * 8 + kind.
ERR_INDEX, ERR_DIV0 = 1, 2
ERR_KINDS = {ERR_INDEX: "index out of range", ERR_DIV0: "integer division or remainder by zero"}


_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _.,:;=+-()[]<>|@!~^&{}'\"")


def c_comment(text: str, limit: int = 160) -> str:
    """Text safe inside a C block comment: printable ASCII without '*', '/', '\\', '?', '#' or newlines;
    every other byte is percent-encoded, so no model name can close the comment or start a directive."""
    out = []
    for ch in str(text):
        if ch in _SAFE:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    s = "".join(out)
    return s if len(s) <= limit else s[:limit] + "..."


def c_ident(text: str) -> str:
    """A C identifier derived from ``text`` (for bundle names/macros): [A-Za-z0-9_], not starting with a digit."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", str(text)) or "_"
    if s[0].isdigit():
        s = "_" + s
    return s


def literal(value, dt: str) -> str:
    """A C expression of ``dt``'s storage type holding ``value`` converted as numpy would."""
    arr = np.array(value).astype(to_dtype(dt).np)
    if not supported(dt):  # storage-only 1-byte types: the byte
        return f"(uint8_t){int(arr.reshape(1).view(np.uint8)[0])}u"
    if dt == "bool":
        return "1" if bool(arr) else "0"
    if dt == "bfloat16":
        return f"(uint16_t){int(arr.view(np.uint16))}u"
    if dt in ("float32", "float64", "float16"):
        v = float(arr)
        if np.isnan(v):
            s = "NAN"
        elif np.isinf(v):
            s = "INFINITY" if v > 0 else "(-INFINITY)"
        else:
            s = float.hex(v)
        return f"(({ctype(dt).storage})({s}))"
    v = int(arr)
    if dt == "int64" and v == -2 ** 63:
        return "INT64_MIN"
    if dt.startswith("uint"):
        return f"(({ctype(dt).storage}){v}ull)"
    return f"(({ctype(dt).storage})({v}ll))"


#: The attribute of a matmul reading or writing operands through strides (strided_operands.py):
#: {"a" | "b" | "c": (batch shape, per-axis batch strides, row stride, column stride)} in elements from the
#: operand's address (batch ``bt`` of the matmul is the row-major ``bt``-th of that batch shape).
STRIDED = "strided"
#: The attribute of a conv (qconv) instruction carrying its fused residual add (fusion/residual.py): the add's
#: activation and parameters (the qadd's attributes).
RESIDUAL = "residual"


def batch_offset(batch_shape, strides, var: str = "bt") -> str:
    """The C expression of the element offset of batch ``var`` (row-major over ``batch_shape``) with the given
    per-axis strides."""
    terms, inner, total = [], 1, prod(batch_shape)
    for size, st in reversed(list(zip(batch_shape, strides))):
        if size != 1 and st != 0:
            t = var if inner == 1 else f"{var} / {inner}"
            if inner * size < total:
                t = f"({t}) % {size}"
            terms.append(f"({t}) * {st}")
        inner *= size
    return " + ".join(reversed(terms)) or "0"


def row_strides(shape) -> list[int]:
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return st[::-1]


def coalesce(dims):
    """dims: list of (size, istr, ostr). Drops size-1 dims and merges contiguous neighbours."""
    dims = [d for d in dims if d[0] != 1]
    out = []
    for d in dims:
        if out and out[-1][1] == d[1] * d[0] and out[-1][2] == d[2] * d[0]:
            s, _, _ = out[-1]
            out[-1] = (s * d[0], d[1], d[2])
        else:
            out.append(d)
    return out


# -- what a kernel sees ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Operand:
    """One operand as a kernel sees it: its slot in ``p``, its type, and whether it is a weight (constant)."""

    slot: int
    type: TensorType
    const: bool
    layout: str = PLAIN  # blocked (glow_core.layout): LAYOUT_AWARE kernels see the logical type, others the stored

    @property
    def size(self) -> int:
        return self.type.nbytes


def constant_value(b) -> np.ndarray:
    """The value of constant buffer ``b`` (a weight, or a view of one)."""
    if b.data is not None:
        return np.asarray(b.data)
    root = b.root
    raw = np.ascontiguousarray(root.data).reshape(-1).view(np.uint8)
    off = b.address - root.offset
    return raw[off:off + b.size].view(b.type.dtype.np).reshape(b.type.shape)


def _seen_type(op: str, b) -> TensorType:
    """The type a kernel indexes ``b`` by: the logical one for the layout-aware kernels (LAYOUT_AWARE) and plain
    buffers, the stored (padded, blocked) shape for the layout-agnostic elementwise kernels, which read it flat."""
    if b.layout == PLAIN or op in LAYOUT_AWARE:
        return b.type
    return TensorType(b.type.dtype, stored_shape(b.type.shape, b.layout), b.type.scale, b.type.offset)


class KernelInstr:
    """An instruction as its kernel sees it: op, attributes and ``Operand``s, without names or addresses
    (``ir.Instr``'s ``ins``/``outs``/``scratch`` interface), and ``values``: the constant values of the inputs
    (by input index) whose values the kernel's source depends on (codegen_int8.BAKED)."""

    __slots__ = ("op", "attrs", "operands", "values", "signature")

    def __init__(self, op: str, attrs: dict, operands: list[tuple[Operand, str]], values: dict | None = None):
        self.op, self.attrs, self.operands, self.values = op, attrs, operands, dict(values or {})
        self.signature = (op, frozen(attrs), tuple((k, o.type.dtype.name, o.type.shape, o.type.scale, o.type.offset,
                                                     o.const, o.layout) for o, k in operands), frozen(self.values))

    @classmethod
    def of(cls, instr, sources: dict | None = None) -> "KernelInstr":
        """``sources``: operand slots read from another buffer instead (stacking.read_in_place: a broadcast's
        source, of a smaller shape, in place of the broadcast's output)."""
        operands = [((sources or {}).get(i, b), k) for i, (b, k) in enumerate(instr.operands)]
        ins = [b for b, k in operands if k in ("in", "inout")]
        values = {i: constant_value(ins[i]) for i in BAKED.get(instr.op, ())
                  if i < len(ins) and ins[i].region == "constant"}
        return cls(instr.op, instr.attrs, [(Operand(i, _seen_type(instr.op, b), b.region == "constant", b.layout), k)
                                           for i, (b, k) in enumerate(operands)], values)

    @property
    def outs(self) -> list[Operand]:
        return [o for o, k in self.operands if k in ("out", "inout")]

    @property
    def ins(self) -> list[Operand]:
        return [o for o, k in self.operands if k in ("in", "inout")]

    @property
    def scratch(self) -> Operand | None:
        return next((o for o, k in self.operands if k == "scratch"), None)


@dataclass(frozen=True)
class Derived:
    """Constants a kernel reads that compile time prepares from constant operands: ``make(values of the operands
    in slots) -> count arrays`` (converted weights; packed int8 weights, corrections and multipliers). ``tag``
    names the transformation: the same operand buffers and tag share one copy in the constant region."""

    slots: tuple[int, ...]
    make: Callable
    tag: str
    count: int


@dataclass(frozen=True)
class KernelCode:
    """One generated kernel: ``source`` defines ``int NAME(uint8_t *const *p)`` (linkage ``GLOW_KERNEL``)."""

    name: str
    source: str
    gemms: tuple[str, ...]  # GEMM variants it calls (see gemm_source)
    derived: tuple[Derived, ...]  # constants prepared at compile time, after the operands in p
    choice: str  # the algorithm, for listings (glowc dump, the bundle's comments)


@dataclass(frozen=True)
class Split:
    """An elementwise loop as ``rows`` x ``cols`` (output element i = r * cols + j) and each input's index
    expression in r, j and i: the full index "i", a broadcast along the inner dims (a function of r), along
    the outer dims ("j"), or a splat ("0")."""

    rows: int
    cols: int
    index: tuple[str, ...]


def broadcast_split(out_shape, in_shapes) -> Split:
    """The loop split for inputs of ``in_shapes``: each equal to ``out_shape`` or a broadcast source of it (same
    rank, dims 1 or equal). The inner dims are the longest suffix on which each broadcast input is either all
    broadcast or all kept (and, if kept, broadcast along every outer dim)."""
    rank, n = len(out_shape), prod(out_shape)
    if all(tuple(s) == tuple(out_shape) for s in in_shapes):
        return Split(1, n, tuple("i" for _ in in_shapes))
    for q in range(rank + 1):
        index = []
        for s in in_shapes:
            idx = _split_index(out_shape, s, q)
            if idx is None:
                break
            index.append(idx)
        else:
            return Split(prod(out_shape[:q]), prod(out_shape[q:]), tuple(index))
    raise BackendError(f"cpu backend: elementwise inputs of shapes {list(map(tuple, in_shapes))} are not "
                       f"broadcasts of the output's {tuple(out_shape)}")


def _split_index(out_shape, s, q) -> "str | None":
    if tuple(s) == tuple(out_shape):
        return "i"
    if len(s) != len(out_shape) or any(a not in (1, b) for a, b in zip(s, out_shape)):
        return None
    kept = [a == b and b != 1 for a, b in zip(s, out_shape)]
    if not any(kept):
        return "0"
    inner = any(kept[q:])  # then all the inner dims must be kept: j indexes them
    if inner and not all(kept[d] or out_shape[d] == 1 for d in range(q, len(s))):
        return None
    if not any(kept[:q]):
        return "j"
    if not inner and all(kept[d] or out_shape[d] == 1 for d in range(q)):
        return "r"
    # a function of the row (mixed radix over the outer dims it keeps), plus j over kept inner dims (a
    # channel gate over NCHWc: x[N, C/cb, H, W, cb] * g[N, C/cb, 1, 1, cb])
    ost, sst = row_strides(out_shape[:q]), row_strides(s)
    terms = []
    for d in (d for d in range(q) if kept[d]):
        t = "r" if ost[d] == 1 else f"r / {ost[d]}"
        if ost[d] * out_shape[d] < prod(out_shape[:q]):
            t = f"{t} % {out_shape[d]}"
        terms.append(f"({t})" if sst[d] == 1 else f"({t}) * {sst[d]}")
    return " + ".join(terms + ["j"] * inner)


# -- scratch -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScratchLayout:
    """Where each scratch buffer of a kernel lives inside its @scratch operand (64-byte aligned offsets)."""

    offsets: dict
    total: int

    @classmethod
    def of(cls, parts) -> "ScratchLayout":
        offsets, off = {}, 0
        for name, size in parts:
            offsets[name] = off
            off = align_up(off + size)
        return cls(offsets, max(off, 64) if parts else 0)


def _acc(dt: str) -> tuple[str, str]:
    """(C accumulator type, numpy dtype name) of conv/matmul on ``dt``."""
    if dt == "float64":
        return "double", "float64"
    if ctype(dt).is_float:
        return "float", "float32"
    return ("int64_t", "int64") if ctype(dt).signed else ("uint64_t", "uint64")


@dataclass(frozen=True)
class ConvPlan:
    """The algorithm of one conv and its scratch: depthwise (direct per plane), direct GEMM (1x1, stride 1, no
    pad: the input is the GEMM's B), im2col + GEMM (float), or im2col + plain loops (integers)."""

    algo: str
    direct: bool
    native: bool  # computes in its own dtype (float32/float64)
    fast: bool  # GEMM
    convert_w: bool  # weights converted to the accumulator type
    w_derived: bool  # ... at compile time (a constant weight)
    acc_t: str
    acc_np: str
    scratch: ScratchLayout


#: Threads the conv engine's scratch is planned for (``scratch_bytes`` does not see the compile options): a
#: kernel compiled for more threads whose plan needs more scratch than that runs its conv single-threaded.
ENGINE_SCRATCH_THREADS = os.cpu_count() or 1


def _engine_steps(act, params) -> "tuple | None":
    """The conv engine's epilogue steps of one fused activation (glow_core.fusion): () for none; relu and clip,
    whose selects equal the lowered max/min bit for bit, sigmoid and silu, whose vector gce_sigmoid is the
    elementwise glow_sigmoidf operation for operation, and hard_sigmoid and hard_swish (the mul rounded before
    the add, then the clip's selects); None for the others (tanh, leaky_relu)."""
    if not act:
        return ()
    if act in ("relu", "sigmoid", "silu"):
        return (act,)
    for name, keys in (("clip", ("min", "max")), ("hard_sigmoid", ("alpha", "beta")),
                       ("hard_swish", ("alpha", "beta"))):
        if act == name and all(isinstance(params.get(k), (int, float)) and params[k] == params[k] for k in keys):
            return ((name,) + tuple(params[k] for k in keys),)
    return None


def _engine_epilogue(attrs) -> "Epilogue | None":
    """The conv engine's in-register epilogue of a conv: its fused activation, then a fused residual add
    (RESIDUAL, fusion/residual.py) and that add's activation. Without a residual, an activation the engine lacks is left
    out (``_engine_conv`` applies it after the engine with the elementwise expression, so that a fused result
    equals the unfused one exactly, as glow_core.fusion requires); with one, None when any step is not in it (its
    ``in_place``: the residual is planned in the output's own memory, Epilogue.in_place)."""
    steps = _engine_steps(attrs.get(FUSED_ACTIVATION), attrs.get(FUSED_PARAMS) or {})
    res = attrs.get(RESIDUAL)
    if res is None:
        return Epilogue(steps or ())
    after = _engine_steps(res["activation"], res["params"])
    if steps is None or after is None:
        return None
    return Epilogue(steps + ("residual",) + after, in_place=res["in_place"])


#: Partial sums of a reduce_sum over a contiguous run (``_Kernel._reduce``).
REDUCE_LANES = 8

_ENGINE_MEMO: dict = {}
#: Kernels that index their operands by the logical shape and the operand's layout.
LAYOUT_AWARE = ("conv", LAYOUT_CONVERT, "max_pool", "avg_pool")


def engine_layout(layout: str) -> str:
    """The conv engine's name of a buffer layout (glow_core.ir.stored_shape's 'nchwc<cb>' is its 'nchwc')."""
    return "nchwc" if layout.startswith("nchwc") else layout


def engine_conv(ki, num_threads: int):
    """The conv engine's kernel (backends/cpu/conv/engine.py) for a float32 ``conv`` with a constant filter,
    reading and writing the layouts of its operands (from plain NCHW the kernel converts to its blocked layout
    inside, through its scratch), or a falsy Unsupported naming why the generic kernel (``conv_plan``) computes
    it."""
    x, w, _ = ki.ins[:3]
    out = ki.outs[0]
    key = (ki.signature[:2] + tuple(s for s in ki.signature[2] if s[0] != "scratch"), num_threads)
    if key in _ENGINE_MEMO:
        return _ENGINE_MEMO[key]
    epilogue = _engine_epilogue(ki.attrs)
    if x.type.dtype.name != "float32" or not w.const:
        plan = Unsupported("conv engine: float32 convolutions with a constant filter only")
    elif epilogue is None:
        plan = Unsupported("conv engine: a fused residual add needs every activation in the epilogue's registers")
    else:
        a = ki.attrs
        geom = ConvGeometry.from_conv(x.type.shape, w.type.shape, a["strides"], a["dilations"], a["pads"],
                                      a.get("group", 1))
        plan = plan_conv(geom, epilogue=epilogue, num_threads=num_threads,
                         in_layout=engine_layout(x.layout), out_layout=engine_layout(out.layout))
        if plan and plan.geometry.out_spatial != tuple(out.type.shape[2:]):
            raise BackendError(f"cpu backend: conv engine output {plan.geometry.out_spatial} disagrees with the "
                               f"instruction's {out.type.shape}")
    if len(_ENGINE_MEMO) >= _MEMO_LIMIT:
        _ENGINE_MEMO.clear()
    _ENGINE_MEMO[key] = plan
    return plan


def conv_plan(ki) -> ConvPlan:
    x, w = ki.ins[:2]
    out = ki.outs[0]
    dt = x.type.dtype.name
    group = ki.attrs.get("group", 1)
    C, F = x.type.shape[1], w.type.shape[0]
    cg, fg = C // group, F // group
    ck, p = cg * prod(w.type.shape[2:]), prod(out.type.shape[2:])
    native = dt in ("float32", "float64")
    fast = ctype(dt).is_float
    acc_t, acc_np = _acc(dt)
    item = to_dtype(acc_np).itemsize
    if native and cg == 1 and fg == 1:
        return ConvPlan("depthwise direct", False, True, False, False, False, acc_t, acc_np, ScratchLayout({}, 0))
    st, pads = ki.attrs["strides"], ki.attrs["pads"]
    direct = native and all(k == 1 for k in w.type.shape[2:]) and all(s == 1 for s in st) and not any(pads)
    convert_w = not native
    w_derived = convert_w and w.const
    parts = []
    if convert_w and not w_derived:
        parts.append(("wc", item * F * ck))
    if not native:
        parts.append(("oc", item * fg * p))
    if fast:
        parts.append(("gemm", gemm_scratch_bytes("f64" if dt == "float64" else "f32", fg, p, ck)))
    if not direct:  # last: an im2col write past its end leaves the @scratch operand (memory checkers see it)
        parts.append(("col", item * ck * p))
    algo = ("direct" if direct else "im2col") + (f" + gemm {'f64' if dt == 'float64' else 'f32'}" if fast else
                                                 f" + loops in {acc_t}")
    if convert_w:
        algo += f", weights in {acc_np}" + (" (prepared at compile time)" if w_derived else "")
    return ConvPlan(algo, direct, native, fast, convert_w, w_derived, acc_t, acc_np, ScratchLayout.of(parts))


@dataclass(frozen=True)
class MatmulPlan:
    """gemm (float32/float64), convert (float16/bfloat16 through a float32 GEMM) or naive (small or integer)."""

    mode: str
    sfx: str
    acc_t: str
    b_derived: bool
    scratch: ScratchLayout


def matmul_plan(ki) -> MatmulPlan:
    a, b = ki.ins
    dt = a.type.dtype.name
    m, k = a.type.shape[-2:]
    n = b.type.shape[-1]
    big = m * n * k >= 32768
    acc_t, acc_np = _acc(dt)
    if dt in ("float32", "float64") and big:
        sfx = "f32" if dt == "float32" else "f64"
        return MatmulPlan("gemm", sfx, acc_t, b.const,
                          ScratchLayout.of([("gemm", gemm_scratch_bytes(sfx, m, n, k, packed_b=b.const))]))
    if dt in ("float16", "bfloat16") and big:
        parts = [("ca", 4 * m * k)] + ([] if b.const else [("cb", 4 * k * n)]) + \
                [("cc", 4 * m * n), ("gemm", gemm_scratch_bytes("f32", m, n, k))]
        return MatmulPlan("convert", "f32", "float", b.const, ScratchLayout.of(parts))
    return MatmulPlan("naive", "", acc_t, False, ScratchLayout.of([("row", to_dtype(acc_np).itemsize * n)]))


def scratch_layout(ki) -> ScratchLayout:
    """The scratch a kernel needs (its @scratch operand's size is ``total``); empty for most kernels."""
    if any(o.type.numel == 0 for o in ki.outs):
        return ScratchLayout({}, 0)
    if ki.op == "conv":
        engine = engine_conv(ki, ENGINE_SCRATCH_THREADS)
        if engine:
            return ScratchLayout.of([("engine", engine.scratch_bytes)] if engine.scratch_bytes else [])
        return conv_plan(ki).scratch
    if ki.op == "matmul":
        return matmul_plan(ki).scratch
    if ki.op in kernels_nn.SCRATCH:
        return ScratchLayout.of([("nn", kernels_nn.SCRATCH[ki.op](ki))])
    if ki.op in BAKED:
        n = int8_scratch_bytes(ki)
        return ScratchLayout({"int8": 0}, n) if n else ScratchLayout({}, 0)
    return ScratchLayout({}, 0)


# -- GEMM variants ----------------------------------------------------------------------------------------------
_GEMMS: dict[str, str] = {}


def gemm_name(sfx: str, activation: str | None) -> str:
    return f"{sfx}_{activation}" if activation else sfx


def gemm_source(name: str) -> str:
    """The C of GEMM variant ``name`` ("f32", "f64", or with a fused activation: "f32_relu", ...)."""
    if name not in _GEMMS:
        sfx, _, act = name.partition("_")
        tl = GEMM_TILES[sfx]
        dt = "float64" if sfx == "f64" else "float32"
        epi = kernels_ew.activation(act, dt, "v", {p: f"e{i}" for i, p in enumerate(kernels_ew.ACTIVATION_PARAMS[
            act])}) if act else None
        _GEMMS[name] = template("gemm.c.j2").render(name=name, sfx=sfx, epi=epi, pnr=gemm_pack_width(sfx), **tl)
    return _GEMMS[name]


def stacked(op: str) -> bool:
    """Whether ``op``'s kernel is the elementwise loop, which reads broadcast inputs in place (stacking.py)."""
    return not hasattr(_Kernel, "k_" + op) and (op in kernels_ew.UNARY or op in kernels_ew.BINARY
                                                 or op in ("select", "mod"))


def _product(step) -> bool:
    """Whether a chain step's value is a product (see _Kernel.k_elementwise_chain)."""
    return step[0] == "mul" or step[5] == "silu"


def chainable(instr) -> bool:
    """Whether instruction ``instr`` may join an elementwise chain (chains.py): its kernel is the elementwise
    loop over a non-empty output of computable types, without divisor checks."""
    if len(instr.outs) != 1 or instr.scratch is not None or instr.outs[0].type.numel == 0:
        return False
    dts = [b.type.dtype.name for b in instr.ins]
    out = instr.outs[0].type.dtype.name
    if not (stacked(instr.op) or instr.op == "cast") or not all(supported(d) for d in dts + [out]):
        return False
    return not kernels_ew.expression(instr.op, dts, out, [f"a{i}" for i in range(len(dts))], instr.attrs)[1]


# -- kernels --------------------------------------------------------------------------------------------------------
_MEMO: dict = {}
_MEMO_LIMIT = 8192
_PLACEHOLDER = "GLOW_KERNEL_NAME"


def kernel_code(ki: KernelInstr, num_threads: int) -> KernelCode:
    """The kernel of ``ki`` (memoized by its signature: identical instructions render once)."""
    key = (ki.signature, num_threads)
    code = _MEMO.get(key)
    if code is None:
        if len(_MEMO) >= _MEMO_LIMIT:
            _MEMO.clear()
        gen = _Kernel(ki, num_threads)
        src = gen.render()
        name = "glow_k_" + hashlib.sha1(src.encode()).hexdigest()[:20]
        code = _MEMO[key] = KernelCode(name, src.replace(_PLACEHOLDER, name), tuple(sorted(gen.gemms)),
                                       tuple(gen.derived), gen.choice)
    return code


class _Kernel(QuantizedKernels):
    """Renders the kernel of one KernelInstr (one method per primitive family; the quantized ones in
    codegen_int8)."""

    def __init__(self, ki: KernelInstr, num_threads: int):
        self.ki = ki
        self.nt = num_threads
        self.gemms: set[str] = set()
        self.derived: list[Derived] = []
        self.choice = ""

    def render(self) -> str:
        ki = self.ki
        fn = _PLACEHOLDER
        if any(o.type.numel == 0 for o in ki.outs):
            self.choice = "empty output: nothing to compute"
            return f"GLOW_KERNEL int {fn}(uint8_t *const *p) {{ (void)p; return 0; }}\n"
        method = getattr(self, "k_" + ki.op, None)
        if method is None and ki.op in kernels_nn.KERNELS:  # ops the backend keeps whole
            method = functools.partial(kernels_nn.KERNELS[ki.op], self)
        if method is None:
            if ki.op in kernels_ew.UNARY or ki.op in kernels_ew.BINARY or ki.op in ("select", "mod"):
                method = self.k_elementwise
            else:
                raise BackendError(f"cpu backend: no kernel for op {ki.op!r}")
        src = method(ki, fn=fn)
        self.choice = self.choice or ki.op
        return src

    def t(self, name: str, **ctx) -> str:
        return template(name).render(nt=self.nt, **ctx)

    # -- helpers ------------------------------------------------------------------------------------
    @staticmethod
    def ptr(b) -> str:
        return f"p[{b.slot}]"

    def tptr(self, b, const=False) -> str:
        t = ctype(b.type.dtype.name).storage
        return f"(({'const ' if const else ''}{t} *){self.ptr(b)})"

    def scratch_ptr(self) -> str:
        s = self.ki.scratch
        if s is None:
            raise BackendError(f"cpu backend: a {self.ki.op} kernel needs scratch memory but the instruction has "
                               "no @scratch operand (plan the IR with glow_core.ir.attach_scratch(irf, "
                               "backend.scratch_bytes))")
        return self.ptr(s)

    def derive(self, b, np_dtype: str, key: str = "", make: Callable | None = None) -> str:
        """The address of operand ``b`` converted to ``np_dtype`` at compile time (an extra constant), or, with
        ``key`` and ``make``, transformed by ``make(value)`` (a repacking)."""
        fn = make or (lambda a: a.astype(np_dtype))
        (ptr,) = self.derive_many((b.slot,), lambda arrays: [fn(arrays[0])], key or f"as {np_dtype}", 1)
        return ptr

    def derive_many(self, slots, make, tag: str, count: int) -> list[str]:
        """The addresses of the ``count`` arrays ``make([values of the constant operands in slots])`` returns
        (constants prepared at compile time, see ``Derived``)."""
        first = len(self.ki.operands) + sum(d.count for d in self.derived)
        self.derived.append(Derived(tuple(slots), make, tag, count))
        return [f"p[{first + i}]" for i in range(count)]

    def epilogue(self, dt: str) -> str | None:
        """The fused activation (FUSED_ACTIVATION) as an expression of the stored value ``v``, or None."""
        act = self.ki.attrs.get(FUSED_ACTIVATION)
        if not act:
            return None
        params = self.ki.attrs.get(FUSED_PARAMS) or {}
        self.choice += f", {act} fused"
        return kernels_ew.activation(act, dt, "v", {k: literal(v, dt) for k, v in params.items()})

    def epilogue_args(self, dt: str) -> tuple[str, str]:
        """The GEMM's (e0, e1): the fused activation's parameters as literals."""
        act = self.ki.attrs.get(FUSED_ACTIVATION)
        params = self.ki.attrs.get(FUSED_PARAMS) or {}
        vals = [literal(params[k], dt) for k in kernels_ew.ACTIVATION_PARAMS.get(act, ())] if act else []
        vals += ["0"] * (2 - len(vals))
        return vals[0], vals[1]

    # -- elementwise --------------------------------------------------------------------------------
    def k_elementwise(self, ins, fn):
        out = ins.outs[0]
        n = out.type.numel
        args = ins.ins
        decls = [f"{ctype(out.type.dtype.name).storage} *out = {self.tptr(out)}"]
        for i, b in enumerate(args):
            decls.append(f"const {ctype(b.type.dtype.name).storage} *in{i} = {self.tptr(b, True)}")
        split = broadcast_split(out.type.shape, [b.type.shape for b in args])
        names = [f"in{i}[{idx}]" for i, idx in enumerate(split.index)]
        expr, checks = kernels_ew.expression(ins.op, [b.type.dtype.name for b in args], out.type.dtype.name,
                                             names, {k: v for k, v in ins.attrs.items() if not k.startswith("_")})
        self.choice = ins.op + "".join(f", input {i} read in place from its broadcast source ({idx})"
                                       for i, (b, idx) in enumerate(zip(args, split.index))
                                       if b.type.shape != out.type.shape)
        epi = self.epilogue(out.type.dtype.name)
        store = f"out[i] = {expr}" if epi is None else \
            f"const {ctype(out.type.dtype.name).storage} v = {expr}; out[i] = {epi}"
        if checks:  # divisor checks, over input 1's own elements (a broadcast reads each of them)
            checks = kernels_ew.expression(ins.op, [b.type.dtype.name for b in args], out.type.dtype.name,
                                           [f"in{i}[i]" for i in range(len(args))], {})[1]
        return self.t("elementwise.c.j2",
            fn=fn, decls=decls, loads=[], store=store, n=n, rows=split.rows, cols=split.cols,
            check_n=args[1].type.numel if checks else n, parallel=self.nt > 1, checks=checks, err=ERR_DIV0)

    def k_elementwise_chain(self, ins, fn):
        """A chain of elementwise instructions (chains.py) as one loop: each member's value is a local of its
        storage type, computed by the member's own expression and rounded as its kernel stores it, so the loop
        computes bit for bit what the members' kernels do. A float member value that is a product (mul, a silu
        epilogue) gets + glow_nz, -0.0 the compiler cannot see (x + -0.0 == x for every x but a signaling NaN):
        a product feeding another member's addition would otherwise be contracted into an FMA that the
        separate kernels, storing the product in between, do not compute."""
        out, args = ins.outs[0], ins.ins
        split = broadcast_split(out.type.shape, [b.type.shape for b in args])
        decls = [f"{ctype(out.type.dtype.name).storage} *out = {self.tptr(out)}"]
        decls += [f"const {ctype(b.type.dtype.name).storage} *in{i} = {self.tptr(b, True)}"
                  for i, b in enumerate(args)]
        steps = ins.attrs["steps"]
        barriers = {ctype(s[4]).compute for s in steps[:-1] if _product(s) and s[4] in ("float32", "float64")}
        decls += [f"volatile {c} glow_vnz_{c} = -0.0; const {c} glow_nz_{c} = glow_vnz_{c}" for c in sorted(barriers)]
        lines, shown = [], []
        for k, (op, attrs, refs, in_dts, out_dt, act, params) in enumerate(steps):
            names = [f"in{a}[{split.index[a]}]" if kind == "in" else f"t{a}" for kind, a in refs]
            expr = kernels_ew.expression(op, list(in_dts), out_dt, names, attrs)[0]
            t = ctype(out_dt).storage
            if act:
                lines.append(f"const {t} t{k}_v = {expr}")
                expr = kernels_ew.activation(act, out_dt, f"t{k}_v", {p: literal(v, out_dt) for p, v in params.items()})
            shown.append(f"{'out' if k == len(steps) - 1 else f't{k}'} = {op}"
                         f"({', '.join(f'{kind}{a}' if kind == 'in' else f't{a}' for kind, a in refs)})"
                         + (f" + {act}" if act else ""))
            if k < len(steps) - 1:
                if _product(steps[k]) and out_dt in ("float32", "float64"):
                    expr = f"({expr}) + glow_nz_{ctype(out_dt).compute}"
                lines.append(f"const {t} t{k} = {expr}")
        self.choice = (f"elementwise chain of {len(steps)} in one loop: {'; '.join(shown)}"
                       + "".join(f", in{i} read in place from its broadcast source ({idx})"
                                 for i, (b, idx) in enumerate(zip(args, split.index))
                                 if b.type.shape != out.type.shape))
        return self.t("elementwise.c.j2",
            fn=fn, decls=decls, loads=lines, store=f"out[i] = {expr}", n=out.type.numel, rows=split.rows,
            cols=split.cols, parallel=self.nt > 1, checks=[], err=0)

    def k_cast(self, ins, fn):
        """Casts between computable types are elementwise expressions; those from or to a storage-only type
        use tables derived from the reference cast (see storage_cast.py)."""
        x, out = ins.ins[0], ins.outs[0]
        src, dst = x.type.dtype.name, out.type.dtype.name
        if supported(src) and supported(dst):
            return self.k_elementwise(ins, fn)
        sat, rm = ins.attrs.get("saturate", 1), ins.attrs.get("round_mode", "up")
        sct, dct = ctype(src), ctype(dst)
        decls = [f"{dct.storage} *out = {self.tptr(out)}", f"const {sct.storage} *in0 = {self.tptr(x, True)}"]
        pre = ""
        if x.type.dtype.itemsize == 1:
            table = storage_cast.byte_table(src, dst, sat, rm)
            lits = [str(int(v)) for v in table.view(np.uint8)] if not supported(dst) else \
                [literal(v, dst) for v in table]
            decls.append(f"static const {dct.storage} lut[256] = {{ {', '.join(lits)} }}")
            expr = "lut[(uint8_t)in0[i]]"
        elif dst in storage_cast.INT_STORAGE:
            mask = storage_cast.INT_STORAGE[dst]
            v = f"glow_f2i_wrap((double)({sct.ld('in0[i]')}))" if sct.is_float else sct.ld("in0[i]")
            expr = f"(uint8_t)((uint64_t)({v}) & {mask}u)"
        else:
            width = 32 if src in ("float32", "float16", "bfloat16") or dst == "float8e8m0" else 64
            (pos, neg), nans = storage_cast.threshold_tables(width, dst, sat, rm)
            sfx = "u" if width == 32 else "ull"
            ft = "float" if width == 32 else "double"
            pre = self.t("storage_cast.c.j2",
                fn=fn, ut=f"uint{width}_t", ft=ft, width=width, pos_starts=[f"{b}{sfx}" for b in pos[0]],
                pos_codes=pos[1], neg_starts=[f"{b}{sfx}" for b in neg[0]], neg_codes=neg[1], nan_pos=nans[0],
                nan_neg=nans[1])
            expr = f"{fn}_cvt(({ft})({sct.ld('in0[i]')}))"
        return pre + self.t("elementwise.c.j2",
            fn=fn, decls=decls, loads=[], store=f"out[i] = {expr}", n=out.type.numel,
            parallel=self.nt > 1, checks=[], err=0)

    # -- movement -----------------------------------------------------------------------------------
    def _strided(self, fn, out, pieces, fill=None):
        t = ctype(out.type.dtype.name).storage
        rendered = []
        for in_buf, shape, istr, ostr, ibase, obase in pieces:
            if prod(shape) == 0:
                continue
            dims = coalesce(list(zip(shape, istr, ostr)))
            if not dims:
                dims = [(1, 0, 0)]
            inner = dims[-1]
            outer = dims[:-1]
            rendered.append(dict(in_ptr=self.ptr(in_buf), outer_rank=len(outer),
                                 outer_shape=[d[0] for d in outer], outer_istr=[d[1] for d in outer],
                                 outer_ostr=[d[2] for d in outer], in_base=ibase, out_base=obase,
                                 outer_count=prod(d[0] for d in outer), inner=inner[0], inner_istr=inner[1],
                                 inner_ostr=inner[2]))
        return self.t("strided.c.j2",
            fn=fn, t=t, out_ptr=self.ptr(out), pieces=rendered,
            fill=fill, fill_n=out.type.numel)

    def _memcpy(self, fn, out, src):
        self.choice = "memmove"
        return (f"GLOW_KERNEL int {fn}(uint8_t *const *p) {{\n"
                f"  if ({self.ptr(out)} != {self.ptr(src)}) memmove({self.ptr(out)}, {self.ptr(src)}, "
                f"{min(out.size, src.size)});\n  return 0;\n}}\n")

    def k_copy(self, ins, fn):
        return self._memcpy(fn, ins.outs[0], ins.ins[0])

    k_reshape = k_copy
    k_bitcast = k_copy

    def k_transpose(self, ins, fn):
        x, out = ins.ins[0], ins.outs[0]
        perm = ins.attrs["perm"]
        ist = row_strides(x.type.shape)
        return self._strided(fn, out, [(x, out.type.shape, [ist[p] for p in perm],
                                                 row_strides(out.type.shape), 0, 0)])

    def k_broadcast(self, ins, fn):
        x, out = ins.ins[0], ins.outs[0]
        ist = row_strides(x.type.shape)
        istr = [0 if (s == 1 and d != 1) else st for s, d, st in zip(x.type.shape, out.type.shape, ist)]
        return self._strided(fn, out, [(x, out.type.shape, istr, row_strides(out.type.shape), 0, 0)])

    def k_slice(self, ins, fn):
        x, out = ins.ins[0], ins.outs[0]
        ist = row_strides(x.type.shape)
        starts, steps = ins.attrs["starts"], ins.attrs["steps"]
        base = sum(s * st for s, st in zip(starts, ist)) if out.type.numel else 0
        istr = [st * sp for st, sp in zip(ist, steps)]
        return self._strided(fn, out, [(x, out.type.shape, istr, row_strides(out.type.shape), base, 0)])

    def k_concat(self, ins, fn):
        out = ins.outs[0]
        axis = ins.attrs["axis"]
        ost = row_strides(out.type.shape)
        pieces, pos = [], 0
        for x in ins.ins:
            pieces.append((x, x.type.shape, row_strides(x.type.shape), ost, 0, pos * ost[axis]))
            pos += x.type.shape[axis]
        return self._strided(fn, out, pieces)

    def k_pad(self, ins, fn):
        x, out = ins.ins[0], ins.outs[0]
        n = x.type.rank
        pads = ins.attrs["pads"]
        interior = ins.attrs.get("interior") or [0] * n
        ost = row_strides(out.type.shape)
        value = ins.attrs.get("value", 0.0)
        dt = out.type.dtype.name
        fill = literal(bool(value) if dt == "bool" else value, dt)
        obase = sum(pads[i] * ost[i] for i in range(n))
        pieces = [(x, x.type.shape, row_strides(x.type.shape), [ost[i] * (interior[i] + 1) for i in range(n)],
                   0, obase)]
        return self._strided(fn, out, pieces, fill=fill)

    # -- index ops -----------------------------------------------------------------------------------
    def k_gather(self, ins, fn):
        x, idx = ins.ins
        out = ins.outs[0]
        axis = ins.attrs["axis"]
        xs = x.type.shape
        return self.t("gather.c.j2",
            fn=fn, out_ptr=self.ptr(out), x_ptr=self.ptr(x), idx_ptr=self.ptr(idx),
            idx_t=ctype(idx.type.dtype.name).storage, nidx=idx.type.numel, dim=xs[axis], outer=prod(xs[:axis]),
            row_bytes=prod(xs[axis + 1:]) * x.type.dtype.itemsize, err=ERR_INDEX)

    def k_gather_nd(self, ins, fn):
        x, idx = ins.ins
        out = ins.outs[0]
        bd = ins.attrs.get("batch_dims", 0)
        xs, ish = x.type.shape, idx.type.shape
        k = ish[-1]
        nb = prod(xs[:bd])
        rows = prod(ish[bd:-1])
        if k == 0:  # whole slices: copy each batch's data rows times
            return self._strided(fn, out, [(x, (nb, rows, prod(xs[bd:])), (prod(xs[bd:]), 0, 1),
                                                     (rows * prod(xs[bd:]), prod(xs[bd:]), 1), 0, 0)])
        xst = row_strides(xs)
        return self.t("gather_nd.c.j2",
            fn=fn, out_ptr=self.ptr(out), x_ptr=self.ptr(x), idx_ptr=self.ptr(idx),
            idx_t=ctype(idx.type.dtype.name).storage, k=k, dims=list(xs[bd:bd + k]), strides=xst[bd:bd + k],
            nb=nb, rows=rows, xbatch=prod(xs[bd:]), slice_bytes=prod(xs[bd + k:]) * x.type.dtype.itemsize,
            itemsize=x.type.dtype.itemsize, err=ERR_INDEX)

    def k_scatter_nd(self, ins, fn):
        x, idx, upd = ins.ins
        out = ins.outs[0]
        dt = x.type.dtype.name
        ct = ctype(dt)
        k = idx.type.shape[-1]
        xs = x.type.shape
        red = ins.attrs.get("reduction", "none")
        cmp_t = ct.compute
        combine = kernels_ew.combine(red, dt, "a", "b")
        if k == 0:
            return self._memcpy(fn, out, x) if idx.type.numel == 0 else \
                self._scatter_whole(ins, fn)
        return self.t("scatter_nd.c.j2",
            fn=fn, t=ct.storage, out_ptr=self.ptr(out), x_ptr=self.ptr(x), idx_ptr=self.ptr(idx),
            upd_ptr=self.ptr(upd), idx_t=ctype(idx.type.dtype.name).storage, k=k, dims=list(xs[:k]),
            strides=row_strides(xs)[:k], rows=idx.type.numel // k, slice=prod(xs[k:]), nbytes=x.size,
            cmp_t=cmp_t, load_a=ct.ld("out[off + s]"), load_b=ct.ld("upd[r * %d + s]" % prod(xs[k:])),
            combine=ct.st(combine), err=ERR_INDEX)

    def _scatter_whole(self, ins, fn):
        raise BackendError("cpu backend: scatter_nd with empty index tuples is not supported")

    # -- reductions ----------------------------------------------------------------------------------
    def _reduce(self, ins, fn):
        x, out = ins.ins[0], ins.outs[0]
        axes = list(ins.attrs["axes"])
        dt = x.type.dtype.name
        ct = ctype(dt)
        op = ins.op
        if x.layout != PLAIN:
            return self._reduce_blocked(ins, fn)
        ist = row_strides(x.type.shape)
        kept = [(s, st) for i, (s, st) in enumerate(zip(x.type.shape, ist)) if i not in axes and s != 1]
        red = [(s, st) for i, (s, st) in enumerate(zip(x.type.shape, ist)) if i in axes and s != 1]
        acc_t, init, update = kernels_ew.reduce_parts(op, dt)
        if any(s == 0 for s, _ in red):  # an empty reduction: one loop of no iteration leaves the identity
            red = [(0, 0)]
        load_idx = " + ".join([f"o{i} * {st}" for i, (_, st) in enumerate(kept)] +
                              [f"r{i} * {st}" for i, (_, st) in enumerate(red)]) or "0"
        kst = row_strides([s for s, _ in kept])
        out_idx = " + ".join(f"o{i} * {st}" for i, st in enumerate(kst)) or "0"
        # A sum over one contiguous run of the input (e.g. a global average pool): LANES independent partial sums
        # (the compiler vectorizes them; one chain of dependent adds is latency-bound), combined pairwise.
        run = prod(s for s, _ in red)
        lanes = REDUCE_LANES if op == "reduce_sum" and run >= 2 * REDUCE_LANES and \
            [st for _, st in red] == row_strides([s for s, _ in red]) else 0
        if lanes:
            self.choice = f"reduce_sum: {lanes} partial sums over runs of {run}"
        return self.t("reduce.c.j2",
            fn=fn, out_t=ct.storage, in_t=ct.storage, out_ptr=self.ptr(out), in_ptr=self.ptr(x), lanes=lanes,
            run=run, base=" + ".join(f"o{i} * {st}" for i, (_, st) in enumerate(kept)) or "0",
            load_q=f"({acc_t})" + ct.ld("src[q + l]"), load_t=f"({acc_t})" + ct.ld("src[q]"),
            parallel=self.nt > 1 and len(kept) > 0, work=x.type.numel, kept=[s for s, _ in kept],
            red=[s for s, _ in red], acc_t=acc_t, init=init, load=f"({acc_t})" + ct.ld(f"in[{load_idx}]"),
            update=update, out_idx=out_idx, store=ct.st(f"({ct.compute})acc"))

    def _reduce_blocked(self, ins, fn):
        """A reduction over every spatial axis of an NCHWc input (layouts.SPATIAL_REDUCES), whose kernel sees the
        stored [N, C/cb, *spatial, cb] shape: per channel block, cb accumulators over the plane, lane by lane
        (one vector); the lanes past C are not stored (the output is plain [N, C, 1.., 1..])."""
        x, out = ins.ins[0], ins.outs[0]
        dt = x.type.dtype.name
        ct = ctype(dt)
        n, blocks, *spatial, cb = x.type.shape
        acc_t, init, update = kernels_ew.reduce_parts(ins.op, dt)
        plane = prod(spatial)
        self.choice = f"{ins.op} over NCHWc: {cb} lanes of a channel block at once, over planes of {plane}"
        return self.t("reduce_blocked.c.j2",
            fn=fn, out_t=ct.storage, in_t=ct.storage, out_ptr=self.ptr(out), in_ptr=self.ptr(x), rows=n * blocks,
            blocks=blocks, cb=cb, plane=plane, c=out.type.shape[1], acc_t=acc_t, init=init, update=update,
            load=f"({acc_t})" + ct.ld("src[q * %d + l]" % cb), store=ct.st(f"({ct.compute})acc"),
            parallel=self.nt > 1 and n * blocks > 1, work=x.type.numel)

    k_reduce_sum = k_reduce_prod = k_reduce_max = k_reduce_min = _reduce

    def _arg(self, ins, fn):
        x, out = ins.ins[0], ins.outs[0]
        axis = ins.attrs["axis"]
        last = ins.attrs.get("select_last_index", 0)
        xs = x.type.shape
        ct = ctype(x.type.dtype.name)
        n = xs[axis]
        inner = prod(xs[axis + 1:])
        cmp = ">" if ins.op == "argmax" else "<"
        if n == 0:
            raise BackendError(f"cpu backend: {ins.op} over an empty axis")
        return self.t("arg.c.j2",
            fn=fn, out_ptr=self.ptr(out), in_ptr=self.ptr(x), in_t=ct.storage, cmp_t=ct.compute,
            outer=prod(xs[:axis]), inner=inner, n=n, first=(n - 1) if last else 0,
            jexpr=f"{n - 1} - s" if last else "s", load_best=ct.ld(f"pv[({(n - 1) if last else 0}) * {inner}]"),
            load_v=ct.ld(f"pv[j * {inner}]"), better=f"v {cmp} best || v != v")

    k_argmax = k_argmin = _arg

    # -- matmul / conv / pool ----------------------------------------------------------------------------
    def k_matmul(self, ins, fn):
        a, b = ins.ins
        out = ins.outs[0]
        dt = a.type.dtype.name
        ct = ctype(dt)
        m, k = a.type.shape[-2:]
        n = b.type.shape[-1]
        plan = matmul_plan(ins)
        mode, acc_t = plan.mode, plan.acc_t
        scratch = self.scratch_ptr()
        self.choice = {"gemm": f"gemm {plan.sfx}" + (" (b packed at compile time)" if plan.b_derived else ""),
                       "naive": f"loops in {acc_t}",
                       "convert": "gemm f32 on converted operands" + (
                           " (b prepared at compile time)" if plan.b_derived else "")}[mode]
        epi = self.epilogue(dt)
        gemm, cb_ptr, bp_ptr = "", "", ""
        if mode == "gemm":
            gemm = gemm_name(plan.sfx, ins.attrs.get(FUSED_ACTIVATION))
            if plan.b_derived:
                bp_ptr = self.derive(b, "", f"gemm panels {plan.sfx}", functools.partial(pack_b, sfx=plan.sfx))
        elif mode == "convert":
            gemm = gemm_name(plan.sfx, None)
            cb_ptr = self.derive(b, "float32") if plan.b_derived else ""
        if gemm:
            self.gemms.add(gemm)
        if mode == "convert":
            load_a, load_b = ct.ld(f"a[bt * {m * k} + i]"), ct.ld(f"b[bt * {k * n} + i]")
            store_c = ct.st("cc[i]")
        else:
            load_a = f"({acc_t})" + ct.ld(f"a[bt * {m * k} + i * {k} + kk]")
            load_b = f"({acc_t})" + ct.ld("brow[j]")
            store_c = ct.st(f"({ct.compute})row[j]")
        e0, e1 = self.epilogue_args(dt) if mode == "gemm" else ("0", "0")
        strided = self._strided_operands(ins, m, n, k) if mode == "gemm" else None
        return self.t("matmul.c.j2", strided=strided,
                      fn=fn, choice=self.choice, out_t=ct.storage, in_t=ct.storage, out_ptr=self.ptr(out),
                      a_ptr=self.ptr(a), b_ptr=self.ptr(b), mode=mode, batch=prod(a.type.shape[:-2]), m=m, n=n, k=k,
                      gemm=gemm, acc_t=acc_t, load_a=load_a, load_b=load_b, store_c=store_c, epi=epi or "v", e0=e0,
                      e1=e1, scratch=scratch, off=plan.scratch.offsets, cb_ptr=cb_ptr, bp_ptr=bp_ptr,
                      bp_size=k * -(-n // gemm_pack_width(plan.sfx or "f32")) * gemm_pack_width(plan.sfx or "f32"))

    def _strided_operands(self, ins, m, n, k) -> "dict | None":
        """The GEMM's per-batch offsets (C expressions in ``bt``), row and column strides of A, B and C when the
        matmul reads or writes some of them through strides (attribute STRIDED, strided_operands.py)."""
        given = ins.attrs.get(STRIDED)
        if not given:
            return None
        out = {}
        for name, (rows, cols) in (("a", (m, k)), ("b", (k, n)), ("c", (m, n))):
            if name in given:
                bshape, bst, rs, cs = given[name]
                off = batch_offset(bshape, bst)
                self.choice += (f", {name} {'written' if name == 'c' else 'read'} through strides (batch "
                                f"{list(bst)}, rows {rs}, columns {cs})")
            else:
                off, rs, cs = f"bt * {rows * cols}", cols, 1
            out.update({name + "_off": off, "ld" + name: rs, "cs" + name: cs})
        return out

    def _window_dims(self, ins, x, out, kernel):
        n = x.type.rank - 2
        st, dil, pads = ins.attrs["strides"], ins.attrs["dilations"], ins.attrs["pads"]
        return [dict(o=out.type.shape[2 + i], k=kernel[i], s=st[i], dil=dil[i], p=pads[i], size=x.type.shape[2 + i])
                for i in range(n)]

    def k_conv(self, ins, fn):
        engine = engine_conv(ins, self.nt)
        if engine:
            return self._engine_conv(ins, fn, engine)
        if RESIDUAL in ins.attrs:
            raise BackendError(f"cpu backend: a conv with a fused residual add runs on the conv engine only, which "
                               f"does not take it: {engine.reason}")
        x, w, bias = ins.ins
        out = ins.outs[0]
        dt = x.type.dtype.name
        ct = ctype(dt)
        plan = conv_plan(ins)
        self.choice = plan.algo
        group = ins.attrs.get("group", 1)
        kernel = w.type.shape[2:]
        dims = self._window_dims(ins, x, out, kernel)
        if plan.algo == "depthwise direct":
            return self._depthwise(fn, x, w, bias, out, dims)
        N, C = x.type.shape[:2]
        F = w.type.shape[0]
        cg, fg = C // group, F // group
        kk = prod(kernel)
        acc_t = plan.acc_t
        gemm = ""
        if plan.fast:
            gemm = gemm_name("f64" if dt == "float64" else "f32", None)
            self.gemms.add(gemm)
        istr = row_strides(x.type.shape[2:])
        ost = row_strides(out.type.shape[2:])
        kst = row_strides(kernel)
        kidx = " + ".join(f"k{i} * {s}" for i, s in enumerate(kst)) or "0"
        pidx = " + ".join(f"o{i} * {s}" for i, s in enumerate(ost)) or "0"
        xidx = _input_index(dims, istr)
        _valid_ranges(dims)
        store = ct.st(f"({ct.compute})(drow[q] + bv)")
        epi = self.epilogue(dt)
        scratch = self.scratch_ptr() if plan.scratch.total else ""
        wc_ptr = self.derive(w, plan.acc_np) if plan.w_derived else ""
        return self.t("conv.c.j2",
                      fn=fn, choice=self.choice, t=ct.storage, acc_t=acc_t, out_ptr=self.ptr(out), x_ptr=self.ptr(x),
                      w_ptr=self.ptr(w), b_ptr=self.ptr(bias), direct=plan.direct, convert_w=plan.convert_w,
                      native=plan.native, ck=cg * kk, p=prod(out.type.shape[2:]), f=F, fg=fg, cg=cg, c=C, batch=N,
                      group=group, in_size=prod(x.type.shape[2:]), dims=dims, kk=kk, kidx=kidx, pidx=pidx,
                      load_x=f"({acc_t})" + ct.ld(f"xc[{xidx}]"), load_w=f"({acc_t})" + ct.ld("w[i]"),
                      load_bias=f"({acc_t})" + ct.ld("bias[g * %d + f]" % fg), fast=plan.fast, gemm=gemm,
                      store=store, epi=epi or "v", scratch=scratch, off=plan.scratch.offsets, wc_ptr=wc_ptr)

    def _engine_conv(self, ins, fn, engine):
        """A conv by the conv engine: its kernel, called with the filter repacked at compile time (and the
        instruction's own filter when the kernel reads it: ConvKernel.reads_filter)."""
        have = ins.scratch.size if ins.scratch is not None else 0
        if engine.scratch_bytes > have:  # planned for fewer threads (ENGINE_SCRATCH_THREADS)
            engine = engine_conv(ins, 1)
            if engine.scratch_bytes > have:
                raise BackendError(f"cpu backend: the conv engine needs {engine.scratch_bytes} bytes of scratch, "
                                   f"the instruction has {have}")
        x, w, bias = ins.ins[:3]
        out = ins.outs[0]
        act = ins.attrs.get(FUSED_ACTIVATION)
        res = ins.attrs.get(RESIDUAL)
        self.choice = engine.describe
        post = None
        if act and engine.epilogue.steps:
            self.choice += f", {act} fused in registers"
        elif act:
            post = self.epilogue("float32")
            self.choice += " after the conv"
        if res is not None:
            self.choice += ", residual add" + (f" + {res['activation']}" if res["activation"] else "") + \
                " fused in registers" + (" (the residual read from the output's own memory)" if res["in_place"] else "")
        return self.t("conv_engine_call.c.j2",
                      fn=fn, engine=engine.source, engine_fn=engine.name, choice=c_comment(self.choice, 400),
                      x_ptr=self.ptr(x), b_ptr=self.ptr(bias), out_ptr=self.ptr(out),
                      w_ptr=self.derive(w, "float32", key="conv-engine " + engine.name, make=engine.pack_weights),
                      scratch=self.ptr(ins.scratch) if engine.scratch_bytes else "0", post=post,
                      res_ptr=f"(const float *)({self.ptr(ins.ins[3])})" if res and not res["in_place"] else "0",
                      wf_ptr=self.ptr(w) if engine.reads_filter else "",
                      n=prod(stored_shape(out.type.shape, out.layout)))

    def k_layout_convert(self, ins, fn):
        """A conversion the layout pass placed (glow_core.layout): the conv engine's NCHW <-> NCHWc kernel."""
        x, out = ins.ins[0], ins.outs[0]
        key = repr((x.type.shape, x.layout, out.layout, self.nt))
        name = "gce_layout_" + hashlib.sha1(key.encode()).hexdigest()[:16]
        kern = layout_kernel(x.type.shape, engine_layout(x.layout), engine_layout(out.layout),
                             num_threads=self.nt, name=name)
        self.choice = kern.describe
        return (f"{kern.source}\n/* {c_comment(kern.describe)} */\nGLOW_KERNEL int {fn}(uint8_t *const *p) {{\n"
                f"  {name}((const float *)({self.ptr(x)}), (float *)({self.ptr(out)}));\n  return 0;\n}}\n")

    def _depthwise(self, fn, x, w, bias, out, dims):
        """One filter per channel (group == C == F): a direct convolution per (n, c) plane, the inner loops over
        the output range of each kernel offset that reads the unpadded input (``_valid_ranges``)."""
        ct = ctype(x.type.dtype.name)
        _valid_ranges(dims)
        n = len(dims)
        istr = row_strides(x.type.shape[2:])
        ost = row_strides(out.type.shape[2:])
        kst = row_strides(w.type.shape[2:])
        xidx = _input_index(dims, istr)
        epi = self.epilogue(x.type.dtype.name)
        return self.t("depthwise.c.j2",
                      fn=fn, choice=self.choice, t=ct.storage, out_ptr=self.ptr(out), x_ptr=self.ptr(x),
                      w_ptr=self.ptr(w), b_ptr=self.ptr(bias), dims=dims, nc=prod(x.type.shape[:2]),
                      c=x.type.shape[1], kk=prod(w.type.shape[2:]), in_size=prod(x.type.shape[2:]),
                      out_size=prod(out.type.shape[2:]), work=out.type.numel * prod(w.type.shape[2:]),
                      kidx=" + ".join(f"k{i} * {kst[i]}" for i in range(n)) or "0",
                      oidx=" + ".join(f"o{i} * {ost[i]}" for i in range(n)) or "0", xidx=xidx, epi=epi)

    def _pool(self, ins, fn):
        x, out = ins.ins[0], ins.outs[0]
        dt = x.type.dtype.name
        ct = ctype(dt)
        dims = self._window_dims(ins, x, out, ins.attrs["kernel"])
        # NCHWc (glow_core.layout; x and out share it): plane nc is lane nc % cb of channel block nc / cb.
        cb = stored_shape(x.type.shape, x.layout)[-1] if x.layout != PLAIN else 1
        istr = [s * cb for s in row_strides(x.type.shape[2:])]
        ost = [s * cb for s in row_strides(out.type.shape[2:])]
        xidx = " + ".join(f"i{i} * {s}" for i, s in enumerate(istr)) or "0"
        oidx = " + ".join(f"o{i} * {s}" for i, s in enumerate(ost)) or "0"
        if ins.op == "max_pool":
            acc_t, init, update = kernels_ew.reduce_parts("reduce_max", dt)
            store = ct.st(f"({ct.compute})acc")
        else:
            acc_t, init, update = "double", "0.0", "acc += v"
            div = float(prod(ins.attrs["kernel"])) if ins.attrs.get("count_include_pad", 0) else "(double)cnt"
            store = ct.st(f"({ct.compute})(acc / {div})")
        return self.t("pool.c.j2",
            fn=fn, t=ct.storage, out_ptr=self.ptr(out), in_ptr=self.ptr(x),
            work=out.type.numel * prod(ins.attrs["kernel"]), nc=prod(stored_shape(x.type.shape, x.layout)[:2]) * cb,
            in_size=prod(x.type.shape[2:]), out_size=prod(out.type.shape[2:]), cb=cb, dims=dims, acc_t=acc_t,
            init=init,
            load=f"({acc_t})" + ct.ld(f"xp[{xidx}]"), update=update, out_idx=oidx, store=store)

    k_avg_pool = _pool  # max_pool: codegen_int8.QuantizedKernels.k_max_pool (8-bit on the int8 engine)



__all__ = ["Derived", "KernelCode", "KernelInstr", "constant_value", "kernel_code", "scratch_layout", "gemm_source",
           "c_comment", "c_ident",
           "literal", "prelude_text", "ERR_KINDS", "INT_LIMITS"]


def _input_index(dims, istr) -> str:
    """The C expression of the input element a window reads: output position o, kernel offset k per dim."""
    return " + ".join(f"(o{i} * {d['s']} + k{i} * {d['dil']} - {d['p']}) * {istr[i]}"
                      for i, d in enumerate(dims)) or "0"


def _valid_ranges(dims):
    """For every kernel offset k of each window dim, the output range [lo[k], hi[k]) whose input index
    o * s + k * dil - p lies inside the unpadded input: loops over it need no bounds checks, and outputs
    outside it read padding. (A bounds check per element instead, ``in ? x[i] : 0``, was miscompiled by GCC
    12's loop vectorizer with AVX2/AVX-512: dilated convolutions whose windows reach far into the padding
    returned memory that was never written; conformance case ops/Conv/float32/fuzz_dilated_window_in_padding.)"""
    for d in dims:
        los, his = [], []
        for k in range(d["k"]):
            shift = k * d["dil"] - d["p"]
            los.append(min(d["o"], max(0, -(shift // d["s"]))))  # ceil(-shift / s)
            his.append(max(0, min(d["o"], (d["size"] - 1 - shift) // d["s"] + 1)))
        d.update(lo=los, hi=his)
