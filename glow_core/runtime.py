"""The runtime (Glow's HostManager, Executor and DeviceManager): devices, networks partitioned across them, and a
queue of requests.

``Host.add_device(backend, count=N, **options)`` creates N ``DeviceManager``s. ``Host.add_network(name, model,
**compile_options)`` partitions the model across the backends of the devices (in the order they were added:
that is the priority order), compiles each partition on every device of its backend (replicas let consecutive
requests overlap) and fails with a clear error when a partition fits on no device. ``Host.run(name, inputs,
priority=0)`` returns a ``concurrent.futures.Future``:

* requests wait in a queue ordered by priority, then arrival (a lower number runs first, as in Glow's HostManager
  and ``queue.PriorityQueue``); at most ``max_active_requests`` run at once; a request that finds
  ``max_queue`` requests waiting is refused at once (``RequestRefused`` in its future);
* a running request's partitions run as soon as their inputs exist, each on the least busy device holding it, so
  independent partitions and consecutive requests overlap across devices;
* an unknown network, bad inputs, a network evicted while the request waited, an error of the request's own (a
  ``GlowError`` from the device, e.g. an integer division by zero in its data) or a closed host end the future
  with a ``GlowError``: a request never hangs. A waiting request can be cancelled (``future.cancel()``); a
  running one cannot.

Devices fail, and the Host copes (``Host(max_retries=2, device_timeout_s=None, probe_interval_s=1.0)``):

* a device fault is a run whose device code raised anything but a ``GlowError``, returned outputs of the wrong
  names, shapes or dtypes, or did not come back within ``device_timeout_s`` seconds of its start (of its
  submission for a device that overrides ``run``). The device is marked unhealthy and the run is retried on
  another healthy device holding the partition (requests are pure functions of their inputs); a timed-out
  device's other runs move too. A request is retried at most ``max_retries`` times;
* an unhealthy device is probed every ``probe_interval_s`` (``DeviceManager.probe``: by default a run of one of
  its functions on inputs that succeeded before) and rejoins when the probe succeeds; one probe at a time;
* a request for which some partition has no healthy device fails at once with ``DeviceUnavailable``;
* ``stats()`` reports per device its health, runs, failures, probes and recoveries, and the retries.

With ``device_timeout_s=None`` (the default) a run that never returns keeps its request: give a deadline when a
device can hang.

Every state change happens under one lock; devices are called and futures resolved after it is released.

``Host(trace=True)`` records a Chrome trace in ``host.trace`` (``glow_core.trace``; ``host.trace.save(path)``):
the compilation of every partition for every device; on each device's own track its runs (named by function,
``args`` with the time it waited in the device's queue) and, when its backend times them, their instructions;
and each request that ran as an async span with its queue wait and each partition's run (from its submission to
a device until its outputs were back) nested in it.
"""
from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from .api import check_inputs, compile_graph, input_dtypes, plan_partitions
from .backend import Backend
from .errors import DeviceFault, DeviceUnavailable, GlowError, MemoryLimitError, RequestRefused
from .graph import Function
from .importer.onnx_import import graph_input_specs, load_model, shape_operand_inputs
from .partition import feeds_of, gather_outputs, output_sources
from .discovery import get_backend
from .trace import REQUEST, Trace

#: Trace process of the runtime's tracks.
TRACE_PROCESS = "runtime"


