"""The CPU backend's templates: the one jinja2 environment over ``templates/`` (StrictUndefined, trailing newlines
kept, no escaping), its compiled templates cached under ``$GLOW_CACHE_DIR/jinja``, the prelude every generated
unit includes, and the cache folder the kernels and the compiled templates share (``cache_dir``).

Templates hold loop skeletons; the Python that renders them computes everything static. Two globals are visible
to every template: ``par_min`` (``PARALLEL_MIN_WORK``) and ``schedule`` (``SCHEDULE``).
"""
from __future__ import annotations

import functools
import os

import jinja2

#: The templates' folder (tests may point it at a modified copy, then set ``_ENV = None``).
FOLDER = os.path.join(os.path.dirname(__file__), "templates")
_ENV: jinja2.Environment | None = None

#: Least work (elements, or multiply-adds for GEMM blocks) for which a kernel's loop runs as an OpenMP parallel
#: region; smaller loops stay serial (waking a second thread costs a few microseconds). Tuned on 2 cores with
#: bench/bench_cpu.py (BERT-style encoder at 2 threads: 12.0 -> 9.8 ms, from 131072/262144/2097152).
PARALLEL_MIN_WORK = {"elementwise": 32768, "window": 65536, "gemm": 524288}
#: OpenMP schedule of the conv engine's work items: static partitioning (each thread its contiguous share).
SCHEDULE = "static"


def cache_dir() -> str:
    """$GLOW_CACHE_DIR (default ~/.cache/glow_kit), created: the kernel libraries and the compiled templates."""
    d = os.environ.get("GLOW_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "glow_kit")
    os.makedirs(d, exist_ok=True)
    return d


@functools.lru_cache(maxsize=None)
def bytecode_cache() -> "jinja2.BytecodeCache | None":
    """Compiled templates cached under $GLOW_CACHE_DIR/jinja (None when that directory cannot be made)."""
    try:
        d = os.path.join(cache_dir(), "jinja")
        os.makedirs(d, exist_ok=True)
        return jinja2.FileSystemBytecodeCache(d)
    except OSError:
        return None


def environment() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(FOLDER), undefined=jinja2.StrictUndefined,
                                  keep_trailing_newline=True, autoescape=False, bytecode_cache=bytecode_cache())
        _ENV.globals.update(par_min=PARALLEL_MIN_WORK, schedule=SCHEDULE)
    return _ENV


def template(name: str) -> jinja2.Template:
    """A template of templates/."""
    return environment().get_template(name)


def source(name: str) -> str:
    """The text of template ``name`` as it is on disk (the prelude, the shard skeleton: parts of cache keys)."""
    with open(os.path.join(FOLDER, name)) as f:
        return f.read()


def prelude_text() -> str:
    """glow_prelude.h: the header every generated unit includes (written out as is)."""
    return source("glow_prelude.h.j2")
