"""The runtime: a Host queues requests by priority then arrival, runs at most max_active_requests, refuses beyond
max_queue, and every failure (unknown or evicted network, bad inputs, device errors, a closed host) ends the
request's future with a GlowError instead of a hang. Every wait has a timeout.

Results are checked against the model compiled alone on the interpreter (conformance model tolerance). Timing
control uses a DeviceManager subclass whose ``execute`` waits on a gate before running the real compiled code:
the vendor hook the runtime documents."""
from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

import glow_core
from glow_conformance.checker import compare
from glow_conformance import example_models as models
from glow_core.errors import DeviceUnavailable, GlowError, InputError, MemoryLimitError, RequestRefused
from glow_core.runtime import DeviceManager, Host

T = 60  # seconds: no wait in these tests may last longer


@pytest.fixture(scope="module")
def net():
    m = models.resnet(size=16, widths=(8, 16), blocks=1)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    ref = glow_core.compile(m, "interpreter")
    return m, xs, [ref.run({"input": x})["output"] for x in xs]


def check(out, want):
    compare(out["output"], want, "model", "runtime result", rerun="")


class GatedDevice(DeviceManager):
    """Runs nothing until ``gate`` opens (then the real compiled function): makes queueing observable."""

    gate: threading.Event

    def execute(self, key, inputs):
        if not self.gate.wait(T):
            raise GlowError("test gate never opened")
        return super().execute(key, inputs)


def gated_host(gate, **kw):
    h = Host(**kw)
    GatedDevice.gate = gate
    h.add_device("cpu", count=1, device_class=GatedDevice, num_threads=1)
    return h


def test_results_and_stats_on_two_devices(net):
    m, xs, want = net
    with Host(max_active_requests=4, max_queue=64) as h:
        h.add_device("cpu", count=2, num_threads=1)
        rep = h.add_network("resnet", m)
        assert len(rep.partitions) == 1
        futs = [h.run("resnet", {"input": xs[i % 4]}) for i in range(16)]
        for i, f in enumerate(futs):
            check(f.result(T), want[i % 4])
        s = h.stats()
        assert s["completed_requests"] == 16 and s["queue_depth"] == 0 and s["active_requests"] == 0
        assert [d["name"] for d in s["devices"]] == ["cpu0", "cpu1"] and s["retries"] == 0
        for d in s["devices"]:
            assert d["runs"] >= 1 and d["busy_seconds"] > 0 and d["memory_used"] > 0 and d["pending"] == 0
            assert d["healthy"] and d["failures"] == 0
        assert sum(d["runs"] for d in s["devices"]) == 16


def test_network_partitioned_across_device_kinds(net):
    m, xs, want = net
    with Host(max_active_requests=2) as h:
        h.add_device("glow_conformance.subset:conv_matmul_add", count=1)
        h.add_device("cpu", count=2, num_threads=1)
        rep = h.add_network("resnet", m)
        assert rep.count("cma_npu") >= 2 and rep.count("cpu") >= 2
        futs = [h.run("resnet", {"input": xs[i % 4]}) for i in range(8)]
        for i, f in enumerate(futs):
            check(f.result(T), want[i % 4])
        s = {d["name"]: d for d in h.stats()["devices"]}
        assert s["cma_npu0"]["runs"] == 8 * rep.count("cma_npu")
        assert s["cpu0"]["runs"] + s["cpu1"]["runs"] == 8 * rep.count("cpu")


def test_priorities_under_load(net):
    m, xs, want = net
    gate = threading.Event()
    with gated_host(gate, max_active_requests=1, max_queue=64) as h:
        h.add_network("resnet", m)
        order, lock = [], threading.Lock()

        def record(tag):
            def cb(f):
                with lock:
                    order.append(tag)
            return cb

        first = h.run("resnet", {"input": xs[0]})  # takes the only slot and waits at the gate
        prios = [5, 1, 5, 0, 1, 9, 0, 5, 1, 0, 9, 1]
        futs = []
        for i, p in enumerate(prios):
            f = h.run("resnet", {"input": xs[i % 4]}, priority=p)
            f.add_done_callback(record((p, i)))
            futs.append(f)
        assert h.stats()["queue_depth"] == len(prios)
        gate.set()
        check(first.result(T), want[0])
        for i, f in enumerate(futs):
            check(f.result(T), want[i % 4])
        assert order == sorted(order), "requests must run by priority (lower first), then arrival"


