"""``glowc``: the command line. Errors print on one line and exit non-zero (``--traceback`` for details)."""
from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

import onnx

from glow_core import api, quantization
from glow_core.llm import Generator
from glow_conformance import example_models
from glow_tools.bench import bench, format_report, random_inputs
from glow_core.discovery import available_backends
from glow_core.errors import GlowError
from glow_tools.export_onnx import to_onnx
from glow_tools.fuzz import cli as fuzz_cli
from glow_tools.progress import Progress
from glow_tools import serve as serve_cli
from glow_core.trace import INSTR


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


def _backends(spec: str):
    """``--backend a,b``: one backend, or a list in priority order (the model is partitioned across them)."""
    names = [b.strip() for b in spec.split(",")]
    if not all(names):
        raise GlowError(f"--backend {spec!r}: give backend names separated by commas, e.g. 'acme_npu,cpu'")
    return names if len(names) > 1 else names[0]


def _quantization_options(args) -> dict:
    """The quantization options of a command that has the --quantize group (only those the user gave)."""
    out = {}
    if getattr(args, "quantize", None):
        out["quantize"] = args.quantize
    for k in ("schema", "weight_schema", "precision", "calibration", "convert_to", "requant", "npu_config"):
        if getattr(args, k, None):
            out[k] = getattr(args, k)
    if getattr(args, "per_channel", False):
        out["per_channel"] = True
    if getattr(args, "keep_float", None):
        out["keep_float"] = list(args.keep_float)
    return out


def _compile(args, **options):
    """glow_core.compile(args.model, args.backend) with a progress line on a terminal (big models take a while);
    ``--backend a,b`` partitions the model across the backends; ``args.current`` names the model when the
    command takes several."""
    model = getattr(args, "current", args.model)
    with Progress(f"compiling {os.path.basename(model)} for {args.backend}", tick=True):
        return api.compile(model, _backends(args.backend), **_quantization_options(args), **options)


def _quantization_summary(cm) -> list[str]:
    """What the quantizer did (the compile statistics), one line per node left in float."""
    st = cm.last.stats.get("quantization") if cm.last else None
    if not st:
        return []
    floats = st.get("float_nodes", [])
    lines = [f"quantized {st.get('quantized_nodes', 0)} nodes; {len(floats)} compute in float"
             + (":" if floats else "")]
    lines += [f"  {n} ({op}): {why}" for n, op, why in floats]
    lines += [f"  {n} ({op}) runs as integer/float32 primitives: {why}" for n, op, why in st.get("emulated", [])]
    return lines


def _stacks(items, model) -> list[dict]:
    """Input dicts from --input NAME=FILE.npy files that hold a stack of samples on their first axis."""
    stacks = _parse_inputs(items, model)
    if not stacks:
        raise GlowError("give the samples with --input NAME=FILE.npy (each file a stack: samples on the first axis)")
    counts = {k: (a.shape[0] if a.ndim else 0) for k, a in stacks.items()}
    if len(set(counts.values())) != 1 or not next(iter(counts.values())):
        raise GlowError(f"--input files must hold the same number (>= 1) of samples on their first axis, got "
                        f"{counts}")
    return [{k: a[i] for k, a in stacks.items()} for i in range(next(iter(counts.values())))]


def cmd_backends(args):
    for name, target in sorted(available_backends().items()):
        print(f"{name}\t{target}")


def cmd_run(args):
    cm = _compile(args, trace=bool(args.trace), **({"num_threads": args.threads} if args.threads else {}))
    inputs = _parse_inputs(args.input, cm) if args.input else random_inputs(cm)
    with Progress(f"running {os.path.basename(args.model)}", total=args.repeat) as bar:
        for i in range(args.repeat):
            outs = cm.run(inputs)
            bar.update(i + 1, note=f"{i + 1}/{args.repeat} runs")
    os.makedirs(args.output_dir, exist_ok=True)
    for name, arr in outs.items():
        safe = name.replace(os.sep, "_").replace("\0", "_") or "output"
        path = os.path.join(args.output_dir, f"{safe}.npy")
        np.save(path, arr)
        print(f"{name}: {arr.dtype} {list(arr.shape)} -> {path}")
    if args.trace:
        cm.trace.save(args.trace)
        n = sum(1 for e in cm.trace.events if e.get("cat") == INSTR)
        print(f"wrote {args.trace} ({cm.trace.runs} run{'s' if cm.trace.runs != 1 else ''}, {n} instruction events; "
              f"open it in https://ui.perfetto.dev or chrome://tracing)")


