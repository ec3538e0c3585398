"""Backend discovery through the ``glow_core.backends`` entry-point group (built-in backends too)."""
from __future__ import annotations

from importlib.metadata import entry_points

from .backend import Backend
from .errors import BackendError

GROUP = "glow_core.backends"
_cache: dict[str, Backend] = {}


def available_backends() -> dict[str, str]:
    """Backend name -> 'module:Class' for every registered backend."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def get_backend(name: str | Backend) -> Backend:
    """The backend instance registered under ``name`` (or ``name`` itself if already a Backend)."""
    if isinstance(name, Backend):
        return name
    if name in _cache:
        return _cache[name]
    eps = {ep.name: ep for ep in entry_points(group=GROUP)}
    if name not in eps:
        raise BackendError(f"unknown backend '{name}'; installed backends: {', '.join(sorted(eps)) or 'none'} "
                           f"(entry-point group {GROUP})")
    try:
        cls = eps[name].load()
        inst = cls()
    except Exception as e:  # noqa: BLE001  (a vendor package may fail in any way)
        raise BackendError(f"backend '{name}' ({eps[name].value}) failed to load: {type(e).__name__}: {e}") from None
    if not isinstance(inst, Backend):
        raise BackendError(f"backend '{name}' ({eps[name].value}) is not a glow_core.backend.Backend subclass")
    _cache[name] = inst
    return inst
