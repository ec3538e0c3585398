"""The reference NPU's instruction set: one record per instruction (``ISA``), the binary encoding, the
assembler and the disassembler.

Every instruction is one 64-byte word (512 bits, little-endian). The low 12 bits are the header: the opcode
(8 bits) and four dependency flags (VTA's decoupled access-execute): an engine may *pop* a token from the
queue of its previous or next engine before it starts, and *push* one to them when it is done. The engines are
ordered load -> compute -> store, so there are four token queues: load->compute, compute->load, compute->store
and store->compute; a flag that names a queue the engine has not (a load popping from its "previous") is an
illegal instruction. The fields follow the header, in the order of the record, each ``bits`` wide (two's
complement when ``signed``); a value that does not fit is refused when encoding.

Memory: DRAM is byte-addressed (``dram``); the three scratchpads are byte-addressed too: ``INP`` (8-bit
activations and 8-bit results waiting to be stored), ``WGT`` (8-bit weights) and ``ACC`` (int32: accumulators,
vector operands, per-column tables; 4-byte aligned). Strides and extents count elements.

``vendor_guide/npu_isa.md`` is generated from the records (``python -m glow_npu.isa``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from glow_core.errors import GlowError

WORD_BYTES = 64
HEADER_BITS = 12
FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")
ENGINES = ("load", "compute", "store")

#: enumerations of fields (value -> name); the assembler takes either
SPM = {0: "INP", 1: "WGT", 2: "ACC"}
DTYPE = {0: "i8", 1: "u8", 2: "i32"}
GEMM_MODE = {0: "overwrite", 1: "accumulate", 2: "bias"}
ALU = {0: "add", 1: "sub", 2: "mul", 3: "max", 4: "min", 5: "shr", 6: "shl", 7: "clamp", 8: "mac"}
SRC2 = {0: "tile", 1: "imm", 2: "colvec"}
SCALE = {0: "none", 1: "scalar", 2: "colvec"}
ENUMS = {"spm": SPM, "dt": DTYPE, "adt": DTYPE, "bdt": DTYPE, "mode": GEMM_MODE, "alu": ALU, "src2_mode": SRC2,
         "scale_mode": SCALE, "dst_spm": SPM}


@dataclass(frozen=True)
class Field:
    name: str
    bits: int
    doc: str
    signed: bool = False


@dataclass(frozen=True)
class InstrDef:
    """One instruction: its mnemonic, opcode, the engine whose queue runs it, its fields and semantics."""

    name: str
    opcode: int
    engine: str
    fields: tuple[Field, ...]
    doc: str
    cycles: str  # the timing model's cost, in words
    flags: tuple[str, ...] = field(default=FLAGS)  # the dependency flags it may carry

    def field(self, name: str) -> Field:
        return next(f for f in self.fields if f.name == name)


def _f(name, bits, doc, signed=False):
    return Field(name, bits, doc, signed)


A32 = 32  # address fields
E16 = 16  # extents
S32 = 32  # strides

_DMA_COMMON = (
    _f("spm", 2, "scratchpad: INP, WGT or ACC"),
    _f("dt", 2, "element type in DRAM: i8, u8 or i32 (ACC holds int32: 8-bit elements are widened, sign- or "
               "zero-extended; INP and WGT hold bytes: i32 is illegal there)"),
    _f("dram", 40, "DRAM byte address of element (0, 0, 0)"),
    _f("sram", A32, "scratchpad byte address of destination element (0, 0, 0), padding included"),
    _f("n2", E16, "outer extent (elements read from DRAM)"),
    _f("n1", E16, "middle extent"),
    _f("n0", E16, "inner extent, contiguous in DRAM and in the scratchpad"),
    _f("ds2", S32, "DRAM stride of the outer dimension, in elements"),
    _f("ds1", S32, "DRAM stride of the middle dimension, in elements"),
    _f("ss2", S32, "scratchpad stride of the outer dimension, in elements"),
    _f("ss1", S32, "scratchpad stride of the middle dimension, in elements"),
)

ISA: dict[str, InstrDef] = {}


def _def(d: InstrDef):
    used = HEADER_BITS + sum(f.bits for f in d.fields)
    assert used <= WORD_BYTES * 8, (d.name, used)
    ISA[d.name] = d
    return d


_def(InstrDef(
    "LOAD", 1, "load",
    _DMA_COMMON + (
        _f("pad2_lo", 8, "padding rows written before the data (outer dimension)"),
        _f("pad2_hi", 8, "padding rows written after the data"),
        _f("pad1_lo", 8, "padding columns written before the data (middle dimension)"),
        _f("pad1_hi", 8, "padding columns written after the data"),
        _f("pad_value", 32, "the value of every padding element (a zero point: the real 0)", signed=True),
    ),
    "DMA DRAM -> scratchpad, 3-D strided (n2 x n1 x n0 elements) with padding on load: the scratchpad receives "
    "(pad2_lo + n2 + pad2_hi) x (pad1_lo + n1 + pad1_hi) x n0 elements, element (i, j, k) at sram + (i * ss2 + j * "
    "ss1 + k) * size, the DRAM element (i - pad2_lo, j - pad1_lo, k) at dram + ((i - pad2_lo) * ds2 + (j - "
    "pad1_lo) * ds1 + k) * size where it exists and pad_value elsewhere.",
    "dma_latency + ceil(DRAM bytes / dma_bytes_per_cycle) on the shared DRAM port (padding is free)",
    flags=("pop_next", "push_next")))

_def(InstrDef(
    "STORE", 2, "store", _DMA_COMMON,
    "DMA scratchpad -> DRAM, 3-D strided (n2 x n1 x n0 elements): scratchpad element (i, j, k) at sram + (i * ss2 "
    "+ j * ss1 + k) * size goes to dram + (i * ds2 + j * ds1 + k) * size. INP holds i8/u8 bytes, ACC int32 (dt "
    "i32).",
    "dma_latency + ceil(DRAM bytes / dma_bytes_per_cycle) on the shared DRAM port",
    flags=("pop_prev", "push_prev")))

_def(InstrDef(
    "GEMM", 3, "compute", (
        _f("mode", 2, "overwrite: C = A.B; accumulate: C += A.B; bias: C = bias[n] + A.B"),
        _f("adt", 2, "A's element type: i8 or u8"),
        _f("bdt", 2, "B's element type: i8 or u8"),
        _f("bzp_vec", 1, "1: B's zero points are a per-column int32 vector in ACC at bzp_addr; 0: the scalar bzp"),
        _f("azp", 16, "A's zero point, subtracted at the array's input port", signed=True),
        _f("bzp", 16, "B's zero point (scalar)", signed=True),
        _f("m2", E16, "rows of C: outer extent"),
        _f("m1", E16, "rows of C: inner extent (a row of C is (i2, i1))"),
        _f("n", E16, "columns of C (contiguous in ACC and in each row of B)"),
        _f("k", E16, "reduction elements per tap (contiguous in INP and in WGT)"),
        _f("t2", 8, "taps: outer extent"),
        _f("t1", 8, "taps: inner extent"),
        _f("a", A32, "INP byte address of A(0, 0, tap 0, 0)"),
        _f("as2", S32, "A stride of i2"),
        _f("as1", S32, "A stride of i1"),
        _f("at2", S32, "A stride of tap index j2"),
        _f("at1", S32, "A stride of tap index j1"),
        _f("b", A32, "WGT byte address of B, [t2, t1, k, n] dense"),
        _f("c", A32, "ACC byte address of C(0, 0, 0)"),
        _f("cs2", S32, "C stride of i2 (int32 elements)"),
        _f("cs1", S32, "C stride of i1"),
        _f("bias", A32, "ACC byte address of the bias vector (n int32; mode bias)"),
        _f("bzp_addr", A32, "ACC byte address of the per-column zero points (n int32; bzp_vec 1)"),
    ),
    "Tile GEMM on the MAC array, looping over rows (i2, i1) and taps (j2, j1) itself (Gemmini's LOOP_WS, "
    "conv-capable): C[i2, i1, n] (+)= sum over j2, j1, k of (A[i2, i1, j2, j1, k] - azp) * (B[j2, j1, k, n] - "
    "bzp[n]) with A[i2, i1, j2, j1, k] at a + i2 * as2 + i1 * as1 + j2 * at2 + j1 * at1 + k (an implicit "
    "im2col: a convolution's taps are strides into the input tile) and C[i2, i1, n] at c + 4 * (i2 * cs2 + i1 * "
    "cs1 + n). Operands are 8-bit values minus zero points (9-bit), accumulation in int32 (wrapping).",
    "m2 * m1 * t2 * t1 * ceil(k / mac_rows) * ceil(n / mac_cols) + mac_rows + mac_cols (fill and drain)"))

_def(InstrDef(
    "VEC", 4, "compute", (
        _f("alu", 4, "add, sub, mul (low 32 bits), max, min, shr (arithmetic, rounding: (x + 2^(s-1)) >> s, s "
                     "= 0 leaves x), shl, clamp (to [src2 imm, imm2]), mac (multiply-accumulate: dst + src * second, "
                     "low 32 bits; reads dst)"),
        _f("src2_mode", 2, "tile: a second tile (src2, ts2, ts1); imm: the immediate src2; colvec: an n0-element "
                           "vector at src2, one per column"),
        _f("n2", E16, "outer extent"), _f("n1", E16, "middle extent"), _f("n0", E16, "inner extent (contiguous)"),
        _f("dst", A32, "ACC byte address of the result"), _f("ds2", S32, "result stride (outer)"),
        _f("ds1", S32, "result stride (middle)"),
        _f("src", A32, "ACC byte address of the first operand"), _f("ss2", S32, "first operand stride (outer)"),
        _f("ss1", S32, "first operand stride (middle)"),
        _f("src2", 40, "second operand: ACC byte address (tile, colvec) or immediate (imm)", signed=True),
        _f("ts2", S32, "second operand stride (outer, tile)"), _f("ts1", S32, "second operand stride (middle)"),
        _f("imm2", 32, "clamp's upper bound", signed=True),
    ),
    "Vector ALU over int32 tiles in ACC: dst[i, j, k] = src[i, j, k] (op) second[i, j, k], each operand 3-D "
    "strided (n2 x n1 x n0, inner dimension contiguous), wrapping int32 arithmetic. Operands may overlap "
    "the result when they are the same elements (in place).",
    "n2 * n1 * ceil(n0 / vector_lanes): one row of up to vector_lanes contiguous elements per cycle"))

_def(InstrDef(
    "REQ", 5, "compute", (
        _f("dst_spm", 2, "where the result goes: INP (dt i8/u8) or ACC (dt i32)"),
        _f("dt", 2, "result type: i8, u8 (INP) or i32 (ACC)"),
        _f("scale_mode", 2, "none: no multiplier; scalar: m and shift; colvec: per column (m, shift) int32 "
                            "pairs in ACC at table"),
        _f("n2", E16, "outer extent"), _f("n1", E16, "middle extent"), _f("n0", E16, "inner extent (contiguous)"),
        _f("src", A32, "ACC byte address of the int32 operand"), _f("ss2", S32, "operand stride (outer)"),
        _f("ss1", S32, "operand stride (middle)"),
        _f("dst", A32, "result byte address"), _f("ds2", S32, "result stride (outer)"),
        _f("ds1", S32, "result stride (middle)"),
        _f("in_zp", 32, "subtracted first", signed=True),
        _f("lshift", 8, "left shift after the subtraction"),
        _f("m", 32, "multiplier (scalar mode), 0 <= m < 2^31"),
        _f("shift", 8, "right shift (scalar mode), 1..62"),
        _f("table", A32, "ACC byte address of the per-column (m, shift) pairs"),
        _f("out_zp", 32, "added after scaling", signed=True),
        _f("lo", 32, "lower clamp (within the result type's range)", signed=True),
        _f("hi", 32, "upper clamp", signed=True),
    ),
    "Requantization (TOSA RESCALE, scale32): v = (src - in_zp) << lshift in 64 bits; scaled: v = (v * m + 2^(shift "
    "- 1)) >> shift; then clamp(v + out_zp, lo, hi) stored as dt. With scale_mode none it narrows or copies.",
    "n2 * n1 * ceil(n0 / vector_lanes)"))

BY_OPCODE = {d.opcode: d for d in ISA.values()}


class Insn:
    """One decoded instruction: ``op`` (a mnemonic of ``ISA``), the four dependency flags and its fields (every
    field of the record, 0 when not given). ``layer`` (not encoded) names the IR instruction it belongs to."""

    __slots__ = ("op", "pop_prev", "pop_next", "push_prev", "push_next", "f", "layer")

    def __init__(self, op: str, layer: str = "", pop_prev=False, pop_next=False, push_prev=False, push_next=False,
                 **fields):
        d = ISA.get(op)
        if d is None:
            raise GlowError(f"unknown NPU instruction {op!r}; the instructions are {', '.join(ISA)}")
        self.op = op
        self.layer = layer
        self.pop_prev, self.pop_next, self.push_prev, self.push_next = pop_prev, pop_next, push_prev, push_next
        names = {f.name for f in d.fields}
        bad = sorted(set(fields) - names)
        if bad:
            raise GlowError(f"{op}: unknown field(s) {bad}; its fields are {[f.name for f in d.fields]}")
        self.f = {f.name: 0 for f in d.fields}
        for k, v in fields.items():
            self.f[k] = _enum_value(k, v, op)

    @property
    def engine(self) -> str:
        return ISA[self.op].engine

    def __getattr__(self, name):
        try:
            return self.f[name]
        except (KeyError, AttributeError):
            raise AttributeError(name) from None

    def flags(self) -> tuple[str, ...]:
        return tuple(n for n in FLAGS if getattr(self, n))

    def __eq__(self, other):
        return isinstance(other, Insn) and (self.op, self.flags(), self.f) == (other.op, other.flags(), other.f)

    def __repr__(self):
        return disassemble_one(self)


def _enum_value(name, v, op):
    if isinstance(v, str):
        table = ENUMS.get(name)
        inv = {s: k for k, s in (table or {}).items()}
        if v not in inv:
            raise GlowError(f"{op}: field {name} = {v!r}; accepted: {sorted(inv) or 'integers'}")
        return inv[v]
    return int(v)


# -- binary encoding -----------------------------------------------------------------------------------------
def validate(insn: Insn, where: str = "") -> None:
    """Raise GlowError naming the instruction when a flag or an enumerated field is illegal."""
    d = ISA[insn.op]
    at = f"{where}{insn.op}"
    for fl in insn.flags():
        if fl not in d.flags:
            raise GlowError(f"illegal instruction {at}: flag {fl} (the {d.engine} engine has no such queue; "
                            f"accepted: {', '.join(d.flags)})")
    for k, table in ENUMS.items():
        if k in insn.f and insn.f[k] not in table:
            raise GlowError(f"illegal instruction {at}: {k} = {insn.f[k]} (accepted: "
                            f"{', '.join(f'{v}={n}' for v, n in table.items())})")


def encode(insn: Insn, where: str = "") -> bytes:
    """The 64-byte word of ``insn``; GlowError naming the instruction and field when a value does not fit."""
    d = ISA[insn.op]
    validate(insn, where)
    word = d.opcode
    for i, fl in enumerate(FLAGS):
        word |= int(bool(getattr(insn, fl))) << (8 + i)
    pos = HEADER_BITS
    for f in d.fields:
        v = insn.f[f.name]
        lo, hi = (-(1 << (f.bits - 1)), (1 << (f.bits - 1)) - 1) if f.signed else (0, (1 << f.bits) - 1)
        if not lo <= v <= hi:
            raise GlowError(f"{where}{insn.op}: field {f.name} = {v} does not fit its {f.bits} bits "
                            f"({'signed' if f.signed else 'unsigned'}: {lo}..{hi})")
        word |= (v & ((1 << f.bits) - 1)) << pos
        pos += f.bits
    return word.to_bytes(WORD_BYTES, "little")


def decode(word: bytes, where: str = "") -> Insn:
    """The instruction of a 64-byte word; GlowError (illegal instruction) for an unknown opcode or field value."""
    if len(word) != WORD_BYTES:
        raise GlowError(f"illegal instruction {where}{len(word)} bytes, an instruction is {WORD_BYTES}")
    v = int.from_bytes(word, "little")
    d = BY_OPCODE.get(v & 0xFF)
    if d is None:
        raise GlowError(f"illegal instruction {where}opcode {v & 0xFF} (known: "
                        f"{', '.join(f'{x.opcode}={x.name}' for x in ISA.values())})")
    fl = {n: bool(v >> (8 + i) & 1) for i, n in enumerate(FLAGS)}
    pos = HEADER_BITS
    vals = {}
    for f in d.fields:
        x = (v >> pos) & ((1 << f.bits) - 1)
        if f.signed and x >> (f.bits - 1):
            x -= 1 << f.bits
        vals[f.name] = x
        pos += f.bits
    if v >> pos:
        raise GlowError(f"illegal instruction {where}{d.name}: bits set beyond its last field (bit {pos} on)")
    insn = Insn(d.name, **fl, **vals)
    validate(insn, where)
    return insn


def encode_program(program: list[Insn]) -> bytes:
    return b"".join(encode(i, f"pc {pc}: ") for pc, i in enumerate(program))


def decode_program(blob: bytes) -> list[Insn]:
    if len(blob) % WORD_BYTES:
        raise GlowError(f"an NPU program is a multiple of {WORD_BYTES} bytes, got {len(blob)}")
    return [decode(blob[i:i + WORD_BYTES], f"pc {i // WORD_BYTES}: ") for i in range(0, len(blob), WORD_BYTES)]


# -- assembly text -------------------------------------------------------------------------------------------
def disassemble_one(insn: Insn) -> str:
    """``OP [flags] field=value ...``: every field, enumerations by name."""
    d = ISA[insn.op]
    parts = [insn.op] + list(insn.flags())
    for f in d.fields:
        v = insn.f[f.name]
        table = ENUMS.get(f.name)
        parts.append(f"{f.name}={table.get(v, v) if table else v}")
    return " ".join(parts)


def disassemble(program) -> str:
    """The text of a program (a list of Insn or its binary), one instruction per line with its pc."""
    if isinstance(program, (bytes, bytearray)):
        program = decode_program(bytes(program))
    return "\n".join(f"{pc:6d}  {disassemble_one(i)}" + (f"  ; {i.layer}" if i.layer else "")
                     for pc, i in enumerate(program))


def assemble(text: str) -> list[Insn]:
    """Instructions from assembly text: one per line, ``OP [flags] field=value ...``; an optional leading pc and
    anything after ``;`` are ignored; fields left out are 0."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split(";", 1)[0].strip()
        if not line:
            continue
        toks = line.split()
        if toks[0].isdigit():
            toks = toks[1:]
        op, rest = toks[0].upper(), toks[1:]
        if op not in ISA:
            raise GlowError(f"line {lineno}: unknown instruction {toks[0]!r}; the instructions are {', '.join(ISA)}")
        flags, fields = {}, {}
        for t in rest:
            if "=" in t:
                k, v = t.split("=", 1)
                try:
                    fields[k] = v if k in ENUMS and not v.lstrip("-").isdigit() else int(v, 0)
                except ValueError:
                    raise GlowError(f"line {lineno}: {op} field {k} = {v!r} is not an integer") from None
            elif t in FLAGS:
                flags[t] = True
            else:
                raise GlowError(f"line {lineno}: {t!r} is neither a flag ({', '.join(FLAGS)}) nor field=value")
        try:
            insn = Insn(op, **flags, **fields)
            validate(insn, f"line {lineno}: ")
        except GlowError as e:
            raise GlowError(f"line {lineno}: {e}") from None
        out.append(insn)
    return out


