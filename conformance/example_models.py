"""Example and benchmark models, built with ``onnx.helper``: the CNN from Glow's docs, Linear+Sigmoid and a small
ResNet (``MODELS``), and MLP, ResNet-18, ResNet-50, MobileNetV2, EfficientNet-style, U-Net-style, LSTM language
model, BERT-style, ViT-Tiny-style and elementwise-chain models for benchmarks (``BENCH_MODELS``).

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


class _Net:
    """Nodes and initializers of a CNN being built, with the layers the CNN builders share: Conv (+ kept
    BatchNormalization, or a bias) + activation, and the classifier head (GlobalAveragePool, Flatten, Gemm)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def node(self, op, ins, out, **kw):
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **kw))
        return out

    def act(self, x, kind, i):
        """``kind`` applied to ``x``: relu, relu6 (Clip 0..6), silu (x * Sigmoid(x), as torch exports it),
        sigmoid, or None."""
        if kind is None:
            return x
        if kind == "relu6":
            if not any(t.name == "clip_hi" for t in self.inits):
                self.inits += [_init("clip_lo", np.float32(0)), _init("clip_hi", np.float32(6))]
            return self.node("Clip", [x, "clip_lo", "clip_hi"], f"relu6_{i}")
        if kind == "silu":
            return self.node("Mul", [x, self.node("Sigmoid", [x], f"silu{i}_s")], f"silu{i}")
        return self.node({"relu": "Relu", "sigmoid": "Sigmoid"}[kind], [x], f"{kind}{i}")

    def conv_bn(self, x, cin, cout, k, stride, act):
        """Conv (no bias) + BatchNormalization (kept) + ``act``."""
        self.count += 1
        i = self.count
        self.inits.append(_init(f"conv{i}_w", self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))))
        self.node("Conv", [x, f"conv{i}_w"], f"conv{i}", kernel_shape=[k, k], strides=[stride, stride],
                  pads=[k // 2] * 4)
        for nm, arr in (("scale", 1 + 0.1 * self.rng.standard_normal(cout)),
                        ("bias", 0.1 * self.rng.standard_normal(cout)),
                        ("mean", 0.1 * self.rng.standard_normal(cout)), ("var", 0.5 + self.rng.random(cout))):
            self.inits.append(_init(f"bn{i}_{nm}", arr))
        self.node("BatchNormalization", [f"conv{i}"] + [f"bn{i}_{nm}" for nm in ("scale", "bias", "mean", "var")],
                  f"bn{i}", epsilon=1e-5)
        return self.act(f"bn{i}", act, i)

    def conv(self, x, cin, cout, k, stride=1, group=1, act=None):
        """Conv with bias (BatchNormalization folded) + ``act``; ``group`` = ``cin`` = ``cout`` is depthwise."""
        self.count += 1
        i = self.count
        fan = cin // group * k * k
        self.inits.append(_init(f"conv{i}_w", self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan)))
        self.inits.append(_init(f"conv{i}_b", 0.1 * self.rng.standard_normal(cout)))
        self.node("Conv", [x, f"conv{i}_w", f"conv{i}_b"], f"conv{i}", kernel_shape=[k, k], strides=[stride, stride],
                  pads=[k // 2] * 4, group=group)
        return self.act(f"conv{i}", act, i)

    def classifier_head(self, x, cin, classes):
        """GlobalAveragePool, Flatten, Gemm from ``cin`` features to ``classes``: the output "output"."""
        self.inits += [_init("fc_w", self.rng.standard_normal((classes, cin)) * np.sqrt(1.0 / cin)),
                       _init("fc_b", self.rng.standard_normal(classes) * 0.1)]
        self.node("Gemm", [self.node("Flatten", [self.node("GlobalAveragePool", [x], "global_pool")], "flatten",
                                     axis=1), "fc_w", "fc_b"], "output", transB=1)
        return "output"

    def model(self, name, batch, size, classes, channels=3, opset=17):
        g = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info(
            "input", TensorProto.FLOAT, [batch, channels, size, size])], [helper.make_tensor_value_info(
                "output", TensorProto.FLOAT, [batch, classes])], self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="glow-kit")


def _resnet_stem(t: _Net, width: int = 64):
    x = t.conv_bn("input", 3, width, 7, 2, "relu")
    return t.node("MaxPool", [x], "stem_pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])


def _residual(t: _Net, y, short, name):
    return t.node("Relu", [t.node("Add", [y, short], name)], name + "_relu")


def resnet18(seed: int = 0, batch: int = 1, size: int = 224, classes: int = 1000):
    """A ResNet-18-style network: stem Conv 7x7/2-BN-Relu, MaxPool 3x3/2, four stages (64, 128, 256, 512) of two
    basic blocks (1x1/2 projection Conv-BN at each downsampling), GlobalAveragePool, Flatten, Gemm to
    ``classes``. Input [batch, 3, size, size]; BatchNormalization nodes kept (20 convolutions)."""
    t = _Net(seed)
    x, cin = _resnet_stem(t), 64
    for s, cout in enumerate((64, 128, 256, 512)):
        for blk in range(2):
            stride = 2 if s > 0 and blk == 0 else 1
            y = t.conv_bn(t.conv_bn(x, cin, cout, 3, stride, "relu"), cout, cout, 3, 1, None)
            short = t.conv_bn(x, cin, cout, 1, stride, None) if (stride != 1 or cin != cout) else x
            x, cin = _residual(t, y, short, f"add_s{s}b{blk}"), cout
    t.classifier_head(x, cin, classes)
    return t.model("resnet18", batch, size, classes)


def resnet50(seed: int = 0, batch: int = 1, size: int = 224, classes: int = 1000, blocks=(3, 4, 6, 3),
             widths=(64, 128, 256, 512)):
    """A ResNet-50-style network (v1.5: the stride in the 3x3 conv): the ResNet-18 stem (to ``widths[0]``
    channels), stages of bottleneck blocks (1x1 reduce-BN-Relu, 3x3-BN-Relu, 1x1 expand x4-BN, residual Add with
    a 1x1 projection Conv-BN on the first block of each stage, Relu), ``blocks`` per stage of ``widths``, the
    classifier head. Input [batch, 3, size, size]; BatchNormalization nodes kept (53 convolutions with the
    defaults)."""
    t = _Net(seed)
    x, cin = _resnet_stem(t, widths[0]), widths[0]
    for s, (width, n) in enumerate(zip(widths, blocks)):
        for blk in range(n):
            stride = 2 if s > 0 and blk == 0 else 1
            y = t.conv_bn(x, cin, width, 1, 1, "relu")
            y = t.conv_bn(y, width, width, 3, stride, "relu")
            y = t.conv_bn(y, width, 4 * width, 1, 1, None)
            short = t.conv_bn(x, cin, 4 * width, 1, stride, None) if blk == 0 else x
            x, cin = _residual(t, y, short, f"add_s{s}b{blk}"), 4 * width
    t.classifier_head(x, cin, classes)
    return t.model("resnet50", batch, size, classes)


def mobilenetv2(seed: int = 0, batch: int = 1, size: int = 224, classes: int = 1000, width: float = 1.0):
    """A MobileNetV2-style network (BatchNorm folded into conv biases): stem Conv 3x3/2 to 32 + Relu6 (Clip),
    17 inverted residual blocks (1x1 expand-Relu6, 3x3 depthwise (group = channels)-Relu6, 1x1 project,
    residual Add where shapes match), 1x1 Conv to 1280 + Relu6, GlobalAveragePool, Flatten, Gemm to
    ``classes``. Input [batch, 3, size, size]."""
    t = _Net(seed)

    def ch(c):
        return max(8, int(c * width + 4) // 8 * 8)

    cin = ch(32)
    x = t.conv("input", 3, cin, 3, 2, 1, "relu6")
    for e, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)):
        cout = ch(c)
        for j in range(n):
            stride = s if j == 0 else 1
            hid = cin * e
            y = t.conv(x, cin, hid, 1, 1, 1, "relu6") if e != 1 else x
            y = t.conv(y, hid, hid, 3, stride, hid, "relu6")
            y = t.conv(y, hid, cout, 1, 1, 1, None)
            if stride == 1 and cin == cout:
                y = t.node("Add", [y, x], f"res{t.count}")
            x, cin = y, cout
    t.classifier_head(t.conv(x, cin, 1280, 1, 1, 1, "relu6"), 1280, classes)
    return t.model("mobilenetv2", batch, size, classes)


def efficientnet(seed: int = 0, batch: int = 1, size: int = 224, classes: int = 1000, se_ratio: float = 0.25,
                 stages=((1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3), (6, 112, 3, 1, 5),
                         (6, 192, 4, 2, 5), (6, 320, 1, 1, 3)), head: int = 1280):
    """An EfficientNet-B0-style network (BatchNorm folded into conv biases, SiLU written x * Sigmoid(x) as torch
    exports it): stem Conv 3x3/2 to 32 + SiLU, MBConv blocks per ``stages`` (expansion, channels, repeats,
    stride, kernel): 1x1 expand-SiLU, kxk depthwise-SiLU, squeeze-excite (GlobalAveragePool, 1x1 Conv reduce to
    ``se_ratio`` of the block's input channels-SiLU, 1x1 Conv expand-Sigmoid, Mul), 1x1 project, residual Add
    where shapes match; 1x1 Conv to ``head`` channels-SiLU and the classifier head. Input [batch, 3, size, size]."""
    t = _Net(seed)
    cin = 32
    x = t.conv("input", 3, cin, 3, 2, 1, "silu")
    for e, cout, n, s, k in stages:
        for j in range(n):
            stride = s if j == 0 else 1
            hid = cin * e
            y = t.conv(x, cin, hid, 1, 1, 1, "silu") if e != 1 else x
            y = t.conv(y, hid, hid, k, stride, hid, "silu")
            sq = max(1, int(cin * se_ratio))
            g = t.node("GlobalAveragePool", [y], f"se{t.count}_pool")
            g = t.conv(t.conv(g, hid, sq, 1, act="silu"), sq, hid, 1, act="sigmoid")
            y = t.conv(t.node("Mul", [y, g], f"se{t.count}"), hid, cout, 1)
            if stride == 1 and cin == cout:
                y = t.node("Add", [y, x], f"res{t.count}")
            x, cin = y, cout
    t.classifier_head(t.conv(x, cin, head, 1, act="silu"), head, classes)
    return t.model("efficientnet", batch, size, classes)


def unet(seed: int = 0, batch: int = 1, size: int = 128, channels: int = 3, classes: int = 2,
         widths=(32, 64, 128, 256)):
    """A U-Net-style encoder/decoder: per level two Conv 3x3-Relu (bias, BatchNorm folded) then MaxPool 2x2
    down to a bottleneck at ``widths[-1]``; the decoder upsamples alternately with ConvTranspose 2x2/2 and
    Resize (nearest, x2) + Conv 1x1, concatenates the encoder's skip connection (Concat on channels) and
    applies two Conv 3x3-Relu; a final Conv 1x1 to ``classes`` channels. Input [batch, channels, size, size]
    (``size`` divisible by 2 ** (len(widths) - 1)); output [batch, classes, size, size]. Opset 17."""
    t = _Net(seed)
    x, cin, skips = "input", channels, []
    for lvl, w in enumerate(widths):
        if lvl:
            x = t.node("MaxPool", [x], f"down{lvl}", kernel_shape=[2, 2], strides=[2, 2])
        x = t.conv(t.conv(x, cin, w, 3, act="relu"), w, w, 3, act="relu")
        skips.append(x)
        cin = w
    t.inits.append(_init("up_scales", [1, 1, 2, 2]))
    for lvl in range(len(widths) - 2, -1, -1):
        w = widths[lvl]
        if lvl % 2:
            x = t.node("Resize", [x, "", "up_scales"], f"up{lvl}_resize", mode="nearest")
            x = t.conv(x, cin, w, 1)
        else:
            t.inits += [_init(f"up{lvl}_w", t.rng.standard_normal((cin, w, 2, 2)) * np.sqrt(1.0 / cin)),
                        _init(f"up{lvl}_b", 0.1 * t.rng.standard_normal(w))]
            x = t.node("ConvTranspose", [x, f"up{lvl}_w", f"up{lvl}_b"], f"up{lvl}", kernel_shape=[2, 2],
                       strides=[2, 2])
        x = t.node("Concat", [x, skips[lvl]], f"cat{lvl}", axis=1)
        x = t.conv(t.conv(x, 2 * w, w, 3, act="relu"), w, w, 3, act="relu")
        cin = w
    t.conv(x, cin, classes, 1)
    t.nodes[-1].output[0] = "output"
    g = helper.make_graph(t.nodes, "unet", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, [batch, channels, size, size])], [helper.make_tensor_value_info(
            "output", TensorProto.FLOAT, [batch, classes, size, size])], t.inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="glow-kit")