def test_a_waiting_request_can_be_cancelled(net):
    m, xs, want = net
    gate = threading.Event()
    with gated_host(gate, max_active_requests=1, max_queue=8) as h:
        h.add_network("resnet", m)
        running = h.run("resnet", {"input": xs[0]})
        waiting = [h.run("resnet", {"input": xs[i]}) for i in range(1, 4)]
        assert not running.cancel(), "a running request cannot be cancelled"
        assert waiting[1].cancel()
        gate.set()
        check(running.result(T), want[0])
        check(waiting[0].result(T), want[1])
        check(waiting[2].result(T), want[3])
        s = h.stats()
        assert (s["completed_requests"], s["cancelled_requests"]) == (3, 1)
        assert s["devices"][0]["runs"] == 3


def test_max_queue_refuses_at_once(net):
    m, xs, want = net
    gate = threading.Event()
    with gated_host(gate, max_active_requests=1, max_queue=3) as h:
        h.add_network("resnet", m)
        accepted = [h.run("resnet", {"input": xs[i]}) for i in range(4)]  # 1 running + 3 waiting
        refused = [h.run("resnet", {"input": xs[0]}) for _ in range(2)]
        for f in refused:
            assert f.done(), "a refusal is immediate"
            with pytest.raises(RequestRefused, match=r"max_queue=3"):
                f.result(0)
        assert isinstance(refused[0].exception(), GlowError)
        gate.set()
        for i, f in enumerate(accepted):
            check(f.result(T), want[i])
        s = h.stats()
        assert (s["refused_requests"], s["completed_requests"]) == (2, 4)


def test_evicted_network_pending_requests_end_in_errors(net):
    m, xs, want = net
    gate = threading.Event()
    with gated_host(gate, max_active_requests=1, max_queue=16) as h:
        h.add_network("a", m)
        h.add_network("b", m)
        (dev,) = h.devices
        loaded = dev.memory_used()
        running = h.run("a", {"input": xs[0]})
        pending_a = [h.run("a", {"input": xs[1]}) for _ in range(3)]
        pending_b = h.run("b", {"input": xs[2]})
        h.evict_network("a")
        for f in pending_a:
            assert f.done()
            with pytest.raises(GlowError, match="network 'a' was evicted before the request ran"):
                f.result(0)
        late = h.run("a", {"input": xs[0]})
        with pytest.raises(GlowError, match="unknown network 'a'; added: b"):
            late.result(T)
        gate.set()
        check(running.result(T), want[0])  # it was running: it finishes
        check(pending_b.result(T), want[2])
        assert dev.memory_used() == loaded // 2, "the evicted network's functions leave the device"
        with pytest.raises(GlowError, match="unknown network"):
            h.evict_network("a")


