"""A backend that is another backend with some hooks changed: the test doubles of the passes and partition tiers.

``ProxyBackend(inner)`` forwards every hook of the Backend ABC to ``inner``; a subclass overrides the hooks it
changes. Hooks added to the ABC later are forwarded without touching this file.
"""
from __future__ import annotations

import abc

from glow_core.backend import Backend

#: The Backend ABC's hooks: its public methods.
HOOKS = tuple(n for n, v in vars(Backend).items() if callable(v) and not n.startswith("_"))


def _forward(hook: str):
    def method(self, *args, **kwargs):
        return getattr(self.inner, hook)(*args, **kwargs)
    method.__name__ = method.__qualname__ = hook
    method.__doc__ = f"``inner.{hook}(...)``"
    return method


class ProxyBackend(Backend):
    """``inner`` with every hook forwarded (named ``name``, default ``inner``'s name)."""

    def __init__(self, inner: Backend, name: str | None = None):
        self.inner = inner
        self.name = name or inner.name


for _hook in HOOKS:
    setattr(ProxyBackend, _hook, _forward(_hook))
abc.update_abstractmethods(ProxyBackend)
