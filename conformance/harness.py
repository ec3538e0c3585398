"""Running one case on a backend through the same pipeline as ``glow_core.compile``.

``compile_primitive`` builds a graph Function with one placeholder per operand and a single primitive node
(``Builder.emit``, no folding) and compiles it with ``glow_core.api.compile_graph`` (the back half of
``compile_function``: lowering, IR generation, buffer sharing, memory plan, ``backend.compile``) on the
guarded plan of ``guards.spread``; ``execute`` runs it with the guard bytes armed and checked when the
function exposes its memory. ``run_model`` compiles an ONNX model with ``glow_core.compile``.

Every run gets copies of its inputs, which must come back unchanged, and must return every output;
``execute_pair`` runs a compiled function on two inputs: the arrays returned by the first run must be unchanged
after the second and share no memory with its arrays (a backend must return new arrays, not device memory it
reuses). Each step sets ``ctx.stage`` (import, partition, compile, load, run) so that a failure ends at the
stage it happened.

Refusals: a case whose operation the backend's ``is_op_supported`` refused is skipped (``Unsupported``), unless
the op is required (``--require-ops``, the backend's ``claimed_ops()``): then it fails at stage partition; a
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
from glow_core.types import TensorType, dtype as gdtype, tensor_type_of

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


def declined(ctx, info, answer, what: str) -> Exception:
    """What a refusal of ``info`` by is_op_supported means: a skip, or a failure (stage partition) when the
    op is required (--require-ops, claimed_ops())."""
    why = refusal_reason(answer)
    text = (f"backend '{ctx.backend.name}' {what} {info.op} with input dtypes {', '.join(info.in_dtypes) or '-'} "
            f"(is_op_supported{': ' + why if why else ''})")
    if info.op in ctx.required_ops:
        return CaseFailure(f"required op refused: {text}; {info.op} is required (--require-ops or the backend's "
                           f"claimed_ops()), so it must not end up on a fallback device", stage="partition")
    return Unsupported(text)


def refusal(ctx, err: Exception, where: str) -> Exception:
    """What an UnsupportedOpError raised ``where`` ("compiling" or "running") means for the current case: a
    skip when is_op_supported refused something during the case, else a failure: claimed, then refused."""
    refused = [(info, a) for info, a in ctx.answers if not a]
    if refused:
        required = [(info, a) for info, a in refused if info.op in ctx.required_ops]
        info, a = (required or refused)[0]
        return declined(ctx, info, a, "refuses")
    ops = sorted({info.op for info, _ in ctx.answers})
    return CaseFailure(f"claimed, then refused: is_op_supported accepted every operation of this case "
                       f"({', '.join(ops) or 'none asked'}), then the backend raised UnsupportedOpError while "
                       f"{where}: {err}", stage="run" if where == "running" else "compile")


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


def check_supported(backend, prim: str, arrays, attrs, ctx=None):
    """Raise Unsupported when the backend's is_op_supported refuses this primitive with these dtypes (a
    CaseFailure when the op is required: ``ctx.required_ops``)."""
    info = node_info(prim, arrays, attrs)
    answer = backend.is_op_supported(info)
    if not answer:
        if ctx is not None:
            raise declined(ctx, info, answer, "does not support")
        why = refusal_reason(answer)
        raise Unsupported(f"backend '{backend.name}' does not support {prim} with input dtypes "
                          f"{', '.join(info.in_dtypes)} (is_op_supported{': ' + why if why else ''})")


def options(threads: int = 1, **extra) -> dict:
    """The compile options of a case: no graph optimizations (the primitive must reach the backend) and the
    case's thread count (``num_threads``, which backends without threads ignore)."""
    return {"optimize": False, "num_threads": int(threads), **extra}


def compile_function(ctx, fn: Function, threads: int = 1):
    """The CompileResult of ``fn`` on the guarded plan (refusals as in the module doc)."""
    ctx.stage = "compile"
    try:
        return compile_graph(fn, ctx.backend, options(threads), before_compile=spread)
    except UnsupportedOpError as e:
        raise refusal(ctx, e, "compiling") from None


def compile_primitive(ctx, prim: str, arrays, attrs, threads: int = 1, consts=()):
    """The CompileResult of the one-node function (no graph optimizations: the primitive must reach the backend);
    the operands at the indices ``consts`` are constants."""
    ctx.stage = "partition"
    check_supported(ctx.backend, prim, arrays, attrs, ctx)
    ctx.stage = "import"
    fn = primitive_function(prim, arrays, attrs, consts)
    return compile_function(ctx, fn, threads)


def feed(arrays) -> dict:
    return {f"x{i}": np.ascontiguousarray(a).reshape(np.shape(a)) for i, a in enumerate(arrays)}


