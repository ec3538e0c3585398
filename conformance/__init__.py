"""glow_conformance: the conformance suite that gates a backend against the reference interpreter.

Run it with ``glowc conformance --backend NAME [pytest args]`` from anywhere, or ``pytest conformance
--backend=NAME`` from the repository root. Cases are data (one line per case in the ``tier_*.py`` modules);
``plugin.py`` turns them into pytest items, ``checker.py`` holds the one tolerance table, ``report.py`` writes
the HTML/JSON report.
"""
from __future__ import annotations

import sys

# From the source tree pytest imports this folder as the package "conformance" (for its conftest.py); make that
# the very same module object as the installed name so that no file is ever imported twice under two names.
if __name__ != "glow_conformance" and "glow_conformance" not in sys.modules:
    sys.modules["glow_conformance"] = sys.modules[__name__]
    __name__ = __package__ = "glow_conformance"  # submodules ("from . import x") resolve under this name only


def main(argv=None) -> int:
    """Run the suite on the installed package: ``main(["--backend", "cpu", "-n", "2"])``; returns pytest's code."""
    import os

    import pytest
    argv = list(sys.argv[1:] if argv is None else argv)
    here = os.path.dirname(os.path.abspath(__file__))
    # The package folder itself is the test root; --noconftest keeps a project's conftest files out (the plugin
    # is loaded explicitly, under its installed name).
    return int(pytest.main(["-p", "glow_conformance.plugin", "--noconftest", "--rootdir", here,
                            "-p", "no:cacheprovider", here] + argv))
