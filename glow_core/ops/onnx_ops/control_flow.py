"""Control flow: If, Loop and Scan, lowered by inlining their subgraph bodies (``Function`` attributes, built
at import) with ``b.inline``: every body node is built again on the values it is bound to.

If inlines the branch its (constant) condition selects; with a run-time
condition it inlines both branches and selects elementwise when they produce
the same types (ONNX ops have no side effects), and otherwise asks for the
condition to be specialized. Loop is unrolled for a constant trip count and
constant loop conditions; Scan is unrolled over the (static) scan length.
Sequence- and optional-typed subgraph values are not supported.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ...graph import split_outer
from ..registry import onnx_op

#: Most Loop iterations and Scan steps the lowering unrolls (each inlines the whole body).
MAX_UNROLL = 100_000


@onnx_op("If")
def if_(b, *inputs, then_branch, else_branch, **attrs):
    """The selected branch inlined (constant condition), or both branches and an elementwise select."""
    (cond, *_), outer = split_outer(inputs, attrs)
    if cond.type.numel != 1:
        raise ShapeError(f"{b.where}: cond has shape {list(cond.shape)}; a tensor of one boolean is accepted")
    if cond.is_const:
        take = bool(np.asarray(cond.const).ravel()[0])
        return b.inline(then_branch if take else else_branch, outer, "then_" if take else "else_")
    t = b.inline(then_branch, outer, "then_")
    e = b.inline(else_branch, outer, "else_")
    if [v.type for v in t] != [v.type for v in e]:
        b.value_of(cond, "cond (the branches produce different types)")
    c = b.reshape_(cond, ())
    return [b.where_(c, x, y) for x, y in zip(t, e)]


def _stack(b, values, axis=0):
    """Stack same-typed values along a new ``axis``."""
    if not values:
        raise ShapeError(f"{b.where}: a scan output of zero iterations has no static shape")
    us = [b.reshape_(v, v.shape[:axis] + (1,) + v.shape[axis:]) for v in values]
    return us[0] if len(us) == 1 else b.concat(*us, axis=axis)


@onnx_op("Loop", const_inputs=(0, 1))
def loop(b, *inputs, body, **attrs):
    """Unrolled: the body inlined once per iteration while the (constant) condition holds."""
    declared, outer = split_outer(inputs, attrs)
    declared += [None] * (2 - len(declared))
    m, cond, state = declared[0], declared[1], list(declared[2:])
    trips = None if m is None else int(b.scalar_of(m, "trip count M"))
    go = True if cond is None else bool(b.scalar_of(cond, "loop condition"))
    n_state = len(state)
    if any(v is None for v in state):
        raise ShapeError(f"{b.where}: loop-carried values must be tensors (optional values are not supported)")
    scans: list[list] = []
    i = 0
    while go and (trips is None or i < trips):
        if i >= MAX_UNROLL:
            raise ShapeError(f"{b.where}: the loop runs past {MAX_UNROLL} iterations (trip count {trips}); the "
                             f"lowering unrolls at most {MAX_UNROLL}")
        it = b.const(np.array(i, dtype=np.int64))
        c_in = b.const(np.array(go))
        outs = b.inline(body, [it, c_in] + state + outer, f"it{i}_")
        go = bool(b.scalar_of(outs[0], "loop condition (computed by the body)"))
        state = list(outs[1:1 + n_state])
        scans.append(outs[1 + n_state:])
        i += 1
    n_scan = len(body.outputs) - 1 - n_state
    return state + [_stack(b, [s[k] for s in scans]) for k in range(n_scan)]


def _take(b, x, axis, t):
    """x[..., t, ...] along ``axis`` with that axis removed."""
    s = b.slice(x, starts=[t if a == axis else 0 for a in range(x.rank)],
                ends=[t + 1 if a == axis else d for a, d in enumerate(x.shape)], steps=[1] * x.rank)
    return b.reshape_(s, x.shape[:axis] + x.shape[axis + 1:])


@onnx_op("Scan")
def scan(b, *inputs, body, num_scan_inputs, scan_input_axes=None, scan_input_directions=None,
         scan_output_axes=None, scan_output_directions=None, directions=None, **attrs):
    """Unrolled over the scan axis: the body inlined once per step (opset 8's batched form per batch row)."""
    declared, outer = split_outer(inputs, attrs)
    if b.opset < 9:  # Scan-8: (sequence_lens, states..., scans...) with a leading batch axis
        if declared and declared[0] is not None:
            raise ShapeError(f"{b.where}: Scan-8 sequence_lens is not supported (give it as empty)")
        vals = declared[1:]
        if vals and vals[-1] is not None and vals[-1].rank >= 2 and vals[-1].shape[0] * vals[-1].shape[1] > MAX_UNROLL:
            raise ShapeError(f"{b.where}: {vals[-1].shape[0]} batch rows x {vals[-1].shape[1]} steps; the lowering "
                             f"unrolls at most {MAX_UNROLL} steps in all")
        rows = []
        for r in range(vals[0].shape[0]):
            row = [_take(b, v, 0, r) for v in vals]
            rows.append(_scan(b, row, body, num_scan_inputs, [0] * num_scan_inputs, directions, None, None,
                              outer, f"b{r}_"))
        return [_stack(b, [row[k] for row in rows]) for k in range(len(rows[0]))]
    return _scan(b, declared, body, num_scan_inputs, scan_input_axes, scan_input_directions, scan_output_axes,
                 scan_output_directions, outer, "")


def _scan(b, vals, body, n_in, in_axes, in_dirs, out_axes, out_dirs, outer, tag):
    n_state = len(vals) - n_in
    state, xs = list(vals[:n_state]), vals[n_state:]
    if any(v is None for v in vals):
        raise ShapeError(f"{b.where}: input {[v is None for v in vals].index(True)} is left empty; every state and "
                         f"scan input must be given")
    if n_state < 0 or not xs or any(x.rank < 1 for x in xs):
        raise ShapeError(f"{b.where}: {len(vals)} inputs with num_scan_inputs {n_in}: scan inputs of rank >= 1 "
                         f"after the state inputs are accepted")
    in_axes = [b.norm_axis(a, x.rank) for a, x in zip(in_axes or [0] * n_in, xs)]
    in_dirs = in_dirs or [0] * n_in
    lengths = {x.shape[a] for x, a in zip(xs, in_axes)}
    if len(lengths) != 1:
        raise ShapeError(f"{b.where}: scan inputs have different lengths {sorted(lengths)} along their axes")
    T = lengths.pop()
    if T > MAX_UNROLL:
        raise ShapeError(f"{b.where}: the scan inputs have {T} steps; the lowering unrolls at most {MAX_UNROLL}")
    steps = []
    for t in range(T):
        sl = [_take(b, x, a, T - 1 - t if d else t) for x, a, d in zip(xs, in_axes, in_dirs)]
        outs = b.inline(body, state + sl + outer, f"{tag}t{t}_")
        state = list(outs[:n_state])
        steps.append(outs[n_state:])
    n_out = len(body.outputs) - n_state
    out_dirs = out_dirs or [0] * n_out
    res = []
    for k in range(n_out):
        seq = [s[k] for s in steps]
        if out_dirs[k]:
            seq = seq[::-1]
        axis = (out_axes[k] if out_axes else 0) % (seq[0].rank + 1) if seq else 0
        res.append(_stack(b, seq, axis))
    return state + res


@onnx_op("OptionalHasElement")
def optional_has_element(b, x=None):
    """A constant: whether the (tensor) input is given (optional-typed values are not supported)."""
    return b.const(np.array(x is not None))


@onnx_op("OptionalGetElement")
def optional_get_element(b, x):
    """The tensor input itself (optional- and sequence-typed values are not supported)."""
    return x
