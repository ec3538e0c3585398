"""The conformance suite's power: deliberately broken backends must be caught, naming what is broken.

- Interpreter variants: the reference interpreter with one realistic bug in one kernel (``VARIANTS``), judged
  against the suite's independent oracles.
- CPU variants: the CPU backend rebuilt from a copy of its package with a one-token change in one template or
  generator table (``CPU_VARIANTS``: bounds, strides, offsets, accumulators, NaN handling, thread
  partitioning), never touching the repository's files. Each runs only its relevant cases, compiled into one
  cache shared by the variants. Among them, those the first suite missed: a max-reduction dropping NaN,
  float64 reduced and multiplied in float32, bfloat16 rounding by truncation (1 ULP: inside the old
  allowance), a kernel writing past its buffer, one that never returns, the im2col loop running one channel
  too far.
- Backends breaking the gate: one refusing everything (fails ``--require-profile fp32-core``), one claiming
  conv and refusing it while compiling (its conv cases fail), one whose float16 sigmoid is off by up to 5e-5
  (what the old absolute allowance let through).
"""
from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
import time

import numpy as np
import pytest

from glow_core.errors import UnsupportedOpError
from glow_core.ops.registry import PRIMITIVES
from glow_interpreter.backend import InterpreterBackend, InterpreterFunction

REAL = {name: p.kernel for name, p in PRIMITIVES.items()}


# -- interpreter variants -------------------------------------------------------------------------------------
def _pad_off_by_one(x, w, bias, strides, dilations, pads, group=1):
    n = len(pads) // 2
    if pads[n - 1] or pads[-1]:  # the last spatial dim's begin pad is taken one too large (end one too small)
        pads = list(pads)
        pads[n - 1] += 1
        pads[-1] = max(pads[-1] - 1, 0)
    return REAL["conv"](x, w, bias, strides, dilations, pads, group)


def _reduce_wrong_axis(x, axes, keepdims=1):
    r = x.ndim
    return REAL["reduce_max"](x, sorted(r - 1 - a for a in axes) if r > 1 else axes, keepdims)


def _round_half_away(x):
    return np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5)).astype(x.dtype)


def _matmul_transposed_b(a, b):
    return REAL["matmul"](a, np.swapaxes(b, -1, -2).reshape(b.shape))  # B read in column-major order


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


SIGMOID_GRID = 1e-4  # a float16 sigmoid accurate to 5e-5 absolute: 10 % off near 5e-4


def _sigmoid_absolute_grid(x):
    """sigmoid rounded to a grid of 1e-4 (the float16 cases run: their kernel gets float32 operands)."""
    s = REAL["sigmoid"](x)
    return (np.round(s.astype(np.float64) / SIGMOID_GRID) * SIGMOID_GRID).astype(x.dtype)


# name -> (primitive patched, kernel, --case patterns)
VARIANTS = {
    "conv_pad_off_by_one": ("conv", _pad_off_by_one, ["primitives/conv/float32/*"]),
    "reduce_max_wrong_axis": ("reduce_max", _reduce_wrong_axis, ["primitives/reduce_max/float32/*"]),
    "sub_sign_error": ("sub", _sub_sign, ["primitives/sub/*"]),
    "round_half_away": ("round", _round_half_away, ["primitives/round/*"]),
    "matmul_transposed_b": ("matmul", _matmul_transposed_b, ["primitives/matmul/float32/*"]),
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
    "argmax_ties_last": ("argmax", _argmax_last, ["primitives/argmax/float32/*"]),
    "scatter_add_loses_duplicates": ("scatter_nd", _scatter_lost_duplicates, ["primitives/scatter_nd/*"]),
    "avg_pool_ignores_count_include_pad": ("avg_pool", _avg_pool_ignores_cip, ["primitives/avg_pool/float32/*"]),
    "bitcast_byteswapped": ("bitcast", _bitcast_byteswap, ["primitives/bitcast/*"]),
    "reduce_sum_float16_accumulator": ("reduce_sum", _reduce_sum_f16_accumulator,
                                       ["primitives/reduce_sum/float32/*"]),
    "select_inverted": ("select", _select_inverted, ["primitives/select/*"]),
    "abs_int_saturates": ("abs", _abs_int_saturates, ["primitives/abs/*"]),
    "max_pool_pads_with_zero": ("max_pool", _max_pool_pads_zero, ["primitives/max_pool/float32/*"]),
    "float16_sigmoid_within_old_absolute_allowance": ("sigmoid", _sigmoid_absolute_grid,
                                                      ["primitives/sigmoid/float16/*"]),
}


