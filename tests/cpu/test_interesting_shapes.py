"""The cpu backend's interesting shapes (``CPUBackend.interesting_shapes``, read by conformance/paths.py) reach the
code paths they are named after: each conv engine geometry is planned by its algorithm, and at two threads runs
its OpenMP region; the GEMM shapes straddle the generator's own tile table."""
from __future__ import annotations

import pytest

from glow_conformance import paths
from glow_cpu.kernels import gemm_blocking
from glow_cpu.backend import CPUBackend
from glow_cpu.conv.engine import ConvGeometry, plan_conv

paths.use(CPUBackend())
ENGINE = paths.engine_geometries()
KIND = {"winograd4": "winograd4", "winograd2": "winograd2", "direct": "direct", "depthwise": "depthwise"}


def test_every_winograd_variant_has_geometries():
    from glow_cpu.conv import algorithms as conv_algorithms
    for m, _ in conv_algorithms.WINOGRAD_LEAST_SIDE:
        assert {f"winograd{m}_pad1", f"winograd{m}_pad0_batch2"} <= set(ENGINE)


@pytest.mark.parametrize("name", sorted(ENGINE))
def test_engine_geometry_reaches_its_algorithm_on_two_threads(name):
    paths.use(CPUBackend())
    xs, ws, st, pd, g = paths.engine_geometries()[name]
    geom = ConvGeometry.from_conv(xs, ws, st, [1] * len(st), pd, g)
    want = KIND[name.split("_")[0]]
    for nt in (1, 2):
        plan = plan_conv(geom, num_threads=nt)
        assert plan and plan.algorithm == want, (name, plan.describe if plan else plan)
    assert f"{2} thread(s)" in plan.describe, plan.describe
    if name.startswith("winograd"):  # a ragged last tile row and a partial filter block (16-lane targets)
        m = int(want[-1])
        assert geom.out_spatial[0] % m and ws[0] % 16


def test_gemm_shapes_straddle_the_generators_tiles():
    paths.use(CPUBackend())
    t = gemm_blocking.GEMM_TILES["f32"]
    shapes = paths.gemm_shapes("f32")
    assert {(t["mc"] - 1, 17, 40), (t["mc"] + 1, 19, 35), (12, t["kc"] - 1, 20), (9, t["kc"] + 1, 23)} <= set(shapes)
    assert any(n == t["nc"] + 3 for _, _, n in shapes)
    m, k, n = shapes[-1]
    assert m * k * n >= CPUBackend().interesting_shapes("matmul")["parallel_work"]


def test_a_backend_without_answers_gets_the_generic_sizes():
    from glow_interpreter.backend import InterpreterBackend
    paths.use(InterpreterBackend())
    assert paths.gemm_tiles("f32")["kc"] == paths.GENERIC["matmul"]["tiles"]["float32"]["kc"]
    assert set(paths.engine_geometries()) == set(paths.GENERIC["conv"]["geometries"])
    paths.use(CPUBackend())


def test_tiers_imported_before_the_backend_is_named_follow_its_sizes(tmp_path):
    """A process that imported the tiers first (their tables then have the generic sizes), then named the cpu
    backend's sizes elsewhere, then runs the suite on the cpu backend gets the cpu backend's cases (its conv engine
    geometries), not the generic ones."""
    import subprocess
    import sys
    code = ("import glow_conformance.tier_primitives, glow_conformance\n"
            "from glow_conformance import paths\nfrom glow_cpu.backend import CPUBackend\n"
            "paths.use(CPUBackend())\n"  # named by someone else first (a test module): the tables stay generic
            "raise SystemExit(glow_conformance.main(['--backend', 'cpu', '--collect-only', '-q', '-p',"
            " 'no:cacheprovider', '--case', 'primitives/conv/float32/specials/const_winograd*']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0 and "const_winograd4_pad1" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