def lstm_lm(seed: int = 0, batch: int = 1, seq: int = 64, vocab: int = 4096, hidden: int = 256, layers: int = 2):
    """An LSTM language model: token ids [seq, batch] (int64) through an embedding table (Gather) of width
    ``hidden``, ``layers`` ONNX LSTM ops (forward, hidden ``hidden``, bias, zero initial state; each Y
    [seq, 1, batch, hidden] squeezed to [seq, batch, hidden]), then a MatMul + Add to ``vocab`` logits
    [seq, batch, vocab]. Opset 17."""
    rng = np.random.default_rng(seed)
    s = 1.0 / np.sqrt(hidden)
    inits = [_init("embedding", rng.standard_normal((vocab, hidden)) * 0.5),
             numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    nodes = [helper.make_node("Gather", ["embedding", "input"], ["embedded"], name="embed")]
    x = "embedded"
    for li in range(layers):
        inits += [_init(f"lstm{li}_W", rng.uniform(-s, s, (1, 4 * hidden, hidden))),
                  _init(f"lstm{li}_R", rng.uniform(-s, s, (1, 4 * hidden, hidden))),
                  _init(f"lstm{li}_B", rng.uniform(-s, s, (1, 8 * hidden)))]
        nodes += [helper.make_node("LSTM", [x, f"lstm{li}_W", f"lstm{li}_R", f"lstm{li}_B"], [f"lstm{li}_y"],
                                   hidden_size=hidden, name=f"lstm{li}"),
                  helper.make_node("Squeeze", [f"lstm{li}_y", "axis1"], [f"lstm{li}_out"], name=f"squeeze{li}")]
        x = f"lstm{li}_out"
    inits += [_init("decoder_w", rng.standard_normal((hidden, vocab)) * s),
              _init("decoder_b", 0.1 * rng.standard_normal(vocab))]
    nodes += [helper.make_node("MatMul", [x, "decoder_w"], ["logits_mm"], name="decoder"),
              helper.make_node("Add", ["logits_mm", "decoder_b"], ["output"], name="decoder_bias")]
    g = helper.make_graph(nodes, "lstm_lm", [helper.make_tensor_value_info("input", TensorProto.INT64, [seq, batch])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [seq, batch, vocab])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="glow-kit")


class _Layers:
    """Nodes and initializers of a model being built, with the layers the transformer builders share: linear
    (MatMul + Add), LayerNormalization, Gelu written with Erf and multi-head self-attention."""

    def __init__(self, seed: int, batch: int, seq: int, hidden: int, heads: int):
        self.rng = np.random.default_rng(seed)
        self.hidden, self.heads = hidden, heads
        dh = hidden // heads
        self.nodes = []
        self.inits = [
            numpy_helper.from_array(np.array([batch, seq, heads, dh], np.int64), "shape_heads"),
            numpy_helper.from_array(np.array([batch, seq, hidden], np.int64), "shape_hidden"),
            _init("scale", np.float32(1.0 / np.sqrt(dh))), _init("half", np.float32(0.5)),
            _init("one", np.float32(1.0)), _init("inv_sqrt2", np.float32(1.0 / np.sqrt(2.0)))]

    def node(self, op, ins, out, **kw):
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **kw))
        return out

    def linear(self, x, a, b, name):
        self.inits.extend([_init(name + "_w", self.rng.standard_normal((a, b)) * np.sqrt(1.0 / a)),
                           _init(name + "_b", 0.02 * self.rng.standard_normal(b))])
        return self.node("Add", [self.node("MatMul", [x, name + "_w"], name + "_mm"), name + "_b"], name)

    def layernorm(self, x, name):
        self.inits.extend([_init(name + "_g", 1 + 0.1 * self.rng.standard_normal(self.hidden)),
                           _init(name + "_beta", 0.1 * self.rng.standard_normal(self.hidden))])
        return self.node("LayerNormalization", [x, name + "_g", name + "_beta"], name, axis=-1, epsilon=1e-5)

    def gelu(self, h, p):
        e = self.node("Erf", [self.node("Mul", [h, "inv_sqrt2"], p + "gelu_s")], p + "gelu_erf")
        return self.node("Mul", [self.node("Mul", [h, "half"], p + "gelu_h"),
                                 self.node("Add", [e, "one"], p + "gelu_1")], p + "gelu")

    def attention(self, x, p):
        """Q, K, V projections, reshaped and transposed to heads, softmax(Q K^T scale) V, output projection."""
        heads_of = {}
        for nm in ("q", "k", "v"):
            y = self.node("Reshape", [self.linear(x, self.hidden, self.hidden, p + nm), "shape_heads"], p + nm + "_r")
            heads_of[nm] = self.node("Transpose", [y], p + nm + "_t", perm=[0, 2, 3, 1] if nm == "k" else [0, 2, 1, 3])
        sc = self.node("Mul", [self.node("MatMul", [heads_of["q"], heads_of["k"]], p + "qk"), "scale"], p + "qk_s")
        pr = self.node("Softmax", [sc], p + "probs", axis=-1)
        ctx = self.node("Transpose", [self.node("MatMul", [pr, heads_of["v"]], p + "ctx")], p + "ctx_t",
                        perm=[0, 2, 1, 3])
        ctx = self.node("Reshape", [ctx, "shape_hidden"], p + "ctx_r")
        return self.linear(ctx, self.hidden, self.hidden, p + "o")

    def model(self, name, inputs, outputs):
        g = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="glow-kit")


