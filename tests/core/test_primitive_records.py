"""The primitive records are consistent with themselves and with what derives from them."""
from __future__ import annotations

import pytest

from glow_conformance.checker import BITWISE, EXACT, TOLERANCES
from glow_core.backend import NodeInfo
from glow_core.errors import ShapeError
from glow_core.ops.registry import PRIMITIVES
from glow_core.types import ALL, TensorType
from glow_cpu.backend import CPUBackend


def test_every_tolerance_class_is_in_the_one_table():
    for name, p in PRIMITIVES.items():
        assert p.tolerance in TOLERANCES, f"{name}: tolerance class {p.tolerance!r} is not in checker.TOLERANCES"
        if p.exact:
            assert TOLERANCES[p.tolerance] in (EXACT, BITWISE), f"{name} is exact but its class {p.tolerance} is not"


ONE_OPERAND = {n: a for n, a in [(n, {}) for n, p in PRIMITIVES.items() if p.family == "elementwise"
                                 and len(p.inputs) == 1]
               + [(n, {"axes": [0], "keepdims": 1}) for n in ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min")]
               + [(n, {"axis": 0, "keepdims": 1, "select_last_index": 0}) for n in ("argmax", "argmin")]}


@pytest.mark.parametrize("name", sorted(ONE_OPERAND))
def test_accepted_dtypes_are_what_the_shape_rule_accepts(name):
    """The dtypes are given once: the rule accepts exactly the dtypes the record lists."""
    p = PRIMITIVES[name]
    for dt in ALL:
        try:
            p.out_types([TensorType(dt, (3,))], p.normalize_attrs(ONE_OPERAND[name], name))
            accepted = True
        except ShapeError:
            accepted = False
        assert accepted == (dt in p.dtypes), f"{name} {dt}: rule {'accepts' if accepted else 'refuses'} it, " \
                                             f"record lists {p.dtypes}"


def test_cpu_storage_type_support_derives_from_the_movement_flag():
    cpu = CPUBackend()
    for name, p in PRIMITIVES.items():
        if "float8e4m3fn" not in p.dtypes or len(p.inputs) != 1 or name == "cast":
            continue
        ok = cpu.is_op_supported(NodeInfo(name, ("float8e4m3fn",), ("float8e4m3fn",), {}, "n"))
        assert bool(ok) == p.movement, name
