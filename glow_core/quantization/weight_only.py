"""Weight-only block quantization of an ONNX model: MatMul (and Gemm) with constant weights -> com.microsoft
MatMulNBits, the format onnxruntime runs and Glow Kit imports (``glow_core/ops/onnx_ops/onnxruntime_ops.py``).

A weight W [K, N] is quantized per block of ``block_size`` consecutive rows of each column (along K, the
reduction axis; the last block zero-padded), one scale per block:

- symmetric: the block's element of largest magnitude, v, sets scale = v / -2^(bits-1), so that v is q = 0 and
  the 2^bits levels are all used (onnxruntime's MLAS quantizer does the same: the scale may be negative);
  q = clamp(round(w / scale) + 2^(bits-1), 0, 2^bits - 1); no zero-point input (MatMulNBits' default zero
  point is 2^(bits-1));
- asymmetric: the block's range [min(w, 0), max(w, 0)] over 2^bits - 1 steps, zero point
  round(-min / scale), q = clamp(round(w / scale) + zero point, 0, 2^bits - 1); zero points packed like B.

q is stored in B [N, k_blocks, block_size * bits / 8], the first of each byte's values in its low bits; scales
[N, k_blocks] in the weight's float type. Rounding is to nearest, ties to even (numpy's). A block of zeros gets
scale 1 (it dequantizes to zeros either way).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import GlowError
from ..importer.onnx_import import load_model, tensor_to_array

MS = "com.microsoft"
BITS = (4, 8)
FLOAT_WEIGHTS = (np.float32, np.float16)


def quantize_blocks(w: np.ndarray, bits: int, block_size: int, symmetric: bool):
    """W [K, N] (float) -> (packed uint8 [N, k_blocks, blob], scales [N, k_blocks] of W's dtype, packed uint8
    zero points [N, ceil(k_blocks * bits / 8)] or None when symmetric). See the module's doc."""
    k, n = w.shape
    kb = -(-k // block_size)
    wt = np.zeros((n, kb * block_size), np.float32)
    wt[:, :k] = w.T.astype(np.float32)
    blocks = wt.reshape(n, kb, block_size)
    top = (1 << bits) - 1
    if symmetric:
        half = 1 << (bits - 1)
        far = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=2)[..., None], axis=2)[..., 0]
        scale = far / -half
        scale = np.where(scale == 0, 1, scale).astype(w.dtype)
        q = np.rint(blocks / scale.astype(np.float32)[..., None]) + half
        zp = None
    else:
        lo = np.minimum(blocks.min(axis=2), 0)
        hi = np.maximum(blocks.max(axis=2), 0)
        scale = (hi - lo) / top
        scale = np.where(scale == 0, 1, scale).astype(w.dtype)
        s32 = scale.astype(np.float32)
        z = np.clip(np.rint(-lo / s32), 0, top)
        q = np.rint(blocks / s32[..., None]) + z[..., None]
        zp = pack(z.astype(np.uint8), bits)
    q = np.clip(q, 0, top).astype(np.uint8)
    return pack(q.reshape(n, kb, block_size), bits), scale, zp


