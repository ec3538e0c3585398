"""Whole-op kernels of the CPU backend: the transformer ops it keeps whole (``CPUBackend.should_lower`` False)
instead of running their lowering's chain of primitives, each a single pass per row with nothing materialized
between the steps.

* Softmax (opset >= 13, float32, over the last axis): per row max, exp(x - max) (glow_expf, the exp
  primitive's vector exp), its sum, divide; max and sum in ROW_LANES partial lanes so every pass
  vectorizes (templates/softmax.c.j2).
* LayerNormalization (float32, the Y output only, scale and bias of the normalized dims' shape): per row mean,
  variance of the centred row (both sums in ROW_LANES lanes), (x - mean) * 1/sqrt(var + epsilon) * scale +
  bias (templates/layernorm.c.j2).
* Gelu (float32, erf or tanh form): one loop, the lowering's expression with the erf primitive's glow_erff
  (templates/gelu.c.j2). A Gelu reading a matmul, add or conv (GELU_EPILOGUE_PRODUCERS) is lowered instead:
  its pattern fuses into that kernel's store, the same expression without a pass of its own.
* LSTM and GRU (float32, forward, time-major, default activations, no clip, no peepholes, inputs X, W, R and
  optionally B, initial_h, initial_c and sequence_lens (constant or at run time; past a sequence's length its
  row keeps h and c and writes zeros to Y, the lowering's select, without computing the step): what torch exports, reverse,
  bidirectional and batch-major nodes split into forward ones by glow_core's rnn-directions pass; GRU either
  linear_before_reset): the gate projections of the whole sequence in one GEMM, then per step one fused loop
  (the recurrent projection h R^T and the gates) writing Y, Y_h (and LSTM's Y_c) (templates/rnn.c.j2). No
  per-step instructions, where the lowering unrolls a matmul and a dozen elementwise instructions per step. An
  LSTM, and a GRU with linear_before_reset (PyTorch's), with constant W, R (and B) has its weights packed at
  compile time (``gate_packing``): the input projections run on the packed GEMM (templates/gemm.c.j2), and each
  step is, per block of LSTM_UNITS hidden units, a GEMV over those units' 4 (3) gate rows (vectorized over the
  gate outputs) fused with their cell update; blocks split over the threads (one barrier per step).

Each computes what the lowering computes, in its order and precision (sums in double as ``reduce_sum`` does,
the max's NaN rule of ``reduce_max``); only the C compiler's contraction of multiply-adds and the order of the
double sums (split in lanes) may round differently.
The lowering (the interpreter's reference) stays the specification.
"""
from __future__ import annotations

import math
from math import prod

import numpy as np

from . import llm
from .codegen import ScratchLayout, kernel, kernel_scratch
from .ew import activation, reduce_parts
from .gemm_blocking import gemm_scratch_bytes, pack_b


def _trailing(shape) -> tuple:
    """``shape`` without leading 1s (the broadcast-relevant part of a parameter's shape)."""
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def _f32(v: float) -> str:
    """A C hexadecimal literal of ``v`` rounded to float32 (append ``f``), as the lowering's scalar constants."""
    return float.hex(float(np.float32(v)))


def _softmax_whole(node) -> bool:
    x = node.inputs[0]
    axis = node.attrs.get("axis", -1)
    return node.opset >= 13 and x.rank >= 1 and axis in (-1, x.rank - 1)


def _layernorm_whole(node) -> bool:
    x = node.inputs[0]
    axis = node.attrs.get("axis", -1)
    axis = axis + x.rank if axis < 0 else axis
    if len(node.outputs) != 1 or not 0 <= axis < x.rank or node.attrs.get("stash_type", 1) != 1:
        return False
    norm = _trailing(x.shape[axis:])
    return all(v is None or (v.dtype.name == "float32" and _trailing(v.shape) == norm) for v in node.inputs[1:3])


#: The inputs of the ONNX recurrent ops, in order (GRU stops at initial_h).
RNN_INPUTS = ("x", "w", "r", "b", "sequence_lens", "initial_h", "initial_c", "p")


