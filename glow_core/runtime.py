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
* an unknown network, bad inputs, a network evicted while the request waited, a device error or a closed host
  end the future with a ``GlowError``: a request never hangs. A waiting request can be cancelled
  (``future.cancel()``); a running one cannot.

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

from .api import check_inputs, compile_graph, input_dtypes, plan_partitions
from .backend import Backend
from .errors import GlowError, MemoryLimitError, RequestRefused
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

    def execute(self, key, inputs: dict) -> dict:
        """Run function ``key`` on ``inputs`` (called on the worker thread, one run at a time); when tracing, with
        its instructions on this device's track (if the backend times them)."""
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
            t0 = time.perf_counter()
            try:
                out = self.execute(key, inputs)
            except GlowError as e:
                fut.set_exception(GlowError(f"device {self.name}, function '{key}': {e}"))
            except Exception as e:  # noqa: BLE001  (a vendor's device code may fail in any way: report, never hang)
                fut.set_exception(GlowError(f"device {self.name} failed running '{key}': {type(e).__name__}: {e}"))
            else:
                fut.set_result(out)
            finally:
                t1 = time.perf_counter()
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


@dataclass(eq=False)
class _Part:
    key: str
    devices: list[DeviceManager]
    feeds: list[tuple[str, str]]
    deps: list[int]
    users: list[int] = field(default_factory=list)


@dataclass(eq=False)
class _Network:
    name: str
    specs: list
    dtypes: dict
    input_shapes: dict
    parts: list[_Part]
    outputs: dict
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


class Host:
    """Devices, networks partitioned across them and a priority queue of requests (module docstring)."""

    def __init__(self, max_active_requests: int = 4, max_queue: int = 64, trace: bool = False):
        if max_active_requests < 1 or max_queue < 0:
            raise GlowError(f"Host(max_active_requests={max_active_requests}, max_queue={max_queue}): at least one "
                            f"active request and a queue of zero or more")
        self.max_active_requests = max_active_requests
        self.max_queue = max_queue
        self.devices: list[DeviceManager] = []
        self._networks: dict[str, _Network] = {}
        self._queue: list = []  # heap of (priority, arrival, request)
        self._arrival = itertools.count()
        self._active = 0
        self._outstanding: dict[DeviceManager, int] = {}  # runs given to each device and not finished
        self._running: set[_Request] = set()
        self._counts = {"completed": 0, "failed": 0, "refused": 0, "cancelled": 0}
        self._closed = False
        #: The Chrome trace of compilations, device runs and requests with ``trace=True`` (module docstring).
        self.trace = Trace() if trace else None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

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
                parts.append(_Part(key, on, feeds_of(p), deps))
        except BaseException:
            for d, key in loaded:
                d.evict_function(key)
            raise
        for i, p in enumerate(parts):
            for j in p.deps:
                parts[j].users.append(i)
        net = _Network(name, specs, input_dtypes(specs), shapes, parts, output_sources(plan))
        with self._lock:
            self._networks[name] = net
        return plan.report(name)

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
                    err = None
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

    def _dispatch(self) -> list:
        """Start queued requests while slots are free (lock held); returns the actions to perform unlocked."""
        actions = []
        while self._queue and self._active < self.max_active_requests:
            req = heapq.heappop(self._queue)[2]
            if not req.future.set_running_or_notify_cancel():  # cancelled while it waited
                self._counts["cancelled"] += 1
                continue
            net = req.net
            req.dispatched = time.perf_counter()
            self._active += 1
            self._running.add(req)
            net.active += 1
            req.env = dict(req.inputs)
            req.waiting = [len(p.deps) for p in net.parts]
            req.left = len(net.parts)
            if not net.parts:  # every output is an input or a constant
                actions += self._finish(req, gather_outputs(net.outputs, req.env, req.inputs))
            actions += [self._submission(req, i) for i, p in enumerate(net.parts) if not p.deps]
        return actions

    def _submission(self, req: _Request, i: int):
        """A run of partition ``i`` on the device holding it with the fewest runs outstanding (lock held)."""
        p = req.net.parts[i]
        device = min(p.devices, key=lambda d: self._outstanding.get(d, 0))
        self._outstanding[device] = self._outstanding.get(device, 0) + 1
        req.submitted[i] = (device.name, time.perf_counter())
        return (device, p.key, {ph: req.env[src] for ph, src in p.feeds}, req, i)

    def _act(self, actions):
        """Outside the lock: resolve futures (fut, result or exception) and submit runs to devices."""
        for a in actions:
            if len(a) == 2:
                fut, value = a
                if fut.cancelled():  # a waiting request the caller cancelled
                    continue
                if isinstance(value, BaseException):
                    fut.set_exception(value)
                else:
                    fut.set_result(value)
            else:
                device, key, feed, req, i = a
                try:
                    f = device.run(key, feed)
                except Exception as e:  # noqa: BLE001  (a vendor's run may fail in any way: the request fails)
                    f = Future()
                    f.set_exception(GlowError(f"device {device.name} refused a run of '{key}': "
                                              f"{type(e).__name__}: {e}"))
                f.add_done_callback(lambda f, req=req, i=i, device=device: self._done(req, i, device, f))

    def _done(self, req: _Request, i: int, device: DeviceManager, f: Future):
        with self._lock:
            self._outstanding[device] -= 1
            if req.finished:
                return
            req.done_at[i] = time.perf_counter()
            err = f.exception()
            if err is not None:
                actions = self._finish(req, err if isinstance(err, GlowError) else GlowError(str(err)))
            else:
                req.env.update(f.result())
                req.left -= 1
                actions = []
                for j in req.net.parts[i].users:
                    req.waiting[j] -= 1
                    if req.waiting[j] == 0:
                        actions.append(self._submission(req, j))
                if req.left == 0:
                    actions += self._finish(req, gather_outputs(req.net.outputs, req.env, req.inputs))
        self._act(actions)

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
        """Queue depth, active/completed/failed/refused requests, and per device: busy seconds, runs, runs
        pending, memory used and capacity."""
        with self._lock:
            out = {"queue_depth": len(self._queue), "active_requests": self._active,
                   "completed_requests": self._counts["completed"], "failed_requests": self._counts["failed"],
                   "refused_requests": self._counts["refused"], "cancelled_requests": self._counts["cancelled"],
                   "networks": {n: {"partitions": len(net.parts), "active": net.active}
                                for n, net in self._networks.items()}}
            devices = list(self.devices)
        out["devices"] = {d.name: {"backend": d.backend.name, "busy_seconds": d.busy_seconds, "runs": d.runs,
                                   "pending": d.pending, "memory_used": d.memory_used(), "memory": d.memory}
                          for d in devices}
        return out

    def close(self, timeout: float | None = 60.0):
        """Refuse new requests, end the waiting ones with a GlowError, let the running ones finish (those still
        running after ``timeout`` seconds end with a GlowError), then stop the devices. Safe to call twice."""
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
        self._act(actions)
        for d in devices:
            d.close(timeout)
