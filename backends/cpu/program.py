"""One IRFunction as the CPU backend runs it: a kernel per instruction (identical ones shared), the addresses of
each instruction's operands, and the constants prepared at compile time, appended to the constant region."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from glow_core.memory import align_up

from .fusion import RULE, fuse, stub
from .kernels.codegen import KernelCode, KernelInstr, c_comment, constant_value, kernel_code
from .kernels.matmul import gemm_source
from .templates import template

#: Region of each operand address: the three arguments of the entry point, in the bundle's spelling.
REGION_ARG = {"constant": "C", "mutable": "M", "activation": "A"}


@dataclass
class Call:
    """One instruction: its kernel and its operands' (region, byte offset), then its derived constants'."""

    instr: object
    code: KernelCode
    ptrs: list[tuple[str, int]]


class Program:
    """The calls of one IRFunction in order, its distinct kernels, and its constant region (the memory plan's
    weights, then the constants kernels asked for: converted weights, 64-byte aligned). The fusion stage
    (fusion/) decides which instructions run as one kernel; options ``chains`` (elementwise chains),
    ``attention`` ("auto", "always", "never") and ``folds`` (transposes folded into matmuls) turn its rules.
    ``shared``: the derived constants of the other functions of a module (``CPUBackend.compile_functions``),
    reused for the same constant operands (same offsets in the module's shared constant region) so that a packed
    weight exists once."""

    def __init__(self, irf, num_threads: int, chains: bool = True, attention: str = "auto", folds: bool = True,
                 shared: dict | None = None):
        self.irf = irf
        self.calls: list[Call] = []
        self.kernels: dict[str, KernelCode] = {}
        self.derived: list[tuple[int, np.ndarray]] = []  # (offset in the constant region, array)
        self.fused = fused = fuse(irf, num_threads, {"elementwise_chains": chains, "attention": attention,
                                                     "transpose_folding": folds})
        self._end = align_up(irf.plan.constant_size)
        self._placed: dict = {}
        self._shared = shared
        for ins in irf.code:
            g = fused.group_of(ins)
            if g is not None and ins is not g.at:  # absorbed: computed by its group's kernel
                code = stub(g, ins)
                self.kernels.setdefault(code.name, code)
                self.calls.append(Call(ins, code, []))
                continue
            note = None
            if g is not None and RULE[g.rule].kernel is not None:
                ins, code, bufs = RULE[g.rule].kernel(g, fused)
            else:
                ki = KernelInstr.of(ins, fused.sources.get(id(ins), {}))
                code, bufs, note = kernel_code(ki, num_threads), fused.operands(ins), fused.notes.get(id(ins))
            self.kernels.setdefault(code.name, code)
            ptrs = [fused.address(b) for b in bufs] + self._derived(ins, code)
            self.calls.append(Call(ins, replace(code, choice=f"{code.choice}; {note}") if note else code, ptrs))
        self.constant_size = self._end if self.derived else irf.plan.constant_size

    def _derived(self, ins, code) -> list:
        """The addresses of ``code``'s derived constants, placed once per (operand buffers, transformation), made
        once per module (``shared``)."""
        ptrs = []
        for d in code.derived:
            bufs = [ins.operands[slot][0] for slot in d.slots]
            key = (tuple((b.root.name, b.address, b.type) for b in bufs), d.tag)
            if key not in self._placed:
                self._placed[key] = []
                module_key = (tuple((b.address, b.type) for b in bufs), d.tag)
                made = None if self._shared is None else self._shared.get(module_key)
                if made is None:
                    made = [np.ascontiguousarray(a) for a in d.make([constant_value(b) for b in bufs])]
                    if self._shared is not None:
                        self._shared[module_key] = made
                for arr in made:
                    arr = np.ascontiguousarray(arr)
                    self._placed[key].append(self._end)
                    self.derived.append((self._end, arr))
                    self._end = align_up(self._end + max(arr.nbytes, 1))
            ptrs.extend(("constant", off) for off in self._placed[key])
        return ptrs

    def gemms(self) -> list[str]:
        return sorted({g for k in self.kernels.values() for g in k.gemms})

    def constant_parts(self) -> list[tuple[int, np.ndarray]]:
        """The constant region as (offset, bytes) parts in order: the plan's weights, then derived constants."""
        parts = [(b.offset, np.ascontiguousarray(b.data).reshape(-1).view(np.uint8))
                 for b in self.irf.buffers if b.kind == "constant"]
        parts += [(off, arr.reshape(-1).view(np.uint8)) for off, arr in self.derived]
        return sorted(parts, key=lambda p: p[0])

    def constant_blob(self) -> bytes:
        """The constant region as one blob (a bundle's weights file)."""
        blob = np.zeros(self.constant_size, np.uint8)
        for off, raw in self.constant_parts():
            blob[off:off + raw.size] = raw
        return blob.tobytes()

    def source(self, entry: str = "glow_run", export: str = "", relocate=None) -> str:
        """Everything in one translation unit (a bundle's NAME.c): GEMMs, kernels, and the entry point calling
        them in order with their operands' addresses (each call commented with its instruction and algorithm).
        ``relocate(offset)`` moves constant-region addresses (a bundle's shared weights)."""
        move = relocate or (lambda off: off)
        calls = [dict(index=i + 1, fn=c.code.name, comment=c_comment(f"{c.instr.op} {c.instr.name}: {c.code.choice}"),
                      ptrs=[f"{REGION_ARG[r]} + {move(off) if r == 'constant' else off}" for r, off in c.ptrs] or ["0"])
                 for i, c in enumerate(self.calls)]
        return template("module.c.j2").render(
            comment_name=c_comment(self.irf.name), entry=entry, export=export,
            kernels=[gemm_source(g) for g in self.gemms()] + [k.source for k in self.kernels.values()],
            calls=calls)
