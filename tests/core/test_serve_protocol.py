"""The Open Inference Protocol v2 codec of glow_core.serve, without Ray: requests (JSON and binary tensors) to
arrays, checked against the model's datatypes and shapes; arrays to responses; how a batch is cut into the
compiled batch sizes. Expectations are written from the protocol's text (KServe's v2 REST spec and Triton's
binary tensor extension), not from the code."""
from __future__ import annotations

import json

import numpy as np
import pytest

from glow_core import serve
from glow_core.serve import ModelSpec, Tensor, _HttpError, infer_response, parse_infer_request
from glow_core.types import DTYPES


def spec(batched=True, **types):
    """A model with inputs ``a`` (FP32 [-1, 2]) and ``b`` (of the given kit dtype, [-1, 3]) and output ``y``."""
    b = DTYPES[types.get("b", "int64")]
    lead = -1 if batched else 1
    return ModelSpec("m", (Tensor("a", DTYPES["float32"], (lead, 2)), Tensor("b", b, (lead, 3))),
                     (Tensor("y", DTYPES[types.get("y", "float32")], (lead, 4)),), batched, 4, "test")


def req(*inputs, **extra) -> bytes:
    return json.dumps({"inputs": list(inputs), **extra}).encode()


def t(name, shape, datatype, data=None, **kw):
    return {"name": name, "shape": shape, "datatype": datatype, **({} if data is None else {"data": data}), **kw}


def test_batch_sizes_and_chunks():
    assert serve.batch_sizes(1) == [1] and serve.batch_sizes(8) == [1, 2, 4, 8] and serve.batch_sizes(6) == [1, 2, 4]
    assert serve.chunks(7, 4) == [4, 2, 1] and serve.chunks(8, 8) == [8] and serve.chunks(11, 4) == [4, 4, 2, 1]
    assert serve.chunks(1, 8) == [1]


def test_json_tensors_flat_or_nested():
    body = req(t("a", [2, 2], "FP32", [1, 2.5, 3, 4]), t("b", [2, 3], "INT64", [[1, 2, 3], [4, 5, -6]]),
               id="q7", outputs=[{"name": "y"}])
    inputs, rows, wanted, rid = parse_infer_request(bytearray(body), None, spec())
    assert rows == 2 and rid == "q7" and wanted == [("y", False)]
    np.testing.assert_array_equal(inputs["a"], np.array([[1, 2.5], [3, 4]], np.float32))
    assert inputs["a"].dtype == np.float32 and inputs["b"].dtype == np.int64
    np.testing.assert_array_equal(inputs["b"], [[1, 2, 3], [4, 5, -6]])


def test_binary_tensors_after_the_json_header():
    a = np.arange(4, dtype=np.float32).reshape(2, 2)
    b = np.array([[1, 2, 3], [4, 5, 6]], np.int64)
    header = req(t("a", [2, 2], "FP32", parameters={"binary_data_size": 16}),
                 t("b", [2, 3], "INT64", parameters={"binary_data_size": 48}), parameters={"binary_data_output": True})
    body = bytearray(header + a.astype("<f4").tobytes() + b.astype("<i8").tobytes())
    inputs, rows, wanted, _ = parse_infer_request(body, str(len(header)), spec())
    np.testing.assert_array_equal(inputs["a"], a)
    np.testing.assert_array_equal(inputs["b"], b)
    assert wanted == [("y", True)] and rows == 2
    inputs["a"][0, 0] = 7  # arrays own writable memory (a device may write its inputs)


