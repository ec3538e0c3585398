"""ONNX importer: ModelProto -> Function of high-level nodes with static types.

Handles the ai.onnx domain from opset 7 to the newest the installed onnx knows
(older models are upgraded first: ``legacy.py``) (and the custom domains registered with
``glow_core.ops.custom_op``, and onnxruntime's com.microsoft ops that lower, registered as ``com.microsoft.<op>``),
initializers and Constant nodes, attribute defaults from ONNX's schema for the
model's opset, symbolic dimensions (given concrete values) and inputs that feed
shape operands (given as constants: *specialization*). Every node, in the main
graph and in subgraph bodies (which become ``Function`` attributes), is built
by ``glow_core.builder.build_node``: nodes whose inputs are all constant are
evaluated here (constant folding at import).
"""
from __future__ import annotations

import inspect
import os
from functools import lru_cache
from math import prod

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..builder import build_node
from ..errors import (GlowError, ImportError_, InternalError, MemoryLimitError, ModelLoadError,
                      NeedsSpecialization, ShapeError, UnsupportedOpError)
from ..graph import OUTER, Function, Node, Value
from ..ops.registry import OPS, REQUIRED, get_op, qualified
from ..types import TensorType, dtype
from . import legacy
from .subgraph import all_nodes, node_reads, outer_scope_names

#: What to do with a file that is not an ONNX model.
GIVE_ONNX = "give an ONNX model file (.onnx, as torch.onnx.export or onnx.save write it)"
MIN_OPSET = 1
MAX_OPSET = onnx.defs.onnx_opset_version()
#: Largest element count of one tensor (2^48: beyond any host's memory, far below int64 overflow).
MAX_ELEMENTS = 1 << 48


# -- loading -------------------------------------------------------------------------------------------
def load_model(model) -> tuple[onnx.ModelProto, str | None]:
    """Read a path, bytes or ModelProto; external data must stay inside the model's folder."""
    base_dir = None
    if isinstance(model, onnx.ModelProto):
        return model, None
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        where = "model bytes"
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        where = path
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ModelLoadError(f"cannot read model file '{path}': {e.strerror}; check the path") from None
        base_dir = os.path.dirname(os.path.abspath(path))
    else:
        raise ModelLoadError(f"model must be a path, bytes or onnx.ModelProto, got {type(model).__name__}")
    if not data:
        raise ModelLoadError(f"{where}: empty file, expected an ONNX ModelProto; {GIVE_ONNX}")
    if data[:4] == b"PK\x03\x04":
        raise ModelLoadError(f"{where}: a zip archive (a PyTorch checkpoint as torch.save writes it?), not an ONNX "
                             f"model; export it with torch.onnx.export(model, args, 'model.onnx'), or compile the "
                             f"module itself: glow_core.compile(module, backend, example_inputs=(x, ...))")
    m = onnx.ModelProto()
    try:
        m.ParseFromString(data)
    except Exception as e:  # noqa: BLE001  (protobuf's DecodeError and friends)
        raise ModelLoadError(f"{where}: not a valid ONNX protobuf ({type(e).__name__}: {e}); {GIVE_ONNX}") from None
    if not m.HasField("graph") or (not m.graph.node and not m.graph.output):
        raise ModelLoadError(f"{where}: parsed, but holds no graph (truncated or not an ONNX model?); {GIVE_ONNX}")
    bad = _non_utf8_string(m)
    if bad is not None:
        raise ModelLoadError(f"{where}: string field {bad[0]} is not valid UTF-8 ({bad[1][:40]!r}); "
                             f"the file is corrupt")
    if _has_external(m):
        if base_dir is None:
            raise ModelLoadError(f"{where}: tensors use external data, which needs the model's path, not bytes")
        _load_external(m, base_dir)
    return m, base_dir


