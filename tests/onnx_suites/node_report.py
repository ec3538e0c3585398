"""Developer tool: run ONNX's node cases on a backend and summarise failures by op and error.

    python -m tests.onnx_suites.node_report [--backend interpreter] [--filter REGEX] [--show N] [-j 2]

Prints one line per failing case (name, then the first line of the error) and the totals. The pass/fail
verdict uses the same comparison as onnx.backend.test (rtol 1e-3, atol 1e-7 unless the case says otherwise).
"""
from __future__ import annotations

import argparse
import re
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor

from onnx.backend.test.runner import Runner
import onnx
from onnx import numpy_helper

warnings.filterwarnings("ignore")


def _cases():
    from onnx.backend.test.loader import load_model_tests
    return load_model_tests(kind="node")


def _load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


_CASES = {}


def _load_tp(t):
    return numpy_helper.to_array(t) if isinstance(t, onnx.TensorProto) else t


def _init():
    _CASES.update({c.name: c for c in _cases()})


def run_case(args):
    name, backend = args
    import glow_core
    c = _CASES[name]
    rtol, atol = c.rtol, c.atol
    try:
        cm = glow_core.compile(c.model, backend)
        for ins, outs in c.data_sets:
            # as onnx's runner does: some cases hold TensorProtos instead of arrays
            ins = [_load_tp(t) for t in ins]
            outs = [_load_tp(t) for t in outs]
            got = cm.run(dict(zip(cm.input_names, ins)))
            # The same comparison as onnx.backend.test (dtype, shape, then allclose with its tolerances).
            Runner.assert_similar_outputs([_load_tp(o) for o in outs], [got[nm] for nm in cm.output_names],
                                          rtol, atol)
        return name, None
    except AssertionError as e:
        return name, "MISMATCH " + " ".join(str(e).split())[:200]
    except Exception as e:  # noqa: BLE001
        return name, f"{type(e).__name__}: " + " ".join(str(e).split())[:200]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="interpreter")
    ap.add_argument("--filter", default="")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--passed", action="store_true", help="also list passing cases")
    ap.add_argument("--no-excludes", action="store_true", help="also run the excluded cases")
    a = ap.parse_args(argv)
    from tests.onnx_suites.onnx_suite import exclude_files, read_excludes
    excl = [] if a.no_excludes else [re.compile(p) for p, _ in read_excludes(*exclude_files(a.backend))]
    jobs = [(c.name, a.backend) for c in _cases() if re.search(a.filter, c.name)
            and not any(p.search(c.name + "_cpu") for p in excl)]
    with ProcessPoolExecutor(a.j, initializer=_init) as ex:
        results = sorted(ex.map(run_case, jobs, chunksize=4))
    fails = [(n, e) for n, e in results if e]
    for n, e in results:
        if e:
            print(f"FAIL {n}: {e}")
        elif a.passed:
            print(f"PASS {n}")
    print(f"{len(results) - len(fails)} passed, {len(fails)} failed of {len(results)} run "
          f"({len(_cases()) - len(results)} excluded or filtered out)")


if __name__ == "__main__":
    sys.exit(main())
