"""Where quantization loses accuracy (``glowc quantize-report``; onnxruntime's qdq_loss_debug is the anchor).

The float model and its quantized form are evaluated on the same inputs (``evaluate``: the reference kernels).
For every tensor the quantizer quantized, in graph order:

- ``sqnr``: the signal-to-quantization-noise ratio of the quantized run's tensor (dequantized) against the float
  run's, 10 log10(sum x^2 / sum (x - x_q)^2) in dB over all inputs: the error accumulated up to here
  (qdq_loss_debug's ``xmodel_err``);
- ``local``: the SQNR of the float run's tensor against itself rounded to the tensor's quantized type: the error
  this tensor's own rounding and clipping adds (``qdq_err``);
- ``drop``: how much lower ``sqnr`` is than the lowest ``sqnr`` of the quantized tensors it reads: the loss that
  happens at this node. The tensors with the largest drops are marked.

For the outputs: their SQNR and the top-1 agreement (argmax over the last axis) between the runs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..importer.onnx_import import load_model
from ..passes import run_pipeline
from .evaluate import evaluate
from .profile import lowered_graph, tensor_key
from .rewrite import quantize_graph
from .schema import QParams

MARKED = 3  # how many tensors are marked as losing the most


def sqnr(signal_power: float, noise_power: float) -> float:
    """10 log10(signal / noise) in dB (inf for no noise)."""
    if noise_power <= 0:
        return math.inf
    if signal_power <= 0:
        return -math.inf
    return 10.0 * math.log10(signal_power / noise_power)


@dataclass
class TensorError:
    name: str
    node: str
    op: str
    dtype: str
    signal: float = 0.0
    noise: float = 0.0
    local_noise: float = 0.0
    inputs: list = field(default_factory=list)  # names of the quantized tensors it reads
    drop: float = 0.0
    marked: bool = False

    @property
    def sqnr(self) -> float:
        return sqnr(self.signal, self.noise)

    @property
    def local(self) -> float:
        return sqnr(self.signal, self.local_noise)


@dataclass
class Report:
    tensors: list  # TensorError, in graph order
    outputs: dict  # output name -> {"sqnr": dB, "top1": fraction or None}
    samples: int
    float_nodes: list  # (node, op, reason) of the nodes left in float
    keep_float: tuple = ()

    def format(self) -> str:
        lines = [f"{'tensor':40s} {'op':14s} {'type':6s} {'SQNR dB':>9s} {'local dB':>9s} {'drop dB':>8s}"]
        for t in self.tensors:
            mark = "  <-- loses the most" if t.marked else ""
            lines.append(f"{_cut(t.name, 40):40s} {_cut(t.op, 14):14s} {t.dtype:6s} {_db(t.sqnr):>9s} "
                         f"{_db(t.local):>9s} {t.drop:8.2f}{mark}")
        lines.append("")
        for name, o in self.outputs.items():
            top1 = "" if o["top1"] is None else f", top-1 agreement {100 * o['top1']:.1f}%"
            lines.append(f"output {name}: SQNR {_db(o['sqnr'])} dB{top1} over {self.samples} inputs")
        if self.keep_float:
            lines.append(f"kept in float: {', '.join(self.keep_float)}")
        floats = self.float_nodes
        if floats:
            lines.append(f"{len(floats)} nodes compute in float (node, op: reason):")
            lines += [f"  {n}, {op}: {why}" for n, op, why in floats[:20]]
            if len(floats) > 20:
                lines.append(f"  ... and {len(floats) - 20} more")
        return "\n".join(lines)


def _db(x: float) -> str:
    return "inf" if x == math.inf else ("-inf" if x == -math.inf else f"{x:.2f}")


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else "..." + s[-(n - 3):]


def quantize_report(model, profile, inputs, keep_float=(), **options) -> Report:
    """The report (see module doc) of ``model`` quantized with ``profile`` and ``options`` (schema, weight_schema,
    precision, per_channel, calibration) over ``inputs`` (a list of input dicts), ``keep_float`` nodes left in
    float."""
    m, _ = load_model(model)
    inputs = list(inputs)
    shapes = {k: np.asarray(a).shape for k, a in inputs[0].items()}
    profile.check(m, shapes)
    fn_f = lowered_graph(m, shapes)
    fn_q = lowered_graph(m, shapes)
    stats = quantize_graph(fn_q, lambda node: None, profile, keep_float=keep_float, **options)
    run_pipeline(fn_q, ("dce",))
    bound = stats["values"]  # float value key -> quantized value
    bound_ids = {v.id: k for k, v in bound.items()}
    errs: dict[str, TensorError] = {}
    for n in fn_f.nodes:
        for v in n.outputs:
            k = tensor_key(v)
            if k in bound:
                q = bound[k]
                errs[k] = TensorError(k, n.source[0], n.source[1], q.dtype.name)
    for v in fn_f.inputs:
        if tensor_key(v) in bound:
            errs[tensor_key(v)] = TensorError(tensor_key(v), "input", "input", bound[tensor_key(v)].dtype.name)
    _inputs_of(fn_q, bound_ids, errs)
    outs = {name: {"signal": 0.0, "noise": 0.0, "agree": 0, "count": 0} for name in fn_f.output_names}
    for feeds in inputs:
        ref = {}

        def record(v, a):
            if tensor_key(v) in errs:
                ref[tensor_key(v)] = a
        out_f = evaluate(fn_f, feeds, record)

        def compare(v, a):
            k = bound_ids.get(v.id)
            if k is None or k not in ref:
                return
            p = QParams.of(v.type)
            x = ref[k].astype(np.float64)
            e = errs[k]
            e.signal += float(np.sum(x * x))
            e.noise += float(np.sum((x - p.dequantize(a).astype(np.float64)) ** 2))
            e.local_noise += float(np.sum((x - p.dequantize(p.quantize(x)).astype(np.float64)) ** 2))
        out_q = evaluate(fn_q, feeds, compare)
        for name in outs:
            a, b = np.asarray(out_f[name], np.float64), np.asarray(out_q[name], np.float64)
            o = outs[name]
            o["signal"] += float(np.sum(a * a))
            o["noise"] += float(np.sum((a - b) ** 2))
            if a.ndim >= 1 and a.shape[-1] > 1:
                o["agree"] += int(np.sum(np.argmax(a, -1) == np.argmax(b, -1)))
                o["count"] += int(np.prod(a.shape[:-1]))
    tensors = list(errs.values())
    by_name = {t.name: t for t in tensors}
    for t in tensors:
        ins = [by_name[i].sqnr for i in t.inputs if i in by_name]
        t.drop = max(0.0, min(ins) - t.sqnr) if ins and math.isfinite(min(ins)) and math.isfinite(t.sqnr) else 0.0
    for t in sorted(tensors, key=lambda t: -t.drop)[:MARKED]:
        t.marked = t.drop > 0
    return Report(tensors, {k: {"sqnr": sqnr(o["signal"], o["noise"]),
                                "top1": o["agree"] / o["count"] if o["count"] else None} for k, o in outs.items()},
                  len(inputs), stats["float_nodes"], tuple(keep_float))


def _inputs_of(fn_q, bound_ids, errs):
    """For each quantized tensor, the quantized tensors its computation reads (through glue nodes)."""
    producer = {v.id: n for n in fn_q.nodes for v in n.outputs}
    for vid, k in bound_ids.items():
        n = producer.get(vid)
        seen, stack, found = set(), list(n.inputs) if n else [], []
        while stack:
            x = stack.pop()
            if x is None or x.id in seen:
                continue
            seen.add(x.id)
            if x.id in bound_ids:
                found.append(bound_ids[x.id])
            elif x.id in producer and producer[x.id].op in ("quantize", "dequantize", "rescale"):
                stack.extend(producer[x.id].inputs)
        if k in errs:
            errs[k].inputs = found