class _Broken(InterpreterBackend):
    """The interpreter with ``patch`` (primitive -> kernel) in place of the reference kernels."""

    patch: dict = {}

    def compile(self, function, options):
        return InterpreterFunction(function, kernels=self.patch)


for _name, (_prim, _fn, _pats) in VARIANTS.items():
    globals()[f"Broken_{_name}"] = type(f"Broken_{_name}", (_Broken,), {"patch": {_prim: _fn}})


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


class RefusesEverything(InterpreterBackend):
    """A backend claiming nothing: every case is skipped as refused, so no profile can pass."""

    def is_op_supported(self, node_info):
        return False


class ClaimsConvThenRefuses(InterpreterBackend):
    """is_op_supported says yes to conv, compile raises UnsupportedOpError for it."""

    def compile(self, function, options):
        if any(i.op == "conv" for i in function.code):
            raise UnsupportedOpError("conv is not implemented yet on this device")
        return super().compile(function, options)


def run_suite(backend_spec, patterns, report, extra=()):
    import glow_conformance
    args = ["--backend", backend_spec, "-q", "-p", "no:randomly", "--conformance-report", str(report)] + list(extra)
    for p in patterns:
        args += ["--case", p]
    rc = glow_conformance.main(args)
    with open(str(report)[:-5] + ".json") as f:
        return rc, json.load(f)


def _failed(data):
    return [c for c in data["cases"] if c["outcome"] == "fail"]


@pytest.mark.parametrize("variant", sorted(VARIANTS) + ["oob_write_past_pad"])
def test_broken_interpreter_is_caught(variant, tmp_path):
    prim, _, patterns = VARIANTS.get(variant, ("pad", None, ["primitives/pad/*", "memory/pad/*"]))
    spec = f"tests.conformance.test_power:{'BrokenOOBWrite' if variant == 'oob_write_past_pad' else 'Broken_' + variant}"
    rc, data = run_suite(spec, patterns, tmp_path / "r.html")
    failed = _failed(data)
    assert rc == 1 and failed, f"{variant}: the suite did not catch the broken {prim} ({data['counts']})"
    assert sorted({c["subject"] for c in failed}) == [prim], f"{variant}: the failures name others"
    assert all(prim in c["detail"] and "rerun: glowc conformance" in c["detail"] for c in failed)


def test_the_old_float16_allowance_would_have_passed_the_sigmoid_variant():
    """Every error of the variant is within the old rule (1 ULP, or 6.1e-5 absolute) and it is caught above."""
    from glow_conformance.checker import ulp_distance
    x = np.linspace(-10, 10, 4001).astype(np.float16)
    want = REAL["sigmoid"](x.astype(np.float32)).astype(np.float16)
    got = _sigmoid_absolute_grid(x.astype(np.float32)).astype(np.float16)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert ((ulp_distance(got, want) <= 1) | (err <= float(np.finfo(np.float16).tiny))).all()
    near = (want > 4e-4) & (want < 6e-4)
    assert (err[near] / want[near].astype(np.float64)).max() > 0.05


def test_oob_write_is_located_by_the_memory_tier(tmp_path):
    rc, data = run_suite("tests.conformance.test_power:BrokenOOBWrite", ["memory/pad/*"], tmp_path / "r.html")
    failed = _failed(data)
    assert failed and all("out-of-bounds write" in c["detail"] and "written by pad" in c["detail"]
                          and c["stage"] == "run" for c in failed)


def test_the_real_interpreter_passes_those_rows(tmp_path):
    pats = sorted({p for _, _, pats in VARIANTS.values() for p in pats})[:6]
    rc, data = run_suite("interpreter", pats, tmp_path / "r.html")
    assert rc == 0 and data["counts"]["fail"] == 0 and data["counts"]["pass"] > 0


