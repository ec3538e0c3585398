"""Example and benchmark models, built with ``onnx.helper``: the CNN from Glow's docs, Linear+Sigmoid and a small
ResNet (``MODELS``), and MLP, ResNet-18, MobileNetV2, BERT-style, ViT-Tiny-style and elementwise-chain models for
benchmarks (``BENCH_MODELS``).

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
BENCH_MODELS = {"mlp": mlp, "resnet18": resnet18, "mobilenetv2": mobilenetv2, "bert_encoder": bert_encoder,
                "vit_tiny": vit_tiny, "elementwise_chain": elementwise_chain}
