"""Serving a model on Ray Serve with the Open Inference Protocol v2 (the REST API of KServe, NVIDIA Triton and
MLServer), so that existing clients (``tritonclient.http``, plain HTTP) work unchanged.

``deployment(model, backend="cpu", devices=1, max_batch_size=8, **compile_options)`` returns a Ray Serve
application (``ray.serve.run(app, route_prefix="/")`` serves it; ``glowc serve`` does it from the command line).
Each replica holds one ``glow_core.runtime.Host`` with ``devices`` devices of ``backend`` (a vendor's
``device_class``; ``ray_actor_options={"resources": {"acme_npu": 1}}`` places replicas on the machines that have
the card: vendor_guide/serving.md), so device faults are retried inside the replica.

Endpoints: ``GET /v2/health/live``, ``GET /v2/health/ready`` (ready while every partition has a healthy
device), ``GET /v2`` (server metadata), ``GET /v2/models/{name}`` (inputs and outputs with OIP datatypes and
shapes, -1 for the batch dimension), ``GET /v2/models/{name}/ready``, ``POST /v2/models/{name}/infer`` (also under
``/versions/1``). Tensors come as JSON (``data``, flat or nested, row-major) or as binary data after the JSON
header (the ``Inference-Header-Content-Length`` extension; ``binary_data_size`` per input); outputs come back
as JSON, or binary when asked (``binary_data`` per output or ``binary_data_output``). A gzip or deflate request
body (``Content-Encoding``) is accepted.

Batching: a model whose every input has a symbolic leading dimension (and whose outputs follow it) is compiled
for batches of 1, 2, 4, ... up to ``max_batch_size`` rows; requests of 1 to ``max_batch_size`` rows each are
gathered by ``serve.batch`` (up to ``max_batch_size`` rows, waiting at most ``batch_wait_timeout_s``; one batch
per device at once),
concatenated, run as power-of-two chunks (largest first; the Host spreads them over the devices) and split back.
Any other model runs requests one by one (the Host still overlaps them across devices).

Every bad request gets an OIP error, ``{"error": "..."}`` naming the problem, with a 4xx status: 400 (malformed
JSON, unknown or missing input, wrong datatype or shape, bad data), 404 (unknown model, version or path), 405,
413 (body over ``max_body_bytes``); 503 when no healthy device is left or the queue is full; 500 otherwise.
Ray is imported only when a deployment is made.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import zlib
from dataclasses import dataclass
from math import prod

import numpy as np

from . import __version__
from .errors import DeviceUnavailable, GlowError, InputError, ModelLoadError, RequestRefused
from .importer.onnx_import import graph_input_specs, load_model
from .runtime import Host
from .types import DType, dtype

INSTALL = "pip install 'glow-kit[serve]'"

#: The Open Inference Protocol's datatype for each kit dtype it can carry (BF16 is Triton's extension).
OIP_DATATYPES = {"bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64",
                 "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64", "float16": "FP16",
                 "float32": "FP32", "float64": "FP64", "bfloat16": "BF16"}

#: JSON data elements each dtype kind accepts (numpy kinds of the parsed list).
_JSON_KINDS = {"bool": "b", "int": "iu", "uint": "iu", "float": "iuf"}


def _ray_serve():
    """``ray.serve``, or a GlowError saying how to install it."""
    try:
        from ray import serve
    except ImportError as e:
        raise GlowError(f"serving needs Ray Serve, which is not installed ({e}); install it with: {INSTALL}") \
            from None
    return serve


@dataclass(frozen=True)
class Tensor:
    """One input or output as the server shows it: OIP datatype and shape (-1 for the batch dimension)."""

    name: str
    dtype: DType
    shape: tuple[int, ...]

    @property
    def datatype(self) -> str:
        return OIP_DATATYPES[self.dtype.name]

    def metadata(self) -> dict:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass(frozen=True)
class ModelSpec:
    """What a replica serves: the model's OIP name, its inputs and outputs, and its batching."""

    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    batched: bool
    max_batch_size: int
    platform: str

    def metadata(self) -> dict:
        return {"name": self.name, "versions": ["1"], "platform": self.platform,
                "inputs": [t.metadata() for t in self.inputs], "outputs": [t.metadata() for t in self.outputs],
                "parameters": {"max_batch_size": self.max_batch_size if self.batched else 0}}


