"""Lowerings of ONNX ops into primitives, one module per op family.

Each module registers its ops with ``@onnx_op(...)`` (a lowering over the ``Builder`` it is handed) or
``@extended_op(...)`` (a numpy kernel kept whole, with its shape rule and the reason). Importing this package
registers them all.
"""
from . import (activations, attention, attention_state, cast_quant, control_flow, data_dependent,  # noqa: F401
               elementwise, flex_attention, indexing, linalg, loss, math, movement, nn, normalization,
               onnxruntime_ops, pooling, reduce, resize, rnn, signal, tensor)
