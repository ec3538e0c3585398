"""Tier "device": the backend's ``DeviceManager`` against the runtime contract (``glow_core.runtime``).

The device class is the backend's own (``Backend.device_manager()``), or the kit's ``DeviceManager`` when the
backend names none. Each case makes its devices, drives them as the ``Host`` does (``add_function``, ``run``,
``evict_function``, ``memory_used``/``memory_available``, ``close``), or through a ``Host``, and closes them:

- functions: a function added under a key runs and answers correctly; evicted, it is gone (a run of it ends in
  an error in its future) and its bytes are given back; added again, it runs; two functions live side by side;
- concurrency: runs submitted from several threads at once to one device, and requests spread by a Host over two
  devices, all answer correctly and are all counted;
- transfers: every dtype the backend accepts goes in and comes back bit for bit (a transpose), also empty and
  rank-0 tensors; the caller's input arrays are unchanged, the outputs share no memory with them, and the arrays
  a run returned are unchanged by the next run;
- memory: ``add_function`` returns the bytes of the function's memory plan, ``memory_used`` is their sum,
  ``memory_available`` what is left of ``memory``; a function that does not fit raises ``MemoryLimitError``
  naming the device and changes nothing;
- errors: a run failing in the device's code (an integer division by zero: the request's own error, a
  ``GlowError`` but not a ``DeviceFault``), a run of a function never added and a run with an input missing each
  end their own future with a ``GlowError``, and the device goes on answering;
- cancellation: through a Host, a request waiting for the device can be cancelled and never runs, the running one
  cannot be cancelled and completes, and closing the Host ends the waiting ones with a ``GlowError``; on the
  device itself, a run waiting in its queue can be cancelled (the Host moves runs so) and never runs, and then
  ``probe`` answers;
- close: the runs queued before ``close`` complete, then the device stops.

What a device computes outside the transfers is the first of ``OPS`` it claims (a float32 addition, else an int8
maximum: a quantized device), and its transfers are transposes, else copies; a device claiming none of them skips
the case (refused). No wait lasts longer than ``deadline()`` seconds (30, or ``$GLOW_DEVICE_DEADLINE``): a device
that never answers fails the case, naming the wait. Expectations are numpy's (additions, maxima, transposes and
copies are exact), never the backend's own.
"""
from __future__ import annotations

import os
import threading

import numpy as np
from onnx import helper

from .cases import Case, CaseFailure, Unsupported, case_seed
from .harness import check_supported, options, primitive_function
from .primitive_cases import rand

#: Seconds any single wait on a device may last, unless $GLOW_DEVICE_DEADLINE says otherwise.
DEADLINE = 30.0


def deadline() -> float:
    return float(os.environ.get("GLOW_DEVICE_DEADLINE", DEADLINE))
PROFILE = ("device",)


def device_class(backend):
    """The DeviceManager class that drives ``backend``'s devices: its own, or the kit's default."""
    from glow_core.runtime import DeviceManager
    cls = backend.device_manager() if hasattr(backend, "device_manager") else None
    return cls or DeviceManager