def bert_encoder(seed: int = 0, batch: int = 1, seq: int = 128, hidden: int = 256, heads: int = 4,
                 layers: int = 2, ffn: int = 1024):
    """A BERT-style encoder of ``layers`` post-LN layers on an embedded input [batch, seq, hidden]: multi-head
    self-attention (MatMul+Add projections, Reshape/Transpose to heads, scaled Q K^T, Softmax, MatMul with V,
    output projection), residual Add + LayerNormalization, then a feed-forward MatMul-Add-Gelu (written with
    Erf: 0.5 x (1 + erf(x / sqrt 2)))-MatMul-Add, residual Add + LayerNormalization. Opset 17. The 12-layer
    encoder of bench/bench_compile.py is ``bert_encoder(layers=12, hidden=384, heads=6, ffn=1536)``."""
    t = _Layers(seed, batch, seq, hidden, heads)
    x = "input"
    for li in range(layers):
        p = f"l{li}_"
        x = t.layernorm(t.node("Add", [t.attention(x, p), x], p + "res1"), p + "ln1")
        h = t.linear(t.gelu(t.linear(x, hidden, ffn, p + "ff1"), p), ffn, hidden, p + "ff2")
        x = t.layernorm(t.node("Add", [h, x], p + "res2"), p + "ln2")
    t.nodes.append(helper.make_node("Identity", [x], ["output"], name="output"))
    return t.model("bert_encoder", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, seq, hidden])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, seq, hidden])])


