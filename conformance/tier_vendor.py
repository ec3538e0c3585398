"""Tier "vendor": the cases of installed vendor case modules, found through the entry-point group
``glow_conformance.cases``, so that a vendor adds cases without editing the kit.

A distribution declares, in its pyproject.toml::

    [project.entry-points."glow_conformance.cases"]
    acme = "acme_npu_cases"            # a module with cases(ctx) or cases()
    acme_big = "acme_npu_cases:large"  # or any callable taking ctx (or nothing)

Each returns a list of ``glow_conformance.cases.Case``, usually made with the suite's own helpers
(``onnx_cases.model_case``, ``onnx_cases.one_node``, ``primitive_cases.make_case``): same stages, checker, report
and rerun command as the kit's cases. A case id is ``tier/subject/dtype/variant`` with a tier of the vendor's
own (its first part); ids must not collide with the kit's. A module that cannot be loaded stops the run with its
entry point named.
"""
from __future__ import annotations

import inspect
from importlib.metadata import entry_points

GROUP = "glow_conformance.cases"


def providers() -> list:
    """The entry points of the group, sorted by name."""
    return sorted(entry_points(group=GROUP), key=lambda ep: ep.name)


def _call(fn, ctx):
    return fn(ctx) if inspect.signature(fn).parameters else fn()


def cases(ctx) -> list:
    import pytest
    out = []
    for ep in providers():
        try:
            target = ep.load()
            fn = getattr(target, "cases") if inspect.ismodule(target) else target
            got = list(_call(fn, ctx))
        except Exception as e:  # noqa: BLE001  (the vendor's module: say which one)
            raise pytest.UsageError(f"conformance: the vendor case module {ep.name} = {ep.value} (entry-point group "
                                    f"{GROUP}) failed to load or list its cases: {type(e).__name__}: {e}") from None
        for c in got:
            if len(c.id.split("/")) < 4:
                raise pytest.UsageError(f"conformance: vendor case module {ep.name}: case id {c.id!r} is not "
                                        f"tier/subject/dtype/variant")
        out += got
    return out