class Check:
    """What a case body gets: the context, its description and rerun command, and helpers that wait with a
    deadline and fail the case with a complete message."""

    def __init__(self, ctx, case_id, desc):
        self.ctx, self.case_id, self.desc = ctx, case_id, desc
        self.rr = ctx.rerun(case_id)
        self.rng = np.random.default_rng(case_seed(case_id, ctx.seed))
        self.cls = self.tested = device_class(ctx.backend)  # cls: what devices are made of (a case may wrap it)
        self.devices = []

    def fail(self, what):
        raise CaseFailure(f"{self.desc} (device class {self.tested.__module__}.{self.tested.__qualname__})\n  {what}\n"
                          f"  rerun: {self.rr}")

    def device(self, name="dev0", memory=None):
        d = self.cls(self.ctx.backend, name, memory, num_threads=1)
        self.devices.append(d)
        return d

    def add(self, d, key, fn):
        """add_function, refusals as the harness reports them."""
        from glow_core.errors import UnsupportedOpError

        from .harness import refusal
        try:
            return d.add_function(key, fn, options())
        except UnsupportedOpError as e:
            raise refusal(self.ctx, e, "compiling") from None

    def result(self, fut, what):
        """The future's result within deadline() (the case fails when the device never answers or errs)."""
        from concurrent.futures import TimeoutError as FutureTimeout
        self.ctx.phase("run")
        try:
            return fut.result(deadline())
        except FutureTimeout:
            self.fail(f"{what}: no answer within {deadline():g} s (the device hangs)")
        except Exception as e:  # noqa: BLE001
            self.fail(f"{what}: the future ended in {type(e).__name__}: {e}")
        finally:
            self.ctx.phase("check")

    def error(self, fut, what, pattern=None):
        """The GlowError ending the future within deadline() (the case fails on a result, another exception or a
        hang)."""
        from concurrent.futures import TimeoutError as FutureTimeout

        from glow_core.errors import GlowError
        self.ctx.phase("run")
        try:
            e = fut.exception(deadline())
        except FutureTimeout:
            self.fail(f"{what}: no answer within {deadline():g} s (the device hangs instead of failing the run)")
        finally:
            self.ctx.phase("check")
        if e is None:
            self.fail(f"{what}: the run succeeded; expected a GlowError in its future")
        if not isinstance(e, GlowError):
            self.fail(f"{what}: the future ended in {type(e).__name__}: {e}; expected a GlowError")
        if pattern and pattern not in str(e):
            self.fail(f"{what}: the GlowError does not name {pattern!r}: {e}")
        return e

    def equal(self, got, want, what):
        got = np.asarray(got)
        if got.dtype != want.dtype or got.shape != want.shape:
            self.fail(f"{what}: got {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}")
        if got.tobytes() != want.tobytes():
            bad = np.flatnonzero(got.reshape(-1).view(np.uint8) != want.reshape(-1).view(np.uint8)) \
                if got.size else []
            self.fail(f"{what}: not bit for bit equal to the expectation ({len(bad)} bytes differ, first at byte "
                      f"{bad[0] if len(bad) else '-'})")

    def close(self, judge=True):
        """Close every device made; ``judge``: fail the case when one does not stop within deadline()."""
        for d in self.devices:
            d.close(deadline())
            if judge and _alive(d):
                self.fail(f"device {d.name}: close() did not stop its worker within {deadline():g} s")


def _alive(d) -> bool:
    """Whether the device's worker thread still runs (DeviceManager's; a device without one has stopped)."""
    t = getattr(d, "_thread", None)
    return t is not None and t.is_alive()


#: What the device computes in the cases that are not about dtypes: the first of these the backend claims,
#: (primitive, the same ONNX op, dtype, numpy's answer: exact, each result correctly rounded).
OPS = (("add", "Add", "float32", np.add), ("max", "Max", "int8", np.maximum))


def operation(c: Check):
    """The first of OPS the backend claims (Unsupported, a skip, naming them when it claims none)."""
    refusals = []
    for prim, onnx_op, dt, ref in OPS:
        x = rand(dt, (2, 3), c.rng)
        try:
            check_supported(c.ctx.backend, prim, [x, x], {})
        except Unsupported as e:
            refusals.append(str(e))
            continue
        tag = f" [{prim} {dt}]"
        c.desc += "" if c.desc.endswith(tag) else tag
        return prim, onnx_op, dt, ref
    raise Unsupported("; ".join(refusals))


def add_function_of(c: Check, shape=(4, 17)):
    """(the one-node function y0 = op(x0, x1) of ``operation``, a feed maker, numpy's answer for a feed)."""
    prim, _, dt, ref = operation(c)
    a, b = rand(dt, shape, c.rng), rand(dt, shape, c.rng)

    def feed():
        return {"x0": rand(dt, shape, c.rng), "x1": rand(dt, shape, c.rng)}
    return primitive_function(prim, [a, b], {}), feed, lambda f: ref(f["x0"], f["x1"])


