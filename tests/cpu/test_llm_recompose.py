"""torch's decompositions of RMS normalization and rotary embeddings reach the CPU backend's whole-op kernels
(kernels/llm.py) through graph pass recompose-llm, and match the interpreter on the decomposed graph (the
specification) within the conformance tolerance; a decomposition the pass must leave alone stays elementwise."""
from __future__ import annotations

import numpy as np
import pytest

import glow_core
from glow_conformance.checker import compare
from glow_conformance.tier_passes import RECOMPOSE_MODELS
from tests.core.test_recompose import feeds_of


@pytest.mark.parametrize("name", list(RECOMPOSE_MODELS))
def test_decomposition_runs_whole(name):
    m = RECOMPOSE_MODELS[name]()
    feeds = feeds_of(m, 3)
    want = glow_core.compile(m, "interpreter").run(feeds)
    cm = glow_core.compile(m, "cpu", num_threads=1)
    code = [i.op for i in cm.last.ir.code]
    whole = "RMSNormalization" if name.startswith("rms") else "RotaryEmbedding"
    float32 = "float16" not in name  # the kernels run float32; a float16 norm is lowered after recomposition
    assert (whole in code) == (float32 and "unequal" not in name), code
    got = cm.run(feeds)
    for k, w in want.items():
        compare(np.asarray(got[k]), np.asarray(w), "model", f"{name}: cpu against the interpreter", "", name=k)