def _oip_dtype(elem: int, what: str) -> DType:
    dt = dtype(elem)
    if dt.name not in OIP_DATATYPES:
        raise GlowError(f"{what} is {dt.name}, which the Open Inference Protocol has no datatype for; it carries "
                        f"{', '.join(OIP_DATATYPES)}")
    return dt


def batch_sizes(max_batch_size: int) -> list[int]:
    """The batch sizes a batched model is compiled for: powers of two up to ``max_batch_size``."""
    out, b = [], 1
    while b <= max_batch_size:
        out.append(b)
        b *= 2
    return out


def chunks(rows: int, largest: int) -> list[int]:
    """``rows`` as compiled batch sizes, largest first (7 -> 4, 2, 1 when 4 is the largest)."""
    out = []
    while rows:
        b = largest
        while b > rows:
            b //= 2
        out.append(b)
        rows -= b
    return out


def is_batched(model, compile_options: dict) -> bool:
    """Whether requests batch along the leading dimension: every input's is one and the same symbolic dimension
    and ``input_shapes`` does not fix the shapes."""
    m, _ = load_model(model)
    specs = graph_input_specs(m)
    if compile_options.get("input_shapes") or not specs:
        return False
    leads = {dims[0] if dims else None for _, _, dims in specs}
    return len(leads) == 1 and isinstance(next(iter(leads)), str)