def cmd_profile(args):
    samples = _stacks(args.input, None)
    with Progress(f"profiling {os.path.basename(args.model)}", total=len(samples), unit="samples") as bar:
        prof = quantization.profile(args.model, samples, progress=lambda i: bar.update(i, note=f"{i} samples"))
    prof.save(args.output)
    print(f"profiled {len(prof.tensors)} tensors over {prof.samples} samples -> {args.output}")


def cmd_quantize_report(args):
    samples = _stacks(args.input, None)
    prof = quantization.Profile.load(args.profile)
    opts = {k: v for k, v in _quantization_options(args).items() if k not in ("quantize", "keep_float", "convert_to")}
    with Progress(f"quantize-report {os.path.basename(args.model)}", tick=True):
        base = quantization.quantize_report(args.model, prof, samples, **opts)
        kept = quantization.quantize_report(args.model, prof, samples, keep_float=args.keep_float, **opts) \
            if args.keep_float else None
    print((kept or base).format())
    if kept is not None:
        print("\nwith --keep-float " + " ".join(args.keep_float) + " against everything quantized:")
        for name, o in kept.outputs.items():
            b = base.outputs[name]
            top1 = "" if o["top1"] is None else f", top-1 agreement {100 * b['top1']:.1f}% -> {100 * o['top1']:.1f}%"
            print(f"  output {name}: SQNR {b['sqnr']:.2f} -> {o['sqnr']:.2f} dB{top1}")


def _generator(args):
    """A Generator for ``args.model`` (glowc generate, glowc dump --generate), with a progress line."""
    opts = {"num_threads": args.threads} if getattr(args, "threads", None) else {}
    samp = {k: getattr(args, k) for k in ("temperature", "top_k", "top_p") if getattr(args, k, None) is not None}
    with Progress(f"compiling {os.path.basename(args.model)} for {args.backend} (prefill and decode)", tick=True):
        return Generator(args.model, _backends(args.backend), max_seq_len=args.max_seq_len,
                         prefill_block=args.prefill_block, **samp, **opts)


def _prompt_ids(text: str) -> np.ndarray:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        ids = []
    if not ids:
        raise GlowError(f"--prompt-ids {text!r}: give token ids separated by commas, e.g. 1,2,3")
    return np.array([ids], np.int64)


def cmd_generate(args):
    g = _generator(args)
    ids = _prompt_ids(args.prompt_ids)
    out = g.generate(ids, args.max_new_tokens, seed=args.seed)
    st = g.stats()
    print("tokens: " + " ".join(str(t) for t in out[0]))
    print(f"prefill: {st['prompt_tokens']} tokens, {st['prefill_tokens_per_s']:.1f} tokens/s; decode: "
          f"{st['decode_steps']} steps, {st['decode_tokens_per_s']:.1f} tokens/s (compile {st['compile_seconds']:.1f} s)")


def _dump_generator(args):
    """glowc dump --generate: the generator's function (decode or prefill), each partition's graph and IR."""
    g = _generator(args)
    mf = g.module.functions.get(args.function)
    if mf is None:
        raise GlowError(f"--function {args.function}: the generator has {sorted(g.module.functions)}")
    for i, (b, irf) in enumerate(mf.parts):
        if len(mf.parts) > 1:
            print(f"# partition {i}: {b.name}")
        if args.graph or not (args.ir or args.source):
            print(irf.graph.dump())
        if args.ir:
            print(irf.dump())
    if args.source:
        raise GlowError("--source with --generate: dump the IR (--ir) instead")


