"""Settings every folder of tests/ shares."""
from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # Tests that start a Ray cluster (tests/core/test_serve.py, tests/tools/test_serve_cli.py) are in the xdist
    # group "ray": one worker runs them all, so that `-n 2` neither starts a module's cluster once per worker nor
    # runs two modules' clusters at once on two cores. Ungrouped tests are spread as with the default "load".
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"
