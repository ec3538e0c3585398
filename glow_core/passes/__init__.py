"""Graph passes. Each takes a Function, rewrites it in place and returns the number of changes.

``PASSES`` maps a name to its pass; a backend's ``optimization_pipeline()``
lists the names to run (``DEFAULT_PIPELINE`` by default).
"""
from __future__ import annotations

from ..errors import GlowError
from .basic import constant_fold, cse, dce
from .bn_fold import fold_batchnorm
from .noop import remove_noops
from .recompose import recompose_llm
from .rnn import rnn_directions

PASSES = {
    "dce": dce,
    "cse": cse,
    "constant-fold": constant_fold,
    "fold-batchnorm": fold_batchnorm,
    "remove-noops": remove_noops,
    "rnn-directions": rnn_directions,
    "recompose-llm": recompose_llm,
}

DEFAULT_PIPELINE = ("dce", "rnn-directions", "fold-batchnorm", "remove-noops", "cse", "constant-fold", "dce")
#: The default pipeline with the language-model recompositions (``recompose.py``): for a backend that keeps
#: RMSNormalization and RotaryEmbedding whole.
LLM_PIPELINE = DEFAULT_PIPELINE[:5] + ("recompose-llm",) + DEFAULT_PIPELINE[5:]
#: The cleanup after lowering (and after the quantization passes).
POST_LOWERING_PIPELINE = ("remove-noops", "cse", "constant-fold", "dce")


def run_pipeline(fn, names, max_rounds: int = 4) -> dict[str, int]:
    """Run the named passes in order, repeating while anything changes (at most ``max_rounds``)."""
    counts = {n: 0 for n in names}
    for _ in range(max_rounds):
        changed = 0
        for n in names:
            if n not in PASSES:
                raise GlowError(f"unknown pass '{n}'; accepted: {', '.join(PASSES)}")
            c = PASSES[n](fn)
            counts[n] += c
            changed += c
        if not changed:
            break
    return counts
