"""The quantizer: a lowered float graph rewritten into quantized primitives.

``Quantizer`` walks the nodes in order. A node it has a rule for (``RULES``) is replaced by its quantized form
when every value it reads and writes has a quantized type and the backend's ``is_op_supported`` accepts the
quantized node; otherwise it stays float, reading ``dequantize``d inputs, and the reason is recorded.

Where the quantized types come from is the front-end's business (``Source``):
- ``ProfileSource``: a profile's ranges, calibrated and turned into parameters by a schema (``glow_core.compile``
  with ``quantize=``); any float value with a profile entry may be quantized, ``quantize`` nodes are inserted
  where a quantized node reads a float value;
- ``ModelSource`` (strict): the quantization an imported QDQ model spells with QuantizeLinear/DequantizeLinear:
  a node is quantized when it reads dequantized values and all its results go to QuantizeLinear; its float
  readers keep seeing the model's dequantized values.

Patterns folded into one quantized node: conv/matmul/add followed by ReLU or Clip (``max``/``min`` with a
constant) become the node's clamp; matmul followed by the addition of a constant row (Gemm's bias) becomes
qmatmul's bias; reduce_sum over the spatial dims divided by their count (GlobalAveragePool) becomes qavg_pool.
"""
from __future__ import annotations

import numpy as np

from ..builder import Builder
from ..errors import GlowError
from ..graph import Function, Node, Value
from ..ops.primitives.quantized import ACC, QDTYPES, REQUANT_OPS, WEIGHTS, qrange
from ..ops.registry import get_primitive
from . import schema as S
from .calibrate import calibrated_range
from .schema import QParams


class Refused(Exception):
    """A node cannot be quantized: the message is the reason (shown in the compile statistics)."""


# -- where quantized types come from ---------------------------------------------------------------------------
def default_weight_schema(schema: str) -> str:
    """The conv and matmul weights' schema when ``weight_schema`` is not given: "symmetric" under asymmetric
    activations (onnxruntime's recipe: a weight offset of 0 drops the per-pixel input-sum term from every
    accumulator, a pass as costly as a depthwise conv itself, at the same accuracy: output SQNR within 0.3 dB
    either way on ResNet-18 and MobileNetV2, bench/bench_quant_accuracy.py), else the activations'."""
    return "symmetric" if schema == "asymmetric" else schema


class ProfileSource:
    """Quantized types from a profile: the tensor's calibrated range and the schema's parameters."""

    strict = False

    def __init__(self, profile, schema="asymmetric", precision="int8", calibration="minmax", per_channel=False,
                 weight_schema=None):
        self.profile, self.schema, self.precision = profile, schema, precision
        self.calibration, self.per_channel = calibration, per_channel
        self.weight_schema = weight_schema or default_weight_schema(schema)  # conv and matmul weights
        self._cache: dict[int, QParams | None] = {}

    def params(self, v: Value) -> QParams | None:
        if v.id not in self._cache:
            st = self.profile.lookup(v)
            if st is None or st.min > st.max:
                self._cache[v.id] = None
            else:
                levels = qrange(self.precision)[1] - qrange(self.precision)[0] + 1
                lo, hi = calibrated_range(st, self.calibration, levels)
                self._cache[v.id] = S.choose(lo, hi, self.schema, self.precision)
        return self._cache[v.id]

    def constant(self, arr) -> QParams:
        return S.choose(float(np.min(arr, initial=0.0)), float(np.max(arr, initial=0.0)), self.schema,
                        self.precision)


class ModelSource:
    """Quantized types as an imported model gives them: QuantizeLinear's (``quantize`` nodes) for the results it
    quantizes, DequantizeLinear's (``dequantize`` nodes) for the quantized values it reads."""

    strict = True

    def __init__(self, fn: Function):
        self.users = fn.users()

    def quantizers(self, v: Value) -> list[Node]:
        """The quantize nodes reading v, when they are all its readers and agree on the parameters."""
        users = self.users.get(v.id, [])
        if not users or any(u.op != "quantize" for u in users):
            return []
        if len({(u.attrs["dtype"], u.attrs["scale"], u.attrs["offset"]) for u in users}) != 1:
            return []
        return users

    def params(self, v: Value) -> QParams | None:
        qs = self.quantizers(v)
        return QParams(qs[0].attrs["dtype"], float(qs[0].attrs["scale"]), int(qs[0].attrs["offset"])) if qs else None


