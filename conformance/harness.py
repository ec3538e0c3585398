"""Running one case on a backend through the same pipeline as ``glow_core.compile``.

``run_primitive`` builds a graph Function with one placeholder per operand and a single primitive node
(``Builder.emit``, no folding) and compiles it with ``glow_core.api.compile_graph`` (the back half of
``compile_function``: lowering, IR generation, buffer sharing, memory plan, ``backend.compile``).
``run_model`` compiles an ONNX model with ``glow_core.compile``. Both turn the backend's refusals
(is_op_supported, UnsupportedOpError) into ``Unsupported`` so that the case is skipped, not failed.
"""
from __future__ import annotations

import numpy as np

from glow_core.api import compile_graph
from glow_core.backend import NodeInfo
from glow_core.builder import Builder
from glow_core.errors import UnsupportedOpError
from glow_core.graph import Function
from glow_core.ops.registry import get_primitive
from glow_core.types import TensorType, tensor_type_of

from .cases import Unsupported


def primitive_function(prim: str, arrays, attrs) -> Function:
    """A Function computing ``prim(*arrays, **attrs)`` on placeholders x0, x1, ...; outputs y0, y1, ..."""
    fn = Function(f"conformance_{prim}")
    vals = [fn.add_input(f"x{i}", tensor_type_of(np.asarray(a))) for i, a in enumerate(arrays)]
    out = Builder(fn, where=f"conformance case ({prim})", fold=False, name="case").emit(prim, *vals, **attrs)
    outs = out if isinstance(out, list) else [out]
    fn.set_outputs(outs, [f"y{i}" for i in range(len(outs))])
    return fn


def out_types(prim: str, arrays, attrs) -> list[TensorType]:
    p = get_primitive(prim)
    return p.out_types([tensor_type_of(np.asarray(a)) for a in arrays], p.normalize_attrs(attrs, prim))


def check_supported(backend, prim: str, arrays, attrs):
    """Raise Unsupported when the backend's is_op_supported refuses this primitive with these dtypes."""
    outs = out_types(prim, arrays, attrs)
    info = NodeInfo(prim, tuple(tensor_type_of(np.asarray(a)).dtype.name for a in arrays),
                    tuple(t.dtype.name for t in outs), dict(attrs), "case")
    if not backend.is_op_supported(info):
        raise Unsupported(f"backend '{backend.name}' does not support {prim} with input dtypes "
                          f"{', '.join(info.in_dtypes)} (is_op_supported)")


def compile_primitive(backend, prim: str, arrays, attrs, before_compile=None):
    """The CompileResult of the one-node function (no graph optimizations: the primitive must reach the backend)."""
    check_supported(backend, prim, arrays, attrs)
    fn = primitive_function(prim, arrays, attrs)
    try:
        return compile_graph(fn, backend, {"optimize": False}, before_compile=before_compile)
    except UnsupportedOpError as e:
        raise Unsupported(str(e)) from None


def feed(arrays) -> dict:
    return {f"x{i}": np.ascontiguousarray(a).reshape(np.shape(a)) for i, a in enumerate(arrays)}


def run_primitive(backend, prim: str, arrays, attrs) -> list[np.ndarray]:
    """Outputs of ``prim`` on ``backend`` (skips through Unsupported when the backend refuses it)."""
    res = compile_primitive(backend, prim, arrays, attrs)
    outs = res.compiled.execute(feed(arrays))
    return [np.asarray(outs[f"y{i}"]) for i in range(len(outs))]


def reference_primitive(prim: str, arrays, attrs) -> list[np.ndarray]:
    """The primitive's reference kernel (its record's) on the same operands: the expectation for any backend
    other than the reference interpreter."""
    p = get_primitive(prim)
    return p.run(arrays, p.normalize_attrs(attrs, prim), [t.dtype.np for t in out_types(prim, arrays, attrs)])


def compile_model(backend, model, **options):
    """``glow_core.compile`` without fallback: a case tests what the backend (or list of backends) runs itself."""
    import glow_core
    try:
        return glow_core.compile(model, backend, fallback=False, **options)
    except UnsupportedOpError as e:
        raise Unsupported(str(e)) from None


def run_model(backend, model, inputs: dict) -> dict:
    cm = compile_model(backend, model)
    try:
        return cm.run(inputs)
    except UnsupportedOpError as e:
        raise Unsupported(str(e)) from None


def is_reference(backend) -> bool:
    """Whether ``backend`` is the reference interpreter (or a variant of it): then expectations must come from
    independent oracles, never from the interpreter's own kernels."""
    from glow_interpreter.backend import InterpreterBackend
    return isinstance(backend, InterpreterBackend)
