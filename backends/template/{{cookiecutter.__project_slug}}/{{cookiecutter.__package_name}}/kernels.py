"""The kernels of the '{{ cookiecutter.backend_name }}' backend: one per primitive.

Calling convention (every kernel)::

    kernel(inputs: list[np.ndarray], attrs: dict, out_dtypes: list[np.dtype]) -> list[np.ndarray]

``inputs`` are views onto device memory (see device.py), ``attrs`` the primitive's attributes (documented
in vendor_guide/primitives.md) and the result is one array per output, which the backend stores into the
output buffers on the device.

On the day this project is generated EVERY primitive runs its reference kernel (the numpy kernel in the primitive's
record, ``glow_core.ops.registry.get_primitive(name).kernel``, which the interpreter runs too), so the backend
is correct from the start and passes the conformance suite. Bring the device up by replacing them one at a
time: write ``@kernel("name")`` on your implementation below (see the tutorial's "replace one primitive"),
then run ``glowc conformance --backend {{ cookiecutter.backend_name }} -k name``.
"""
from __future__ import annotations

import numpy as np
from glow_core.ops.registry import PRIMITIVES, get_op, get_primitive

KERNELS: dict = {}
"""Primitive name -> kernel. Every name in glow_core's primitive registry must be present."""

WHOLE_OPS: dict = {}
"""High-level (ONNX) op type -> kernel, for the ops ``should_lower`` keeps whole. Same calling convention."""

WHOLE_OPS_SINCE: dict = {}
"""ONNX op type -> the first opset whose semantics its WHOLE_OPS kernel implements (older nodes are lowered)."""


def kernel(name: str):
    """Register the device implementation of primitive ``name`` (replaces its reference kernel)."""
    def deco(fn):
        KERNELS[name] = fn
        return fn
    return deco


def whole_op(op_type: str, since_opset: int = 1):
    """Register a kernel for a high-level op kept whole (list it in the backend's KEEP_WHOLE too). It runs
    for nodes of opset ``since_opset`` and later (ONNX changes some ops' semantics between opsets: Softmax
    flattens to 2-D before opset 13); older nodes are still lowered."""
    def deco(fn):
        WHOLE_OPS[op_type] = fn
        WHOLE_OPS_SINCE[op_type] = since_opset
        return fn
    return deco


def reference(name: str):
    """The reference kernel of primitive ``name`` (its record's), in this backend's calling convention."""
    def run(inputs, attrs, out_dtypes):
        # >>> PLUG IN THE REAL KERNEL HERE: this runs the reference (numpy) kernel on the host. <<<
        return get_primitive(name).run(list(inputs), attrs, out_dtypes)
    run.__name__ = f"reference_{name}"
    run.is_reference = True
    return run


def extended(op_type: str):
    """The reference kernel of an extended or custom op (an op Glow Kit keeps whole, e.g. TopK or NonZero)."""
    d = get_op(op_type)

    def run(inputs, attrs, out_dtypes, optional=None):
        it = iter(inputs)
        return d.run([None if missing else next(it) for missing in (optional or [False] * len(inputs))], attrs)
    return run


# -- day one: every primitive on its reference kernel ----------------------------------------------------
for _name in PRIMITIVES:
    KERNELS[_name] = reference(_name)

# -- fused activations (glow_core.fusion folds them into the producing op when the backend says it can) ------
def _prim(name, *xs, dtype=None):
    return get_primitive(name).run(list(xs), {}, [dtype or xs[0].dtype])[0]


def _const(value, like):
    return np.full(like.shape, value, like.dtype)


# Each activation as the core lowers it, step by step on the reference kernels, so fused == unfused exactly.
ACTIVATIONS = {
    "relu": lambda y: _prim("max", y, _const(0, y)),
    "clip": lambda y, min, max: _prim("min", _prim("max", y, _const(min, y)), _const(max, y)),
    "sigmoid": lambda y: _prim("sigmoid", y),
    "tanh": lambda y: _prim("tanh", y),
    "leaky_relu": lambda y, alpha: _prim("select", _prim("lt", y, _const(0, y), dtype=np.dtype(bool)),
                                         _prim("mul", y, _const(alpha, y)), y),
    "silu": lambda y: _prim("mul", y, _prim("sigmoid", y)),
    "gelu_erf": lambda y, scale: _prim("mul", _prim("mul", y, _const(0.5, y)),
                                       _prim("add", _prim("erf", _prim("mul", y, _const(scale, y))), _const(1, y))),
    "gelu_erf_div": lambda y, divisor: _prim("mul", _prim("mul", y, _prim("add", _prim(
        "erf", _prim("div", y, _const(divisor, y))), _const(1, y))), _const(0.5, y)),
    "gelu_tanh": lambda y, cube, scale: _prim("mul", _prim("mul", y, _const(0.5, y)), _prim("add", _prim("tanh", _prim(
        "mul", _prim("add", y, _prim("mul", _prim("mul", _prim("mul", y, y), y), _const(cube, y))),
        _const(scale, y))), _const(1, y))),
}


def fused(kern, activation: str, params: dict):
    """``kern`` followed by ``activation`` (with its parameters, e.g. clip's min and max) on its output, as one
    launch (no intermediate tensor)."""
    act = ACTIVATIONS[activation]

    def run(inputs, attrs, out_dtypes):
        # >>> PLUG IN THE REAL FUSED KERNEL HERE (e.g. the MAC array's built-in ReLU stage). <<<
        (y,) = kern(inputs, attrs, out_dtypes)
        return [act(np.asarray(y), **params)]
    return run


# -- device kernels: replace reference kernels here, one primitive at a time ----------------------------
# Example (the tutorial's first step), a device kernel for elementwise `add`:
#
# @kernel("add")
# def add(inputs, attrs, out_dtypes):
#     a, b = inputs
#     return [np.add(a, b, dtype=out_dtypes[0])]
