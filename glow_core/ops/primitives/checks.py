"""Checks shared by the primitives' shape/dtype rules and reference kernels."""
from __future__ import annotations

from ...errors import GlowError, ShapeError
from ...types import TensorType

BOOL = ("bool",)
INDEX = ("int32", "int64")


def fail(name, msg):
    raise ShapeError(f"primitive '{name}': {msg}")


def accept(name, t: TensorType, allowed):
    if t.dtype.name not in allowed:
        fail(name, f"dtype {t.dtype.name} is not accepted; accepted: {', '.join(allowed)}")


def same(name, types):
    first = types[0]
    for t in types[1:]:
        if t.shape != first.shape or t.dtype != first.dtype:
            fail(name, f"operands must have identical type, got {', '.join(str(x) for x in types)}")


def check_axes(name, axes, rank):
    if list(axes) != sorted(set(axes)) or any(a < 0 or a >= rank for a in axes):
        fail(name, f"axes {list(axes)} must be sorted, unique and in [0, {rank})")


def check_indices(name, idx, dim):
    """Run-time check of an index kernel: every index in [0, dim) (a backend must not read outside x)."""
    if idx.size and (idx.min() < 0 or idx.max() >= dim):
        raise GlowError(f"{name}: index out of range [0, {dim}): found {int(idx.min())}..{int(idx.max())}")