def _non_utf8_string(msg, path="model"):
    """(field path, raw bytes) of the first string field that did not decode as UTF-8, or None.

    protobuf hands such proto2 strings back as bytes instead of failing the parse (corrupt files)."""
    for fd, val in msg.ListFields():
        if fd.type not in (fd.TYPE_MESSAGE, fd.TYPE_STRING):
            continue
        for k, x in enumerate(val if fd.is_repeated else [val]):
            where = f"{path}.{fd.name}" + (f"[{k}]" if fd.is_repeated else "")
            if fd.type == fd.TYPE_STRING:
                if isinstance(x, bytes):
                    return where, x
            else:
                r = _non_utf8_string(x, where)
                if r is not None:
                    return r
    return None


def _tensors(g):
    yield from g.initializer
    for n in g.node:
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            for sub in list(a.graphs) + ([a.g] if a.HasField("g") else []):
                yield from _tensors(sub)


def _has_external(m):
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in _tensors(m.graph))


def _load_external(m, base_dir):
    real_base = os.path.realpath(base_dir)
    for t in _tensors(m.graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        full = os.path.realpath(os.path.join(base_dir, loc))
        if not loc or os.path.isabs(loc) or os.path.commonpath([full, real_base]) != real_base:
            raise ModelLoadError(f"tensor '{t.name}': external data location '{loc}' points outside the model's "
                                 f"folder '{base_dir}'; only relative paths inside it are accepted")
        if not os.path.isfile(full):
            raise ModelLoadError(f"tensor '{t.name}': external data file '{loc}' does not exist")
        try:
            offset = int(info.get("offset", 0) or 0)
            length = int(info["length"]) if info.get("length") else None
        except ValueError:
            raise ModelLoadError(f"tensor '{t.name}': external data offset {info.get('offset')!r} and length "
                                 f"{info.get('length')!r} must be non-negative integers") from None
        if offset < 0 or (length is not None and length < 0):
            raise ModelLoadError(f"tensor '{t.name}': external data offset {offset} and length {length} must be "
                                 f"non-negative")
        size = os.path.getsize(full)
        want = length if length is not None else size - offset
        if want < 0 or offset + want > size:
            raise ModelLoadError(f"tensor '{t.name}': external data range [{offset}, {offset + want}) exceeds "
                                 f"file '{loc}' of {size} bytes")
        with open(full, "rb") as f:
            f.seek(offset)
            t.raw_data = f.read(want)
        t.data_location = onnx.TensorProto.DEFAULT
        del t.external_data[:]


# -- attributes ------------------------------------------------------------------------------------------
def _attr_value(a: onnx.AttributeProto):
    v = helper.get_attribute_value(a)
    if isinstance(v, onnx.TensorProto):
        return tensor_to_array(v)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [x.decode("utf-8", "replace") for x in v]
    return v


def node_attrs(node: onnx.NodeProto, opset: int, where: str) -> dict:
    """The node's attributes with ONNX's defaults for this opset filled in."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except onnx.defs.SchemaError:
        schema = None
        if node.domain in ("", "ai.onnx") and onnx.defs.has(node.op_type):
            since = onnx.defs.get_schema(node.op_type).since_version
            first = min(v for v in range(1, since + 1) if onnx.defs.has(node.op_type, v))
            raise ImportError_(f"{where}: {node.op_type} is not defined at opset {opset} (the model's ai.onnx "
                               f"opset); it exists from opset {first}") from None
    if schema is not None:
        n_in, n_out = len(node.input), len(node.output)
        if not schema.min_input <= n_in <= schema.max_input or not schema.min_output <= n_out <= schema.max_output:
            raise ImportError_(f"{where}: {node.op_type} has {n_in} inputs and {n_out} outputs; the schema (opset "
                               f"{opset}) accepts {schema.min_input} to {schema.max_input} inputs and "
                               f"{schema.min_output} to {schema.max_output} outputs")
        single = onnx.defs.OpSchema.FormalParameterOption.Single
        for i, (name, formal) in enumerate(zip(node.input, schema.inputs)):
            if not name and formal.option == single:
                raise ImportError_(f"{where}: input {i} ('{formal.name}') of {node.op_type} is required but given "
                                   f"as '' (absent); only optional inputs may be left empty")
        for a in node.attribute:
            if a.name not in schema.attributes:
                raise ImportError_(f"{where}: unknown attribute '{a.name}' for {node.op_type} at opset {opset}; "
                                   f"accepted: {', '.join(sorted(schema.attributes)) or 'none'}")
            want = schema.attributes[a.name].type
            if a.type != want:
                name = onnx.AttributeProto.AttributeType.Name
                got = name(a.type) if a.type in onnx.AttributeProto.AttributeType.values() else str(a.type)
                raise ImportError_(f"{where}: attribute '{a.name}' of {node.op_type} has type {got}; the schema "
                                   f"(opset {opset}) declares {name(want)}")
    try:
        attrs = {a.name: _attr_value(a) for a in node.attribute}
    except (ValueError, TypeError) as e:  # a value that does not decode as its declared type
        raise ImportError_(f"{where}: attribute value cannot be read: {e}") from None
    if schema is not None:
        for name, a in schema.attributes.items():
            if name in attrs:
                continue
            if a.required:
                raise ImportError_(f"{where}: required attribute '{name}' is missing")
            if a.default_value.type != onnx.AttributeProto.UNDEFINED:
                attrs[name] = _attr_value(a.default_value)
            else:
                attrs[name] = None
    return attrs


def tensor_to_array(t: onnx.TensorProto) -> np.ndarray:
    """A TensorProto as a numpy array; its stored size must match its dims."""
    name = t.name or "<unnamed>"
    try:
        dt = dtype(t.data_type)
    except GlowError as e:
        raise ImportError_(f"tensor '{name}': {e}") from None
    if t.data_location == onnx.TensorProto.EXTERNAL:
        raise ImportError_(f"tensor '{name}': external data was not loaded")
    n = prod(t.dims)
    if t.HasField("raw_data"):
        bits = {"int4": 4, "uint4": 4, "float4e2m1": 4}.get(dt.name, dt.itemsize * 8)
        want = (n * bits + 7) // 8
        if len(t.raw_data) != want:
            raise ImportError_(f"tensor '{name}': raw data holds {len(t.raw_data)} bytes but {dt.name} "
                               f"{list(t.dims)} needs {want}")
    try:
        arr = numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001
        raise ImportError_(f"tensor '{name}': cannot decode data of {dt.name} {list(t.dims)}: {e}") from None
    if arr.size != n:
        raise ImportError_(f"tensor '{name}': holds {arr.size} elements but dims {list(t.dims)} need {n}")
    return np.ascontiguousarray(arr).reshape(tuple(t.dims))  # (ascontiguousarray makes 0-d arrays 1-d)


# -- import ------------------------------------------------------------------------------------------------
def model_opset(m: onnx.ModelProto) -> int:
    ops = {o.domain or "": o.version for o in m.opset_import}
    if "" not in ops and "ai.onnx" not in ops:
        if not m.opset_import:
            raise ImportError_("model declares no opset_import; expected the ai.onnx domain")
        return MAX_OPSET
    v = ops.get("", ops.get("ai.onnx"))
    if not MIN_OPSET <= v <= MAX_OPSET:
        raise ImportError_(f"model uses ai.onnx opset {v}; this importer accepts opsets {MIN_OPSET} to {MAX_OPSET}")
    return v


def graph_input_specs(m: onnx.ModelProto) -> list[tuple[str, int, list]]:
    """(name, onnx elem type, dims with str for symbolic) of each real graph input."""
    inits = {t.name for t in m.graph.initializer}
    specs = []
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedOpError(f"graph input '{vi.name}' is not a tensor (sequence, map and optional inputs "
                                     f"are not supported)")
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
        if any(isinstance(d, int) and d < 0 for d in dims):
            raise ImportError_(f"graph input '{vi.name}': declared shape {dims} has a negative dim; "
                               f"dims must be >= 0 or symbolic")
        if prod(d for d in dims if isinstance(d, int)) > MAX_ELEMENTS:
            raise MemoryLimitError(f"graph input '{vi.name}': declared shape {dims} has more than {MAX_ELEMENTS} "
                                   f"elements; no tensor that large fits in memory")
        specs.append((vi.name, tt.elem_type, dims))
    return specs


def shape_operand_inputs(m: onnx.ModelProto) -> set[str]:
    """Graph inputs whose values reach an input that determines a shape (to be specialized)."""
    producers = {o: n for n in all_nodes(m.graph) for o in n.output}  # subgraph nodes included
    graph_inputs = {vi.name for vi in m.graph.input} - {t.name for t in m.graph.initializer}
    wanted: set[str] = set()
    stack = []
    for n in all_nodes(m.graph):
        d = get_op(n.op_type)
        if d is None:
            continue
        for i in d.const_inputs:
            if i < len(n.input) and n.input[i]:
                stack.append(n.input[i])
    seen = set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in graph_inputs:
            wanted.add(v)
        p = producers.get(v)
        if p is not None and p.op_type not in ("Shape", "Size"):
            stack.extend(node_reads(p))
    return wanted


def _toposort_nodes(g) -> list:
    produced = {}
    for i, n in enumerate(g.node):
        for o in n.output:
            if o:
                if o in produced:
                    first = g.node[produced[o]]
                    raise ImportError_(f"value '{o}' is produced twice: by node '{first.name or first.op_type}' "
                                       f"({first.op_type}) and node '{n.name or n.op_type}' ({n.op_type}); "
                                       f"each value must have exactly one producer")
                produced[o] = i
    order, state = [], {}

    def visit(i0):
        stack = [(i0, 0)]
        state[i0] = 1
        while stack:
            i, k = stack.pop()
            n = g.node[i]
            ins = [x for x in node_reads(n) if x in produced]  # subgraphs' outer-scope reads too
            if k < len(ins):
                stack.append((i, k + 1))
                j = produced[ins[k]]
                if state.get(j) == 1:
                    raise ImportError_(f"cycle in graph: node '{g.node[j].name or g.node[j].op_type}' "
                                       f"({g.node[j].op_type}) depends on its own output")
                if j not in state:
                    state[j] = 1
                    stack.append((j, 0))
            else:
                state[i] = 2
                order.append(n)

    for i in range(len(g.node)):
        if i not in state:
            visit(i)
    return order


def import_model(m: onnx.ModelProto, input_shapes: dict | None = None, constants: dict | None = None,
                 name: str = "main", initializers: dict | None = None) -> Function:
    """Build the high-level Function of an ONNX model.

    ``input_shapes`` gives concrete shapes for inputs with symbolic dims; ``constants`` gives values for
    inputs to specialize (those feeding shape operands); ``initializers`` (name -> array), when given, is filled
    with the initializers' arrays and reused: several imports of one model (for several input shapes) then hold
    its weights once. Raises a ``GlowError`` naming the element at fault. A model of an ai.onnx opset older than
    ``legacy.NATIVE_MIN_OPSET`` is first upgraded (``legacy.upgrade``); one the version converter cannot upgrade
    is imported at its own opset, its errors saying why.
    """
    if legacy.needs_upgrade(m):
        upgraded, why = legacy.upgrade(m)
        if upgraded is None:
            try:
                return _import(m, input_shapes, constants, name, initializers)
            except GlowError as e:
                if isinstance(e, NeedsSpecialization):
                    raise
                e.args = (f"{e} ({why})",) + e.args[1:]
                raise
        m = upgraded
    return _import(m, input_shapes, constants, name, initializers)


def _import(m: onnx.ModelProto, input_shapes, constants, name, initializers) -> Function:
    input_shapes = input_shapes or {}
    constants = constants or {}
    opset = model_opset(m)
    fn = Function(m.graph.name or name)
    env: dict[str, Value] = {}
    for nm, elem, dims in graph_input_specs(m):
        try:
            dt = dtype(elem)
        except GlowError as e:
            raise UnsupportedOpError(f"graph input '{nm}': {e}") from None
        if nm in constants:
            arr = np.asarray(constants[nm])
            env[nm] = fn.constant(arr.astype(dt.np, copy=False), nm)
            continue
        shape = input_shapes.get(nm)
        if shape is None:
            if any(not isinstance(d, int) for d in dims):
                raise ImportError_(f"graph input '{nm}' has symbolic shape {dims}; give concrete dims "
                                   f"(input_shapes={{'{nm}': (...)}}) or run it once with inputs")
            shape = dims
        else:
            shape = tuple(int(s) for s in shape)
            if len(shape) != len(dims) or any(isinstance(d, int) and d != s for d, s in zip(dims, shape)):
                raise ImportError_(f"graph input '{nm}': shape {shape} does not match declared {dims}")
        try:
            ty = TensorType(dt, shape)
        except GlowError as e:
            raise type(e)(f"graph input '{nm}': {e}") from None
        env[nm] = fn.add_input(nm, ty)
        env[nm].onnx_name = nm
    for t in m.graph.initializer:
        if t.name not in env:
            arr = None if initializers is None else initializers.get(t.name)
            if arr is None:
                arr = tensor_to_array(t)
                if initializers is not None:
                    initializers[t.name] = arr
            env[t.name] = fn.constant(arr, t.name or "init")
    if len(m.graph.sparse_initializer):
        raise UnsupportedOpError(f"sparse initializer '{m.graph.sparse_initializer[0].values.name}' is not supported")
    _import_nodes(fn, m.graph, env, opset)
    outputs, names = [], []
    for vi in m.graph.output:
        if vi.name not in env:
            raise ImportError_(f"graph output '{vi.name}' is not produced by any node")
        v = env[vi.name]
        tt = vi.type.tensor_type
        if tt.elem_type and dtype(tt.elem_type) != v.dtype:
            raise ShapeError(f"graph output '{vi.name}': declared {dtype(tt.elem_type)} but computed {v.dtype}")
        outputs.append(v)
        names.append(vi.name)
    fn.set_outputs(outputs, names)
    return fn


ONNX_DOMAINS = ("", "ai.onnx", "ai.onnx.preview")


def _op_of(n: onnx.NodeProto, where: str):
    """The OpDef of an ONNX node: an ai.onnx op, or a custom op registered for the node's domain."""
    d = get_op(n.op_type)
    if n.domain not in ONNX_DOMAINS:
        d = get_op(qualified(n.domain, n.op_type)) or d
        custom = sorted({o.domain for o in OPS.values() if o.domain})
        if n.domain not in custom:
            raise UnsupportedOpError(f"{where}: domain '{n.domain}' is not supported; accepted: ai.onnx, "
                                     f"ai.onnx.preview" + (f", and the registered custom domains "
                                                           f"{', '.join(custom)}" if custom else "")
                                     + " (register a custom op with glow_core.ops.custom_op)")
        if d is None or d.domain != n.domain:
            raise UnsupportedOpError(f"{where}: op {n.op_type} is not registered in domain '{n.domain}'; it has "
                                     f"{', '.join(sorted(o.name for o in OPS.values() if o.domain == n.domain))}")
        return d
    if d is None or d.domain:
        raise UnsupportedOpError(f"{where}: op {n.op_type} is not supported by the importer")
    return d


def _check_input_types(n: onnx.NodeProto, ins: list, opset: int, where: str):
    """Inputs whose schema type is one fixed tensor type (a shape, sizes, an axes list: ``tensor(int64)``) must
    have it, and inputs typed by the same type variable (``T``) must have the same element type; which types a
    variable admits is left to the op's own checks."""
    try:
        formals = list(onnx.defs.get_schema(n.op_type, opset, n.domain or "").inputs)
    except onnx.defs.SchemaError:
        return
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    if formals and formals[-1].option == variadic and formals[-1].is_homogeneous:
        formals += [formals[-1]] * (len(ins) - len(formals))
    seen = {}
    for i, (v, formal) in enumerate(zip(ins, formals)):
        want = formal.type_str
        if v is None or v.type is None:
            continue
        if want.startswith("tensor("):
            got = f"tensor({onnx.TensorProto.DataType.Name(v.dtype.onnx).lower()})"
            if got != want:
                raise ShapeError(f"{where}: input {i} ('{formal.name}') is {v.dtype.name}; the schema (opset "
                                   f"{opset}) accepts {want[7:-1]} only")
        elif want in seen and seen[want][1].dtype != v.dtype:
            j, u = seen[want]
            raise ShapeError(f"{where}: inputs {j} and {i} are {u.dtype.name} and {v.dtype.name}; the schema "
                               f"(opset {opset}) types both {want}, so they must have the same element type")
        else:
            seen.setdefault(want, (i, v))


def _check_schema_inference(n: onnx.NodeProto, ins: list, opset: int, where: str):
    """ONNX's own type and shape inference of the node's schema on its typed inputs, run when the op's lowering
    failed internally: operands or attributes the specification does not admit (a type outside the schema's
    constraint, an axis out of range, a non-positive group) are refused with the schema's reason (ShapeError)."""
    try:
        schema = onnx.defs.get_schema(n.op_type, opset, n.domain or "")
    except onnx.defs.SchemaError:
        return
    if any(x and (v is None or v.type is None) for x, v in zip(n.input, ins)):
        return  # an operand typed only when a body is inlined
    types = {x: helper.make_tensor_type_proto(v.dtype.onnx, list(v.shape)) for x, v in zip(n.input, ins) if x}
    try:
        onnx.shape_inference.infer_node_outputs(schema, n, types, opset_imports=[helper.make_opsetid("", opset)])
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as e:
        msg = " ".join(str(e).split())
        raise ShapeError(f"{where}: the opset {opset} schema refuses its operands "
                         f"({', '.join(str(v.type) for v in ins if v is not None)}): {msg}") from None


@lru_cache(maxsize=None)
def _parameters(f) -> tuple[int, int | None, frozenset | None, frozenset]:
    """(required inputs, most inputs or None, accepted attribute names or None for any, required attributes) of
    a lowering ``(b, *inputs, **attrs)`` or a kept-whole kernel ``(*arrays, **attrs)``."""
    params = list(inspect.signature(f).parameters.values())
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    kw = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
    varkw = any(p.kind == p.VAR_KEYWORD for p in params)
    return (sum(p.default is p.empty for p in pos), None if varargs else len(pos),
            None if varkw else frozenset(p.name for p in kw),
            frozenset(p.name for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty))


def _fit_signature(d, n: onnx.NodeProto, n_inputs: int, attrs: dict, opset: int, where: str) -> dict:
    """The node's inputs and attributes against what this importer's op takes (its lowering's or kernel's
    signature): too few or too many inputs, or an attribute the node sets that the op does not take (one of an
    older opset's schema), is an ImportError_; unset schema defaults it does not take are dropped."""
    lo, hi, accepted, required = _parameters(d.lower) if d.lower else _parameters(d.kernel)
    if d.lower:
        lo, hi = lo - 1, None if hi is None else hi - 1  # the builder
    if n_inputs < lo or (hi is not None and n_inputs > hi):
        takes = str(lo) if hi == lo else f"at least {lo}" if hi is None else f"{lo} to {hi}"
        raise ImportError_(f"{where}: {n_inputs} inputs given; this importer's {n.op_type} takes {takes} inputs")
    missing = sorted(r for r in required if attrs.get(r) is None)
    if missing:
        raise ImportError_(f"{where}: required attribute(s) {missing} of {n.op_type} are missing")
    if accepted is None:
        return attrs
    unknown = sorted(a.name for a in n.attribute if a.name not in accepted)
    if unknown:
        raise ImportError_(f"{where}: attribute(s) {unknown} (of the opset {opset} schema) are not supported by "
                           f"this importer's {n.op_type}; it takes {', '.join(sorted(accepted)) or 'none'}")
    return {k: v for k, v in attrs.items() if k in accepted}


def _import_nodes(fn: Function, g: onnx.GraphProto, env: dict, opset: int, template: bool = False):
    """Build every node of ``g`` into ``fn`` through ``build_node``, reading and extending ``env`` (ONNX name
    -> Value). Subgraph attributes become body Functions (``_import_body``)."""
    for idx, n in enumerate(_toposort_nodes(g)):
        name = _node_name(n, idx)
        where = f"node '{name}' ({n.op_type})"
        d = _op_of(n, where)
        ins = []
        for i, x in enumerate(n.input):
            if not x:
                ins.append(None)
            elif x not in env:
                raise ImportError_(f"{where}: input {i} '{x}' is not defined by any node, initializer or "
                                   f"{'subgraph input or outer-scope value' if template else 'graph input'}")
            else:
                ins.append(env[x])
        while ins and ins[-1] is None:
            ins.pop()
        attrs = custom_attrs(n, d, where) if d.domain else node_attrs(n, opset, where)
        if d.lower:
            attrs = _fit_signature(d, n, len(ins), attrs, opset, where)
        if not d.domain:
            _check_input_types(n, ins, opset, where)
        outer = outer_scope_names(n, env)  # values its subgraphs read become explicit inputs
        for k, a in list(attrs.items()):
            if isinstance(a, onnx.GraphProto):
                attrs[k] = _import_body(a, outer, env, opset, f"subgraph '{a.name}' ({k}) of {where}")
        if outer:
            ins, attrs[OUTER] = ins + [env[x] for x in outer], outer
        node = Node(d.name, ins, attrs, [], name, opset)
        try:
            outs = build_node(fn, node, len(n.output), template=template)
        except InternalError:
            if not d.domain:
                _check_schema_inference(n, ins, opset, where)
            raise
        for o, v in zip(n.output, outs):
            if o:
                env[o] = v
                if v.onnx_name is None and not v.is_const:
                    v.onnx_name = o


def _import_body(g: onnx.GraphProto, outer: list[str], env: dict, opset: int, where: str) -> Function:
    """A subgraph as a closed body Function: its formal inputs (typed as declared, when the declaration is
    complete), then one input per captured outer-scope name, its nodes built like the main graph's (a node whose
    types depend on values bound only at inlining stays untyped), and its outputs."""
    body = Function(g.name or "body")
    benv: dict[str, Value] = {}
    for vi in g.input:
        benv[vi.name] = body.add_input(vi.name, _declared_type(vi))
    for x in outer:
        if x not in benv:  # a formal input shadows an outer name of the same name
            benv[x] = body.add_input(x, env[x].type)
        else:
            body.add_input(x, env[x].type)  # unused, but the inputs line up with the node's captures
    for t in g.initializer:
        benv[t.name] = body.constant(tensor_to_array(t), t.name or "init")
    try:
        _import_nodes(body, g, benv, opset, template=True)
    except GlowError as e:  # the same error, placed: which subgraph of which node
        e.args = (f"{where}: {e.args[0] if e.args else ''}",) + e.args[1:]
        raise
    missing = [o.name for o in g.output if o.name not in benv]
    if missing:
        raise ImportError_(f"{where}: output(s) {missing} are not produced")
    body.set_outputs([benv[o.name] for o in g.output], [o.name for o in g.output])
    return body


def _declared_type(vi: onnx.ValueInfoProto) -> TensorType | None:
    """A subgraph input's declared type when it is a tensor with every dim given, else None (decided when the
    body is inlined)."""
    kind = vi.type.WhichOneof("value")
    if kind is None:
        return None  # no type declared: the bound value's
    if kind != "tensor_type":
        raise UnsupportedOpError(f"subgraph input '{vi.name}' is a {kind.replace('_type', '')}, not a tensor "
                                 f"(sequence, map and optional values are not supported)")
    tt = vi.type.tensor_type
    if not tt.elem_type or not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
        return None
    try:
        return TensorType(dtype(tt.elem_type), tuple(d.dim_value for d in tt.shape.dim))
    except GlowError as e:
        raise UnsupportedOpError(f"subgraph input '{vi.name}': {e}") from None


def custom_attrs(node: onnx.NodeProto, d, where: str) -> dict:
    """A custom-domain node's attributes with the defaults its record declares."""
    attrs = {a.name: _attr_value(a) for a in node.attribute}
    unknown = sorted(set(attrs) - set(d.attrs))
    if unknown:
        raise ImportError_(f"{where}: unknown attribute(s) {unknown} for {d.domain}.{d.name}; accepted: "
                           f"{', '.join(sorted(d.attrs)) or 'none'}")
    missing = [k for k, default in d.attrs.items() if default is REQUIRED and k not in attrs]
    if missing:
        raise ImportError_(f"{where}: required attribute(s) {missing} of {d.domain}.{d.name} are missing")
    return {k: attrs.get(k, default) for k, default in d.attrs.items()}


def _node_name(n, idx):
    return n.name or f"{n.op_type}_{idx}"