def dequantized(v: Value):
    """(quantized value, QParams) when v = dequantize(q) with per-tensor parameters, else None."""
    n = v.producer
    if n is None or n.op != "dequantize" or n.inputs[0].is_const or not all(x.is_const for x in n.inputs[1:]):
        return None
    s, o = n.inputs[1].const.reshape(-1), n.inputs[2].const.reshape(-1)
    if s.size != 1 or n.inputs[0].dtype.name not in QDTYPES:
        return None
    return n.inputs[0], QParams(n.inputs[0].dtype.name, float(s[0]), int(o[0]))


def constant_of(v: Value):
    """The value of v when it is computed from constants only: (array, None) for a float constant, or (integers,
    (scales, offsets, axis)) through a dequantize of constants; reshape, transpose and broadcast on the way are
    applied (the per-axis parameters' axis follows them). None otherwise."""
    if v.is_const:
        return v.const, None
    n = v.producer
    if n is None:
        return None
    if n.op == "dequantize" and all(x.is_const for x in n.inputs):
        q, s, o = (x.const for x in n.inputs)
        return q, (s.reshape(-1), o.reshape(-1), n.attrs["axis"])
    if n.op not in ("reshape", "transpose", "broadcast"):
        return None
    inner = constant_of(n.inputs[0])
    if inner is None:
        return None
    arr, quant = inner
    attrs = {k: a for k, a in n.attrs.items() if not k.startswith("_")}
    out = get_primitive(n.op).run([arr], attrs)[0]
    if quant is not None and quant[0].size > 1:
        axis = _follow_axis(n.op, attrs, arr.shape, out.shape, quant[2])
        if axis is None:
            return None
        quant = (quant[0], quant[1], axis)
    return out, quant


def _follow_axis(op, attrs, in_shape, out_shape, axis):
    """Where axis ``axis`` of the input is in the output of a reshape/transpose/broadcast (None: split/merged)."""
    if op == "transpose":
        return list(attrs["perm"]).index(axis)
    if op == "broadcast":
        return axis
    before = int(np.prod(in_shape[:axis]))
    for j, d in enumerate(out_shape):
        if d == in_shape[axis] and int(np.prod(out_shape[:j])) == before:
            return j
    return None


