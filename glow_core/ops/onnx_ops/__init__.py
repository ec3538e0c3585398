"""Lowerings of ONNX ops into primitives, one module per op family.

Each module registers its ops with ``@onnx_op(...)`` (a lowering over a
``Builder``) or ``@extended_op(...)`` (a numpy kernel kept whole, with the
reason). Importing this package registers them all.
"""
import importlib
import pkgutil

for _m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_m}")
