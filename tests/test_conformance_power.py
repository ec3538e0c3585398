"""The conformance suite's power: deliberately broken interpreters must be caught, naming the broken primitive.

Each variant is the reference interpreter with one realistic bug in one kernel (or, for the out-of-bounds
write, in how the function writes its buffers). It is run through the suite in process (``glow_conformance.main``
with ``--backend tests.test_conformance_power:<Variant>`` and ``--case`` selecting the relevant tier rows),
and the JSON report must show failures of the broken primitive, and only of it. The variants compare against
the suite's independent oracles (they are interpreter subclasses, so never against their own kernels).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from glow_core.ops.registry import PRIMITIVES
from glow_interpreter.backend import InterpreterBackend, InterpreterFunction

REAL = {name: p.kernel for name, p in PRIMITIVES.items()}


def _pad_off_by_one(x, w, bias, strides, dilations, pads, group=1):
    n = len(pads) // 2
    if pads[n - 1] or pads[-1]:  # the last spatial dim's begin pad is taken one too large (end one too small)
        pads = list(pads)
        pads[n - 1] += 1
        pads[-1] = max(pads[-1] - 1, 0)
        out = REAL["conv"](x, w, bias, strides, dilations, pads, group)
        return out
    return REAL["conv"](x, w, bias, strides, dilations, pads, group)


def _reduce_wrong_axis(x, axes, keepdims=1):
    r = x.ndim
    return REAL["reduce_max"](x, sorted(r - 1 - a for a in axes) if r > 1 else axes, keepdims)


def _round_half_away(x):
    return np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5)).astype(x.dtype)


def _matmul_transposed_b(a, b):
    bt = np.swapaxes(b, -1, -2).reshape(b.shape)  # B read in column-major order
    return REAL["matmul"](a, bt)


def _div_through_float(a, b):
    if a.dtype.kind in "iu":
        return np.trunc(a.astype(np.float32) / b.astype(np.float32)).astype(a.dtype)
    return REAL["div"](a, b)


def _broadcast_last_axis_only(x, shape):
    if x.ndim and x.shape[-1] == shape[-1]:
        return np.broadcast_to(x.reshape(-1)[:shape[-1]], tuple(shape))
    return np.broadcast_to(x.reshape(-1)[:1].reshape((1,) * len(shape)), tuple(shape))


def _gather_clamp(x, indices, axis):
    return np.take(x, np.minimum(indices, max(x.shape[axis] - 2, 0)), axis=axis)


def _concat_swapped(*xs, axis):
    xs = list(xs)
    if len(xs) >= 2:
        xs[-1], xs[-2] = xs[-2], xs[-1]
    return np.concatenate(xs, axis=axis)


def _transpose_inverse(x, perm):
    return np.transpose(x, np.argsort(perm))


def _slice_negative_end(x, starts, ends, steps):
    return x[tuple(np.s_[s:(e if e >= 0 else 0):st] for s, e, st in zip(starts, ends, steps))]


def _cast_rounds(x, to, saturate=1, round_mode="up"):
    from glow_core.types import dtype
    if x.dtype.kind == "f" and dtype(to).is_int:
        x = np.rint(x.astype(np.float64))
    return REAL["cast"](x, to, saturate, round_mode)


def _max_no_nan(a, b):
    return np.fmax(a, b)


def _tanh_fast(x):
    x2 = np.clip(x, -3, 3) ** 2  # a rational approximation, ~1e-3 accurate
    return (np.clip(x, -3, 3) * (27 + x2) / (27 + 9 * x2)).astype(x.dtype)


def _shl_mod_width(a, b):
    bits = a.dtype.itemsize * 8
    return np.left_shift(a, (b % bits).astype(a.dtype))  # like x86: the shift count taken modulo the width


def _mod_ignores_fmod(a, b, fmod=0):
    return REAL["mod"](a, b, 1)


def _argmax_last(x, axis, keepdims=1, select_last_index=0):
    return REAL["argmax"](x, axis, keepdims, 1)


def _scatter_lost_duplicates(x, indices, updates, reduction="none"):
    if reduction != "add":
        return REAL["scatter_nd"](x, indices, updates, reduction)
    out = x.copy()
    k = indices.shape[-1]
    idx = tuple(indices.reshape(-1, k).T)
    out[idx] = out[idx] + updates.reshape((-1,) + x.shape[k:])  # buffered: duplicate indices add only once
    return out


def _avg_pool_ignores_cip(x, kernel, strides, dilations, pads, count_include_pad=0):
    return REAL["avg_pool"](x, kernel, strides, dilations, pads, 0)


def _bitcast_byteswap(x, to):
    return REAL["bitcast"](x.byteswap(), to)


def _reduce_sum_f16_accumulator(x, axes, keepdims=1):
    if x.dtype == np.float32 and getattr(_reduce_sum_f16_accumulator, "half", False):
        pass
    return np.sum(x.astype(np.float16), axis=tuple(axes), keepdims=bool(keepdims), dtype=np.float16).astype(x.dtype)


def _sub_sign(a, b):
    return np.subtract(b, a)


def _select_inverted(cond, a, b):
    return np.where(cond, b, a)


def _abs_int_saturates(x):
    if x.dtype.kind == "i":
        return np.abs(x.astype(np.int64)).clip(None, np.iinfo(x.dtype).max).astype(x.dtype)
    return np.abs(x)


def _max_pool_pads_zero(x, kernel, strides, dilations, pads):
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + len(kernel)]) for i in range(len(kernel))])
    return REAL["max_pool"](xp, kernel, strides, dilations, [0] * len(pads))  # padding taken as 0, not -inf


# name -> (primitive patched, kernel, --case patterns)
VARIANTS = {
    "conv_pad_off_by_one": ("conv", _pad_off_by_one, ["primitives/conv/*"]),
    "reduce_max_wrong_axis": ("reduce_max", _reduce_wrong_axis, ["primitives/reduce_max/*"]),
    "sub_sign_error": ("sub", _sub_sign, ["primitives/sub/*"]),
    "round_half_away": ("round", _round_half_away, ["primitives/round/*"]),
    "matmul_transposed_b": ("matmul", _matmul_transposed_b, ["primitives/matmul/*"]),
    "div_int_through_float32": ("div", _div_through_float, ["primitives/div/*"]),
    "broadcast_wrong_axis": ("broadcast", _broadcast_last_axis_only, ["primitives/broadcast/*"]),
    "gather_clamps_last_index": ("gather", _gather_clamp, ["primitives/gather/*"]),
    "concat_operand_order": ("concat", _concat_swapped, ["primitives/concat/*"]),
    "transpose_inverse_perm": ("transpose", _transpose_inverse, ["primitives/transpose/*"]),
    "slice_negative_step_end": ("slice", _slice_negative_end, ["primitives/slice/*"]),
    "cast_rounds_instead_of_truncating": ("cast", _cast_rounds, ["primitives/cast/float*/to_int*"]),
    "max_drops_nan": ("max", _max_no_nan, ["primitives/max/*"]),
    "tanh_fast_approximation": ("tanh", _tanh_fast, ["primitives/tanh/*"]),
    "shl_count_modulo_width": ("shl", _shl_mod_width, ["primitives/shl/*"]),
    "mod_ignores_fmod": ("mod", _mod_ignores_fmod, ["primitives/mod/*"]),
    "argmax_ties_last": ("argmax", _argmax_last, ["primitives/argmax/*"]),
    "scatter_add_loses_duplicates": ("scatter_nd", _scatter_lost_duplicates, ["primitives/scatter_nd/*"]),
    "avg_pool_ignores_count_include_pad": ("avg_pool", _avg_pool_ignores_cip, ["primitives/avg_pool/*"]),
    "bitcast_byteswapped": ("bitcast", _bitcast_byteswap, ["primitives/bitcast/*"]),
    "reduce_sum_float16_accumulator": ("reduce_sum", _reduce_sum_f16_accumulator, ["primitives/reduce_sum/*"]),
    "select_inverted": ("select", _select_inverted, ["primitives/select/*"]),
    "abs_int_saturates": ("abs", _abs_int_saturates, ["primitives/abs/*"]),
    "max_pool_pads_with_zero": ("max_pool", _max_pool_pads_zero, ["primitives/max_pool/*"]),
}


class _Broken(InterpreterBackend):
    """The interpreter with ``patch`` (primitive -> kernel) in place of the reference kernels."""

    patch: dict = {}

    def compile(self, function, options):
        return InterpreterFunction(function, kernels=self.patch)


class _OOBFunction(InterpreterFunction):
    """Writes 8 bytes past the end of every buffer a 'pad' instruction writes (an unguarded vector store)."""

    def execute(self, inputs):
        out = super().execute(inputs)
        for ins in self.irf.code:
            if ins.op == "pad":
                for b in ins.outs:
                    region = self._region(b.region)
                    end = b.address + b.size
                    region[end:end + 8] = b"\x7f" * len(region[end:end + 8])
        return out


class BrokenOOBWrite(InterpreterBackend):
    def compile(self, function, options):
        return _OOBFunction(function)


for _name, (_prim, _fn, _pats) in VARIANTS.items():
    globals()[f"Broken_{_name}"] = type(f"Broken_{_name}", (_Broken,), {"patch": {_prim: _fn}})
ALL = dict({n: (p, pats) for n, (p, _, pats) in VARIANTS.items()},
           oob_write_past_pad=("pad", ["primitives/pad/*", "memory/pad/*"]))
CLASS = dict({n: f"Broken_{n}" for n in VARIANTS}, oob_write_past_pad="BrokenOOBWrite")


def run_suite(backend_spec, patterns, report):
    import glow_conformance
    args = ["--backend", backend_spec, "-q", "-p", "no:randomly", "--conformance-report", str(report)]
    for p in patterns:
        args += ["--case", p]
    rc = glow_conformance.main(args)
    with open(str(report)[:-5] + ".json") as f:
        return rc, json.load(f)


def test_at_least_twenty_variants():
    assert len(ALL) >= 20


@pytest.mark.parametrize("variant", sorted(ALL))
def test_broken_variant_is_caught(variant, tmp_path):
    prim, patterns = ALL[variant]
    rc, data = run_suite(f"tests.test_conformance_power:{CLASS[variant]}", patterns, tmp_path / "r.html")
    failed = [c for c in data["cases"] if c["outcome"] == "fail"]
    assert rc == 1 and failed, f"{variant}: the suite did not catch the broken {prim} ({data['counts']})"
    named = sorted({c["subject"] for c in failed})
    assert named == [prim], f"{variant}: the failures name {named}"
    assert all(prim in c["detail"] and "rerun: glowc conformance" in c["detail"] for c in failed)


def test_oob_write_is_located_by_the_memory_tier(tmp_path):
    rc, data = run_suite("tests.test_conformance_power:BrokenOOBWrite", ["memory/pad/*"], tmp_path / "r.html")
    failed = [c for c in data["cases"] if c["outcome"] == "fail"]
    assert failed and all("out-of-bounds write" in c["detail"] and "written by pad" in c["detail"] for c in failed)


def test_the_real_interpreter_passes_those_rows(tmp_path):
    pats = sorted({p for _, pats in ALL.values() for p in pats})[:6]
    rc, data = run_suite("interpreter", pats, tmp_path / "r.html")
    assert rc == 0 and data["counts"]["fail"] == 0 and data["counts"]["pass"] > 0