# -- the rewrite -------------------------------------------------------------------------------------------
class Quantizer:
    """One rewrite of ``fn`` (in place). ``ask(node)`` returns None when the backend runs ``node``, else the
    reason it refuses; ``keep_float``: node names or op types (the model's, or primitives') left in float."""

    def __init__(self, fn: Function, source, ask, keep_float=(), requant="float32"):
        self.fn, self.source, self.ask = fn, source, ask
        self.requant = requant
        self.keep_float = set(keep_float)
        self.matched: set[str] = set()
        self.users = fn.users()
        self.qform: dict[int, tuple[Value, QParams]] = {}  # float value id -> its quantized form
        self.floatform: dict[int, Value] = {}  # value id -> what float readers read instead
        self.replaced: dict[int, bool] = {}  # float values no longer computed (their producer was quantized)
        self.alias: dict[int, Value] = {}  # strict: a quantize node's result -> the quantized value replacing it
        self.skip: dict[int, bool] = {}  # ids of nodes folded into a quantized node before them
        self.journal: list = []
        self.node: Node | None = None
        self.quantized: list[Node] = []
        self.float_nodes: list[tuple[str, str, str]] = []
        self.bound: dict[str, Value] = {}  # the float value's name -> its quantized form (for reports)

    # -- bookkeeping (undone when a rule fails half-way) -----------------------------------------------------
    def _set(self, table, key, value):
        self.journal.append((table, key))
        table[key] = value

    def _mark(self):
        return len(self.fn.nodes), len(self.journal)

    def _rollback(self, mark):
        nodes, journal = mark
        del self.fn.nodes[nodes:]
        while len(self.journal) > journal:
            table, key = self.journal.pop()
            table.pop(key, None)

    # -- the walk -----------------------------------------------------------------------------------------
    def run(self) -> dict:
        old = self.fn.nodes
        self.fn.nodes = []
        constant: set[int] = set()
        for n in old:
            if id(n) in self.skip:
                continue
            self.node = n
            if all(v is None or v.is_const or v.id in constant for v in n.inputs):
                constant.update(v.id for v in n.outputs)  # computes a constant (lazily: dequantized weights)
                self._keep(n)
                continue
            rule = RULES.get(n.op) if _float32(n) or n.op == "quantize" else None
            reason = self._kept(n) if rule is not None else "no quantized form"
            if rule is not None and reason is None:
                mark = self._mark()
                try:
                    rule(self, n)
                    self.quantized.append(n)
                    continue
                except Refused as e:
                    self._rollback(mark)
                    reason = str(e)
            if n.op != "dequantize" and any(v.dtype.is_float for v in n.outputs):
                self.float_nodes.append((n.source[0], n.op, reason))
            self._keep(n)
        self.fn.outputs = [self.float_of(v) for v in self.fn.outputs]
        unknown = sorted(self.keep_float - self.matched)
        if unknown:
            raise GlowError(f"keep_float: {', '.join(map(repr, unknown))} matches no node of the model (give node "
                            f"names or op types, e.g. {sorted({n.source[1] for n in old})[:8]})")
        return {"quantized_nodes": len(self.quantized), "float_nodes": self.float_nodes}

    def _kept(self, n: Node) -> str | None:
        name, op = n.source
        hits = {k for k in (name, op, n.name, n.op) if k in self.keep_float}
        self.matched |= hits
        return "kept in float (keep_float)" if hits else None

    def _keep(self, n: Node):
        """Re-emit ``n`` as it is, reading float values (or aliased quantized ones)."""
        n.inputs = [None if v is None else (self._resolve(v) if not v.dtype.is_float else self.float_of(v))
                    for v in n.inputs]
        self.fn.nodes.append(n)

    def _resolve(self, v: Value) -> Value:
        return self.alias.get(v.id, v)

    # -- what rules use -------------------------------------------------------------------------------------
    def refuse(self, why: str):
        raise Refused(why)

    def emit(self, op: str, *ins: Value, main: bool = True, **attrs) -> Value:
        """Append primitive ``op``; a ``main`` node (not glue such as quantize/rescale) must be accepted by the
        backend, else the rule fails with the backend's reason."""
        b = Builder(self.fn, where=f"node '{self.node.name}' ({self.node.op})", fold=False, name=self.node.name)
        if op in REQUANT_OPS and self.requant != "float32":
            attrs["requant"] = self.requant
        out = b.emit(op, *ins, **attrs)
        node = self.fn.nodes[-1]
        node.origin = self.node.source
        if main:
            why = self.ask(node)
            if why is not None:
                self.refuse(why)
        return out

    def params(self, v: Value) -> QParams:
        p = self.source.params(v)
        if p is None:
            self.refuse(f"no quantized type for '{v.onnx_name or v.name}'" + (
                " (the model does not quantize it)" if self.source.strict else " (no profile entry)"))
        return p

    def qin(self, v: Value, want: QParams | None = None) -> tuple[Value, QParams]:
        """The quantized form of float value v (rescaled to ``want`` if given)."""
        v = self._resolve(v)
        if v.id in self.qform:
            q, p = self.qform[v.id]
        elif self.source.strict:
            d = dequantized(v)
            if d is None:
                self.refuse(f"'{v.onnx_name or v.name}' is not quantized in the model")
            q, p = self._resolve(d[0]), d[1]
        else:
            p = self.params(v)
            q = self.emit("quantize", self.float_of(v), scale=p.scale, offset=p.offset, dtype=p.dtype, main=False)
            self._set(self.qform, v.id, (q, p))
        if want is not None and want != p:
            q = self.emit("rescale", q, in_scale=p.scale, in_offset=p.offset, out_scale=want.scale,
                          out_offset=want.offset, out_dtype=want.dtype, main=False)
            p = want
        return q, p

    def float_of(self, v: Value) -> Value:
        """What a float reader of v reads: v itself, or the dequantization of its quantized form."""
        v = self._resolve(v)
        if v.is_const or v.id not in self.replaced:
            return v
        if v.id not in self.floatform:
            q, p = self.qform[v.id]
            d = self.emit("dequantize", q, self.fn.constant(np.array([p.scale], np.float32), "scale"),
                          self.fn.constant(np.array([p.offset], np.int32), "offset"), axis=0, main=False)
            self._set(self.floatform, v.id, d)
        return self.floatform[v.id]

    def bind(self, v: Value, q: Value, p: QParams | None = None):
        """Float value v is now computed as q (of parameters p, default q's type); in a strict source the
        model's QuantizeLinear of v become q (rescaled where they ask for other parameters)."""
        p = p or QParams.of(q.type)
        self._set(self.qform, v.id, (q, p))
        self._set(self.replaced, v.id, True)
        self.bound[v.onnx_name or v.name] = q
        if self.source.strict:
            for u in self.source.quantizers(v):
                want = QParams(u.attrs["dtype"], float(u.attrs["scale"]), int(u.attrs["offset"]))
                r = q if want == p else self.emit("rescale", q, in_scale=p.scale, in_offset=p.offset,
                                                  out_scale=want.scale, out_offset=want.offset,
                                                  out_dtype=want.dtype, main=False)
                self._set(self.alias, u.outputs[0].id, r)
                self._set(self.skip, id(u), True)

    def only_user(self, v: Value) -> Node | None:
        users = self.users.get(v.id, [])
        if len(users) != 1 or any(v is o for o in self.fn.outputs) or id(users[0]) in self.skip:
            return None
        return users[0]

    def clamp_chain(self, v: Value):
        """ReLU/Clip after v: (the chain's result, real lower bound or None, real upper bound or None, nodes).
        The chain is max/min nodes with a uniform constant, each the only reader of the one before."""
        lo = hi = None
        nodes, end = [], v
        while True:
            u = self.only_user(end)
            if u is None or u.op not in ("max", "min") or u.inputs[0] is not end:
                break
            c = constant_of(u.inputs[1])
            if c is None or c[1] is not None or c[0].size == 0 or np.ptp(c[0]) != 0:
                break
            val = float(c[0].reshape(-1)[0])
            if u.op == "max":
                lo = val if lo is None else max(lo, val)
            else:
                hi = val if hi is None else min(hi, val)
            nodes.append(u)
            end = u.outputs[0]
        return end, lo, hi, nodes

    def clamp_attrs(self, p: QParams, lo, hi) -> dict:
        """clamp_min/clamp_max in p's integers for real bounds lo/hi (None: none)."""
        if lo is not None and hi is not None and lo > hi:
            self.refuse(f"clip bounds [{lo}, {hi}] are empty")
        return {"clamp_min": None if lo is None else int(p.quantize(lo)),
                "clamp_max": None if hi is None else int(p.quantize(hi))}

    def weights(self, w: Value, axis: int, channels: int, dtype: str):
        """(integer weights of ``dtype``, float32 scales, int32 offsets): the model's quantized weights, or
        float constant weights quantized per channel along ``axis`` (or per tensor)."""
        c = constant_of(w)
        if c is None:
            self.refuse("the weights are computed at run time")
        arr, quant = c
        if quant is None:
            if self.source.strict:
                self.refuse("the weights are float in the model")
            wdt = WEIGHTS[dtype][0]
            q, s, o = S.weights(arr, axis if self.source.per_channel else None, self.source.weight_schema,
                                "int16" if wdt == "int16" else "int8")
            return q, s, o
        s, o, qaxis = quant
        if s.size > 1 and (qaxis != axis or s.size != channels):
            self.refuse(f"the weights are quantized along axis {qaxis}, the primitive takes them per output channel")
        if arr.dtype.name == "uint8":  # the same w - offset in int8
            arr, o = (arr.astype(np.int32) - 128).astype(np.int8), o.astype(np.int32) - 128
        if arr.dtype.name not in WEIGHTS[dtype]:
            self.refuse(f"{arr.dtype.name} weights with {dtype} inputs")
        return arr, s.astype(np.float32), o.astype(np.int32)

    def bias(self, c, x_scale: float, w_scales, channels: int, acc: str) -> Value:
        """The bias (``constant_of`` of it, or None) as the accumulator type of scale x_scale * w_scale[f]: the
        model's integers when they have that scale, else the real bias quantized."""
        if c is None:
            return self.fn.constant(np.zeros(channels, np.dtype(acc)), f"{self.node.name}_bias")
        arr, quant = c
        arr = np.broadcast_to(arr, (channels,)) if arr.size == 1 else arr.reshape(-1)
        want = float(x_scale) * np.broadcast_to(np.asarray(w_scales, np.float64), (channels,))
        if quant is not None:
            s = np.broadcast_to(quant[0].astype(np.float64), (channels,))
            if np.all(quant[1] == 0) and np.allclose(s, want, rtol=1e-6, atol=0) and arr.dtype.name == acc:
                return self.fn.constant(arr.astype(np.dtype(acc)), f"{self.node.name}_bias")
            arr = (arr.astype(np.float64) - np.broadcast_to(quant[1], (channels,))) * s
        elif self.source.strict:
            self.refuse("the bias is float in the model")
        return self.fn.constant(S.bias(arr, x_scale, w_scales, acc), f"{self.node.name}_bias")

    def constants(self, n: Node, **arrays) -> list[Value]:
        """Constants named after node n (arrays, or Values passed through)."""
        return [a if isinstance(a, Value) else self.fn.constant(a, f"{n.name}_{k}") for k, a in arrays.items()]

    def require_quantized_input(self, values):
        """Profile mode: quantize a node that only moves or combines values only when one of them is already
        quantized (else it would add a quantize before and a dequantize after, and gain nothing)."""
        if not self.source.strict and not any(v is not None and self._resolve(v).id in self.qform
                                              and self._resolve(v).id in self.replaced for v in values):
            self.refuse("its inputs are computed in float")

    def operand(self, v: Value) -> tuple[Value, QParams]:
        """The quantized form of an operand of an elementwise op: a value's, or a constant quantized."""
        c = constant_of(v)
        if c is None or (self.source.strict and c[1] is None):
            return self.qin(v)
        arr, quant = c
        if quant is not None:
            if quant[0].size != 1 or arr.dtype.name not in QDTYPES:
                self.refuse("a per-axis quantized constant operand")
            return self.fn.constant(arr, "const"), QParams(arr.dtype.name, float(quant[0][0]), int(quant[1][0]))
        p = self.source.constant(arr)
        return self.fn.constant(p.quantize(arr), "const"), p


