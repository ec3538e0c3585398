"""Fold an inference BatchNormalization into the Conv that feeds it."""
from __future__ import annotations

import numpy as np

from ..graph import Function


def fold_batchnorm(fn: Function) -> int:
    """Conv(x, W, b) -> BatchNormalization(scale, B, mean, var) becomes Conv(x, W', b') when all
    parameters are constants and the conv result has no other user."""
    users = fn.users()
    out_ids = {v.id for v in fn.outputs}
    folded = 0
    for bn in list(fn.nodes):
        if bn.op != "BatchNormalization" or len(bn.outputs) != 1 or bn.attrs.get("training_mode"):
            continue
        x = bn.inputs[0]
        conv = x.producer
        if conv is None or conv.op != "Conv" or conv not in fn.nodes or x.id in out_ids:
            continue
        if len(users.get(x.id, [])) != 1 or not all(v.is_const for v in bn.inputs[1:5]):
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
        conv.inputs = [conv.inputs[0], fn.constant(w2, w.name + "_bn"), fn.constant(b2, conv.name + "_bias_bn")]
        fn.replace_uses(bn.outputs[0], conv.outputs[0])
        fn.nodes.remove(bn)
        folded += 1
    return folded