class DeviceManager:
    """One device: the functions loaded on it, a worker thread running them one at a time, and its memory.

    The default keeps compiled functions in host memory and runs them on the worker thread. A vendor subclasses
    it to talk to a card: override ``load``/``unload`` (put a compiled function on the card and take it off) and
    ``execute`` (run it; called on the worker thread), or ``run`` itself to be asynchronous. ``memory``: bytes
    the device holds (constants + mutable + activations of every function loaded), None for no limit;
    ``options`` reach the backend's compile (e.g. ``num_threads=1``). ``trace``: the Host's Trace when it traces
    (set by ``Host.add_device``); a vendor's ``execute`` may add its own events with ``trace.add_instrs`` on the
    track ``self.name``."""

    trace: Trace | None = None
    #: ``time.perf_counter()`` when the run in progress started on the worker thread, None when idle (the Host
    #: measures ``device_timeout_s`` from it).
    running_since: float | None = None

    def __init__(self, backend: str | Backend, name: str = "", memory: int | None = None, **options):
        self.backend = get_backend(backend)
        self.name = name or f"{self.backend.name}0"
        self.memory = memory
        self.options = options
        self.busy_seconds = 0.0
        self.runs = 0
        self._functions: dict = {}  # key -> (compiled function, bytes)
        self._pending = 0
        self._lock = threading.Lock()
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=f"glow-device-{self.name}", daemon=True)
        self._thread.start()

    # -- memory and functions -----------------------------------------------------------------------------
    def memory_used(self) -> int:
        """Bytes taken by the functions loaded."""
        with self._lock:
            return sum(n for _, n in self._functions.values())

    def memory_available(self) -> int | None:
        """Bytes free, None for no limit."""
        return None if self.memory is None else self.memory - self.memory_used()

    def add_function(self, key, function: Function, options: dict | None = None) -> int:
        """Compile ``function`` for this device (its options over ``options``) and load it under ``key``;
        returns its bytes. MemoryLimitError when it does not fit in the memory left."""
        res = compile_graph(function, self.backend, {**(options or {}), **self.options})
        if self.trace is not None:
            self.trace.add_compile(res.stats, f"{key} for {self.name}")
        p = res.ir.plan
        need = p.constant_size + p.mutable_size + p.activations_size
        free = self.memory_available()
        if free is not None and need > free:
            raise MemoryLimitError(f"device {self.name}: '{function.name}' needs {need} bytes (constant "
                                   f"{p.constant_size}, mutable {p.mutable_size}, activations {p.activations_size}), "
                                   f"{free} of {self.memory} are free")
        self.load(key, res.compiled)
        with self._lock:
            self._functions[key] = (res.compiled, need)
        return need

    def evict_function(self, key):
        """Unload the function ``key`` (nothing if it is not loaded)."""
        with self._lock:
            found = self._functions.pop(key, None)
        if found is not None:
            self.unload(key, found[0])

    def load(self, key, compiled):
        """Put a compiled function on the device. Default: it stays in host memory, nothing to do."""

    def unload(self, key, compiled):
        """Take a function off the device. Default: nothing to do."""

    # -- running --------------------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Runs queued or running on this device."""
        return self._pending

    def run(self, key, inputs: dict) -> Future:
        """Queue one run of function ``key``; the future gets its outputs (by name) or a GlowError."""
        fut: Future = Future()
        with self._lock:
            self._pending += 1
        self._work.put((key, inputs, fut, time.perf_counter()))
        return fut

    def probe(self, key, inputs: dict) -> Future:
        """Check an unhealthy device (the Host calls it every ``probe_interval_s`` until it succeeds): a future
        that succeeds when the device works. Default: a run of function ``key`` on ``inputs``, inputs on which
        it succeeded before (or the failed run's own); a vendor may read a status register instead."""
        return self.run(key, inputs)

    def execute(self, key, inputs: dict) -> dict:
        """Run function ``key`` on ``inputs`` (called on the worker thread, one run at a time); when tracing, with
        its instructions on this device's track (if the backend times them). Raise a ``GlowError`` for an error
        the request causes (not retried); anything else raised is a device fault (module docstring)."""
        with self._lock:
            compiled = self._functions[key][0]
        timed = None if self.trace is None else (time.perf_counter(), compiled.execute_timed(inputs))
        if timed is None or timed[1] is None:
            return compiled.execute(inputs)
        start, (outs, timings) = timed
        self.trace.add_instrs(start, timings, TRACE_PROCESS, self.name)
        return outs

    def _loop(self):
        while True:
            item = self._work.get()
            if item is None:
                return
            key, inputs, fut, queued = item
            if not fut.set_running_or_notify_cancel():  # the Host moved the run elsewhere before it started
                with self._lock:
                    self._pending -= 1
                continue
            t0 = self.running_since = time.perf_counter()
            try:
                out = self.execute(key, inputs)
            except GlowError as e:
                kind = DeviceFault if isinstance(e, DeviceFault) else GlowError
                fut.set_exception(kind(f"device {self.name}, function '{key}': {e}"))
            except BaseException as e:  # noqa: BLE001  (a vendor's device code may fail in any way: report, never hang)
                fut.set_exception(DeviceFault(f"device {self.name} failed running '{key}': {type(e).__name__}: {e}"))
            else:
                fut.set_result(out)
            finally:
                t1 = time.perf_counter()
                self.running_since = None
                if self.trace is not None:
                    self.trace.complete(key, t0, t1 - t0, TRACE_PROCESS, self.name, "device run",
                                        {"function": key, "device queue wait ms": round((t0 - queued) * 1e3, 3),
                                         "failed": fut.exception() is not None})
                with self._lock:
                    self.busy_seconds += t1 - t0
                    self.runs += 1
                    self._pending -= 1

    def close(self, timeout: float | None = None):
        """Stop the worker thread once the runs queued before are done."""
        self._work.put(None)
        self._thread.join(timeout)


