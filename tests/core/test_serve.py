"""Serving over the Open Inference Protocol v2 on a real Ray Serve cluster (started here on 127.0.0.1, once for the
module): the small example ResNet (batch dimension symbolic: dynamic batching) and the example CNN (fixed batch:
one request at a time), queried with a plain HTTP client (urllib/http.client: JSON and binary tensors) and with
``tritonclient.http``; every answer must equal ``glow_core.compile(...).run`` on the same backend bit for bit.
Bad requests each get an OIP error (``{"error": ...}``, 4xx) naming the problem, and the server keeps serving.
Skipped, saying why, when Ray Serve or tritonclient is not installed (``pip install 'glow-kit[serve,test]'``); CI
installs the extra and sets GLOW_REQUIRE_SERVE=1, so there a missing one fails instead."""
from __future__ import annotations

import gzip
import http.client
import json
import os
import re
import shutil
import tempfile
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

if os.environ.get("GLOW_REQUIRE_SERVE"):  # CI installed the serve extra: a missing one fails loudly here
    import ray
    import tritonclient.http as httpclient
    from ray import serve
else:
    ray = pytest.importorskip("ray", reason="Ray Serve is not installed: pip install 'glow-kit[serve]'")
    serve = pytest.importorskip("ray.serve", reason="Ray Serve is not installed: pip install 'glow-kit[serve]'")
    httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient is not installed: pip install "
                                                                  "'glow-kit[test]'")

import glow_core  # noqa: E402
from glow_conformance import example_models as models  # noqa: E402
from glow_core.serve import deployment  # noqa: E402
from glow_tools.serve import free_port  # noqa: E402
from tests.ray_lock import one_cluster_at_a_time  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")  # one worker, one cluster (tests/conftest.py)
T = 120  # seconds: no HTTP call may take longer
MAX_BATCH = 4
BODY_LIMIT = 1 << 20
QUIET = {"log_level": "WARNING"}  # Ray Serve's access log off


@pytest.fixture(scope="module")
def server():
    """A local Ray cluster (2 CPUs and 2 of the custom resource 'test_card', no dashboard, node address
    127.0.0.1) and Serve on a free loopback port with two applications: 'resnet' (batched, at /) and 'cnn' (fixed
    batch, at /fixed; its replica takes a 'test_card', as a vendor's replicas take its cards)."""
    with one_cluster_at_a_time():
        yield from _server()


def _server():
    tmp = tempfile.mkdtemp(prefix="glowray")  # short: Ray's socket paths live under it
    port = free_port()
    try:
        for attempt in (1, 2):  # Ray's node must register within its own 30 s: a loaded machine may miss it once
            try:
                ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=tmp,
                         logging_level="warning", resources={"test_card": 2})  # a vendor's cards, as Ray sees them
                break
            except Exception as e:  # noqa: BLE001
                ray.shutdown()
                if attempt == 2 or "timed out during startup" not in str(e):
                    raise
        serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config=QUIET)
        resnet = models.resnet(batch="N")
        cnn = models.cnn()
        serve.run(deployment(resnet, "cpu", devices=1, max_batch_size=MAX_BATCH, name="resnet", num_threads=1,
                             batch_wait_timeout_s=0.05, max_body_bytes=BODY_LIMIT),
                  name="resnet", route_prefix="/", logging_config=QUIET)
        serve.run(deployment(cnn, "cpu", devices=2, name="cnn", num_threads=1,
                             ray_actor_options={"num_cpus": 0, "resources": {"test_card": 1}}),
                  name="cnn", route_prefix="/fixed", logging_config=QUIET)
        yield {"url": f"http://127.0.0.1:{port}", "port": port, "resnet": resnet, "cnn": cnn}
    finally:
        if ray.is_initialized():
            serve.shutdown()
            ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def ref(server):
    """The models compiled alone on the same backend: what every answer must equal."""
    return {"resnet": glow_core.compile(server["resnet"], "cpu", num_threads=1),
            "cnn": glow_core.compile(server["cnn"], "cpu", num_threads=1)}


