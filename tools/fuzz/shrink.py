"""Delta debugging of a failing model: the smallest model (and simplest inputs) that still fails the same way.

``shrink(model, feeds, fails, values)`` applies, until none helps or the time budget is spent:
1. keep a single graph output (then drop the nodes, inputs and initializers nothing reads any more);
2. drop nodes, in chunks then one by one (ddmin): each consumer of a dropped node's output reads instead an
   operand of the same type (bypass), or a new graph input fed the value the reference computed there;
3. shrink graph inputs (halve a dimension, or cut it to 1: the candidate must still be valid);
4. simplify attributes (drop one, i.e. its default; set ints to 0/1 and int lists to all ones);
5. simplify values of inputs and float initializers (zeros, ones, integers, special values replaced by 0).
``fails(model, feeds)`` says whether a candidate is valid and still fails the same way; ``values(model,
feeds)`` gives every intermediate value (the reference run with all node outputs as graph outputs).
"""
from __future__ import annotations

import time

import numpy as np
import onnx
from onnx import helper, numpy_helper

from glow_core.types import dtype as gdtype


def prune(m: onnx.ModelProto, keep_nodes: bool = False) -> onnx.ModelProto:
    """Drop nodes whose outputs nothing reads (unless ``keep_nodes``), then unused inputs and initializers."""
    m = _copy(m)
    g = m.graph
    live = {o.name for o in g.output}
    keep = []
    for n in reversed(g.node):
        if keep_nodes or any(o in live for o in n.output):
            keep.append(n)
            live.update(i for i in n.input if i)
    keep.reverse()
    del g.node[:]
    g.node.extend(keep)
    ins = [i for i in g.input if i.name in live]
    del g.input[:]
    g.input.extend(ins)
    inits = [t for t in g.initializer if t.name in live]
    del g.initializer[:]
    g.initializer.extend(inits)
    return m


def _copy(m):
    c = onnx.ModelProto()
    c.CopyFrom(m)
    return c


def _types(values):
    """name -> (ONNX elem_type, dims) of computed values."""
    return {k: (gdtype(v.dtype).onnx, list(v.shape)) for k, v in values.items()}


def with_all_outputs(m: onnx.ModelProto) -> onnx.ModelProto:
    """``m`` with every node output also a graph output (to read intermediate values; shape inference runs
    here, so call it in a child process)."""
    c = _copy(m)
    try:
        inf = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    except Exception:  # noqa: BLE001
        inf = m
    types = {}
    for vi in list(inf.graph.input) + list(inf.graph.value_info) + list(inf.graph.output):
        t = vi.type.tensor_type
        if t.elem_type and t.HasField("shape"):
            types[vi.name] = (t.elem_type, [d.dim_value for d in t.shape.dim])
    have = {o.name for o in c.graph.output}
    for n in c.graph.node:
        for o in n.output:
            if o and o not in have and o in types:
                c.graph.output.append(helper.make_tensor_value_info(o, types[o][0], types[o][1]))
                have.add(o)
    return c


def drop_nodes(m, feeds, idxs, values, types, keep_nodes=False):
    """Candidate without the nodes at ``idxs``: consumers bypass to a same-typed operand or read a new input
    (then ``prune``d, keeping the nodes no output reads when ``keep_nodes``)."""
    c = _copy(m)
    g = c.graph
    feeds = dict(feeds)
    outputs = {o.name for o in g.output}
    rename = {}
    for i in sorted(idxs):
        n = m.graph.node[i]
        for o in n.output:
            if not o:
                continue
            same = [x for x in n.input if x and types.get(x) == types.get(o)]
            if o in outputs:  # the graph returns an operand of the dropped node instead
                x = next((rename.get(x, x) for x in n.input if x and x in types), None)
                if x is None or x in outputs:
                    return None, None
                k = next(j for j, vi in enumerate(g.output) if vi.name == o)
                g.output[k].CopyFrom(helper.make_tensor_value_info(x, types[x][0], [None] * len(types[x][1])))
                outputs.add(x)
            elif same:
                rename[o] = rename.get(same[0], same[0])
            elif o in values and o in types:
                g.input.append(helper.make_tensor_value_info(o, types[o][0], types[o][1]))
                feeds[o] = values[o]
            else:
                return None, None
    keep = [n for i, n in enumerate(g.node) if i not in set(idxs)]
    for n in keep:
        for k, x in enumerate(n.input):
            if x in rename:
                n.input[k] = rename[x]
    del g.node[:]
    g.node.extend(keep)
    c = prune(c, keep_nodes)
    if not c.graph.node:
        return None, None
    return c, {i.name: feeds[i.name] for i in c.graph.input if i.name in feeds}