# -- the checks -------------------------------------------------------------------------------------------
def functions_lifecycle(c: Check):
    d = c.device()
    fn, feed, want = add_function_of(c)
    before = d.memory_used()
    need = c.add(d, "f", fn)
    if not isinstance(need, int) or need <= 0:
        c.fail(f"add_function returned {need!r}; expected the function's bytes (> 0)")
    if d.memory_used() != before + need:
        c.fail(f"memory_used() is {d.memory_used()} after adding a function of {need} bytes to {before}")
    f = feed()
    c.equal(c.result(d.run("f", f), "a run of 'f'")["y0"], want(f), "output y0 of 'f'")
    d.evict_function("f")
    if d.memory_used() != before:
        c.fail(f"memory_used() is {d.memory_used()} after evicting 'f'; expected {before} (its bytes given back)")
    c.error(d.run("f", feed()), "a run of 'f' after it was evicted", "'f'")
    d.evict_function("f")  # evicting what is not loaded does nothing
    c.add(d, "f", fn)
    f = feed()
    c.equal(c.result(d.run("f", f), "a run of 'f' added again")["y0"], want(f), "output y0 of 'f' added again")


def functions_side_by_side(c: Check):
    d = c.device()
    fn, feed, want = add_function_of(c)
    fn2, feed2, want2 = add_function_of(c, (3, 5, 7))
    n1, n2 = c.add(d, "a", fn), c.add(d, "b", fn2)
    if d.memory_used() != n1 + n2:
        c.fail(f"memory_used() is {d.memory_used()} with functions of {n1} and {n2} bytes loaded")
    jobs = [(k, f, d.run(k, f)) for k, f in (("a", feed()), ("b", feed2()), ("a", feed()), ("b", feed2()))]
    for k, f, fut in jobs:
        c.equal(c.result(fut, f"a run of '{k}'")["y0"], (want if k == "a" else want2)(f), f"output y0 of '{k}'")
    d.evict_function("a")
    f = feed2()
    c.equal(c.result(d.run("b", f), "a run of 'b' after 'a' was evicted")["y0"], want2(f), "output y0 of 'b'")
    if d.memory_used() != n2:
        c.fail(f"memory_used() is {d.memory_used()} after evicting 'a'; expected {n2}")


