"""One IRFunction as the CPU backend runs it: a kernel per instruction (identical ones shared), the addresses of
each instruction's operands, and the constants prepared at compile time, appended to the constant region."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from glow_core.memory import align_up

from .fusion.attention import ATTENDED, attention_call, attention_patterns
from .fusion.chains import chain_kernel, elementwise_chains
from .kernels.codegen import (KernelCode, KernelInstr, c_comment, chainable, constant_value, engine_conv, gemm_source,
                      kernel_code, matmul_plan,
                      stacked, template)
from .kernels.quantized import engine_conv as int8_engine_conv
from .fusion.residual_float import fuse_float_residuals
from .fusion.residual_int8 import fuse_residuals
from .fusion.broadcasts import read_in_place
from .fusion.transposes import Folds, fold_transposes, touched_by

#: Region of each operand address: the three arguments of the entry point, in the bundle's spelling.
REGION_ARG = {"constant": "C", "mutable": "M", "activation": "A"}


#: The kernel of a broadcast its readers index in place (stacking.read_in_place): nothing to compute.
ELIDED_BROADCAST = KernelCode("glow_k_nothing",
                              "GLOW_KERNEL int glow_k_nothing(uint8_t *const *p) { (void)p; return 0; }\n", (), (),
                              "not materialized: its elementwise readers index its source in place")
#: The kernel of a qadd the preceding qconv's epilogue computes (int8_fusion.fuse_residuals).
FUSED_RESIDUAL = KernelCode("glow_k_fused", "GLOW_KERNEL int glow_k_fused(uint8_t *const *p) { (void)p; return 0; }\n",
                            (), (), "computed in the epilogue of the qconv before it (residual add fused)")
#: The kernel of a member of an elementwise chain (chains.py): its root's loop computes it in registers.
CHAINED = KernelCode("glow_k_chained", "GLOW_KERNEL int glow_k_chained(uint8_t *const *p) { (void)p; return 0; }\n",
                     (), (), "computed in the elementwise chain loop of a later instruction")
#: The kernel of a float add the preceding conv's epilogue computes (conv_fusion.fuse_float_residuals).
FUSED_ADD = KernelCode("glow_k_fused_add",
                       "GLOW_KERNEL int glow_k_fused_add(uint8_t *const *p) { (void)p; return 0; }\n",
                       (), (), "computed in the epilogue of the conv before it (residual add fused)")
#: The kernel of a transpose a matmul reads or writes through strides (strided_operands.fold_transposes).
FOLDED = KernelCode("glow_k_folded", "GLOW_KERNEL int glow_k_folded(uint8_t *const *p) { (void)p; return 0; }\n",
                    (), (), "folded into a matmul")


@dataclass
class Call:
    """One instruction: its kernel and its operands' (region, byte offset), then its derived constants'."""

    instr: object
    code: KernelCode
    ptrs: list[tuple[str, int]]


class Program:
    """The calls of one IRFunction in order, its distinct kernels, and its constant region (the memory plan's
    weights, then the constants kernels asked for: converted weights, 64-byte aligned). ``chains``: run
    elementwise chains as one loop (chains.py); ``attention``: "auto" fuses attention where
    the cost rule says it wins, "always" wherever legal, "never" not (attention.py); ``folds``: fold transposes
    into matmuls (strided_operands.py)."""

    def __init__(self, irf, num_threads: int, chains: bool = True, attention: str = "auto", folds: bool = True):
        self.irf = irf
        self.calls: list[Call] = []
        self.kernels: dict[str, KernelCode] = {}
        self.derived: list[tuple[int, np.ndarray]] = []  # (offset in the constant region, array)
        end = align_up(irf.plan.constant_size)
        placed: dict = {}
        elided = read_in_place(irf, stacked)
        attn, declined = attention_patterns(irf, num_threads, elided.sources, elided.broadcasts, attention)
        fused = fuse_residuals(irf, lambda conv: int8_engine_conv(KernelInstr.of(conv), num_threads))
        fused.update(fuse_float_residuals(irf, lambda conv: bool(engine_conv(KernelInstr.of(conv), num_threads)),
                                          skip=set(elided.sources)))
        chained = elementwise_chains(irf, lambda i: chainable(i) and id(i) not in fused and id(i) not in attn,
                                     elided.sources) if chains else {}
        taken = set(elided.broadcasts) | set(fused) | set(chained) | set(attn)
        folded = fold_transposes(irf, lambda i: matmul_plan(KernelInstr.of(i)).mode == "gemm",
                                 touched_by(elided, fused, chained, attn), taken, attn) if folds else Folds()
        for ins in irf.code:
            skip = ELIDED_BROADCAST if id(ins) in elided.broadcasts else None
            chain = chained.get(id(ins))
            if chain is not None and chain.root is not ins:
                skip = CHAINED
            if id(ins) in attn and attn[id(ins)].members[-1] is not ins:
                skip = ATTENDED
            if id(ins) in fused:
                if fused[id(ins)].add is ins:
                    skip = FUSED_RESIDUAL if ins.op == "qadd" else FUSED_ADD
                else:
                    ins = fused[id(ins)].conv
            if id(ins) in folded.transposes:
                skip = KernelCode(FOLDED.name, FOLDED.source, (), (), folded.transposes[id(ins)])
            ins = folded.matmuls.get(id(ins), ins)
            if skip is not None:
                self.kernels.setdefault(skip.name, skip)
                self.calls.append(Call(ins, skip, []))
                continue
            sources = elided.sources.get(id(ins), {})
            if id(ins) in attn:
                code, bufs = attention_call(attn[id(ins)], num_threads, *folded.attentions.get(id(attn[id(ins)]), ()))
            else:
                if chain is not None:
                    ki, bufs = chain_kernel(chain, elided.sources)
                else:
                    ki, bufs = KernelInstr.of(ins, sources), [sources.get(i, b) for i, (b, _) in
                                                              enumerate(ins.operands)]
                code = kernel_code(ki, num_threads)
            self.kernels.setdefault(code.name, code)
            ptrs = [folded.address(b) for b in bufs]
            for d in code.derived:
                bufs = [ins.operands[slot][0] for slot in d.slots]
                key = (tuple((b.root.name, b.address, b.type) for b in bufs), d.tag)
                if key not in placed:
                    placed[key] = []
                    for arr in d.make([constant_value(b) for b in bufs]):
                        arr = np.ascontiguousarray(arr)
                        placed[key].append(end)
                        self.derived.append((end, arr))
                        end = align_up(end + max(arr.nbytes, 1))
                ptrs.extend(("constant", off) for off in placed[key])
            if id(ins) in declined:
                code = replace(code, choice=f"{code.choice}; {declined[id(ins)]}")
            self.calls.append(Call(ins, code, ptrs))
        self.constant_size = end if self.derived else irf.plan.constant_size

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
