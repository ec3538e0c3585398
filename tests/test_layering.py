"""Every package imports only downward, and glow_core's modules do too: import graphs read with ``ast``.

The kit's packages form four layers: ``glow_core`` -> the backends (every package behind a ``glow_core.backends``
entry point) -> ``glow_conformance`` -> ``glow_tools``. A package may import its own layer and the ones below;
the generic suite imports no backend but the reference interpreter.

Inside glow_core, one layer table:

Every module of ``glow_core`` is parsed; every import in it (at module level and inside functions, relative ones
resolved) that names another ``glow_core`` module is an edge. The test fails on a module the table does not
place, on an edge to a higher layer, on any cycle, on any import of a backend package from ``glow_core``, and on
any function-level import of a ``glow_core`` module (the usual way of hiding a cycle). ``pytest -s`` prints the
layers with their modules.
"""
from __future__ import annotations

import ast
import fnmatch
import os
from importlib.metadata import entry_points

import pytest

import glow_core

ROOT = os.path.dirname(os.path.abspath(glow_core.__file__))

#: The layers, lowest first; a module may import its own layer and the layers below it. Patterns are fnmatch
#: patterns over dotted module names (a package is named by its ``__init__``).
LAYERS = (
    ("types", ("glow_core.errors", "glow_core.types", "glow_core.timing")),
    ("graph", ("glow_core.graph",)),
    ("ops", ("glow_core.ops", "glow_core.ops.*")),
    ("builder", ("glow_core.builder",)),
    ("importer", ("glow_core.importer", "glow_core.importer.*", "glow_core.torch_import")),
    ("passes", ("glow_core.passes", "glow_core.passes.*", "glow_core.lower", "glow_core.verify",
                "glow_core.schedule", "glow_core.fusion", "glow_core.flops",
                "glow_core.quantization", "glow_core.quantization.*")),
    ("ir", ("glow_core.ir", "glow_core.memory", "glow_core.layout", "glow_core.tiling", "glow_core.plan_queries")),
    ("backend", ("glow_core.backend", "glow_core.discovery", "glow_core.trace")),
    ("api", ("glow_core.api", "glow_core.onnx_backend", "glow_core.partition", "glow_core.placement",
             "glow_core.runtime", "glow_core.serve", "glow_core.module", "glow_core.llm", "glow_core")),
)

#: Packages glow_core must never import: the backends (constant folding uses the core's own reference kernels).
BACKEND_PACKAGES = {"glow_interpreter", "glow_cpu"} | {
    ep.value.split(":")[0].split(".")[0] for ep in entry_points(group="glow_core.backends")} - {"glow_core"}


def modules() -> dict[str, str]:
    """Dotted module name -> file path, for every module of glow_core."""
    out = {}
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(folder, os.path.dirname(ROOT)).replace(os.sep, ".")
        for f in files:
            if f.endswith(".py"):
                out[rel if f == "__init__.py" else f"{rel}.{f[:-3]}"] = os.path.join(folder, f)
    return out


def layer_of(module: str) -> int | None:
    for i, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(module, p) for p in patterns):
            return i
    return None