def test_a_backend_refusing_everything_fails_the_required_profile(tmp_path):
    rc, data = run_suite("tests.conformance.test_power:RefusesEverything", [], tmp_path / "r.html",
                         ["--require-profile", "fp32-core", "-n", "2"])
    assert rc == 1 and not [c for c in data["cases"] if c["outcome"] == "pass" and c["tier"] != "negative"]
    assert data["profiles"]["fp32-core"]["verdict"] == "fail"  # no passing case: fail, never partial
    assert data["required"]["fp32-core"][0] == "fail" and "no case" in data["required"]["fp32-core"][1]
    assert data["skips"]["refused"] > 5000 and not data["filter"]


def test_a_run_in_which_everything_was_skipped_fails(tmp_path):
    """Without --require-profile too: nothing checked is not a pass (the negative tier's refusals aside)."""
    rc, data = run_suite("tests.conformance.test_power:RefusesEverything",
                         ["primitives/add/float32/*", "negative/add/*"], tmp_path / "r.html")
    assert data["counts"]["fail"] == 0 and data["counts"]["skip"] > 0 and data["profiles"] == {}
    assert rc == 1 and "no case that checks answers passed" in data["nothing_verified"]
    rc, data = run_suite("interpreter", ["primitives/add/float32/*"], tmp_path / "r2.html")
    assert rc == 0 and data["nothing_verified"] is None


def test_a_backend_claiming_conv_then_refusing_it_fails_the_conv_cases(tmp_path):
    rc, data = run_suite("tests.conformance.test_power:ClaimsConvThenRefuses",
                         ["primitives/conv/float32/2d_*", "primitives/add/float32/*"], tmp_path / "r.html")
    conv = [c for c in data["cases"] if c["subject"] == "conv"]
    assert rc == 1 and conv and all(c["outcome"] == "fail" and "claimed, then refused" in c["detail"] for c in conv)
    assert all(c["outcome"] == "pass" for c in data["cases"] if c["subject"] == "add")


# -- ONNX ops judged per element: one small element off by half the old tensor-relative allowance -----------------
PERTURB = 8  # in units of eps(type) * max|output|: half the old "op" class allowance (tensor=16)


def _perturb_smallest(out):
    """``out`` with its smallest nonzero finite element moved by PERTURB * eps * max|out| (away from zero)."""
    out = np.array(out)
    v = out.reshape(-1).astype(np.float64)
    fin = np.isfinite(v) & (v != 0)
    if out.dtype.kind != "f" or not fin.any():
        return out
    i = int(np.flatnonzero(fin)[np.argmin(np.abs(v[fin]))])
    delta = PERTURB * float(np.finfo(out.dtype).eps) * float(np.abs(v[np.isfinite(v)]).max())
    out.reshape(-1)[i] = v[i] + np.copysign(delta, v[i])
    return out


class _PerturbedFunction(InterpreterFunction):
    def execute(self, inputs):
        return {k: _perturb_smallest(v) for k, v in super().execute(inputs).items()}


class PerturbsOneSmallElement(InterpreterBackend):
    """Every float output right but for its smallest element, off by half what the old "op" class allowed."""

    def compile(self, function, options):
        return _PerturbedFunction(function)


#: ops of the per-element classes that replaced "op" whose outputs have small elements (op-exp, op-cancel)
PER_ELEMENT_OPS = ("Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization", "InstanceNormalization")


def test_the_old_tensor_relative_class_let_a_small_element_through():
    """The perturbation is inside the old "op" class and far off relatively: softmax over 17 elements."""
    from glow_conformance.cases import CaseFailure
    from glow_conformance.checker import compare
    x = np.random.default_rng(0).uniform(-5, 5, (3, 4, 17))
    e = np.exp(x - x.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)).astype(np.float32)
    got = _perturb_smallest(want)
    i = np.flatnonzero(got != want)
    assert i.size == 1 and abs(got.reshape(-1)[i[0]] / want.reshape(-1)[i[0]] - 1) > 0.01
    compare(got, want, "op", "softmax", "-")
    with pytest.raises(CaseFailure, match="1 of 204 elements out of tolerance"):
        compare(got, want, "op-exp", "softmax", "-", n=204)


