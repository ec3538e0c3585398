"""``glowc``: the command line. Errors print on one line and exit non-zero (``--traceback`` for details)."""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from .errors import GlowError


def _parse_inputs(items, model):
    out = {}
    for it in items or []:
        if "=" not in it:
            raise GlowError(f"--input '{it}' must be NAME=FILE.npy")
        name, path = it.split("=", 1)
        try:
            out[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise GlowError(f"--input {name}: cannot read '{path}' as .npy: {e}") from None
    return out


def _random_inputs(cm, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for nm, _, dims in cm.specs:
        shape = cm.input_shapes.get(nm, dims)
        if any(not isinstance(d, int) for d in shape):
            raise GlowError(f"input '{nm}' has symbolic shape {shape}; pass it with --input {nm}=FILE.npy")
        dt = cm._dtypes[nm]
        a = rng.standard_normal(shape) if dt.is_float else rng.integers(0, 10, shape)
        out[nm] = a.astype(dt.np)
    return out


def cmd_backends(args):
    from .registry import available_backends
    for name, target in sorted(available_backends().items()):
        print(f"{name}\t{target}")


def cmd_run(args):
    from .api import compile as glow_compile
    cm = glow_compile(args.model, args.backend)
    inputs = _parse_inputs(args.input, cm) if args.input else _random_inputs(cm)
    outs = cm.run(inputs)
    os.makedirs(args.output_dir, exist_ok=True)
    for name, arr in outs.items():
        safe = name.replace(os.sep, "_").replace("\0", "_") or "output"
        path = os.path.join(args.output_dir, f"{safe}.npy")
        np.save(path, arr)
        print(f"{name}: {arr.dtype} {list(arr.shape)} -> {path}")


def cmd_dump(args):
    from .api import compile as glow_compile
    cm = glow_compile(args.model, args.backend)
    if cm.last is None:
        raise GlowError("the model has symbolic or value-dependent input shapes; run it once to specialize")
    if args.graph or not (args.ir or args.dot):
        print(cm.last.graph.dump())
    if args.ir:
        print(cm.last.ir.dump())
    if args.dot:
        with open(args.dot, "w") as f:
            f.write(cm.last.graph.to_dot())
        print(f"wrote {args.dot}")


def cmd_demo(args):
    from . import models
    from .api import compile as glow_compile
    model = models.cnn()
    print(f"compiling the built-in CNN (Conv 3->16, Relu, MaxPool, Flatten, Gemm to 10) for '{args.backend}'")
    cm = glow_compile(model, args.backend)
    print(cm.last.ir.dump())
    x = np.random.default_rng(0).standard_normal((1, 3, 28, 28)).astype(np.float32)
    out = cm.run({"input": x})["output"]
    p = cm.last.ir.plan
    print(f"\nmemory plan: constant {p.constant_size} B, mutable {p.mutable_size} B, activations "
          f"{p.activations_size} B (max-live lower bound {p.allocation.lower_bound} B)")
    print("output:", np.array2string(out, precision=4))


def cmd_compile(args):
    from .api import compile as glow_compile
    cm = glow_compile(args.model, args.backend, **({"target_cpu": args.target} if args.target else {}))
    if cm.last is None:
        raise GlowError("the model has symbolic input shapes; bundles need static shapes")
    if args.emit_bundle:
        files = cm.backend.emit_bundle(cm.last.ir, args.emit_bundle,
                                       {"bundle_name": args.bundle_name, **cm.options,
                                        **({"target_cpu": args.target} if args.target else {})})
        for f in files:
            print(f"wrote {f}")
    else:
        print(f"compiled '{args.model}' for {args.backend}: {len(cm.last.ir.code)} instructions")


def cmd_fuzz(args):
    from .fuzz.cli import run
    return run(args)


def cmd_conformance(args, rest):
    try:
        import glow_conformance
    except ImportError:
        raise GlowError("the conformance suite is not installed (package glow_conformance)") from None
    sys.exit(glow_conformance.main(["--backend", args.backend] + rest))


def build_parser():
    p = argparse.ArgumentParser(prog="glowc", description="Glow Kit compiler driver")
    p.add_argument("--traceback", action="store_true", help="show the Python traceback on errors")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("backends", help="list the discovered backends")
    r = sub.add_parser("run", help="run a model and write each output as DIR/<name>.npy")
    r.add_argument("model")
    r.add_argument("--backend", default="interpreter")
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy")
    r.add_argument("--output-dir", default=".")
    d = sub.add_parser("dump", help="print the optimized graph and/or low-level IR")
    d.add_argument("model")
    d.add_argument("--backend", default="interpreter")
    d.add_argument("--ir", action="store_true")
    d.add_argument("--graph", action="store_true")
    d.add_argument("--dot", metavar="FILE")
    dm = sub.add_parser("demo", help="compile and run the built-in CNN")
    dm.add_argument("--backend", default="interpreter")
    c = sub.add_parser("compile", help="compile a model (optionally to a standalone bundle)")
    c.add_argument("model")
    c.add_argument("--backend", default="cpu")
    c.add_argument("--emit-bundle", metavar="DIR")
    c.add_argument("--bundle-name", default="model")
    c.add_argument("--target", metavar="CPU", help="target CPU for the bundle (-march=CPU)")
    from .fuzz.cli import add_parser as add_fuzz_parser
    add_fuzz_parser(sub)
    cf = sub.add_parser("conformance", help="run the conformance suite (extra args go to pytest)")
    cf.add_argument("--backend", required=True)
    return p


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.cmd != "conformance":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.cmd == "conformance":
            cmd_conformance(args, rest)
        else:
            rc = {"backends": cmd_backends, "run": cmd_run, "dump": cmd_dump, "demo": cmd_demo,
                  "compile": cmd_compile, "fuzz": cmd_fuzz}[args.cmd](args)
            if rc:
                return rc
    except GlowError as e:
        if args.traceback:
            raise
        print(f"glowc: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001  (last resort: one line, never a traceback unless asked)
        if args.traceback:
            raise
        print(f"glowc: internal error: {type(e).__name__}: {' '.join(str(e).split())} (rerun with --traceback)",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