def call(server, method, path, body=None, headers=None):
    """(status, headers, body bytes) of one plain HTTP request."""
    req = urllib.request.Request(server["url"] + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=T) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def infer_json(server, x, path="/v2/models/resnet/infer", name="input", **extra):
    body = {"id": "r1", "inputs": [{"name": name, "shape": list(x.shape), "datatype": "FP32",
                                    "data": x.ravel().tolist()}], **extra}
    return call(server, "POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})


def images(n, seed=0, size=32):
    return np.random.default_rng(seed).standard_normal((n, 3, size, size)).astype(np.float32)


def test_health_and_metadata(server):
    assert call(server, "GET", "/v2/health/live")[::2] == (200, b'{"live": true}')
    assert call(server, "GET", "/v2/health/ready")[::2] == (200, b'{"ready": true}')
    status, _, body = call(server, "GET", "/v2/models/resnet")
    meta = json.loads(body)
    assert status == 200 and meta["name"] == "resnet" and meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 32, 32]}]
    assert meta["outputs"] == [{"name": "output", "datatype": "FP32", "shape": [-1, 10]}]
    meta = json.loads(call(server, "GET", "/fixed/v2/models/cnn")[2])
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [1, 3, 28, 28]}]
    assert ray.available_resources().get("test_card") == 1, "the cnn replica holds one of the two cards"
    c = httpclient.InferenceServerClient(f"127.0.0.1:{server['port']}", network_timeout=T)
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready("resnet")
    assert c.get_model_metadata("resnet")["outputs"] == [{"name": "output", "datatype": "FP32", "shape": [-1, 10]}]
    assert "binary_tensor_data" in c.get_server_metadata()["extensions"]


