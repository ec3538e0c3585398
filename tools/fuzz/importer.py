"""Importer fuzzing: structure-aware mutants of real models must compile and run or raise a GlowError.

Seeds are the repository's models (``glow_conformance.example_models``, small configurations) and the models of ONNX's node
suite (``onnx.backend.test.case.node``, collected once and cached under the compile cache folder). A mutant
changes one to three protobuf fields: dims, element types, attribute values and types, raw_data lengths,
graph wiring (a node reads another value, a missing one, or its own output), opset versions and domains,
external-data locations, offsets and lengths; a few are byte flips of the serialized file. Each mutant is
written to a file (external data needs a folder) and compiled and run in a child process with a time limit
and an address-space limit. Outcome classes: ``ok`` (compiled and ran; ``compiled-inputs-too-large-to-run``
when its inputs would not fit in memory), ``glow-error:<class>`` (a GlowError:
the accepted refusal), and the bugs: ``exception:<type>`` (anything else escaping), ``crash:<signal>`` and
``hang``; a GlowError without a message is a bug too (``glow-error-empty``).
"""
from __future__ import annotations

import math
import os
import tempfile
import time
import warnings
from collections import Counter

import numpy as np
import onnx
from onnx.backend.test.case import node

from glow_conformance import example_models as models
from glow_core.api import compile as glow_compile
from glow_core.errors import GlowError
from . import runner

BUG_PREFIXES = ("exception", "crash", "hang", "glow-error-empty")


def repository_models() -> list[bytes]:
    """The repository's example models in small configurations, serialized."""
    ms = [models.cnn(seed=1), models.linear_sigmoid(seed=1),
          models.resnet(seed=1, size=8, widths=(4, 8), blocks=1), models.mlp(seed=1, batch=2, sizes=(6, 5, 3)),
          models.bert_encoder(seed=1, batch=1, seq=4, hidden=8, heads=2, layers=1, ffn=16)]
    return [m.SerializeToString() for m in ms]


