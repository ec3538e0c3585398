"""The NPU simulator: each instruction against numpy written from its documented semantics, the timing model's
figures, and every fault (scratchpad overflow, out-of-bounds DMA, illegal instruction, token deadlock, hazard)
a GlowError naming the instruction, never a hang or a wrong answer."""
from __future__ import annotations

import numpy as np
import pytest

from glow_core.errors import GlowError
from glow_npu.config import NpuConfig
from glow_npu.isa import Insn, assemble, encode_program
from glow_npu.sim import Simulator

CFG = NpuConfig(input_spm_bytes=4096, weight_spm_bytes=4096, acc_spm_bytes=8192, dma_bytes_per_cycle=8,
                dma_latency_cycles=10, vector_lanes=4, mac_rows=4, mac_cols=4)


def acc(sim, addr, n):
    return sim.spm["ACC"][addr:addr + 4 * n].view(np.int32).copy()


def test_load_pads_and_gemm_subtracts_zero_points():
    """A 2-row x 3-column x 2-channel uint8 region loaded with one row and column of padding (value 5), then a
    GEMM over it with zero points: numpy on the padded array gives the same int32."""
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (4, 5, 2)).astype(np.uint8)  # [H, W, C] in DRAM
    w = rng.integers(-128, 128, (2, 3)).astype(np.int8)  # [K, N]
    dram = np.zeros(256, np.uint8)
    dram[:img.size] = img.reshape(-1)
    dram[128:128 + w.size] = w.view(np.uint8).reshape(-1)
    bzp = np.array([1, -2, 3], np.int32)
    dram[192:204] = bzp.view(np.uint8)
    prog = [Insn("LOAD", spm="INP", dt="u8", dram=(1 * 5 + 2) * 2, sram=0, n2=2, n1=3, n0=2, ds2=10, ds1=2,
                 ss2=8, ss1=2, pad2_lo=1, pad1_hi=1, pad_value=5),
            Insn("LOAD", spm="WGT", dt="i8", dram=128, sram=0, n2=1, n1=2, n0=3, ds1=3, ss1=3),
            Insn("LOAD", spm="ACC", dt="i32", dram=192, sram=1024, n2=1, n1=1, n0=3, push_next=True),
            Insn("GEMM", pop_prev=True, mode="overwrite", adt="u8", bdt="i8", azp=7, bzp_vec=1, bzp_addr=1024, m2=3, m1=4, n=3,
                 k=2, t2=1, t1=1, a=0, as2=8, as1=2, b=0, c=0, cs2=12, cs1=3)]
    sim = Simulator(CFG)
    sim.run(prog, dram)
    tile = np.full((3, 4, 2), 5, np.int64)
    tile[1:3, 0:3] = img[1:3, 2:5]
    want = (tile.reshape(12, 2) - 7) @ (w.astype(np.int64) - bzp)
    np.testing.assert_array_equal(acc(sim, 0, 36).reshape(12, 3), want)


def test_gemm_taps_accumulate_and_bias():
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, 64).astype(np.int8)
    b = rng.integers(-128, 128, (2, 3, 4, 4)).astype(np.int8)  # [t2, t1, k, n]
    bias = rng.integers(-1000, 1000, 4).astype(np.int32)
    sim = Simulator(CFG)
    sim.spm["INP"][:64] = a.view(np.uint8)
    sim.spm["WGT"][:b.size] = b.view(np.uint8).reshape(-1)
    sim.spm["ACC"][4096:4112] = bias.view(np.uint8)
    g = dict(adt="i8", bdt="i8", m2=2, m1=3, n=4, k=4, t2=2, t1=3, a=1, as2=20, as1=5, at2=9, at1=2, b=0, c=0,
             cs2=12, cs1=4, bias=4096)
    sim.run([Insn("GEMM", mode="bias", **g), Insn("GEMM", mode="accumulate", **g)], np.zeros(64, np.uint8))
    want = np.zeros((2, 3, 4), np.int64)
    for i2 in range(2):
        for i1 in range(3):
            for j2 in range(2):
                for j1 in range(3):
                    base = 1 + i2 * 20 + i1 * 5 + j2 * 9 + j1 * 2
                    want[i2, i1] += a[base:base + 4].astype(np.int64) @ b[j2, j1].astype(np.int64)
    want = 2 * want + bias
    np.testing.assert_array_equal(acc(sim, 0, 24).reshape(2, 3, 4), want)


