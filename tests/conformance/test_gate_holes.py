"""What the gate used to let through (issue 26, item 9): backends broken on purpose, each in one way, that the
suite now fails, naming the case that catches them and the stage.

Each backend is the reference interpreter behind a proxy (so the suite judges it against the interpreter, with
compile groups, as any vendor backend) with one bug in what it returns: outputs frozen at the first call's,
arrays overwritten by the next run, outputs lost after the eighth, one wrong element every seventh call, a
rank-0 integer off by 2**63, requantization rounding ties up or always down, int8 saturating at -127, the tail
of outputs over 64 Ki elements zeroed, subnormals flushed without saying so (or said and not done), results
written over the caller's inputs.
"""
from __future__ import annotations

import types

import numpy as np
import pytest

from glow_conformance.proxy import ProxyBackend
from glow_core.backend import CompiledFunction
from glow_core.ops.primitives import quantized as Q
from glow_core.ops.registry import PRIMITIVES
from glow_interpreter.backend import InterpreterBackend, InterpreterFunction

from .test_power import run_suite


class _Wrapped(CompiledFunction):
    """The interpreter's compiled function with ``transform(outputs, inputs, call)`` applied to what it returns."""

    def __init__(self, inner, transform):
        self.inner, self.transform, self.calls = inner, transform, 0

    def execute(self, inputs):
        self.calls += 1
        return self.transform(self.inner.execute(inputs), inputs, self)

    def memory_regions(self):
        return self.inner.memory_regions()


class _Broken(ProxyBackend):
    """The interpreter, judged as any other backend, its compiled functions' outputs passed through ``transform``."""

    transform = staticmethod(lambda outs, inputs, fn: outs)
    label = "broken"

    def __init__(self):
        super().__init__(InterpreterBackend(), self.label)

    def compile(self, function, options):
        return _Wrapped(self.inner.compile(function, options), self.transform)


def _stale(outs, inputs, fn):
    if not hasattr(fn, "first"):
        fn.first = {k: np.array(v, copy=True) for k, v in outs.items()}
    return {k: np.array(v, copy=True) for k, v in fn.first.items()}


def _overwrite(outs, inputs, fn):
    if not hasattr(fn, "slots"):
        fn.slots = {k: np.empty_like(np.asarray(v)) for k, v in outs.items()}
    for k, v in outs.items():
        np.copyto(fn.slots[k], v)
    return dict(fn.slots)  # the same arrays every run: the next run overwrites what the caller holds


def _lose_after_eighth(outs, inputs, fn):
    return dict(list(outs.items())[:8])


FLAKY = {"calls": 0}