# -- rules: one function per float primitive ---------------------------------------------------------------
def _conv(qz: Quantizer, n: Node):
    x, w, b = n.inputs
    end, lo, hi, chain = qz.clamp_chain(n.outputs[0])
    out = qz.params(end)
    xq, xp = qz.qin(x)
    f = w.shape[0]
    wq, ws, wo = qz.weights(w, 0, f, xp.dtype)
    acc = ACC[xp.dtype]
    bc = constant_of(b)
    if bc is None:
        qz.refuse("the bias is computed at run time")
    c = qz.constants(n, w=wq, bias=qz.bias(bc, xp.scale, ws, f, acc), w_scale=ws, w_offset=wo)
    y = qz.emit("qconv", xq, *c, **n.attrs, x_scale=xp.scale, x_offset=xp.offset,
                out_scale=out.scale, out_offset=out.offset, out_dtype=out.dtype, **qz.clamp_attrs(out, lo, hi))
    _finish(qz, n, end, y, chain)


def _matmul(qz: Quantizer, n: Node):
    a, b = n.inputs
    v = n.outputs[0]
    nn = b.shape[-1]
    bias, add = None, qz.only_user(v)
    if add is not None and add.op == "add":
        c = constant_of(add.inputs[1] if add.inputs[0] is v else add.inputs[0])
        if c is not None and c[0].ndim >= 1 and c[0].shape[-1] == nn and (c[0] == c[0].reshape(-1, nn)[0]).all() \
                and (c[1] is None or c[1][0].size == 1 or c[1][2] == c[0].ndim - 1):
            bias = (c[0].reshape(-1, nn)[0], c[1])
            v = add.outputs[0]
        else:
            add = None
    else:
        add = None
    end, lo, hi, chain = qz.clamp_chain(v)
    out = qz.params(end)
    aq, ap = qz.qin(a)
    if constant_of(b) is not None:
        wq, ws, wo = qz.weights(b, b.rank - 1, nn, ap.dtype)
        bq = qz.constants(n, w=wq)[0]
    else:
        bq, bp = qz.qin(b)
        if bp.dtype not in (("int8", "uint8") if ap.dtype != "int16" else ("int16",)):
            qz.refuse(f"{bp.dtype} right operand with {ap.dtype} left operand")
        ws, wo = np.array([bp.scale], np.float32), np.array([bp.offset], np.int32)
    y = qz.emit("qmatmul", aq, bq, *qz.constants(n, bias=qz.bias(bias, ap.scale, ws, nn, ACC[ap.dtype]), w_scale=ws,
                                                 w_offset=wo), a_scale=ap.scale, a_offset=ap.offset, out_scale=out.scale,
                out_offset=out.offset, out_dtype=out.dtype, **qz.clamp_attrs(out, lo, hi))
    _finish(qz, n, end, y, ([add] if add is not None else []) + chain)