def vit_tiny(seed: int = 0, batch: int = 1, size: int = 224, patch: int = 16, hidden: int = 192, heads: int = 3,
             layers: int = 12, mlp: int = 768, classes: int = 1000):
    """A ViT-Tiny-style image classifier: a patch-``patch`` Conv stem to ``hidden`` channels, the patches as
    tokens (Reshape, Transpose) after a class token (Concat), plus a position embedding, then ``layers`` pre-LN
    layers (LayerNormalization, multi-head self-attention as in ``bert_encoder``, residual Add,
    LayerNormalization, MatMul-Add-Gelu-MatMul-Add, residual Add), a final LayerNormalization, the class token
    (Gather) and a linear head to ``classes``. Input [batch, 3, size, size]. Opset 17."""
    n = (size // patch) ** 2
    t = _Layers(seed, batch, n + 1, hidden, heads)
    t.inits += [_init("patch_w", t.rng.standard_normal((hidden, 3, patch, patch)) * np.sqrt(1.0 / (3 * patch * patch))),
                _init("patch_b", 0.02 * t.rng.standard_normal(hidden)),
                _init("cls", 0.02 * t.rng.standard_normal((batch, 1, hidden))),
                _init("pos", 0.02 * t.rng.standard_normal((1, n + 1, hidden))),
                numpy_helper.from_array(np.array([batch, hidden, n], np.int64), "shape_tokens"),
                numpy_helper.from_array(np.array(0, np.int64), "cls_index")]
    x = t.node("Conv", ["input", "patch_w", "patch_b"], "patches", kernel_shape=[patch, patch], strides=[patch, patch])
    x = t.node("Transpose", [t.node("Reshape", [x, "shape_tokens"], "patches_r")], "tokens", perm=[0, 2, 1])
    x = t.node("Add", [t.node("Concat", ["cls", x], "tokens_cls", axis=1), "pos"], "embedded")
    for li in range(layers):
        p = f"l{li}_"
        x = t.node("Add", [x, t.attention(t.layernorm(x, p + "ln1"), p)], p + "res1")
        h = t.linear(t.gelu(t.linear(t.layernorm(x, p + "ln2"), hidden, mlp, p + "ff1"), p), mlp, hidden, p + "ff2")
        x = t.node("Add", [x, h], p + "res2")
    x = t.node("Gather", [t.layernorm(x, "ln_final"), "cls_index"], "cls_out", axis=1)
    t.linear(x, hidden, classes, "head")
    t.nodes[-1].output[0] = "output"
    return t.model("vit_tiny", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, classes])])


