"""A backend that claims a subset of what another backend runs, for partitioning tests and demonstrations.

``SubsetBackend(inner, ops=..., dtypes=..., refuse=...)`` answers ``is_op_supported`` with an
``Unsupported(reason)`` for ops outside ``ops``, dtypes outside ``dtypes`` and nodes named in ``refuse``, and
otherwise asks ``inner``; everything else (lowering, compiling, memory) is ``inner``'s. The partition tier cuts
models with ``refuse``; ``conv_matmul_add`` is a device on its first day, claiming conv, matmul and add in
float32 only (``glowc partition MODEL --backend glow_conformance.subset:conv_matmul_add,cpu``).
"""
from __future__ import annotations

from glow_core.backend import ACCELERATOR, Backend, Unsupported
from glow_core.discovery import get_backend

from .proxy import ProxyBackend


class SubsetBackend(ProxyBackend):
    """``inner`` restricted to ``ops`` (primitive or ONNX op names; None: all), ``dtypes`` (None: all), and
    minus the nodes named in ``refuse``. ``costs``: its cost model (default: ``inner``'s)."""

    def __init__(self, inner: Backend, ops=None, dtypes=None, refuse=(), name=None, costs=None):
        super().__init__(inner, name)
        self.ops = None if ops is None else frozenset(ops)
        self.dtypes = None if dtypes is None else frozenset(dtypes)
        self.refuse = frozenset(refuse)
        self.costs = costs

    def is_op_supported(self, node_info):
        if node_info.name in self.refuse:
            return Unsupported(f"node '{node_info.name}' is refused by this test backend")
        if self.ops is not None and node_info.op not in self.ops:
            return Unsupported(f"claims only {', '.join(sorted(self.ops))}")
        bad = [d for d in node_info.in_dtypes + node_info.out_dtypes if self.dtypes is not None and d not in self.dtypes]
        if bad:
            return Unsupported(f"computes in {', '.join(sorted(self.dtypes))} only, not {bad[0]}")
        return self.inner.is_op_supported(node_info)

    def cost_model(self):
        return self.costs or self.inner.cost_model()


def conv_matmul_add() -> SubsetBackend:
    """'cma_npu': claims conv, matmul and add in float32, runs them with the cpu backend's generated C, and
    declares an accelerator's cost model (glow_core.backend.ACCELERATOR) so that tiny islands return to the host."""
    cpu = type(get_backend("cpu"))()  # a fresh instance of the installed cpu backend, found by name
    return SubsetBackend(cpu, ops=("conv", "matmul", "add"), dtypes=("float32",), name="cma_npu", costs=ACCELERATOR)
