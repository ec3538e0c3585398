"""Running one case on a backend through the same pipeline as ``glow_core.compile``.

``compile_primitive`` builds a graph Function with one placeholder per operand and a single primitive node
(``Builder.emit``, no folding) and compiles it with ``glow_core.api.compile_graph`` (the back half of
``compile_function``: lowering, IR generation, buffer sharing, memory plan, ``backend.compile``) on the
guarded plan of ``guards.spread``; ``execute`` runs it with the guard bytes armed and checked when the
function exposes its memory. ``run_model`` compiles an ONNX model with ``glow_core.compile``.

Refusals: a case whose operation the backend's ``is_op_supported`` refused is skipped (``Unsupported``); a
case the backend claimed (every ``is_op_supported`` answer during the case was yes) and then refused with
``UnsupportedOpError``, while compiling or running, fails (``refusal``).
"""
from __future__ import annotations

import numpy as np

from glow_core.api import compile_graph
from glow_core.backend import NodeInfo, refusal_reason
from glow_core.builder import Builder
from glow_core.errors import UnsupportedOpError
from glow_core.graph import Function
from glow_core.ops.registry import get_primitive
from glow_core.types import TensorType, tensor_type_of

from .cases import CaseFailure, Unsupported
from .guards import Guard, regions_of, spread


def record_answers(backend, answers: list):
    """Make ``backend.is_op_supported`` append every (NodeInfo, answer) it gives to ``answers``."""
    inner = backend.is_op_supported

    def is_op_supported(node_info):
        answer = inner(node_info)
        answers.append((node_info, answer))
        return answer
    backend.is_op_supported = is_op_supported


def refusal(ctx, err: Exception, where: str) -> Exception:
    """What an UnsupportedOpError raised ``where`` ("compiling" or "running") means for the current case: a
    skip when is_op_supported refused something during the case, else a failure: claimed, then refused."""
    refused = [(info, a) for info, a in ctx.answers if not a]
    if refused:
        info, a = refused[0]
        why = refusal_reason(a)
        return Unsupported(f"backend '{ctx.backend.name}' refuses {info.op} with input dtypes "
                           f"{', '.join(info.in_dtypes) or '-'} (is_op_supported{': ' + why if why else ''})")
    ops = sorted({info.op for info, _ in ctx.answers})
    return CaseFailure(f"claimed, then refused: is_op_supported accepted every operation of this case "
                       f"({', '.join(ops) or 'none asked'}), then the backend raised UnsupportedOpError while "
                       f"{where}: {err}")


def primitive_function(prim: str, arrays, attrs, consts=()) -> Function:
    """A Function computing ``prim(*arrays, **attrs)`` on placeholders x0, x1, ... (constants for the operand
    indices in ``consts``, e.g. a quantized primitive's weight parameters); outputs y0, y1, ..."""
    fn = Function(f"conformance_{prim}")
    vals = [fn.constant(np.asarray(a), f"c{i}") if i in consts else fn.add_input(f"x{i}", tensor_type_of(np.asarray(a)))
            for i, a in enumerate(arrays)]
    out = Builder(fn, where=f"conformance case ({prim})", fold=False, name="case").emit(prim, *vals, **attrs)
    outs = out if isinstance(out, list) else [out]
    fn.set_outputs(outs, [f"y{i}" for i in range(len(outs))])
    return fn


def out_types(prim: str, arrays, attrs) -> list[TensorType]:
    p = get_primitive(prim)
    return p.out_types([tensor_type_of(np.asarray(a)) for a in arrays], p.normalize_attrs(attrs, prim))


def node_info(prim: str, arrays, attrs) -> NodeInfo:
    outs = out_types(prim, arrays, attrs)
    return NodeInfo(prim, tuple(tensor_type_of(np.asarray(a)).dtype.name for a in arrays),
                    tuple(t.dtype.name for t in outs), dict(attrs), "case",
                    tuple(np.shape(a) for a in arrays), tuple(tuple(t.shape) for t in outs))


def backend_attrs(backend, prim: str, attrs: dict) -> dict:
    """A case's attributes with the backend's ``required_options()`` that are attributes of ``prim`` (e.g. an
    integer-only device's ``requant="fixed_point"`` on the quantized primitives): what the backend runs, and so
    what the expectation is computed with."""
    extra = {k: v for k, v in backend.required_options().items() if k in get_primitive(prim).attrs}
    return {**attrs, **extra} if extra else attrs