def test_a_small_element_far_off_fails_every_per_element_op(tmp_path):
    from glow_conformance.tier_ops import op_class
    assert {op_class(op) for op in PER_ELEMENT_OPS} == {"op-exp", "op-cancel"}
    rc, data = run_suite("tests.conformance.test_power:PerturbsOneSmallElement",
                         [f"ops/{op}/float32/*" for op in PER_ELEMENT_OPS], tmp_path / "r.html")
    by_op = {}
    for c in data["cases"]:
        by_op.setdefault(c["subject"], []).append(c)
    assert rc == 1 and sorted(by_op) == sorted(PER_ELEMENT_OPS)
    missed = [c["id"] for c in data["cases"] if c["outcome"] != "fail"]
    assert not missed, f"a small element off by {PERTURB} eps * max|output| passed: {missed}"
    assert all("out of tolerance (class op-" in c["detail"] for c in data["cases"])


# -- CPU variants: one-token changes in a copy of the CPU backend's package ---------------------------------------
# name -> (file in the package, text, replacement, --case patterns, primitives the failures must name)
CPU_VARIANTS = {
    "conv_im2col_channel_overrun": ("templates/conv.c.j2", "c < {{ cg }}; ++c", "c <= {{ cg }}; ++c",
                                    ["primitives/conv/float32/2d_pad1", "primitives/conv/float32/2d_group2",
                                     "primitives/conv/int8/2d_pad1"], {"conv"}),
    "conv_pad_sign": ("kernels/window.py", "k{i} * {d['dil']} - {d['p']})", "k{i} * {d['dil']} + {d['p']})",
                      ["primitives/conv/float32/2d_pad1"], {"conv"}),
    "conv_input_bound": ("templates/conv.c.j2", "o{{ loop.index0 }} < hi{{ loop.index0 }}",
                         "o{{ loop.index0 }} <= hi{{ loop.index0 }}", ["primitives/conv/float32/2d_pad1"], {"conv"}),
    "conv_group_weight_offset": ("templates/conv.c.j2", "wc + g * {{ fg * ck }}", "wc + g * {{ ck }}",
                                 ["primitives/conv/float32/2d_group2"], {"conv"}),
    "depthwise_upper_bound": ("templates/depthwise.c.j2", "< hi{{ loop.index0 }}[k{{ loop.index0 }}]",
                              "<= hi{{ loop.index0 }}[k{{ loop.index0 }}]", ["primitives/conv/float32/2d_depthwise"],
                              {"conv"}),
    "depthwise_channel_stride": ("templates/depthwise.c.j2", "(nc % {{ c }}) * {{ kk }}", "(nc % {{ c }})",
                                 ["primitives/conv/float32/2d_depthwise"], {"conv"}),
    "depthwise_threads_share_planes": ("templates/depthwise.c.j2", "#pragma omp parallel for", "#pragma omp parallel",
                                       ["primitives/conv/float32/2d_parallel_depthwise/t2"], {"conv"}),
    "winograd_specials_not_recomputed": ("templates/conv_winograd.c.j2", "if (z == z) break;", "break;",
                                         ["primitives/conv/float32/specials/const_winograd*"], {"conv"}),
    "gemm_partial_tile_as_full": ("templates/gemm.c.j2", "mr == MR && nr == NR", "mr == MR || nr == NR",
                                  ["primitives/matmul/float32/gemm/7x*"], {"matmul"}),
    "gemm_accumulates_first_block": ("templates/gemm.c.j2", "pc > 0, last", "pc >= 0, last",
                                     ["primitives/matmul/float32/gemm/10x*"], {"matmul"}),
    "gemm_a_panel_offset": ("templates/gemm.c.j2", "(kc, Ap + ir * kc, bt,", "(kc, Ap + ir * KC, bt,",
                            ["primitives/matmul/float32/gemm/145x*"], {"matmul"}),
    "gemm_threads_share_panels": ("templates/gemm.c.j2", "#pragma omp for schedule(static)\n        for (int64_t t",
                                  "\n        for (int64_t t", ["primitives/matmul/float32/gemm/*/t2"], {"matmul"}),
    "gemm_float64_in_float32": ("templates/gemm.c.j2", "{{ t }} a = Ap", "float a = Ap",
                                ["primitives/matmul/float64/gemm/10x*"], {"matmul"}),
    "matmul_batch_offset": ("templates/matmul.c.j2", "glow_gemm_{{ gemm }}({{ m }}, {{ n }}, {{ k }}, "
                            "a + bt * {{ m * k }}", "glow_gemm_{{ gemm }}({{ m }}, {{ n }}, {{ k }}, a + bt * {{ m }}",
                            ["primitives/matmul/float32/3x40x50@3x50x33"], {"matmul"}),
    "matmul_row_not_reset": ("templates/matmul.c.j2", "row[j] = 0;", "row[j] = 1;",
                             ["primitives/matmul/int32/3x5@5x7"], {"matmul"}),
    "reduce_float64_in_float32": ("templates/reduce.c.j2", "{{ acc_t }} acc = {{ init }};",
                                  "float acc = {{ init }};", ["primitives/reduce_sum/float64/3x4x5x6/axes0123*"],
                                  {"reduce_sum"}),
    "reduce_max_drops_nan": ("kernels/ew.py", "acc || v != v) acc = v", "acc) acc = v",
                             ["primitives/reduce_max/float32/specials/*"], {"reduce_max"}),
    "arg_select_last_ignored": ("templates/arg.c.j2", "int64_t bi = {{ first }};", "int64_t bi = 0;",
                                ["primitives/argmax/float32/3x4x5x6/axis1/kd1/last1"], {"argmax"}),
    "pool_window_bound": ("templates/pool.c.j2",  # the plain (NCHW) path's window
                          "i{{ loop.index0 }} >= {{ d.size }}) continue;\n{% endfor %}        {{ acc_t }} v",
                          "i{{ loop.index0 }} > {{ d.size }}) continue;\n{% endfor %}        {{ acc_t }} v",
                          ["primitives/max_pool/float32/2d_k3s2_pad1"], {"max_pool"}),
    "pool_count_not_counted": ("templates/pool.c.j2", "        ++cnt;\n{% for d in dims %}      }\n{% endfor %}      "
                               "(void)cnt;\n      op[", "        cnt;\n{% for d in dims %}      }\n{% endfor %}      "
                               "(void)cnt;\n      op[", ["primitives/avg_pool/float32/2d_k3s2_pad1/cip0"],
                               {"avg_pool"}),
    "strided_input_stride": ("templates/strided.c.j2", "io += istr[d]; oo", "io += ostr[d]; oo",
                             ["primitives/transpose/float32/3d_201"], {"transpose"}),
    "pad_fill_ignored": ("templates/strided.c.j2", "out[i] = {{ fill }};", "out[i] = 0;",
                         ["primitives/pad/float32/1d_value"], {"pad"}),
    "gather_bound_off_by_one": ("templates/gather.c.j2", "idx[i] >= {{ dim }}", "idx[i] > {{ dim }}",
                                ["negative/gather/float32/runtime_index_eq_dim"], {"gather"}),
    "gather_nd_negative_unchecked": ("templates/gather_nd.c.j2", "idx[r * {{ k }} + j] < 0 ||",
                                     "idx[r * {{ k }} + j] < -1 ||", ["negative/gather_nd/float32/runtime_negative*"],
                                     {"gather_nd"}),
    "scatter_nd_input_not_copied": ("templates/scatter_nd.c.j2", "memmove(out, x, {{ nbytes }})",
                                    "memmove(out, x, 0)", ["primitives/scatter_nd/float32/rows/none"], {"scatter_nd"}),
    "bfloat16_rounding_truncates": ("templates/glow_prelude.h.j2", "u += 0x7fffu +", "u += 0x0u +",
                                    ["primitives/add/bfloat16/2x3x4x17", "primitives/mul/bfloat16/2x3x4x17"],
                                    {"add", "mul"}),
    "elementwise_writes_past_its_buffer": ("templates/elementwise.c.j2", "i < {{ n }}; ++i) {",
                                           "i <= {{ n }}; ++i) {", ["primitives/add/float32/17"], {"add"}),
    "elementwise_never_returns": ("templates/elementwise.c.j2", "i < {{ n }}; ++i) {", "i < {{ n }}; i) {",
                                  ["primitives/add/float32/17", "primitives/sub/float32/17"], {"add", "sub"}),
}
CASE_TIMEOUT = 5.0


