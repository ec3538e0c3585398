"""Running cases in a child process under time limits: the backend's crashes and hangs fail the cases involved,
never the run.

Each pytest process (the only one, or each xdist worker) forks one child after collection; the child inherits
the collected cases and runs them on request, answering with each outcome. The backend's compiled code only
ever runs in the child. The parent waits for every answer with a deadline set by the phase the child
announces: compiling and checking (the reference computation) get ``compile_limit`` seconds, running the
backend's compiled code gets ``run_limit``. A child that dies (segfault, abort, heap corruption) or misses its
deadline (it is killed) fails the case it was running, naming the signal, the phase and the child's last words
on stderr; the next case gets a new child. A case that failed so while part of a compile group is run once
more alone first, so that the failure is charged to the case that causes it, and its group is not compiled
together again. After three hangs of one subject in a process, that subject's further cases get a run limit of
``HANG_AFTER`` seconds, so that a backend hanging on every case of a primitive still finishes in bounded time.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import sys
import tempfile
import time
import traceback

from .cases import CaseFailure, Unsupported, stage_of

HANG_AFTER = 3.0
CHILD_CASES = 3000  # a child is replaced after this many cases (it keeps every library it loaded)


def _send(fd, obj):
    data = pickle.dumps(obj)
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _recv_exact(fd, n):
    chunks = []
    while n:
        b = os.read(fd, n)
        if not b:
            raise EOFError
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def _recv(fd):
    (n,) = struct.unpack("<Q", _recv_exact(fd, 8))
    return pickle.loads(_recv_exact(fd, n))


def outcome_of(case, ctx):
    """Run ``case`` here; (outcome, text, stage, statistics) with outcome pass, fail, skip:<kind> or error, the
    stage the case ended at (``cases.STAGES``) and the statistics of every output it compared."""
    import pytest

    from .checker import RECORD
    RECORD.clear()
    ctx.stage = "import"
    try:
        case.run(ctx)
        return "pass", "", "pass", list(RECORD)
    except Unsupported as e:
        return f"skip:{e.kind}", str(e), e.stage, list(RECORD)
    except CaseFailure as e:
        return "fail", str(e), e.stage, list(RECORD)
    except pytest.skip.Exception as e:  # fail-closed: a case skips only by raising cases.Unsupported
        return "error", (f"pytest.skip was raised inside the case ({e.msg}); a case skips only by raising "
                         f"glow_conformance.cases.Unsupported (a refusal, with its kind)"), ctx.stage, list(RECORD)
    except Exception as e:  # noqa: BLE001  (any other exception from the backend is a crash of the case)
        frames = [f for f in traceback.extract_tb(e.__traceback__) if "/_pytest/" not in f.filename]
        tb = "".join(traceback.format_list(frames[-12:]))
        stage = stage_of(e, ctx.stage)
        if stage == "mismatch":  # the check itself raised: said so, never passed off as the backend's answer
            return "error", (f"the check of the answers raised {type(e).__name__}: {e} (an error of the "
                             f"conformance suite's checker, or answers of an unexpected kind)\n{tb}"), "crash", \
                list(RECORD)
        return "error", f"{type(e).__name__}: {e}\n{tb}", stage, list(RECORD)


def _child(rfd, wfd, cases, ctx, errpath):
    """The child's loop: requests (case id, grouped) -> phase messages, then ("done", outcome, text)."""
    import faulthandler
    fd = os.open(errpath, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 2)
    os.dup2(fd, 1)
    os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.environ["LIBC_FATAL_STDERR_"] = "1"  # glibc's heap-corruption messages go to stderr, not the tty
    faulthandler.enable(file=sys.__stderr__ if sys.__stderr__ else None, all_threads=True)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    ctx.phase = lambda name: _send(wfd, ("phase", name))
    grouping = ctx.group_compile
    while True:
        try:
            msg = _recv(rfd)
        except EOFError:
            break
        if msg[0] == "exit":
            break
        _, case_id, grouped = msg
        ctx.group_compile = grouping and grouped
        ctx.answers.clear()
        _send(wfd, ("done",) + outcome_of(cases[case_id], ctx))
    # exit through libc so that the backend's libraries run their destructors (gcov writes its counters then)
    sys.stdout.flush()
    import ctypes
    ctypes.CDLL(None).exit(0)