def _binary(op):
    def rule(qz: Quantizer, n: Node):
        qz.require_quantized_input(n.inputs)
        end, lo, hi, chain = qz.clamp_chain(n.outputs[0])
        out = qz.params(end)
        (aq, ap), (bq, bp) = qz.operand(n.inputs[0]), qz.operand(n.inputs[1])
        y = qz.emit(op, aq, bq, a_scale=ap.scale, a_offset=ap.offset, b_scale=bp.scale, b_offset=bp.offset,
                    out_scale=out.scale, out_offset=out.offset, out_dtype=out.dtype, **qz.clamp_attrs(out, lo, hi))
        _finish(qz, n, end, y, chain)
    return rule


def _float32(n: Node) -> bool:
    """Whether n computes on float32 (the only float type quantized) and nothing else is float."""
    floats = [v for v in list(n.inputs) + n.outputs if v is not None and v.dtype.is_float]
    return bool(floats) and all(v.dtype.name == "float32" for v in floats)


def _finish(qz: Quantizer, n: Node, end: Value, y: Value, folded):
    """The quantized node computes ``end`` (n's result, or the result of the nodes folded into it)."""
    qz.bind(end, y)
    for u in folded:
        qz._set(qz.skip, id(u), True)


def _keep_params(qz: Quantizer, n: Node):
    """Movement, max pooling, max/min of two values: computed on the stored integers, the result keeps the
    (first) operand's parameters; the other operands are rescaled to them, constants quantized with them."""
    ins = list(n.inputs)
    data = [i for i, v in enumerate(ins) if v is not None and v.dtype.is_float]
    qz.require_quantized_input([ins[i] for i in data])
    q0, p0 = qz.qin(ins[data[0]])
    ins[data[0]] = q0
    for i in data[1:]:
        c = constant_of(ins[i])
        if c is not None and c[1] is None:
            ins[i] = qz.fn.constant(p0.quantize(c[0]), "const")
        else:
            ins[i] = qz.qin(ins[i], want=p0)[0]
    attrs = dict(n.attrs)
    if n.op == "pad":
        attrs["value"] = float(p0.quantize(attrs.get("value", 0.0)))
    ins = [v if i in data or v is None else qz._resolve(v) for i, v in enumerate(ins)]
    y = qz.emit(n.op, *ins, **attrs)
    qz.bind(n.outputs[0], y, p0)


