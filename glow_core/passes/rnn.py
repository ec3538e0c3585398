"""Recurrent ops in one canonical form: forward, time-major.

``rnn_directions`` rewrites an LSTM, GRU or RNN node that runs in reverse, in both directions or batch-major
(``layout=1``) as forward, time-major nodes of the same op (one per direction) with slices, reversals,
transposes and concatenations around them: a reverse direction is the forward recurrence over the time-reversed
sequence, its Y reversed back. Each step computes what the op's lowering computes for that direction (the same
primitives on the same values), so results are unchanged, and a backend that keeps the forward op whole (one
kernel instead of an unrolled recurrence) runs every variant with it: what torch exports for ``bidirectional=True``
and what batch-first models write.

Not rewritten: ``sequence_lens`` shorter than the sequence with a reverse direction (each sequence reverses within
its own length), nodes of unknown shapes or of a shape the op's lowering would refuse (it reports them).
"""
from __future__ import annotations

import numpy as np

from ..builder import Builder
from ..graph import Function
from ..types import TensorType

#: Gates and activations per direction of each recurrent op.
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_ACTS = {"LSTM": 3, "GRU": 2, "RNN": 1}


def _str(s):
    return s.decode() if isinstance(s, bytes) else s


def _full_lengths(v, steps: int) -> bool:
    return v is None or (v.is_const and bool(np.all(np.asarray(v.const) == steps)))


def _rewritable(n) -> bool:
    ins = list(n.inputs) + [None] * (8 - len(n.inputs))
    x, w, r = ins[:3]
    direction = _str(n.attrs.get("direction") or "forward")
    layout = n.attrs.get("layout") or 0
    if (direction == "forward" and not layout) or direction not in ("forward", "reverse", "bidirectional"):
        return False
    if any(v is None or v.type is None for v in (x, w, r)) or x.rank != 3 or w.rank != 3:
        return False
    nd = 2 if direction == "bidirectional" else 1
    gates = _GATES[n.op]
    h = w.shape[1] // gates
    if w.shape[0] != nd or w.shape[1] != gates * h or r.shape != (nd, gates * h, h) or h < 1:
        return False
    steps = x.shape[1] if layout else x.shape[0]
    if direction != "forward" and not _full_lengths(ins[4], steps):
        return False
    acts = n.attrs.get("activations")
    if acts and len(acts) != _ACTS[n.op] * nd and not (n.op == "RNN" and nd == 1 and len(acts) == 2):
        return False  # the lowering reports the count
    return len(n.outputs) >= 1 and all(v is None or v.type is not None for v in n.inputs)


def _per_direction(b: Builder, v, d: int, nd: int):
    """Direction ``d`` of a [D, ...] input (None stays None)."""
    if v is None or nd == 1:
        return v
    return b.slice(v, starts=[d] + [0] * (v.rank - 1), ends=[d + 1] + list(v.shape[1:]), steps=[1] * v.rank)


def _reversed_time(b: Builder, v):
    """``v`` [T, ...] with its first axis reversed."""
    t = v.shape[0]
    if t == 1:
        return v
    return b.slice(v, starts=[t - 1] + [0] * (v.rank - 1), ends=[-1] + list(v.shape[1:]), steps=[-1] + [1] * (v.rank - 1))


def _rewrite(fn: Function, n) -> list:
    """The forward, time-major replacement of ``n``: its output values, in ``n.outputs``' order."""
    b = Builder(fn, where=f"node '{n.name}' ({n.op})", opset=n.opset, name=n.name or n.op.lower())
    ins = list(n.inputs) + [None] * (8 - len(n.inputs))
    x, w, r, bias, lens, init_h = ins[:6]
    init_c, peep = (ins[6], ins[7]) if n.op == "LSTM" else (None, None)
    direction = _str(n.attrs.get("direction") or "forward")
    layout = n.attrs.get("layout") or 0
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    nd, nacts = len(dirs), _ACTS[n.op]
    if layout:  # batch-major [B, T, I] and states [B, D, H] -> time-major [T, B, I] and [D, B, H]
        x = b.transpose_(x, (1, 0, 2))
        init_h = None if init_h is None else b.transpose_(init_h, (1, 0, 2))
        init_c = None if init_c is None else b.transpose_(init_c, (1, 0, 2))
    steps, batch = x.shape[0], x.shape[1]
    h = w.shape[1] // _GATES[n.op]
    if direction != "forward":
        lens = None  # all full length (checked)
    attrs = {k: v for k, v in n.attrs.items() if k not in ("direction", "layout", "activations", "activation_alpha",
                                                           "activation_beta")}
    acts = list(n.attrs.get("activations") or [])
    alphas, betas = list(n.attrs.get("activation_alpha") or []), list(n.attrs.get("activation_beta") or [])
    n_out = 3 if n.op == "LSTM" else 2
    ys, finals = [], [[] for _ in range(n_out - 1)]
    for d, dname in enumerate(dirs):
        xd = _reversed_time(b, x) if dname == "reverse" else x
        args = [xd, _per_direction(b, w, d, nd), _per_direction(b, r, d, nd), _per_direction(b, bias, d, nd), lens,
                _per_direction(b, init_h, d, nd)]
        if n.op == "LSTM":
            args += [_per_direction(b, init_c, d, nd), _per_direction(b, peep, d, nd)]
        while args and args[-1] is None:
            args.pop()
        at = dict(attrs, direction="forward")
        if acts:
            at["activations"] = acts[d * nacts:(d + 1) * nacts] if len(acts) >= nacts * nd else acts[:nacts]
        for key, vals in (("activation_alpha", alphas), ("activation_beta", betas)):
            if vals:
                at[key] = vals[d * nacts:(d + 1) * nacts]
        types = [TensorType(x.dtype, (steps, 1, batch, h))] + [TensorType(x.dtype, (1, batch, h))] * (n_out - 1)
        node = fn.add_node(n.op, args, at, types, name=fn.unique_name(f"{n.name or n.op}_{dname}"), opset=n.opset)
        node.origin = n.source
        y = node.outputs[0]
        ys.append(_reversed_time(b, y) if dname == "reverse" else y)
        for i in range(n_out - 1):
            finals[i].append(node.outputs[1 + i])
    outs = [ys[0] if nd == 1 else b.concat(*ys, axis=1)]
    outs += [f[0] if nd == 1 else b.concat(*f, axis=0) for f in finals]
    if layout:
        outs = [b.transpose_(outs[0], (2, 0, 1, 3))] + [b.transpose_(o, (1, 0, 2)) for o in outs[1:]]
    return outs[:len(n.outputs)]


def rnn_directions(fn: Function) -> int:
    """Rewrite every reverse, bidirectional or batch-major LSTM / GRU / RNN as forward, time-major nodes (module
    doc). Returns the number of nodes rewritten. Linear in the graph (and in each node's steps)."""
    todo = [n for n in fn.nodes if n.op in _GATES and _rewritable(n)]
    if not todo:
        return 0
    uses = fn.use_lists()
    for n in todo:
        start = len(fn.nodes)
        outs = _rewrite(fn, n)
        for m in fn.nodes[start:]:
            uses.add(m)
            m.origin = m.origin or n.source
        uses.discard(n)
        for old, new in zip(n.outputs, outs):
            if new.onnx_name is None and new.kind == "node":
                new.onnx_name = old.onnx_name
            uses.replace(old, new)
    dead = set(todo)
    fn.nodes = [m for m in fn.nodes if m not in dead]
    fn.toposort()
    return len(todo)