def _same_bytes(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.ascontiguousarray(a).tobytes() == \
        np.ascontiguousarray(b).tobytes()


def call(ctx, run, inputs: dict, describe: str, rerun: str, expect=None) -> dict:
    """``run(copies of inputs)`` at stage run: the copies must come back unchanged (a backend writing over the
    caller's arrays fails), and every name of ``expect`` must be among the outputs."""
    given = {k: np.array(v, copy=True) for k, v in inputs.items()}
    ctx.stage = "run"
    ctx.phase("run")
    try:
        outs = run(given)
    except UnsupportedOpError as e:
        raise refusal(ctx, e, "running") from None
    finally:
        ctx.phase("check")
    changed = [k for k in inputs if not _same_bytes(given[k], inputs[k])]
    if changed:
        raise CaseFailure(f"{describe}\n  the run wrote into its input array(s) {', '.join(changed)}: the inputs "
                          f"of execute belong to the caller and must come back unchanged\n  rerun: {rerun}",
                          stage="run")
    missing = [k for k in (expect or ()) if k not in outs]
    if missing:
        err = CaseFailure(f"{describe}\n  the run returned {len(outs)} output(s) and lost {len(missing)}: "
                          f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''} (every output of the "
                          f"function must be returned, by name)\n  rerun: {rerun}", stage="run")
        err.missing = missing
        raise err
    return outs


def execute(ctx, res, feeds: dict, describe: str, rerun: str) -> dict:
    """Run a CompileResult once: guard bytes armed before and checked after when its memory is exposed; inputs
    checked unchanged and every output present (``call``)."""
    ctx.stage = "load"
    regs = regions_of(res.compiled)
    guard = Guard(res.ir, regs) if regs is not None else None
    if guard is not None:
        guard.arm()
    outs = call(ctx, res.compiled.execute, {k: v for k, v in feeds.items() if k in res.ir.inputs}, describe,
                rerun, expect=list(res.ir.outputs))
    if guard is not None:
        guard.check(describe, rerun)
    return outs


def intact(first: dict, copies: dict, second: dict, describe: str, rerun: str):
    """The arrays ``first`` returned by a run, after the next run (``second``): unchanged (``copies`` taken
    right after the first run) and sharing no memory with the next run's arrays."""
    for k, v in first.items():
        a = np.asarray(v)
        if not _same_bytes(a, copies[k]):
            raise CaseFailure(f"{describe}\n  output {k} returned by the first run changed when the function ran "
                              f"again: execute must return new arrays, not memory the next run overwrites\n"
                              f"  rerun: {rerun}", stage="run")
        for j, w in second.items():
            if a.size and np.may_share_memory(a, np.asarray(w)):
                raise CaseFailure(f"{describe}\n  output {k} of the first run and output {j} of the second share "
                                  f"memory: execute must return new arrays, not device memory it reuses\n"
                                  f"  rerun: {rerun}", stage="run")


def execute_pair(ctx, res, feeds1: dict, feeds2: dict, describe: str, rerun: str) -> tuple[dict, dict]:
    """Run a CompileResult on two inputs (``execute`` each): the first run's arrays are checked ``intact``."""
    outs1 = execute(ctx, res, feeds1, describe, rerun)
    copies = {k: np.array(v, copy=True) for k, v in outs1.items()}
    outs2 = execute(ctx, res, feeds2, describe + " [second input]", rerun)
    intact(outs1, copies, outs2, describe, rerun)
    return outs1, outs2


def run_primitive(ctx, prim: str, arrays, attrs, describe: str, rerun: str, threads: int = 1, consts=(),
                  second=None):
    """Outputs of ``prim`` on the backend under test (skips through Unsupported when it refuses); with
    ``second`` (other operands, the constants the same), the outputs of both runs (``execute_pair``)."""
    res = compile_primitive(ctx, prim, arrays, attrs, threads, consts)
    if second is None:
        outs = execute(ctx, res, feed(arrays), describe, rerun)
        return [np.asarray(outs[f"y{i}"]) for i in range(len(outs))]
    o1, o2 = execute_pair(ctx, res, feed(arrays), feed(second), describe, rerun)
    return ([np.asarray(o1[f"y{i}"]) for i in range(len(res.ir.outputs))],
            [np.asarray(o2[f"y{i}"]) for i in range(len(res.ir.outputs))])


def second_operands(make, seed: int, first, consts=()):
    """The operands of a case's second run: ``make`` on another seed, with the constants of the first (they are
    compiled in); a float operand that comes out the same (a deterministic maker) is taken reversed."""
    out = list(make(np.random.default_rng(seed)))
    for i, a in enumerate(first):
        if i in consts or i >= len(out):
            if i >= len(out):
                out.append(a)
            else:
                out[i] = a
            continue
        b = np.asarray(out[i])
        if _same_bytes(b, a) and b.size > 1 and gdtype(b.dtype).is_float:
            out[i] = np.ascontiguousarray(b.reshape(-1)[::-1]).reshape(b.shape)
    return out


def reference_primitive(prim: str, arrays, attrs) -> list[np.ndarray]:
    """The primitive's reference kernel (its record's) on the same operands: the expectation for any backend
    other than the reference interpreter."""
    p = get_primitive(prim)
    return p.run(arrays, p.normalize_attrs(attrs, prim), [t.dtype.np for t in out_types(prim, arrays, attrs)])


def compile_model(ctx, model, backend=None, threads: int = 1, **opts):
    """``glow_core.compile`` of ``model`` on ``backend`` (default: the one under test; or a list of backends),
    without fallback: a case tests what the backend runs itself; refusals as above."""
    import glow_core
    ctx.stage = "import"
    try:
        return glow_core.compile(model, backend or ctx.backend, num_threads=threads, fallback=False, **opts)
    except UnsupportedOpError as e:
        raise refusal(ctx, e, "compiling") from None


def run_compiled(ctx, cm, inputs: dict, describe: str = "model case", rerun: str = "") -> dict:
    """Run a CompiledModel (stage run; a refusal while running fails a claimed case; inputs checked unchanged,
    every output present)."""
    ctx.stage = "load"
    return call(ctx, cm.run, inputs, describe, rerun, expect=list(cm.output_names))


def run_model(ctx, model, inputs: dict, threads: int = 1) -> dict:
    return run_compiled(ctx, compile_model(ctx, model, threads=threads), inputs)


def is_reference(backend) -> bool:
    """Whether ``backend`` is the reference interpreter (or a variant of it): then expectations must come from
    independent oracles, never from the interpreter's own kernels."""
    from glow_interpreter.backend import InterpreterBackend
    return isinstance(backend, InterpreterBackend)