def concurrent_threads(c: Check, threads=4, each=8):
    d = c.device()
    fn, feed, want = add_function_of(c, (8, 33))
    c.add(d, "f", fn)
    feeds = [[feed() for _ in range(each)] for _ in range(threads)]
    futs = [[None] * each for _ in range(threads)]
    start = threading.Barrier(threads)

    def submit(t):
        start.wait(deadline())
        for i in range(each):
            futs[t][i] = d.run("f", feeds[t][i])
    workers = [threading.Thread(target=submit, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(deadline())
    for t in range(threads):
        for i in range(each):
            c.equal(c.result(futs[t][i], f"run {i} of thread {t}")["y0"], want(feeds[t][i]),
                    f"output y0 of run {i} of thread {t}")
    if d.runs != threads * each or d.pending != 0:
        c.fail(f"after {threads * each} runs the device counts runs={d.runs}, pending={d.pending}")


def host_network(c: Check):
    """(y = op(op(a, b), c) as an ONNX model of ``operation``, a feed maker, numpy's answer for a feed)."""
    from glow_core.types import dtype as gdtype
    _, onnx_op, dt, ref = operation(c)
    t = gdtype(dt).onnx
    g = helper.make_graph([helper.make_node(onnx_op, ["a", "b"], ["s"], name="first"),
                           helper.make_node(onnx_op, ["s", "c"], ["y"], name="second")], "device_tier",
                          [helper.make_tensor_value_info(n, t, [4, 9]) for n in "abc"],
                          [helper.make_tensor_value_info("y", t, [4, 9])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="glow-conformance")
    m.ir_version = min(m.ir_version, 10)

    def feed():
        return {k: rand(dt, (4, 9), c.rng) for k in "abc"}
    return m, feed, lambda f: ref(ref(f["a"], f["b"]), f["c"])


def concurrent_host(c: Check, requests=16):
    from glow_core.runtime import Host
    model, feed, want = host_network(c)
    with Host(max_active_requests=4, max_queue=64) as h:
        devs = h.add_device(c.ctx.backend, count=2, device_class=c.cls, num_threads=1)
        c.devices += devs
        h.add_network("net", model)
        feeds = [feed() for _ in range(requests)]
        futs = [h.run("net", f) for f in feeds]
        for i, (f, fut) in enumerate(zip(feeds, futs)):
            c.equal(c.result(fut, f"request {i}")["y"], want(f), f"output y of request {i}")
        runs = [d.runs for d in devs]
        if sum(runs) != requests:
            c.fail(f"{requests} requests of a one-partition network ran {runs} times on the two devices")


def transfers(c: Check, dt, shape, perm):
    d = c.device()
    x = rand(dt, shape, c.rng, -100, 100)
    try:
        check_supported(c.ctx.backend, "transpose", [x], {"perm": perm})
    except Unsupported:  # a device that only moves data: its copies
        check_supported(c.ctx.backend, "copy", [x], {})
        perm = tuple(range(len(shape)))
        c.desc += " [copy]"
        c.add(d, "t", primitive_function("copy", [x], {}))
    else:
        c.add(d, "t", primitive_function("transpose", [x], {"perm": perm}))
    first_in = {"x0": x}
    kept_in = x.copy()
    out1 = c.result(d.run("t", first_in), "the first run")["y0"]
    c.equal(x, kept_in, "the caller's input array after the run (it must not be written)")
    c.equal(out1, np.array(np.transpose(kept_in, perm), order="C"), "output y0 of the first run")
    if x.size and np.shares_memory(out1, x):
        c.fail("the output shares memory with the caller's input array")
    kept_out = np.array(out1, copy=True)
    x2 = rand(dt, shape, c.rng, -100, 100)
    out2 = c.result(d.run("t", {"x0": x2}), "the second run")["y0"]
    c.equal(out2, np.array(np.transpose(x2, perm), order="C"), "output y0 of the second run")
    c.equal(out1, kept_out, "the first run's output after the second run (returned arrays belong to the caller)")
    if out1.size and np.shares_memory(out1, out2):
        c.fail("the two runs returned arrays sharing memory")


def memory_accounting(c: Check):
    from glow_core.errors import MemoryLimitError
    fn, _, _ = add_function_of(c, (16, 16))
    fn2, feed2, want2 = add_function_of(c, (8, 24))
    probe = c.device("probe")
    if probe.memory_available() is not None:
        c.fail(f"memory_available() is {probe.memory_available()} on a device made without a memory limit; "
               "expected None")
    n1, n2 = c.add(probe, "f", fn), c.add(probe, "g", fn2)
    limit = n1 + n2 - 1
    d = c.device("dev0", memory=limit)
    c.add(d, "f", fn)
    if d.memory_available() != limit - n1:
        c.fail(f"memory_available() is {d.memory_available()} with {n1} of {limit} bytes used")
    try:
        c.add(d, "g", fn2)
    except MemoryLimitError as e:
        if d.name not in str(e):
            c.fail(f"the MemoryLimitError does not name the device {d.name!r}: {e}")
    else:
        c.fail(f"a function of {n2} bytes was added with {limit - n1} bytes free (no MemoryLimitError)")
    if d.memory_used() != n1:
        c.fail(f"memory_used() is {d.memory_used()} after a refused add_function; expected {n1} (unchanged)")
    c.error(d.run("g", feed2()), "a run of the function that was refused", "'g'")
    d.evict_function("f")
    try:
        c.add(d, "g", fn2)
    except MemoryLimitError as e:
        c.fail(f"'g' ({n2} of {limit} bytes) does not fit once 'f' was evicted (its bytes were not given back): {e}")
    f = feed2()
    c.equal(c.result(d.run("g", f), "a run of 'g' once it fits")["y0"], want2(f), "output y0 of 'g'")


def errors_in_device_code(c: Check):
    d = c.device()
    a = np.array([7, -7, 9, 5], np.int32)
    check_supported(c.ctx.backend, "div", [a, a], {})
    c.add(d, "div", primitive_function("div", [a, a], {}))
    e = c.error(d.run("div", {"x0": a, "x1": np.array([1, 0, 1, 1], np.int32)}), "a run dividing by zero", "'div'")
    from glow_core import errors
    if isinstance(e, getattr(errors, "DeviceFault", ())):
        c.fail(f"a run dividing by zero ended in a DeviceFault (the device's failure, retried elsewhere); the "
               f"request's own error is a plain GlowError: {e}")
    got = c.result(d.run("div", {"x0": a, "x1": np.array([2, 2, 3, -5], np.int32)}), "the run after the failed one")
    c.equal(got["y0"], np.array([3, -3, 3, -1], np.int32), "output y0 of the run after the failed one (truncating)")


def errors_of_the_request(c: Check):
    d = c.device()
    fn, feed, want = add_function_of(c)
    c.add(d, "f", fn)
    c.error(d.run("never_added", feed()), "a run of a function never added", "never_added")
    f = feed()
    del f["x1"]
    c.error(d.run("f", f), "a run with input x1 missing")
    f = feed()
    c.equal(c.result(d.run("f", f), "the run after the failed ones")["y0"], want(f), "output y0 after the errors")


def cancellation_through_host(c: Check):
    from glow_core.errors import GlowError
    from glow_core.runtime import Host
    model, feed, want = host_network(c)
    gate = threading.Event()

    class Gated(c.cls):
        """The backend's device, holding every run until the case opens the gate."""

        def execute(self, key, inputs):
            if not gate.wait(deadline()):
                raise GlowError("the case's gate never opened")
            return super().execute(key, inputs)
    h = Host(max_active_requests=1, max_queue=8)
    try:
        (dev,) = h.add_device(c.ctx.backend, count=1, device_class=Gated, num_threads=1)
        c.devices.append(dev)
        h.add_network("net", model)
        feeds = [feed() for _ in range(4)]
        futs = [h.run("net", f) for f in feeds]  # the first runs (held at the gate), three wait
        if futs[0].cancel():
            c.fail("the running request was cancelled (a running request cannot be)")
        if not futs[2].cancel():
            c.fail("a waiting request could not be cancelled")
        gate.set()
        for i in (0, 1, 3):
            f = feeds[i]
            c.equal(c.result(futs[i], f"request {i}")["y"], want(f), f"output y of request {i}")
        if not futs[2].cancelled():
            c.fail("the cancelled request's future is not cancelled")
        if dev.runs != 3:
            c.fail(f"the device ran {dev.runs} times for 3 requests and 1 cancelled (a cancelled request ran)")
        gate.clear()
        running = h.run("net", feeds[0])
        waiting = [h.run("net", f) for f in feeds[1:]]
        closer = threading.Thread(target=h.close, kwargs={"timeout": deadline()})
        closer.start()
        for i, fut in enumerate(waiting):
            c.error(fut, f"waiting request {i} when the host closed", "closed")
        gate.set()
        f = feeds[0]
        c.equal(c.result(running, "the request running when the host closed")["y"], want(f),
                "output y of the request running when the host closed")
        closer.join(deadline())
        if closer.is_alive():
            c.fail(f"Host.close() did not return within {deadline():g} s")
    finally:
        gate.set()
        h.close(deadline())


def cancellation_on_the_device(c: Check):
    """A run waiting in the device's queue can be cancelled (the Host moves runs to another device so): it never
    runs and the device goes on; the run in progress cannot be. Then ``probe`` answers for the device."""
    from glow_core.errors import GlowError
    gate, entered = threading.Event(), threading.Event()

    class Gated(c.cls):
        """The backend's device, holding its runs until the case opens the gate."""

        def execute(self, key, inputs):
            entered.set()
            if not gate.wait(deadline()):
                raise GlowError("the case's gate never opened")
            return super().execute(key, inputs)
    c.cls = Gated
    d = c.device()
    fn, feed, want = add_function_of(c)
    c.add(d, "f", fn)
    feeds = [feed() for _ in range(4)]
    futs = [d.run("f", f) for f in feeds]
    if not entered.wait(deadline()):
        c.fail(f"the first run did not start within {deadline():g} s")
    if futs[0].cancel():
        c.fail("the run in progress was cancelled (a running run cannot be)")
    if not futs[2].cancel():
        c.fail("a run waiting in the device's queue could not be cancelled")
    gate.set()
    for i in (0, 1, 3):
        c.equal(c.result(futs[i], f"run {i}")["y0"], want(feeds[i]), f"output y0 of run {i}")
    if not futs[2].cancelled():
        c.fail("the cancelled run's future is not cancelled")
    if d.runs != 3 or d.pending != 0:
        c.fail(f"after 3 runs and 1 cancelled the device counts runs={d.runs}, pending={d.pending} (a cancelled run "
               f"ran, or was not taken off the queue)")
    if hasattr(d, "probe"):
        f = feed()
        got = c.result(d.probe("f", f), "probe('f') of a working device")
        c.equal(got["y0"], want(f), "output y0 of the probe")


def close_drains(c: Check, queued=6):
    from glow_core.errors import GlowError
    gate, closing = threading.Event(), threading.Event()

    class Gated(c.cls):
        """The backend's device, holding its runs until close() was called."""

        def execute(self, key, inputs):
            if not gate.wait(deadline()):
                raise GlowError("the case's gate never opened")
            return super().execute(key, inputs)

        def close(self, timeout=None):
            closing.set()
            super().close(timeout)
    c.cls = Gated
    d = c.device()
    fn, feed, want = add_function_of(c)
    c.add(d, "f", fn)
    feeds = [feed() for _ in range(queued)]
    futs = [d.run("f", f) for f in feeds]
    closer = threading.Thread(target=d.close, args=(deadline(),))
    closer.start()
    closing.wait(deadline())
    gate.set()
    for i, (f, fut) in enumerate(zip(feeds, futs)):
        c.equal(c.result(fut, f"run {i}, queued before close()")["y0"], want(f), f"output y0 of run {i}")
    closer.join(deadline())
    if closer.is_alive() or _alive(d):
        c.fail(f"close() did not stop the device within {deadline():g} s")


#: The cases, one line each: (subject, dtype, variant, check, keyword arguments).
LINES = [
    ("functions", "any", "run_evict_readd", functions_lifecycle, {}),
    ("functions", "any", "two_side_by_side", functions_side_by_side, {}),
    ("concurrency", "any", "threads4x8", concurrent_threads, {}),
    ("concurrency", "any", "host_two_devices", concurrent_host, {}),
    ("memory", "any", "accounting_and_limit", memory_accounting, {}),
    ("errors", "int32", "division_by_zero", errors_in_device_code, {}),
    ("errors", "any", "unknown_function_missing_input", errors_of_the_request, {}),
    ("cancellation", "any", "host_waiting_running_close", cancellation_through_host, {}),
    ("cancellation", "any", "queued_device_run_then_probe", cancellation_on_the_device, {}),
    ("close", "any", "drains_queued_runs", close_drains, {}),
] + [("transfers", dt, "3x5x7_201", transfers, {"dt": dt, "shape": (3, 5, 7), "perm": (2, 0, 1)})
     for dt in ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                "int64", "uint64", "bool")] + [
    ("transfers", "float32", "empty_0x5", transfers, {"dt": "float32", "shape": (0, 5), "perm": (1, 0)}),
    ("transfers", "int64", "rank0", transfers, {"dt": "int64", "shape": (), "perm": ()}),
]


def device_case(subject, dt, variant, check, kw) -> Case:
    case_id = f"device/{subject}/{dt}/{variant}"

    def run(ctx):
        c = Check(ctx, case_id, f"device case {subject}/{variant} ({dt}) on backend '{ctx.backend.name}', seed "
                                f"{case_seed(case_id, ctx.seed)}")
        try:
            check(c, **kw)
        except BaseException:
            c.close(judge=False)
            raise
        c.close()
    return Case(case_id, "device", subject, dt, run, PROFILE, {"variant": variant})


def cases():
    return [device_case(*line) for line in LINES]