def _rnn_whole(node) -> bool:
    """Forward, time-major, default activations, no clip, no peepholes; float32 X, W, R and optional B,
    initial_h, initial_c; sequence_lens absent or int32 / int64 [batch], a constant or a run-time input (what
    graph pass rnn-directions leaves of torch's exports, bidirectional and batch-first included)."""
    a = node.attrs
    acts = [str(x.decode() if isinstance(x, bytes) else x).lower() for x in (a.get("activations") or ())]
    default = {"LSTM": ["sigmoid", "tanh", "tanh"], "GRU": ["sigmoid", "tanh"]}[node.op]
    ins = dict(zip(RNN_INPUTS, node.inputs))
    if any(ins.get(k) is None for k in ("x", "w", "r")) or ins.get("p") is not None:
        return False
    lens = ins.get("sequence_lens")
    if lens is not None and (lens.dtype.name not in ("int32", "int64") or ins["x"].rank != 3
                            or tuple(lens.shape) != (ins["x"].shape[1],)):
        return False
    return (len(node.inputs) <= (7 if node.op == "LSTM" else 6)
            and all(v is None or v.dtype.name == "float32" for k, v in ins.items() if k != "sequence_lens")
            and a.get("direction", "forward") == "forward" and a.get("layout", 0) == 0 and a.get("clip") is None
            and not a.get("input_forget") and acts in ([], default)
            and a.get("activation_alpha") is None and a.get("activation_beta") is None)


def rnn_operands(ki) -> dict:
    """The operands of an LSTM / GRU instruction by RNN_INPUTS name (None where the node had no such input: the
    IR's operands skip them, ``_optional`` says which)."""
    optional = list(ki.attrs.get("_optional") or [False] * len(ki.ins))
    optional += [True] * (len(RNN_INPUTS) - len(optional))
    present = iter(ki.ins)
    return {name: (None if missing else next(present)) for name, missing in zip(RNN_INPUTS, optional)}


#: ONNX ops whose lowering ends in a kernel that applies a fused activation in its store (FUSED_ACTIVATIONS):
#: a Gelu reading one of them is lowered, and glow_core.fusion's gelu_erf / gelu_tanh pattern puts it in that
#: kernel's epilogue (one pass less over the tensor: ViT's and ConvNeXt's MatMul -> Add -> Gelu).
GELU_EPILOGUE_PRODUCERS = frozenset({"Add", "MatMul", "Gemm", "Conv", "add", "matmul", "conv"})


def _gelu_whole(node) -> bool:
    producer = node.inputs[0].producer
    return (node.attrs.get("approximate", "none") in ("none", "tanh")
            and (producer is None or producer.op not in GELU_EPILOGUE_PRODUCERS))


#: ONNX op -> whether a node of it (float32 input already checked) is kept whole.
WHOLE = {"Softmax": _softmax_whole, "LayerNormalization": _layernorm_whole, "LSTM": _rnn_whole, "GRU": _rnn_whole,
         "Gelu": _gelu_whole}


def keeps_whole(node) -> bool:
    """Whether the CPU backend runs ``node`` with its whole-op kernel (else it is lowered to primitives)."""
    rule = WHOLE.get(node.op)
    x = node.inputs[0] if node.inputs else None
    return (rule is not None and x is not None and x.dtype.name == "float32" and x.type.numel > 0
            and rule(node))


def supported(node_info) -> bool:
    """``is_op_supported`` for the ops of WHOLE (only nodes ``keeps_whole`` accepted reach the backend whole)."""
    return node_info.op in WHOLE and node_info.in_dtypes[:1] == ("float32",)


def _rows(x, axis: int) -> tuple[int, int]:
    """(rows, row length) of ``x`` normalized over the dims from ``axis`` on."""
    shape = x.type.shape
    axis = axis + len(shape) if axis < 0 else axis
    return prod(shape[:axis]), prod(shape[axis:])


#: Partial maxima and sums per softmax and layernorm row: one AVX-512 vector of floats (two AVX2 ones), so the
#: max and sum passes vectorize; the sums' order changes (in double: far below float32's rounding), the max's
#: result cannot.
ROW_LANES = 16


