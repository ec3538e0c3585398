"""Glow Kit core: the target-independent compiler (import, passes, lowering, low-level IR, memory planning).

``glow_core.compile(model, backend="interpreter", **options)`` returns a ``CompiledModel``.
"""
from .api import CompiledModel, compile  # noqa: A004
from .backend import Backend, CompiledFunction, NodeInfo
from .discovery import available_backends, get_backend
from .errors import GlowError

__all__ = ["compile", "CompiledModel", "Backend", "CompiledFunction", "NodeInfo", "GlowError", "get_backend",
           "available_backends"]
__version__ = "0.1.0"
