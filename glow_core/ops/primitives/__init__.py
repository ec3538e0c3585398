"""The primitive set: every backend implements exactly these.

One module per family holds each primitive's record (``primitive(...)``: inputs, attributes with defaults,
accepted dtypes, shape/dtype rule, flags, tolerance class, documentation) and its reference kernel (plain
numpy, the specification) side by side. ``vendor_guide/primitives.md`` is generated from the records.

Conventions every primitive follows:
- elementwise primitives take operands of identical shape and dtype (the
  lowering inserts ``broadcast`` explicitly);
- axes are non-negative and sorted; shapes and attributes are static;
- floating-point arithmetic on float16/bfloat16 is computed in float32 and
  rounded once to the result type.
"""
from . import casts, elementwise, linalg, movement, reductions  # noqa: F401  (each registers its primitives)
