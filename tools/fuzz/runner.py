"""Running models in a child process: a crash (segfault, abort), a hang or a runaway allocation of the code
under test is caught and classified instead of taking the fuzzer down.

A ``Worker`` is one long-lived child (``python -m glow_tools.fuzz.runner FD``: a fresh interpreter, so no
state of the parent leaks in) that answers jobs sent over a socket pair: compile and run a model on a
backend (or onnxruntime), or call a function (onnx's checker and shape inference abort on some invalid
models, so they run there too). Each job has a time limit; on expiry the child is killed and restarted.
The child's address space is limited with ``RLIMIT_AS`` (not under AddressSanitizer, which reserves
terabytes of shadow memory).
"""
from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import traceback
from importlib import import_module
from multiprocessing.connection import Connection
from dataclasses import dataclass, field

import numpy as np
import onnx

from glow_core.api import compile as glow_compile
from glow_core.errors import GlowError, UnsupportedOpError
from glow_tools.fuzz.reach import conv_paths

#: What a child sends once it is ready for jobs, and how long its start may take.
READY, STARTUP_SECONDS = "ready", 300.0
#: Outcome kinds of one job.
OK, GLOW_ERROR, UNSUPPORTED, EXCEPTION, CRASH, HANG = "ok", "glow-error", "unsupported", "exception", "crash", "hang"


@dataclass
class Outcome:
    """What one job did: ``kind`` (see the constants above), outputs by name when ``ok``, else a message."""

    kind: str
    outputs: dict = field(default_factory=dict)
    error_type: str = ""
    message: str = ""
    reach: list = field(default_factory=list)  # the backend paths the model reached (reach.conv_paths)

    @property
    def signature(self) -> str:
        """The failure class used to decide that a shrunk model 'still fails the same way'."""
        if self.kind in (EXCEPTION, GLOW_ERROR):
            return f"{self.kind}:{self.error_type}"
        return self.kind if self.kind != CRASH else f"crash:{self.error_type}"


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except (ValueError, TypeError):
        return f"exit {code}"


def _run_onnxruntime(model_bytes, inputs):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, inputs)))


def _call(target, args):
    """``call`` jobs: run ``module:function(*args)`` in the child (onnx's C++ checker and shape inference abort
    the process on some invalid models: they never run in the fuzzer's own process)."""
    mod, _, fn = target.partition(":")
    try:
        return Outcome(OK, getattr(import_module(mod), fn)(*args))
    except Exception as e:  # noqa: BLE001
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])
        return Outcome(EXCEPTION, error_type=type(e).__name__, message=f"{e}\n{tb}"[:4000])


def _job(kind, backend, model_bytes, inputs, options):
    """One job inside the child; returns an Outcome (never raises)."""
    if kind == "call":
        return _call(backend, model_bytes)
    if options.pop("check", False):
        try:
            onnx.checker.check_model(onnx.load_from_string(model_bytes), full_check=True)
        except Exception as e:  # noqa: BLE001  (an invalid model: the reference rejects it)
            return Outcome(GLOW_ERROR, error_type="onnx.checker", message=str(e)[:2000])
    try:
        if backend == "onnxruntime":
            return Outcome(OK, _run_onnxruntime(model_bytes, inputs))
        cm = glow_compile(model_bytes, backend, **options)
        if kind == "compile":
            return Outcome(OK)
        outs = cm.run(inputs)
        return Outcome(OK, {k: np.asarray(v) for k, v in outs.items()}, reach=conv_paths(cm))
    except UnsupportedOpError as e:
        return Outcome(UNSUPPORTED, error_type=type(e).__name__, message=str(e)[:2000])
    except GlowError as e:
        return Outcome(GLOW_ERROR, error_type=type(e).__name__, message=str(e)[:2000])
    except Exception as e:  # noqa: BLE001  (the point: anything else is a finding)
        if backend == "onnxruntime":
            return Outcome(GLOW_ERROR, error_type=type(e).__name__, message=str(e)[:2000])
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])
        return Outcome(EXCEPTION, error_type=type(e).__name__, message=f"{e}\n{tb}"[:4000])


def _serve(conn, memory_limit):
    if memory_limit:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    conn.send(READY)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        conn.send(_job(*job))


class Worker:
    """A child process running jobs with a time limit (seconds) and an address-space limit (bytes, 0: none).

    ``env`` holds variables set for the child only (e.g. LD_PRELOAD of a sanitizer runtime)."""

    def __init__(self, timeout: float = 60.0, memory_limit: int = 4 << 30, env: dict | None = None):
        self.timeout = timeout
        self.memory_limit = memory_limit
        self.env = dict(env or {})
        self.proc = None
        self.conn = None
        self.restarts = 0

    def _start(self):
        parent, child = socket.socketpair()
        env = dict(os.environ, **self.env)
        self.proc = subprocess.Popen([sys.executable, "-m", "glow_tools.fuzz.runner", str(child.fileno()),
                                      str(self.memory_limit)], pass_fds=(child.fileno(),), env=env,
                                     stdin=subprocess.DEVNULL)
        child.close()
        self.conn = Connection(parent.detach())
        self.restarts += 1
        # a job's time limit starts when the child is ready: its interpreter start and imports do not count (they
        # take seconds on a loaded machine, and a restart after a hang must not make the next job a hang too)
        try:
            ready = self.conn.poll(STARTUP_SECONDS) and self.conn.recv() == READY
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.stop()
            raise GlowError(f"the fuzzing child process did not start within {STARTUP_SECONDS} s")

    def stop(self):
        """Kill the child (if any); the next job starts a fresh one."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(10)
            self.conn.close()
        self.proc = self.conn = None

    def run(self, backend, model_bytes: bytes, inputs: dict, options=None, kind="run",
            timeout: float | None = None) -> Outcome:
        """Compile and run (``kind="run"``) or only compile (``"compile"``) ``model_bytes`` on ``backend``."""
        if self.proc is None or self.proc.poll() is not None:
            self.stop()
            self._start()
        try:
            self.conn.send((kind, backend, model_bytes, inputs, dict(options or {})))
            if self.conn.poll(self.timeout if timeout is None else timeout):
                return self.conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            pass
        try:
            code = self.proc.wait(0.5)
        except subprocess.TimeoutExpired:
            self.stop()
            return Outcome(HANG, message=f"no answer within {self.timeout if timeout is None else timeout} s")
        self.stop()
        return Outcome(CRASH, error_type=_signal_name(code) if code and code < 0 else f"exit{code}",
                       message=f"the child process died ({_signal_name(code) if code and code < 0 else code})")

    def call(self, target: str, *args, timeout: float | None = None) -> Outcome:
        """Run ``module:function(*args)`` in the child; ``outputs`` holds its (picklable) result."""
        return self.run(target, args, {}, kind="call", timeout=timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


if __name__ == "__main__":  # the child: serve jobs with this module's classes (not __main__'s) on the wire
    from glow_tools.fuzz import runner as _module
    _module._serve(Connection(int(sys.argv[1])), int(sys.argv[2]))