def cpu_variant(name, root):
    """The CPU backend built from a copy of its package under ``root`` with variant ``name`` applied."""
    import glow_cpu
    path, old, new = CPU_VARIANTS[name][:3]
    pkg = f"glow_cpu_variant_{name}"
    dst = os.path.join(root, pkg)
    if not os.path.isdir(dst):
        shutil.copytree(os.path.dirname(glow_cpu.__file__), dst, ignore=shutil.ignore_patterns("__pycache__"))
        with open(os.path.join(dst, path)) as f:
            text = f.read()
        if text.count(old) != 1:
            raise AssertionError(f"CPU variant {name}: {old!r} occurs {text.count(old)} times in {path} (expected "
                                 f"once): update the variant to the template")
        with open(os.path.join(dst, path), "w") as f:
            f.write(text.replace(old, new))
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(f"{pkg}.backend").CPUBackend()


def _factory(name):
    def make():
        return cpu_variant(name, os.environ["GLOW_TEST_CPU_VARIANTS"])
    return make


for _name in CPU_VARIANTS:
    globals()[f"cpu_{_name}"] = _factory(_name)


@pytest.fixture(scope="session")
def variant_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cpu_variants"))


@pytest.fixture
def variant_env(variant_root, monkeypatch):
    monkeypatch.setenv("GLOW_TEST_CPU_VARIANTS", variant_root)
    monkeypatch.setenv("GLOW_CACHE_DIR", os.path.join(variant_root, "cache"))  # shared by the variants
    return variant_root


