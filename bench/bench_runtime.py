"""Runtime throughput: a batch of requests of a small ResNet through ``glow_core.runtime.Host`` with one CPU device
against two, every device at one thread (ctypes releases the GIL during the generated code, so two devices run
truly in parallel on two cores).

Both hosts live in one process and take turns, ``--rounds`` times: each round sends ``--requests`` requests to one
host, waits for all, then the same to the other. Reported: the median wall time per batch for each, the ratio
of medians (throughput of 2 devices / 1 device), the spread, per-device busy time and runs, the cores the
process used (CPU time / wall time) and the machine's load average before and after (other processes share
the cores: read the ratio with them).

    python bench/bench_runtime.py [--rounds 9] [--requests 64] [--size 32] [--active 4] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import glow_core
from glow_conformance import example_models as models
from glow_core.runtime import Host


def batch(host, x, n):
    """Wall and process CPU seconds for ``n`` requests sent at once."""
    t0, c0 = time.perf_counter(), time.process_time()
    futs = [host.run("resnet", {"input": x}) for _ in range(n)]
    for f in futs:
        f.result(600)
    return time.perf_counter() - t0, time.process_time() - c0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--size", type=int, default=32, help="input height/width of models.resnet")
    ap.add_argument("--active", type=int, default=4, help="max_active_requests of both hosts")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    model = models.resnet(size=args.size)
    x = np.random.default_rng(0).standard_normal((1, 3, args.size, args.size)).astype(np.float32)
    want = glow_core.compile(model, "cpu", num_threads=1).run({"input": x})["output"]
    hosts = {}
    for n in (1, 2):
        h = Host(max_active_requests=args.active, max_queue=args.requests)
        h.add_device("cpu", count=n, num_threads=1)
        h.add_network("resnet", model)
        got = h.run("resnet", {"input": x}).result(600)["output"]
        np.testing.assert_array_equal(got, want)
        batch(h, x, args.requests)  # warm-up
        hosts[n] = h
    load0 = os.getloadavg()
    times = {1: [], 2: []}
    cpu = {1: [], 2: []}
    for _ in range(args.rounds):
        for n in (1, 2):
            wall, used = batch(hosts[n], x, args.requests)
            times[n].append(wall)
            cpu[n].append(used / wall)
    load1 = os.getloadavg()
    med = {n: statistics.median(t) for n, t in times.items()}
    result = {
        "model": f"models.resnet(size={args.size})", "requests": args.requests, "rounds": args.rounds,
        "max_active_requests": args.active, "cpu_count": os.cpu_count(),
        "median_s": med, "min_s": {n: min(t) for n, t in times.items()}, "max_s": {n: max(t) for n, t in times.items()},
        "throughput_rps": {n: args.requests / m for n, m in med.items()}, "ratio_2_over_1": med[1] / med[2],
        "cores_used_median": {n: statistics.median(c) for n, c in cpu.items()},
        "load_avg_before": load0, "load_avg_after": load1,
        "devices": {n: h.stats()["devices"] for n, h in hosts.items()},
    }
    for h in hosts.values():
        h.close()
    print(f"{args.requests} requests of {result['model']}, {args.rounds} rounds alternating, "
          f"max_active_requests={args.active}, {os.cpu_count()} cores")
    for n in (1, 2):
        print(f"  {n} cpu device(s) x 1 thread: median {med[n] * 1e3:8.1f} ms per batch "
              f"(min {min(times[n]) * 1e3:.1f}, max {max(times[n]) * 1e3:.1f}), "
              f"{args.requests / med[n]:.0f} requests/s, process CPU / wall {statistics.median(cpu[n]):.2f}")
    print(f"  throughput ratio 2 devices / 1 device (ratio of medians): {result['ratio_2_over_1']:.2f}")
    print(f"  load average (1, 5, 15 min) before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, "
          f"after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    for d in result["devices"][2]:
        print(f"  2-device host, {d['name']}: {d['runs']} runs, busy {d['busy_seconds']:.2f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
