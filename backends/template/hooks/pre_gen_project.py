"""Refuse a backend name that would not make a valid, distinct Glow Kit backend.

Runs before any file of the project is written. The name reaches this script as a JSON string
literal (never pasted into code), so quotes, semicolons or shell syntax in it are harmless.
"""
import keyword
import re
import sys

NAME = {{ cookiecutter.backend_name | tojson }}
KIND = {{ cookiecutter.device_kind | tojson }}
KINDS = ("functional", "scratchpad")

# Built-in backends, and names whose package (glow_<name>) is already one of Glow Kit's own packages.
TAKEN = {"interpreter", "cpu", "npu", "core", "conformance", "tools", "kit", "template"}


def problem(name):
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name or ""):
        return ("must be a lowercase ASCII identifier: a letter a-z, then letters a-z, digits or '_' "
                "(e.g. acme_npu)")
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return "is a Python keyword"
    if name in TAKEN:
        return f"clashes with Glow Kit's own backend or package glow_{name}; choose a vendor-specific name"
    if len(name) > 48:
        return "is longer than 48 characters"
    return None


why = problem(NAME)
if why:
    print(f"error: backend_name {NAME!r} {why}", file=sys.stderr)
    sys.exit(1)
if KIND not in KINDS:
    print(f"error: device_kind {KIND!r} is not one of {', '.join(KINDS)} (functional: kernels on a simulated "
          f"flat-memory device; scratchpad: the reference NPU's pieces)", file=sys.stderr)
    sys.exit(1)
