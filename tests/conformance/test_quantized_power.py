"""The quantized-int8 profile's power: interpreters with one realistic integer-arithmetic bug are caught.

Each variant is the reference interpreter with one quantized primitive's kernel replaced by a plausible wrong
implementation; the suite (in process, ``--case`` selecting that primitive's rows) must fail cases of that
primitive and only of it. The variants are interpreter subclasses, so they are compared with the suite's
independent integer oracles, not with their own kernels.
"""
from __future__ import annotations

import numpy as np
import pytest

from glow_core.ops.primitives import quantized as Q
from glow_core.ops.registry import PRIMITIVES
from tests.conformance.test_power import _Broken, run_suite  # the broken-interpreter machinery, shared

REAL = {name: p.kernel for name, p in PRIMITIVES.items()}


def _requantize_half_away(acc, m, out_offset, out_dtype, clamp_min=None, clamp_max=None):
    y = np.asarray(acc).astype(np.float32) * np.asarray(m, np.float32)
    y = np.where(y >= 0, np.floor(y + 0.5), np.ceil(y - 0.5))
    return Q.saturate(y.astype(np.float64), out_offset, out_dtype, clamp_min, clamp_max)


def _qconv_half_away(*args, **kw):
    real, Q.requantize = Q.requantize, _requantize_half_away
    try:
        return REAL["qconv"](*args, **kw)
    finally:
        Q.requantize = real


def _qconv_first_offset(x, w, bias, w_scale, w_offset, **kw):
    return REAL["qconv"](x, w, bias, w_scale, np.full_like(w_offset, w_offset.reshape(-1)[0]), **kw)


def _quantize_truncates(x, scale, offset, dtype):
    return Q.saturate(np.trunc(x.astype(np.float32) / np.float32(scale)).astype(np.float64), offset, dtype)


def _qavg_pool_full_window(x, kernel, strides, dilations, pads, count_include_pad, **kw):
    return REAL["qavg_pool"](x, kernel, strides, dilations, pads, 1, **kw)


def _lookup_off_by_one(x, table, out_scale, out_offset):
    return table[np.minimum(x.astype(np.int64) - Q.qrange(x.dtype)[0] + 1, 255)]


def _dequantize_last_axis(q, scale, offset, axis):
    return REAL["dequantize"](q, scale, offset, q.ndim - 1 if scale.size == q.shape[-1] else axis)


def _rescale_no_input_offset(x, in_scale, in_offset, out_scale, out_offset, out_dtype):
    return REAL["rescale"](x, in_scale, 0, out_scale, out_offset, out_dtype)


def _qadd_ignores_b_scale(a, b, a_scale, a_offset, b_scale, b_offset, **kw):
    return REAL["qadd"](a, b, a_scale, a_offset, a_scale, b_offset, **kw)


# name -> (primitive patched, kernel, --case patterns)
VARIANTS = {
    "qconv_rounds_half_away": ("qconv", _qconv_half_away, ["primitives/qconv/*"]),
    "qconv_per_tensor_weight_offset": ("qconv", _qconv_first_offset, ["primitives/qconv/*"]),
    "quantize_truncates": ("quantize", _quantize_truncates, ["primitives/quantize/*"]),
    "qavg_pool_divides_by_window": ("qavg_pool", _qavg_pool_full_window, ["primitives/qavg_pool/*"]),
    "lookup_off_by_one": ("lookup", _lookup_off_by_one, ["primitives/lookup/*"]),
    "dequantize_wrong_axis": ("dequantize", _dequantize_last_axis, ["primitives/dequantize/*"]),
    "rescale_forgets_input_offset": ("rescale", _rescale_no_input_offset, ["primitives/rescale/*"]),
    "qadd_uses_a_scale_for_b": ("qadd", _qadd_ignores_b_scale, ["primitives/qadd/*"]),
}


for _name, (_prim, _fn, _pats) in VARIANTS.items():
    globals()[f"Broken_{_name}"] = type(f"Broken_{_name}", (_Broken,), {"patch": {_prim: _fn}})


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_broken_quantized_kernel_is_caught(variant, tmp_path):
    prim, _, patterns = VARIANTS[variant]
    rc, data = run_suite(f"tests.conformance.test_quantized_power:Broken_{variant}", patterns, tmp_path / "r.html")
    failed = [c for c in data["cases"] if c["outcome"] == "fail"]
    assert rc == 1 and failed, f"{variant}: the suite did not catch the broken {prim} ({data['counts']})"
    assert sorted({c["subject"] for c in failed}) == [prim]


def test_the_real_interpreter_passes_the_quantized_profile(tmp_path):
    rc, data = run_suite("interpreter", [f"primitives/{p}/*" for p in ("quantize", "dequantize", "rescale", "qconv",
                                                                       "qmatmul", "qadd", "qmul", "qavg_pool",
                                                                       "lookup")], tmp_path / "r.html")
    assert rc == 0 and data["counts"]["fail"] == 0 and data["counts"]["pass"] >= 200
    q8 = [c for c in data["cases"] if "quantized-int8" in c["profiles"]]  # a filtered run gives no verdicts
    assert len(q8) >= 200 and all(c["outcome"] == "pass" for c in q8)