def _shrunk_inputs(m, feeds):
    for vi in m.graph.input:
        a = feeds[vi.name]
        for ax, n in enumerate(a.shape):
            for new in sorted({1, n // 2}):
                if 0 < new < n:
                    c = _copy(m)
                    t = next(x for x in c.graph.input if x.name == vi.name)
                    t.type.tensor_type.shape.dim[ax].dim_value = new
                    f = dict(feeds)
                    f[vi.name] = np.ascontiguousarray(np.take(a, range(new), axis=ax))
                    yield c, f


def _simpler_attrs(m):
    for ni, n in enumerate(m.graph.node):
        for ai, a in enumerate(n.attribute):
            cands = [None]
            if a.type == onnx.AttributeProto.INT and a.i not in (0, 1):
                cands += [0, 1]
            if a.type == onnx.AttributeProto.INTS and any(v != 1 for v in a.ints):
                cands += [[1] * len(a.ints)]
            for v in cands:
                c = _copy(m)
                node = c.graph.node[ni]
                if v is None:
                    del node.attribute[ai]
                elif isinstance(v, list):
                    del node.attribute[ai].ints[:]
                    node.attribute[ai].ints.extend(v)
                else:
                    node.attribute[ai].i = v
                yield c


def _simpler_arrays(a):
    if a.dtype == bool or a.size == 0:
        return
    d = gdtype(a.dtype)
    for v in (0, 1):
        b = np.full_like(a, v)
        if not np.array_equal(b, a, equal_nan=d.is_float):
            yield b
    if d.is_float:
        with np.errstate(all="ignore"):
            f = a.astype(np.float64)
            clean = np.where(np.isfinite(f), f, 0.0)
            for b in (clean, np.round(clean)):
                b = b.astype(a.dtype)
                if not np.array_equal(b, a, equal_nan=True):
                    yield b


def _simpler_values(m, feeds):
    for nm, a in feeds.items():
        for b in _simpler_arrays(a):
            yield m, dict(feeds, **{nm: b})
    for k, t in enumerate(m.graph.initializer):
        if not gdtype(t.data_type).is_float:
            continue
        a = numpy_helper.to_array(t)
        for b in _simpler_arrays(a):
            c = _copy(m)
            c.graph.initializer[k].CopyFrom(numpy_helper.from_array(b, t.name))
            yield c, feeds


def shrink(model, feeds, fails, values, seconds=300.0, log=None):
    """(model, feeds, tests run) after delta debugging ``model`` (see the module docstring)."""
    deadline = time.monotonic() + seconds
    tests = 0

    def accept(c, f):
        nonlocal tests
        if c is None or time.monotonic() > deadline:
            return False
        tests += 1
        try:
            return bool(fails(c, f))
        except Exception:  # noqa: BLE001  (an invalid candidate is simply not kept)
            return False

    m, f = prune(model), dict(feeds)
    for o in m.graph.output:  # output dims follow from the inputs: free them for shrunk inputs
        for dim in o.type.tensor_type.shape.dim:
            dim.ClearField("dim_value")
    f = {i.name: f[i.name] for i in m.graph.input}
    # a node no output reads may be the one that fails (the backend compiles every node): then none is pruned
    keep = not accept(m, f)
    if keep:
        m = _copy(model)
        for o in m.graph.output:
            for dim in o.type.tensor_type.shape.dim:
                dim.ClearField("dim_value")
        f = {i.name: feeds[i.name] for i in m.graph.input}
    # 1. one output
    if len(m.graph.output) > 1:
        for o in list(m.graph.output):
            c = _copy(m)
            del c.graph.output[:]
            c.graph.output.append(o)
            c = prune(c, keep)
            cf = {i.name: f[i.name] for i in c.graph.input}
            if accept(c, cf):
                m, f = c, cf
                break
    progress = True
    while progress and time.monotonic() < deadline:
        progress = False
        # 2. nodes, ddmin: chunks of n/2, n/4, ..., 1
        vals = values(m, f)
        types = _types(vals)
        chunk = max(1, len(m.graph.node) // 2)
        while chunk >= 1 and time.monotonic() < deadline:
            i = 0
            while i < len(m.graph.node) and len(m.graph.node) > 1:
                idxs = list(range(i, min(i + chunk, len(m.graph.node))))
                c, cf = drop_nodes(m, f, idxs, vals, types, keep)
                if accept(c, cf):
                    m, f, progress = c, cf, True
                    vals = values(m, f)
                    types = _types(vals)
                else:
                    i += chunk
            chunk //= 2
        # 3.-5. shapes, attributes, values: first improvement of each kind, repeated
        for gen in (lambda: _shrunk_inputs(m, f), lambda: ((c, f) for c in _simpler_attrs(m)),
                    lambda: _simpler_values(m, f)):
            changed = True
            while changed and time.monotonic() < deadline:
                changed = False
                for c, cf in gen():
                    if accept(c, cf):
                        m, f, changed, progress = c, cf, True, True
                        break
        if log:
            log(f"shrink: {len(m.graph.node)} nodes after {tests} tests")
    return m, f, tests