def imports(module: str, path: str, known: set[str]):
    """(imported name, line, at module level?) for every import in the module, relative names resolved; a
    ``from X import y`` names X.y when that is a module, else X."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    top_level = {id(n) for n in tree.body} | {id(n) for s in tree.body if isinstance(s, (ast.If, ast.Try))
                                              for n in ast.walk(s)}
    for node in ast.walk(tree):
        at_top = id(node) in top_level
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno, at_top
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            for a in node.names:
                sub = f"{name}.{a.name}"
                yield (sub if sub in known else name), node.lineno, at_top


def import_graph():
    mods = modules()
    known = set(mods)
    edges, problems = {m: set() for m in mods}, []
    for m, path in sorted(mods.items()):
        for name, line, at_top in sorted(set(imports(m, path, known)), key=lambda x: (x[1], x[0])):
            top = name.split(".")[0]
            where = f"{os.path.relpath(path, os.path.dirname(ROOT))}:{line}"
            if top in BACKEND_PACKAGES:
                problems.append(f"{where}: {m} imports the backend package {name}")
            if top != "glow_core":
                continue
            target = name
            while target not in known and "." in target:
                target = target.rpartition(".")[0]
            if target == m:
                continue
            if not at_top:
                problems.append(f"{where}: {m} imports {target} inside a function (import it at module level)")
            edges[m].add(target)
    return mods, edges, problems


def find_cycle(edges) -> list[str] | None:
    state, stack = {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(edges.get(m, ())):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state:
                c = visit(t)
                if c:
                    return c
        stack.pop()
        state[m] = 2
        return None
    for m in sorted(edges):
        if m not in state:
            c = visit(m)
            if c:
                return c
    return None


def layer_table(mods) -> str:
    lines = ["glow_core layers (lowest first; each imports only its own layer and those below):"]
    for i, (name, _) in enumerate(LAYERS):
        members = sorted(m for m in mods if layer_of(m) == i)
        lines.append(f"  {i} {name:9s} {', '.join(members) or '-'}")
    return "\n".join(lines)


def test_glow_core_imports_only_downward():
    mods, edges, problems = import_graph()
    table = layer_table(mods)
    print("\n" + table)
    for m in sorted(mods):
        if layer_of(m) is None:
            problems.append(f"{m} is in no layer of the table (add it to LAYERS in tests/test_layering.py)")
    for m, targets in sorted(edges.items()):
        for t in sorted(targets):
            lm, lt = layer_of(m), layer_of(t)
            if lm is not None and lt is not None and lt > lm:
                problems.append(f"upward edge: {m} (layer {LAYERS[lm][0]}) imports {t} (layer {LAYERS[lt][0]})")
    cycle = find_cycle(edges)
    if cycle:
        problems.append("import cycle: " + " -> ".join(cycle))
    assert not problems, table + "\n\n" + "\n".join(problems)


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    """The parser itself: a relative import inside a function is found and resolved."""
    src = tmp_path / "mod.py"
    src.write_text("from .errors import GlowError\n\ndef f():\n    from ..ops import registry\n")
    found = list(imports("glow_core.ops.mod", str(src), {"glow_core.ops.registry", "glow_core.ops.errors"}))
    assert sorted(found) == [("glow_core.ops.errors", 1, True), ("glow_core.ops.registry", 4, False)]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None




#: The kit's package layers, lowest first (backends: every package behind a glow_core.backends entry point).
PACKAGE_LAYERS = (
    ("core", {"glow_core"}),
    ("backends", {ep.value.split(":")[0].split(".")[0] for ep in entry_points(group="glow_core.backends")}
     - {"glow_core"}),
    ("conformance", {"glow_conformance"}),
    ("tools", {"glow_tools"}),
)


def package_modules(package: str) -> dict[str, str]:
    """Dotted module name -> file path for every module of an installed package."""
    mod = __import__(package)
    root = os.path.dirname(os.path.abspath(mod.__file__))
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", "templates")]
        rel = os.path.relpath(folder, root).replace(os.sep, ".")
        prefix = package if rel == "." else f"{package}.{rel}"
        for f in files:
            if f.endswith(".py"):
                out[prefix if f == "__init__.py" else f"{prefix}.{f[:-3]}"] = os.path.join(folder, f)
    return out


def package_edges():
    """(importing package, imported package, where) for every import between two of the kit's packages."""
    layer = {pkg: i for i, (_, pkgs) in enumerate(PACKAGE_LAYERS) for pkg in pkgs}
    for pkg in sorted(layer):
        mods = package_modules(pkg)
        for m, path in sorted(mods.items()):
            for name, line, _ in imports(m, path, set(mods)):
                top = name.split(".")[0]
                if top in layer and top != pkg:
                    yield pkg, top, f"{path}:{line}"


def test_packages_import_only_downward():
    """core -> backends -> conformance -> tools: no package imports a higher layer (``-s`` prints the layers)."""
    layer = {pkg: i for i, (_, pkgs) in enumerate(PACKAGE_LAYERS) for pkg in pkgs}
    print("\npackage layers (lowest first; each imports only its own layer and those below):")
    for i, (name, pkgs) in enumerate(PACKAGE_LAYERS):
        print(f"  {i} {name:12s} {', '.join(sorted(pkgs))}")
    problems = [f"{where}: {a} (layer {PACKAGE_LAYERS[layer[a]][0]}) imports {b} (layer {PACKAGE_LAYERS[layer[b]][0]})"
                for a, b, where in package_edges() if layer[b] > layer[a]]
    assert not problems, "\n".join(problems)


def test_backends_import_no_other_backend_but_through_the_core():
    """A backend imports glow_core and itself; a backend naming another one as its fallback does so by name."""
    backends = PACKAGE_LAYERS[1][1]
    problems = [f"{where}: {a} imports {b}" for a, b, where in package_edges() if a in backends and b in backends]
    assert not problems, "\n".join(problems)


GENERIC_SUITE_BACKENDS = {"glow_interpreter"}


@pytest.mark.xfail(strict=True, reason="issue 26 item 6: the suite's coverage, paths, plugin and subset modules still "
                   "read the cpu backend's GEMM tiles, sanitizer and coverage builds; they become backend hooks")
def test_the_generic_suite_imports_no_backend_but_the_interpreter():
    """glow_conformance judges any backend, so it may know only the reference interpreter."""
    backends = PACKAGE_LAYERS[1][1] - GENERIC_SUITE_BACKENDS
    problems = [f"{where}: glow_conformance imports {b}" for a, b, where in package_edges()
                if a == "glow_conformance" and b in backends]
    assert not problems, "\n".join(problems)
