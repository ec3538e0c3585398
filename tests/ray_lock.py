"""One Ray cluster of the test suite at a time on this machine: the Ray tests (tests/core/test_serve.py,
tests/tools/test_serve_cli.py) hold an exclusive lock on a file in the system's temporary directory while their
clusters live. xdist may spread a module's tests over workers (and its loadgroup grouping is a no-op with pytest
9.2 and xdist 3.8), and other checkouts on a shared machine run these tests too: clusters that start side by side
on two loaded cores miss Ray's own 30-second startup deadline."""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time

LOCK = os.path.join(tempfile.gettempdir(), "glow_kit_ray_tests.lock")


@contextlib.contextmanager
def one_cluster_at_a_time(timeout: float = 1800.0):
    """Hold the machine-wide Ray test lock (released when the process dies, too)."""
    with open(LOCK, "a") as f:
        t0 = time.monotonic()
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - t0 > timeout:
                    raise TimeoutError(f"another Ray test held {LOCK} for {timeout:.0f} s") from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
