"""Running a graph Function node by node on the reference kernels, seeing every tensor.

Profiling and the accuracy report need every intermediate value, which the interpreter's memory plan reuses;
``evaluate`` runs the same kernels (each primitive's record, each kept-whole op's) over the graph instead, hands
every computed value to ``observe`` and releases it after its last use.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..builder import compile_time
from ..errors import InputError
from ..graph import Function, Value
from ..ops.registry import get_op, get_primitive


def evaluate(fn: Function, feeds: dict, observe: Callable[[Value, np.ndarray], None] | None = None) -> dict:
    """The outputs of ``fn`` (by output name) on ``feeds`` (by input name), computed with the reference kernels;
    ``observe(value, array)`` sees every placeholder and node output as it is computed."""
    last = {}
    for i, n in enumerate(fn.nodes):
        for v in n.inputs:
            if v is not None:
                last[v.id] = i
    keep = {v.id for v in fn.outputs}
    env: dict[int, np.ndarray] = {}
    for v in fn.inputs:
        if v.name not in feeds:
            raise InputError(f"missing input '{v.name}'; the function takes {[x.name for x in fn.inputs]}")
        env[v.id] = np.asarray(feeds[v.name]).astype(v.dtype.np, copy=False).reshape(v.shape)
        if observe is not None:
            observe(v, env[v.id])
    with np.errstate(all="ignore"):
        for i, n in enumerate(fn.nodes):
            args = [None if v is None else (v.const if v.is_const else env[v.id]) for v in n.inputs]
            attrs = {k: a for k, a in n.attrs.items() if not k.startswith("_")}
            with compile_time(n):
                p = get_primitive(n.op)
                if p is not None:
                    results = p.bind(attrs, [a.dtype for a in args], [o.dtype.np for o in n.outputs])(*args)
                else:
                    results = get_op(n.op).run(args, attrs)
            for v, r in zip(n.outputs, results):
                env[v.id] = np.asarray(r).reshape(v.shape)
                if observe is not None:
                    observe(v, env[v.id])
            for v in n.inputs:
                if v is not None and last.get(v.id) == i and v.id not in keep:
                    env.pop(v.id, None)
    return {name: (v.const if v.is_const else env[v.id]) for name, v in zip(fn.output_names, fn.outputs)}
