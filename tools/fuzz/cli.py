"""``glowc fuzz``: the command line of the differential fuzzer (exit status 1 when it found something)."""
from __future__ import annotations

import importlib.util
import os

from glow_core.discovery import get_backend
from glow_core.errors import GlowError
from .driver import fuzz, replay
from .generator import drawable_ops


def add_arguments(f, backend_help: str):
    """The options of ``glowc fuzz`` on its subparser ``f``."""
    f.add_argument("--backend", required=True, help="backend under test: " + backend_help)
    f.add_argument("--against", default="interpreter", choices=("interpreter", "onnxruntime"),
                   help="the reference (default: the reference interpreter)")
    f.add_argument("--seconds", type=float, default=60.0, help="time budget of the generation loop")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--ops", help="comma-separated ONNX op types to draw from (default: every op the importer "
                                 "accepts, see glow_tools.fuzz.recipes.SKIP for the few left out)")
    f.add_argument("--dtypes", help="comma-separated element types of fresh inputs (e.g. float32,int64)")
    f.add_argument("--out", default="fuzz-out", metavar="DIR", help="where failures and summary.json go")
    f.add_argument("--max-nodes", type=int, default=30)
    f.add_argument("--max-graphs", type=int, help="stop after this many graphs")
    f.add_argument("--graph", type=int, help="run only graph number N of --seed (to reproduce one graph)")
    f.add_argument("--timeout", type=float, default=60.0, help="per-run time limit in the child process (s)")
    f.add_argument("--shrink-seconds", type=float, default=120.0, help="time budget of shrinking one failure")
    f.add_argument("--replay", metavar="MODEL.onnx", help="run a written failure again (inputs from "
                                                         "MODEL.inputs.npz) instead of fuzzing")


def run(args) -> int:
    """Fuzz (or replay) as ``args`` say; print the summary; 1 when anything was found, else 0."""
    if args.backend == args.against:
        raise GlowError(f"--backend {args.backend} and --against {args.against} are the same: nothing to compare")
    if args.against == "onnxruntime" and importlib.util.find_spec("onnxruntime") is None:
        raise GlowError("--against onnxruntime needs the onnxruntime package (pip install onnxruntime)")
    get_backend(args.backend)  # an unknown backend fails here, with the list of installed ones
    if args.replay:
        if not os.path.exists(args.replay):
            raise GlowError(f"--replay {args.replay}: no such file")
        return 1 if replay(args.replay, args.backend, args.against, args.timeout) else 0
    ops = [o.strip() for o in args.ops.split(",") if o.strip()] if args.ops else None
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()] if args.dtypes else None
    try:
        drawable_ops(ops)
    except KeyError as e:
        raise GlowError(f"--ops: {e} is not an op the importer accepts (see glow_core.ops.registry.OPS)") from None
    s = fuzz(args.backend, args.against, args.seconds, args.seed, args.out, ops, dtypes, args.max_nodes,
             args.timeout, args.shrink_seconds, args.max_graphs, args.graph)
    print(f"{s.graphs} graphs in {s.seconds:.0f} s ({s.per_minute:.1f}/min): {s.compared} compared, "
          f"{sum(s.discarded.values())} discarded ({', '.join(f'{k} {v}' for k, v in s.discarded.items()) or '-'}), "
          f"{s.unsupported} unsupported by {args.backend}, {len(s.findings)} failures"
          + (f" ({sum(f.duplicates for f in s.findings)} more likely duplicates)" if s.findings else ""))
    for f in s.findings:
        print(f"  {f.id}: {f.signature}, {f.nodes_before} -> {f.nodes_after} nodes ({', '.join(f.ops)}): {f.files[0]}")
    for path in s.oracle_crashes:
        print(f"  {args.against} crashed or hung (not a finding of {args.backend}): {path}")
    if s.notes:
        print("comparisons skipped or arbitrated (graphs):")
        for note, n in sorted(s.notes.items()):
            print(f"  {n:6d}  {note}")
    if s.conv_paths:
        print(f"conv paths reached (graphs compared, of {s.compared}):")
        for path, n in sorted(s.conv_paths.items()):
            print(f"  {n:6d}  {path}")
    print(f"summary: {os.path.join(args.out, 'summary.json')}")
    return 1 if s.findings else 0


__all__ = ["add_arguments", "run"]
