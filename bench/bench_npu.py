"""The reference NPU against its own physical limit, on int8 ResNet-18 and MobileNetV2.

    python bench/bench_npu.py                 # everything below, 224x224, 1000 classes
    python bench/bench_npu.py --size 64 --no-sweep

1. Per layer of int8 ResNet-18 (the kit's quantize flow, per-channel weights): simulated cycles over the roofline
   bound max(MACs / (rows x cols), operand bytes / DMA bytes per cycle), the layer's limiter (compute or DMA) and
   its tiling; the geometric mean of the ratios and the worst layer; the whole network's MAC utilization and what
   limits it (cycles above the MAC bound, split by cause).
2. End to end: ResNet-18 and MobileNetV2, from the kit's flow and from onnxruntime's quantize_static (QDQ), on
   the NPU with cpu fallback: outputs identical to the interpreter's fixed-point int8 run, share of MACs on the NPU.
3. A scratchpad sweep (16 KiB .. 1 MiB for each of the three scratchpads): cycles, DRAM traffic and utilization as
   the tiling adapts, each size run functionally (bit-exact, no overflow).
4. Simulator speed: one functional + timed simulation of ResNet-18 (process time, one core), beside onnxruntime's
   own int8 run of the same QDQ model (medians, alternating) for scale.
Timings depend on the machine's load (printed); they are not asserted anywhere.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import glow_core  # noqa: E402
import npu_models as NM  # noqa: E402
from glow_npu import NpuConfig  # noqa: E402

KIB = 1024


def compile_npu(model, opts, cfg=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return glow_core.compile(model, "npu", npu_config=cfg, **opts)


def layer_table(st, cfg: NpuConfig):
    rows, ratios = [], []
    print(f"\n{'layer':44s} {'op':12s} {'cycles':>10s} {'bound':>10s} {'ratio':>6s} {'limit':>7s}  tiling")
    for lay in st["layers"]:
        macs_b = lay["macs"] / cfg.macs_per_cycle
        limit = "compute" if macs_b >= lay["bound_cycles"] else "dma"
        ratio = lay["cycles"] / lay["bound_cycles"]
        ratios.append(ratio)
        rows.append((lay, ratio, limit))
        print(f"{lay['name'][:44]:44s} {lay['op'][:12]:12s} {lay['cycles']:10d} {lay['bound_cycles']:10.0f} "
              f"{ratio:6.2f} {limit:>7s}  {lay['tiling'][:90]}")
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    worst = max(rows, key=lambda r: r[1])
    print(f"\ngeometric mean cycles/bound over {len(ratios)} layers: {geo:.3f}; worst: {worst[0]['name']} "
          f"{worst[1]:.2f}")
    return rows, geo


def limiter(st, cfg: NpuConfig, rows):
    """Cycles above the MAC bound, by cause: layers without MACs, DMA-bound conv/matmul layers, and the rest
    (array padding, vector epilogues, pipeline fill and layer boundaries) of compute-bound ones."""
    mac_bound = st["macs"] / cfg.macs_per_cycle
    excess = st["cycles"] - mac_bound
    no_mac = sum(lay["cycles"] for lay, _, _ in rows if not lay["macs"])
    dma = sum(lay["cycles"] - lay["macs"] / cfg.macs_per_cycle for lay, _, lim in rows if lay["macs"] and lim == "dma")
    comp = sum(lay["cycles"] - lay["macs"] / cfg.macs_per_cycle for lay, _, lim in rows
               if lay["macs"] and lim == "compute")
    print(f"\nwhole network: {st['cycles']} cycles, {st['macs']} MACs, MAC utilization {st['mac_utilization']:.3f} "
          f"({1e3 * st['cycles'] / cfg.clock_hz:.2f} ms at {cfg.clock_hz / 1e9:g} GHz), DRAM {st['dram_bytes'] / 1e6:.1f} MB")
    print(f"cycles above the MAC bound ({mac_bound:.0f}): {excess:.0f}, of which layers without MACs (pools, adds) "
          f"{no_mac} ({100 * no_mac / max(1, excess):.0f}%), DMA-bound MAC layers {dma:.0f} "
          f"({100 * dma / max(1, excess):.0f}%), compute-bound MAC layers over their MAC bound (array padding, "
          f"epilogues, pipeline fill) {comp:.0f} ({100 * comp / max(1, excess):.0f}%)")
    print(f"engine busy cycles: {st['busy']}")


def end_to_end(size, classes, rng):
    print("\nend to end (npu with cpu fallback) against the interpreter's fixed-point int8 run:")
    for name in ("resnet18", "mobilenetv2"):
        m = NM.build(name, size, classes)
        calib = NM.feeds(m, rng, 4)
        x = NM.feeds(m, rng, 1)[0]
        for flow in ("kit", "qdq"):
            model, opts = NM.kit_quantized(m, calib) if flow == "kit" else (NM.ort_qdq(m, calib), {})
            cm = compile_npu(model, opts)
            ref = glow_core.compile(model, "interpreter", requant="fixed_point", **opts)
            a, b = cm.run(x), ref.run(x)
            same = all(np.array_equal(a[k], b[k]) for k in b)
            on, tot = NM.mac_share(cm)
            st = cm.stats()["npu"]
            print(f"  {name:12s} {flow:4s}: identical {same}; MACs on the npu {on}/{tot} = {100 * on / tot:.2f}%; "
                  f"{st['cycles']} cycles, utilization {st['mac_utilization']:.3f}")


def sweep(model, opts, x, ref_out):
    print("\nscratchpad sweep (each of INP, WGT, ACC at the size):")
    print(f"{'size':>8s} {'cycles':>10s} {'DRAM MB':>8s} {'MAC util':>8s} {'identical':>9s}")
    for kib in (16, 32, 64, 128, 256, 512, 1024):
        cfg = NpuConfig(input_spm_bytes=kib * KIB, weight_spm_bytes=kib * KIB, acc_spm_bytes=kib * KIB)
        cm = compile_npu(model, opts, cfg)
        out = cm.run(x)
        same = all(np.array_equal(out[k], ref_out[k]) for k in ref_out)
        st = cm.stats()["npu"]
        print(f"{kib:6d}Ki {st['cycles']:10d} {st['dram_bytes'] / 1e6:8.2f} {st['mac_utilization']:8.3f} "
              f"{str(same):>9s}")


def sim_speed(model, opts, qdq, x, repeats):
    cm = compile_npu(model, opts)
    times = []
    for _ in range(repeats):
        t = time.process_time()
        cm.run(x)
        times.append(time.process_time() - t)
    ort_t = []
    try:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        s = ort.InferenceSession(qdq.SerializeToString(), so, providers=["CPUExecutionProvider"])
        for _ in range(repeats):
            t = time.perf_counter()
            s.run(None, x)
            ort_t.append(time.perf_counter() - t)
    except ImportError:
        pass
    print(f"\nsimulator: ResNet-18 functional + timed in {statistics.median(times):.2f} s process time (median of "
          f"{repeats}; one core)" + (f"; onnxruntime int8 QDQ on 1 thread {1e3 * statistics.median(ort_t):.1f} ms"
                                     if ort_t else ""))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"load average: {open('/proc/loadavg').read().split()[:3]}")
    rng = np.random.default_rng(0)
    m = NM.build("resnet18", args.size, args.classes)
    calib = NM.feeds(m, rng, 4)
    x = NM.feeds(m, rng, 1)[0]
    model, opts = NM.kit_quantized(m, calib)
    t = time.perf_counter()
    cm = compile_npu(model, opts)
    print(f"ResNet-18 int8 ({args.size}x{args.size}) compiled for the npu in {time.perf_counter() - t:.1f} s")
    cfg = NpuConfig()
    out = cm.run(x)
    st = cm.stats()["npu"]
    rows, _ = layer_table(st, cfg)
    limiter(st, cfg, rows)
    ref_out = glow_core.compile(model, "interpreter", requant="fixed_point", **opts).run(x)
    print(f"identical to the interpreter's fixed-point run: {all(np.array_equal(out[k], ref_out[k]) for k in out)}")
    end_to_end(args.size, args.classes, rng)
    if not args.no_sweep:
        sweep(model, opts, x, ref_out)
    sim_speed(model, opts, NM.ort_qdq(m, calib), x, args.repeats)
    print(f"load average: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