def _flaky(outs, inputs, fn):
    FLAKY["calls"] += 1
    if FLAKY["calls"] % 7 == 2:  # one element wrong on every seventh run of the process
        for k, v in outs.items():
            v = np.asarray(v)
            if v.dtype.kind == "f" and v.size:
                v = v.copy()
                v.reshape(-1)[v.size // 2] += 1.0
                outs = dict(outs, **{k: v})
                break
    return outs


def _scalar_int_off_by_2_63(outs, inputs, fn):
    out = {}
    for k, v in outs.items():
        v = np.asarray(v)
        if v.ndim == 0 and v.dtype == np.int64:
            v = (v.view(np.uint64) ^ np.uint64(1 << 63)).view(np.int64)
        out[k] = v
    return out


BIG = 65536


def _zero_tail(outs, inputs, fn):
    out = {}
    for k, v in outs.items():
        v = np.array(v, copy=True)
        if v.size > BIG:
            v.reshape(-1)[-64:] = 0
        out[k] = v
    return out


def _flush(a):
    from glow_conformance.checker import flush_subnormals
    return flush_subnormals(np.asarray(a))


def _flush_results(outs, inputs, fn):
    return {k: _flush(v) for k, v in outs.items()}


def _write_inputs(outs, inputs, fn):
    for v in inputs.values():
        if isinstance(v, np.ndarray) and v.size and v.flags.writeable:
            v.reshape(-1)[0] = v.reshape(-1)[-1]  # scratch use of the caller's array
    return outs


def _first_image_only(outs, inputs, fn):
    out = {}
    for k, v in outs.items():
        v = np.array(v, copy=True)
        if v.ndim >= 2 and v.shape[0] > 1:
            v[1:] = v[0]  # a kernel that ignores the batch offset: every image gets the first one's result
        out[k] = v
    return out


class IgnoresBatch(_Broken):
    transform, label = staticmethod(_first_image_only), "ignores_batch"


class StaleOutputs(_Broken):
    transform, label = staticmethod(_stale), "stale_outputs"


class OverwritesEarlierOutputs(_Broken):
    transform, label = staticmethod(_overwrite), "overwrites_outputs"


class LosesOutputsAfterEighth(_Broken):
    transform, label = staticmethod(_lose_after_eighth), "loses_outputs"


class FlakyEverySeventhCall(_Broken):
    transform, label = staticmethod(_flaky), "flaky"


class ScalarIntOffBy2To63(_Broken):
    transform, label = staticmethod(_scalar_int_off_by_2_63), "scalar_int"


class ZeroesTailOfLargeOutputs(_Broken):
    transform, label = staticmethod(_zero_tail), "zeroes_tail"


class FlushesUndeclared(_Broken):
    transform, label = staticmethod(_flush_results), "flushes_undeclared"


class DeclaresFlushButKeeps(_Broken):
    label = "declares_flush"

    def flushes_subnormals(self):
        return True


class FlushesAsDeclared(_Broken):
    """A flushing device done right: operands and results flushed, and declared (passes)."""
    label = "flushes_declared"

    def flushes_subnormals(self):
        return True

    def compile(self, function, options):
        inner = self.inner.compile(function, options)

        class F(_Wrapped):
            def execute(self, inputs):
                return {k: _flush(v) for k, v in inner.execute({n: _flush(a) for n, a in inputs.items()}).items()}
        return F(inner, None)


class WritesIntoInputs(_Broken):
    transform, label = staticmethod(_write_inputs), "writes_inputs"


class _NumpyWithRint(types.ModuleType):
    """numpy with ``rint`` replaced (the quantized kernels' rounding)."""

    def __getattr__(self, name):
        return getattr(np, name)


def _rounding(rint):
    shim = _NumpyWithRint("numpy_with_other_rint")
    shim.rint = rint

    def wrap(kernel):
        def k(*args, **kw):
            real, Q.np = Q.np, shim
            try:
                return kernel(*args, **kw)
            finally:
                Q.np = real
        return k
    return {n: wrap(p.kernel) for n, p in PRIMITIVES.items() if p.quantized == "own" and n != "dequantize"}


def _saturates_symmetric(kernel):
    def k(*args, **kw):
        y = kernel(*args, **kw)
        return np.maximum(y, -127).astype(y.dtype) if y.dtype == np.int8 else y
    return k


class _BrokenKernels(ProxyBackend):
    kernels: dict = {}
    label = "broken_kernels"

    def __init__(self):
        super().__init__(InterpreterBackend(), self.label)

    def compile(self, function, options):
        return InterpreterFunction(function, kernels=self.kernels)


class RoundsTiesUp(_BrokenKernels):
    """Requantization rounding half up instead of half to even: wrong at ties only."""
    kernels, label = _rounding(lambda x: np.floor(np.asarray(x) + 0.5)), "rounds_ties_up"


class RoundsDown(_BrokenKernels):
    """Requantization always rounding down: a systematic -0.5 LSB bias."""
    kernels, label = _rounding(np.floor), "rounds_down"


class SaturatesAtMinus127(_BrokenKernels):
    """int8 results of the quantized primitives clamped to [-127, 127] (symmetric saturation)."""
    kernels = {n: _saturates_symmetric(p.kernel) for n, p in PRIMITIVES.items() if p.quantized == "own"}
    label = "saturates_127"


SPEC = "tests.conformance.test_gate_holes:"


def _failed(data):
    return {c["id"]: c for c in data["cases"] if c["outcome"] == "fail"}


def _caught(backend, patterns, tmp_path, extra=()):
    rc, data = run_suite(SPEC + backend, patterns, tmp_path / "r.html", extra)
    failed = _failed(data)
    assert rc == 1 and failed, f"{backend}: not caught ({data['counts']})"
    return failed, data


def test_stale_outputs_are_caught_by_the_second_input(tmp_path):
    failed, _ = _caught("StaleOutputs", ["primitives/add/float32/2x3x4x17", "ops/Relu/float32/3x5x17"], tmp_path)
    assert set(failed) == {"primitives/add/float32/2x3x4x17", "ops/Relu/float32/3x5x17"}
    assert all("[second input]" in c["detail"] and c["stage"] == "mismatch" for c in failed.values())


def test_arrays_overwritten_by_the_next_run_are_caught(tmp_path):
    failed, _ = _caught("OverwritesEarlierOutputs", ["primitives/mul/float32/17", "models/mlp/float32/seeded"],
                        tmp_path)
    assert set(failed) == {"primitives/mul/float32/17", "models/mlp/float32/seeded"}
    assert all(c["stage"] == "run" and "changed when the function ran again" in c["detail"]
               for c in failed.values())


def test_outputs_lost_after_the_eighth_are_caught(tmp_path):
    failed, _ = _caught("LosesOutputsAfterEighth", ["ops/Split/float32/equal12", "ops/Split/float32/equal3",
                                                    "models/many_outputs/float32/seeded"], tmp_path,
                        ["--no-group-compile"])
    assert set(failed) == {"ops/Split/float32/equal12", "models/many_outputs/float32/seeded"}
    assert all(c["stage"] == "run" and "lost 4" in c["detail"] for c in failed.values())


def test_lost_outputs_in_a_compile_group_are_charged_to_their_cases(tmp_path):
    """Grouped, every case has one output, but the group function has dozens: the cases whose outputs the group
    lost fail, saying they passed alone."""
    failed, data = _caught("LosesOutputsAfterEighth", ["primitives/matmul/int32/*"], tmp_path)
    assert all("failed in its compile group" in c["detail"] and "passed compiled alone" in c["detail"]
               and c["stage"] == "run" for c in failed.values())
    assert len(failed) == data["counts"]["total"] - 8  # the first 8 outputs of the group came back


def test_a_flaky_backend_fails_in_its_group_and_is_not_retried_into_a_pass(tmp_path):
    failed, _ = _caught("FlakyEverySeventhCall", ["primitives/add/float32/*", "primitives/sub/float32/*"],
                        tmp_path)
    assert any("failed in its compile group" in c["detail"] for c in failed.values()), \
        [c["detail"][:300] for c in failed.values()]


def test_a_rank0_integer_off_by_2_63_is_a_mismatch_not_a_checker_crash(tmp_path):
    failed, _ = _caught("ScalarIntOffBy2To63", ["primitives/add/int64/scalar", "primitives/sub/int64/scalar"],
                        tmp_path)
    assert set(failed) == {"primitives/add/int64/scalar", "primitives/sub/int64/scalar"}
    for c in failed.values():
        assert c["stage"] == "mismatch" and "max abs error 9223372036854775808" in c["detail"], c["detail"][:500]
        assert "Traceback" not in c["detail"] and "crashed" not in c["detail"]


def test_the_checker_on_rank0_integers_differing_by_2_63():
    from glow_conformance.cases import CaseFailure
    from glow_conformance.checker import compare
    for a, b in ((np.int64(-2 ** 63), np.int64(2 ** 63 - 1)), (np.uint64(2 ** 64 - 1), np.uint64(0))):
        with pytest.raises(CaseFailure, match="1 of 1 elements differ"):
            compare(np.array(a), np.array(b), "compare", "d", "r")


@pytest.mark.parametrize("backend", ["RoundsTiesUp", "RoundsDown"])
def test_requantization_rounding_the_wrong_way_is_caught_exactly(backend, tmp_path):
    failed, _ = _caught(backend, ["primitives/qconv/int8/2d_pad1/*", "primitives/quantize/float32/*",
                                  "primitives/qadd/int8/*"], tmp_path)
    assert "primitives/qconv/int8/2d_pad1/ties_multiplier_half" in failed
    assert "primitives/quantize/float32/ties_to_even" in failed
    assert all(c["stage"] == "mismatch" and "exact comparison" in c["detail"] for c in failed.values())


def test_the_old_one_lsb_allowance_passed_ties_rounded_up():
    """Rounding ties up is at most 1 LSB off: the old class (lsb=1) accepted every such answer."""
    from glow_conformance.quantized_cases import o_quantize
    x = ((np.arange(-200, 200) + 0.5) * 0.25).astype(np.float32)
    at = {"scale": 0.25, "offset": 1, "dtype": "int8"}
    right = o_quantize([x], at).astype(np.int64)
    up = np.clip(np.floor(x / np.float32(0.25) + 0.5) + 1, -128, 127).astype(np.int64)
    assert (right != up).any() and np.abs(right - up).max() == 1


def test_int8_saturating_at_minus_127_is_caught(tmp_path):
    failed, _ = _caught("SaturatesAtMinus127", ["primitives/qconv/int8/2d_pad1/saturate_both_ends",
                                                "primitives/qadd/int8/*", "primitives/quantize/float32/to_int8*"],
                        tmp_path)
    assert "primitives/qconv/int8/2d_pad1/saturate_both_ends" in failed
    assert all("got -127, expected -128" in c["detail"] or "expected -128" in c["detail"] for c in failed.values())


def test_zeroed_tails_of_large_outputs_are_caught_in_every_dtype_class(tmp_path):
    failed, _ = _caught("ZeroesTailOfLargeOutputs", ["primitives/*/*/large*", "primitives/*/*/large/*",
                                                     "primitives/qconv/int8/2d_large*",
                                                     "primitives/qadd/int8/*2x32821"], tmp_path)
    dtypes = {c["dtype"] for c in failed.values()}
    assert {"float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64", "bool"} <= dtypes
    assert {"add", "matmul", "conv", "max_pool", "avg_pool", "reduce_sum", "qconv", "qadd"} <= \
        {c["subject"] for c in failed.values()}


def test_undeclared_flushing_is_caught_where_results_are_subnormal(tmp_path):
    failed, _ = _caught("FlushesUndeclared", ["primitives/*/*/subnormal_results*"], tmp_path)
    assert {"matmul", "conv", "avg_pool", "max_pool", "reduce_sum"} <= {c["subject"] for c in failed.values()}
    assert {"float32", "float16", "bfloat16", "float64"} <= {c["dtype"] for c in failed.values()}


def test_declared_flushing_must_flush_and_then_passes(tmp_path):
    failed, _ = _caught("DeclaresFlushButKeeps", ["primitives/*/float32/subnormal_results*"], tmp_path)
    # subnormal results kept, or sums of subnormal operands (expected 0: the operands flush) not zero
    assert all(c["stage"] == "mismatch" for c in failed.values())
    assert any("not flushed to a zero of their sign" in c["detail"] for c in failed.values())
    rc, data = run_suite(SPEC + "FlushesAsDeclared", ["primitives/*/float32/subnormal_results*",
                                                     "primitives/matmul/float32/16x17@17x15"], tmp_path / "ok.html")
    assert rc == 0 and data["counts"]["pass"] == data["counts"]["total"] > 5


def test_results_written_over_the_inputs_are_caught(tmp_path):
    failed, _ = _caught("WritesIntoInputs", ["primitives/exp/float32/17", "ops/Abs/float32/7"], tmp_path)
    assert set(failed) == {"primitives/exp/float32/17", "ops/Abs/float32/7"}
    assert all(c["stage"] == "run" and "wrote into its input array" in c["detail"] for c in failed.values())


def test_the_interpreter_behind_a_proxy_passes_all_those_cases(tmp_path):
    """The control: the same cases on the unbroken interpreter judged as any backend pass."""
    rc, data = run_suite(SPEC + "_Broken", ["primitives/add/float32/*", "ops/Split/float32/*",
                                            "models/many_outputs/float32/*", "primitives/*/float32/subnormal_results*",
                                            "primitives/qconv/int8/2d_pad1/*", "primitives/add/int64/scalar"],
                         tmp_path / "r.html")
    assert rc == 0 and data["counts"]["fail"] == 0 and data["counts"]["pass"] > 20


def test_a_backend_ignoring_the_batch_is_caught_in_every_family(tmp_path):
    failed, _ = _caught("IgnoresBatch", ["primitives/conv/float32/*batch*", "primitives/qconv/int8/2d_rows40_s1/*",
                                         "primitives/max_pool/float32/2d_k3s2_pad1", "primitives/avg_pool/float32/3d",
                                         "primitives/matmul/float32/2x9x33@2x33x5", "models/mobilenet_batch3/*",
                                         "models/cnn_batch2/*", "primitives/qavg_pool/int8/2d_k3s2_pad1/*"], tmp_path)
    assert {"conv", "qconv", "max_pool", "matmul", "mobilenet_batch3", "cnn_batch2", "qavg_pool"} <= \
        {c["subject"] for c in failed.values()}