def check_supported(backend, prim: str, arrays, attrs):
    """Raise Unsupported when the backend's is_op_supported refuses this primitive with these dtypes."""
    info = node_info(prim, arrays, attrs)
    answer = backend.is_op_supported(info)
    if not answer:
        why = refusal_reason(answer)
        raise Unsupported(f"backend '{backend.name}' does not support {prim} with input dtypes "
                          f"{', '.join(info.in_dtypes)} (is_op_supported{': ' + why if why else ''})")


def options(threads: int = 1, **extra) -> dict:
    """The compile options of a case: no graph optimizations (the primitive must reach the backend) and the
    case's thread count (``num_threads``, which backends without threads ignore)."""
    return {"optimize": False, "num_threads": int(threads), **extra}


def compile_function(ctx, fn: Function, threads: int = 1):
    """The CompileResult of ``fn`` on the guarded plan (refusals as in the module doc)."""
    try:
        return compile_graph(fn, ctx.backend, options(threads), before_compile=spread)
    except UnsupportedOpError as e:
        raise refusal(ctx, e, "compiling") from None


def compile_primitive(ctx, prim: str, arrays, attrs, threads: int = 1, consts=()):
    """The CompileResult of the one-node function (no graph optimizations: the primitive must reach the backend);
    the operands at the indices ``consts`` are constants."""
    check_supported(ctx.backend, prim, arrays, attrs)
    return compile_function(ctx, primitive_function(prim, arrays, attrs, consts), threads)


def feed(arrays) -> dict:
    return {f"x{i}": np.ascontiguousarray(a).reshape(np.shape(a)) for i, a in enumerate(arrays)}


def execute(ctx, res, feeds: dict, describe: str, rerun: str) -> dict:
    """Run a CompileResult once: guard bytes armed before and checked after when its memory is exposed."""
    regs = regions_of(res.compiled)
    guard = Guard(res.ir, regs) if regs is not None else None
    if guard is not None:
        guard.arm()
    ctx.phase("run")
    try:
        outs = res.compiled.execute({k: v for k, v in feeds.items() if k in res.ir.inputs})
    except UnsupportedOpError as e:
        raise refusal(ctx, e, "running") from None
    finally:
        ctx.phase("check")
    if guard is not None:
        guard.check(describe, rerun)
    return outs


def run_primitive(ctx, prim: str, arrays, attrs, describe: str, rerun: str, threads: int = 1, consts=()):
    """Outputs of ``prim`` on the backend under test (skips through Unsupported when it refuses)."""
    res = compile_primitive(ctx, prim, arrays, attrs, threads, consts)
    outs = execute(ctx, res, feed(arrays), describe, rerun)
    return [np.asarray(outs[f"y{i}"]) for i in range(len(outs))]


def reference_primitive(prim: str, arrays, attrs) -> list[np.ndarray]:
    """The primitive's reference kernel (its record's) on the same operands: the expectation for any backend
    other than the reference interpreter."""
    p = get_primitive(prim)
    return p.run(arrays, p.normalize_attrs(attrs, prim), [t.dtype.np for t in out_types(prim, arrays, attrs)])


def compile_model(ctx, model, backend=None, threads: int = 1, **opts):
    """``glow_core.compile`` of ``model`` on ``backend`` (default: the one under test; or a list of backends),
    without fallback: a case tests what the backend runs itself; refusals as above."""
    import glow_core
    try:
        return glow_core.compile(model, backend or ctx.backend, num_threads=threads, fallback=False, **opts)
    except UnsupportedOpError as e:
        raise refusal(ctx, e, "compiling") from None


def run_compiled(ctx, cm, inputs: dict) -> dict:
    """Run a CompiledModel (phase "run"; a refusal while running fails a claimed case)."""
    ctx.phase("run")
    try:
        return cm.run(inputs)
    except UnsupportedOpError as e:
        raise refusal(ctx, e, "running") from None
    finally:
        ctx.phase("check")


def run_model(ctx, model, inputs: dict, threads: int = 1) -> dict:
    return run_compiled(ctx, compile_model(ctx, model, threads=threads), inputs)


def is_reference(backend) -> bool:
    """Whether ``backend`` is the reference interpreter (or a variant of it): then expectations must come from
    independent oracles, never from the interpreter's own kernels."""
    from glow_interpreter.backend import InterpreterBackend
    return isinstance(backend, InterpreterBackend)