@kernel("Softmax")
def k_softmax(gen, ki, fn) -> str:
    x, out = ki.ins[0], ki.outs[0]
    rows, n = _rows(x, -1)
    acc_t, init, update = reduce_parts("reduce_max", "float32")
    sum_t, _, _ = reduce_parts("reduce_sum", "float32")
    gen.choice = (f"softmax whole: {rows} rows of {n}, one kernel (max in {ROW_LANES} lanes, vector exp, "
                     f"sum in {ROW_LANES} lanes, divide)")
    return gen.t("softmax.c.j2", fn=fn, x=gen.ptr(x), y=gen.ptr(out), rows=rows, n=n,
                    max_t=acc_t, max_init=init, max_update=update, sum_t=sum_t, lanes=ROW_LANES)


@kernel("LayerNormalization")
def k_layernorm(gen, ki, fn) -> str:
    x, out = ki.ins[0], ki.outs[0]
    rows, n = _rows(x, ki.attrs.get("axis", -1))
    sum_t, _, _ = reduce_parts("reduce_sum", "float32")
    eps = _f32(ki.attrs.get("epsilon", 1e-5))
    gen.choice = (f"layernorm whole: {rows} rows of {n}, one kernel (mean, variance in {ROW_LANES} lanes, "
                     f"normalize-scale-shift)")
    return gen.t("layernorm.c.j2", fn=fn, x=gen.ptr(x), y=gen.ptr(out), scale=gen.ptr(ki.ins[1]),
                    bias=gen.ptr(ki.ins[2]) if len(ki.ins) > 2 else None, rows=rows, n=n, sum_t=sum_t, eps=eps,
                    lanes=ROW_LANES)


_GATES = {"LSTM": 4, "GRU": 3}


@kernel("Gelu")
def k_gelu(gen, ki, fn) -> str:
    """The fused activation's expression (ew.activation: gelu_erf, gelu_tanh, the lowering's order) per element."""
    tanh = ki.attrs.get("approximate", "none") == "tanh"
    gen.choice = f"gelu whole ({'tanh' if tanh else 'erf'} form): one loop"
    params = {"cube": _f32(0.044715) + "f", "scale": _f32(math.sqrt(2.0 / math.pi)) + "f"} if tanh else \
        {"scale": _f32(1.0 / math.sqrt(2.0)) + "f"}
    return gen.t("gelu.c.j2", fn=fn, x=gen.ptr(ki.ins[0]), y=gen.ptr(ki.outs[0]), n=ki.ins[0].type.numel,
                 expr=activation("gelu_tanh" if tanh else "gelu_erf", "float32", "v", params))


def _rnn_dims(ki) -> tuple[int, int, int, int]:
    """(steps, batch, input size, hidden) of an LSTM or GRU instruction."""
    steps, batch, inp = ki.ins[0].type.shape
    return steps, batch, inp, ki.ins[2].type.shape[2]


#: Hidden units per block of the packed LSTM step: its 4 gates are 4 x LSTM_UNITS outputs (4 vectors of 16).
LSTM_UNITS = 16
#: Least multiply-adds per step (4 hidden x hidden x batch) for which the packed LSTM's blocks split over the
#: threads: below it a step's barrier costs more than the halved GEMV saves.
LSTM_PARALLEL_MIN = 32768


def _lstm_packed(ki) -> bool:
    ops = rnn_operands(ki)
    return ki.op == "LSTM" and all(ops[k] is None or ops[k].const for k in ("w", "r", "b"))


def _gru_packed(ki) -> bool:
    ops = rnn_operands(ki)
    return (ki.op == "GRU" and bool(ki.attrs.get("linear_before_reset", 0))
            and all(ops[k] is None or ops[k].const for k in ("w", "r", "b")))


def _packed(ki) -> bool:
    return _lstm_packed(ki) or _gru_packed(ki)


