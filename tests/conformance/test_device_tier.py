"""The device tier (conformance/tier_device.py) catches DeviceManagers broken against the runtime contract, each
in one way, naming the case; the kit's own DeviceManager passes it on the interpreter (CI runs it on cpu too).

Each broken device is the interpreter's backend with ``device_manager()`` naming a DeviceManager subclass with
one bug. ``GLOW_DEVICE_DEADLINE=2`` keeps the waits on a device that never answers short."""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import numpy as np
import pytest

from glow_core.runtime import DeviceManager
from glow_interpreter.backend import InterpreterBackend
from tests.conformance.test_power import run_suite


class KeepsEvicted(DeviceManager):
    """evict_function does nothing: the function keeps running and its bytes are never given back."""

    def evict_function(self, key):
        pass


class SwallowsErrors(DeviceManager):
    """A run that fails never resolves its future (the driver drops the error interrupt)."""

    def run(self, key, inputs):
        inner, outer = super().run(key, inputs), Future()
        inner.add_done_callback(lambda f: outer.set_result(f.result()) if f.exception() is None else None)
        return outer


class ReusesOutputBuffers(DeviceManager):
    """Every run of a function returns the same host arrays, overwritten by the next run (a pinned buffer)."""

    def execute(self, key, inputs):
        out = super().execute(key, inputs)
        bufs = self.__dict__.setdefault("_bufs", {}).setdefault(key, {})
        for k, v in out.items():
            if k not in bufs or bufs[k].shape != np.shape(v):
                bufs[k] = np.empty_like(v)
            bufs[k][...] = v
        return dict(bufs)


class WritesInputs(DeviceManager):
    """The run scribbles over the caller's input arrays (DMA into the host buffer it read from)."""

    def execute(self, key, inputs):
        out = super().execute(key, inputs)
        for v in inputs.values():
            if isinstance(v, np.ndarray) and v.size and v.flags.writeable:
                v.reshape(-1).view(np.uint8)[0] ^= 0xFF
        return out


class IgnoresMemoryLimit(DeviceManager):
    """Reports no limit: functions are loaded past the device's memory."""

    def memory_available(self):
        return None


class DropsQueuedOnClose(DeviceManager):
    """close() stops at once: the runs queued before it are dropped and their futures never resolve."""

    def close(self, timeout=None):
        self._stop = True
        super().close(timeout)

    def execute(self, key, inputs):
        if getattr(self, "_stop", False):
            threading.Event().wait()  # never returns: the run was dropped
        return super().execute(key, inputs)


class StaleDescriptor(DeviceManager):
    """A run submitted while another is in flight reads the inputs of the run before it (a DMA descriptor reused
    too early); each run takes 20 ms, so runs submitted together overlap."""

    def run(self, key, inputs):
        lock = self.__dict__.setdefault("_dlock", threading.Lock())
        with lock:
            prev = getattr(self, "_prev", None)
            if self.pending and prev is not None and prev[0] == key:
                inputs = prev[1]
            self._prev = (key, inputs)
        return super().run(key, inputs)

    def execute(self, key, inputs):
        time.sleep(0.02)
        return super().execute(key, inputs)


class IgnoresCancel(DeviceManager):
    """Its runs' futures are its own, apart from the runs: cancelling one cancels nothing on the device (and a
    run in progress can be cancelled too)."""

    def run(self, key, inputs):
        inner, outer = super().run(key, inputs), Future()

        def done(f):
            if not outer.cancelled():
                outer.set_exception(f.exception()) if f.exception() else outer.set_result(f.result())
        inner.add_done_callback(done)
        return outer


def _backend(cls):
    class Broken(InterpreterBackend):
        def device_manager(self):
            return cls
    Broken.__name__ = f"Interpreter{cls.__name__}"
    return Broken


for _cls in (KeepsEvicted, SwallowsErrors, ReusesOutputBuffers, WritesInputs, IgnoresMemoryLimit, DropsQueuedOnClose,
             StaleDescriptor, IgnoresCancel):
    globals()[f"Backend_{_cls.__name__}"] = _backend(_cls)

TRANSFERS = {f"device/transfers/{dt}/3x5x7_201" for dt in ("float32", "float16", "bfloat16", "float64", "int8", "uint8",
                                                              "int16", "uint16", "int32", "uint32", "int64", "uint64",
                                                              "bool")}
#: broken device -> (cases that must fail, what each of their messages says)
CAUGHT = {
    "KeepsEvicted": ({"device/functions/any/run_evict_readd", "device/memory/any/accounting_and_limit"},
                     "evict"),
    "SwallowsErrors": ({"device/errors/int32/division_by_zero", "device/errors/any/unknown_function_missing_input"},
                       "the device hangs instead of failing the run"),
    "ReusesOutputBuffers": (TRANSFERS | {"device/transfers/int64/rank0"},
                            "the first run's output after the second run"),
    "WritesInputs": (TRANSFERS,
                     "the caller's input array after the run"),
    "IgnoresMemoryLimit": ({"device/memory/any/accounting_and_limit"}, "memory_available()"),
    "DropsQueuedOnClose": ({"device/close/any/drains_queued_runs"}, "queued before close(): no answer within 2 s"),
    "StaleDescriptor": ({"device/concurrency/any/threads4x8"}, "not bit for bit equal"),
    "IgnoresCancel": ({"device/cancellation/any/queued_device_run_then_probe"}, "cancelled"),
}


@pytest.mark.parametrize("name", sorted(CAUGHT))
def test_a_broken_device_manager_is_caught(name, tmp_path, monkeypatch):
    monkeypatch.setenv("GLOW_DEVICE_DEADLINE", "2")
    rc, data = run_suite(f"tests.conformance.test_device_tier:Backend_{name}", ["device/*"], tmp_path / "r.html")
    failed = {c["id"]: c["detail"] for c in data["cases"] if c["outcome"] == "fail"}
    assert rc == 1 and failed, f"{name}: the device tier passed a broken DeviceManager ({data['counts']})"
    assert all("rerun: glowc conformance" in d and "device class tests.conformance.test_device_tier." + name in d
               for d in failed.values()), failed
    must, says = CAUGHT[name]
    assert must <= set(failed), f"{name}: not caught by {sorted(must - set(failed))}"
    assert all(says in failed[k] for k in must), {k: failed[k] for k in must}
    if name == "IgnoresMemoryLimit":  # one bug, one case
        assert set(failed) == must


def test_the_kits_device_manager_passes_on_the_interpreter(tmp_path):
    rc, data = run_suite("interpreter", ["device/*"], tmp_path / "r.html")
    assert rc == 0 and data["counts"]["fail"] == 0 and data["counts"]["pass"] == 25, data["counts"]
