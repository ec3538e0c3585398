"""ONNX's backend API over Glow Kit, so ``onnx.backend.test.BackendTest`` runs ONNX's node suite.

``backend("cpu")`` returns an ``onnx.backend.base.Backend`` subclass bound to that Glow backend.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx.backend.base import Backend as OnnxBackend
from onnx.backend.base import BackendRep

from .api import CompiledModel
from .discovery import get_backend


class GlowRep(BackendRep):
    """A prepared model: ``run`` takes inputs positionally (or by name) and returns outputs in order."""

    def __init__(self, cm: CompiledModel):
        self.cm = cm

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feed = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feed = dict(zip(self.cm.input_names, inputs))
        out = self.cm.run(feed)
        return [out[n] for n in self.cm.output_names]


_classes: dict[str, type] = {}


def backend(name: str = "interpreter") -> type[OnnxBackend]:
    """An ``onnx.backend.base.Backend`` subclass that compiles with Glow backend ``name``."""
    if name in _classes:
        return _classes[name]
    get_backend(name)  # fail early on an unknown name

    class GlowOnnxBackend(OnnxBackend):
        glow_backend = name

        @classmethod
        def is_compatible(cls, model, device="CPU", **kwargs):
            return True

        @classmethod
        def prepare(cls, model: onnx.ModelProto, device="CPU", **kwargs):
            super().prepare(model, device, **kwargs)
            return GlowRep(CompiledModel(model, cls.glow_backend))

        @classmethod
        def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
            raise NotImplementedError("run_node is not supported; use prepare on a model")

        @classmethod
        def supports_device(cls, device):
            return device == "CPU"

    GlowOnnxBackend.__name__ = f"GlowOnnxBackend_{name}"
    _classes[name] = GlowOnnxBackend
    return GlowOnnxBackend
