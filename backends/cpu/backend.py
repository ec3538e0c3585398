"""The CPU backend: generates one C translation unit per function, compiles it with the system C compiler
(cached on disk) and runs it through ctypes; it also writes standalone bundles (C source + weights + main)."""
from __future__ import annotations

import os

from glow_core.backend import Backend, CompiledFunction, NodeInfo
from glow_core.ops.registry import get_primitive

from . import sanitize, toolchain
from .bundle import write_bundle
from .codegen import Codegen, prelude_text
from .ctypes_map import supported
from .storage_cast import ONE_BYTE_STORAGE

#: Primitives that run on storage-only 1-byte types (data movement, select, and casts).
BYTE_OPS = {"cast", "copy", "reshape", "transpose", "broadcast", "slice", "concat", "pad", "gather", "gather_nd",
            "scatter_nd", "select", "bitcast"}
from .runtime import CPUFunction


class CPUBackend(Backend):
    """Every primitive for float32/64, float16, bfloat16, all integer types and bool where the primitive takes
    it. Storage-only float8/float4/int4 types and extended (non-primitive) ops are declared unsupported."""

    name = "cpu"

    def is_op_supported(self, node_info: NodeInfo) -> bool:
        p = get_primitive(node_info.op)
        if p is None:
            return False
        if node_info.in_dtypes and node_info.in_dtypes[0] not in p.dtypes:
            return False
        dts = node_info.in_dtypes + node_info.out_dtypes
        if all(supported(d) for d in dts):
            return True
        # Storage-only 1-byte types: moved as bytes, and cast from or to with tables (see storage_cast.py).
        if not all(supported(d) or d in ONE_BYTE_STORAGE for d in dts):
            return False
        if node_info.op == "scatter_nd":
            return node_info.attrs.get("reduction", "none") == "none"
        return node_info.op in BYTE_OPS

    @staticmethod
    def _threads(options) -> int:
        n = options.get("num_threads")
        return max(1, int(n)) if n else (os.cpu_count() or 1)

    def generate(self, function, options=None, entry="glow_run", export="") -> tuple[str, Codegen]:
        """The C source of ``function`` (and the generator, which knows the instruction order)."""
        cg = Codegen(function, {**(options or {}), "num_threads": self._threads(options or {})})
        return cg.module(entry=entry, export=export), cg

    def compile(self, function, options) -> CompiledFunction:
        options = dict(options or {})
        nt = self._threads(options)
        source, cg = self.generate(function, {**options, "num_threads": nt},
                                   export='__attribute__((visibility("default"))) ')
        flags = options.get("cflags")
        flags = list(flags.split() if isinstance(flags, str) else flags) if flags else toolchain.default_flags(nt)
        # Whatever the user's flags, the library must be position-independent and shared, and integer
        # arithmetic must wrap as numpy's does.
        for required in ("-fPIC", "-shared", "-fwrapv") + (("-fopenmp",) if nt > 1 else ()):
            if required not in flags:
                flags.append(required)
        sanitizers = sanitize.requested(options)
        sanitize.require_runtime(sanitizers)
        flags += sanitize.flags(sanitizers)
        lib = toolchain.build_shared(source, {"glow_prelude.h": prelude_text()}, flags)
        return CPUFunction(function, lib, cg.instr_of_code, source)

    def emit_bundle(self, function, out_dir, options) -> list[str]:
        options = dict(options or {})
        source, _ = self.generate(function, {**options, "num_threads": 1},
                                  entry=_bundle_name(options), export="")
        return write_bundle(function, out_dir, options, source, prelude_text())


def _bundle_name(options) -> str:
    from .codegen import c_ident
    return c_ident(options.get("bundle_name") or "model")
