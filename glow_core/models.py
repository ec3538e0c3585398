"""Built-in example models, built with ``onnx.helper``: the CNN from Glow's docs and Linear+Sigmoid.

Each builder takes a seed so that weights are reproducible; each returns a ModelProto.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name)


def cnn(seed: int = 0, batch: int = 1):
    """Conv 3->16 3x3 pad 1 -> Relu -> MaxPool 2x2 -> Flatten -> Gemm to 10, input [batch, 3, 28, 28]."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((16, 3, 3, 3)) * 0.2
    b = rng.standard_normal(16) * 0.1
    fw = rng.standard_normal((10, 16 * 14 * 14)) * 0.02
    fb = rng.standard_normal(10) * 0.1
    nodes = [
        helper.make_node("Conv", ["input", "conv_w", "conv_b"], ["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         name="conv1"),
        helper.make_node("Relu", ["conv"], ["relu"], name="relu1"),
        helper.make_node("MaxPool", ["relu"], ["pool"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
        helper.make_node("Flatten", ["pool"], ["flat"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["output"], transB=1, name="fc"),
    ]
    g = helper.make_graph(nodes, "cnn",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 28, 28])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 10])],
                          [_init("conv_w", w), _init("conv_b", b), _init("fc_w", fw), _init("fc_b", fb)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="glow-kit")


def linear_sigmoid(seed: int = 0):
    """Linear(10 -> 5) + Sigmoid on a [3, 10] input (the model of Glow's -dump-ir example)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((5, 10)) * 0.3
    b = rng.standard_normal(5) * 0.1
    nodes = [
        helper.make_node("Gemm", ["input_1", "classifier_0_weight", "classifier_0_bias"], ["gemm_out"], transB=1,
                         name="Gemm_0"),
        helper.make_node("Sigmoid", ["gemm_out"], ["output_1"], name="Sigmoid_1"),
    ]
    g = helper.make_graph(nodes, "mymodel",
                          [helper.make_tensor_value_info("input_1", TensorProto.FLOAT, [3, 10])],
                          [helper.make_tensor_value_info("output_1", TensorProto.FLOAT, [3, 5])],
                          [_init("classifier_0_weight", w), _init("classifier_0_bias", b)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="glow-kit")


MODELS = {"cnn": cnn, "linear_sigmoid": linear_sigmoid}
