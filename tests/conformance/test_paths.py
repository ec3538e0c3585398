"""The conformance suite's path-reaching shapes (conformance/paths.py) reach the CPU code paths they are named
after: each conv engine geometry is planned by its algorithm, and at two threads runs its OpenMP region."""
from __future__ import annotations

import pytest

from conformance import paths
from glow_cpu.conv.engine import ConvGeometry, plan_conv

ENGINE = paths.engine_geometries()
KIND = {"winograd4": "winograd4", "winograd2": "winograd2", "direct": "direct", "depthwise": "depthwise"}


def test_every_winograd_variant_has_geometries():
    from glow_cpu.conv import algorithms as conv_algorithms
    for m, _ in conv_algorithms.WINOGRAD_LEAST_SIDE:
        assert {f"winograd{m}_pad1", f"winograd{m}_pad0_batch2"} <= set(ENGINE)


@pytest.mark.parametrize("name", sorted(ENGINE))
def test_engine_geometry_reaches_its_algorithm_on_two_threads(name):
    xs, ws, st, pd, g = ENGINE[name]
    geom = ConvGeometry.from_conv(xs, ws, st, [1] * len(st), pd, g)
    want = KIND[name.split("_")[0]]
    for nt in (1, 2):
        plan = plan_conv(geom, num_threads=nt)
        assert plan and plan.algorithm == want, (name, plan.describe if plan else plan)
    assert f"{2} thread(s)" in plan.describe, plan.describe
    if name.startswith("winograd"):  # a ragged last tile row and a partial filter block (16-lane targets)
        m = int(want[-1])
        assert geom.out_spatial[0] % m and ws[0] % 16
