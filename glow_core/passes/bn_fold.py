"""Fold an inference BatchNormalization into the Conv that feeds it."""
from __future__ import annotations

import numpy as np

from ..graph import Function


def fold_batchnorm(fn: Function) -> int:
    """Conv(x, W, b) -> BatchNormalization(scale, B, mean, var) becomes Conv(x, W', b') when all
    parameters are constants and the conv result has no other user."""
    uses, present, dead = None, None, set()
    for bn in fn.nodes:
        if bn.op != "BatchNormalization" or len(bn.outputs) != 1 or bn.attrs.get("training_mode"):
            continue
        if uses is None:  # built at the first BatchNormalization
            uses, present = fn.use_lists(), set(fn.nodes)
        x = bn.inputs[0]
        conv = x.producer
        if conv is None or conv.op != "Conv" or conv not in present or uses.is_output(x):
            continue
        if uses.num_users(x) != 1 or not all(v.is_const for v in bn.inputs[1:5]):
            continue
        w = conv.inputs[1]
        if not w.is_const or (len(conv.inputs) > 2 and conv.inputs[2] is not None and not conv.inputs[2].is_const):
            continue
        if not x.dtype.is_float:
            continue
        scale, bias, mean, var = (v.const.astype(np.float64) for v in bn.inputs[1:5])
        eps = float(bn.attrs.get("epsilon", 1e-5))
        k = scale / np.sqrt(var + eps)
        wc = w.const.astype(np.float64)
        b0 = conv.inputs[2].const.astype(np.float64) if len(conv.inputs) > 2 and conv.inputs[2] is not None \
            else np.zeros(wc.shape[0])
        w2 = (wc * k.reshape((-1,) + (1,) * (wc.ndim - 1))).astype(w.const.dtype)
        b2 = ((b0 - mean) * k + bias).astype(w.const.dtype)
        uses.set_inputs(conv, [conv.inputs[0], fn.constant(w2, w.name + "_bn"),
                               fn.constant(b2, conv.name + "_bias_bn")])
        uses.discard(bn)
        uses.replace(bn.outputs[0], conv.outputs[0])
        dead.add(bn)
    return fn.remove_nodes(dead)
