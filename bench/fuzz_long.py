"""Differential fuzzing, long runs: ``glowc fuzz`` on the cpu backend against the interpreter and on the
interpreter against onnxruntime, one after the other, with a summary of each.

    python bench/fuzz_long.py [--seconds 1800] [--seed 1] [--out DIR] [--only cpu|onnxruntime]

Each run writes its minimal failing models and summary.json under DIR/<run>; this prints graphs tried per
minute, how many were compared, discarded (with the reason) or unsupported, and every failure with its size
before and after shrinking. Exit status 1 when something was found.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from glow_tools.fuzz.driver import fuzz  # noqa: E402

RUNS = {"cpu": ("cpu", "interpreter"), "onnxruntime": ("interpreter", "onnxruntime")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=1800.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="fuzz-long-out")
    p.add_argument("--only", choices=sorted(RUNS))
    a = p.parse_args(argv)
    found = 0
    for name, (backend, against) in RUNS.items():
        if a.only and name != a.only:
            continue
        s = fuzz(backend, against, a.seconds, a.seed, os.path.join(a.out, name))
        print(f"\n== {backend} against {against}: {s.graphs} graphs in {s.seconds:.0f} s ({s.per_minute:.1f}/min), "
              f"{s.compared} compared, discarded {dict(s.discarded)}, {s.unsupported} unsupported")
        for f in s.findings:
            print(f"  {f.id}: {f.signature}: {f.nodes_before} -> {f.nodes_after} nodes ({', '.join(f.ops)}), "
                  f"{f.shrink_tests} shrink tests, {f.duplicates} likely duplicates: {f.files[0]}")
        found += len(s.findings)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
