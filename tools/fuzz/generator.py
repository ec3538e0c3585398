"""Random valid ONNX graphs from the op recipes (``recipes.py``, ``families.py``), reproducible from a seed.

A ``Draft`` holds the graph under construction: a pool of typed values (graph inputs, node outputs), the
initializers and the feeds. Each step draws an op, lets its family builder pick operands and attributes,
and keeps the node only if ONNX's strict shape inference gives every output a static shape (bounded size);
otherwise the node is dropped and counted. The finished model passes ``onnx.checker`` with full checking.
Fresh float inputs carry special values (NaN, +-inf, -0.0, denormals, the largest finite values) with
probability ``special``; fresh integer inputs carry the dtype's extremes.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from glow_core.ops.registry import OPS
from glow_core.types import dtype as gdtype
from .families import FAMILIES
from .recipes import OMIT, RECIPES, SKIP, Recipe

MAX_NUMEL = 2048
BASE_OPSET = 21


@dataclass
class Value:
    name: str
    dtype: str
    shape: tuple
    exact: bool  # bit-identical on every correct implementation (see recipes.py)
    special: bool = False  # computed from inputs holding NaN, infinities, denormals or huge values


def special_values(dt: str) -> np.ndarray:
    d = gdtype(dt)
    if d.is_float:
        fi = np.finfo(np.float32) if dt == "bfloat16" else np.finfo(d.np)
        return np.array([np.nan, np.inf, -np.inf, -0.0, float(fi.tiny) / 4, -float(fi.tiny) / 2, float(fi.max),
                         -float(fi.max), 0.0], dtype=np.float64)
    if d.is_bool:
        return np.array([0, 1])
    ii = np.iinfo(d.np)
    return np.array([ii.min, ii.max, 0, -1 if ii.min < 0 else 1, ii.max - 1], dtype=object)


def random_array(rng, dt: str, shape, domain=(-4.0, 4.0), special=0.0, nonzero=False) -> np.ndarray:
    d = gdtype(dt)
    shape = tuple(int(s) for s in shape)
    if d.is_bool:
        return rng.random(shape) < 0.5
    if d.is_int:
        ii = np.iinfo(d.np)
        lo, hi = max(int(np.floor(domain[0])) * 3, ii.min), min(int(np.ceil(domain[1])) * 3, ii.max)
        if d.kind == "uint":
            lo = 0
        a = rng.integers(lo, hi + 1, size=shape).astype(d.np)
        if nonzero:
            a[a == 0] = 1
        elif a.size and rng.random() < special:
            sv = special_values(dt)
            k = max(1, a.size // 8)
            a.reshape(-1)[rng.choice(a.size, k)] = np.array([sv[i] for i in rng.integers(0, len(sv), k)],
                                                            dtype=object).astype(d.np)
        return a
    lo, hi = domain
    a = rng.uniform(lo, hi, size=shape)
    if nonzero:
        a = np.where(np.abs(a) < 0.5, np.copysign(0.5, a), a)
    elif a.size and rng.random() < special:
        sv = special_values(dt)
        k = max(1, a.size // 8)
        a.reshape(-1)[rng.choice(a.size, k)] = sv[rng.integers(0, len(sv), k)]
    with np.errstate(all="ignore"):
        return a.astype(np.float32).astype(d.np) if dt == "bfloat16" else a.astype(d.np)


class Draft:
    """A graph under construction (see the module docstring)."""

    def __init__(self, rng, dtypes=None, special=0.25, opset=BASE_OPSET):
        self.rng = rng
        self.dtypes = set(dtypes) if dtypes else None
        self.special = special
        self.opset = opset
        self.values: list[Value] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.inits: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self.consumed: set[str] = set()
        self._k = 0

    def _name(self, prefix):
        self._k += 1
        return f"{prefix}{self._k}"

    def choose(self, choices):
        return choices[int(self.rng.integers(0, len(choices)))]

    def shape(self, lo=0, hi=4):
        rank = int(self.rng.choice(range(lo, hi + 1), p=_rank_p(lo, hi)))
        return [0 if self.rng.random() < 0.02 else int(self.rng.integers(1, 7)) for _ in range(rank)]

    def fresh(self, dt, shape, domain=(-4.0, 4.0), special=True, nonzero=False) -> Value:
        nm = self._name("in")
        a = random_array(self.rng, dt, shape, domain, self.special if special else 0.0, nonzero)
        self.inputs.append(helper.make_tensor_value_info(nm, gdtype(dt).onnx, list(a.shape)))
        self.feeds[nm] = a
        v = Value(nm, dt, tuple(a.shape), True, _is_special(a))
        self.values.append(v)
        return v

    def const(self, array) -> str:
        nm = self._name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(array), nm))
        return nm

    def _allowed(self, dtypes):
        return [t for t in dtypes if self.dtypes is None or t in self.dtypes or t == "bool"
                or t in ("int64",)] or list(dtypes)

    def pick(self, r: Recipe, dtypes=None, min_rank=0, max_rank=4) -> Value:
        """An existing value fitting the recipe (dtype, rank, exactness) or, sometimes, a fresh input."""
        dts = self._allowed(dtypes or r.dtypes)
        ok = [v for v in self.values if v.dtype in dts and min_rank <= len(v.shape) <= max_rank
              and (v.exact or not r.needs_exact or not gdtype(v.dtype).is_float) and not (r.finite and v.special)]
        if ok and self.rng.random() < 0.75:
            ok.sort(key=lambda v: v.name in self.consumed)  # prefer values nothing reads yet
            return ok[int(self.rng.integers(0, max(1, (len(ok) + 1) // 2)))]
        dt = str(self.rng.choice(dts))
        return self.fresh(dt, self.shape(min_rank, max_rank), r.domain, special=not r.finite)

    def pick_like(self, dt, shape, r: Recipe, special=True) -> Value:
        """An existing value of exactly this dtype and shape, or a fresh input (``special``: which may carry
        special values)."""
        shape = tuple(int(s) for s in shape)
        special = special and not r.finite
        ok = [v for v in self.values if v.dtype == dt and v.shape == shape and (special or not v.special)
              and (v.exact or not r.needs_exact or not gdtype(dt).is_float)]
        if ok and self.rng.random() < 0.5:
            return ok[int(self.rng.integers(0, len(ok)))]
        return self.fresh(dt, shape, r.domain, special=special)

    def fresh_or(self, r: Recipe, shape, fits, dtype=None) -> Value:
        dts = self._allowed(r.dtypes)
        dt = dtype or str(self.rng.choice(dts))
        ok = [v for v in self.values if v.dtype == dt and fits(list(v.shape)) and not (r.finite and v.special)]
        if ok and self.rng.random() < 0.5:
            return ok[int(self.rng.integers(0, len(ok)))]
        return self.fresh(dt, shape, r.domain, special=not r.finite)

    # -- nodes ------------------------------------------------------------------------------------------
    def add(self, op: str, r: Recipe, stats: Counter) -> bool:
        """Try to add one ``op`` node; False (and a count in ``stats``) when it was rejected."""
        n_inputs, n_inits, n_values, k = len(self.inputs), len(self.inits), len(self.values), self._k
        built = FAMILIES[r.family](self, op, r)
        if built is None:
            stats["no-operands"] += 1
            self._rollback(n_inputs, n_inits, n_values)
            return False
        names, attrs, n_out = built
        for key, choices in r.attrs.items():
            if key in attrs:
                continue
            first = next((v for v in self.values if v.name == names[0]), None) if names else None
            val = choices(self.rng, first.shape if first else ()) if callable(choices) else self.choose(choices)
            if val is not OMIT:
                attrs[key] = val
        outs = [self._name("v") for _ in range(n_out)]
        attrs = {k: v for k, v in attrs.items() if not (isinstance(v, list) and not v)}  # no type to give []
        node = helper.make_node(op, names, outs, name=self._name(f"{op}_"), **attrs)
        types = self._infer(node)
        if types is None:
            stats["rejected-by-shape-inference"] += 1
            self._rollback(n_inputs, n_inits, n_values)
            self._k = k
            return False
        ins = [v for v in self.values if v.name in names]
        exact = all(v.exact for v in ins) and (r.exact or all(not gdtype(t).is_float for t, _ in types))
        special = any(v.special for v in ins)
        self.nodes.append(node)
        self.consumed.update(names)
        for nm, (dt, shape) in zip(outs, types):
            self.values.append(Value(nm, dt, shape, exact, special))
        return True

    def _rollback(self, n_inputs, n_inits, n_values):
        for vi in self.inputs[n_inputs:]:
            self.feeds.pop(vi.name, None)
        del self.inputs[n_inputs:], self.inits[n_inits:], self.values[n_values:]

    def _infer(self, node):
        """(dtype, shape) of each output by strict ONNX shape inference on the node alone, or None."""
        used = set(node.input)
        known = {v.name: v for v in self.values}
        ins = [helper.make_tensor_value_info(n, gdtype(known[n].dtype).onnx, list(known[n].shape))
               for n in node.input if n and n in known]
        inits = [t for t in self.inits if t.name in used]
        g = helper.make_graph([node], "probe", ins, [helper.make_empty_tensor_value_info(o) for o in node.output],
                              inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        try:
            inf = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
        except Exception:  # noqa: BLE001  (onnx raises several types for an invalid node)
            return None
        out = []
        types = {vi.name: vi.type.tensor_type for vi in list(inf.graph.output) + list(inf.graph.value_info)}
        for o in node.output:
            t = types.get(o)
            if t is None or not t.HasField("shape") or not t.elem_type:
                return None
            dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
            if any(x is None or x < 0 for x in dims) or int(np.prod(dims)) > MAX_NUMEL:  # (-1: ONNX gave up)
                return None
            try:
                dt = gdtype(t.elem_type).name
            except Exception:  # noqa: BLE001  (an element type Glow Kit has no name for)
                return None
            out.append((dt, tuple(dims)))
        return out

    def model(self, max_outputs=6) -> onnx.ModelProto:
        produced = [v for v in self.values if not v.name.startswith("in")]
        leaves = [v for v in produced if v.name not in self.consumed]
        others = [v for v in produced if v.name in self.consumed]
        self.rng.shuffle(others)
        outs = (leaves + others[:int(self.rng.integers(0, 3))])[:max_outputs]
        used = {i for n in self.nodes for i in n.input}
        inputs = [vi for vi in self.inputs if vi.name in used]
        outputs = [helper.make_tensor_value_info(v.name, gdtype(v.dtype).onnx, list(v.shape)) for v in outs]
        g = helper.make_graph(self.nodes, "fuzz", inputs, outputs,
                              [t for t in self.inits if t.name in used])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="glowc-fuzz")
        m.ir_version = 10
        return m


def _is_special(a: np.ndarray) -> bool:
    if a.dtype.kind != "f" and a.dtype.name != "bfloat16" or not a.size:
        return False
    f = np.abs(a.astype(np.float64))
    return bool(not np.isfinite(f).all() or f.max() > 1e4 or ((f > 0) & (f < 1e-30)).any())


def _rank_p(lo, hi):
    w = np.array([{0: 0.5, 1: 2, 2: 3, 3: 3, 4: 2}.get(r, 1) for r in range(lo, hi + 1)], float)
    return w / w.sum()


def drawable_ops(ops=None) -> dict[str, Recipe]:
    """op -> recipe for every ONNX (ai.onnx) op the importer accepts (minus ``SKIP``), or for ``ops`` only."""
    onnx_ops = [o for o, d in OPS.items() if not d.domain]
    names = [o for o in onnx_ops if o not in SKIP] if not ops else list(ops)
    out = {}
    for o in names:
        if o not in onnx_ops:
            raise KeyError(o)
        out[o] = RECIPES.get(o) or Recipe("generic", ("float32", "float16", "float64", "int32", "int64", "int8",
                                                      "uint8", "bool"))
    return out


def op_opset(op: str) -> int:
    try:
        return onnx.defs.get_schema(op).since_version
    except onnx.defs.SchemaError:
        return BASE_OPSET


def generate(rng, ops: dict[str, Recipe], max_nodes=30, dtypes=None, special=0.25, stats: Counter | None = None):
    """One random model and its feeds: (ModelProto, {input name: array}); ``stats`` counts rejected nodes."""
    stats = Counter() if stats is None else stats
    names = sorted(ops)
    n_nodes = int(rng.integers(1, max_nodes + 1))
    chosen = [names[int(i)] for i in rng.integers(0, len(names), n_nodes * 3)]
    caps = [ops[o].params["max_opset"] for o in chosen[:n_nodes] if "max_opset" in ops[o].params]
    opset = min([onnx.defs.onnx_opset_version(), max([BASE_OPSET] + [min([op_opset(o)] + (
        [ops[o].params["max_opset"]] if "max_opset" in ops[o].params else [])) for o in chosen[:n_nodes]])] + caps)
    d = Draft(rng, dtypes, special, opset)
    tries = 0
    for op in chosen:
        if len(d.nodes) >= n_nodes:
            break
        tries += 1
        cap = ops[op].params.get("max_opset")
        if (op_opset(op) if cap is None else min(op_opset(op), cap)) > opset or (cap is not None and opset > cap):
            continue
        d.add(op, ops[op], stats)
    if not d.nodes:
        return None, None
    m = d.model()
    try:
        onnx.checker.check_model(m, full_check=True)
    except Exception:  # noqa: BLE001
        stats["rejected-by-checker"] += 1
        return None, None
    return m, {vi.name: d.feeds[vi.name] for vi in m.graph.input}
