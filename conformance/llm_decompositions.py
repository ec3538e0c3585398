"""RMS normalization and rotary embeddings as torch's exporters decompose them (transformers' LlamaRMSNorm and
rotate_half), built with onnx.helper: the forms graph pass ``recompose-llm`` (glow_core.passes.recompose)
rewrites into RMSNormalization and RotaryEmbedding, and forms it must leave alone. Small and seeded; the input
is ``input``, the positions (rotary) ``position_ids``.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

_ONNX = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}


class _G:
    def __init__(self):
        self.nodes, self.inits, self.k = [], [], 0

    def op(self, op, *ins, **attrs):
        self.k += 1
        out = f"{op.lower()}_{self.k}"
        self.nodes.append(helper.make_node(op, list(ins), [out], name=f"{op}_{self.k}", **attrs))
        return out

    def const(self, array, dtype):
        self.k += 1
        name = f"c_{self.k}"
        self.inits.append(numpy_helper.from_array(np.asarray(array, dtype), name))
        return name

    def model(self, name, inputs, y, opset):
        g = helper.make_graph(self.nodes, name, inputs, [helper.make_empty_tensor_value_info(y)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="glow-conformance")
        m.ir_version = min(m.ir_version, 10)
        return m


def rms_norm(opset: int = 18, dtype: str = "float32", cast: bool = True, weight: bool = True, square: str = "pow",
             inv: str = "reciprocal", shape=(2, 5, 48), eps: float = 1e-6, seed: int = 0, swap: bool = False):
    """LlamaRMSNorm: ``xs = Cast(x, float32)`` (``cast``), ``Pow(xs, 2)`` or ``Mul(xs, xs)`` (``square``),
    ReduceMean over the last axis (axes an attribute before opset 18, an input from 18), + eps, Sqrt, then
    ``Reciprocal`` and Mul, ``Div(1, .)`` and Mul (``inv`` "div1") or ``Div(xs, .)`` ("divx"), ``Cast`` back
    (``cast``), times a weight of the last axis' length (``weight``); ``swap`` writes every commutative op's
    operands the other way round."""
    rng = np.random.default_rng(seed)
    g = _G()
    npdt = np.dtype(dtype)
    x = "input"
    xs = g.op("Cast", x, to=TensorProto.FLOAT) if cast else x
    sq = g.op("Pow", xs, g.const(2.0, np.float32)) if square == "pow" else g.op("Mul", xs, xs)
    if opset >= 18:
        var = g.op("ReduceMean", sq, g.const([-1], np.int64), keepdims=1)
    else:
        var = g.op("ReduceMean", sq, axes=[-1], keepdims=1)
    e = g.const(eps, np.float32)
    s = g.op("Sqrt", g.op("Add", e, var) if swap else g.op("Add", var, e))
    if inv == "divx":
        y = g.op("Div", xs, s)
    else:
        r = g.op("Reciprocal", s) if inv == "reciprocal" else g.op("Div", g.const(1.0, np.float32), s)
        y = g.op("Mul", r, xs) if swap else g.op("Mul", xs, r)
    if cast:
        y = g.op("Cast", y, to=_ONNX[dtype])
    if weight:
        w = g.const((1.0 + 0.1 * rng.standard_normal(shape[-1])).astype(npdt), npdt)
        y = g.op("Mul", y, w) if swap else g.op("Mul", w, y)
    inputs = [helper.make_tensor_value_info(x, _ONNX[dtype], list(shape))]
    return g.model("rms_norm", inputs, y, opset)


def rotary(opset: int = 18, batch: int = 1, heads: int = 3, seq: int = 5, dim: int = 16, cos_from: str = "positions",
           pos_batch: int = 1, swap: bool = False, seed: int = 0, rotary_dim: int | None = None):
    """rotate_half RoPE on ``input`` [batch, heads, seq, dim]: ``x * cos + Concat(-x[..., d/2:], x[..., :d/2]) *
    sin``, cos and sin [pos_batch, 1, seq, dim] from ``position_ids`` [pos_batch, seq]: ``cos_from``
    "positions" as transformers computes them (Cos(Concat(f, f)) of positions times inverse frequencies),
    "cache" gathered from constant [max_pos, dim] caches (older transformers), "angles" (must not be
    recomposed: Cos of a [pos_batch, seq, dim] of independent angles, halves unequal); ``swap`` writes every
    commutative op's operands the other way round. ``rotary_dim`` (below ``dim``): Phi's partial rotary, the
    rotation of ``x[..., :rotary_dim]`` (cos and sin of that length) concatenated with ``x[..., rotary_dim:]``."""
    g = _G()
    full = dim
    dim = rotary_dim or dim
    half = dim // 2
    inv_freq = (1.0 / (10000.0 ** (np.arange(0, dim, 2) / dim))).astype(np.float32)
    if cos_from == "cache":
        ang = np.arange(32, dtype=np.float32)[:, None] * inv_freq[None, :]
        emb = np.concatenate([ang, ang], axis=-1)
        ids = g.op("Add", "position_ids", g.const(16, np.int64))  # positions in 0..31 for small ints given
        cos = g.op("Gather", g.const(np.cos(emb), np.float32), ids, axis=0)
        sin = g.op("Gather", g.const(np.sin(emb), np.float32), ids, axis=0)
    else:
        pos = g.op("Unsqueeze", g.op("Cast", "position_ids", to=TensorProto.FLOAT), g.const([-1], np.int64))
        if cos_from == "angles":
            emb = g.op("Mul", pos, g.const(np.random.default_rng(seed).uniform(0.1, 1, dim), np.float32))
        else:
            f = g.op("Mul", pos, g.const(inv_freq, np.float32))
            emb = g.op("Concat", f, f, axis=-1)
        cos, sin = g.op("Cos", emb), g.op("Sin", emb)
    cos = g.op("Unsqueeze", cos, g.const([1], np.int64))
    sin = g.op("Unsqueeze", sin, g.const([1], np.int64))
    x = "input"
    if dim < full:  # Phi: x[..., :rotary_dim] rotated, x[..., rotary_dim:] passed
        x_pass = g.op("Slice", "input", g.const([dim], np.int64), g.const([np.iinfo(np.int64).max], np.int64),
                      g.const([-1], np.int64))
        x = g.op("Slice", "input", g.const([0], np.int64), g.const([dim], np.int64), g.const([3], np.int64))
    x1 = g.op("Slice", x, g.const([0], np.int64), g.const([half], np.int64), g.const([-1], np.int64))
    x2 = g.op("Slice", x, g.const([half], np.int64), g.const([np.iinfo(np.int64).max], np.int64),
              g.const([3], np.int64), g.const([1], np.int64))
    rot = g.op("Concat", g.op("Neg", x2), x1, axis=-1)
    a = g.op("Mul", cos, x) if swap else g.op("Mul", x, cos)
    c = g.op("Mul", sin, rot) if swap else g.op("Mul", rot, sin)
    y = g.op("Add", c, a) if swap else g.op("Add", a, c)
    if dim < full:
        y = g.op("Concat", y, x_pass, axis=-1)
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, heads, seq, full]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, [pos_batch, seq])]
    return g.model("rotary", inputs, y, opset)


def rms_norm_reference(x: np.ndarray, w: np.ndarray | None, eps: float) -> np.ndarray:
    """RMSNormalization over the last axis from its definition, in float64."""
    x = x.astype(np.float64)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w.astype(np.float64)


def rotary_reference(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """rotate_half RoPE from its definition, in float64 (cos, sin broadcast against x [B, H, S, D]; cos and sin
    of a last dim r below D: the first r features rotated, the others passed)."""
    x = x.astype(np.float64)
    r = cos.shape[-1]
    xr, h = x[..., :r], r // 2
    rot = np.concatenate([-xr[..., h:], xr[..., :h]], axis=-1)
    return np.concatenate([xr * cos + rot * sin, x[..., r:]], axis=-1)