class _HttpError(Exception):
    """An OIP error response: status and message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class GlowModelServer:
    """A Ray Serve replica: one Host with its devices serving one model over OIP v2 (module docstring).
    Constructed by Ray Serve from ``deployment``'s arguments."""

    def __init__(self, model: bytes, name: str, backend: str, devices: int, max_batch_size: int,
                 batch_wait_timeout_s: float, max_body_bytes: int | None, host_options: dict, device_class,
                 compile_options: dict):
        self.host = Host(**host_options)
        self.host.add_device(backend, count=devices, device_class=device_class)  # None: the backend's own
        platform = f"glow-kit {__version__} ({self.host.devices[0].backend.name})"
        batched = is_batched(model, compile_options)
        if batched:
            sizes = batch_sizes(max_batch_size)
            m, _ = load_model(model)
            for b in sizes:
                shapes = {nm: (b, *dims[1:]) for nm, _, dims in graph_input_specs(m)}
                self.host.add_network(f"{name}/b{b}", model, input_shapes=shapes, **compile_options)
            self._largest = sizes[-1]
            sig = self.host.signature(f"{name}/b1")
            if len(sizes) > 1:
                wrong = [nm for nm, _, shape in self.host.signature(f"{name}/b2")["outputs"]
                         if not shape or shape[0] != 2]
                if wrong:
                    raise GlowError(f"model '{name}': its inputs have a batch dimension but outputs {wrong} do not "
                                    f"follow it; serve it with max_batch_size=1")
            self._networks = [f"{name}/b{b}" for b in sizes]
        else:
            self.host.add_network(name, model, **compile_options)
            sig = self.host.signature(name)
            self._networks = [name]

        def tensors(rows, kind):
            return tuple(Tensor(nm, _oip_dtype(dt.onnx, f"{kind} '{nm}'"), (-1, *shape[1:]) if batched else shape)
                         for nm, dt, shape in rows)
        self.spec = ModelSpec(name, tensors(sig["inputs"], "input"), tensors(sig["outputs"], "output"), batched,
                              max_batch_size, platform)
        rows = max_batch_size if batched else 1
        need = rows * sum(prod(t.shape[1:] if batched else t.shape) for t in self.spec.inputs)
        self.max_body_bytes = max_body_bytes or max(16 << 20, 32 * need + (1 << 20))
        self._batch = None
        if batched:
            serve = _ray_serve()
            self._batch = serve.batch(max_batch_size=max_batch_size, batch_wait_timeout_s=batch_wait_timeout_s,
                                      max_concurrent_batches=devices,  # a batch per device at once
                                      batch_size_fn=lambda items: sum(rows for _, rows in items))(self._run_batch)

    # -- HTTP ---------------------------------------------------------------------------------------------
    async def __call__(self, request):
        from starlette.responses import Response
        try:
            status, body, headers = await self._route(request)
        except _HttpError as e:
            status, body, headers = e.status, {"error": str(e)}, {}
        except (DeviceUnavailable, RequestRefused) as e:
            status, body, headers = 503, {"error": str(e)}, {}
        except InputError as e:
            status, body, headers = 400, {"error": str(e)}, {}
        except GlowError as e:
            status, body, headers = 500, {"error": f"model '{self.spec.name}': {e}"}, {}
        except Exception as e:  # noqa: BLE001  (any failure is an OIP error response, never a crashed replica)
            status, body, headers = 500, {"error": f"internal error: {type(e).__name__}: {e}"}, {}
        if isinstance(body, (bytes, bytearray)):
            return Response(bytes(body), status_code=status, headers=headers, media_type="application/octet-stream")
        return Response(json.dumps(body).encode(), status_code=status, headers=headers, media_type="application/json")

    async def _route(self, request):
        path = request.scope.get("path", "/")
        root = request.scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):]
        parts = [p for p in path.split("/") if p]
        method = request.method
        if parts[:1] != ["v2"]:
            raise _HttpError(404, f"no such endpoint '{path}'; this is an Open Inference Protocol v2 server (/v2/...)")
        rest = parts[1:]
        if rest in ([], ["health", "live"], ["health", "ready"]):
            _allow(method, "GET", path)
            if not rest:
                return 200, {"name": "glow-kit", "version": __version__, "extensions": ["binary_tensor_data"]}, {}
            if rest[1] == "live":
                return 200, {"live": True}, {}
            ready = self.ready()
            return (200 if ready else 503), {"ready": ready}, {}
        if rest[:1] != ["models"] or len(rest) < 2:
            raise _HttpError(404, f"no such endpoint '{path}'; the endpoints are /v2/health/live, /v2/health/ready, "
                                  f"/v2/models/{{name}}, /v2/models/{{name}}/ready and /v2/models/{{name}}/infer")
        name, tail = rest[1], rest[2:]
        if name != self.spec.name:
            raise _HttpError(404, f"unknown model '{name}'; this server serves '{self.spec.name}'")
        if tail[:1] == ["versions"]:
            if len(tail) < 2 or tail[1] != "1":
                raise _HttpError(404, f"model '{name}' has no version '{'/'.join(tail[1:2])}'; its only version is 1")
            tail = tail[2:]
        if not tail:
            _allow(method, "GET", path)
            return 200, self.spec.metadata(), {}
        if tail == ["ready"]:
            _allow(method, "GET", path)
            ready = self.ready()
            return (200 if ready else 503), {"name": name, "ready": ready}, {}
        if tail == ["infer"]:
            _allow(method, "POST", path)
            return await self._infer(request)
        raise _HttpError(404, f"no such endpoint '{path}' for model '{name}'")

    def ready(self) -> bool:
        """Every partition of the model (at every batch size) has a healthy device."""
        return all(self.host.ready(n) for n in self._networks)

    async def _body(self, request) -> bytes:
        limit = self.max_body_bytes
        size = request.headers.get("content-length")
        if size is not None:
            if not size.isdigit():
                raise _HttpError(400, f"Content-Length {size!r} is not a number of bytes")
            if int(size) > limit:
                raise _HttpError(413, f"request body of {int(size)} bytes is over this server's limit of {limit} "
                                      f"bytes (max_body_bytes)")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise _HttpError(413, f"request body over this server's limit of {limit} bytes (max_body_bytes)")
        encoding = request.headers.get("content-encoding", "identity").strip().lower()
        if encoding in ("gzip", "deflate"):
            d = zlib.decompressobj(zlib.MAX_WBITS | (16 if encoding == "gzip" else 0))
            try:
                plain = d.decompress(bytes(body), limit + 1)
            except zlib.error as e:
                raise _HttpError(400, f"request body is not valid {encoding} data: {e}") from None
            if len(plain) > limit or d.unconsumed_tail:
                raise _HttpError(413, f"decompressed request body over this server's limit of {limit} bytes "
                                      f"(max_body_bytes)")
            body = bytearray(plain)
        elif encoding != "identity":
            raise _HttpError(400, f"Content-Encoding {encoding!r} is not supported; send identity, gzip or deflate")
        return body

    async def _infer(self, request):
        body = await self._body(request)
        header_len = request.headers.get("inference-header-content-length")
        inputs, rows, wanted, req_id = parse_infer_request(body, header_len, self.spec)
        if self._batch is not None:
            result = await self._batch((inputs, rows))
            if isinstance(result, BaseException):
                raise result
        else:
            result = await asyncio.wrap_future(self.host.run(self._networks[0], inputs))
        return infer_response(self.spec, result, wanted, req_id)

    async def _run_batch(self, items: list) -> list:
        """One serve.batch batch: concatenate, run in power-of-two chunks, split back (an error goes to all)."""
        names = [t.name for t in self.spec.inputs]
        if len(items) == 1:
            joined = items[0][0]
        else:
            joined = {nm: np.concatenate([inp[nm] for inp, _ in items]) for nm in names}
        total = sum(rows for _, rows in items)
        futures, start = [], 0
        for b in chunks(total, self._largest):
            futures.append(self.host.run(f"{self.spec.name}/b{b}", {nm: joined[nm][start:start + b] for nm in names}))
            start += b
        try:
            results = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        except Exception as e:  # noqa: BLE001  (the batch's requests all get its error)
            return [e] * len(items)
        outs = [t.name for t in self.spec.outputs]
        merged = results[0] if len(results) == 1 else {nm: np.concatenate([r[nm] for r in results]) for nm in outs}
        split, start = [], 0
        for _, rows in items:
            split.append({nm: merged[nm][start:start + rows] for nm in outs})
            start += rows
        return split

    def stats(self) -> dict:
        """The replica's Host statistics (``Host.stats``)."""
        return self.host.stats()

    def __del__(self):
        host = getattr(self, "host", None)
        if host is not None:
            host.close(timeout=5)