def cmd_dump(args):
    if args.generate:
        return _dump_generator(args)
    cm = _compile(args)
    if cm.last is None:
        raise GlowError("the model has symbolic or value-dependent input shapes; run it once to specialize")
    parts = getattr(cm.last, "parts", None)  # a partitioned model: each partition's graph, IR and source
    for i, res in enumerate(parts or [cm.last]):
        if parts:
            print(f"# partition {i}: {cm.last.plan.names[cm.last.plan.partitions[i].backend]}")
        if args.graph or not (args.ir or args.dot or args.onnx or args.source or args.asm):
            print(res.graph.dump())
        if args.ir:
            print(res.ir.dump())
        if args.source:
            source = getattr(res.compiled, "source", None)
            if source is None:
                raise GlowError(f"backend '{cm.backend.name}' does not show generated source")
            print(source)
        if args.asm:
            asm = getattr(res.compiled, "asm", None)
            if asm is None:
                if not parts:
                    raise GlowError(f"backend '{cm.backend.name}' has no instruction stream to print (--asm is the "
                                    f"npu backend's)")
                continue
            print(res.compiled.source)
            print(asm())
    if args.dot:
        with open(args.dot, "w") as f:
            f.write(cm.placement().to_dot() if parts else cm.last.graph.to_dot())
        print(f"wrote {args.dot}")
    if args.onnx:
        model = to_onnx(cm.last.graph, cm.backend.name)
        onnx.save(model, args.onnx)
        print(f"wrote {args.onnx} ({len(model.graph.node)} nodes in the 'glow' domain, "
              f"{len(model.graph.initializer)} initializers)")


def cmd_bench(args):
    inputs = _parse_inputs(args.input, None) if args.input else None
    report = bench(args.model, args.backend, threads=args.threads, budget=args.seconds, inputs=inputs,
                   compare=args.compare, label=args.model)
    print(format_report(report))


def cmd_partition(args):
    cm = _compile(args)
    if cm.last is None:
        raise GlowError("the model has symbolic or value-dependent input shapes; partitioning needs static shapes")
    report = cm.placement()
    print(report)
    if args.dot:
        with open(args.dot, "w") as f:
            f.write(report.to_dot())
        print(f"\nwrote {args.dot}")


def cmd_demo(args):
    model = example_models.cnn()
    print(f"compiling the built-in CNN (Conv 3->16, Relu, MaxPool, Flatten, Gemm to 10) for '{args.backend}'")
    cm = api.compile(model, args.backend)
    print(cm.last.ir.dump())
    x = np.random.default_rng(0).standard_normal((1, 3, 28, 28)).astype(np.float32)
    out = cm.run({"input": x})["output"]
    p = cm.last.ir.plan
    print(f"\nmemory plan: constant {p.constant_size} B, mutable {p.mutable_size} B, activations "
          f"{p.activations_size} B (max-live lower bound {p.allocation.lower_bound} B)")
    print("output:", np.array2string(out, precision=4))


def cmd_compile(args):
    names = args.bundle_name or []
    if len(args.model) > 1 and not args.emit_bundle:
        raise GlowError("several models compile only into one bundle: add --emit-bundle DIR")
    if names and len(names) != len(args.model):
        raise GlowError(f"{len(args.model)} model(s) but {len(names)} --bundle-name(s): give one name per model, "
                        f"in the same order")
    if (args.target or args.cpu or args.shared_weights) and not args.emit_bundle:
        raise GlowError("--target, --cpu and --shared-weights apply to bundles: add --emit-bundle DIR")
    names = names or (["model"] if len(args.model) == 1 else
                      [os.path.splitext(os.path.basename(m))[0] for m in args.model])
    for i, (model, name) in enumerate(zip(args.model, names)):
        args.current = model
        cm = _compile(args)
        if cm.last is None:
            raise GlowError(f"'{model}' has symbolic input shapes; bundles need static shapes")
        if cm.ir is None:
            raise GlowError(f"backend '{args.backend}' does not run every node of '{model}' (glowc partition shows "
                            f"which and why); a bundle needs the whole model on one backend")
        for line in _quantization_summary(cm):
            print(line)
        if not args.emit_bundle:
            print(f"compiled '{model}' for {args.backend}: {len(cm.last.ir.code)} instructions")
            continue
        options = {**cm.options, "bundle_name": name, "bundle_append": i > 0, "shared_weights": args.shared_weights,
                   **({"target": args.target, "build": i == len(args.model) - 1} if args.target else {}),
                   **({"target_cpu": args.cpu} if args.cpu else {})}
        for f in cm.backend.emit_bundle(cm.last.ir, args.emit_bundle, options):
            print(f"wrote {f}")