def test_plain_http_json_and_binary_equal_compile_run(server, ref):
    for rows in (1, 3):
        x = images(rows, seed=rows)
        want = ref["resnet"].run({"input": x})["output"]
        status, _, body = infer_json(server, x)
        assert status == 200, body
        out = json.loads(body)
        assert (out["model_name"], out["id"]) == ("resnet", "r1")
        (o,) = out["outputs"]
        assert (o["name"], o["datatype"], o["shape"]) == ("output", "FP32", [rows, 10])
        np.testing.assert_array_equal(np.array(o["data"], np.float32).reshape(rows, 10), want)
    # binary tensors both ways (the Inference-Header-Content-Length extension), gzip-compressed
    x = images(2, seed=7)
    header = json.dumps({"inputs": [{"name": "input", "shape": [2, 3, 32, 32], "datatype": "FP32",
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}).encode()
    status, headers, body = call(server, "POST", "/v2/models/resnet/versions/1/infer",
                                 gzip.compress(header + x.tobytes()),
                                 {"Inference-Header-Content-Length": str(len(header)), "Content-Encoding": "gzip"})
    assert status == 200, body
    n = int(headers["inference-header-content-length"])
    (o,) = json.loads(body[:n])["outputs"]
    assert o["parameters"] == {"binary_data_size": 80} and "data" not in o
    np.testing.assert_array_equal(np.frombuffer(body[n:], np.float32).reshape(2, 10),
                                  ref["resnet"].run({"input": x})["output"])
    # the fixed-batch model, one request at a time
    x = images(1, seed=3, size=28)
    status, _, body = infer_json(server, x, "/fixed/v2/models/cnn/infer")
    assert status == 200, body
    np.testing.assert_array_equal(np.array(json.loads(body)["outputs"][0]["data"], np.float32).reshape(1, 10),
                                  ref["cnn"].run({"input": x})["output"])


def test_tritonclient_equals_compile_run(server, ref):
    c = httpclient.InferenceServerClient(f"127.0.0.1:{server['port']}", network_timeout=T)
    for rows, binary in ((2, True), (1, False), (4, True)):
        x = images(rows, seed=10 + rows)
        i = httpclient.InferInput("input", list(x.shape), "FP32")
        i.set_data_from_numpy(x, binary_data=binary)
        r = c.infer("resnet", [i], outputs=[httpclient.InferRequestedOutput("output", binary_data=binary)])
        np.testing.assert_array_equal(r.as_numpy("output"), ref["resnet"].run({"input": x})["output"])


def test_concurrent_requests_batch_dynamically(server, ref):
    """16 requests of one row at once: answers split back to the right request, fewer Host runs than requests."""
    before = serve.get_app_handle("resnet").stats.remote().result(timeout_s=T)["completed_requests"]
    xs = [images(1, seed=100 + i) for i in range(16)]
    outs = [None] * len(xs)

    def one(i):
        outs[i] = infer_json(server, xs[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(T)
    for x, (status, _, body) in zip(xs, outs):
        assert status == 200, body
        np.testing.assert_array_equal(np.array(json.loads(body)["outputs"][0]["data"], np.float32).reshape(1, 10),
                                      ref["resnet"].run({"input": x})["output"])
    after = serve.get_app_handle("resnet").stats.remote().result(timeout_s=T)["completed_requests"]
    assert after - before < len(xs), "no two requests were batched together"


def _body(inputs, **extra):
    return json.dumps({"inputs": inputs, **extra}).encode()


def _t(name="input", shape=(1, 3, 32, 32), datatype="FP32", data=None, **kw):
    n = int(np.prod(shape))
    return {"name": name, "shape": list(shape), "datatype": datatype, "data": [0.5] * n if data is None else data, **kw}


#: Bad requests: (id, method, path, body, headers, status, what the error must say).
BAD = [
    ("unknown model", "POST", "/v2/models/resnet50/infer", _body([_t()]), {}, 404,
     "unknown model 'resnet50'; this server serves 'resnet'"),
    ("unknown version", "GET", "/v2/models/resnet/versions/2", None, {}, 404, "its only version is 1"),
    ("unknown path", "GET", "/v2/repository/index", None, {}, 404, "no such endpoint"),
    ("infer with GET", "GET", "/v2/models/resnet/infer", None, {}, 405, "this endpoint takes POST"),
    ("malformed JSON", "POST", "/v2/models/resnet/infer", b'{"inputs": [', {}, 400,
     "malformed JSON in the inference request"),
    ("not an object", "POST", "/v2/models/resnet/infer", b"[1, 2]", {}, 400, "a JSON object with a list 'inputs'"),
    ("unknown input", "POST", "/v2/models/resnet/infer", _body([_t(name="image")]), {}, 400,
     r"unknown input 'image'; model 'resnet' takes 'input' \(FP32 \[-1, 3, 32, 32\]\)"),
    ("missing input", "POST", "/v2/models/resnet/infer", _body([]), {}, 400, r"missing input\(s\) \['input'\]"),
    ("wrong datatype", "POST", "/v2/models/resnet/infer", _body([_t(datatype="INT64", data=[1] * 3072)]), {}, 400,
     "input 'input': datatype 'INT64' given, the model expects FP32"),
    ("wrong shape", "POST", "/v2/models/resnet/infer", _body([_t(shape=(1, 3, 16, 16))]), {}, 400,
     r"input 'input': shape \[1, 3, 16, 16\] given, the model takes \[-1, 3, 32, 32\]"),
    ("wrong rank", "POST", "/v2/models/resnet/infer", _body([_t(shape=(3, 32, 32))]), {}, 400,
     r"shape \[3, 32, 32\] given"),
    ("too many rows", "POST", "/v2/models/resnet/infer", _body([_t(shape=(5, 3, 32, 32))]), {}, 400,
     "batch of 5 rows; this server takes 1 to 4 rows per request"),
    ("data count", "POST", "/v2/models/resnet/infer", _body([_t(data=[0.5] * 100)]), {}, 400,
     r"'data' has 100 elements, shape \[1, 3, 32, 32\] takes 3072"),
    ("data not numbers", "POST", "/v2/models/resnet/infer", _body([_t(data=["a"] * 3072)]), {}, 400,
     "'data' holds strings, a FP32 tensor takes numbers"),
    ("ragged data", "POST", "/v2/models/resnet/infer", _body([_t(data=[[0.5], [0.5, 0.5]])]), {}, 400,
     "not a regular array of numbers"),
    ("unknown output", "POST", "/v2/models/resnet/infer", _body([_t()], outputs=[{"name": "logits"}]), {}, 400,
     r"unknown output 'logits'; model 'resnet' has outputs \['output'\]"),
    ("binary size", "POST", "/v2/models/resnet/infer",
     _body([{"name": "input", "shape": [1, 3, 32, 32], "datatype": "FP32", "parameters": {"binary_data_size": 8}}]),
     {}, 400, "binary_data_size 8, a FP32 tensor of shape \\[1, 3, 32, 32\\] takes 12288 bytes"),
    ("binary header length", "POST", "/v2/models/resnet/infer", _body([_t()]),
     {"Inference-Header-Content-Length": "999999"}, 400, "Inference-Header-Content-Length '999999' is not a size"),
    ("oversize body", "POST", "/v2/models/resnet/infer", b" " * (BODY_LIMIT + 1), {}, 413,
     f"request body of {BODY_LIMIT + 1} bytes is over this server's limit of {BODY_LIMIT} bytes"),
    ("bad gzip", "POST", "/v2/models/resnet/infer", b"not gzip", {"Content-Encoding": "gzip"}, 400,
     "request body is not valid gzip data"),
    ("fixed batch model, two rows", "POST", "/fixed/v2/models/cnn/infer",
     _body([_t(shape=(2, 3, 28, 28))]), {}, 400, r"shape \[2, 3, 28, 28\] given, the model takes \[1, 3, 28, 28\]"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_requests_get_oip_errors_and_the_server_keeps_serving(server, ref, case):
    _, method, path, body, headers, status, message = case
    got, hdrs, text = call(server, method, path, body, {"Content-Type": "application/json", **headers})
    assert got == status, text
    err = json.loads(text)
    assert list(err) == ["error"]
    assert re.search(message, err["error"]), err["error"]
    x = images(1, seed=99)
    ok, _, out = infer_json(server, x)
    assert ok == 200, out
    np.testing.assert_array_equal(np.array(json.loads(out)["outputs"][0]["data"], np.float32).reshape(1, 10),
                                  ref["resnet"].run({"input": x})["output"])


def test_oversize_chunked_body_and_tritonclient_errors(server):
    """A body without Content-Length is cut at the limit too; tritonclient raises the server's message."""
    conn = http.client.HTTPConnection("127.0.0.1", server["port"], timeout=T)
    try:
        chunks = (b" " * (1 << 16) for _ in range((BODY_LIMIT >> 16) + 2))
        conn.request("POST", "/v2/models/resnet/infer", body=chunks, encode_chunked=True,
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 413 and "over this server's limit" in json.loads(r.read())["error"]
    finally:
        conn.close()
    c = httpclient.InferenceServerClient(f"127.0.0.1:{server['port']}", network_timeout=T)
    i = httpclient.InferInput("input", [1, 3, 32, 32], "INT64")
    i.set_data_from_numpy(np.zeros((1, 3, 32, 32), np.int64))
    with pytest.raises(httpclient.InferenceServerException, match="datatype 'INT64' given, the model expects FP32"):
        c.infer("resnet", [i])
    with pytest.raises(httpclient.InferenceServerException, match="unknown model 'nope'"):
        c.get_model_metadata("nope")
