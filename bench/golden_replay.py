"""Golden artifacts end to end: export the conformance suite's cases for a backend, build the C replay runner for
a target, replay them there, and print the counts and the time of each step.

    python bench/golden_replay.py [--backend cpu] [--out golden/] [--case PATTERN ...] [-n 2]
                                  [--cc aarch64-linux-gnu-gcc] [--run 'qemu-aarch64 -L /usr/aarch64-linux-gnu']
                                  [--jobs 2] [--skip-export]

Defaults: the whole suite on the cpu backend, built with aarch64-linux-gnu-gcc and run under qemu-aarch64 (Debian:
apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user); ``--cc cc --run ''`` replays natively.
Exit status: the replay's (0 when every case passed).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="cpu")
    p.add_argument("--out", default="golden")
    p.add_argument("--case", action="append", default=[])
    p.add_argument("-n", default="2", help="pytest-xdist workers of the export")
    p.add_argument("--cc", default="aarch64-linux-gnu-gcc")
    p.add_argument("--run", default="qemu-aarch64 -L /usr/aarch64-linux-gnu", help="command prefix running the runner")
    p.add_argument("--jobs", default="2", help="make -j")
    p.add_argument("--skip-export", action="store_true", help="build and replay an existing export")
    a = p.parse_args(argv)
    out = os.path.abspath(a.out)
    times = {}
    if not a.skip_export:
        t = time.perf_counter()
        cmd = [sys.executable, "-m", "glow_tools.cli", "conformance", "--backend", a.backend, "-n", a.n, "-q",
               "--export-golden", out] + [x for c in a.case for x in ("--case", c)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        times["export"] = time.perf_counter() - t
        print("\n".join(line for line in r.stdout.splitlines()
                        if line.startswith("golden artifacts") or " claimed: " in line))
    with open(os.path.join(out, "manifest.json")) as f:
        counts = json.load(f)["counts"]
    print(f"exported: {counts}")
    t = time.perf_counter()
    r = subprocess.run(["make", "-s", "-C", out, f"-j{a.jobs}", f"CC={a.cc}"], capture_output=True, text=True)
    times["build"] = time.perf_counter() - t
    if r.returncode:
        print(r.stderr[-4000:])
        return r.returncode
    t = time.perf_counter()
    r = subprocess.run(shlex.split(a.run) + [os.path.join(out, "replay"), out], capture_output=True, text=True)
    times["replay"] = time.perf_counter() - t
    print("\n".join(line for line in r.stdout.splitlines() if line.startswith("FAIL"))[:20000])
    print(r.stdout.splitlines()[-1] if r.stdout else r.stderr[-2000:])
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print("seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in times.items())
          + f" (load {load}; {a.cc}, {a.run or 'native'})")
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