@pytest.mark.parametrize("case", [
    # (request body, header length, status, message)
    (req(t("a", [1, 2], "FP32", [1, 2]), t("b", [1, 3], "UINT8", [1, 2, 3])), None, 400,
     "input 'b': datatype 'UINT8' given, the model expects INT64"),
    (req(t("a", [1, 2], "FP32", [1, 2]), t("b", [1, 3], "INT64", [1.5, 2, 3])), None, 400,
     "'data' holds floats, a INT64 tensor takes integers"),
    (req(t("a", [1, 2], "FP32", [1, 2]), t("b", [1, 3], "INT64", [1, 2, 2 ** 70])), None, 400, "'data' holds mixed"),
    (req(t("a", [1, 2], "FP32", [True, 2]), t("b", [1, 3], "INT64", [1, 2, 3])), None, None, ""),  # bools are 0/1
    (req(t("a", [1, 2], "FP32", [1, 2]), t("b", [2, 3], "INT64", [1] * 6)), None, 400,
     "input 'b': batch of 2 rows, other inputs have 1"),
    (req(t("a", [0, 2], "FP32", []), t("b", [0, 3], "INT64", [])), None, 400, "batch of 0 rows; this server takes 1 to 4"),
    (req(t("a", [1, 2], "FP32", [1, 2]), t("a", [1, 2], "FP32", [1, 2])), None, 400, "input 'a' is given twice"),
    (req(t("a", [1, 2], "FP32")), None, 400, "input 'a': no 'data' and no binary_data_size parameter"),
    (req(t("a", [1, 2], "FP32", [1, 2]), t("b", [1, 3], "INT64", [1, 2, 3]), outputs=[{"name": "z"}]), None, 400,
     "unknown output 'z'"),
    (req(t("a", [1, 2], "FP32", [1, 2]), t("b", [1, 3], "INT64", [1, 2, 3])) + b"xx", "-3", 400,
     "Inference-Header-Content-Length '-3' is not a size"),
    (req(t("a", [1, 2], "FP32", parameters={"binary_data_size": 8}), t("b", [1, 3], "INT64", [1, 2, 3])) + b"1234",
     "auto", 400, "input 'a': binary data ends after 4 of its 8 bytes"),
    (req(t("a", [1, 2], "FP32", parameters={"binary_data_size": 8}), t("b", [1, 3], "INT64", [1, 2, 3])) + b"1" * 12,
     "auto", 400, "4 bytes of binary data after the inputs'"),
    (req(t("a", [1, "2"], "FP32", [1, 2])), None, 400, "'shape' must be a list of sizes"),
    (b'{"inputs": {}}', None, 400, "a JSON object with a list 'inputs'"),
    (b"\xff\xfe", None, 400, "malformed JSON"),
], ids=lambda c: c[3][:40] or "bools as numbers")
def test_bad_requests_name_the_problem(case):
    body, header_len, status, message = case
    if header_len == "auto":
        header_len = str(body.index(b"}]}") + 3)
    if status is None:
        inputs, _, _, _ = parse_infer_request(bytearray(body), header_len, spec())
        np.testing.assert_array_equal(inputs["a"], [[1, 2]])
        return
    with pytest.raises(_HttpError) as e:
        parse_infer_request(bytearray(body), header_len, spec())
    assert e.value.status == status and message in str(e.value), str(e.value)


def test_integer_ranges_and_booleans():
    s = spec(b="uint8")
    with pytest.raises(_HttpError, match=r"outside UINT8's range \[0, 255\]"):
        parse_infer_request(bytearray(req(t("a", [1, 2], "FP32", [1, 2]), t("b", [1, 3], "UINT8", [1, 256, 3]))),
                            None, s)
    s = spec(b="bool")
    inputs, _, _, _ = parse_infer_request(bytearray(req(t("a", [1, 2], "FP32", [1, 2]),
                                                        t("b", [1, 3], "BOOL", [True, False, True]))), None, s)
    assert inputs["b"].dtype == np.bool_ and inputs["b"].tolist() == [[True, False, True]]
    with pytest.raises(_HttpError, match="a BOOL tensor takes true/false"):
        parse_infer_request(bytearray(req(t("a", [1, 2], "FP32", [1, 2]), t("b", [1, 3], "BOOL", [1, 0, 1]))),
                            None, s)


def test_fixed_shape_model_takes_its_shape_only():
    s = spec(batched=False)
    with pytest.raises(_HttpError, match=r"shape \[2, 2\] given, the model takes \[1, 2\]"):
        parse_infer_request(bytearray(req(t("a", [2, 2], "FP32", [1] * 4))), None, s)


def test_responses_json_and_binary():
    y = np.arange(8, dtype=np.float32).reshape(2, 4) / 3
    status, body, headers = infer_response(spec(), {"y": y}, [("y", False)], "q1")
    assert status == 200 and headers == {}
    assert body == {"model_name": "m", "model_version": "1", "id": "q1",
                    "outputs": [{"name": "y", "datatype": "FP32", "shape": [2, 4], "data": y.ravel().tolist()}]}
    assert np.array_equal(np.array(json.loads(json.dumps(body))["outputs"][0]["data"], np.float32).reshape(2, 4), y), \
        "JSON numbers round-trip float32 exactly"
    status, body, headers = infer_response(spec(), {"y": y}, [("y", True)], None)
    n = int(headers["Inference-Header-Content-Length"])
    head = json.loads(body[:n])
    assert head["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [2, 4], "parameters": {"binary_data_size": 32}}]
    np.testing.assert_array_equal(np.frombuffer(body[n:], "<f4").reshape(2, 4), y)
    bf = np.array([[1.5, -2, 0.25, 3]], DTYPES["bfloat16"].np)
    _, body, _ = infer_response(spec(y="bfloat16"), {"y": bf}, [("y", False)], None)
    assert body["outputs"][0] == {"name": "y", "datatype": "BF16", "shape": [1, 4], "data": [1.5, -2.0, 0.25, 3.0]}


def test_deployment_refuses_datatypes_the_protocol_lacks():
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(Exception, match="input 'x' is float8e4m3fn, which the Open Inference Protocol has no datatype"):
        serve._oip_dtype(m.graph.input[0].type.tensor_type.elem_type, "input 'x'")
    assert serve.is_batched(m, {}) is False
