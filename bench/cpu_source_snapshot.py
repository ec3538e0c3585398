"""The CPU backend's generated C for a fixed set of models, written to a folder: diff two snapshots to show that
a change of the backend's structure leaves its output byte-identical.

    python bench/cpu_source_snapshot.py DIR [--threads 1,2] [--models cnn,resnet,...]
    diff -r BEFORE AFTER

One file per model and thread count, ``DIR/<model>.t<threads>.c``: the whole program as ``glowc dump --source``
prints it (``Program.source()``), generated without running the C compiler. The models are the families of
``glow_conformance.example_models`` at small sizes (the conformance suite's models tier), and an int8 ResNet
quantized by Glow Kit from a profile (per-channel, asymmetric).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from glow_conformance import example_models as E
from glow_core.api import compile_function
from glow_core.backend import CompiledFunction
from glow_core.quantization import profile

from glow_cpu.backend import CPUBackend
from glow_cpu.program import Program

MODELS = {
    "cnn": lambda: E.cnn(seed=1),
    "resnet": lambda: E.resnet(seed=1, size=16, widths=(8, 16), blocks=1),
    "resnet50_small": lambda: E.resnet50(seed=1, size=16, classes=10, blocks=(1, 1), widths=(4, 8)),
    "mobilenetv2_small": lambda: E.mobilenetv2(seed=1, size=32, classes=10, width=0.25),
    "efficientnet_small": lambda: E.efficientnet(seed=1, size=16, classes=10, stages=((1, 8, 1, 1, 3),
                                                                                        (6, 16, 2, 2, 5)), head=32),
    "vit_small": lambda: E.vit_tiny(seed=1, size=16, patch=8, hidden=16, heads=2, layers=1, mlp=32, classes=10),
    "bert_small": lambda: E.bert_encoder(seed=1, seq=16, hidden=32, heads=2, ffn=64, layers=2),
    "bert_attention": lambda: E.bert_encoder(seed=1, seq=300, hidden=32, heads=2, ffn=64, layers=1),
    "lstm_lm_small": lambda: E.lstm_lm(seed=1, seq=5, vocab=20, hidden=8),
    "unet_small": lambda: E.unet(seed=1, size=16, channels=2, widths=(4, 8, 16)),
}
QUANTIZED = {"int8_resnet": lambda: E.resnet(seed=1, size=16, widths=(8, 16), blocks=1)}


class _Planned(CompiledFunction):
    def __init__(self, program):
        self.program = program

    def execute(self, inputs):
        raise NotImplementedError("a snapshot plans kernels, it does not build them")


class _SourceOnly(CPUBackend):
    """The cpu backend up to its Program: every kernel's C, no compiler run."""

    def compile(self, function, options):
        options = dict(options or {})
        return _Planned(Program(function, self._threads(options), chains=options.get("elementwise_chains", True),
                                attention=options.get("attention", "auto"),
                                folds=options.get("transpose_folding", True)))


def _inputs(model, rng):
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def source(model, threads: int, **options) -> str:
    res = compile_function(model, _SourceOnly(), options={"num_threads": threads, **options})
    return res.compiled.program.source()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", help="comma-separated subset of " + ", ".join([*MODELS, *QUANTIZED]))
    args = ap.parse_args(argv)
    names = args.models.split(",") if args.models else [*MODELS, *QUANTIZED]
    os.makedirs(args.out, exist_ok=True)
    for name in names:
        if name in MODELS:
            model, opts = MODELS[name](), {}
        else:
            model = QUANTIZED[name]()
            rng = np.random.default_rng(0)
            opts = dict(quantize=profile(model, [_inputs(model, rng) for _ in range(4)]), schema="asymmetric",
                        per_channel=True)
        for t in (int(x) for x in args.threads.split(",")):
            path = os.path.join(args.out, f"{name}.t{t}.c")
            with open(path, "w") as f:
                f.write(source(model, t, **opts))
            print(path, os.path.getsize(path), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