class Runner:
    """The parent's end: ``run(case)`` -> (outcome, text), forking a child when there is none."""

    def __init__(self, cases: dict, ctx, run_limit: float, compile_limit: float, slow_exit: bool = False):
        self.cases, self.ctx = cases, ctx
        self.run_limit, self.compile_limit = run_limit, compile_limit
        self.slow_exit = slow_exit  # --coverage: the child writes its counters when it exits
        self.pid = None
        self.children: list[int] = []  # every child forked (their sanitizer reports are named by pid)
        self.poisoned: set = set()  # compile groups that crashed or hung
        self.hangs: dict = {}

    def _start(self):
        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        fd, self.errpath = tempfile.mkstemp(prefix="glow_conformance_child_", suffix=".log")
        os.close(fd)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child
            try:
                os.close(w1)
                os.close(r2)
                _child(r1, w2, self.cases, self.ctx, self.errpath)
            finally:
                os._exit(0)
        os.close(r1)
        os.close(w2)
        self.pid, self.wfd, self.rfd, self.served = pid, w1, r2, 0
        self.children.append(pid)

    def stop(self):
        """Let the child finish (it exits through libc); kill it if it does not within a few seconds (a few
        minutes under --coverage: gcov then merges the counters of every library the child loaded, and a
        killed child's counters are lost)."""
        if self.pid is None:
            return
        try:
            _send(self.wfd, ("exit",))
        except OSError:
            pass
        deadline = time.monotonic() + (300 if self.slow_exit else 10)
        while time.monotonic() < deadline:
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                break
            time.sleep(0.01)
        else:
            self._kill()
        self._close()

    def _kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)

    def _close(self):
        for fd in (self.wfd, self.rfd):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.unlink(self.errpath)
        except OSError:
            pass
        self.pid = None

    def _last_words(self, limit=3000):
        try:
            with open(self.errpath, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        text = text.strip()
        return ("..." + text[-limit:]) if len(text) > limit else text

    def run(self, case) -> tuple[str, str, str, list]:
        """(outcome, text, stage, statistics) of ``case`` run in the child (see ``outcome_of``); a dead child:
        error at stage crash, a killed one: error at stage timeout. A case whose compile group crashed or hung
        runs again alone; passing alone, it fails saying so (the crash depends on the function around it or on
        chance: the group's other cases run alone too, and one crashing alone fails on its own)."""
        group = case.info.get("group")
        grouped = group is not None and group not in self.poisoned
        outcome, text, stage, stats = self._once(case, grouped)
        if outcome in ("crash", "hang") and grouped:
            self.poisoned.add(group)
            in_group = ("crashed" if outcome == "crash" else "hung") + f" while running its compile group: {text}"
            outcome, text, stage, stats = self._once(case, False)
            if outcome == "pass":
                return "fail", (f"{case.id}: passed compiled alone, but the process {in_group}\n  (the group is "
                                f"not compiled together again; its cases run alone)"), \
                    "crash" if in_group.startswith("crashed") else "timeout", stats
        if outcome == "crash":
            return "error", f"the process running the case died: {text}", "crash", stats
        if outcome == "hang":
            return "error", f"the case did not finish in time: {text}", "timeout", stats
        return outcome, text, stage, stats

    def _once(self, case, grouped):
        if self.pid is not None and self.served >= CHILD_CASES:
            self.stop()
        if self.pid is None:
            self._start()
        self.served += 1
        try:
            _send(self.wfd, ("run", case.id, grouped))
        except OSError:  # the child died after its last answer (in a destructor, or killed from outside)
            self._reap("idle")
            self._start()
            _send(self.wfd, ("run", case.id, grouped))
        phase, start = "compile", time.monotonic()
        slow = self.hangs.get(case.subject, 0) >= 3
        while True:
            limit = self.compile_limit if phase != "run" else (
                min(self.run_limit, HANG_AFTER) if slow else self.run_limit)
            left = start + limit - time.monotonic()
            ready = select.select([self.rfd], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                self._kill()
                words = self._last_words()
                self._close()
                self.hangs[case.subject] = self.hangs.get(case.subject, 0) + 1
                return "hang", (f"killed after {limit:g} s in phase '{phase}' ({_PHASES[phase]})"
                                + (f"; its stderr:\n{words}" if words else "")), "timeout", []
            try:
                msg = _recv(self.rfd)
            except (EOFError, OSError):
                return "crash", self._reap(phase), "crash", []
            if msg[0] == "phase":
                phase, start = msg[1], time.monotonic()
                continue
            return msg[1], msg[2], msg[3], msg[4]

    def _reap(self, phase):
        _, status = os.waitpid(self.pid, 0)
        words = self._last_words()
        self._close()
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            how = f"killed by signal {signal.Signals(sig).name}" if sig in signal.Signals._value2member_map_ \
                else f"killed by signal {sig}"
        else:
            how = f"exited with status {os.WEXITSTATUS(status)}"
        return f"{how} in phase '{phase}' ({_PHASES[phase]})" + (f"; its stderr:\n{words}" if words else "")


_PHASES = {"compile": "compiling the case or computing its inputs", "run": "running the backend's compiled code",
           "check": "checking the answers", "idle": "between cases"}
