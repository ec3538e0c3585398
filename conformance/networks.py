"""Whole networks for the "models" tier, built with onnx.helper (small, seeded): MLP, MobileNet-style
depthwise-separable CNN, BERT-style encoder layer, LSTM-style recurrence unrolled over time steps, and a
U-Net-style encoder/decoder with Resize and Concat skip connections, and the elementwise tails a backend may
fuse (adds followed by activations, broadcast operands). ResNet, the CNN of Glow's docs and
Linear+Sigmoid come from ``glow_conformance.example_models``.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from glow_core.types import dtype as gdtype


class G:
    """A tiny graph builder: ``g.op("Conv", [x, w], kernel_shape=[3, 3])`` returns the output name."""

    def __init__(self, seed, dt="float32"):
        self.rng = np.random.default_rng(seed)
        self.dt = gdtype(dt)
        self.nodes, self.inits, self.k = [], [], 0

    def w(self, *shape, scale=None):
        self.k += 1
        scale = scale if scale is not None else 1.0 / np.sqrt(max(1, int(np.prod(shape[1:])) or 1))
        arr = (self.rng.standard_normal(shape) * scale).astype(self.dt.np)
        nm = f"w{self.k}"
        self.inits.append(numpy_helper.from_array(arr, nm))
        return nm

    def const(self, arr, dt=None):
        self.k += 1
        nm = f"c{self.k}"
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype=dt or self.dt.np), nm))
        return nm

    def op(self, op, ins, n_out=1, **attrs):
        self.k += 1
        outs = [f"{op.lower()}{self.k}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, ins, outs, name=f"{op.lower()}{self.k}", **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, name, inputs, outputs, opset=21):
        ins = [helper.make_tensor_value_info(n, self.dt.onnx, list(s)) for n, s in inputs]
        outs = [helper.make_tensor_value_info(n, self.dt.onnx, None) for n in outputs]
        g = helper.make_graph(self.nodes, name, ins, outs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="glow-conformance")
        m.ir_version = min(m.ir_version, 10)
        return m


def mlp(seed=0, dt="float32", batch=4, sizes=(33, 64, 17, 10)):
    g = G(seed, dt)
    x = "input"
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        x = g.op("Gemm", [x, g.w(b, a), g.w(b, scale=0.1)], transB=1)
        if i < len(sizes) - 2:
            x = g.op("Relu", [x])
    g.op("Softmax", [x], axis=-1)
    return g.model("mlp", [("input", (batch, sizes[0]))], [g.nodes[-1].output[0]])


def many_outputs(seed=0, dt="float32", batch=2, width=17):
    """Twelve outputs of one function (a backend with 8 output slots loses 4): each a different op of the input
    (elementwise, a reduction, a matmul, a softmax, a transpose, a slice)."""
    g = G(seed, dt)
    x = "input"
    outs = [g.op("Relu", [x]), g.op("Neg", [x]), g.op("Abs", [x]), g.op("Sigmoid", [x]), g.op("Tanh", [x]),
            g.op("Add", [x, g.w(width)]), g.op("Mul", [x, g.w(width)]), g.op("Softmax", [x], axis=-1),
            g.op("ReduceSum", [x, g.const([1], np.int64)], keepdims=0), g.op("MatMul", [x, g.w(width, 5)]),
            g.op("Transpose", [x], perm=[1, 0]), g.op("Max", [x, g.w(width)])]
    return g.model("many_outputs", [("input", (batch, width))], outs)


def mobilenet(seed=0, dt="float32", size=16, batch=1):
    g = G(seed, dt)
    x = g.op("Conv", ["input", g.w(8, 3, 3, 3), g.w(8, scale=0.1)], kernel_shape=[3, 3], strides=[2, 2],
             pads=[1, 1, 1, 1])
    x = g.op("Clip", [x, g.const(0.0), g.const(6.0)])
    for cin, cout, stride in ((8, 16, 1), (16, 24, 2), (24, 24, 1)):
        d = g.op("Conv", [x, g.w(cin, 1, 3, 3), g.w(cin, scale=0.1)], kernel_shape=[3, 3], strides=[stride] * 2,
                 pads=[1, 1, 1, 1], group=cin)
        d = g.op("Clip", [d, g.const(0.0), g.const(6.0)])
        p = g.op("Conv", [d, g.w(cout, cin, 1, 1), g.w(cout, scale=0.1)], kernel_shape=[1, 1])
        x = g.op("Add", [p, x]) if cin == cout and stride == 1 else p
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    g.op("Gemm", [x, g.w(10, 24), g.w(10, scale=0.1)], transB=1)
    return g.model("mobilenet", [("input", (batch, 3, size, size))], [g.nodes[-1].output[0]])


def bert_encoder(seed=0, dt="float32", batch=2, seq=7, hidden=32, heads=4):
    g = G(seed, dt)
    hd = hidden // heads

    def ln(x):
        return g.op("LayerNormalization", [x, g.w(hidden, scale=1.0), g.w(hidden, scale=0.1)], axis=-1,
                    epsilon=1e-5)

    def proj(x, n_out):
        return g.op("Add", [g.op("MatMul", [x, g.w(hidden, n_out)]), g.w(n_out, scale=0.1)])

    def heads_(x):
        r = g.op("Reshape", [x, g.const([batch, seq, heads, hd], np.int64)])
        return g.op("Transpose", [r], perm=[0, 2, 1, 3])
    x = "input"
    q, k, v = heads_(proj(x, hidden)), heads_(proj(x, hidden)), heads_(proj(x, hidden))
    s = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
    s = g.op("Mul", [s, g.const(1.0 / np.sqrt(hd))])
    s = g.op("Add", [s, "mask"])
    a = g.op("MatMul", [g.op("Softmax", [s], axis=-1), v])
    a = g.op("Reshape", [g.op("Transpose", [a], perm=[0, 2, 1, 3]), g.const([batch, seq, hidden], np.int64)])
    x = ln(g.op("Add", [x, proj(a, hidden)]))
    h = g.op("Add", [g.op("MatMul", [x, g.w(hidden, 4 * hidden)]), g.w(4 * hidden, scale=0.1)])
    h = g.op("Mul", [h, g.op("Sigmoid", [g.op("Mul", [h, g.const(1.702)])])])  # GELU (sigmoid approximation)
    h = g.op("Add", [g.op("MatMul", [h, g.w(4 * hidden, hidden)]), g.w(hidden, scale=0.1)])
    ln(g.op("Add", [x, h]))
    return g.model("bert_encoder", [("input", (batch, seq, hidden)), ("mask", (batch, 1, 1, seq))],
                   [g.nodes[-1].output[0]])


def lstm_unrolled(seed=0, dt="float32", batch=3, steps=5, inp=6, hidden=8):
    """An LSTM cell written out with MatMul/Add/Sigmoid/Tanh/Mul/Slice over ``steps`` time steps."""
    g = G(seed, dt)
    W, R, B = g.w(inp, 4 * hidden), g.w(hidden, 4 * hidden), g.w(4 * hidden, scale=0.1)
    h, c = "h0", "c0"
    outs = []
    for t in range(steps):
        xt = g.op("Squeeze", [g.op("Slice", ["input", g.const([t], np.int64), g.const([t + 1], np.int64),
                                             g.const([0], np.int64)]), g.const([0], np.int64)])
        z = g.op("Add", [g.op("Add", [g.op("MatMul", [xt, W]), g.op("MatMul", [h, R])]), B])
        i, f, o, u = g.op("Split", [z, g.const([hidden] * 4, np.int64)], n_out=4, axis=1)
        i, f, o, u = g.op("Sigmoid", [i]), g.op("Sigmoid", [f]), g.op("Sigmoid", [o]), g.op("Tanh", [u])
        c = g.op("Add", [g.op("Mul", [f, c]), g.op("Mul", [i, u])])
        h = g.op("Mul", [o, g.op("Tanh", [c])])
        outs.append(g.op("Unsqueeze", [h, g.const([0], np.int64)]))
    g.op("Concat", outs, axis=0)
    return g.model("lstm_unrolled", [("input", (steps, batch, inp)), ("h0", (batch, hidden)), ("c0", (batch, hidden))],
                   [g.nodes[-1].output[0]])


def unet(seed=0, dt="float32", size=16):
    g = G(seed, dt)

    def block(x, cin, cout):
        y = g.op("Conv", [x, g.w(cout, cin, 3, 3), g.w(cout, scale=0.1)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        return g.op("Relu", [y])
    e1 = block("input", 2, 8)
    e2 = block(g.op("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2]), 8, 16)
    b = block(g.op("MaxPool", [e2], kernel_shape=[2, 2], strides=[2, 2]), 16, 16)
    scales = g.const([1, 1, 2, 2], np.float32)
    u2 = g.op("Resize", [b, "", scales], mode="nearest")
    d2 = block(g.op("Concat", [u2, e2], axis=1), 32, 8)
    u1 = g.op("Resize", [d2, "", scales], mode="linear")
    d1 = block(g.op("Concat", [u1, e1], axis=1), 16, 8)
    g.op("Conv", [d1, g.w(3, 8, 1, 1), g.w(3, scale=0.1)], kernel_shape=[1, 1])
    return g.model("unet", [("input", (1, 2, size, size))], [g.nodes[-1].output[0]])


def fused_tails(seed=0, dt="float32", batch=2, ch=8, size=16):
    """The elementwise tails the CPU backend fuses (an add absorbing its activation) and stacks (broadcast
    operands read in place): a per-channel bias add + Relu, a residual add + Clip (relu6), a residual add +
    LeakyRelu, a row-bias add + Sigmoid, a scalar scale, a residual add + Tanh (big enough that constant
    folding keeps the broadcasts)."""
    g = G(seed, dt)
    a = g.op("Relu", [g.op("Add", ["input", g.w(1, ch, 1, 1, scale=0.5)])])
    b = g.op("Clip", [g.op("Add", [a, "input"]), g.const(0.0), g.const(6.0)])
    c = g.op("LeakyRelu", [g.op("Add", [b, a])], alpha=0.1)
    d = g.op("Sigmoid", [g.op("Add", [c, g.w(size, scale=1.0)])])
    e = g.op("Tanh", [g.op("Add", [g.op("Mul", [d, g.const(1.5)]), c])])
    return g.model("fused_tails", [("input", (batch, ch, size, size))], [e])


#: ONNX activation -> (extra constant inputs, attributes): the forms glow_core.fusion folds into a producer.
ACTIVATIONS = {"Relu": ((), {}), "Clip": ((0.0, 6.0), {}), "Sigmoid": ((), {}), "Tanh": ((), {}),
               "LeakyRelu": ((), {"alpha": 0.1}), "HardSwish": ((), {}),
               "HardSigmoid": ((), {"alpha": 0.3, "beta": 0.4})}


def fused(seed=0, dt="float32", producer="Conv", act="Relu", x=(1, 8, 10, 10), w=(8, 8, 3, 3), const=True,
          **attrs):
    """A producer (Conv with a bias, or MatMul without one: a bias add would absorb the activation instead) and
    the activation a backend folds into it (glow_core.fusion): the fused kernel epilogues. ``const``: the
    weight is an initializer (the CPU backend's conv engine and prepacked GEMM operand), else a graph input."""
    g = G(seed, dt)
    wname = g.w(*w) if const else "weight"
    ins = ["input", wname] + ([g.w(w[0], scale=0.1)] if producer == "Conv" else [])
    y = g.op(producer, ins, **attrs)
    extra, at = ACTIVATIONS[act]
    g.op(act, [y] + [g.const(v) for v in extra], **at)
    inputs = [("input", x)] + ([] if const else [("weight", w)])
    return g.model(f"fused_{producer.lower()}_{act.lower()}", inputs, [g.nodes[-1].output[0]])


def residual(seed=0, dt="float32", act=None, x=(1, 16, 12, 12), w=(16, 16, 3, 3), blocked=True, **attrs):
    """conv -> Add(conv, earlier) [-> act]: the residual add a backend folds into the conv's epilogue. ``blocked``:
    the earlier tensor is Relu(conv(input)) and the sum feeds a 1x1 conv (between convs: the blocked layout a
    backend's layout pass may choose), else a second graph input (plain layout: graph inputs and outputs are plain). The conv keeps the
    spatial shape (pads of half the kernel; ``attrs``: e.g. group)."""
    g = G(seed, dt)
    attrs.setdefault("pads", [k // 2 for k in w[2:]] * 2)
    c = x[1]
    b = "other"
    if blocked:
        b = g.op("Relu", [g.op("Conv", ["input", g.w(c, c, 1, 1), g.w(c, scale=0.1)])])
    y = g.op("Add", [g.op("Conv", [b if blocked else "input", g.w(*w), g.w(w[0], scale=0.1)], **attrs), b])
    if act:
        extra, at = ACTIVATIONS[act]
        y = g.op(act, [y] + [g.const(v) for v in extra], **at)
    if blocked:  # read by a conv: blocked
        y = g.op("Conv", [y, g.w(c, c, 1, 1), g.w(c, scale=0.1)])
    inputs = [("input", x)] + ([] if blocked else [("other", x[:1] + (w[0],) + x[2:])])
    return g.model(f"residual_{act or 'none'}", inputs, [y])


def downsample(seed=0, dt="float32", act="Relu", x=(1, 32, 12, 12), filters=48, tail="conv"):
    """A ResNet downsampling block: a main branch (3x3 stride 2 + Relu, then 3x3) and a shortcut (1x1 stride 2),
    Add(main, shortcut) [-> act]. The shortcut runs last and the sum may take the main branch's memory: a backend
    folding the add into the shortcut conv's epilogue then reads the residual from its own output. ``tail``:
    "conv" (the sum feeds a 1x1 conv: blocked between convs), "pool" (a global average pool: plain)."""
    g = G(seed, dt)
    c = x[1]
    main = g.op("Relu", [g.op("Conv", ["input", g.w(filters, c, 3, 3), g.w(filters, scale=0.1)], pads=[1] * 4,
                              strides=[2, 2])])
    main = g.op("Conv", [main, g.w(filters, filters, 3, 3), g.w(filters, scale=0.1)], pads=[1] * 4)
    short = g.op("Conv", ["input", g.w(filters, c, 1, 1), g.w(filters, scale=0.1)], strides=[2, 2])
    y = g.op("Add", [main, short])
    if act:
        extra, at = ACTIVATIONS[act]
        y = g.op(act, [y] + [g.const(v) for v in extra], **at)
    y = g.op("Conv", [y, g.w(c, filters, 1, 1), g.w(c, scale=0.1)]) if tail == "conv" else \
        g.op("GlobalAveragePool", [y])
    return g.model(f"downsample_{act or 'none'}_{tail}", [("input", x)], [y])


def layout_boundaries(seed=0, dt="float32", size=10, channels=(3, 17, 20)):
    """Every boundary of a blocked-layout region (a backend's tensor_layout_requirements): conv -> relu ->
    conv, conv -> add -> conv (a residual add of two convs), conv -> max pool -> conv, conv -> global average
    pool, concats of convs on the channel axis (17 + 20 channels, and 16 + 16: whole channel blocks), conv ->
    flatten -> gemm, graph outputs written by convs, and channel counts (3, 17, 20) that are no multiple of a
    channel block, so padding lanes are reached. With NCHWc between convs, adds and pools and a global average
    pool reading NCHWc (its result plain): no conversion; the flattened tensor is written plain."""
    g = G(seed, dt)
    c0, c1, c2 = channels

    def conv(x, cin, cout, k=3):
        return g.op("Conv", [x, g.w(cout, cin, k, k), g.w(cout, scale=0.1)], kernel_shape=[k, k],
                    pads=[k // 2] * 4)
    a = g.op("Relu", [conv("input", c0, c1)])
    r = g.op("Relu", [g.op("Add", [conv(a, c1, c2), conv(a, c1, c2, 1)])])
    side1 = conv(r, c2, c0)
    gap = g.op("GlobalAveragePool", [r])
    q = g.op("Sigmoid", [conv(g.op("MaxPool", [r], kernel_shape=[2, 2], strides=[2, 2]), c2, c1)])
    cat = g.op("Concat", [conv(q, c1, c1), conv(q, c1, c2, 1)], axis=1)
    h = g.op("Relu", [conv(cat, c1 + c2, c0, 1)])
    side2 = conv(h, c0, c0)
    aligned = g.op("Concat", [conv(q, c1, 16), conv(q, c1, 16, 1)], axis=1)  # whole channel blocks of 8 or 16
    side3 = conv(aligned, 32, c0, 1)
    y = g.op("Gemm", [g.op("Flatten", [h], axis=1), g.w(10, c0 * (size // 2) ** 2), g.w(10, scale=0.1)], transB=1)
    return g.model("layout_boundaries", [("input", (2, c0, size, size))], [y, side1, side2, side3, gap])


def squeeze_excite(seed=0, dt="float32", batch=2, channels=20, size=9, specials=False):
    """An EfficientNet-style squeeze-excite block between convs: depthwise 3x3 conv -> global average pool ->
    1x1 conv -> Relu -> 1x1 conv -> Sigmoid -> channel gate Mul(x, g[N, C, 1, 1]) -> 1x1 conv, and the
    per-channel ReduceMax / ReduceSum over H, W of the depthwise output as outputs (the spatial reductions and
    the gate a backend's layout pass may keep in its blocked layout; ``channels``: a multiple of a channel block
    or not). ``specials``: a second input added to the block's input, the conformance feeds' special values
    (NaN, +-inf, +-0, denormals) in a few channels, zeros elsewhere."""
    g = G(seed, dt)
    c, r = channels, max(1, channels // 4)
    x = g.op("Add", ["input", "specials"]) if specials else "input"
    y = g.op("Conv", [x, g.w(c, 1, 3, 3), g.w(c, scale=0.1)], group=c, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    s = g.op("GlobalAveragePool", [y])
    h = g.op("Relu", [g.op("Conv", [s, g.w(r, c, 1, 1), g.w(r, scale=0.1)])])
    gate = g.op("Sigmoid", [g.op("Conv", [h, g.w(c, r, 1, 1), g.w(c, scale=0.1)])])
    z = g.op("Conv", [g.op("Mul", [y, gate]), g.w(c + 3, c, 1, 1), g.w(c + 3, scale=0.1)])
    axes = g.const([2, 3], np.int64)
    mx = g.op("ReduceMax", [y, axes], keepdims=0)
    sm = g.op("ReduceSum", [y, axes], keepdims=1)
    shape = (batch, c, size, size)
    return g.model("squeeze_excite", [("input", shape)] + ([("specials", shape)] if specials else []),
                   [z, mx, sm])


def ew_chains(seed=0, dt="float32", batch=2, rows=64, cols=320):
    """Chains of 2 to 6 elementwise ops a backend may run as one loop (the CPU backend's chains.py), past the
    parallel thresholds at 2 threads: a bias add into a lowered GELU (x*0.5*(1+erf(x/sqrt2)), the input read by
    two members), LayerNorm pieces kept lowered (per-row mean and variance: the subtracted tensor also read by
    a square that a reduction reads stops fusion there; the scale and shift broadcast per row and per column),
    LeakyRelu of a difference (select(lt, mul)), a Swish (x * sigmoid(x)) whose value is also a graph output,
    and a cast round trip through float64 between multiplies. Integer types: adds, multiplies, max/min and
    sign flips around an integer division (its divisor check keeps it a kernel of its own) and a reduction."""
    g = G(seed, dt)
    x = "input"
    if np.dtype(g.dt.np).kind != "f":
        a = g.op("Add", [x, g.const(np.arange(cols) % 5 - 2)])
        b = g.op("Sub", [g.op("Mul", [a, g.const(3)]), x])
        c = g.op("Max", [b, g.op("Neg", [g.op("Min", [a, g.const(2)])])])
        red = g.op("ReduceSum", [c, g.const([2], np.int64)], keepdims=1)
        d = g.op("Div", [g.op("Add", [c, g.const(7)]), g.const(np.arange(1, cols + 1) % 4 + 1)])
        e = g.op("Mul", [g.op("Sub", [d, red]), g.op("Abs", [c])])
        return g.model("ew_chains", [(x, (batch, rows, cols))], [e, red])
    a = g.op("Add", [x, g.w(cols, scale=1.0)])
    erf = g.op("Erf", [g.op("Mul", [a, g.const(1 / np.sqrt(2))])])
    gelu = g.op("Mul", [g.op("Mul", [a, g.const(0.5)]), g.op("Add", [erf, g.const(1.0)])])
    mean = g.op("ReduceMean", [gelu, g.const([2], np.int64)], keepdims=1)
    d = g.op("Sub", [gelu, mean])
    var = g.op("ReduceMean", [g.op("Mul", [d, d]), g.const([2], np.int64)], keepdims=1)
    norm = g.op("Div", [d, g.op("Sqrt", [g.op("Add", [var, g.const(1e-3)])])])
    ln = g.op("Add", [g.op("Mul", [norm, g.w(cols, scale=1.0)]), g.w(cols, scale=0.1)])
    lrelu = g.op("LeakyRelu", [g.op("Sub", [ln, x])], alpha=0.2)
    swish = g.op("Mul", [lrelu, g.op("Sigmoid", [lrelu])])
    wide = g.op("Cast", [g.op("Mul", [swish, g.const(1.5)])], to=11)
    out = g.op("Mul", [g.op("Cast", [g.op("Sub", [wide, g.const(0.25, np.float64)])], to=g.dt.onnx), a])
    return g.model("ew_chains", [(x, (batch, rows, cols))], [out, swish])


def attention(seed=0, dt="float32", batch=1, heads=2, seq=260, keys=None, dim=8, scale="mul", mask=None,
              also=None, vdim=None, q_split=False, exporter=False):
    """Attention over graph inputs q [B, H, S, D] (``q_split``: q [B, S, H, D], its heads split by a Transpose),
    k [B, H, T, D] and v [B, H, T, Dv] (Dv = ``vdim`` or D): MatMul(q, Transpose(k)) -> [Mul by 1/sqrt(D) | Div by
    sqrt(D)] -> [Add mask: "keys" [B, 1, 1, T] or "full" [B, H, S, T]] -> Softmax -> MatMul v -> Transpose and
    Reshape to [B, S, H * Dv] (a fused attention kernel's pattern). ``also``: "probs" (the softmax also a graph
    output) or "scores" (the scores also read by a ReduceMax that is an output): fusion refused. ``exporter``: as
    torch's dynamo exporter decomposes scaled_dot_product_attention: q and k^T each multiplied by D^-1/4, a boolean
    mask (True: attend) added as Where(mask, 0, -inf), and the probabilities' NaN (a fully masked row) set to 0 by
    Where(IsNaN(P), 0, P)."""
    g = G(seed, dt)
    t, dv = keys or seq, vdim or dim
    q = g.op("Transpose", ["q"], perm=[0, 2, 1, 3]) if q_split else "q"
    if exporter:
        root = g.const(dim ** -0.25)
        s = g.op("MatMul", [g.op("Mul", [q, root]), g.op("Mul", [g.op("Transpose", ["k"], perm=[0, 1, 3, 2]), root])])
        if mask:
            s = g.op("Add", [s, g.op("Where", ["mask", g.const(0.0), g.const(-np.inf)])])
        p = g.op("Softmax", [s], axis=-1)
        p = g.op("Where", [g.op("IsNaN", [p]), g.const(0.0), p])
        o = g.op("MatMul", [p, "v"])
        o = g.op("Reshape", [g.op("Transpose", [o], perm=[0, 2, 1, 3]), g.const([batch, seq, heads * dv], np.int64)])
        inputs = [("q", (batch, seq, heads, dim) if q_split else (batch, heads, seq, dim)),
                  ("k", (batch, heads, t, dim)), ("v", (batch, heads, t, dv))]
        m = g.model("attention", inputs, [o])
        if mask:
            shape = (batch, 1, 1, t) if mask == "keys" else (batch, heads, seq, t)
            m.graph.input.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, list(shape)))
        return m
    s = g.op("MatMul", [q, g.op("Transpose", ["k"], perm=[0, 1, 3, 2])])
    if scale == "mul":
        s = g.op("Mul", [s, g.const(1.0 / np.sqrt(dim))])
    elif scale == "div":
        s = g.op("Div", [s, g.const(np.sqrt(dim))])
    scores = s
    if mask:
        s = g.op("Add", [s, "mask"])
    p = g.op("Softmax", [s], axis=-1)
    o = g.op("MatMul", [p, "v"])
    o = g.op("Reshape", [g.op("Transpose", [o], perm=[0, 2, 1, 3]), g.const([batch, seq, heads * dv], np.int64)])
    outs = [o] + ([p] if also == "probs" else []) + (
        [g.op("ReduceMax", [scores, g.const([-1], np.int64)], keepdims=0)] if also == "scores" else [])
    inputs = [("q", (batch, seq, heads, dim) if q_split else (batch, heads, seq, dim)), ("k", (batch, heads, t, dim)),
              ("v", (batch, heads, t, dv))]
    if mask:
        inputs.append(("mask", (batch, 1, 1, t) if mask == "keys" else (batch, heads, seq, t)))
    return g.model("attention", inputs, outs)


def head_transposes(seed=0, dt="float32", batch=2, seq=37, heads=3, dim=24, softmax=False):
    """Attention-style head split and merge around batched matmuls (a backend may fold the transposes into the
    matmuls' indexing: the CPU backend's strided_operands.py): q = (x + w) split into heads (perm 0,2,1,3: the
    first operand read through a batch offset and row stride), k = (x * w) split and transposed (perm 0,2,3,1:
    the second operand read column-strided), v = (x - w) split (the second operand row-strided), the context
    merged back (perm 0,2,1,3 after the matmul: the result written through strides into a graph output); tanh(x)
    transposed (perm 0,2,1) as the first operand of a batched matmul with a constant weight (a column stride in
    the first operand, the second packed at compile time); and a split transpose also read by a reduction (read twice: kept a copy). Sizes past the
    GEMM threshold, seq and dim not multiples of the micro-tile. ``softmax``: Softmax instead of Sigmoid and v's
    input x projected through a 4x wider Relu layer (so the scheduler computes v before the scores): the pattern
    of a fused attention kernel, whose q, k, v and context a backend may read and write through strides."""
    g = G(seed, dt)
    x, hd = "input", heads * dim
    split = g.const([batch, seq, heads, dim], np.int64)

    def heads_of(t, perm):
        return g.op("Transpose", [g.op("Reshape", [t, split])], perm=perm)

    q = heads_of(g.op("Add", [x, g.w(hd, scale=1.0)]), [0, 2, 1, 3])
    k = heads_of(g.op("Mul", [x, g.w(hd, scale=1.0)]), [0, 2, 3, 1])
    vx = g.op("MatMul", [g.op("Relu", [g.op("MatMul", [x, g.w(hd, 4 * hd)])]), g.w(4 * hd, hd)]) if softmax else x
    v = heads_of(g.op("Sub", [vx, g.w(hd, scale=1.0)]), [0, 2, 1, 3])
    scores = g.op("Mul", [g.op("MatMul", [q, k]), g.const(1 / np.sqrt(dim))])
    probs = g.op("Softmax", [scores], axis=-1) if softmax else g.op("Sigmoid", [scores])
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    proj = g.op("MatMul", [g.op("Transpose", [g.op("Tanh", [x])], perm=[0, 2, 1]), g.w(batch, seq, 40)])
    twice = heads_of(g.op("Neg", [x]), [0, 2, 3, 1])
    both = g.op("MatMul", [heads_of(g.op("Abs", [x]), [0, 2, 1, 3]), twice])
    total = g.op("ReduceSum", [twice, g.const([3], np.int64)], keepdims=0)
    return g.model("head_transposes", [(x, (batch, seq, hd))], [ctx, proj, both, total])


def gqa_heads(seed=0, dt="float32", seq=1, keys=37, heads=6, kv_heads=2, dim=16, softmax=False):
    """Grouped-query attention as torch exports it (LLaMA's repeat_kv): each of ``kv_heads`` key and value heads (the
    inputs k and v: a KV cache) broadcast to ``heads // kv_heads`` query heads (Unsqueeze, Expand, Reshape), the
    keys transposed for Q K^T. A backend may read k and v where they lie (stride 0 over the repeated heads, the
    keys by columns) instead of materializing the broadcasts and the transpose: the CPU backend's fusion rule
    "transposes". seq 1 is a decode step (products below the CPU backend's GEMM threshold: its plain loops)."""
    g = G(seed, dt)
    rep = heads // kv_heads

    def repeat(t):
        e = g.op("Expand", [g.op("Unsqueeze", [t, g.const([2], np.int64)]),
                            g.const([1, kv_heads, rep, keys, dim], np.int64)])
        return g.op("Reshape", [e, g.const([1, heads, keys, dim], np.int64)])
    scores = g.op("Mul", [g.op("MatMul", ["q", g.op("Transpose", [repeat("k")], perm=[0, 1, 3, 2])]),
                          g.const(1 / np.sqrt(dim))])
    probs = g.op("Softmax", [scores], axis=-1) if softmax else g.op("Sigmoid", [scores])
    out = g.op("MatMul", [probs, repeat("v")])
    return g.model("gqa_heads", [("q", (1, heads, seq, dim)), ("k", (1, kv_heads, keys, dim)),
                                 ("v", (1, kv_heads, keys, dim))], [out])
