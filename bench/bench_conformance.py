"""Wall and CPU time of the whole conformance suite per backend, with a cold and a warm compile cache.

    python bench/bench_conformance.py [--backend cpu --backend interpreter] [-n 2] [--runs 1] [--json out.json]

Cold: an empty ``$GLOW_CACHE_DIR`` (every kernel compiles); warm: the same directory again. CPU time is the
user + system time of every process the run started (workers, the children running the cases, compilers);
on a shared machine it is the steadier figure: on an idle machine with N cores the wall time is about the CPU
time over N. The load average before and after each run is printed beside it, so that a busy machine shows.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_suite(backend: str, workers: int, cache: str) -> dict:
    env = dict(os.environ, GLOW_CACHE_DIR=cache, OPENBLAS_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "pytest", "conformance", f"--backend={backend}", "-n", str(workers),
                        "-q", "-p", "no:randomly"], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    tail = [ln for ln in p.stdout.splitlines() if " claimed: " in ln or " passed" in ln][-2:]
    return {"backend": backend, "exit": p.returncode, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "load_before": round(load0, 1), "load_after": round(os.getloadavg()[0], 1), "summary": tail}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", action="append", default=None, help="backends (default: interpreter and cpu)")
    ap.add_argument("-n", type=int, default=2, help="pytest-xdist workers (default 2)")
    ap.add_argument("--runs", type=int, default=1, help="cold+warm pairs per backend (medians are reported)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    if args.n < 1 or args.runs < 1:
        ap.error("-n and --runs must be positive")
    results = []
    for backend in args.backend or ["interpreter", "cpu"]:
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="glow_bench_cache_") as cache:
                for state in ("cold", "warm"):
                    r = dict(run_suite(backend, args.n, cache), cache=state)
                    results.append(r)
                    print(f"{backend:12s} {state}: wall {r['wall_s']:7.1f} s, cpu {r['cpu_s']:7.1f} s, exit "
                          f"{r['exit']}, load {r['load_before']} -> {r['load_after']}  {' | '.join(r['summary'])}",
                          flush=True)
    for backend in args.backend or ["interpreter", "cpu"]:
        for state in ("cold", "warm"):
            rs = sorted(r["wall_s"] for r in results if r["backend"] == backend and r["cache"] == state)
            cs = sorted(r["cpu_s"] for r in results if r["backend"] == backend and r["cache"] == state)
            print(f"median {backend} {state}: wall {rs[len(rs) // 2]:.1f} s, cpu {cs[len(cs) // 2]:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(r["exit"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
