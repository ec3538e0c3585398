"""Example and benchmark models, built with ``onnx.helper``: the CNN from Glow's docs, Linear+Sigmoid and a small
ResNet (``MODELS``), and MLP, ResNet-18, MobileNetV2 and BERT-style encoders for benchmarks (``BENCH_MODELS``).

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


def mlp(seed: int = 0, batch: int = 64, sizes=(784, 512, 512, 10)):
    """An MLP: Gemm-Relu layers through ``sizes`` (no Relu after the last), input [batch, sizes[0]]."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "input"
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        inits += [_init(f"fc{i}_w", rng.standard_normal((b, a)) * np.sqrt(2.0 / a)),
                  _init(f"fc{i}_b", rng.standard_normal(b) * 0.1)]
        last = i == len(sizes) - 2
        out = "output" if last else f"fc{i}"
        nodes.append(helper.make_node("Gemm", [x, f"fc{i}_w", f"fc{i}_b"], [out], transB=1, name=f"fc{i}"))
        if not last:
            nodes.append(helper.make_node("Relu", [out], [f"relu{i}"], name=f"relu{i}"))
            out = f"relu{i}"
        x = out
    g = helper.make_graph(nodes, "mlp",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, sizes[0]])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, sizes[-1]])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="glow-kit")


def resnet18(seed: int = 0, batch: int = 1, size: int = 224, classes: int = 1000):
    """A ResNet-18-style network: stem Conv 7x7/2-BN-Relu, MaxPool 3x3/2, four stages (64, 128, 256, 512) of two
    basic blocks (1x1/2 projection Conv-BN at each downsampling), GlobalAveragePool, Flatten, Gemm to
    ``classes``. Input [batch, 3, size, size]; BatchNormalization nodes kept (20 convolutions)."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    count = [0]

    def conv_bn(x, cin, cout, k, stride, relu):
        count[0] += 1
        i = count[0]
        inits.append(_init(f"conv{i}_w", rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))))
        nodes.append(helper.make_node("Conv", [x, f"conv{i}_w"], [f"conv{i}"], kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[k // 2] * 4, name=f"conv{i}"))
        for nm, arr in (("scale", 1 + 0.1 * rng.standard_normal(cout)), ("bias", 0.1 * rng.standard_normal(cout)),
                        ("mean", 0.1 * rng.standard_normal(cout)), ("var", 0.5 + rng.random(cout))):
            inits.append(_init(f"bn{i}_{nm}", arr))
        nodes.append(helper.make_node("BatchNormalization", [f"conv{i}"] + [f"bn{i}_{nm}" for nm in (
            "scale", "bias", "mean", "var")], [f"bn{i}"], epsilon=1e-5, name=f"bn{i}"))
        if not relu:
            return f"bn{i}"
        nodes.append(helper.make_node("Relu", [f"bn{i}"], [f"relu{i}"], name=f"relu{i}"))
        return f"relu{i}"

    x = conv_bn("input", 3, 64, 7, 2, True)
    nodes.append(helper.make_node("MaxPool", [x], ["stem_pool"], kernel_shape=[3, 3], strides=[2, 2],
                                  pads=[1, 1, 1, 1], name="stem_pool"))
    x, cin = "stem_pool", 64
    for s, cout in enumerate((64, 128, 256, 512)):
        for blk in range(2):
            stride = 2 if s > 0 and blk == 0 else 1
            y = conv_bn(x, cin, cout, 3, stride, True)
            y = conv_bn(y, cout, cout, 3, 1, False)
            short = conv_bn(x, cin, cout, 1, stride, False) if (stride != 1 or cin != cout) else x
            name = f"add_s{s}b{blk}"
            nodes.append(helper.make_node("Add", [y, short], [name], name=name))
            nodes.append(helper.make_node("Relu", [name], [name + "_relu"], name=name + "_relu"))
            x, cin = name + "_relu", cout
    inits += [_init("fc_w", rng.standard_normal((classes, cin)) * np.sqrt(1.0 / cin)),
              _init("fc_b", rng.standard_normal(classes) * 0.1)]
    nodes += [helper.make_node("GlobalAveragePool", [x], ["pool"], name="global_pool"),
              helper.make_node("Flatten", ["pool"], ["flat"], axis=1, name="flatten"),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["output"], transB=1, name="fc")]
    g = helper.make_graph(nodes, "resnet18",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, classes])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="glow-kit")


def mobilenetv2(seed: int = 0, batch: int = 1, size: int = 224, classes: int = 1000, width: float = 1.0):
    """A MobileNetV2-style network (BatchNorm folded into conv biases): stem Conv 3x3/2 to 32 + Relu6 (Clip),
    17 inverted residual blocks (1x1 expand-Relu6, 3x3 depthwise (group = channels)-Relu6, 1x1 project,
    residual Add where shapes match), 1x1 Conv to 1280 + Relu6, GlobalAveragePool, Flatten, Gemm to
    ``classes``. Input [batch, 3, size, size]."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], [_init("clip_lo", np.float32(0)), _init("clip_hi", np.float32(6))]
    count = [0]

    def ch(c):
        return max(8, int(c * width + 4) // 8 * 8)

    def conv(x, cin, cout, k, stride, group, relu6):
        count[0] += 1
        i = count[0]
        fan = cin // group * k * k
        inits.append(_init(f"conv{i}_w", rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan)))
        inits.append(_init(f"conv{i}_b", 0.1 * rng.standard_normal(cout)))
        nodes.append(helper.make_node("Conv", [x, f"conv{i}_w", f"conv{i}_b"], [f"conv{i}"], kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[k // 2] * 4, group=group, name=f"conv{i}"))
        if not relu6:
            return f"conv{i}"
        nodes.append(helper.make_node("Clip", [f"conv{i}", "clip_lo", "clip_hi"], [f"relu6_{i}"], name=f"relu6_{i}"))
        return f"relu6_{i}"

    cin = ch(32)
    x = conv("input", 3, cin, 3, 2, 1, True)
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)):
        cout = ch(c)
        for j in range(n):
            stride = s if j == 0 else 1
            hid = cin * t
            y = conv(x, cin, hid, 1, 1, 1, True) if t != 1 else x
            y = conv(y, hid, hid, 3, stride, hid, True)
            y = conv(y, hid, cout, 1, 1, 1, False)
            if stride == 1 and cin == cout:
                nm = f"res{count[0]}"
                nodes.append(helper.make_node("Add", [y, x], [nm], name=nm))
                y = nm
            x, cin = y, cout
    x = conv(x, cin, 1280, 1, 1, 1, True)
    inits += [_init("fc_w", rng.standard_normal((classes, 1280)) * np.sqrt(1.0 / 1280)),
              _init("fc_b", rng.standard_normal(classes) * 0.1)]
    nodes += [helper.make_node("GlobalAveragePool", [x], ["pool"], name="global_pool"),
              helper.make_node("Flatten", ["pool"], ["flat"], axis=1, name="flatten"),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["output"], transB=1, name="fc")]
    g = helper.make_graph(nodes, "mobilenetv2",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, classes])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="glow-kit")