def elementwise_chain(nodes: int, seed: int = 0, batch: int = 8, width: int = 32):
    """A chain of ``nodes`` elementwise ONNX nodes on [batch, width] inputs ``input`` and ``second``, cycling
    through Add and Mul with constants, Relu, Sigmoid, Neg, Sub of the second input, two equal Sigmoids
    (common subexpressions) joined by an Add, and a Mul by the sum of two constants (folded). Its compile time
    shows whether any pass is worse than linear in the graph's size (bench/bench_compile.py)."""
    rng = np.random.default_rng(seed)
    consts = [_init(f"c{k}", rng.standard_normal(width) * 0.1 + (1.0 if k % 2 else 0.0)) for k in range(8)]
    out, x, i = [], "input", 0

    def emit(op, ins, name):
        out.append(helper.make_node(op, ins, [name], name=name))
        return name

    while len(out) < nodes:
        step = len(out) % 11
        v = f"v{i}"
        i += 1
        if len(out) == nodes - 1:  # the last node ends the main path, so every node reaches the output
            x = emit("Neg", [x], v)
        elif step in (0, 1):
            x = emit("Add" if step == 0 else "Mul", [x, f"c{i % 8}"], v)
        elif step in (2, 3, 4):
            x = emit(("Relu", "Sigmoid", "Neg")[step - 2], [x], v)
        elif step == 5:
            x = emit("Sub", [x, "second"], v)
        elif step in (6, 7):
            emit("Sigmoid", [x], v)
        elif step == 8:
            x = emit("Add", [f"v{i - 3}", f"v{i - 2}"], v)
        elif step == 9:
            emit("Add", [f"c{i % 8}", f"c{(i + 3) % 8}"], v)
        else:
            x = emit("Mul", [x, f"v{i - 2}"], v)
    out[-1].output[0] = "output"
    spec = [helper.make_tensor_value_info(nm, TensorProto.FLOAT, [batch, width]) for nm in ("input", "second")]
    g = helper.make_graph(out, "elementwise_chain", spec, [helper.make_tensor_value_info(
        "output", TensorProto.FLOAT, [batch, width])], consts)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="glow-kit")


#: The larger benchmark models (bench/bench_cpu.py), kept out of ``MODELS``, which tests run in full on every backend.
BENCH_MODELS = {"mlp": mlp, "resnet18": resnet18, "resnet50": resnet50, "mobilenetv2": mobilenetv2,
                "efficientnet": efficientnet, "unet": unet, "lstm_lm": lstm_lm, "bert_encoder": bert_encoder,
                "vit_tiny": vit_tiny, "elementwise_chain": elementwise_chain}
