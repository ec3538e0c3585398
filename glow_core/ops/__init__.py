"""The ops layer: the registries (``registry``), the primitive set with its reference kernels
(``primitives``), the ONNX op lowerings and extended ops (``onnx_ops``) and vendors' custom operators
(``custom_op``). Importing this package registers every built-in record.
"""
from . import registry  # noqa: F401
from . import primitives  # noqa: F401  (registers the primitives)
from . import onnx_ops  # noqa: F401  (registers the ONNX ops)
from .custom import custom_op, custom_ops  # noqa: F401

__all__ = ["custom_op", "custom_ops"]
