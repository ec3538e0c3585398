"""The C toolchain: find a compiler, build kernels into shared libraries in parallel shards, cache each kernel.

Each kernel is cached on its own, keyed by a hash of its source (with the GEMM variants it calls), the prelude,
the shard template, the flags and the compiler's and host's identity: ``$GLOW_CACHE_DIR/glow_k_<key>.so`` is a
symbolic link to the shard library that defines it. Kernels not in the cache are split into shards of similar
size (as many as there are cores, fewer for little work), each one translation unit compiled by one compiler
process straight into a shared library; the shards compile in parallel. Libraries are written to a temporary
file in the cache directory and published with ``os.replace`` (links too), so concurrent processes never see a
half-written file, and a model whose kernels are all cached runs no compiler.
"""
from __future__ import annotations

import functools
import hashlib
import os
import resource
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from glow_core.errors import BackendError

from .. import host
from ..kernels.codegen import KernelCode
from ..kernels.matmul import gemm_source
from ..templates import cache_dir, prelude_text, source, template

#: Number of compiler invocations in this process (tests use it to check cache hits).
COMPILER_RUNS = 0

#: Least source (characters) worth a compiler process of its own: a process costs about as much as compiling
#: this much kernel code, so smaller work is not split across cores.
MIN_SHARD_CHARS = 6000


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
    # -fno-trapping-math: the kernels never read floating-point exception flags, and GCC if-converts (so
    # vectorizes) the branch-free selects of glow_exp_polyf / glow_erff only without trapping math;
    # -fopenmp-simd: the `omp simd` loops (no OpenMP runtime) of elementwise.c.j2
    flags = ["-O3", "-march=native", "-fPIC", "-shared", "-fwrapv", "-fno-math-errno", "-fno-trapping-math",
             "-fopenmp-simd"]
    if num_threads > 1:
        flags.append("-fopenmp")
    return flags


def compile_jobs() -> int:
    """Compiler processes to run at once: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


def _compiler_identity(cc: list[str]) -> str:
    path = os.path.realpath(shutil.which(cc[0]) or cc[0])
    try:
        st = os.stat(path)
        return f"{path}:{st.st_size}:{int(st.st_mtime)}:{' '.join(cc[1:])}"
    except OSError:
        return " ".join(cc)


def _host_identity(flags) -> str:
    """With -march=native the code depends on the host CPU: its model and feature flags join the key."""
    if not any(f.startswith(("-march=native", "-mcpu=native", "-mtune=native")) for f in flags):
        return ""
    return host.identity()


@functools.lru_cache(maxsize=1)
def _fixed_text() -> str:
    return prelude_text() + "\0" + source("shard.c.j2")


def _hash(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0\1")
    return h.hexdigest()[:32]


def kernel_keys(kernels: list[KernelCode], flags: list[str], cc: list[str]) -> dict[str, str]:
    """Cache key of each kernel (by name): its source and GEMMs, prelude, flags, compiler and host."""
    common = _hash(_fixed_text(), "\0".join(flags), _compiler_identity(cc), _host_identity(flags))
    return {k.name: _hash(common, k.source, *[gemm_source(g) for g in k.gemms]) for k in kernels}


def _shards(kernels: list[KernelCode], jobs: int) -> list[list[KernelCode]]:
    """Kernels split into at most ``jobs`` shards of similar size (largest first, each to the lightest shard)."""
    cost = {k.name: len(k.source) + sum(len(gemm_source(g)) for g in k.gemms) for k in kernels}
    n = max(1, min(jobs, len(kernels), sum(cost.values()) // MIN_SHARD_CHARS))
    shards: list[list[KernelCode]] = [[] for _ in range(n)]
    load = [0] * n
    for k in sorted(kernels, key=lambda k: -cost[k.name]):
        i = load.index(min(load))
        shards[i].append(k)
        load[i] += cost[k.name]
    return shards


def _publish(src_path: str, dst: str):
    fd, tmp = tempfile.mkstemp(prefix=".tmp_glow_", suffix=os.path.splitext(dst)[1], dir=os.path.dirname(dst))
    os.close(fd)
    shutil.copyfile(src_path, tmp)
    os.chmod(tmp, 0o755)
    os.replace(tmp, dst)


def _link(target: str, link: str):
    tmp = os.path.join(os.path.dirname(link), f".tmp_glow_{os.getpid()}_{os.path.basename(link)}")
    try:
        os.remove(tmp)
    except FileNotFoundError:
        pass
    os.symlink(target, tmp)
    os.replace(tmp, link)


@dataclass
class Build:
    """What ``build_kernels`` did: the library of each kernel (by name), the kernels it compiled, in how many
    shards (compiler processes), when the compiler started (``time.perf_counter``), the seconds spent waiting
    for it and the CPU seconds it used."""

    paths: dict[str, str]
    compiled: list[str] = field(default_factory=list)
    shards: int = 0
    start: float = 0.0
    seconds: float = 0.0
    cpu_seconds: float = 0.0


def build_kernels(kernels: list[KernelCode], flags: list[str], jobs: int | None = None) -> Build:
    """The shared library defining each kernel, compiling the ones the cache lacks."""
    cc = find_compiler()
    d = cache_dir()
    keys = kernel_keys(kernels, flags, cc)
    paths = {k.name: os.path.join(d, f"glow_k_{keys[k.name]}.so") for k in kernels}
    missing = [k for k in kernels if not os.path.exists(paths[k.name])]
    build = Build(paths, [k.name for k in missing])
    if not missing:
        return build
    global COMPILER_RUNS
    t0 = build.start = time.perf_counter()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory(prefix="glow_build_", dir=d) as work:
        with open(os.path.join(work, "glow_prelude.h"), "w") as f:
            f.write(prelude_text())
        procs = []
        for i, shard in enumerate(_shards(missing, jobs or compile_jobs())):
            gemms = sorted({g for k in shard for g in k.gemms})
            source = template("shard.c.j2").render(kernels=[gemm_source(g) for g in gemms] +
                                                   [k.source for k in shard])
            src, out = os.path.join(work, f"shard{i}.c"), os.path.join(work, f"shard{i}.so")
            with open(src, "w") as f:
                f.write(source)
            cmd = cc + flags + ["-I", work, "-o", out, src, "-lm"]
            COMPILER_RUNS += 1
            try:
                proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            except OSError as e:
                raise ToolchainError(f"could not run the C compiler {cc[0]!r}: {e}") from None
            procs.append((shard, src, out, proc))
        build.shards = len(procs)
        failed = None
        for shard, src, out, proc in procs:
            _, err = proc.communicate()
            if proc.returncode != 0:
                failed = failed or (proc.args, err)
                continue
            lib_name = f"glow_lib_{_hash(*sorted(keys[k.name] for k in shard))}"
            _publish(out, os.path.join(d, lib_name + ".so"))
            _publish(src, os.path.join(d, lib_name + ".c"))
            for k in shard:
                _link(lib_name + ".so", paths[k.name])
        if failed:
            cmd, err = failed
            raise ToolchainError(f"C compilation failed ({' '.join(cmd[:1] + flags)}):\n{err[-4000:]}")
    build.seconds = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    build.cpu_seconds = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
    return build