def _allow(method: str, allowed: str, path: str):
    if method != allowed:
        raise _HttpError(405, f"{method} {path}: this endpoint takes {allowed}")


def parse_infer_request(body: bytes, header_len: str | None, spec: ModelSpec):
    """An OIP v2 infer request -> (inputs by name as arrays, rows, [(output name, binary?)], request id).
    _HttpError(400) names what is wrong."""
    binary = b""
    if header_len is not None:
        if not header_len.strip().isdigit() or int(header_len) > len(body):
            raise _HttpError(400, f"Inference-Header-Content-Length {header_len!r} is not a size within the "
                                  f"{len(body)}-byte body")
        n = int(header_len)
        body, binary = body[:n], memoryview(body)[n:]
    try:
        req = json.loads(bytes(body))
    except (ValueError, UnicodeDecodeError) as e:
        raise _HttpError(400, f"malformed JSON in the inference request: {e}") from None
    if not isinstance(req, dict) or not isinstance(req.get("inputs"), list):
        raise _HttpError(400, "an inference request is a JSON object with a list 'inputs' of tensors")
    req_id = req.get("id")
    params = req.get("parameters") or {}
    if not isinstance(params, dict):
        raise _HttpError(400, "'parameters' of the request must be an object")
    by_name = {t.name: t for t in spec.inputs}
    takes = ", ".join(f"'{t.name}' ({t.datatype} {list(t.shape)})" for t in spec.inputs)
    inputs, offset, rows = {}, 0, None
    for i, item in enumerate(req["inputs"]):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise _HttpError(400, f"inputs[{i}] must be an object with a 'name'")
        nm = item["name"]
        t = by_name.get(nm)
        if t is None:
            raise _HttpError(400, f"unknown input '{nm}'; model '{spec.name}' takes {takes}")
        if nm in inputs:
            raise _HttpError(400, f"input '{nm}' is given twice")
        if item.get("datatype") != t.datatype:
            raise _HttpError(400, f"input '{nm}': datatype {item.get('datatype')!r} given, the model expects "
                                  f"{t.datatype}")
        shape = item.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise _HttpError(400, f"input '{nm}': 'shape' must be a list of sizes, got {shape!r}")
        if len(shape) != len(t.shape) or any(w not in (-1, g) for w, g in zip(t.shape, shape)):
            raise _HttpError(400, f"input '{nm}': shape {shape} given, the model takes {list(t.shape)}")
        if spec.batched:
            if not 1 <= shape[0] <= spec.max_batch_size:
                raise _HttpError(400, f"input '{nm}': batch of {shape[0]} rows; this server takes 1 to "
                                      f"{spec.max_batch_size} rows per request (max_batch_size)")
            if rows is not None and shape[0] != rows:
                raise _HttpError(400, f"input '{nm}': batch of {shape[0]} rows, other inputs have {rows}")
            rows = shape[0]
        ip = item.get("parameters") or {}
        size = ip.get("binary_data_size") if isinstance(ip, dict) else None
        if size is not None:
            want = prod(shape) * t.dtype.itemsize
            if size != want:
                raise _HttpError(400, f"input '{nm}': binary_data_size {size}, a {t.datatype} tensor of shape "
                                      f"{shape} takes {want} bytes")
            if offset + size > len(binary):
                raise _HttpError(400, f"input '{nm}': binary data ends after {len(binary) - offset} of its {size} "
                                      f"bytes")
            raw = binary[offset:offset + size]
            offset += size
            arr = np.frombuffer(raw, dtype=t.dtype.np).reshape(shape)
            arr = arr.byteswap() if sys.byteorder == "big" else arr.copy()  # the protocol's bytes: little-endian
        elif "data" in item:
            arr = _from_json(item["data"], t, shape)
        else:
            raise _HttpError(400, f"input '{nm}': no 'data' and no binary_data_size parameter")
        inputs[nm] = arr
    if offset != len(binary):
        raise _HttpError(400, f"{len(binary) - offset} bytes of binary data after the inputs' (binary_data_size "
                              f"adds up to {offset})")
    missing = [t.name for t in spec.inputs if t.name not in inputs]
    if missing:
        raise _HttpError(400, f"missing input(s) {missing}; model '{spec.name}' takes {takes}")
    default_binary = bool(params.get("binary_data_output", False))
    outs = {t.name for t in spec.outputs}
    if req.get("outputs") is None:
        wanted = [(t.name, default_binary) for t in spec.outputs]
    else:
        if not isinstance(req["outputs"], list):
            raise _HttpError(400, "'outputs' must be a list of {\"name\": ...} objects")
        wanted = []
        for o in req["outputs"]:
            nm = o.get("name") if isinstance(o, dict) else None
            if nm not in outs:
                raise _HttpError(400, f"unknown output {nm!r}; model '{spec.name}' has outputs "
                                      f"{[t.name for t in spec.outputs]}")
            op = o.get("parameters") or {}
            wanted.append((nm, bool(op.get("binary_data", default_binary)) if isinstance(op, dict) else
                           default_binary))
    return inputs, rows or 1, wanted, req_id


