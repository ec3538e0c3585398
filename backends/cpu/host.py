"""The machine the kernels are compiled for with -march=native, read once from /proc/cpuinfo: the feature flags
the float and int8 engines choose their vector widths by, and the identity the kernel cache keys by."""
from __future__ import annotations

import functools
import platform


@functools.lru_cache(maxsize=None)
def cpuinfo() -> "tuple[str, ...] | None":
    """The lines of /proc/cpuinfo up to its first feature-flags line ("flags" on x86, "Features" on Arm), or None
    where it cannot be read."""
    lines = []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                lines.append(line)
                if line.startswith(("flags", "Features")):
                    break
    except OSError:
        return None
    return tuple(lines)


def feature_flags() -> set[str]:
    """The words of the first feature-flags line (empty when unknown)."""
    return next((set(line.split()) for line in cpuinfo() or () if line.startswith(("flags", "Features"))), set())


def identity() -> str:
    """The machine, model name and feature flags: what -march=native code depends on."""
    lines = cpuinfo()
    if lines is None:
        return platform.machine() + "|" + platform.processor()
    return platform.machine() + "".join("|" + line.strip() for line in lines
                                        if line.startswith(("model name", "flags", "Features")))