@dataclass(frozen=True)
class Fault:
    """One rule of a ``FaultyDevice``'s schedule: what happens (``kind``) on which of the device's runs (numbered
    from 1, every run on the device counted, probes too): the runs listed in ``at``, and every ``every``-th run.

    Kinds: ``raise`` (a RuntimeError, as a driver would), ``hang`` (blocks until ``release()`` or ``close()``,
    then runs), ``delay`` (sleeps ``seconds``, then runs), ``garbage`` (returns empty arrays in place of the
    outputs)."""

    kind: str
    at: tuple[int, ...] = ()
    every: int = 0
    seconds: float = 0.0

    KINDS = ("raise", "hang", "delay", "garbage")

    def __post_init__(self):
        if self.kind not in self.KINDS:
            raise GlowError(f"Fault kind {self.kind!r}: the kinds are {', '.join(self.KINDS)}")
        if self.every < 0 or self.seconds < 0 or any(n < 1 for n in self.at):
            raise GlowError(f"Fault({self.kind!r}, at={self.at}, every={self.every}, seconds={self.seconds}): run "
                            f"numbers start at 1, every and seconds are zero or more")

    def hits(self, run: int) -> bool:
        return run in self.at or (self.every > 0 and run % self.every == 0)


class FaultyDevice(DeviceManager):
    """A DeviceManager that fails on a schedule, for testing a runtime against device faults (the kit's own tests
    and a vendor's): set ``faults`` (``Fault`` rules; the first that hits a run decides) on a device made with
    ``host.add_device(..., device_class=FaultyDevice)``. ``injected`` lists ``(run number, kind)`` of every
    fault injected; ``release()`` ends every hang, present and future."""

    faults: tuple[Fault, ...] = ()

    def __init__(self, *args, **kwargs):
        self.executions = 0
        self.injected: list[tuple[int, str]] = []
        self._released = threading.Event()
        super().__init__(*args, **kwargs)

    def execute(self, key, inputs: dict) -> dict:
        with self._lock:
            self.executions += 1
            run = self.executions
        fault = next((f for f in self.faults if f.hits(run)), None)
        if fault is not None:
            self.injected.append((run, fault.kind))
            if fault.kind == "raise":
                raise RuntimeError(f"injected fault on {self.name}, run {run}")
            if fault.kind == "hang":
                self._released.wait()
            elif fault.kind == "delay":
                time.sleep(fault.seconds)
            elif fault.kind == "garbage":
                return {k: np.zeros(0, v.dtype) for k, v in super().execute(key, inputs).items()}
        return super().execute(key, inputs)

    def release(self):
        """End every hang, present and future."""
        self._released.set()

    def close(self, timeout: float | None = None):
        self.release()
        super().close(timeout)


@dataclass(eq=False)
class _Part:
    key: str
    devices: list[DeviceManager]
    feeds: list[tuple[str, str]]
    deps: list[int]
    outputs: list[tuple[str, tuple, np.dtype]]  # what a run must return: name, shape, dtype
    users: list[int] = field(default_factory=list)


@dataclass(eq=False)
class _Network:
    name: str
    specs: list
    dtypes: dict
    input_shapes: dict
    parts: list[_Part]
    outputs: dict
    output_types: dict  # graph output name -> TensorType
    active: int = 0
    evicted: bool = False


@dataclass(eq=False)
class _Request:
    net: _Network
    inputs: dict
    future: Future
    priority: int = 0
    arrival: float = 0.0  # time.perf_counter() when it was queued
    dispatched: float = 0.0
    number: int = 0
    submitted: dict = field(default_factory=dict)  # partition -> (device name, perf_counter at submission)
    done_at: dict = field(default_factory=dict)  # partition -> perf_counter when its outputs were back
    env: dict = field(default_factory=dict)
    waiting: list[int] = field(default_factory=list)  # unmet dependencies per partition
    left: int = 0
    finished: bool = False
    retries: int = 0
    faults: list[str] = field(default_factory=list)  # the device faults it met


@dataclass(eq=False)
class _Attempt:
    """One run of a request's partition given to a device."""
    req: _Request
    part: int
    device: DeviceManager
    feed: dict
    submitted: float
    future: Future | None = None
    abandoned: bool = False  # its device timed out: the run moved elsewhere, a late result is dropped


@dataclass(eq=False)
class _Health:
    """The Host's view of one device."""
    healthy: bool = True
    runs: int = 0  # request runs the device gave back (or timed out on)
    failures: int = 0  # device faults
    probes: int = 0
    recoveries: int = 0
    last_error: str = ""
    attempts: set = field(default_factory=set)  # runs given to the device and not back
    probing: bool = False
    next_probe: float = 0.0
    failed_run: tuple | None = None  # (partition, feed) of its last fault: a probe's inputs when no run succeeded


