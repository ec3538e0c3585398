"""The one error family of Glow Kit.

Every failure the compiler or a backend reports on bad input is a ``GlowError``.
Messages name the model element (node, op, tensor, dtype, shape), say what was
wrong and what would have been accepted.
"""
from __future__ import annotations


class GlowError(Exception):
    """Base class of every error Glow Kit raises on bad input or bad use."""


class ModelLoadError(GlowError):
    """The model file or bytes could not be read as an ONNX model."""


class ImportError_(GlowError):
    """A node or tensor of the ONNX model cannot be imported."""


class UnsupportedOpError(GlowError):
    """An op (or an op with these dtypes) is not supported by the importer or a backend."""


class VerifyError(GlowError):
    """A graph or low-level IR function violates an invariant (types, SSA, cycles)."""


class ShapeError(VerifyError):
    """A node's inputs have shapes or dtypes that its shape/dtype rule rejects."""


class InputError(GlowError):
    """Inputs given at run time are missing, unknown, or of the wrong shape or dtype."""


class MemoryLimitError(GlowError):
    """The memory plan does not fit in the capacity the backend declared."""


class BackendError(GlowError):
    """A backend could not be found, loaded, or failed to compile a function."""


class NeedsSpecialization(ImportError_):
    """A shape operand depends on a graph input whose value is not known yet."""

    def __init__(self, message: str, inputs: set[str]):
        super().__init__(message)
        self.inputs = inputs


class InternalError(Exception):
    """A bug in Glow Kit, not bad input: a lowering, shape rule or kernel failed at compile time in a way no
    model should cause. Deliberately not a GlowError, so that tests and fuzzers see bugs as bugs. The message
    names the node and op; the original exception is chained (``__cause__``)."""


class RequestRefused(GlowError):
    """The runtime refused a request at once: its queue is full (``max_queue``) or the host is closed."""


class DeviceFault(GlowError):
    """A device failed a run: its code raised something other than a GlowError, the run passed the runtime's
    ``device_timeout_s``, or it returned outputs of the wrong names, shapes or dtypes. The runtime marks the
    device unhealthy and retries the run on another one (a GlowError from a device is the request's own error,
    e.g. a division by zero in its data, and is not retried)."""


class DeviceUnavailable(GlowError):
    """No healthy device can run the request: every device holding one of its partitions failed and has not
    recovered yet, or the request used up its retries (``max_retries``)."""