def _concat(qz: Quantizer, n: Node):
    qz.require_quantized_input(n.inputs)
    out = qz.params(n.outputs[0])
    ins = [qz.qin(v, want=out)[0] for v in n.inputs]
    qz.bind(n.outputs[0], qz.emit("concat", *ins, **n.attrs), out)


def _avg_pool(qz: Quantizer, n: Node):
    out = qz.params(n.outputs[0])
    xq, xp = qz.qin(n.inputs[0])
    y = qz.emit("qavg_pool", xq, **n.attrs, x_scale=xp.scale, x_offset=xp.offset, out_scale=out.scale,
                out_offset=out.offset, out_dtype=out.dtype)
    qz.bind(n.outputs[0], y)


def _global_avg(qz: Quantizer, n: Node):
    """reduce_sum over all spatial dims (kept) divided by their count: qavg_pool over the whole plane."""
    x = n.inputs[0]
    axes, div = list(n.attrs["axes"]), qz.only_user(n.outputs[0])
    count = int(np.prod(x.shape[2:])) if x.rank >= 3 else 0
    c = constant_of(div.inputs[1]) if div is not None and div.op in ("div", "mul") and \
        div.inputs[0] is n.outputs[0] else None
    # an empty divisor (a mean over an empty plane, or of an empty batch) has no factor: the node stays float
    factor = None if c is None or c[1] is not None or not c[0].size or np.ptp(c[0]) != 0 \
        else float(c[0].reshape(-1)[0])
    if axes != list(range(2, x.rank)) or not n.attrs["keepdims"] or factor is None or count == 0 or \
            (div.op == "div" and factor != count) or (div.op == "mul" and not np.isclose(factor * count, 1.0)):
        qz.refuse("only the mean over all spatial dims (GlobalAveragePool) has a quantized form")
    out = qz.params(div.outputs[0])
    xq, xp = qz.qin(x)
    k = list(x.shape[2:])
    y = qz.emit("qavg_pool", xq, kernel=k, strides=[1] * len(k), dilations=[1] * len(k), pads=[0] * 2 * len(k),
                count_include_pad=0, x_scale=xp.scale, x_offset=xp.offset, out_scale=out.scale,
                out_offset=out.offset, out_dtype=out.dtype)
    _finish(qz, n, div.outputs[0], y, [div])


