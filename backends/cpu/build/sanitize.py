"""Sanitizer builds of the generated C: ``GLOW_CPU_SANITIZE=address,undefined`` or the compile option
``sanitize="address,undefined"``.

``flags(names)`` are added to the compiler flags (they are part of the library's cache key like every flag):
``-fsanitize=...`` with recovery compiled in, frame pointers and debug lines for readable reports, at -O1. UBSan
needs nothing else. An AddressSanitizer library can only be loaded by ctypes into a process whose first
loaded library is the ASan runtime: ``runtime_env(names)`` gives the ``LD_PRELOAD`` and ``ASAN_OPTIONS``
(suited to Python: no leak check) for such a process, ``reexec(names)`` re-executes the current command line
with them, and ``require_runtime(names)`` refuses with a clear error instead of letting ASan abort the
process. Reports go to stderr, or to ``<GLOW_SANITIZE_LOG_DIR>/{asan,ubsan}.<pid>`` when that is set (the
conformance suite's ``--sanitize`` reads them per case); UBSan prints the stack and, unless a log directory
is set, aborts at the first report.
"""
from __future__ import annotations

import os
import subprocess
import sys

from glow_core.errors import BackendError

from .toolchain import find_compiler

KNOWN = ("address", "undefined")
ENV = "GLOW_CPU_SANITIZE"
LOG_DIR_ENV = "GLOW_SANITIZE_LOG_DIR"


def requested(options=None) -> tuple[str, ...]:
    """The sanitizers asked for by the ``sanitize`` compile option, else by $GLOW_CPU_SANITIZE (sorted)."""
    spec = (options or {}).get("sanitize")
    if spec is None:
        spec = os.environ.get(ENV, "")
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    names = sorted({n.strip() for n in names if n and n.strip()})
    bad = [n for n in names if n not in KNOWN]
    if bad:
        where = "the sanitize option" if options and "sanitize" in options else f"${ENV}"
        raise BackendError(f"cpu backend: unknown sanitizer(s) {bad} in {where} ({spec!r}); accepted: "
                           f"{', '.join(KNOWN)} (comma-separated)")
    return tuple(names)


def flags(names) -> list[str]:
    """Compiler flags for a sanitizer build (none when ``names`` is empty)."""
    if not names:
        return []
    joined = ",".join(names)
    # -O1 (the last -O wins): the level the sanitizers are made for; at -O3 instrumented group compiles of the
    # conformance suite took over 10 minutes each
    return [f"-fsanitize={joined}", f"-fsanitize-recover={joined}", "-fno-omit-frame-pointer", "-g", "-O1"]


def runtime_library(name="asan") -> str:
    """Path of the compiler's sanitizer runtime (``cc -print-file-name=lib<name>.so``)."""
    cc = find_compiler()
    try:
        path = subprocess.run(cc + [f"-print-file-name=lib{name}.so"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        raise BackendError(f"cpu backend: cannot ask {cc[0]} for its {name} runtime: {e}") from None
    if not path or not os.path.isabs(path) or not os.path.exists(path):
        raise BackendError(f"cpu backend: the C compiler has no lib{name}.so (install the sanitizer runtime, e.g. "
                           f"the libasan package of your compiler)")
    return os.path.realpath(path)


def runtime_env(names, log_dir: str | None = None) -> dict[str, str]:
    """Environment variables a process needs to load sanitizer builds of ``names`` and report their errors."""
    if not names:
        return {}
    env = {ENV: ",".join(names)}
    halt = "0" if log_dir else "1"
    ubsan = ["print_stacktrace=1", f"halt_on_error={halt}"]
    asan = ["detect_leaks=0", "halt_on_error=0" if log_dir else "halt_on_error=1", "allocator_may_return_null=1",
            "handle_segv=1", "detect_odr_violation=0"]
    if log_dir:
        env[LOG_DIR_ENV] = log_dir
        ubsan.append(f"log_path={os.path.join(log_dir, 'ubsan')}")
        asan.append(f"log_path={os.path.join(log_dir, 'asan')}")
    env["UBSAN_OPTIONS"] = ":".join(ubsan)
    if "address" in names:
        env["ASAN_OPTIONS"] = ":".join(asan)
        # libstdc++ right after the runtime: ASan's __cxa_throw interceptor needs the real one resolvable, else
        # an exception thrown in a C++ extension (onnx's schema lookups and inference) stops at an ASan CHECK
        preload = [runtime_library("asan"), runtime_library("stdc++")] + [
            p for p in os.environ.get("LD_PRELOAD", "").split(":") if p]
        env["LD_PRELOAD"] = ":".join(dict.fromkeys(preload))
    return env


def runtime_loaded() -> bool:
    """Whether the AddressSanitizer runtime is mapped into this process."""
    try:
        with open("/proc/self/maps") as f:
            return any("libasan" in line for line in f)
    except OSError:
        return False


def require_runtime(names):
    """Refuse (BackendError) to load an ASan build into a process without the ASan runtime preloaded."""
    if "address" in names and not runtime_loaded():
        raise BackendError("cpu backend: an AddressSanitizer build can only be loaded into a process started with "
                           "the ASan runtime preloaded; run the command again under `python -m "
                           "glow_cpu.build.sanitize COMMAND ...` (it sets LD_PRELOAD and ASAN_OPTIONS), or set "
                           f"LD_PRELOAD={runtime_library('asan')} and ASAN_OPTIONS=detect_leaks=0")


def reexec(names, log_dir: str | None = None):
    """Make this process ready to load sanitizer builds of ``names``: set the environment and, when ASan's
    runtime is not loaded yet, re-execute this process's command line with it preloaded (no return)."""
    if not names:
        return
    env = runtime_env(names, log_dir)
    if "address" in names and not runtime_loaded():
        argv = list(getattr(sys, "orig_argv", None) or [sys.executable] + sys.argv)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable] + argv[1:], dict(os.environ, **env))
    os.environ.update(env)


def main(argv=None) -> int:
    """``python -m glow_cpu.build.sanitize COMMAND ...``: run COMMAND with the sanitizer runtime preloaded."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: python -m glow_cpu.build.sanitize COMMAND [ARGS...]  (sanitizers from $GLOW_CPU_SANITIZE, "
              "default address,undefined)", file=sys.stderr)
        return 2
    names = requested() or KNOWN
    env = dict(os.environ, **runtime_env(names, os.environ.get(LOG_DIR_ENV)))
    os.execvpe(argv[0], argv, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