def cmd_conformance(args, rest):
    try:
        import glow_conformance
    except ImportError:
        raise GlowError("the conformance suite is not installed (package glow_conformance)") from None
    sys.exit(glow_conformance.main(["--backend", args.backend] + rest))


EXAMPLES = {
    None: "examples:\n"
          "  glowc demo                                    compile and run the built-in CNN\n"
          "  glowc profile model.onnx --input input=samples.npy -o profile.json\n"
          "  glowc run model.onnx --quantize profile.json --per-channel     int8 from that profile\n"
          "  glowc run model.onnx --backend cpu --input input=x.npy --output-dir out/\n"
          "  glowc bench model.onnx --backend cpu --threads 1 --compare onnxruntime\n"
          "  glowc dump model.onnx --ir                    the low-level IR the backend compiles\n"
          "run 'glowc COMMAND --help' for each command's options and an example",
    "backends": "example:\n  glowc backends                     prints e.g. 'cpu<TAB>glow_cpu.backend:CPUBackend'",
    "run": "examples:\n  glowc run model.onnx --backend cpu --input input=x.npy --output-dir out/\n"
           "  glowc run model.onnx                  random inputs of the model's dtypes and shapes, interpreter\n"
           "  glowc run model.onnx --backend cpu --threads 1 --trace trace.json --repeat 10   a Chrome trace (Perfetto)",
    "dump": "examples:\n  glowc dump model.onnx --backend cpu --ir          the low-level IR\n"
            "  glowc dump model.onnx --onnx lowered.onnx          the lowered graph as ONNX (open it in Netron)\n"
            "  glowc dump model.onnx --backend cpu --source       the generated C, each kernel's algorithm\n"
            "  glowc dump model.onnx --backend npu --quantize p.json --asm   the NPU program and its tilings\n"
            "  glowc dump model.onnx --dot graph.dot && dot -Tsvg graph.dot -o graph.svg\n"
            "  glowc dump llama.onnx --generate --max-seq-len 256 --backend cpu --ir   the decode function's plan",
    "generate": "examples:\n  glowc generate llama.onnx --backend cpu --prompt-ids 1,2,3 --max-new-tokens 32\n"
                "  glowc generate llama.onnx --backend cpu --prompt-ids 1,2,3 --max-new-tokens 32 --seed 0 "
                "--top-k 40\nthe model: a decoder with optimum's I/O names (input_ids, attention_mask, position_ids,"
                "\npast_key_values.<i>.key|value -> logits, present.<i>.key|value); prints the tokens and the rates",
    "bench": "example:\n  glowc bench model.onnx --backend cpu --threads 1 --compare onnxruntime\n"
             "prints latency (median, p10, p90), runs/s, GFLOP/s and a per-op-kind table; inputs are random\n"
             "unless given with --input",
    "demo": "examples:\n  glowc demo\n  glowc demo --backend cpu",
    "compile": "examples:\n  glowc compile model.onnx --backend cpu --emit-bundle bundle/ && make -C bundle\n"
               "  glowc compile cnn.onnx mlp.onnx --bundle-name cnn --bundle-name mlp --emit-bundle b/ \\\n"
               "      --target aarch64-linux-gnu --cpu cortex-a53     cross-built: b/bundle_main cnn|mlp ...\n"
               "  (add --shared-weights: one b/bundle.weights.bin for both, identical tensors stored once)\n"
               "  (run it on the board, or here: qemu-aarch64 -L /usr/aarch64-linux-gnu b/bundle_main cnn ...)",
    "fuzz": "examples:\n  glowc fuzz --backend cpu --seconds 600 --out fz/          against the interpreter\n"
            "  glowc fuzz --backend interpreter --against onnxruntime --seed 3 --out fz/\n"
            "  glowc fuzz --backend cpu --replay fz/s0-g12.onnx        replay one shrunk failure",
    "partition": "examples:\n  glowc partition resnet.onnx --backend acme_npu,cpu --dot placement.dot\n"
                 "  glowc partition model.onnx --backend cpu        what the cpu backend leaves to the interpreter\n"
                 "prints the partitions (backend, nodes, FLOPs, bytes in and out) and, for every node not on the\n"
                 "first backend, why, grouped by reason",
    "serve": "examples:\n  glowc serve resnet.onnx --backend cpu --port 8000 --threads 1\n"
             "  glowc serve resnet.onnx --backend cpu --replicas 2 --max-batch 8 --name resnet\n"
             "  glowc serve model.onnx --backend acme_npu --address auto     join this machine's Ray cluster\n"
             "then: curl http://127.0.0.1:8000/v2/models/resnet (Open Inference Protocol v2; tritonclient.http works)",
    "conformance": "examples:\n  glowc conformance --backend cpu -n 2 -q\n"
                   "  glowc conformance --backend mypkg.backend:MyBackend -k conv\n"
                   "  glowc conformance --backend cpu -n 2 --export-golden golden/   golden artifacts; then\n"
                   "      make -C golden CC=aarch64-linux-gnu-gcc && golden/replay golden/   (on the board)",
    "profile": "example:\n  glowc profile model.onnx --input input=calibration.npy -o profile.json\n"
               "each --input file holds a stack of samples on its first axis (e.g. [16, 1, 3, 224, 224] for 16 "
               "samples\nof a [1, 3, 224, 224] input); then: glowc run model.onnx --quantize profile.json ...",
    "quantize-report": "examples:\n  glowc quantize-report model.onnx --profile profile.json --input input=test.npy\n"
                       "  glowc quantize-report model.onnx --profile profile.json --input input=test.npy "
                       "--keep-float conv1 --keep-float Softmax\nprints every quantized tensor's SQNR against the "
                       "float model, marks where the most is lost,\nand the outputs' SQNR and top-1 agreement",
}