class Host:
    """Devices, networks partitioned across them and a priority queue of requests; retries around faulty devices
    (module docstring)."""

    def __init__(self, max_active_requests: int = 4, max_queue: int = 64, trace: bool = False, max_retries: int = 2,
                 device_timeout_s: float | None = None, probe_interval_s: float = 1.0):
        if max_active_requests < 1 or max_queue < 0:
            raise GlowError(f"Host(max_active_requests={max_active_requests}, max_queue={max_queue}): at least one "
                            f"active request and a queue of zero or more")
        if max_retries < 0 or (device_timeout_s is not None and not device_timeout_s > 0) or not probe_interval_s > 0:
            raise GlowError(f"Host(max_retries={max_retries}, device_timeout_s={device_timeout_s}, probe_interval_s="
                            f"{probe_interval_s}): retries zero or more, a timeout above zero (or None), a probe "
                            f"interval above zero")
        self.max_active_requests = max_active_requests
        self.max_queue = max_queue
        self.max_retries = max_retries
        self.device_timeout_s = device_timeout_s
        self.probe_interval_s = probe_interval_s
        self.devices: list[DeviceManager] = []
        self._networks: dict[str, _Network] = {}
        self._queue: list = []  # heap of (priority, arrival, request)
        self._arrival = itertools.count()
        self._active = 0
        self._health: dict[DeviceManager, _Health] = {}
        self._good_feed: dict[str, dict] = {}  # partition key -> the feed of its last successful run (for probes)
        self._running: set[_Request] = set()
        self._counts = {"completed": 0, "failed": 0, "refused": 0, "cancelled": 0, "retries": 0}
        self._closed = False
        self._watching = True
        #: The Chrome trace of compilations, device runs and requests with ``trace=True`` (module docstring).
        self.trace = Trace() if trace else None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._wake = threading.Condition(self._lock)
        limits = [0.25, probe_interval_s / 4] + ([device_timeout_s / 4] if device_timeout_s else [])
        self._tick = max(0.002, min(limits))
        self._watchdog = threading.Thread(target=self._watch, name="glow-host-watchdog", daemon=True)
        self._watchdog.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- set-up -------------------------------------------------------------------------------------------
    def add_device(self, backend: str | Backend, count: int = 1, memory: int | None = None,
                   device_class: type | None = None, **options) -> list[DeviceManager]:
        """Create ``count`` devices of ``backend`` (``device_class``: a vendor's DeviceManager subclass; by default
        the backend's own, ``Backend.device_manager()``, else DeviceManager); ``options`` reach the backend's
        compile for these devices (e.g. ``num_threads=1``)."""
        b = get_backend(backend)
        device_class = device_class or b.device_manager() or DeviceManager
        with self._lock:
            if self._closed:
                raise GlowError("the host is closed")
            first = sum(d.backend.name == b.name for d in self.devices)
            new = [device_class(b, f"{b.name}{first + i}", memory, **options) for i in range(count)]
            for d in new:
                d.trace = self.trace
                self._health[d] = _Health()
            self.devices.extend(new)
        return new

    def add_network(self, name: str, model, **compile_options):
        """Partition ``model`` across the devices' backends and load every partition on each device of its
        backend that has room; GlowError when a partition fits on no device (nothing stays loaded then).
        Returns the placement report. ``input_shapes`` fixes symbolic dimensions; ``force`` and the other
        compile options are ``glow_core.compile``'s."""
        with self._lock:
            if self._closed:
                raise GlowError("the host is closed")
            if name in self._networks:
                raise GlowError(f"network '{name}' is already added; evict it first")
            devices = list(self.devices)
        if not devices:
            raise GlowError("add a device (Host.add_device) before adding a network")
        backends = list({d.backend.name: d.backend for d in devices}.values())
        m, _ = load_model(model)
        if shape_operand_inputs(m):
            raise GlowError(f"network '{name}': inputs {sorted(shape_operand_inputs(m))} determine shapes; the runtime "
                            f"runs models with static shapes only (glow_core.compile specializes them)")
        specs = graph_input_specs(m)
        shapes = dict(compile_options.pop("input_shapes", None) or {})
        symbolic = [nm for nm, _, dims in specs if nm not in shapes and not all(isinstance(d, int) for d in dims)]
        if symbolic:
            raise GlowError(f"network '{name}': inputs {symbolic} have symbolic dimensions; give input_shapes=")
        plan = plan_partitions(m, backends, shapes, None, compile_options)
        options = {k: v for k, v in compile_options.items() if k != "force"}
        parts, loaded = [], []
        home = {v.name: i for i, p in enumerate(plan.partitions) for v in p.outputs}
        try:
            for i, p in enumerate(plan.partitions):
                key = f"{name}/p{i}"
                b = plan.backends[p.backend]
                mine = [d for d in devices if d.backend.name == b.name]
                on, why = [], []
                for d in mine:
                    try:
                        d.add_function(key, p.function(f"{name}_p{i}"), options)
                        on.append(d)
                        loaded.append((d, key))
                    except MemoryLimitError as e:
                        why.append(str(e))
                if not on:
                    raise MemoryLimitError(f"network '{name}': partition {i} ({b.name}, {len(p.units)} nodes) fits on "
                                           f"no device: " + "; ".join(why))
                deps = sorted({home[src] for _, src in feeds_of(p) if src in home})
                outs = [(v.name, v.type.shape, v.type.dtype.np) for v in p.outputs]
                parts.append(_Part(key, on, feeds_of(p), deps, outs))
        except BaseException:
            for d, key in loaded:
                d.evict_function(key)
            raise
        for i, p in enumerate(parts):
            for j in p.deps:
                parts[j].users.append(i)
        out_types = {nm: v.type for nm, v in zip(plan.fn.output_names, plan.fn.outputs)}
        net = _Network(name, specs, input_dtypes(specs), shapes, parts, output_sources(plan), out_types)
        with self._lock:
            self._networks[name] = net
        return plan.report(name)

    def signature(self, name: str) -> dict:
        """The inputs and outputs of network ``name`` as it was compiled: ``{"inputs": [(name, DType, shape)],
        "outputs": [(name, DType, shape)]}`` in the model's order."""
        with self._lock:
            net = self._networks.get(name)
            if net is None:
                raise GlowError(f"unknown network '{name}'; added: {', '.join(sorted(self._networks)) or 'none'}")
        ins = [(nm, net.dtypes[nm], tuple(net.input_shapes.get(nm, dims))) for nm, _, dims in net.specs]
        return {"inputs": ins, "outputs": [(nm, t.dtype, t.shape) for nm, t in net.output_types.items()]}

    def ready(self, name: str) -> bool:
        """Whether a request for network ``name`` would find a healthy device for each of its partitions."""
        with self._lock:
            net = self._networks.get(name)
            return net is not None and not self._closed and self._unavailable(net) is None

    # -- requests -------------------------------------------------------------------------------------------
    def run(self, name: str, inputs: dict, priority: int = 0) -> Future:
        """Queue a request; the future gets the outputs by name, or a GlowError (see the module docstring)."""
        fut: Future = Future()
        with self._lock:
            net = self._networks.get(name)
            if self._closed:
                err = RequestRefused(f"request for network '{name}': the host is closed")
            elif net is None:
                err = GlowError(f"unknown network '{name}'; added: {', '.join(sorted(self._networks)) or 'none'}")
            else:
                try:
                    req = _Request(net, check_inputs(inputs, net.specs, net.dtypes, net.input_shapes), fut,
                                   priority, time.perf_counter())
                    err = self._unavailable(net)
                except GlowError as e:
                    err = e
            if err is None and self._active >= self.max_active_requests and len(self._queue) >= self.max_queue:
                err = RequestRefused(f"request for network '{name}' refused: {len(self._queue)} requests are waiting "
                                     f"(max_queue={self.max_queue})")
            if err is not None:
                self._counts["refused" if isinstance(err, RequestRefused) else "failed"] += 1
                actions = [(fut, err)]
            else:
                req.number = next(self._arrival)
                heapq.heappush(self._queue, (priority, req.number, req))
                actions = self._dispatch()
        self._act(actions)
        return fut

    def _unavailable(self, net: _Network) -> DeviceUnavailable | None:
        """The error for a request of ``net`` when a partition has no healthy device (lock held), else None."""
        for i, p in enumerate(net.parts):
            if not any(self._health[d].healthy for d in p.devices):
                why = "; ".join(f"{d.name}: {self._health[d].last_error}" for d in p.devices)
                return DeviceUnavailable(f"network '{net.name}': no healthy device holds partition {i} ({why})")
        return None

    def _dispatch(self) -> list:
        """Start queued requests while slots are free (lock held); returns the actions to perform unlocked."""
        actions = []
        while self._queue and self._active < self.max_active_requests:
            req = heapq.heappop(self._queue)[2]
            if not req.future.set_running_or_notify_cancel():  # cancelled while it waited
                self._counts["cancelled"] += 1
                continue
            net = req.net
            err = self._unavailable(net)
            if err is not None:  # its devices failed while it waited
                self._counts["failed"] += 1
                actions.append((req.future, err))
                continue
            req.dispatched = time.perf_counter()
            self._active += 1
            self._running.add(req)
            net.active += 1
            req.env = dict(req.inputs)
            req.waiting = [len(p.deps) for p in net.parts]
            req.left = len(net.parts)
            if not net.parts:  # every output is an input or a constant
                actions += self._finish(req, gather_outputs(net.outputs, req.env, req.inputs))
            for i, p in enumerate(net.parts):
                if not p.deps:
                    actions += self._submission(req, i)
        return actions

    def _submission(self, req: _Request, i: int) -> list:
        """A run of partition ``i`` on the healthy device holding it with the fewest runs outstanding, or the
        request's end when there is none (lock held)."""
        p = req.net.parts[i]
        healthy = [d for d in p.devices if self._health[d].healthy]
        if not healthy:
            faults = "; ".join(req.faults) or "; ".join(f"{d.name}: {self._health[d].last_error}" for d in p.devices)
            return self._finish(req, DeviceUnavailable(f"network '{req.net.name}': no healthy device holds partition "
                                                       f"{i} ({faults})"))
        device = min(healthy, key=lambda d: len(self._health[d].attempts))
        a = _Attempt(req, i, device, {ph: req.env[src] for ph, src in p.feeds}, time.perf_counter())
        self._health[device].attempts.add(a)
        req.submitted[i] = (device.name, a.submitted)
        return [a]

    def _act(self, actions):
        """Outside the lock: resolve futures (fut, result or exception) and submit runs (attempts) to devices."""
        for a in actions:
            if isinstance(a, _Attempt):
                key = a.req.net.parts[a.part].key
                try:
                    f = a.device.run(key, a.feed)
                    if not isinstance(f, Future):
                        raise TypeError(f"run returned a {type(f).__name__}, not a concurrent.futures.Future")
                except Exception as e:  # noqa: BLE001  (a vendor's run may fail in any way: a device fault)
                    f = Future()
                    f.set_exception(DeviceFault(f"device {a.device.name} refused a run of '{key}': "
                                                f"{type(e).__name__}: {e}"))
                a.future = f
                if a.abandoned:
                    f.cancel()
                f.add_done_callback(lambda f, a=a: self._done(a, f))
                continue
            fut, value = a
            if fut.cancelled():  # a waiting request the caller cancelled
                continue
            if isinstance(value, BaseException):
                fut.set_exception(value)
            else:
                fut.set_result(value)

    def _done(self, a: _Attempt, f: Future):
        with self._lock:
            h = self._health[a.device]
            h.attempts.discard(a)
            req = a.req
            if a.abandoned or req.finished:
                return
            h.runs += 1
            req.done_at[a.part] = time.perf_counter()
            part = req.net.parts[a.part]
            err = DeviceFault(f"device {a.device.name}: its run of '{part.key}' was cancelled") if f.cancelled() \
                else f.exception()
            if err is None:
                out = f.result()
                wrong = _wrong_outputs(part, out)
                if wrong:
                    err = DeviceFault(f"device {a.device.name} returned wrong outputs for '{part.key}': {wrong}")
            if err is None:
                self._good_feed[part.key] = a.feed
                req.env.update((nm, out[nm]) for nm, _, _ in part.outputs)
                req.left -= 1
                actions = []
                for j in part.users:
                    req.waiting[j] -= 1
                    if req.waiting[j] == 0 and not req.finished:
                        actions += self._submission(req, j)
                if req.left == 0 and not req.finished:
                    actions += self._finish(req, gather_outputs(req.net.outputs, req.env, req.inputs))
            elif isinstance(err, GlowError) and not isinstance(err, DeviceFault):
                actions = self._finish(req, err)  # the request's own error: the same on any device
            else:
                if not isinstance(err, DeviceFault):
                    err = DeviceFault(f"device {a.device.name} failed running '{part.key}': {type(err).__name__}: {err}")
                self._fault(a.device, str(err), part, a.feed)
                actions = self._retry(a, str(err))
        self._act(actions)

    def _fault(self, device: DeviceManager, message: str, part: _Part, feed: dict):
        """Mark ``device`` unhealthy after a fault (lock held); it is probed after ``probe_interval_s``."""
        h = self._health[device]
        h.failures += 1
        h.last_error = message
        h.failed_run = (part, feed)
        if h.healthy:
            h.healthy = False
            h.next_probe = time.perf_counter() + self.probe_interval_s

    def _retry(self, a: _Attempt, why: str) -> list:
        """Run attempt ``a``'s partition again on a healthy device, within the request's retries (lock held)."""
        req = a.req
        req.faults.append(why)
        if req.retries >= self.max_retries:
            return self._finish(req, DeviceUnavailable(
                f"network '{req.net.name}': partition {a.part} failed after {req.retries} retries "
                f"(max_retries={self.max_retries}): {'; '.join(req.faults)}"))
        actions = self._submission(req, a.part)
        if actions and isinstance(actions[0], _Attempt):
            req.retries += 1
            self._counts["retries"] += 1
        return actions

    def _finish(self, req: _Request, value) -> list:
        """End an active request (lock held): free its slot, unload an evicted network's last use, start more."""
        if self.trace is not None:
            self._trace_request(req, value)
        req.finished = True
        req.env = {}
        self._running.discard(req)
        self._active -= 1
        req.net.active -= 1
        self._counts["failed" if isinstance(value, BaseException) else "completed"] += 1
        if req.net.evicted and req.net.active == 0:
            self._unload(req.net)
        self._idle.notify_all()
        return [(req.future, value)] + self._dispatch()

    # -- the watchdog: deadlines and probes ------------------------------------------------------------------
    def _watch(self):
        while True:
            with self._lock:
                self._wake.wait(self._tick)
                if not self._watching:
                    return
                now = time.perf_counter()
                actions, cancel, probes = [], [], []
                for d, h in self._health.items():
                    if self.device_timeout_s is not None and h.attempts:
                        actions += self._deadline(d, h, now, cancel)
                    if not h.healthy and not h.probing and now >= h.next_probe and d in self.devices:
                        probes += self._probe_run(d, h)
            for a in cancel:
                if a.future is not None:
                    a.future.cancel()
            self._act(actions)
            for d, part, feed in probes:
                try:
                    f = d.probe(part.key, feed)
                    if not isinstance(f, Future):
                        raise TypeError(f"probe returned a {type(f).__name__}, not a concurrent.futures.Future")
                except Exception as e:  # noqa: BLE001  (a vendor's probe may fail in any way)
                    f = Future()
                    f.set_exception(e)
                f.add_done_callback(lambda f, d=d, part=part: self._probed(d, part, f))

    def _deadline(self, d: DeviceManager, h: _Health, now: float, cancel: list) -> list:
        """When ``d`` holds a run past ``device_timeout_s``: the device is unhealthy and its runs move (lock
        held). The clock starts when the worker starts the run (at submission for a device with its own run)."""
        live = [a for a in h.attempts if not a.abandoned]
        if not live:
            return []
        if type(d).run is DeviceManager.run:
            since = d.running_since
            late = since is not None and now - since > self.device_timeout_s
        else:
            late = any(now - a.submitted > self.device_timeout_s for a in live)
        if not late:
            return []
        running = [a for a in live if a.future is not None and a.future.running()] or live[:1]
        part = running[0].req.net.parts[running[0].part]
        why = f"device {d.name}: a run of '{part.key}' passed device_timeout_s={self.device_timeout_s} s"
        self._fault(d, why, part, running[0].feed)
        h.runs += len(running)
        actions = []
        for a in sorted(live, key=lambda a: a.submitted):
            a.abandoned = True
            cancel.append(a)
            if not a.req.finished:
                actions += self._retry(a, why)
        return actions

    def _probe_run(self, d: DeviceManager, h: _Health) -> list:
        """The probe to start on unhealthy ``d`` (lock held): one of its partitions on inputs that succeeded
        before, else on its failed run's; a device holding nothing to probe with rejoins."""
        with d._lock:
            loaded = set(d._functions)
        parts = [p for net in self._networks.values() for p in net.parts if d in p.devices and p.key in loaded]
        good = [p for p in parts if p.key in self._good_feed]
        if good:
            part, feed = good[0], self._good_feed[good[0].key]
        elif h.failed_run is not None and h.failed_run[0].key in loaded:
            part, feed = h.failed_run
        else:
            h.healthy = True
            h.recoveries += 1
            return []
        h.probing = True
        h.probes += 1
        return [(d, part, feed)]

    def _probed(self, d: DeviceManager, part: _Part, f: Future):
        with self._lock:
            h = self._health[d]
            h.probing = False
            err = f.exception() if not f.cancelled() else DeviceFault("the probe was cancelled")
            wrong = _wrong_outputs(part, f.result()) if err is None else ""
            if err is None and not wrong:
                h.healthy = True
                h.recoveries += 1
            else:
                h.last_error = f"probe of '{part.key}' failed: {wrong or f'{type(err).__name__}: {err}'}"
                h.next_probe = time.perf_counter() + self.probe_interval_s

    def _trace_request(self, req: _Request, value):
        """The request's span, its queue wait and each partition's run until now (lock held)."""
        end = time.perf_counter()
        name = f"request {req.number} ({req.net.name})"
        result = f"{type(value).__name__}: {value}" if isinstance(value, BaseException) else "ok"
        self.trace.span(name, req.number, req.arrival, end - req.arrival, TRACE_PROCESS, REQUEST,
                        {"network": req.net.name, "priority": req.priority, "result": result[:300]})
        self.trace.span("queue wait", req.number, req.arrival, req.dispatched - req.arrival, TRACE_PROCESS, REQUEST)
        for i, (device, t) in sorted(req.submitted.items()):
            done = req.done_at.get(i, end)
            self.trace.span(f"{req.net.parts[i].key} on {device}", req.number, t, done - t, TRACE_PROCESS, REQUEST,
                            {"partition": i, "device": device})

    @staticmethod
    def _unload(net: _Network):
        for p in net.parts:
            for d in p.devices:
                d.evict_function(p.key)

    def evict_network(self, name: str):
        """Remove a network: its waiting requests end with a GlowError; running ones finish, then its functions
        leave the devices."""
        with self._lock:
            net = self._networks.pop(name, None)
            if net is None:
                raise GlowError(f"unknown network '{name}'; added: {', '.join(sorted(self._networks)) or 'none'}")
            net.evicted = True
            gone = [r for _, _, r in self._queue if r.net is net]
            self._queue = [e for e in self._queue if e[2].net is not net]
            heapq.heapify(self._queue)
            self._counts["failed"] += len(gone)
            actions = [(r.future, GlowError(f"network '{name}' was evicted before the request ran")) for r in gone]
            if net.active == 0:
                self._unload(net)
        self._act(actions)

    # -- observation and shutdown ---------------------------------------------------------------------------
    def stats(self) -> dict:
        """Queue depth, active/completed/failed/refused/cancelled requests, retries, and ``devices``: per device
        (in the order added) its name, backend, health, runs, failures (device faults), probes, recoveries, last
        error, busy seconds, runs pending, memory used and capacity."""
        with self._lock:
            out = {"queue_depth": len(self._queue), "active_requests": self._active,
                   "completed_requests": self._counts["completed"], "failed_requests": self._counts["failed"],
                   "refused_requests": self._counts["refused"], "cancelled_requests": self._counts["cancelled"],
                   "retries": self._counts["retries"],
                   "networks": {n: {"partitions": len(net.parts), "active": net.active}
                                for n, net in self._networks.items()}}
            health = [(d, self._health[d]) for d in self._health]
            rows = [{"name": d.name, "backend": d.backend.name, "healthy": h.healthy, "runs": h.runs,
                     "failures": h.failures, "probes": h.probes, "recoveries": h.recoveries,
                     "last_error": h.last_error} for d, h in health]
        for (d, _), row in zip(health, rows):
            row.update(busy_seconds=d.busy_seconds, pending=d.pending, memory_used=d.memory_used(), memory=d.memory)
        out["devices"] = rows
        return out

    def close(self, timeout: float | None = 60.0):
        """Refuse new requests, end the waiting ones with a GlowError, let the running ones finish (those still
        running after ``timeout`` seconds end with a GlowError), then stop the devices (an unhealthy device is
        given a second at most). Safe to call twice."""
        with self._lock:
            self._closed = True
            gone = [r for _, _, r in self._queue]
            self._queue = []
            self._counts["failed"] += len(gone)
            actions = [(r.future, GlowError("the host was closed before the request ran")) for r in gone]
        self._act(actions)
        with self._lock:
            self._idle.wait_for(lambda: self._active == 0, timeout)
            actions = []
            for req in list(self._running):
                actions += self._finish(req, GlowError(f"the host was closed while the request ran (still running "
                                                       f"after {timeout} s)"))
            devices, self.devices = list(self.devices), []
            healthy = {d: self._health[d].healthy for d in devices}
            self._watching = False
            self._wake.notify_all()
        self._act(actions)
        if self._watchdog is not threading.current_thread():
            self._watchdog.join(timeout)
        for d in devices:
            d.close(timeout if healthy[d] else (1.0 if timeout is None else min(timeout, 1.0)))


def _wrong_outputs(part: _Part, out) -> str:
    """What is wrong with a run's outputs (a dict holding every output of the partition with its shape and
    dtype), or ''."""
    if not isinstance(out, dict):
        return f"a {type(out).__name__}, not a dict of arrays"
    for name, shape, dt in part.outputs:
        a = out.get(name)
        if not isinstance(a, np.ndarray):
            return f"no array '{name}'" if a is None else f"'{name}' is a {type(a).__name__}, not an array"
        if a.shape != shape or a.dtype != dt:
            return f"'{name}' is {a.dtype}{list(a.shape)}, expected {np.dtype(dt)}{list(shape)}"
    return ""