def _from_json(data, t: Tensor, shape: list) -> np.ndarray:
    """JSON tensor data (flat or nested, row-major) as an array of ``t``'s dtype and ``shape``."""
    try:
        arr = np.array(data)
    except (ValueError, TypeError) as e:
        raise _HttpError(400, f"input '{t.name}': 'data' is not a regular array of numbers ({e})") from None
    if arr.size == 0 and prod(shape) == 0:
        return np.zeros(shape, t.dtype.np)
    if arr.dtype.kind not in _JSON_KINDS[t.dtype.kind]:
        raise _HttpError(400, f"input '{t.name}': 'data' holds {_kind_name(arr)}, a {t.datatype} tensor takes "
                              f"{'true/false' if t.dtype.is_bool else 'integers' if t.dtype.is_int else 'numbers'}")
    if arr.size != prod(shape):
        raise _HttpError(400, f"input '{t.name}': 'data' has {arr.size} elements, shape {shape} takes {prod(shape)}")
    if t.dtype.is_int:
        info = np.iinfo(t.dtype.np)
        if arr.min() < info.min or arr.max() > info.max:
            raise _HttpError(400, f"input '{t.name}': 'data' holds values outside {t.datatype}'s range "
                                  f"[{info.min}, {info.max}]")
    return arr.astype(t.dtype.np).reshape(shape)


def _kind_name(arr: np.ndarray) -> str:
    return {"b": "booleans", "i": "integers", "u": "integers", "f": "floats", "U": "strings",
            "O": "mixed values"}.get(arr.dtype.kind, arr.dtype.name)


