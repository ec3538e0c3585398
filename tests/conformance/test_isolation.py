"""A backend cannot take the suite down: a segfault, an abort, a busy hang and a deadlock (0 % CPU, the way the
im2col overrun left the workers for 50 minutes) each fail the case running them, within the time limit,
naming it; the other cases pass and the run reaches its report. With and without pytest-xdist."""
from __future__ import annotations

import ctypes
import json
import os
import threading
import time

import pytest

from glow_interpreter.backend import InterpreterBackend, InterpreterFunction

LIMIT = 3.0


class _Misbehaving(InterpreterFunction):
    def execute(self, inputs):
        ops = {i.op for i in self.irf.code}
        if "sub" in ops:
            ctypes.string_at(0)  # segmentation fault
        if "mul" in ops:
            os.abort()
        if "add" in ops:
            while True:  # a busy loop holding the interpreter
                pass
        if "div" in ops:
            lock = threading.Lock()
            lock.acquire()
            lock.acquire()  # a deadlock: 0 % CPU
        return super().execute(inputs)


class MisbehavingBackend(InterpreterBackend):
    def compile(self, function, options):
        return _Misbehaving(function)


CASES = {"primitives/sub/int8/17": "SIGSEGV", "primitives/mul/int8/17": "SIGABRT",
         "primitives/add/int8/17": "killed after 3 s", "primitives/div/int8/17": "killed after 3 s"}


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_crashes_and_hangs_fail_their_cases_and_the_run_reports(tmp_path, workers):
    import glow_conformance
    args = ["--backend", "tests.conformance.test_isolation:MisbehavingBackend", "-q", "-p", "no:randomly",
            "--case-timeout", str(LIMIT), "--conformance-report", str(tmp_path / "r.html")] + workers
    for c in list(CASES) + ["primitives/neg/int8/17", "primitives/abs/int8/17"]:
        args += ["--case", c]
    t0 = time.monotonic()
    rc = glow_conformance.main(args)
    elapsed = time.monotonic() - t0
    data = json.loads((tmp_path / "r.json").read_text())
    got = {c["id"]: c for c in data["cases"]}
    assert rc == 1 and len(got) == 6
    for case_id, how in CASES.items():
        assert got[case_id]["outcome"] == "fail", case_id
        assert how in got[case_id]["detail"] and "running the backend's compiled code" in got[case_id]["detail"]
    assert got["primitives/neg/int8/17"]["outcome"] == got["primitives/abs/int8/17"]["outcome"] == "pass"
    assert elapsed < 2 * 2 * LIMIT + 60  # two hangs of LIMIT each (no compile group on the interpreter)
