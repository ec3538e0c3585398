"""The NPU's instruction set: every field of every instruction survives encode -> decode and disassemble ->
assemble; values that do not fit, unknown opcodes and illegal flags are GlowErrors naming the instruction; the
generated vendor_guide/npu_isa.md is up to date."""
from __future__ import annotations

import os

import numpy as np
import pytest

from glow_core.errors import GlowError
from glow_npu import isa
from glow_npu.config import NpuConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def random_insn(rng, d: isa.InstrDef) -> isa.Insn:
    fields = {}
    for f in d.fields:
        if f.name in isa.ENUMS:
            fields[f.name] = int(rng.choice(list(isa.ENUMS[f.name])))
        elif f.signed:
            fields[f.name] = int(rng.integers(-(1 << (f.bits - 1)), 1 << (f.bits - 1)))
        else:
            fields[f.name] = int(rng.integers(0, 1 << min(f.bits, 62)))
    flags = {fl: bool(rng.integers(0, 2)) for fl in d.flags}
    return isa.Insn(d.name, **flags, **fields)


def test_every_field_round_trips_through_binary_and_text():
    rng = np.random.default_rng(0)
    prog = [random_insn(rng, d) for _ in range(50) for d in isa.ISA.values()]
    blob = isa.encode_program(prog)
    assert len(blob) == isa.WORD_BYTES * len(prog)
    back = isa.decode_program(blob)
    assert back == prog
    text = isa.disassemble(blob)
    assert isa.assemble(text) == prog
    assert isa.encode_program(isa.assemble(text)) == blob


def test_extremes_of_every_field():
    for d in isa.ISA.values():
        for f in d.fields:
            if f.name in isa.ENUMS:
                continue
            lo, hi = (-(1 << (f.bits - 1)), (1 << (f.bits - 1)) - 1) if f.signed else (0, (1 << f.bits) - 1)
            for v in (lo, hi):
                insn = isa.Insn(d.name, **{f.name: v})
                assert isa.decode(isa.encode(insn)).f[f.name] == v
            with pytest.raises(GlowError, match=f"field {f.name} = {hi + 1} does not fit"):
                isa.encode(isa.Insn(d.name, **{f.name: hi + 1}))


def test_illegal_words_are_refused():
    word = bytearray(isa.encode(isa.Insn("GEMM", m2=1)))
    word[0] = 99
    with pytest.raises(GlowError, match="illegal instruction pc 7: opcode 99"):
        isa.decode(bytes(word), "pc 7: ")
    bad_flag = bytearray(isa.encode(isa.Insn("LOAD")))
    bad_flag[1] |= 1  # pop_prev: a load has no previous engine
    with pytest.raises(GlowError, match="flag pop_prev"):
        isa.decode(bytes(bad_flag))
    bad_enum = int.from_bytes(isa.encode(isa.Insn("LOAD")), "little") | (3 << isa.HEADER_BITS)  # spm = 3
    with pytest.raises(GlowError, match="spm = 3"):
        isa.decode(bad_enum.to_bytes(isa.WORD_BYTES, "little"))
    with pytest.raises(GlowError, match="unknown instruction"):
        isa.assemble("FROB x=1")
    with pytest.raises(GlowError, match="line 2"):
        isa.assemble("LOAD n0=1\nLOAD spm=XYZ")


def test_assembler_reads_names_and_comments():
    prog = isa.assemble("""
        LOAD push_next spm=ACC dt=i32 dram=0x40 n2=1 n1=1 n0=4   ; bias
        3  GEMM pop_prev mode=bias adt=u8 m2=2 m1=1 n=4 k=8 t2=1 t1=1
    """)
    assert [p.op for p in prog] == ["LOAD", "GEMM"]
    assert prog[0].f["dram"] == 64 and prog[0].f["spm"] == 2 and prog[0].push_next
    assert prog[1].f["mode"] == 2 and prog[1].f["adt"] == 1 and prog[1].pop_prev


def test_generated_isa_doc_is_current():
    with open(os.path.join(ROOT, "vendor_guide", "npu_isa.md"), encoding="utf-8") as f:
        assert f.read() == isa.render_doc(), "run python -m glow_npu.isa"


def test_config_loads_json_and_refuses_nonsense(tmp_path):
    p = tmp_path / "npu.json"
    p.write_text('{"mac_rows": 8, "input_spm_bytes": 65536}')
    cfg = NpuConfig.load(p)
    assert cfg.mac_rows == 8 and cfg.input_spm_bytes == 65536 and cfg.mac_cols == 16
    p.write_text('{"mac_rowz": 8}')
    with pytest.raises(GlowError, match="unknown NpuConfig field"):
        NpuConfig.load(p)
    with pytest.raises(GlowError, match="mac_cols"):
        NpuConfig(mac_cols=0)
    with pytest.raises(GlowError, match="multiple of 64"):
        NpuConfig(acc_spm_bytes=1000)