def bert_encoder(seed: int = 0, batch: int = 1, seq: int = 128, hidden: int = 256, heads: int = 4,
                 layers: int = 2, ffn: int = 1024):
    """A BERT-style encoder of ``layers`` post-LN layers on an embedded input [batch, seq, hidden]: multi-head
    self-attention (MatMul+Add projections, Reshape/Transpose to heads, scaled Q K^T, Softmax, MatMul with V,
    output projection), residual Add + LayerNormalization, then a feed-forward MatMul-Add-Gelu (written with
    Erf: 0.5 x (1 + erf(x / sqrt 2)))-MatMul-Add, residual Add + LayerNormalization. Opset 17."""
    rng = np.random.default_rng(seed)
    dh = hidden // heads
    nodes, inits = [], [
        numpy_helper.from_array(np.array([batch, seq, heads, dh], np.int64), "shape_heads"),
        numpy_helper.from_array(np.array([batch, seq, hidden], np.int64), "shape_hidden"),
        _init("scale", np.float32(1.0 / np.sqrt(dh))), _init("half", np.float32(0.5)),
        _init("one", np.float32(1.0)), _init("inv_sqrt2", np.float32(1.0 / np.sqrt(2.0)))]

    def node(op, ins, out, **kw):
        nodes.append(helper.make_node(op, ins, [out], name=out, **kw))
        return out

    def linear(x, a, b, name):
        inits.extend([_init(name + "_w", rng.standard_normal((a, b)) * np.sqrt(1.0 / a)),
                      _init(name + "_b", 0.02 * rng.standard_normal(b))])
        return node("Add", [node("MatMul", [x, name + "_w"], name + "_mm"), name + "_b"], name)

    def layernorm(x, name):
        inits.extend([_init(name + "_g", 1 + 0.1 * rng.standard_normal(hidden)),
                      _init(name + "_beta", 0.1 * rng.standard_normal(hidden))])
        return node("LayerNormalization", [x, name + "_g", name + "_beta"], name, axis=-1, epsilon=1e-5)

    x = "input"
    for li in range(layers):
        p = f"l{li}_"
        heads_of = {}
        for nm in ("q", "k", "v"):
            y = node("Reshape", [linear(x, hidden, hidden, p + nm), "shape_heads"], p + nm + "_r")
            heads_of[nm] = node("Transpose", [y], p + nm + "_t",
                                perm=[0, 2, 3, 1] if nm == "k" else [0, 2, 1, 3])
        sc = node("Mul", [node("MatMul", [heads_of["q"], heads_of["k"]], p + "qk"), "scale"], p + "qk_s")
        pr = node("Softmax", [sc], p + "probs", axis=-1)
        ctx = node("Transpose", [node("MatMul", [pr, heads_of["v"]], p + "ctx")], p + "ctx_t", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, "shape_hidden"], p + "ctx_r")
        att = linear(ctx, hidden, hidden, p + "o")
        x = layernorm(node("Add", [att, x], p + "res1"), p + "ln1")
        h = linear(x, hidden, ffn, p + "ff1")
        e = node("Erf", [node("Mul", [h, "inv_sqrt2"], p + "gelu_s")], p + "gelu_erf")
        h = node("Mul", [node("Mul", [h, "half"], p + "gelu_h"), node("Add", [e, "one"], p + "gelu_1")],
                 p + "gelu")
        h = linear(h, ffn, hidden, p + "ff2")
        x = layernorm(node("Add", [h, x], p + "res2"), p + "ln2")
    nodes.append(helper.make_node("Identity", [x], ["output"], name="output"))
    g = helper.make_graph(nodes, "bert_encoder",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, seq, hidden])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, seq, hidden])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="glow-kit")


#: The larger benchmark models (bench/bench_cpu.py), kept out of ``MODELS``, which tests run in full on every backend.
BENCH_MODELS = {"mlp": mlp, "resnet18": resnet18, "mobilenetv2": mobilenetv2, "bert_encoder": bert_encoder}
