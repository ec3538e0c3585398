"""Profiling (Glow's -dump-profile): the range and histogram of every tensor of a float model on sample inputs.

``profile(model, samples)`` imports the model for the samples' shapes, runs the standard graph passes and
lowering (as ``glow_core.compile`` does for the reference interpreter), then evaluates the lowered graph on every
sample with the reference kernels (``evaluate``), recording for every float tensor its minimum, maximum and a
histogram of ``BINS`` bins. A tensor is named by its ONNX value name; a tensor that lowering created inside one
ONNX node (Softmax's exp, Gemm's matmul before the bias) by its lowered value's name, with the ONNX node it came
from. ``Profile.save`` / ``Profile.load`` use a JSON file holding the graph's hashes and the tool version.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import onnx

from ..errors import GlowError, InputError
from ..graph import Function
from ..importer.onnx_import import graph_input_specs, import_model, load_model
from ..lower import lower
from ..passes import DEFAULT_PIPELINE, POST_LOWERING_PIPELINE, run_pipeline
from ..types import dtype
from .evaluate import evaluate

FORMAT = "glow-kit-profile"
FORMAT_VERSION = 1
#: Histogram bins per tensor (the entropy calibration searches thresholds over them).
BINS = 1024


def tool_version() -> str:
    try:
        return version("glow-kit")
    except PackageNotFoundError:
        return "unknown"


# -- the graph a profile belongs to ------------------------------------------------------------------------
def signature(model: onnx.ModelProto, input_shapes: dict) -> dict:
    """What identifies the graph a profile was recorded on: a hash of its structure (nodes, attributes, value
    names, initializer names and types), a hash of its weights, and the input shapes it was compiled for."""
    g = model.graph
    st = hashlib.sha256()
    for n in g.node:
        st.update(repr((n.op_type, n.domain, list(n.input), list(n.output), sorted(
            (a.name, str(onnx.helper.get_attribute_value(a))) for a in n.attribute))).encode())
    wt = hashlib.sha256()
    for t in sorted(g.initializer, key=lambda t: t.name):
        st.update(repr((t.name, t.data_type, list(t.dims))).encode())
        wt.update(t.SerializeToString())
    return {"structure": st.hexdigest()[:32], "weights": wt.hexdigest()[:32],
            "inputs": {k: [int(d) for d in v] for k, v in sorted(input_shapes.items())}}


def lowered_graph(model, input_shapes: dict) -> Function:
    """The model imported for ``input_shapes``, optimized and lowered as for the reference interpreter."""
    fn = import_model(model, input_shapes=input_shapes)
    run_pipeline(fn, DEFAULT_PIPELINE)
    lower(fn)
    run_pipeline(fn, POST_LOWERING_PIPELINE)
    fn.toposort()
    return fn


def tensor_key(v) -> str:
    """How a profile names a graph value: its ONNX value name, else its lowered value name."""
    return v.onnx_name or v.name


# -- statistics of one tensor ------------------------------------------------------------------------------
@dataclass
class TensorStats:
    """The range and histogram of one tensor over all samples (non-finite values are counted, not binned)."""

    name: str
    lowered: str  # the lowered graph value's name
    node: str  # the ONNX node it comes from
    op: str  # that node's op type
    shape: list
    min: float = float("inf")
    max: float = float("-inf")
    lo: float = 0.0  # the histogram's range
    hi: float = 0.0
    counts: np.ndarray = field(default_factory=lambda: np.zeros(BINS))
    nonfinite: int = 0

    def update(self, a: np.ndarray):
        a = np.asarray(a, np.float64).reshape(-1)
        fin = a[np.isfinite(a)]
        self.nonfinite += int(a.size - fin.size)
        if not fin.size:
            return
        mn, mx = float(fin.min()), float(fin.max())
        if self.min > self.max:  # first values
            self.lo, self.hi = mn, mx if mx > mn else mn + max(abs(mn), 1.0) * 1e-6
        elif mn < self.lo or mx > self.hi:
            self._regrid(min(mn, self.lo), max(mx, self.hi))
        self.min, self.max = min(self.min, mn), max(self.max, mx)
        self.counts += np.histogram(fin, bins=len(self.counts), range=(self.lo, self.hi))[0]

    def _regrid(self, lo, hi):
        """Spread the counts over a wider range (each old bin's count shared by overlap with the new bins)."""
        old = np.linspace(self.lo, self.hi, len(self.counts) + 1)
        new = np.linspace(lo, hi, len(self.counts) + 1)
        cum = np.concatenate([[0.0], np.cumsum(self.counts)])
        self.counts = np.diff(np.interp(new, old, cum))
        self.lo, self.hi = lo, hi

    def to_json(self) -> dict:
        return {"name": self.name, "lowered": self.lowered, "node": self.node, "op": self.op, "shape": self.shape,
                "min": self.min, "max": self.max, "nonfinite": self.nonfinite,
                "histogram": {"min": self.lo, "max": self.hi,
                              "counts": [float(f"{c:.6g}") for c in self.counts]}}

    @classmethod
    def from_json(cls, d: dict) -> "TensorStats":
        h = d["histogram"]
        return cls(d["name"], d["lowered"], d["node"], d["op"], list(d["shape"]), float(d["min"]), float(d["max"]),
                   float(h["min"]), float(h["max"]), np.asarray(h["counts"], np.float64), int(d.get("nonfinite", 0)))


# -- the profile -------------------------------------------------------------------------------------------
class Profile:
    """The recorded ranges of a model's tensors: ``tensors`` by name, the graph ``signature``, ``samples``."""

    def __init__(self, tensors: dict, signature: dict, samples: int, tool: str | None = None):
        self.tensors: dict[str, TensorStats] = tensors
        self.signature = signature
        self.samples = samples
        self.tool = tool or tool_version()
        self._by_lowered = {t.lowered: t for t in tensors.values()}

    def __repr__(self) -> str:
        return f"<Profile: {len(self.tensors)} tensors over {self.samples} samples>"

    def lookup(self, v) -> TensorStats | None:
        """The statistics of graph value ``v``: the entry of its lowered name (the same pipeline lowers the same
        way), else of its ONNX name (a backend that keeps an op whole names its result differently)."""
        s = self._by_lowered.get(v.name)
        if s is not None and s.name in (tensor_key(v), v.name):
            return s
        return self.tensors.get(v.onnx_name) if v.onnx_name else None

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": FORMAT_VERSION, "tool": f"glow-kit {self.tool}",
                "graph": self.signature, "samples": self.samples, "bins": BINS,
                "tensors": [t.to_json() for t in self.tensors.values()]}

    def save(self, path):
        """Write the profile as JSON (one tensor per line, readable and diffable)."""
        d = self.to_json()
        tensors = d.pop("tensors")
        head = json.dumps(d, indent=1)[:-2]
        body = ",\n  ".join(json.dumps(t) for t in tensors)
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"{head},\n \"tensors\": [\n  {body}\n ]\n}}\n")

    @classmethod
    def load(cls, path, model=None, input_shapes: dict | None = None) -> "Profile":
        """Read a profile written by ``save``; with ``model`` (and ``input_shapes``), also check that it was
        recorded on that graph (``check``)."""
        try:
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
        except OSError as e:
            raise GlowError(f"cannot read profile '{path}': {e.strerror}; check the path") from None
        except ValueError as e:
            raise GlowError(f"profile '{path}' is not valid JSON ({e}); write profiles with 'glowc profile' or "
                            f"Profile.save") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise GlowError(f"'{path}' is not a Glow Kit profile (no \"format\": \"{FORMAT}\"); write profiles with "
                            f"'glowc profile' or Profile.save")
        if d.get("version") != FORMAT_VERSION:
            raise GlowError(f"profile '{path}' has format version {d.get('version')!r}, this Glow Kit reads version "
                            f"{FORMAT_VERSION} (written by {d.get('tool', 'an unknown tool')}); record it again")
        try:
            tensors = {t["name"]: TensorStats.from_json(t) for t in d["tensors"]}
            p = cls(tensors, d["graph"], int(d["samples"]), str(d.get("tool", "")).replace("glow-kit ", ""))
        except (KeyError, TypeError, ValueError) as e:
            raise GlowError(f"profile '{path}' is damaged ({type(e).__name__}: {e}); record it again") from None
        if model is not None:
            p.check(model, input_shapes)
        return p

    def check(self, model, input_shapes: dict | None = None, where: str = "the profile"):
        """Raise GlowError, naming the likely cause, unless this profile was recorded on ``model`` with these
        input shapes (default: the model's declared static shapes)."""
        m, _ = load_model(model)
        shapes = _static_shapes(m, input_shapes)
        mine, theirs = self.signature, signature(m, shapes)
        if mine.get("structure") != theirs["structure"]:
            names = {o for n in m.graph.node for o in n.output} | set(shapes)
            known = sum(1 for t in self.tensors.values() if t.name in names)
            raise GlowError(f"{where} was recorded on another graph: the model's structure differs (graph hash "
                            f"{theirs['structure'][:12]}, profile {str(mine.get('structure'))[:12]}); {known} of "
                            f"{len(self.tensors)} profiled tensors have a namesake in this model "
                            + ("(another model?)" if known < len(self.tensors) / 2 else "(the model was edited?)")
                            + "; record a profile of this model with glowc profile")
        if mine.get("inputs") != theirs["inputs"]:
            raise GlowError(f"{where} was recorded for input shapes {mine.get('inputs')}, the model is compiled for "
                            f"{theirs['inputs']}; record a profile with inputs of these shapes")
        if mine.get("weights") != theirs["weights"]:
            raise GlowError(f"{where} was recorded on the same graph with other weights (weights hash "
                            f"{theirs['weights'][:12]}, profile {str(mine.get('weights'))[:12]}: retrained or "
                            f"re-exported?); record a profile of these weights")


