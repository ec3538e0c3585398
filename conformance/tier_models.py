"""Tier "models": whole networks (float32, some in float16), seeded inputs; expectation from
onnx.reference.ReferenceEvaluator (reference backend) or the reference interpreter (any other backend)."""
from __future__ import annotations

import numpy as np

from glow_core import example_models
from glow_core.types import dtype as gdtype

from . import networks as M
from .onnx_cases import model_case


def _feeds(model, rng):
    out = {}
    for vi in model.graph.input:
        t = vi.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        dt = gdtype(t.elem_type).np
        if vi.name == "mask":
            a = np.where(rng.random(shape) < 0.2, -1e4, 0.0)
        else:
            a = rng.standard_normal(shape)
        out[vi.name] = a.astype(dt)
    return out


MODELS = {
    "cnn": lambda dt: example_models.cnn(seed=1),
    "linear_sigmoid": lambda dt: example_models.linear_sigmoid(seed=1),
    "resnet": lambda dt: example_models.resnet(seed=1, size=16, widths=(8, 16), blocks=1),
    "resnet_bn_folded": lambda dt: example_models.resnet(seed=2, size=12, widths=(8, 16), blocks=1, batchnorm=False),
    "mlp": lambda dt: M.mlp(seed=1, dt=dt),
    "mobilenet": lambda dt: M.mobilenet(seed=1, dt=dt),
    "bert_encoder": lambda dt: M.bert_encoder(seed=1, dt=dt),
    "lstm_unrolled": lambda dt: M.lstm_unrolled(seed=1, dt=dt),
    "unet": lambda dt: M.unet(seed=1, dt=dt),
}
DTYPES = {"mlp": ("float32", "float16", "float64"), "mobilenet": ("float32", "float16"),
          "lstm_unrolled": ("float32", "float64")}


def cases():
    out = []
    for name, fn in MODELS.items():
        for dt in DTYPES.get(name, ("float32",)):
            def build(rng, fn=fn, dt=dt):
                m = fn(dt)
                return m, _feeds(m, rng)
            out.append(model_case(f"models/{name}/{dt}/seeded", "models", name, dt, build, "model",
                                  profiles=("models",)))
    return out