def infer_response(spec: ModelSpec, outputs: dict, wanted: list, req_id) -> tuple[int, object, dict]:
    """(status, body, headers) of an OIP v2 infer response: JSON tensors, binary ones after the JSON header."""
    types = {t.name: t for t in spec.outputs}
    tensors, blobs = [], []
    for nm, binary in wanted:
        a = np.ascontiguousarray(outputs[nm])
        entry = {"name": nm, "datatype": types[nm].datatype, "shape": list(a.shape)}
        if binary:
            raw = (a.byteswap() if sys.byteorder == "big" else a).tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            entry["data"] = (a.astype(np.float32) if types[nm].dtype.name == "bfloat16" else a).ravel().tolist()
        tensors.append(entry)
    body = {"model_name": spec.name, "model_version": "1", "outputs": tensors}
    if req_id is not None:
        body["id"] = req_id
    if not blobs:
        return 200, body, {}
    header = json.dumps(body).encode()
    return 200, header + b"".join(blobs), {"Inference-Header-Content-Length": str(len(header))}


def deployment(model, backend: str = "cpu", devices: int = 1, max_batch_size: int = 8, *, name: str | None = None,
               num_replicas: int = 1, batch_wait_timeout_s: float = 0.002, max_body_bytes: int | None = None,
               max_retries: int = 2, device_timeout_s: float | None = 30.0, device_class: type | None = None,
               ray_actor_options: dict | None = None, max_ongoing_requests: int | None = None,
               serve_options: dict | None = None, **compile_options):
    """A Ray Serve application serving ``model`` (path, bytes or ModelProto) over OIP v2 (module docstring).

    ``devices``: devices of ``backend`` per replica (``device_class``: a vendor's DeviceManager subclass);
    ``max_batch_size``: rows per request and per batch; ``name``: the model's OIP name (default: the file's stem,
    else the graph's name); ``num_replicas``: Ray Serve replicas (``ray_actor_options``: their resources, by
    default one CPU each; a vendor adds its card as a custom resource); ``serve_options``: more
    ``ray.serve.deployment`` options (``autoscaling_config``, ``max_replicas_per_node``, ...); ``max_retries``
    and ``device_timeout_s``: each replica's Host (fault handling); ``batch_wait_timeout_s``: how long a batch
    waits for more rows; ``max_body_bytes``: the largest request body (default: 16 MiB, or more when the
    largest batch's JSON needs it); ``compile_options``: ``glow_core.compile``'s (e.g. ``num_threads=1``)."""
    serve = _ray_serve()
    if devices < 1 or max_batch_size < 1 or num_replicas < 1:
        raise GlowError(f"deployment(devices={devices}, max_batch_size={max_batch_size}, num_replicas="
                        f"{num_replicas}): each must be at least 1")
    m, _ = load_model(model)
    if name is None:
        name = os.path.splitext(os.path.basename(os.fspath(model)))[0] if isinstance(model, (str, os.PathLike)) \
            else (m.graph.name or "model")
    if not name or "/" in name or name != name.strip():
        raise GlowError(f"model name {name!r}: give a name without '/' or surrounding spaces (it is a URL path part)")
    for nm, elem, _ in graph_input_specs(m):
        _oip_dtype(elem, f"input '{nm}'")
    try:
        data = m.SerializeToString()
    except ValueError as e:  # over protobuf's 2 GiB
        raise ModelLoadError(f"model '{name}' cannot be sent to the replicas as one protobuf: {e}") from None
    host_options = {"max_retries": max_retries, "device_timeout_s": device_timeout_s,
                    "max_active_requests": max(4, 2 * devices), "max_queue": 4096}
    ongoing = max_ongoing_requests or max(16, 2 * max_batch_size)
    options = {"num_replicas": num_replicas, "max_ongoing_requests": ongoing,
               "ray_actor_options": ray_actor_options if ray_actor_options is not None else {"num_cpus": 1},
               **(serve_options or {})}
    if "autoscaling_config" in options:
        options.pop("num_replicas")
    d = serve.deployment(GlowModelServer, name=name, **options)
    return d.bind(data, name, backend, devices, max_batch_size, batch_wait_timeout_s, max_body_bytes, host_options,
                  device_class, compile_options)


__all__ = ["deployment", "GlowModelServer", "ModelSpec", "Tensor", "OIP_DATATYPES", "parse_infer_request",
           "infer_response", "batch_sizes", "chunks", "is_batched", "INSTALL"]