def _static_shapes(m: onnx.ModelProto, input_shapes: dict | None) -> dict:
    out = {}
    for nm, _, dims in graph_input_specs(m):
        shape = (input_shapes or {}).get(nm, dims)
        if any(not isinstance(d, int) for d in shape):
            raise GlowError(f"graph input '{nm}' has symbolic shape {list(dims)}; give input_shapes to check a "
                            f"profile against the model")
        out[nm] = tuple(int(d) for d in shape)
    return out


def profile(model, samples, progress=None) -> Profile:
    """Record the range and histogram of every float tensor of ``model`` over ``samples`` (an iterable of input
    dicts, name -> array, all of one shape per input); ``progress(i)`` is called after each sample."""
    m, _ = load_model(model)
    specs = {nm: dtype(elem) for nm, elem, _ in graph_input_specs(m)}
    fn, stats, count, shapes = None, {}, 0, None
    for i, feeds in enumerate(samples):
        if not isinstance(feeds, dict):
            raise InputError(f"sample {i}: a dict of input name -> array expected, got {type(feeds).__name__}")
        feeds = {k: np.asarray(a) for k, a in feeds.items()}
        if set(feeds) != set(specs):
            raise InputError(f"sample {i}: inputs {sorted(feeds)} given, the model takes {sorted(specs)}")
        for k, a in feeds.items():
            if a.dtype != specs[k].np:
                raise InputError(f"sample {i}: input '{k}' has dtype {a.dtype}, the model expects {specs[k].name}")
        if fn is None:
            shapes = {k: a.shape for k, a in feeds.items()}
            fn = lowered_graph(m, shapes)
            stats = _entries(fn)
        elif any(a.shape != shapes[k] for k, a in feeds.items()):
            raise InputError(f"sample {i}: shapes {({k: a.shape for k, a in feeds.items()})} differ from the first "
                             f"sample's {shapes}; every sample must have the same shapes")

        def observe(v, a):
            s = stats.get(v.id)
            if s is not None:
                s.update(a)
        evaluate(fn, feeds, observe)
        count += 1
        if progress is not None:
            progress(count)
    if fn is None:
        raise InputError("no samples: profiling needs at least one input dict")
    return Profile({s.name: s for s in stats.values()}, signature(m, shapes), count)


def _entries(fn: Function) -> dict:
    """value id -> TensorStats for every float tensor of the lowered graph (placeholders and node outputs)."""
    out, names = {}, set()
    values = [(v, (v.onnx_name or v.name, "input")) for v in fn.inputs]
    values += [(v, n.source) for n in fn.nodes for v in n.outputs]
    for v, (node, op) in values:
        if v.type is None or not v.dtype.is_float:
            continue
        key = tensor_key(v)
        if key in names:  # an ONNX value lowering split: the later parts by their own names
            key = v.name
        names.add(key)
        out[v.id] = TensorStats(key, v.name, node, op, list(v.shape))
    return out

