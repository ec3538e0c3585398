"""Backend discovery through the ``glow_core.backends`` entry-point group (built-in backends too)."""
from __future__ import annotations

from importlib import import_module
from importlib.metadata import entry_points

from .backend import Backend
from .errors import BackendError

GROUP = "glow_core.backends"
_cache: dict[str, Backend] = {}


def available_backends() -> dict[str, str]:
    """Backend name -> 'module:Class' for every registered backend."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def get_backend(name: str | Backend) -> Backend:
    """The backend for ``name``: a Backend instance itself, an installed entry-point name, or a
    ``module:attr`` spec naming a Backend subclass, instance or factory (for backends not installed)."""
    if isinstance(name, Backend):
        return name
    if not isinstance(name, str):
        raise BackendError(f"a backend is a name, a 'module:attr' spec or a Backend instance, not "
                           f"{type(name).__name__}")
    if name in _cache:
        return _cache[name]
    eps = {ep.name: ep for ep in entry_points(group=GROUP)}
    if name not in eps and ":" in name:
        inst = _from_spec(name)
        _cache[name] = inst
        return inst
    if name not in eps:
        raise BackendError(f"unknown backend '{name}'; installed backends: {', '.join(sorted(eps)) or 'none'} "
                           f"(entry-point group {GROUP}), or give 'module:attr' naming a Backend")
    try:
        cls = eps[name].load()
        inst = cls()
    except Exception as e:  # noqa: BLE001  (a vendor package may fail in any way)
        raise BackendError(f"backend '{name}' ({eps[name].value}) failed to load: {type(e).__name__}: {e}") from None
    if not isinstance(inst, Backend):
        raise BackendError(f"backend '{name}' ({eps[name].value}) is not a glow_core.backend.Backend subclass")
    _cache[name] = inst
    return inst


def _from_spec(spec: str) -> Backend:
    """The Backend named by ``module:attr`` (a subclass is instantiated, a factory called)."""
    mod, _, attr = spec.partition(":")
    try:
        obj = import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise BackendError(f"backend '{spec}': cannot load '{attr}' from module '{mod}': {e}") from None
    try:
        inst = obj if isinstance(obj, Backend) else obj()
    except Exception as e:  # noqa: BLE001  (a vendor factory may fail in any way)
        raise BackendError(f"backend '{spec}' failed to load: {type(e).__name__}: {e}") from None
    if not isinstance(inst, Backend):
        raise BackendError(f"backend '{spec}' gives a {type(inst).__name__}, not a glow_core.backend.Backend")
    return inst
