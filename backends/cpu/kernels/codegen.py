"""C code generation for the CPU backend: one relocatable kernel per distinct instruction, rendered by the kernel
its op registered (``@kernel("op")`` in the family modules: elementwise, movement, reduce, matmul, window, nn,
quantized).

A kernel's C depends only on what ``KernelInstr`` holds: the instruction's op, attributes, operand types (and
whether a weight is a constant) and the thread count. Operands come in as addresses, ``uint8_t *const *p``:
the instruction's operands in order (outputs, inputs, its @scratch operand), then the constants this module
prepares at compile time (``KernelCode.derived``). So identical instructions (a BERT encoder's twelve layers)
share one kernel, named by a hash of its source, and the toolchain caches each kernel's object code.

Templates (templates/*.c.j2) hold loop skeletons; the family modules compute everything static: strides,
coalesced dims, dtype conversions, the algorithm (``KernelCode.choice``), tiling and the scratch layout, which
``scratch_layout`` gives the memory planner through ``CPUBackend.scratch_bytes`` (``@kernel_scratch("op")``).
Generated code calls no allocator. Model names never reach C except through ``c_comment`` (escaped).

A kernel is ``f(gen, ins, fn) -> str``: ``gen`` the ``KernelWriter`` (operand pointers, compile-time constants,
the fused activation, templates; it collects the GEMM variants called and the algorithm's one-line description),
``ins`` the ``KernelInstr``, ``fn`` the C function's name placeholder.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from math import prod
from typing import Callable

import numpy as np

from glow_core.errors import BackendError
from glow_core.fusion import FUSED_ACTIVATION, FUSED_PARAMS
from glow_core.graph import frozen
from glow_core.ir import PLAIN, stored_shape
from glow_core.layout import LAYOUT_CONVERT
from glow_core.memory import align_up
from glow_core.types import TensorType, dtype as to_dtype

from ..templates import template
from . import ew as kernels_ew
from .ctypes_map import INT_LIMITS, ctype, supported


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


#: Inputs (by index) whose constant values a kernel's source depends on: a quantized conv's or matmul's weight
#: scales and offsets (``KernelInstr.values``).
BAKED = {"qconv": (3, 4), "qmatmul": (3, 4)}

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
    (by input index) whose values the kernel's source depends on (BAKED)."""

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


def accumulator(dt: str) -> tuple[str, str]:
    """(C accumulator type, numpy dtype name) of conv/matmul on ``dt``."""
    if dt == "float64":
        return "double", "float64"
    if ctype(dt).is_float:
        return "float", "float32"
    return ("int64_t", "int64") if ctype(dt).signed else ("uint64_t", "uint64")


#: Kernels that index their operands by the logical shape and the operand's layout.
LAYOUT_AWARE = ("conv", LAYOUT_CONVERT, "max_pool", "avg_pool")


#: op -> f(gen: KernelWriter, ins: KernelInstr, fn: str) -> C source (``@kernel``).
KERNELS: dict[str, Callable] = {}
#: op -> f(ins: KernelInstr) -> ScratchLayout (``@kernel_scratch``); ops without one need no scratch.
SCRATCH: dict[str, Callable] = {}


def kernel(*ops: str):
    """Register the decorated ``f(gen, ins, fn) -> str`` as the kernel of ``ops``."""
    def register(f):
        for op in ops:
            if op in KERNELS:
                raise ValueError(f"cpu backend: two kernels for op {op!r} ({KERNELS[op].__module__}, {f.__module__})")
            KERNELS[op] = f
        return f
    return register


def kernel_scratch(*ops: str):
    """Register the decorated ``f(ins) -> ScratchLayout`` as the scratch of ``ops``' kernels."""
    def register(f):
        SCRATCH.update({op: f for op in ops})
        return f
    return register


def scratch_layout(ki) -> ScratchLayout:
    """The scratch a kernel needs (its @scratch operand's size is ``total``); empty for most kernels."""
    if any(o.type.numel == 0 for o in ki.outs) or ki.op not in SCRATCH:
        return ScratchLayout({}, 0)
    return SCRATCH[ki.op](ki)




# -- kernels --------------------------------------------------------------------------------------------------------
_MEMO: dict = {}
#: Most entries of a memo of rendered kernels or plans before it is cleared.
MEMO_LIMIT = 8192
_PLACEHOLDER = "GLOW_KERNEL_NAME"


def kernel_code(ki: KernelInstr, num_threads: int) -> KernelCode:
    """The kernel of ``ki`` (memoized by its signature: identical instructions render once)."""
    key = (ki.signature, num_threads)
    code = _MEMO.get(key)
    if code is None:
        if len(_MEMO) >= MEMO_LIMIT:
            _MEMO.clear()
        gen = KernelWriter(ki, num_threads)
        src = gen.render()
        name = "glow_k_" + hashlib.sha1(src.encode()).hexdigest()[:20]
        code = _MEMO[key] = KernelCode(name, src.replace(_PLACEHOLDER, name), tuple(sorted(gen.gemms)),
                                       tuple(gen.derived), gen.choice)
    return code


class KernelWriter:
    """Renders the kernel of one KernelInstr with the kernel its op registered; the helpers every kernel uses
    (operand pointers, compile-time constants, the fused activation, templates), and what the kernel reports:
    the GEMM variants it calls (``gemms``), its constants (``derived``) and its algorithm (``choice``)."""

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
        f = KERNELS.get(ki.op)
        if f is None:
            raise BackendError(f"cpu backend: no kernel for op {ki.op!r}")
        src = f(self, ki, fn)
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


__all__ = ["Derived", "KERNELS", "KernelCode", "KernelInstr", "KernelWriter", "Operand", "ScratchLayout",
           "constant_value", "kernel", "kernel_code", "kernel_scratch", "scratch_layout", "c_comment", "c_ident",
           "literal", "ERR_KINDS", "INT_LIMITS"]




# the families register their kernels when imported
from . import elementwise, llm, matmul, movement, nn, quantized, reduce, window  # noqa: E402,F401