def _lookup(qz: Quantizer, n: Node):
    """A unary float function as a 256-entry table: quantize_out(f(dequantize_in(q))) for every 8-bit q."""
    qz.require_quantized_input(n.inputs)
    out = qz.params(n.outputs[0])
    xq, xp = qz.qin(n.inputs[0])
    if xp.dtype not in ("int8", "uint8") or out.dtype not in QDTYPES:
        qz.refuse("lookup tables need 8-bit inputs (precision int16 has none)")
    lo, hi = qrange(xp.dtype)
    real = xp.dequantize(np.arange(lo, hi + 1))
    attrs = {k: a for k, a in n.attrs.items() if not k.startswith("_")}
    table = out.quantize(get_primitive(n.op).run([real], attrs)[0].astype(np.float64))
    y = qz.emit("lookup", xq, *qz.constants(n, table=table), out_scale=out.scale, out_offset=out.offset)
    qz.bind(n.outputs[0], y)


def _strict_quantize(qz: Quantizer, n: Node):
    """A model's quantize of a value already quantized here: that value (rescaled if the parameters differ)."""
    want = QParams(n.attrs["dtype"], float(n.attrs["scale"]), int(n.attrs["offset"]))
    q, _ = qz.qin(n.inputs[0], want=want)
    qz._set(qz.alias, n.outputs[0].id, q)


def quantized(fn: Function) -> bool:
    """Whether fn holds quantized primitives (an imported quantized model)."""
    return any((get_primitive(n.op) is not None and get_primitive(n.op).quantized == "own") for n in fn.nodes)


def set_requant(fn: Function, requant: str) -> int:
    """Give every node of ``fn`` that requantizes (``REQUANT_OPS``) the requantization mode ``requant`` unless it
    is the default ``"float32"`` (which leaves every node as it is); returns the number of nodes changed."""
    if requant == "float32":
        return 0
    changed = 0
    for n in fn.nodes:
        if n.op in REQUANT_OPS and n.attrs.get("requant", "float32") != requant:
            n.attrs["requant"] = requant
            changed += 1
    return changed


def quantize_graph(fn: Function, ask, profile=None, schema="asymmetric", precision="int8", per_channel=False,
                   calibration="minmax", keep_float=(), weight_schema=None, requant="float32") -> dict:
    """Quantize lowered graph ``fn`` in place: with a profile, by its ranges (the conv and matmul weights by
    ``weight_schema``, default ``schema``); without, as the (QDQ) model says. The quantized nodes that requantize
    get ``requant`` (before ``ask`` sees them), and so do those the model already had (``set_requant``).
    Returns the statistics (quantized node count, float nodes with the reasons)."""
    if profile is not None:
        if quantized(fn):
            raise GlowError("the model is already quantized (it has QuantizeLinear/DequantizeLinear or QLinear "
                            "operators); compile it without quantize=")
        source = ProfileSource(profile, schema, precision, calibration, per_channel, weight_schema)
    else:
        source = ModelSource(fn)
    set_requant(fn, requant)
    qz = Quantizer(fn, source, ask, keep_float, requant)
    stats = qz.run()
    stats["values"] = qz.bound
    return stats


MOVEMENT = ("reshape", "transpose", "slice", "broadcast", "pad", "gather", "gather_nd", "copy")
LOOKUP = ("exp", "log", "sqrt", "reciprocal", "sin", "cos", "tanh", "sigmoid", "erf", "neg", "abs", "tan", "atan",
          "sinh", "cosh", "asinh")
RULES = {"conv": _conv, "matmul": _matmul, "add": _binary("qadd"), "mul": _binary("qmul"), "concat": _concat,
         "avg_pool": _avg_pool, "reduce_sum": _global_avg, "quantize": _strict_quantize,
         **{op: _keep_params for op in MOVEMENT + ("max_pool", "max", "min", "reduce_max", "reduce_min")},
         **{op: _lookup for op in LOOKUP}}
