"""The C toolchain: find a compiler, build a shared library, cache it on disk by content hash.

The cache key is a hash of the source, the prelude, the flags and the compiler's identity (its resolved path,
size and modification time: no process is started to identify it). Libraries are compiled into a temporary
file in the cache directory and published with ``os.replace``, so concurrent processes never load a
half-written file; an unchanged model runs no compiler.
"""
from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile

from glow_core.errors import BackendError

#: Number of compiler invocations in this process (tests use it to check cache hits).
COMPILER_RUNS = 0


class ToolchainError(BackendError):
    """No C compiler was found, or compiling the generated C failed."""


def find_compiler() -> list[str]:
    """$CC (may hold arguments), else cc, gcc or clang on PATH."""
    env = os.environ.get("CC")
    if env:
        parts = shlex.split(env)
        if parts and shutil.which(parts[0]):
            return parts
        raise ToolchainError(f"the C compiler in $CC ({env!r}) was not found; set CC to a C compiler "
                             f"or install cc/gcc/clang")
    for name in ("cc", "gcc", "clang"):
        p = shutil.which(name)
        if p:
            return [p]
    raise ToolchainError("no C compiler found: the cpu backend needs cc, gcc or clang on PATH (or $CC); install "
                         "one (Debian/Ubuntu: apt-get install gcc) or use --backend interpreter")


def default_flags(num_threads: int) -> list[str]:
    flags = ["-O3", "-march=native", "-fPIC", "-shared", "-fwrapv", "-fno-math-errno"]
    if num_threads > 1:
        flags.append("-fopenmp")
    return flags


def cache_dir() -> str:
    d = os.environ.get("GLOW_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "glow_kit")
    os.makedirs(d, exist_ok=True)
    return d


def _compiler_identity(cc: list[str]) -> str:
    path = os.path.realpath(shutil.which(cc[0]) or cc[0])
    try:
        st = os.stat(path)
        return f"{path}:{st.st_size}:{int(st.st_mtime)}:{' '.join(cc[1:])}"
    except OSError:
        return " ".join(cc)


def _host_identity(flags) -> str:
    """With -march=native the library depends on the host CPU: its model and feature flags join the key."""
    if not any(f.startswith(("-march=native", "-mcpu=native", "-mtune=native")) for f in flags):
        return ""
    import platform
    ident = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "flags", "Features")):
                    ident += "|" + line.strip()
                if line.startswith(("flags", "Features")):
                    break
    except OSError:
        ident += "|" + platform.processor()
    return ident


def build_shared(source: str, headers: dict[str, str], flags: list[str]) -> str:
    """Path of a shared library built from ``source`` (with ``headers`` beside it), cached by content hash."""
    cc = find_compiler()
    h = hashlib.sha256()
    for part in (source, *[f"{k}\0{v}" for k, v in sorted(headers.items())], "\0".join(flags),
                 _compiler_identity(cc), _host_identity(flags)):
        h.update(part.encode())
        h.update(b"\0\1")
    key = h.hexdigest()[:32]
    d = cache_dir()
    lib = os.path.join(d, f"glow_{key}.so")
    if os.path.exists(lib):
        return lib
    global COMPILER_RUNS
    with tempfile.TemporaryDirectory(prefix="glow_build_", dir=d) as work:
        src = os.path.join(work, "module.c")
        with open(src, "w") as f:
            f.write(source)
        for name, text in headers.items():
            with open(os.path.join(work, name), "w") as f:
                f.write(text)
        tmp_out = os.path.join(work, "out.so")
        cmd = cc + flags + ["-I", work, "-o", tmp_out, src, "-lm"]
        COMPILER_RUNS += 1
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            raise ToolchainError(f"could not run the C compiler {cc[0]!r}: {e}") from None
        if r.returncode != 0:
            raise ToolchainError(f"C compilation failed ({' '.join(cmd[:1] + flags)}):\n{r.stderr[-4000:]}")
        # Publish atomically: a temporary name in the cache directory itself, then os.replace.
        fd, tmp_lib = tempfile.mkstemp(prefix=".tmp_glow_", suffix=".so", dir=d)
        os.close(fd)
        shutil.copyfile(tmp_out, tmp_lib)
        os.chmod(tmp_lib, 0o755)
        os.replace(tmp_lib, lib)
        try:
            fd, tmp_src = tempfile.mkstemp(prefix=".tmp_glow_", suffix=".c", dir=d)
            with os.fdopen(fd, "w") as f:
                f.write(source)
            os.replace(tmp_src, os.path.join(d, f"glow_{key}.c"))
        except OSError:
            pass
    return lib