def pack(values: np.ndarray, bits: int) -> np.ndarray:
    """uint8 values of ``bits`` bits [..., m] -> bytes [..., ceil(m * bits / 8)], the first value of each byte in
    its low bits (the last byte zero-filled)."""
    per = 8 // bits
    m = values.shape[-1]
    padded = np.zeros(values.shape[:-1] + (-(-m // per) * per,), np.uint8)
    padded[..., :m] = values
    groups = padded.reshape(values.shape[:-1] + (-1, per)).astype(np.uint16)
    out = np.zeros(groups.shape[:-1], np.uint16)
    for i in range(per):
        out |= groups[..., i] << (i * bits)
    return out.astype(np.uint8)


def weight_only(model, bits: int = 4, block_size: int = 32, symmetric: bool = True,
                accuracy_level: int = 0) -> onnx.ModelProto:
    """``model`` (a path, bytes or onnx.ModelProto; not modified) with every MatMul whose second operand is a
    constant 2-D float32/float16 initializer, and every Gemm (alpha 1, transA 0) with such a B (and a bias C of
    N values, beta 1, or none), replaced by a com.microsoft MatMulNBits of that weight quantized to ``bits``
    (4 or 8) in blocks of ``block_size`` (a power of two, at least 16) along K; ``symmetric`` chooses the
    scheme (see the module's doc). Weights still read elsewhere stay too. ``accuracy_level`` (0-4) is written on
    each node: onnxruntime's license to compute in lower precision, 4 quantizing A to int8 per block (the cpu
    backend's int8-activation path from 2 rows; the interpreter ignores it)."""
    if accuracy_level not in range(5):
        raise GlowError(f"weight_only: accuracy_level={accuracy_level!r}; accepted: 0 (unset), 1 (float32), "
                        f"2 (float16), 3 (bfloat16), 4 (int8)")
    if bits not in BITS:
        raise GlowError(f"weight_only: bits={bits!r}; accepted: {', '.join(map(str, BITS))}")
    if not isinstance(block_size, int) or block_size < 16 or block_size & (block_size - 1):
        raise GlowError(f"weight_only: block_size={block_size!r}; accepted: a power of two of at least 16 "
                        f"(32, 64, 128 are usual)")
    m, _ = load_model(model)
    out = onnx.ModelProto()
    out.CopyFrom(m)
    g = out.graph
    inits = {t.name: t for t in g.initializer}
    graph_inputs = {vi.name for vi in g.input}
    readers: dict[str, int] = {}
    for n in g.node:
        for x in n.input:
            readers[x] = readers.get(x, 0) + 1
    nodes, used_names, replaced = [], {n.name for n in g.node} | set(inits), 0

    def fresh(base):
        name, i = base, 0
        while name in used_names:
            i += 1
            name = f"{base}_{i}"
        used_names.add(name)
        return name

    for idx, n in enumerate(g.node):
        plan = _plan(n, inits, graph_inputs)
        if plan is None:
            nodes.append(n)
            continue
        w, bias = plan
        k, nn = w.shape
        packed, scales, zp = quantize_blocks(w, bits, block_size, symmetric)
        base = n.name or f"{n.op_type}_{idx}"
        names = [n.input[0], fresh(f"{base}_Q{bits}"), fresh(f"{base}_scales")]
        new_inits = [numpy_helper.from_array(packed, names[1]), numpy_helper.from_array(scales, names[2])]
        if zp is not None:
            names.append(fresh(f"{base}_zero_points"))
            new_inits.append(numpy_helper.from_array(zp, names[3]))
        if bias is not None:
            names += [""] * (5 - len(names)) + [bias]
        g.initializer.extend(new_inits)
        nodes.append(helper.make_node("MatMulNBits", names, [n.output[0]], name=fresh(f"{base}_MatMulNBits"),
                                      domain=MS, K=k, N=nn, bits=bits, block_size=block_size,
                                      **({"accuracy_level": accuracy_level} if accuracy_level else {})))
        readers[n.input[1]] -= 1
        replaced += 1
    del g.node[:]
    g.node.extend(nodes)
    dead = {t for t, c in readers.items() if c == 0 and t in inits}
    keep = [t for t in g.initializer if t.name not in dead]
    del g.initializer[:]
    g.initializer.extend(keep)
    if replaced and not any(o.domain == MS for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(MS, 1))
    return out


def _plan(n: onnx.NodeProto, inits: dict, graph_inputs: set):
    """(weight [K, N], bias name or None) when node ``n`` becomes a MatMulNBits, else None."""
    if n.domain not in ("", "ai.onnx") or n.op_type not in ("MatMul", "Gemm") or len(n.input) < 2:
        return None
    b = n.input[1]
    if b not in inits or b in graph_inputs:
        return None
    w = tensor_to_array(inits[b])
    if w.ndim != 2 or w.dtype.type not in FLOAT_WEIGHTS:
        return None
    if n.op_type == "MatMul":
        return w, None
    at = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    if at.get("alpha", 1.0) != 1.0 or at.get("transA", 0):
        return None
    if at.get("transB", 0):
        w = w.T
    bias = n.input[2] if len(n.input) > 2 and n.input[2] else None
    if bias is not None:
        c = tensor_to_array(inits[bias]) if bias in inits else None
        if c is None or c.shape != (w.shape[1],) or c.dtype != w.dtype or at.get("beta", 1.0) != 1.0:
            return None
    return w, bias