def spec_scale(v, m, s):
    return (int(v) * m + (1 << (s - 1))) >> s


def test_req_and_vec_follow_the_spec():
    sim = Simulator(CFG)
    v = np.array([-300, -3, -2, -1, 0, 1, 2, 3, 40000, -40000, 7, 9], np.int32)
    sim.spm["ACC"][:48] = v.view(np.uint8)
    table = np.array([[1 << 30, 31], [1518500250, 33], [2 ** 31 - 1, 40]], np.int32)  # 0.5, ~0.177, ~2^-9
    sim.spm["ACC"][512:536] = table.view(np.uint8).reshape(-1)
    prog = [Insn("REQ", dst_spm="INP", dt="i8", scale_mode="colvec", table=512, n2=1, n1=4, n0=3, src=0, ss1=3,
                 dst=100, ds1=3, in_zp=-2, lshift=1, out_zp=4, lo=-100, hi=120),
            Insn("VEC", alu="shr", src2_mode="imm", src2=2, n2=1, n1=1, n0=12, src=0, dst=256),
            Insn("VEC", alu="clamp", src2_mode="imm", src2=-5, imm2=5, n2=1, n1=1, n0=12, src=0, dst=320),
            Insn("VEC", alu="mul", src2_mode="colvec", src2=0, n2=1, n1=1, n0=12, src=0, dst=384),
            Insn("VEC", alu="add", src2_mode="imm", src2=7, n2=1, n1=1, n0=12, src=0, dst=448),
            Insn("VEC", alu="mac", src2_mode="colvec", src2=0, n2=1, n1=2, n0=6, src=0, ss1=6, dst=448, ds1=6)]
    sim.run(prog, np.zeros(64, np.uint8))
    got = sim.spm["INP"][100:112].view(np.int8)
    want = [min(max(spec_scale((int(x) + 2) << 1, int(table[i % 3, 0]), int(table[i % 3, 1])) + 4, -100), 120)
            for i, x in enumerate(v)]
    assert got.tolist() == want
    assert acc(sim, 256, 12).tolist() == [(int(x) + 2) >> 2 for x in v]  # rounding half up
    assert acc(sim, 320, 12).tolist() == np.clip(v, -5, 5).tolist()
    assert acc(sim, 384, 12).tolist() == [int(x) * int(x) for x in v]
    want_mac = [int(x) + 7 + int(x) * int(v[i % 6]) for i, x in enumerate(v)]  # dst += src * colvec (6 wide)
    assert acc(sim, 448, 12).tolist() == [(w + 2 ** 31) % 2 ** 32 - 2 ** 31 for w in want_mac]  # wraps