def test_device_errors_surface_in_the_future():
    g = helper.make_graph([helper.make_node("Div", ["a", "b"], ["c"], name="div")], "div",
                          [helper.make_tensor_value_info("a", TensorProto.INT32, [4]),
                           helper.make_tensor_value_info("b", TensorProto.INT32, [4])],
                          [helper.make_tensor_value_info("c", TensorProto.INT32, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    a = np.array([7, -7, 9, 5], np.int32)
    with Host() as h:
        h.add_device("cpu", count=1, num_threads=1)
        h.add_network("div", m)
        bad = h.run("div", {"a": a, "b": np.array([1, 0, 1, 1], np.int32)})
        with pytest.raises(GlowError, match=r"device cpu0, function 'div/p0': .*division"):
            bad.result(T)
        good = h.run("div", {"a": a, "b": np.array([2, 2, 3, -5], np.int32)})
        np.testing.assert_array_equal(good.result(T)["c"], np.array([3, -3, 3, -1], np.int32))
        s = h.stats()
        assert s["failed_requests"] == 1
        assert (s["retries"], s["devices"][0]["healthy"], s["devices"][0]["failures"]) == (0, True, 0), \
            "the request's own error is no device fault"


class FlakyCard(DeviceManager):
    """A vendor device whose driver fails on every other run with a non-Glow exception."""

    calls = 0

    def execute(self, key, inputs):
        FlakyCard.calls += 1
        if FlakyCard.calls % 2:
            raise RuntimeError("DMA timeout on the card")
        return super().execute(key, inputs)


def test_vendor_device_failures_never_hang(net):
    """A vendor card failing every other run beside a sound one: every request succeeds, each failure retried on
    the other device and counted. Alone, the card's failure ends its request with the driver's message."""
    m, xs, want = net
    FlakyCard.calls = 0
    with Host(max_active_requests=2) as h:
        h.add_device("cpu", count=1, device_class=FlakyCard, num_threads=1)
        h.add_device("cpu", count=1, num_threads=1)
        h.add_network("resnet", m)
        for _ in range(6):  # one at a time: the card is tried whenever it is healthy and idle
            check(h.run("resnet", {"input": xs[0]}).result(T), want[0])
        s = h.stats()
        card = s["devices"][0]
        assert s["failed_requests"] == 0 and card["failures"] >= 1 and s["retries"] == card["failures"]
        assert "RuntimeError: DMA timeout on the card" in card["last_error"]
    FlakyCard.calls = 0
    with Host(max_active_requests=2, probe_interval_s=60) as h:
        h.add_device("cpu", count=1, device_class=FlakyCard, num_threads=1)
        h.add_network("resnet", m)
        with pytest.raises(DeviceUnavailable, match="device cpu0 failed running 'resnet/p0': RuntimeError: DMA"):
            h.run("resnet", {"input": xs[0]}).result(T)
        assert h.stats()["failed_requests"] == 1


def test_unknown_network_bad_inputs_and_close(net):
    m, xs, want = net
    gate = threading.Event()
    h = gated_host(gate, max_active_requests=1, max_queue=8)
    try:
        h.add_network("resnet", m)
        with pytest.raises(GlowError, match="unknown network 'nope'; added: resnet"):
            h.run("nope", {"input": xs[0]}).result(T)
        with pytest.raises(InputError, match="shape"):
            h.run("resnet", {"input": xs[0][:, :, :8]}).result(T)
        with pytest.raises(GlowError, match="already added"):
            h.add_network("resnet", m)
        running = h.run("resnet", {"input": xs[0]})
        waiting = [h.run("resnet", {"input": xs[1]}) for _ in range(3)]
        closer = threading.Thread(target=h.close)
        closer.start()
        for f in waiting:
            with pytest.raises(GlowError, match="closed before the request ran"):
                f.result(T)
        gate.set()
        check(running.result(T), want[0])
        closer.join(T)
        assert not closer.is_alive()
        with pytest.raises(RequestRefused, match="closed"):
            h.run("resnet", {"input": xs[0]}).result(T)
    finally:
        gate.set()
        h.close()
    h.close()  # twice is fine


def test_close_ends_requests_stuck_on_a_device(net):
    m, xs, want = net
    gate = threading.Event()  # never opened before close: the device is stuck
    h = gated_host(gate, max_active_requests=1)
    try:
        h.add_network("resnet", m)
        stuck = h.run("resnet", {"input": xs[0]})
        h.close(timeout=0.5)
        with pytest.raises(GlowError, match="closed while the request ran"):
            stuck.result(T)
    finally:
        gate.set()


def test_add_network_needs_room(net):
    m, xs, want = net
    with Host() as h:
        with pytest.raises(GlowError, match="add a device"):
            h.add_network("resnet", m)
        small, big = h.add_device("cpu", count=1, memory=1000, num_threads=1) + \
            h.add_device("interpreter", count=1, memory=1000)
        with pytest.raises(MemoryLimitError, match=r"fits on no device: device cpu0: .* needs \d+ bytes"):
            h.add_network("resnet", m)
        assert small.memory_used() == 0 and big.memory_used() == 0, "nothing stays loaded after a failure"
    with Host() as h:
        tight, roomy = h.add_device("cpu", count=1, memory=1000, num_threads=1) + \
            h.add_device("cpu", count=1, num_threads=1)
        h.add_network("resnet", m)
        assert tight.memory_used() == 0 and roomy.memory_used() > 0
        check(h.run("resnet", {"input": xs[3]}).result(T), want[3])


def test_network_without_nodes():
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with Host() as h:
        h.add_device("cpu", num_threads=1)
        assert h.add_network("id", m).partitions == []
        x = np.array([1, 2], np.float32)
        y = h.run("id", {"x": x}).result(T)["y"]
        np.testing.assert_array_equal(y, x)
        assert not np.shares_memory(x, y)


def _spans(events, cat):
    """Async spans (``b``/``e`` pairs, matched by category, id and name) as (name, id, start, end, args)."""
    open_, out = {}, []
    for e in events:
        if e.get("cat") != cat or e["ph"] not in "be":
            continue
        key = (e["id"], e["name"])
        if e["ph"] == "b":
            assert key not in open_, key
            open_[key] = e
        else:
            b = open_.pop(key)
            out.append((e["name"], e["id"], b["ts"], e["ts"], b.get("args", {})))
    assert not open_, f"spans never ended: {list(open_)}"
    return out


def test_runtime_trace_has_a_track_per_device_and_a_span_per_request(net, tmp_path):
    """``Host(trace=True)``: the JSON, read back from the file, has each device's runs on its own track (one at a
    time, as many as the device ran, with the instructions the CPU backend timed inside them), the compilation of
    every partition for every device, and each request as a span holding its queue wait and one run per
    partition. With one active request at a time, a request leaves the queue only after the one before ended."""
    m, xs, want = net
    n = 6
    with Host(max_active_requests=1, max_queue=16, trace=True) as h:
        h.add_device("glow_conformance.subset:conv_matmul_add", count=1)
        h.add_device("cpu", count=2, num_threads=1)
        rep = h.add_network("resnet", m)
        futs = [h.run("resnet", {"input": xs[i % 4]}) for i in range(n)]
        for i, f in enumerate(futs):
            check(f.result(T), want[i % 4])
        stats = {d["name"]: d for d in h.stats()["devices"]}
    path = tmp_path / "runtime.json"
    h.trace.save(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    parts = len(rep.partitions)
    assert parts >= 4 and rep.count("cma_npu") >= 2 and rep.count("cpu") >= 2
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    runs = [e for e in events if e.get("cat") == "device run"]
    by_device: dict[str, list] = {}
    for e in runs:
        by_device.setdefault(tracks[(e["pid"], e["tid"])], []).append(e)
    assert {d: len(r) for d, r in by_device.items()} == {d: s["runs"] for d, s in stats.items() if s["runs"]}
    assert len(runs) == n * parts and set(by_device) >= {"cma_npu0", "cpu0"}
    instrs = [e for e in events if e.get("cat") == "instr"]

    def within(e, r):
        return (e["pid"], e["tid"]) == (r["pid"], r["tid"]) and r["ts"] <= e["ts"] and \
            e["ts"] + e["dur"] <= r["ts"] + r["dur"] + 1e-3

    for d, rs in by_device.items():
        rs.sort(key=lambda e: e["ts"])
        for a, b in zip(rs, rs[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-3, f"{d} ran two functions at once"
        for r in rs:
            assert r["args"]["device queue wait ms"] >= 0 and not r["args"]["failed"]
            inside = [e for e in instrs if within(e, r)]
            if d.startswith("cpu"):  # the CPU backend times its instructions
                assert inside and sum(e["dur"] for e in inside) <= r["dur"] + 1e-3
    assert all(any(within(e, r) for r in runs) for e in instrs), "an instruction outside every device run"
    compiled = {tracks[(e["pid"], e["tid"])] for e in events if e.get("cat") == "compile"}
    for i, p in enumerate(rep.partitions):
        devices = ["cma_npu0"] if p.backend == "cma_npu" else ["cpu0", "cpu1"]
        assert {f"resnet/p{i} for {d}" for d in devices} <= compiled
    spans = _spans(events, "request")
    requests = sorted((s for s in spans if s[0].startswith("request ")), key=lambda s: s[2])
    assert [s[0] for s in requests] == [f"request {i} (resnet)" for i in range(n)]
    assert all(s[4] == {"network": "resnet", "priority": 0, "result": "ok"} for s in requests)
    dispatch = {}
    for name, rid, start, end, args in requests:
        inner = [s for s in spans if s[1] == rid and not s[0].startswith("request ")]
        (wait,) = [s for s in inner if s[0] == "queue wait"]
        assert wait[2] == start and wait[3] <= end
        dispatch[rid] = wait[3]
        runs_of = sorted(s[4]["partition"] for s in inner if s[0] != "queue wait")
        assert runs_of == list(range(parts))
        for s in inner:
            if s[0] != "queue wait":
                assert wait[3] - 1e-3 <= s[2] <= s[3] <= end + 1e-3, (name, s)
    for (_, a, _, end_a, _), (_, b, _, _, _) in zip(requests, requests[1:]):
        assert dispatch[b] >= end_a - 1e-3, "with max_active_requests=1 a request waits for the one before"
