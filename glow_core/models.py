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


def resnet(seed: int = 0, batch: int = 1, size: int = 32, widths=(16, 32, 64, 128), blocks: int = 2,
           classes: int = 10, batchnorm: bool = True):
    """A small ResNet: stem Conv-BN-Relu, then per width ``blocks`` basic blocks (Conv-BN-Relu-Conv-BN,
    residual Add, Relu; the first block of each later stage downsamples with stride 2 through a 1x1
    projection Conv-BN), then a global MaxPool, Flatten and Gemm to ``classes``. Input [batch, 3, size, size].

    With ``batchnorm=False`` each BatchNormalization is folded into its Conv's weights and bias here, in
    numpy (for backends or tests that do without the op). With the defaults: 1 + 4 * 2 * 2 + 3 = 20
    convolutions and 8 residual Adds.
    """
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    count = [0]

    def conv_bn(x, cin, cout, k, stride, relu):
        count[0] += 1
        i = count[0]
        w = rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))
        scale, bias = 1 + 0.1 * rng.standard_normal(cout), 0.1 * rng.standard_normal(cout)
        mean, var = 0.1 * rng.standard_normal(cout), 0.5 + rng.random(cout)
        attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, name=f"conv{i}")
        if batchnorm:
            inits.append(_init(f"conv{i}_w", w))
            nodes.append(helper.make_node("Conv", [x, f"conv{i}_w"], [f"conv{i}"], **attrs))
            for nm, arr in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var)):
                inits.append(_init(f"bn{i}_{nm}", arr))
            nodes.append(helper.make_node("BatchNormalization", [f"conv{i}"] + [f"bn{i}_{nm}" for nm in (
                "scale", "bias", "mean", "var")], [f"bn{i}"], epsilon=1e-5, name=f"bn{i}"))
            out = f"bn{i}"
        else:
            kk = scale / np.sqrt(var + 1e-5)
            inits.extend([_init(f"conv{i}_w", w * kk[:, None, None, None]), _init(f"conv{i}_b", bias - mean * kk)])
            nodes.append(helper.make_node("Conv", [x, f"conv{i}_w", f"conv{i}_b"], [f"conv{i}"], **attrs))
            out = f"conv{i}"
        if not relu:
            return out
        nodes.append(helper.make_node("Relu", [out], [f"relu{i}"], name=f"relu{i}"))
        return f"relu{i}"

    x = conv_bn("input", 3, widths[0], 3, 1, True)
    cin, sp = widths[0], size
    for s, cout in enumerate(widths):
        for blk in range(blocks):
            stride = 2 if s > 0 and blk == 0 else 1
            sp = (sp - 1) // stride + 1
            y = conv_bn(x, cin, cout, 3, stride, True)
            y = conv_bn(y, cout, cout, 3, 1, False)
            short = conv_bn(x, cin, cout, 1, stride, False) if (stride != 1 or cin != cout) else x
            name = f"add_s{s}b{blk}"
            nodes.append(helper.make_node("Add", [y, short], [name], name=name))
            nodes.append(helper.make_node("Relu", [name], [name + "_relu"], name=name + "_relu"))
            x, cin = name + "_relu", cout
    inits += [_init("fc_w", rng.standard_normal((classes, cin)) * 0.1),
              _init("fc_b", rng.standard_normal(classes) * 0.1)]
    nodes += [
        helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[sp, sp], name="global_pool"),
        helper.make_node("Flatten", ["pool"], ["flat"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["output"], transB=1, name="fc"),
    ]
    g = helper.make_graph(nodes, "resnet",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, classes])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="glow-kit")

MODELS = {"cnn": cnn, "linear_sigmoid": linear_sigmoid, "resnet": resnet}