def node_suite_models(cache_dir: str | None = None) -> list[bytes]:
    """Models of ONNX's node suite (one per case), cached as files per onnx version (collecting takes ~40 s)."""
    # by default beside the CPU backend's compile cache ($GLOW_CACHE_DIR or ~/.cache/glow_kit)
    base = cache_dir or os.environ.get("GLOW_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                           "glow_kit")
    d = os.path.join(base, f"onnx_node_models_{onnx.__version__}")
    done = os.path.join(d, "complete")
    if not os.path.exists(done):
        os.makedirs(d, exist_ok=True)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            cases = node.collect_testcases(None)
        for c in cases:
            if c.model is not None:
                with open(os.path.join(d, c.name + ".onnx"), "wb") as f:
                    f.write(c.model.SerializeToString())
        open(done, "w").close()
    out = []
    for name in sorted(os.listdir(d)):
        if name.endswith(".onnx"):
            with open(os.path.join(d, name), "rb") as f:
                out.append(f.read())
    return out


# -- mutations ---------------------------------------------------------------------------------------------
def _all_tensors(g):
    for t in g.initializer:
        yield t
    for n in g.node:
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            for sub in list(a.graphs) + ([a.g] if a.HasField("g") else []):
                yield from _all_tensors(sub)


def _value_infos(g):
    return list(g.input) + list(g.output) + list(g.value_info)


def _wild_int(rng):
    return int(rng.choice([0, 1, -1, 2, 3, 7, 255, 2 ** 31 - 1, -2 ** 31, 2 ** 40, -2 ** 63, 2 ** 63 - 1,
                           int(rng.integers(-10, 100))]))


def m_dims(m, rng):
    vis = [v for v in _value_infos(m.graph) if v.type.tensor_type.shape.dim]
    ts = [t for t in _all_tensors(m.graph) if t.dims]
    if ts and (not vis or rng.random() < 0.5):
        t = ts[int(rng.integers(0, len(ts)))]
        t.dims[int(rng.integers(0, len(t.dims)))] = _wild_int(rng)
        return "dims:tensor"
    if not vis:
        return None
    v = vis[int(rng.integers(0, len(vis)))]
    d = v.type.tensor_type.shape.dim[int(rng.integers(0, len(v.type.tensor_type.shape.dim)))]
    if rng.random() < 0.3:
        d.dim_param = "N"
    else:
        d.dim_value = _wild_int(rng)
    return "dims:value_info"


def m_dtype(m, rng):
    codes = list(range(0, 27)) + [99, -1]
    if rng.random() < 0.5 and m.graph.initializer:
        t = m.graph.initializer[int(rng.integers(0, len(m.graph.initializer)))]
        t.data_type = int(rng.choice(codes))
        return "dtype:tensor"
    vis = _value_infos(m.graph)
    if not vis:
        return None
    vis[int(rng.integers(0, len(vis)))].type.tensor_type.elem_type = int(rng.choice(codes))
    return "dtype:value_info"


def m_attr(m, rng):
    attrs = [(n, a) for n in m.graph.node for a in n.attribute]
    if not attrs:
        return None
    n, a = attrs[int(rng.integers(0, len(attrs)))]
    r = rng.random()
    if r < 0.15:
        n.attribute.remove(a)
        return "attr:removed"
    if r < 0.3:
        a.type = int(rng.integers(0, 15))
        return "attr:type"
    if a.type == onnx.AttributeProto.INT:
        a.i = _wild_int(rng)
    elif a.type == onnx.AttributeProto.INTS:
        if a.ints and rng.random() < 0.5:
            a.ints[int(rng.integers(0, len(a.ints)))] = _wild_int(rng)
        else:
            a.ints.extend([_wild_int(rng)] * int(rng.integers(1, 3)))
    elif a.type == onnx.AttributeProto.FLOAT:
        a.f = float(rng.choice([0.0, -1.0, np.nan, np.inf, 1e30]))
    elif a.type == onnx.AttributeProto.STRING:
        a.s = bytes(rng.choice([b"", b"NOPE", b"\xff\xfe", b"../x"]))
    elif a.type == onnx.AttributeProto.TENSOR:
        a.t.dims.append(_wild_int(rng))
    else:
        a.name = "no_such_attribute"
    return "attr:value"


def m_raw(m, rng):
    ts = [t for t in _all_tensors(m.graph) if t.raw_data]
    if not ts:
        ts = [t for t in _all_tensors(m.graph)]
        if not ts:
            return None
        t = ts[int(rng.integers(0, len(ts)))]
        t.raw_data = bytes(rng.integers(0, 256, int(rng.integers(0, 17)), dtype=np.uint8))
        return "raw_data:added"
    t = ts[int(rng.integers(0, len(ts)))]
    k = len(t.raw_data)
    t.raw_data = t.raw_data[:int(rng.integers(0, k))] if rng.random() < 0.6 else t.raw_data + b"\0" * int(
        rng.integers(1, 9))
    return "raw_data:length"


def m_wiring(m, rng):
    g = m.graph
    if not g.node:
        return None
    n = g.node[int(rng.integers(0, len(g.node)))]
    names = [x for nn in g.node for x in nn.output] + [i.name for i in g.input] + [t.name for t in g.initializer]
    r = rng.random()
    if r < 0.4 and n.input:
        n.input[int(rng.integers(0, len(n.input)))] = str(rng.choice(names + ["", "missing_value", n.output[0]]))
        return "wiring:input"
    if r < 0.55:
        n.input.append(str(rng.choice(names)) if names else "x")
        return "wiring:extra-input"
    if r < 0.7 and n.output:
        n.output[0] = str(rng.choice(names + ["", n.output[0] + "_renamed"]))
        return "wiring:output"
    if r < 0.85 and len(g.node) > 1:
        g.node.remove(n)
        return "wiring:node-removed"
    n.op_type = str(rng.choice(["NoSuchOp", "Conv", "Loop", "Relu", "Reshape", "If"]))
    return "wiring:op-type"


def m_opset(m, rng):
    if not m.opset_import:
        m.opset_import.add(domain="", version=1)
    o = m.opset_import[int(rng.integers(0, len(m.opset_import)))]
    if rng.random() < 0.8:
        o.version = int(rng.choice([0, 1, 6, 7, 9, 11, 13, 17, 25, 99, -3]))
        return "opset:version"
    o.domain = str(rng.choice(["com.microsoft", "ai.onnx.ml", "x"]))
    return "opset:domain"


def m_external(m, rng):
    ts = [t for t in m.graph.initializer]
    if not ts:
        return None
    t = ts[int(rng.integers(0, len(ts)))]
    t.data_location = onnx.TensorProto.EXTERNAL
    del t.external_data[:]
    loc = str(rng.choice(["../outside.bin", "/etc/passwd", "missing.bin", "weights.bin", "", "sub/../weights.bin"]))
    t.external_data.add(key="location", value=loc)
    if rng.random() < 0.5:
        t.external_data.add(key="offset", value=str(_wild_int(rng)))
    if rng.random() < 0.5:
        t.external_data.add(key="length", value=str(_wild_int(rng)))
    return "external:" + ("outside" if loc.startswith(("..", "/")) else "inside")


MUTATIONS = {"dims": m_dims, "dtype": m_dtype, "attr": m_attr, "raw_data": m_raw, "wiring": m_wiring,
             "opset": m_opset, "external": m_external}


def mutate(seed_bytes: bytes, rng) -> tuple[bytes, list[str]]:
    """One mutant of a serialized model and the mutations applied."""
    if rng.random() < 0.08:  # a few byte flips of the file itself
        b = bytearray(seed_bytes)
        for _ in range(int(rng.integers(1, 6))):
            if b:
                b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
        return bytes(b), ["bytes:flip"]
    m = onnx.ModelProto()
    m.ParseFromString(seed_bytes)
    done = []
    names = sorted(MUTATIONS)
    for _ in range(int(rng.integers(1, 4))):
        what = MUTATIONS[names[int(rng.integers(0, len(names)))]](m, rng)
        if what:
            done.append(what)
    return m.SerializeToString(), done


def compile_and_run(path: str, backend: str = "interpreter") -> tuple[str, str]:
    """In the child: compile the file and run it on seeded inputs; (outcome class, message). Exceptions other
    than GlowError propagate (the runner classifies them as bugs)."""
    try:
        cm = glow_compile(path, backend)
        rng = np.random.default_rng(0)
        inputs = {}
        for nm, _, dims in cm.specs:
            shape = cm.input_shapes.get(nm, dims)
            if any(not isinstance(d, int) for d in shape):
                shape = [d if isinstance(d, int) else 1 for d in shape]
            if math.prod(shape) > 1 << 24 or max(shape, default=0) > 1 << 31:
                return "compiled-inputs-too-large-to-run", f"input '{nm}' of shape {shape}"
            dt = cm._dtypes[nm]
            inputs[nm] = (rng.standard_normal(shape) if dt.is_float else rng.integers(0, 3, shape)).astype(dt.np)
        cm.run(inputs)
        return "ok", ""
    except GlowError as e:
        msg = " ".join(str(e).split())
        return ("glow-error:" + type(e).__name__ if msg else "glow-error-empty"), msg[:500]


def fuzz_importer(seconds=60.0, seed=0, backend="interpreter", out_dir=None, seeds=None, timeout=20.0,
                  memory_limit=2 << 30, max_mutants=None, log=None):
    """Mutate seeds for ``seconds``; returns (outcome counts, mutation counts, bugs: list of (class, file, msg))."""
    seeds = seeds if seeds is not None else repository_models()
    outcomes, kinds, bugs = Counter(), Counter(), []
    work = tempfile.mkdtemp(prefix="glow-importer-fuzz-")
    with open(os.path.join(work, "weights.bin"), "wb") as f:  # an in-folder external data file to point at
        f.write(bytes(range(256)) * 4)
    t0 = time.monotonic()
    i = 0
    with runner.Worker(timeout, memory_limit) as w:
        while time.monotonic() - t0 < seconds and (max_mutants is None or i < max_mutants):
            rng = np.random.default_rng([seed, i])
            i += 1
            data, what = mutate(seeds[int(rng.integers(0, len(seeds)))], rng)
            kinds.update(what)
            path = os.path.join(work, "mutant.onnx")
            with open(path, "wb") as f:
                f.write(data)
            out = w.call("glow_tools.fuzz.importer:compile_and_run", path, backend)
            if out.kind == runner.OK:
                cls, msg = out.outputs
            else:
                cls, msg = out.signature, out.message
            outcomes[cls] += 1
            if cls.startswith(BUG_PREFIXES):
                keep = path
                if out_dir:
                    os.makedirs(out_dir, exist_ok=True)
                    keep = os.path.join(out_dir, f"mutant-s{seed}-{i - 1}.onnx")
                    with open(keep, "wb") as f:
                        f.write(data)
                bugs.append((cls, keep, ",".join(what), msg[:2000]))
                if log:
                    log(f"mutant {i - 1} ({', '.join(what)}): {cls}: {msg[:300]}")
    return outcomes, kinds, bugs, i


__all__ = ["fuzz_importer", "mutate", "node_suite_models", "repository_models"]