# -- documentation -------------------------------------------------------------------------------------------
def render_doc() -> str:
    """vendor_guide/npu_isa.md, from the records."""
    lines = ["# The reference NPU's instruction set", "",
             "Generated from `backends/npu/isa.py` (`python -m glow_npu.isa` rewrites it); the simulator "
             "(`backends/npu/sim.py`) is its executable specification.", "",
             "Every instruction is one 64-byte little-endian word. Bits 0-7: the opcode; bits 8-11: the dependency "
             "flags `pop_prev`, `pop_next`, `push_prev`, `push_next`; then the fields in the order below, each "
             "`bits` wide (two's complement when signed). The engines run load -> compute -> store, each its own "
             "queue in program order (VTA's decoupled access-execute): an instruction that pops waits for a token "
             "from that neighbour (pushed when the neighbour's instruction ended) and pushes its own tokens when it "
             "ends. The four token queues: load->compute, compute->load, compute->store, store->compute.", "",
             "Memories: DRAM (byte addresses, `dram_bytes`); scratchpads `INP` (8-bit activations and results, "
             "`input_spm_bytes`), `WGT` (8-bit weights, `weight_spm_bytes`), `ACC` (int32, `acc_spm_bytes`, "
             "4-byte aligned). Strides and extents count elements. Faults (each a `GlowError` naming the "
             "instruction's pc): an access outside a scratchpad or outside DRAM, an illegal opcode, flag or field "
             "value, and a token deadlock.", "",
             "| mnemonic | opcode | engine | flags | semantics | cycles |", "| --- | --- | --- | --- | --- | --- |"]
    for d in ISA.values():
        lines.append(f"| `{d.name}` | {d.opcode} | {d.engine} | {', '.join(d.flags)} | {d.doc} | {d.cycles} |")
    for d in ISA.values():
        lines += ["", f"## {d.name}", "", d.doc, "", "| field | bits | meaning |", "| --- | --- | --- |"]
        for f in d.fields:
            enum = ENUMS.get(f.name)
            extra = f" ({', '.join(f'{k} = {v}' for k, v in enum.items())})" if enum else ""
            lines.append(f"| `{f.name}` | {f.bits}{' signed' if f.signed else ''} | {f.doc}{extra} |")
    lines += ["", "## Assembly", "",
              "`glowc dump MODEL --backend npu --asm` prints a compiled program, one instruction per line: "
              "`pc OP [flags] field=value ... ; layer`. `glow_npu.isa.assemble(text)` reads the same text back "
              "(the pc and comments are ignored, missing fields are 0), `encode_program` / `decode_program` convert "
              "to and from the binary.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse
    import os
    ap = argparse.ArgumentParser(description="write vendor_guide/npu_isa.md from the ISA records")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--output", default=os.path.join(here, "..", "..", "vendor_guide", "npu_isa.md"))
    args = ap.parse_args(argv)
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(render_doc())
    print(f"wrote {os.path.normpath(args.output)} ({len(ISA)} instructions)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
