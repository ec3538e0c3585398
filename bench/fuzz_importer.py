"""Importer fuzzing, long run: structure-aware mutants of the repository's models and of ONNX's node-suite
models must compile and run or raise a GlowError (tools/fuzz/importer.py).

    python bench/fuzz_importer.py [--seconds 600] [--seed 0] [--backend interpreter] [--out DIR]

Prints the mutants tried, the outcome classes (ok, glow-error:<class>, and the bugs: exception:<type>,
crash:<signal>, hang) and the mutation kinds; mutants of a bug class are written to --out. Exit status 1 when
a bug was found. CI runs a fixed budget of the same loop (tests/tools/test_fuzz_importer.py).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from glow_tools.fuzz.importer import fuzz_importer, node_suite_models, repository_models  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="interpreter")
    p.add_argument("--out", default="importer-fuzz-out")
    p.add_argument("--no-node-suite", action="store_true", help="mutate the repository's models only")
    a = p.parse_args(argv)
    seeds = repository_models() + ([] if a.no_node_suite else node_suite_models())
    outcomes, kinds, bugs, n = fuzz_importer(a.seconds, a.seed, a.backend, a.out, seeds, log=print)
    print(f"{n} mutants of {len(seeds)} seed models in {a.seconds:.0f} s ({60 * n / a.seconds:.0f}/min) on {a.backend}")
    print("outcomes:")
    for k, v in outcomes.most_common():
        print(f"  {k:40s} {v}")
    print("mutations:")
    for k, v in kinds.most_common():
        print(f"  {k:40s} {v}")
    print(f"bugs (non-GlowError exceptions, crashes, hangs): {len(bugs)}")
    for cls, path, what, msg in bugs[:20]:
        print(f"  {cls} ({what}): {path}: {msg.splitlines()[0] if msg else ''}")
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