def _sub(sub, name, help):
    return sub.add_parser(name, help=help, description=help, epilog=EXAMPLES[name],
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _positive(kind):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            v = 0
        if not v > 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
        return v
    return parse


class _Parser(argparse.ArgumentParser):
    """Usage errors on one line, pointing at the command's help (subcommand parsers are of this class too)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _quantize_group(parser, report=False):
    """The quantization options (glowc run/compile/dump, and quantize-report without --quantize)."""
    g = parser.add_argument_group("quantization")
    if not report:
        g.add_argument("--quantize", metavar="PROFILE", help="quantize with this profile (glowc profile writes it)")
    g.add_argument("--schema", choices=quantization.SCHEMAS, help="how scales and offsets are chosen (default "
                                                                   "asymmetric)")
    g.add_argument("--weight-schema", choices=quantization.SCHEMAS, help="the conv and matmul weights' schema "
                   "(default: symmetric under --schema asymmetric, as onnxruntime's quantize_static; else --schema's)")
    g.add_argument("--precision", choices=quantization.PRECISIONS, help="int8 (default) or int16")
    g.add_argument("--per-channel", action="store_true", help="conv and matmul weights per output channel")
    g.add_argument("--calibration", choices=quantization.CALIBRATIONS, help="range from the profile: minmax "
                                                                             "(default), entropy (KL), percentile")
    g.add_argument("--keep-float", action="append", metavar="NODE_OR_OP", help="keep this node (ONNX name) or op "
                   "type in float (repeatable)")
    if not report:
        g.add_argument("--convert-to", choices=quantization.TARGETS, help="compute the float32 parts in this type")
        g.add_argument("--requant", choices=quantization.REQUANT_MODES, help="requantization arithmetic: float32 "
                       "(default) or fixed_point (int32 multiplier and rounding shift, TOSA RESCALE's)")
        g.add_argument("--npu-config", metavar="FILE.json", help="the npu backend's NpuConfig (glow_npu)")


def _generation_args(parser):
    parser.add_argument("--max-seq-len", type=_positive(int), default=256, metavar="L",
                        help="the KV cache's capacity in positions (default 256)")
    parser.add_argument("--prefill-block", type=_positive(int), default=16, metavar="P",
                        help="prompt tokens per prefill run (default 16)")


def build_parser():
    p = _Parser(prog="glowc", description="Glow Kit compiler driver", epilog=EXAMPLES[None],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traceback", action="store_true", help="show the Python traceback on errors")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    backend_help = "backend name (see 'glowc backends') or module:attr naming a Backend"
    backends_help = backend_help + "; B1,B2,... partitions the model across backends in priority order"
    _sub(sub, "backends", "list the discovered backends")
    r = _sub(sub, "run", "run a model and write each output as DIR/<name>.npy")
    r.add_argument("model")
    r.add_argument("--backend", default="interpreter", help=backends_help + " (default: interpreter)")
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy")
    r.add_argument("--output-dir", default=".")
    _quantize_group(r)
    r.add_argument("--trace", metavar="FILE.json", help="write a Chrome trace: compile stages and every "
                   "instruction of every run (open in Perfetto or chrome://tracing)")
    r.add_argument("--repeat", type=_positive(int), default=1, metavar="N", help="run N times (default 1)")
    r.add_argument("--threads", type=_positive(int), metavar="N", help="threads of the backend (default: its own)")
    d = _sub(sub, "dump", "print the optimized graph and/or low-level IR, or write them as Graphviz or ONNX")
    d.add_argument("model")
    d.add_argument("--backend", default="interpreter", help=backends_help + " (default: interpreter)")
    d.add_argument("--ir", action="store_true", help="print the low-level IR")
    d.add_argument("--graph", action="store_true", help="print the optimized graph (the default)")
    d.add_argument("--dot", metavar="FILE", help="write the optimized graph as Graphviz")
    d.add_argument("--onnx", metavar="FILE", help="write the optimized, lowered graph as ONNX (glow domain)")
    d.add_argument("--source", action="store_true",
                   help="print the generated code (cpu: one C unit; each call names its kernel's algorithm; npu: "
                        "each layer's tiling and loop order)")
    d.add_argument("--asm", action="store_true", help="print the device program (npu: every instruction, with "
                   "the layers' tilings first)")
    _quantize_group(d)
    gen = d.add_argument_group("generation (a decoder compiled as glowc generate compiles it)")
    gen.add_argument("--generate", action="store_true", help="dump the generator's function: its KV cache is state")
    gen.add_argument("--function", choices=["decode", "prefill"], default="decode", help="which (default decode)")
    _generation_args(gen)
    gn = _sub(sub, "generate", "generate tokens with a decoder (KV cache of fixed capacity, updated in place)")
    gn.add_argument("model")
    gn.add_argument("--backend", default="cpu", help=backends_help + " (default: cpu)")
    gn.add_argument("--prompt-ids", required=True, metavar="I,J,...", help="the prompt's token ids")
    gn.add_argument("--max-new-tokens", type=int, default=16, metavar="N", help="tokens to generate (default 16)")
    gn.add_argument("--seed", type=int, help="sample with this seed (default: greedy)")
    gn.add_argument("--temperature", type=_positive(float), help="sampling temperature (default 1)")
    gn.add_argument("--top-k", type=int, metavar="K", help="sample among the K most likely tokens (default all)")
    gn.add_argument("--top-p", type=_positive(float), metavar="P", help="nucleus sampling (default 1)")
    gn.add_argument("--threads", type=_positive(int), metavar="N", help="threads of the backend (default: its own)")
    _generation_args(gn)
    b = _sub(sub, "bench", "measure latency, throughput and GFLOP/s, per op kind, optionally against onnxruntime")
    b.add_argument("model")
    b.add_argument("--backend", default="interpreter", help=backend_help + " (default: interpreter)")
    b.add_argument("--threads", type=_positive(int), metavar="N", help="threads of the backend and of onnxruntime "
                   "(default: every core)")
    b.add_argument("--compare", choices=["onnxruntime"], help="also run onnxruntime in this process")
    b.add_argument("--seconds", type=_positive(float), default=3.0, metavar="S", help="time budget per runtime (default 3)")
    b.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="inputs (default: random)")
    dm = _sub(sub, "demo", "compile and run the built-in CNN")
    dm.add_argument("--backend", default="interpreter", help=backend_help + " (default: interpreter)")
    c = _sub(sub, "compile", "compile models (optionally to a standalone bundle, several entry points in one)")
    c.add_argument("model", nargs="+")
    c.add_argument("--backend", default="cpu", help=backend_help + " (default: cpu)")
    c.add_argument("--emit-bundle", metavar="DIR")
    c.add_argument("--bundle-name", action="append", metavar="NAME",
                   help="entry point name, once per model in order (default: model, or the file names)")
    c.add_argument("--target", metavar="TRIPLE", help="cross-compile the bundle with TRIPLE-gcc and build it "
                   "(e.g. aarch64-linux-gnu, arm-linux-gnueabihf)")
    c.add_argument("--cpu", metavar="NAME", help="target CPU of the bundle (-mcpu=NAME on Arm, else -march=NAME)")
    c.add_argument("--shared-weights", action="store_true", help="one weights file (bundle.weights.bin) for every "
                   "entry point, each constant tensor stored once")
    pt = _sub(sub, "partition", "show where each node of a model runs across backends, and why")
    pt.add_argument("model")
    pt.add_argument("--backend", required=True, metavar="B1,B2,...", help=backends_help)
    pt.add_argument("--dot", metavar="FILE", help="write the graph, coloured by partition, as Graphviz")
    _quantize_group(c)
    pr = _sub(sub, "profile", "record every tensor's range over sample inputs (for --quantize)")
    pr.add_argument("model")
    pr.add_argument("--input", action="append", metavar="NAME=FILE.npy", required=True,
                    help="a stack of samples of input NAME (samples on the first axis); one per model input")
    pr.add_argument("-o", "--output", required=True, metavar="FILE", help="the profile (JSON) to write")
    qr = _sub(sub, "quantize-report", "where quantization loses accuracy: per-tensor SQNR against the float model")
    qr.add_argument("model")
    qr.add_argument("--profile", required=True, metavar="FILE", help="the profile (glowc profile)")
    qr.add_argument("--input", action="append", metavar="NAME=FILE.npy", required=True,
                    help="a stack of test inputs of input NAME (samples on the first axis)")
    _quantize_group(qr, report=True)
    f = _sub(sub, "fuzz", "differential fuzzing of a backend against a reference: random valid ONNX graphs, "
                          "every failure shrunk to a minimal model in --out (exit status 1 when something was found)")
    fuzz_cli.add_arguments(f, backend_help)
    sv = _sub(sub, "serve", "serve a model over the Open Inference Protocol v2 on Ray Serve (until SIGINT or SIGTERM; "
                            "needs glow-kit[serve])")
    serve_cli.add_arguments(sv, backend_help)
    cf = _sub(sub, "conformance", "run the conformance suite (extra args go to pytest)")
    cf.add_argument("--backend", required=True, help=backend_help)
    return p


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv:
        parser.print_help(sys.stderr)
        parser.exit(2)
    args, rest = parser.parse_known_args(argv)
    if rest and args.cmd != "conformance":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.cmd == "conformance":
            cmd_conformance(args, rest)
        else:
            with warnings.catch_warnings():  # notices (FallbackWarning) on one line each, like errors
                warnings.showwarning = lambda message, category, *_, **__: print(
                    f"glowc: {category.__name__}: {message}", file=sys.stderr)
                rc = {"backends": cmd_backends, "run": cmd_run, "dump": cmd_dump, "demo": cmd_demo,
                      "compile": cmd_compile, "bench": cmd_bench, "partition": cmd_partition, "profile": cmd_profile,
                      "quantize-report": cmd_quantize_report, "fuzz": fuzz_cli.run,
                      "serve": serve_cli.run, "generate": cmd_generate}[args.cmd](args)
            if rc:
                return rc
    except GlowError as e:
        if args.traceback:
            raise
        print(f"glowc: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    except OSError as e:  # a file the user named could not be read or written
        if args.traceback:
            raise
        where = f"'{e.filename}': " if e.filename else ""
        print(f"glowc: error: {where}{e.strerror or e}; check the path and its permissions", file=sys.stderr)
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
