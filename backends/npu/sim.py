"""The reference NPU's simulator: functional (bit-exact, numpy) and timed (three engines, token queues, one DRAM
port), in one pass.

``Simulator(config).run(program, dram)`` dispatches the program to the load, compute and store queues in program
order (VTA's fetch), then advances the engines as a discrete-event simulation: the next instruction to start is
always the earliest that can (its engine free, the tokens it pops available), its effect on the memories is
applied when it starts, and its tokens are pushed when it ends. So the functional result is the one the timed
schedule produces: a program whose tokens do not order two engines' accesses to the same bytes is caught (a
hazard) instead of computing a lucky right answer.

Costs (``isa.ISA[...].cycles``): a DMA takes the shared DRAM port for ceil(bytes / dma_bytes_per_cycle) cycles and
ends ``dma_latency_cycles`` later; a GEMM retires one mac_rows-deep slice for mac_cols columns of one row per
cycle; VEC and REQ process up to vector_lanes contiguous elements (of one innermost row) per cycle. Instructions with zero extents are no-ops (0
cycles) that only carry tokens.

Faults are GlowErrors naming the pc and instruction: an access outside a scratchpad or DRAM, a misaligned ACC
address, an illegal field value, a hazard, and a deadlock (every engine waits for a token no remaining
instruction will push)."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import as_strided

from glow_core.errors import GlowError
from glow_core.ops.primitives.quantized import apply_scale

from .config import NpuConfig
from .isa import ALU, DTYPE, ENGINES, SCALE, SPM, SRC2, Insn, decode_program, validate

#: token queue of each (engine, flag)
QUEUES = {("load", "pop_next"): "compute->load", ("load", "push_next"): "load->compute",
          ("compute", "pop_prev"): "load->compute", ("compute", "pop_next"): "store->compute",
          ("compute", "push_prev"): "compute->load", ("compute", "push_next"): "compute->store",
          ("store", "pop_prev"): "compute->store", ("store", "push_prev"): "store->compute"}
POPS = ("pop_prev", "pop_next")
PUSHES = ("push_prev", "push_next")


@dataclass
class SimStats:
    """What one run measured: total cycles, busy cycles per engine, MACs issued to the array, DRAM bytes, and
    ``events``: (pc, engine, start cycle, end cycle) per instruction in start order."""

    cycles: int = 0
    busy: dict = field(default_factory=lambda: {e: 0 for e in ENGINES})
    array_macs: int = 0
    dram_read: int = 0
    dram_written: int = 0
    instructions: int = 0
    events: list = field(default_factory=list)

    @property
    def dram_bytes(self) -> int:
        return self.dram_read + self.dram_written


class Fault(GlowError):
    """A device fault: the message names the pc and the instruction."""


class Simulator:
    """The NPU: ``config``'s scratchpads (zeroed at construction) and engines. ``run`` executes a program over a
    DRAM byte array (numpy uint8, modified in place) and returns SimStats; ``functional=False`` only times it."""

    def __init__(self, config: NpuConfig):
        self.cfg = config
        self.spm = {"INP": np.zeros(config.input_spm_bytes, np.uint8),
                    "WGT": np.zeros(config.weight_spm_bytes, np.uint8),
                    "ACC": np.zeros(config.acc_spm_bytes, np.uint8)}

    # -- the timed loop -------------------------------------------------------------------------------------
    def run(self, program, dram: np.ndarray | None = None, functional: bool = True,
            check_hazards: bool = True) -> SimStats:
        if isinstance(program, (bytes, bytearray)):
            program = decode_program(bytes(program))
        if functional and (dram is None or dram.dtype != np.uint8 or dram.ndim != 1):
            raise GlowError("Simulator.run: dram must be a 1-D uint8 array")
        if dram is not None and dram.size > self.cfg.dram_bytes:
            raise GlowError(f"Simulator.run: {dram.size} bytes of DRAM given, the device has {self.cfg.dram_bytes}")
        self.dram = dram
        queues = {e: deque() for e in ENGINES}
        for pc, insn in enumerate(program):
            validate(insn, f"pc {pc}: ")
            queues[insn.engine].append(pc)
        tokens = {q: deque() for q in set(QUEUES.values())}
        free = {e: 0 for e in ENGINES}
        last = {e: None for e in ENGINES}  # (pc, end, accesses) of each engine's latest instruction
        port_free = 0
        st = SimStats()
        cfg = self.cfg
        while True:
            best = None
            for e in ENGINES:
                if not queues[e]:
                    continue
                insn = program[queues[e][0]]
                ready = free[e]
                ok = True
                for fl in POPS:
                    if getattr(insn, fl):
                        q = tokens[QUEUES[(e, fl)]]
                        if not q:
                            ok = False
                            break
                        ready = max(ready, q[0])
                if ok and (best is None or ready < best[0]):
                    best = (ready, e)
            if best is None:
                if any(queues.values()):
                    raise Fault(self._deadlock(program, queues, tokens))
                break
            start, e = best
            pc = queues[e].popleft()
            insn = program[pc]
            for fl in POPS:
                if getattr(insn, fl):
                    tokens[QUEUES[(e, fl)]].popleft()
            where = f"pc {pc} ({insn.op}{' of ' + insn.layer if insn.layer else ''})"
            acc = self._accesses(insn, where)
            if check_hazards:
                for other in ENGINES:
                    if other != e and last[other] is not None and last[other][1] > start:
                        self._hazard(where, acc, last[other], program)
            if functional:
                getattr(self, "_" + insn.op.lower())(insn, where)
            if insn.op in ("LOAD", "STORE"):
                nbytes = self._dram_bytes(insn)
                if nbytes:
                    xfer = -(-nbytes // cfg.dma_bytes_per_cycle)
                    begin = max(start, port_free)
                    port_free = begin + xfer
                    end = begin + xfer + cfg.dma_latency_cycles
                else:
                    end = start
                if insn.op == "LOAD":
                    st.dram_read += nbytes
                else:
                    st.dram_written += nbytes
            else:
                end = start + self.compute_cycles(insn)
                if insn.op == "GEMM":
                    f = insn.f
                    st.array_macs += f["m2"] * f["m1"] * f["t2"] * f["t1"] * f["k"] * f["n"]
            for fl in PUSHES:
                if getattr(insn, fl):
                    tokens[QUEUES[(e, fl)]].append(end)
            st.busy[e] += end - start
            free[e] = end
            last[e] = (pc, end, acc)
            st.events.append((pc, e, start, end))
            st.cycles = max(st.cycles, end)
        st.instructions = len(program)
        return st

    def compute_cycles(self, insn: Insn) -> int:
        """Cycles the compute engine spends on a GEMM, VEC or REQ (``isa.ISA[op].cycles``): a GEMM retires one
        mac_rows-deep slice of the reduction for mac_cols columns of one row per cycle, plus the array's fill and
        drain; the vector unit takes up to vector_lanes contiguous elements of one row per cycle. A device with
        another array or vector unit overrides this (the functional semantics stay)."""
        f, cfg = insn.f, self.cfg
        if insn.op == "GEMM":
            work = f["m2"] * f["m1"] * f["t2"] * f["t1"] * -(-f["k"] // cfg.mac_rows) * -(-f["n"] // cfg.mac_cols)
            return work + cfg.mac_rows + cfg.mac_cols if work else 0
        return f["n2"] * f["n1"] * -(-f["n0"] // cfg.vector_lanes)

    def _deadlock(self, program, queues, tokens) -> str:
        heads = []
        for e in ENGINES:
            if queues[e]:
                pc = queues[e][0]
                insn = program[pc]
                waits = [QUEUES[(e, fl)] for fl in POPS if getattr(insn, fl) and not tokens[QUEUES[(e, fl)]]]
                heads.append(f"pc {pc} ({insn.op} on {e}{', ' + insn.layer if insn.layer else ''}) waits for a "
                             f"token on {' and '.join(waits)}")
        return ("token deadlock: " + "; ".join(heads) + " and no instruction left can push one "
                "(every pop needs an earlier push on the neighbouring engine)")

    def _hazard(self, where, mine, other, program):
        opc, _, theirs = other
        for space, lo, hi, w, box in mine:
            for space2, lo2, hi2, w2, box2 in theirs:
                if space == space2 and (w or w2) and lo < hi2 and lo2 < hi and _runs_overlap(box, box2):
                    raise Fault(f"hazard: {where} {'writes' if w else 'reads'} {space} bytes [{lo}, {hi}) while pc "
                                f"{opc} ({program[opc].op}) on the {program[opc].engine} engine still "
                                f"{'writes' if w2 else 'reads'} [{lo2}, {hi2}): no token orders them")

    # -- address checking ------------------------------------------------------------------------------------
    @staticmethod
    def _extent(n, strides):
        """(number of elements, highest element offset + 1) of a strided box (n: extents, strides per dim)."""
        if any(x == 0 for x in n):
            return 0, 0
        return int(np.prod(n)), sum((a - 1) * s for a, s in zip(n, strides)) + 1

    def _range(self, space, addr, esize, n, strides, where, what):
        count, span = self._extent(n, strides)
        if not count:
            return None
        size = self.dram.size if space == "DRAM" and self.dram is not None else (
            self.cfg.dram_bytes if space == "DRAM" else self.spm[space].size)
        if any(s < 0 for s in strides):
            raise Fault(f"{where}: {what} has a negative stride {strides}")
        if esize == 4 and addr % 4:
            raise Fault(f"{where}: {what} at {space} address {addr} is not 4-byte aligned (int32 elements)")
        hi = addr + span * esize
        if addr < 0 or hi > size:
            raise Fault(f"{where}: {what} reaches {space} bytes [{addr}, {hi}), outside the {size} bytes of "
                        f"{space}" + (" (scratchpad overflow)" if space != "DRAM" else " (out-of-bounds DMA)"))
        return (space, addr, hi, (addr, esize, tuple(n), tuple(strides)))

    def _accesses(self, insn: Insn, where):
        """[(space, lo, hi, writes)] of the bytes the instruction touches (also checks every bound)."""
        f = insn.f
        out = []

        def add(r, w):
            if r is not None:
                out.append(r[:3] + (w, r[3]))
        if insn.op in ("LOAD", "STORE"):
            spm = SPM[f["spm"]]
            dt = DTYPE[f["dt"]]
            if dt == "i32" and spm != "ACC":
                raise Fault(f"{where}: dt i32 with scratchpad {spm} (only ACC holds int32)")
            de = 4 if dt == "i32" else 1
            se = 4 if spm == "ACC" else 1
            n = (f["n2"], f["n1"], f["n0"])
            dram = self._range("DRAM", f["dram"], de, n, (f["ds2"], f["ds1"], 1), where, "the DRAM side")
            if insn.op == "LOAD":
                padded = (f["pad2_lo"] + f["n2"] + f["pad2_hi"], f["pad1_lo"] + f["n1"] + f["pad1_hi"], f["n0"])
                sram = self._range(spm, f["sram"], se, padded, (f["ss2"], f["ss1"], 1), where, "the scratchpad side")
                add(dram, False)
                add(sram, True)
            else:
                sram = self._range(spm, f["sram"], se, n, (f["ss2"], f["ss1"], 1), where, "the scratchpad side")
                add(sram, False)
                add(dram, True)
        elif insn.op == "GEMM":
            rows = (f["m2"], f["m1"])
            if not (f["m2"] * f["m1"] * f["n"] * f["k"] * f["t2"] * f["t1"]):
                return out
            add(self._range("INP", f["a"], 1, rows + (f["t2"], f["t1"], f["k"]),
                            (f["as2"], f["as1"], f["at2"], f["at1"], 1), where, "A"), False)
            add(self._range("WGT", f["b"], 1, (f["t2"] * f["t1"] * f["k"], f["n"]), (f["n"], 1), where, "B"), False)
            add(self._range("ACC", f["c"], 4, rows + (f["n"],), (f["cs2"], f["cs1"], 1), where, "C"),
                True)
            if GEMM_MODE_NAME[f["mode"]] == "accumulate":
                out.append(out[-1][:3] + (False, out[-1][4]))
            if GEMM_MODE_NAME[f["mode"]] == "bias":
                add(self._range("ACC", f["bias"], 4, (f["n"],), (1,), where, "the bias"), False)
            if f["bzp_vec"]:
                add(self._range("ACC", f["bzp_addr"], 4, (f["n"],), (1,), where, "the zero points"), False)
        elif insn.op == "VEC":
            n = (f["n2"], f["n1"], f["n0"])
            add(self._range("ACC", f["src"], 4, n, (f["ss2"], f["ss1"], 1), where, "the first operand"), False)
            mode = SRC2[f["src2_mode"]]
            if mode == "tile":
                add(self._range("ACC", f["src2"], 4, n, (f["ts2"], f["ts1"], 1), where, "the second operand"), False)
            elif mode == "colvec":
                add(self._range("ACC", f["src2"], 4, (f["n0"],) if all(n) else (0,), (1,), where, "the vector"),
                    False)
            dst = self._range("ACC", f["dst"], 4, n, (f["ds2"], f["ds1"], 1), where, "the result")
            if ALU.get(f["alu"]) == "mac":  # the accumulator is read too
                add(dst, False)
            add(dst, True)
        elif insn.op == "REQ":
            n = (f["n2"], f["n1"], f["n0"])
            add(self._range("ACC", f["src"], 4, n, (f["ss2"], f["ss1"], 1), where, "the operand"), False)
            dspm, dt = SPM[f["dst_spm"]], DTYPE[f["dt"]]
            if (dspm == "ACC") != (dt == "i32") or dspm == "WGT":
                raise Fault(f"{where}: result type {dt} in scratchpad {dspm} (i8/u8 go to INP, i32 to ACC)")
            if SCALE[f["scale_mode"]] == "colvec":
                add(self._range("ACC", f["table"], 4, (f["n0"], 2) if all(n) else (0, 0), (2, 1), where,
                                "the (m, shift) table"), False)
            add(self._range(dspm, f["dst"], 4 if dspm == "ACC" else 1, n, (f["ds2"], f["ds1"], 1), where,
                            "the result"), True)
        return out

    @staticmethod
    def _dram_bytes(insn):
        f = insn.f
        return f["n2"] * f["n1"] * f["n0"] * (4 if DTYPE[f["dt"]] == "i32" else 1)

    # -- views --------------------------------------------------------------------------------------------
    def _view(self, space, addr, dtype, shape, strides):
        """A strided numpy view of ``space`` (element strides; bounds were checked by ``_accesses``)."""
        buf = self.dram if space == "DRAM" else self.spm[space]
        dt = np.dtype(dtype)
        size = (buf.size - addr) // dt.itemsize * dt.itemsize
        base = buf[addr:addr + size].view(dt)
        return as_strided(base, shape=shape, strides=tuple(s * dt.itemsize for s in strides), writeable=True)

    # -- functional semantics -------------------------------------------------------------------------------
    def _load(self, insn, where):
        f = insn.f
        n = (f["n2"], f["n1"], f["n0"])
        p2, p1 = f["pad2_lo"], f["pad1_lo"]
        shape = (p2 + n[0] + f["pad2_hi"], p1 + n[1] + f["pad1_hi"], n[2])
        if not all(shape):
            return
        spm, dt = SPM[f["spm"]], DTYPE[f["dt"]]
        src_dt = {"i8": np.int8, "u8": np.uint8, "i32": np.int32}[dt]
        pv = f["pad_value"]
        if spm == "ACC":
            dst = self._view("ACC", f["sram"], np.int32, shape, (f["ss2"], f["ss1"], 1))
        else:
            lo, hi = (-128, 127) if dt == "i8" else (0, 255)
            if not lo <= pv <= hi and (f["pad2_lo"] or f["pad2_hi"] or f["pad1_lo"] or f["pad1_hi"]):
                raise Fault(f"{where}: pad_value {pv} is not a {dt} value")
            dst = self._view(spm, f["sram"], src_dt, shape, (f["ss2"], f["ss1"], 1))
        if p2 or f["pad2_hi"] or p1 or f["pad1_hi"]:
            dst[:p2] = pv
            dst[p2 + n[0]:] = pv
            dst[:, :p1] = pv
            dst[:, p1 + n[1]:] = pv
        if all(n):
            dst[p2:p2 + n[0], p1:p1 + n[1]] = self._view("DRAM", f["dram"], src_dt, n, (f["ds2"], f["ds1"], 1))

    def _store(self, insn, where):
        f = insn.f
        n = (f["n2"], f["n1"], f["n0"])
        if not all(n):
            return
        spm, dt = SPM[f["spm"]], DTYPE[f["dt"]]
        np_dt = {"i8": np.int8, "u8": np.uint8, "i32": np.int32}[dt]
        if spm == "ACC" and dt != "i32":
            raise Fault(f"{where}: storing ACC (int32) as {dt}: narrow it with REQ first")
        src = self._view(spm, f["sram"], np_dt, n, (f["ss2"], f["ss1"], 1))
        self._view("DRAM", f["dram"], np_dt, n, (f["ds2"], f["ds1"], 1))[...] = src

    def _gemm(self, insn, where):
        f = insn.f
        m2, m1, n, k, t2, t1 = f["m2"], f["m1"], f["n"], f["k"], f["t2"], f["t1"]
        if not (m2 * m1 * n * k * t2 * t1):
            return
        adt = {"i8": np.int8, "u8": np.uint8}.get(DTYPE[f["adt"]])
        bdt = {"i8": np.int8, "u8": np.uint8}.get(DTYPE[f["bdt"]])
        if adt is None or bdt is None:
            raise Fault(f"{where}: GEMM operands are 8-bit (adt, bdt i8 or u8)")
        a = self._view("INP", f["a"], adt, (m2, m1, t2, t1, k), (f["as2"], f["as1"], f["at2"], f["at1"], 1))
        b = self._view("WGT", f["b"], bdt, (t2 * t1 * k, n), (n, 1))
        a2 = a.reshape(m2 * m1, t2 * t1 * k).astype(np.float64)
        if f["azp"]:
            a2 -= f["azp"]
        b2 = b.astype(np.float64)
        if f["bzp_vec"]:
            b2 -= self._view("ACC", f["bzp_addr"], np.int32, (n,), (1,)).astype(np.float64)
        elif f["bzp"]:
            b2 -= f["bzp"]
        prod = (a2 @ b2).astype(np.int64)  # exact: |sum| < 2^53 for any k a scratchpad holds
        c = self._view("ACC", f["c"], np.int32, (m2, m1, n), (f["cs2"], f["cs1"], 1))
        mode = GEMM_MODE_NAME[f["mode"]]
        prod = prod.reshape(m2, m1, n)
        if mode == "accumulate":
            prod += c
        elif mode == "bias":
            prod += self._view("ACC", f["bias"], np.int32, (n,), (1,))
        c[...] = prod.astype(np.int32)  # wraps

    def _vec(self, insn, where):
        f = insn.f
        n = (f["n2"], f["n1"], f["n0"])
        if not all(n):
            return
        alu, mode = ALU[f["alu"]], SRC2[f["src2_mode"]]
        x = self._view("ACC", f["src"], np.int32, n, (f["ss2"], f["ss1"], 1)).astype(np.int64)
        if mode == "tile":
            y = self._view("ACC", f["src2"], np.int32, n, (f["ts2"], f["ts1"], 1)).astype(np.int64)
        elif mode == "colvec":
            y = self._view("ACC", f["src2"], np.int32, (n[2],), (1,)).astype(np.int64)
        else:
            y = np.int64(f["src2"])
        if alu == "add":
            r = x + y
        elif alu == "sub":
            r = x - y
        elif alu == "mul":
            r = x * y
        elif alu == "mac":
            r = self._view("ACC", f["dst"], np.int32, n, (f["ds2"], f["ds1"], 1)).astype(np.int64) + x * y
        elif alu == "max":
            r = np.maximum(x, y)
        elif alu == "min":
            r = np.minimum(x, y)
        elif alu in ("shr", "shl"):
            s = np.broadcast_to(y, x.shape)
            if s.size and (s.min() < 0 or s.max() > (62 if alu == "shr" else 31)):
                raise Fault(f"{where}: {alu} by {int(s.min())}..{int(s.max())} (accepted 0.."
                            f"{62 if alu == 'shr' else 31})")
            if alu == "shl":
                r = x << s
            else:
                r = np.where(s > 0, (x + (np.int64(1) << np.maximum(s - 1, 0))) >> s, x)
        else:  # clamp
            if mode != "imm":
                raise Fault(f"{where}: clamp takes its bounds as immediates (src2_mode imm)")
            r = np.clip(x, f["src2"], f["imm2"])
        self._view("ACC", f["dst"], np.int32, n, (f["ds2"], f["ds1"], 1))[...] = r.astype(np.int32)

    def _req(self, insn, where):
        f = insn.f
        n = (f["n2"], f["n1"], f["n0"])
        if not all(n):
            return
        v = self._view("ACC", f["src"], np.int32, n, (f["ss2"], f["ss1"], 1)).astype(np.int64)
        v = (v - f["in_zp"]) << f["lshift"]
        mode = SCALE[f["scale_mode"]]
        if mode == "scalar":
            if not (1 <= f["shift"] <= 62 and 0 <= f["m"] < 1 << 31):
                raise Fault(f"{where}: multiplier {f['m']} / shift {f['shift']} out of range (0 <= m < 2^31, "
                            f"1 <= shift <= 62)")
            v = apply_scale(v, f["m"], f["shift"])
        elif mode == "colvec":
            t = self._view("ACC", f["table"], np.int32, (n[2], 2), (2, 1)).astype(np.int64)
            if t[:, 1].min() < 1 or t[:, 1].max() > 62 or t[:, 0].min() < 0:
                raise Fault(f"{where}: the (m, shift) table holds a shift outside 1..62 or a negative m")
            v = apply_scale(v, t[:, 0], t[:, 1])
        dt = DTYPE[f["dt"]]
        lo, hi = {"i8": (-128, 127), "u8": (0, 255), "i32": (-(1 << 31), (1 << 31) - 1)}[dt]
        v = np.clip(v + f["out_zp"], max(lo, f["lo"]), min(hi, f["hi"]))
        np_dt = {"i8": np.int8, "u8": np.uint8, "i32": np.int32}[dt]
        self._view(SPM[f["dst_spm"]], f["dst"], np_dt, n, (f["ds2"], f["ds1"], 1))[...] = v.astype(np_dt)


GEMM_MODE_NAME = {0: "overwrite", 1: "accumulate", 2: "bias"}


def _runs(box):
    """The sorted start bytes of a strided box's contiguous runs (its innermost dimension), and their length."""
    addr, esize, n, strides = box
    starts = np.array([addr], np.int64)
    for extent, stride in zip(n[:-1], strides[:-1]):
        starts = (starts[:, None] + np.arange(extent, dtype=np.int64)[None, :] * stride * esize).reshape(-1)
    return np.sort(starts), n[-1] * esize if strides[-1] == 1 else esize


def _runs_overlap(a, b) -> bool:
    """Whether two strided boxes share a byte (their bounding ranges overlap: compare their runs)."""
    if a[3][-1] != 1 or b[3][-1] != 1:
        return True  # not run-structured: the bounding ranges decide
    sa, la = _runs(a)
    sb, lb = _runs(b)
    idx = np.searchsorted(sb, sa - lb + 1)
    ok = idx < sb.size
    return bool(np.any(sb[idx[ok]] < sa[ok] + la))