def test_timing_model_overlaps_engines_through_tokens():
    """Load (bytes / 8 + 10 cycles), GEMM (rows x slices + fill) and store in a two-step pipeline: the second
    load runs while the first GEMM computes, so the total is less than the sum of the busy times."""
    dram = np.zeros(4096, np.uint8)
    prog = []
    for step in range(2):
        prog += [Insn("LOAD", spm="INP", dt="i8", dram=512 * step, sram=512 * step, n2=1, n1=16, n0=32, ds1=32,
                      ss1=32, push_next=True),
                 Insn("GEMM", pop_prev=True, push_next=True, adt="i8", bdt="i8", m2=1, m1=16, n=8, k=32, t2=1,
                      t1=1, a=512 * step, as1=32, b=0, c=1024 * step, cs1=8),
                 Insn("REQ", dst_spm="INP", dt="i8", n2=1, n1=16, n0=8, src=1024 * step, ss1=8, dst=2048 + 128 *
                      step, ds1=8, push_next=True),
                 Insn("STORE", pop_prev=True, spm="INP", dt="i8", sram=2048 + 128 * step, dram=2048 + 128 * step,
                      n2=1, n1=16, n0=8, ds1=8, ss1=8)]
    # tokens popped by compute come from load (push_next); the REQ's push goes to the store
    prog[1].push_next = False
    prog[5].push_next = False
    st = Simulator(CFG).run(prog, dram)
    load = 10 + 512 // 8
    gemm = 16 * (32 // 4) * (8 // 4) + 4 + 4
    assert st.busy["load"] == 2 * load
    assert st.busy["compute"] == 2 * (gemm + 16 * 8 // 4)
    assert st.array_macs == 2 * 16 * 32 * 8
    assert st.dram_read == 1024 and st.dram_written == 256
    assert st.cycles < st.busy["load"] + st.busy["compute"] + st.busy["store"]
    assert st.cycles >= load + gemm


@pytest.mark.parametrize("text,match", [
    ("LOAD spm=INP dt=i8 n2=1 n1=1 n0=64 sram=4090", "scratchpad overflow"),
    ("LOAD spm=ACC dt=i32 n2=1 n1=2 n0=8 ss1=2100 sram=0", "scratchpad overflow"),
    ("LOAD spm=INP dt=i8 n2=1 n1=1 n0=16 dram=60", "out-of-bounds DMA"),
    ("STORE spm=INP dt=i8 n2=2 n1=1 n0=8 ds2=60 dram=0", "out-of-bounds DMA"),
    ("LOAD spm=INP dt=i32 n2=1 n1=1 n0=1", "only ACC holds int32"),
    ("GEMM m2=1 m1=1 n=4 k=4 t2=1 t1=1 a=4094", "scratchpad overflow"),
    ("VEC alu=add n2=1 n1=1 n0=4 dst=2", "not 4-byte aligned"),
    ("VEC alu=shr src2_mode=imm src2=70 n2=1 n1=1 n0=4", "shr by 70"),
    ("REQ dst_spm=WGT dt=i8 n2=1 n1=1 n0=4", "result type i8 in scratchpad WGT"),
    ("REQ dst_spm=INP dt=i8 scale_mode=scalar m=5 shift=0 n2=1 n1=1 n0=4", "out of range"),
])
def test_faults_name_the_instruction(text, match):
    prog = assemble("LOAD n0=0\n" + text)
    with pytest.raises(GlowError, match=match) as e:
        Simulator(CFG).run(prog, np.zeros(64, np.uint8))
    assert "pc 1" in str(e.value)


def test_illegal_instruction_in_a_binary():
    blob = bytearray(encode_program(assemble("LOAD n0=0\nVEC alu=add")))
    blob[64] = 0xEE
    with pytest.raises(GlowError, match="illegal instruction pc 1: opcode 238"):
        Simulator(CFG).run(bytes(blob), np.zeros(64, np.uint8))


def test_token_deadlock_is_reported_not_hung():
    prog = assemble("""
        GEMM pop_prev m2=1 m1=1 n=4 k=4 t2=1 t1=1
        LOAD pop_next push_next n2=1 n1=1 n0=4 spm=INP dt=i8
    """)
    with pytest.raises(GlowError, match=r"token deadlock: pc 1 \(LOAD on load.*compute->load.*pc 0 \(GEMM on "
                                        r"compute.*load->compute"):
        Simulator(CFG).run(prog, np.zeros(64, np.uint8))


def test_hazard_without_a_token_is_caught():
    """A load into the bytes a GEMM is reading, with no token between them: a fault, not a lucky answer."""
    prog = assemble("""
        GEMM m2=1 m1=64 n=4 k=16 t2=1 t1=1 as1=16 a=0
        LOAD spm=INP dt=i8 n2=1 n1=1 n0=16 sram=32 dram=0
    """)
    with pytest.raises(GlowError, match="hazard: pc [01] .*INP bytes .*no token orders them") as e:
        Simulator(CFG).run(prog, np.zeros(64, np.uint8))
    assert "(GEMM)" in str(e.value) and "(LOAD)" in str(e.value)
    ordered = assemble("""
        GEMM push_prev m2=1 m1=64 n=4 k=16 t2=1 t1=1 as1=16 a=0
        LOAD pop_next spm=INP dt=i8 n2=1 n1=1 n0=16 sram=32 dram=0
    """)
    Simulator(CFG).run(ordered, np.zeros(64, np.uint8))