def test_at_least_twenty_cpu_variants():
    assert len(CPU_VARIANTS) >= 20 and len(VARIANTS) >= 20


@pytest.mark.parametrize("variant", sorted(CPU_VARIANTS))
def test_broken_cpu_template_is_caught(variant, variant_env, tmp_path):
    patterns, prims = CPU_VARIANTS[variant][3:]
    t0 = time.monotonic()
    rc, data = run_suite(f"tests.conformance.test_power:cpu_{variant}", patterns, tmp_path / "r.html",
                         ["--case-timeout", str(CASE_TIMEOUT), "--no-group-compile"])
    failed = _failed(data)
    assert rc == 1 and failed, f"{variant}: not caught ({data['counts']})"
    assert {c["subject"] for c in failed} <= prims and all(
        c["subject"] in c["detail"] and "rerun: glowc conformance" in c["detail"] for c in failed), \
        f"{variant}: failures {[(c['id'], c['detail'][:300]) for c in failed]}"
    if variant == "conv_im2col_channel_overrun":  # the im2col buffer ends the @scratch operand: the write past
        # it hits the guards or leaves the region (heap corruption): each case fails, the run reports
        assert len(failed) == 3 and all("out-of-bounds write" in c["detail"] or "the process running the case died"
                                        in c["detail"] for c in failed), [c["detail"][:200] for c in failed]
    if variant == "elementwise_writes_past_its_buffer":
        assert "out-of-bounds write" in failed[0]["detail"] and "written by add" in failed[0]["detail"]
    if variant == "elementwise_never_returns":  # each case killed at its limit; the run reaches its report
        assert {c["id"] for c in failed} == {"primitives/add/float32/17", "primitives/sub/float32/17"}
        assert all("did not finish in time" in c["detail"] and "killed after 5 s" in c["detail"] for c in failed)
        assert time.monotonic() - t0 < 4 * CASE_TIMEOUT + 120


def test_the_real_cpu_backend_passes_the_variants_cases(tmp_path):
    pats = sorted({p for v in CPU_VARIANTS.values() for p in v[3]})
    rc, data = run_suite("cpu", pats, tmp_path / "r.html", ["--case-timeout", str(CASE_TIMEOUT)])
    assert rc == 0 and data["counts"]["fail"] == 0 and data["counts"]["pass"] >= len(pats)