def gate_packing(hidden: int, gates: int = 4) -> np.ndarray:
    """The gate row (of W and R, in ONNX's gate order) behind each packed gate output, -1 for padding: block b
    holds the ``gates`` gates of hidden units b * LSTM_UNITS ... (b + 1) * LSTM_UNITS - 1, LSTM_UNITS each."""
    blocks = -(-hidden // LSTM_UNITS)
    unit = np.arange(blocks * LSTM_UNITS).reshape(blocks, 1, LSTM_UNITS)
    rows = np.arange(gates).reshape(1, gates, 1) * hidden + unit
    return np.where(unit < hidden, rows, -1).reshape(-1)


def _pack_gru(arrays, hidden: int):
    """(W^T in GEMM panels, R's blocks [blocks, hidden, 3 * LSTM_UNITS], the projections' bias Wb + Rb of z and
    r and Wb of h~, Rb of h~ [blocks * LSTM_UNITS]) in gate_packing order (gates z, r, h)."""
    order = gate_packing(hidden, 3)
    keep = (order >= 0)[:, None]

    def rows(m):
        return np.where(keep, m[np.maximum(order, 0)], 0).astype(np.float32)
    w, r = arrays[0][0], arrays[1][0]
    b = arrays[2][0].astype(np.float32) if len(arrays) > 2 else np.zeros(6 * hidden, np.float32)
    proj = b[:3 * hidden] + np.concatenate([b[3 * hidden:5 * hidden], np.zeros(hidden, np.float32)])
    units = -(-hidden // LSTM_UNITS) * LSTM_UNITS
    rbh = np.zeros(units, np.float32)
    rbh[:hidden] = b[5 * hidden:]
    rb = rows(r).reshape(-1, 3 * LSTM_UNITS, hidden).transpose(0, 2, 1)
    return [pack_b(rows(w).T, "f32"), np.ascontiguousarray(rb),
            np.where(order >= 0, proj[np.maximum(order, 0)], 0).astype(np.float32), rbh]


def lstm_packing(hidden: int) -> np.ndarray:
    """The gate row (of W and R, ONNX order i, o, f, c) behind each packed gate output, -1 for padding: block b
    holds gates i, o, f, c of hidden units b * LSTM_UNITS ... (b + 1) * LSTM_UNITS - 1, LSTM_UNITS each."""
    blocks = -(-hidden // LSTM_UNITS)
    unit = np.arange(blocks * LSTM_UNITS).reshape(blocks, 1, LSTM_UNITS)
    rows = np.arange(4).reshape(1, 4, 1) * hidden + unit
    return np.where(unit < hidden, rows, -1).reshape(-1)


def _pack_lstm(arrays, hidden: int):
    """(W^T in GEMM panels, R's blocks [blocks, hidden, 4 * LSTM_UNITS], bias Wb + Rb) in lstm_packing order."""
    order = lstm_packing(hidden)
    keep = (order >= 0)[:, None]

    def rows(m):
        return np.where(keep, m[np.maximum(order, 0)], 0).astype(np.float32)
    w, r = arrays[0][0], arrays[1][0]
    bias = arrays[2][0, :4 * hidden] + arrays[2][0, 4 * hidden:] if len(arrays) > 2 else np.zeros(4 * hidden)
    rb = rows(r).reshape(-1, 4 * LSTM_UNITS, hidden).transpose(0, 2, 1)
    return [pack_b(rows(w).T, "f32"), np.ascontiguousarray(rb),
            np.where(order >= 0, bias[np.maximum(order, 0)], 0).astype(np.float32)]


#: the packed recurrent cells: gates per unit, the compile-time packer, how many arrays it makes, and the words
#: of the choice line (``glowc dump``)
_PACKED = {"LSTM": (4, _pack_lstm, 3, "lstm whole", "cell"),
           "GRU": (3, _pack_gru, 4, "gru whole (linear_before_reset)", "update")}


def rnn_scratch_bytes(ki) -> int:
    """The input projections of every step [steps, batch, gates x hidden], then h and c (LSTM) or the new h
    (GRU) [batch, hidden], and GRU's r * h [hidden]. Packed LSTM: the projections in lstm_packing order, h twice
    (the previous step's and this one's), c, then the GEMM's A panel."""
    steps, batch, inp, hidden = _rnn_dims(ki)
    if _packed(ki):
        gp = _GATES[ki.op] * LSTM_UNITS * -(-hidden // LSTM_UNITS)
        head = 4 * (steps * batch * gp + 3 * batch * hidden)
        return -(-head // 64) * 64 + gemm_scratch_bytes("f32", steps * batch, gp, inp, packed_b=True)
    return 4 * (steps * batch * _GATES[ki.op] * hidden + 2 * batch * hidden + hidden)


@kernel("LSTM", "GRU")
def k_rnn(gen, ki, fn) -> str:
    steps, batch, inp, hidden = _rnn_dims(ki)
    ops = rnn_operands(ki)
    h0 = gen.ptr(ops["initial_h"]) if ops["initial_h"] is not None else None
    c0 = gen.ptr(ops["initial_c"]) if ops.get("initial_c") is not None else None
    states = " from initial_h" + (" and initial_c" if c0 else "") if h0 or c0 else ""
    lens_op = ops["sequence_lens"]
    lens = gen.ptr(lens_op) if lens_op is not None else None
    lens_t = f"{lens_op.type.dtype.name}_t" if lens_op is not None else None
    states += ", rows past their sequence_lens kept" if lens else ""
    gates = _GATES[ki.op] * hidden
    outs = [gen.ptr(o) for o in ki.outs] + [None] * (3 - len(ki.outs))
    lbr = bool(ki.attrs.get("linear_before_reset", 0))
    if _lstm_packed(ki) or _gru_packed(ki):
        n_gates, pack, n_arrays, whole, cells = _PACKED[ki.op]
        blocks = -(-hidden // LSTM_UNITS)
        gp = n_gates * blocks * LSTM_UNITS
        wt, rb, bias, *rbh = gen.derive_many([ops[k].slot for k in ("w", "r", "b") if ops[k] is not None],
                                             lambda arrays: pack(arrays, hidden), f"{ki.op.lower()} packed", n_arrays)
        gen.gemms.add("f32")
        par = n_gates * hidden * hidden * batch >= LSTM_PARALLEL_MIN
        gen.choice = (f"{whole}, weights packed at compile time: input projections of {steps} steps in one packed "
                      f"GEMM [{steps * batch} x {inp}] x [{inp} x {gp}], {steps} steps of {blocks} fused GEMV + "
                      f"{cells} blocks of {LSTM_UNITS} units"
                      + (f" split over {gen.nt} threads" if par and gen.nt > 1 else "") + states)
        return gen.t("rnn.c.j2", lens=lens, lens_t=lens_t, fn=fn, cell=f"{ki.op.lower()}_packed", x=gen.ptr(ki.ins[0]),
                     wt=wt, rb=rb, bias=bias, rbh=rbh[0] if rbh else None, h0=h0, c0=c0, y=outs[0], y_h=outs[1],
                     y_c=outs[2], scratch=gen.scratch_ptr(), steps=steps, batch=batch, inp=inp, hidden=hidden,
                     blocks=blocks, units=LSTM_UNITS, gp=gp, par=par and gen.nt > 1,
                     gemm_off=-(-4 * (steps * batch * gp + 3 * batch * hidden) // 64) * 64)
    gen.choice = (f"{ki.op.lower()} whole: input projections of {steps} steps in one GEMM [{steps * batch} x "
                     f"{inp}] x [{inp} x {gates}], {steps} fused recurrent steps" + states)
    return gen.t("rnn.c.j2", lens=lens, lens_t=lens_t, fn=fn, cell=ki.op.lower(), x=gen.ptr(ki.ins[0]), w=gen.ptr(ki.ins[1]),
                    r=gen.ptr(ki.ins[2]), b=gen.ptr(ops["b"]) if ops["b"] is not None else None, h0=h0, c0=c0,
                    y=outs[0],
                    y_h=outs[1], y_c=outs[2] if ki.op == "LSTM" else None, scratch=gen.scratch_ptr(),
                    steps=steps, batch=batch, inp=inp, hidden=hidden, gates=gates, lanes=32, rows=4,
                    rb_rows=gates if ki.op == "LSTM" else 2 * hidden, linear_before_reset=lbr)


@kernel_scratch("LSTM", "GRU")
def rnn_scratch(ki) -> ScratchLayout:
    return ScratchLayout.of([("nn", rnn_scratch_bytes(ki))])


# the language-model ops kept whole (kernels/llm.py: their kernels register themselves)
WHOLE.update(llm.WHOLE)
