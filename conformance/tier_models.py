"""Tier "models": whole networks (float32, some in float16), seeded inputs; expectation from
onnx.reference.ReferenceEvaluator (reference backend) or the reference interpreter (any other backend).

The QDQ models are networks quantized by ``onnxruntime.quantization.quantize_static`` (QDQ format, MinMax,
calibrated on seeded inputs) with the last DequantizeLinear removed, so the output is the integer tensor: the
reference backend is checked against onnxruntime's own int8 run, any other backend against the interpreter,
both within the quantized tolerance (1 in the last place)."""
from __future__ import annotations

import functools
import os
import tempfile

import numpy as np
import onnx

from glow_conformance import example_models
from glow_core.types import dtype as gdtype

from . import networks as M
from . import paths
from .onnx_cases import model_case
from .primitive_cases import specials, sprinkle

#: The sizes of conformance.paths these tables were made with (the plugin re-imports this module for others).
PATHS_SIGNATURE = paths.signature()


def _feeds(model, rng):
    out = {}
    for vi in model.graph.input:
        t = vi.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        dt = gdtype(t.elem_type).np
        if vi.name == "mask" and t.elem_type == onnx.TensorProto.BOOL:  # True: attend (80 %)
            a = rng.random(shape) >= 0.2
        elif vi.name == "mask":
            a = np.where(rng.random(shape) < 0.2, -1e4, 0.0)
        elif vi.name == "specials":  # special values in channels 1 and C - 1 (a partial channel block's last)
            a = np.zeros(shape)
            for ch in (1, shape[1] - 1):
                a[:, ch] = sprinkle(np.zeros(shape[:1] + shape[2:], dt), rng, 0.1,
                                    specials(gdtype(t.elem_type).name))
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
    # batch > 1 through a whole network (every kernel's batch loop and image offsets), and a function with more
    # outputs than 8 (a backend keeping 8 output slots)
    "mobilenet_batch3": lambda dt: M.mobilenet(seed=2, dt=dt, batch=3),
    "cnn_batch2": lambda dt: example_models.cnn(seed=2, batch=2),
    "many_outputs": lambda dt: M.many_outputs(seed=1, dt=dt),
    "bert_encoder": lambda dt: M.bert_encoder(seed=1, dt=dt),
    "lstm_unrolled": lambda dt: M.lstm_unrolled(seed=1, dt=dt),
    "unet": lambda dt: M.unet(seed=1, dt=dt),
    "fused_tails": lambda dt: M.fused_tails(seed=1, dt=dt),
    "ew_chains": lambda dt: M.ew_chains(seed=1, dt=dt),
    "layout_boundaries": lambda dt: M.layout_boundaries(seed=1, dt=dt),
    # squeeze-excite between convs (spatial reductions and the channel gate on a blocked layout): C = 20 leaves a
    # partial channel block, 32 fills whole ones (of 8 or 16); 40x40 planes pass the parallel thresholds (THREADED)
    "squeeze_excite_c20": lambda dt: M.squeeze_excite(seed=1, dt=dt, channels=20),
    "squeeze_excite_c32": lambda dt: M.squeeze_excite(seed=2, dt=dt, channels=32),
    "squeeze_excite_c20_specials": lambda dt: M.squeeze_excite(seed=3, dt=dt, channels=20, specials=True),
    "squeeze_excite_c40_large": lambda dt: M.squeeze_excite(seed=4, dt=dt, channels=40, size=40),
    "squeeze_excite_c32_large_specials": lambda dt: M.squeeze_excite(seed=5, dt=dt, channels=32, size=40,
                                                                     specials=True),
    # the bench families of glow_conformance.example_models at small sizes
    "resnet50_small": lambda dt: example_models.resnet50(seed=1, size=16, classes=10, blocks=(1, 1), widths=(4, 8)),
    "efficientnet_small": lambda dt: example_models.efficientnet(
        seed=1, size=16, classes=10, stages=((1, 8, 1, 1, 3), (6, 16, 2, 2, 5)), head=32),
    "unet_small": lambda dt: example_models.unet(seed=1, size=16, channels=2, widths=(4, 8, 16)),
    "lstm_lm_small": lambda dt: example_models.lstm_lm(seed=1, seq=5, vocab=20, hidden=8),
    "vit_small": lambda dt: example_models.vit_tiny(seed=1, size=16, patch=8, hidden=16, heads=2, layers=1, mlp=32,
                                                    classes=10),
    # head split/merge transposes around batched matmuls (folded into their indexing: strided_operands.py),
    # batch 2 with partial micro-tiles; batch 1 past the GEMM's parallel threshold (THREADED)
    "head_transposes": lambda dt: M.head_transposes(seed=1, dt=dt),
    "head_transposes_large": lambda dt: M.head_transposes(seed=2, dt=dt, batch=1, seq=100, heads=2, dim=64),
    # the same with Softmax: a fused attention kernel reads q, k, v and writes the context through strides (at 2
    # threads; at 1 from attention.MIN_KEYS = 256 keys on: t260)
    "head_transposes_attention": lambda dt: M.head_transposes(seed=3, dt=dt, softmax=True),
    "head_transposes_attention_t260": lambda dt: M.head_transposes(seed=4, dt=dt, batch=1, seq=260, heads=2, dim=16,
                                                                    softmax=True),
    # grouped-query attention's repeated and transposed key/value heads (read in place through strides): a decode
    # step (plain loops, keys by columns in blocks of 16 and a tail), and a block of 8 queries over 300 keys (GEMM)
    "gqa_decode": lambda dt: M.gqa_heads(seed=1, dt=dt),
    "gqa_block": lambda dt: M.gqa_heads(seed=2, dt=dt, seq=8, keys=300, softmax=True),
    # Gemm + Relu above the CPU backend's GEMM thresholds (a batch past its M block): the fused epilogue
    "mlp_gemm_epilogue": lambda dt: M.mlp(seed=2, dt=dt, batch=paths.gemm_tiles("f32")["mc"] + 1,
                                          sizes=(64, 96, 40, 10)),
}

#: A producer and the activation the CPU backend folds into its kernel (networks.fused), one line each: name ->
#: (dtypes, producer, activation, x shape, weight shape, constant weight, attributes). GEMM sizes from the code
#: generator's tile table (paths.gemm_shapes' last: several K blocks, the epilogue only after the last one,
#: whole and partial micro-tiles); conv sizes from the conv engine's choices (backends/cpu/conv/algorithms.py:
#: 3x3 stride 1 on 12x12 and 24x24 maps is Winograd F(2x2) and F(4x4), strided is direct); activations the
#: engine does not apply in registers (tanh, leaky_relu) run after it, in the same kernel.
_G32, _G64 = paths.gemm_shapes("f32")[-1], paths.gemm_shapes("f64")[-1]
P1, S2 = [1, 1, 1, 1], [2, 2]
FUSED = {
    "matmul_gemm_relu": (("float32", "float64"), "MatMul", "Relu", _G32[:2], _G32[1:], True, {}),
    "matmul_gemm_f64_leaky_relu": (("float64",), "MatMul", "LeakyRelu", _G64[:2], _G64[1:], True, {}),
    "matmul_gemm_sigmoid_runtime_b": (("float32",), "MatMul", "Sigmoid", _G32[:2], _G32[1:], False, {}),
    "matmul_gemm_clip": (("float32",), "MatMul", "Clip", _G32[:2], _G32[1:], True, {}),
    "matmul_converted_tanh": (("float16",), "MatMul", "Tanh", _G32[:2], _G32[1:], True, {}),
    "matmul_small_leaky_relu": (("float32",), "MatMul", "LeakyRelu", (5, 7), (7, 3), True, {}),
    "conv_engine_direct_sigmoid": (("float32",), "Conv", "Sigmoid", (1, 16, 13, 13), (24, 16, 3, 3), True,
                                   dict(pads=P1, strides=S2)),
    "conv_engine_winograd2_tanh": (("float32",), "Conv", "Tanh", (1, 16, 12, 12), (24, 16, 3, 3), True,
                                   dict(pads=P1)),
    "conv_engine_winograd4_relu": (("float32",), "Conv", "Relu", (1, 16, 24, 24), (16, 16, 3, 3), True,
                                   dict(pads=P1)),
    "conv_engine_1x1_leaky_relu": (("float32",), "Conv", "LeakyRelu", (1, 16, 9, 9), (24, 16, 1, 1), True, {}),
    "conv_engine_depthwise_sigmoid": (("float32",), "Conv", "Sigmoid", (1, 16, 10, 10), (16, 1, 3, 3), True,
                                      dict(pads=P1, group=16)),
    "conv_engine_depthwise_clip": (("float32",), "Conv", "Clip", (1, 24, 11, 11), (24, 1, 3, 3), True,
                                   dict(pads=P1, strides=S2, group=24)),
    "conv_engine_winograd4_hard_swish": (("float32",), "Conv", "HardSwish", (1, 16, 24, 24), (16, 16, 3, 3), True,
                                         dict(pads=P1)),
    "conv_engine_depthwise_hard_sigmoid": (("float32",), "Conv", "HardSigmoid", (1, 20, 11, 11), (20, 1, 3, 3),
                                           True, dict(pads=P1, strides=S2, group=20)),
    "conv_im2col_hard_sigmoid": (("float64",), "Conv", "HardSigmoid", (1, 4, 9, 9), (6, 4, 3, 3), False,
                                 dict(pads=P1)),
    "conv_im2col_sigmoid": (("float32", "float64", "float16"), "Conv", "Sigmoid", (1, 4, 9, 9), (6, 4, 3, 3),
                            False, dict(pads=P1)),
    "conv_direct_1x1_relu": (("float32",), "Conv", "Relu", (1, 4, 9, 9), (6, 4, 1, 1), False, {}),
    "conv_depthwise_leaky_relu": (("float32", "float64"), "Conv", "LeakyRelu", (1, 5, 8, 8), (5, 1, 3, 3), False,
                                  dict(pads=P1, group=5)),
}
#: A conv and the residual add (and the add's activation) a backend folds into the conv's epilogue
#: (networks.residual), one line each: name -> (activation, x shape, weight shape, blocked, threads, attributes).
#: The CPU conv engine's choices (conv_algorithms.py): 3x3 stride 1 on 12x12 / 24x24 is Winograd F(2x2) / F(4x4),
#: 1x1 and 5x5 direct, group == C depthwise; 20 channels leave a partial channel block (its padding lanes);
#: ``blocked``: between convs (NCHWc), else plain graph inputs and outputs; 2 threads past PARALLEL_MIN_MACS.
RESIDUAL = {
    "winograd2_relu_blocked": ("Relu", (1, 16, 12, 12), (16, 16, 3, 3), True, 1, {}),
    "winograd4_blocked_t2": (None, (1, 16, 24, 24), (16, 16, 3, 3), True, 2, {}),
    "direct_1x1_relu_plain_t2": ("Relu", (1, 32, 32, 32), (40, 32, 1, 1), False, 2, {}),
    "direct_5x5_plain": (None, (1, 20, 13, 13), (20, 20, 5, 5), False, 1, {}),
    "direct_5x5_clip_blocked_t2": ("Clip", (1, 20, 24, 24), (20, 20, 5, 5), True, 2, {}),
    "depthwise_clip_blocked": ("Clip", (1, 20, 11, 11), (20, 1, 3, 3), True, 1, dict(group=20)),
    "depthwise_sigmoid_plain_t2": ("Sigmoid", (1, 24, 56, 56), (24, 1, 3, 3), False, 2, dict(group=24)),
}
#: A ResNet downsampling block (networks.downsample), one line each: name -> (activation, x shape, filters, tail,
#: threads). The sum takes the main branch's memory, so the CPU backend folds the add into the strided 1x1 shortcut
#: conv reading the residual from its own output (conv_fusion's in_place): blocked (tail "conv"; 512 channels: one
#: input-channel chunk where the direct kernel would take several), plain (tail "pool": partial sums in scratch;
#: batch 2); 2 threads past PARALLEL_MIN_MACS.
DOWNSAMPLE = {
    "relu_blocked": ("Relu", (1, 32, 12, 12), 48, "conv", 1),
    "wide_blocked_t2": (None, (1, 512, 6, 6), 256, "conv", 2),
    "relu_plain_t2": ("Relu", (1, 64, 28, 28), 96, "pool", 2),
    "clip_plain_batch2": ("Clip", (2, 24, 10, 10), 40, "pool", 1),
}
#: Attention a backend may run as one fused kernel (networks.attention; the CPU backend's attention.py fuses from
#: attention.MIN_KEYS = 256 keys at 1 thread, at 2 threads always; scores of at most ~1 MB, as a vendor backend
#: of the template (4 MiB of activations) runs this tier), one line each: name -> (network arguments,
#: threads, special inputs: "neginf_row" (a mask row all -inf: NaN probabilities), "nan" (a NaN in q)). 200, 257
#: and 260 query rows are no multiple of the kernel's row block; "q_split": the plan gives O the memory of Q (copied
#: first); "probs" / "scores" also read elsewhere: not fused.
ATTENTION = {
    "mask_mul_b2_h3_t2": (dict(batch=2, heads=3, seq=200, mask="keys"), 2, None),
    "nomask_div": (dict(batch=1, heads=2, seq=260, scale="div"), 1, None),
    "noscale_mask_full": (dict(batch=2, heads=2, seq=257, scale=None, mask="full"), 1, None),
    "cross_s40_t300_t2": (dict(batch=1, heads=2, seq=40, keys=300, mask="keys"), 2, None),
    "neginf_mask_row": (dict(batch=1, heads=2, seq=260, mask="full"), 1, "neginf_row"),
    "nan_query_t2": (dict(batch=1, heads=2, seq=260, mask="keys"), 2, "nan"),
    "q_split_copied_t2": (dict(batch=1, heads=2, seq=100, dim=32, q_split=True, mask="keys"), 2, None),
    # as torch's dynamo exporter writes scaled_dot_product_attention (scale on q and k, boolean mask, NaN to 0)
    "exporter_mask_keys_t2": (dict(batch=2, heads=3, seq=64, mask="keys", exporter=True), 2, None),
    "exporter_masked_row": (dict(batch=1, heads=2, seq=260, mask="full", exporter=True), 1, "masked_row"),
    "exporter_nomask_t2": (dict(batch=1, heads=2, seq=77, keys=100, dim=16, exporter=True), 2, None),
    "refused_probs_output": (dict(batch=1, heads=2, seq=260, mask="keys", also="probs"), 1, None),
    "refused_scores_read": (dict(batch=1, heads=2, seq=260, also="scores"), 1, None),
}
DTYPES = {"mlp": ("float32", "float16", "float64"), "mobilenet": ("float32", "float16"),
          "many_outputs": ("float32", "float16"),
          "fused_tails": ("float32", "float16", "float64"),
          "lstm_unrolled": ("float32", "float64"), "ew_chains": ("float32", "float16", "int32"),
          "head_transposes": ("float32", "float64", "float16"), "gqa_decode": ("float32", "float64", "float16")}
#: Models also run compiled with num_threads=2 (their loops past the CPU backend's parallel thresholds).
THREADED = {"ew_chains": ("float32", "float16", "int32"), "squeeze_excite_c40_large": ("float32",),
            "squeeze_excite_c32_large_specials": ("float32",), "head_transposes_large": ("float32",),
            "head_transposes_attention": ("float32",), "vit_small": ("float32",), "gqa_block": ("float32",)}


#: QDQ models: name -> (float model, per-channel weights, activation dtype)
QDQ = {
    "qdq_cnn": (lambda: example_models.cnn(seed=1), False, "int8"),
    "qdq_resnet": (lambda: example_models.resnet(seed=1, size=16, widths=(8, 16), blocks=1), True, "int8"),
    "qdq_resnet_u8": (lambda: example_models.resnet(seed=2, size=16, widths=(8, 16), blocks=1), False, "uint8"),
    "qdq_mobilenet": (lambda: M.mobilenet(seed=1), False, "uint8"),
}


@functools.lru_cache(maxsize=None)
def _qdq_model(name: str) -> onnx.ModelProto:
    """QDQ[name] quantized by onnxruntime (calibrated on 4 seeded inputs), its output the quantized tensor."""
    try:
        import onnxruntime.quantization as q
    except ImportError:
        from .cases import Unsupported
        raise Unsupported("no oracle: the QDQ models are made by onnxruntime.quantization, which is not installed",
                          kind="no-oracle", stage="import") from None
    from onnxruntime.quantization.shape_inference import quant_pre_process
    build, per_channel, act = QDQ[name]
    model = build()
    rng = np.random.default_rng(7)
    calib = [_feeds(model, rng) for _ in range(4)]

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)
    with tempfile.TemporaryDirectory() as tmp:
        f32, pre, out = (os.path.join(tmp, f) for f in ("f32.onnx", "pre.onnx", "qdq.onnx"))
        onnx.save(model, f32)
        quant_pre_process(f32, pre, skip_symbolic_shape=True)
        q.quantize_static(pre, out, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=per_channel,
                          activation_type=q.QuantType.QInt8 if act == "int8" else q.QuantType.QUInt8,
                          weight_type=q.QuantType.QInt8, calibrate_method=q.CalibrationMethod.MinMax)
        qm = onnx.load(out)
    g = qm.graph
    out_name = g.output[0].name
    dq = next(n for n in g.node if n.op_type == "DequantizeLinear" and out_name in n.output)
    g.node.remove(dq)
    for n in g.node:
        n.output[:] = [out_name if o == dq.input[0] else o for o in n.output]
    g.output[0].type.tensor_type.elem_type = onnx.TensorProto.INT8 if act == "int8" else onnx.TensorProto.UINT8
    return qm


def _ort_run(model, feeds):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def cases():
    out = []
    for name, fn in MODELS.items():
        for dt in DTYPES.get(name, ("float32",)):
            def build(rng, fn=fn, dt=dt):
                m = fn(dt)
                return m, _feeds(m, rng)
            out.append(model_case(f"models/{name}/{dt}/seeded", "models", name, dt, build, "model",
                                  profiles=("models",)))
            if dt in THREADED.get(name, ()):
                out.append(model_case(f"models/{name}/{dt}/seeded/t2", "models", name, dt, build, "model",
                                      profiles=("models",), threads=2))
    for name, (dts, producer, act, xs, ws, const, attrs) in FUSED.items():
        for dt in dts:
            def build(rng, dt=dt, producer=producer, act=act, xs=xs, ws=ws, const=const, attrs=attrs):
                m = M.fused(seed=3, dt=dt, producer=producer, act=act, x=xs, w=ws, const=const, **attrs)
                return m, _feeds(m, rng)
            out.append(model_case(f"models/fused_{name}/{dt}/seeded", "models", f"fused_{name}", dt, build, "model",
                                  profiles=("models",)))
    for name, (act, xs, ws, blocked, threads, attrs) in RESIDUAL.items():
        def build(rng, act=act, xs=xs, ws=ws, blocked=blocked, attrs=attrs):
            m = M.residual(seed=3, act=act, x=xs, w=ws, blocked=blocked, **attrs)
            return m, _feeds(m, rng)
        out.append(model_case(f"models/residual_{name}/float32/seeded", "models", f"residual_{name}", "float32", build,
                              "model", profiles=("models",), threads=threads))
    for name, (act, xs, filters, tail, threads) in DOWNSAMPLE.items():
        def build(rng, act=act, xs=xs, filters=filters, tail=tail):
            m = M.downsample(seed=3, act=act, x=xs, filters=filters, tail=tail)
            return m, _feeds(m, rng)
        out.append(model_case(f"models/downsample_{name}/float32/seeded", "models", f"downsample_{name}", "float32",
                              build, "model", profiles=("models",), threads=threads))
    for name, (kw, threads, special) in ATTENTION.items():
        def build(rng, kw=kw, special=special):
            m = M.attention(seed=4, **kw)
            feeds = _feeds(m, rng)
            if special == "neginf_row":
                feeds["mask"][0, 1, 7, :] = -np.inf
            elif special == "nan":
                feeds["q"][0, 1, 5, 3] = np.nan
            elif special == "masked_row":  # a query attending to nothing: its probabilities NaN, set to 0
                feeds["mask"][0, 1, 7, :] = False
            return m, feeds
        out.append(model_case(f"models/attention_{name}/float32/seeded", "models", f"attention_{name}", "float32",
                              build, "model", profiles=("models",), threads=threads))
    for name in QDQ:
        def build(rng, name=name):
            m = _qdq_model(name)
            return m, _feeds(m, rng)
        out.append(model_case(f"models/{name}/{QDQ[name][2]}/seeded", "models", name, QDQ[name][2], build,
                              "quantized", profiles=("models", "quantized-int8"),
                              reference_tolerance="quantized-foreign",
                              oracle=lambda feeds, name=name: _ort_run(_qdq_model(name), feeds),
                              flows=("int8-per-channel",) if QDQ[name][1] else ("int8-per-tensor",)))
    return out + flow_cases()


#: The float32 networks every flow but fp32 (whose networks are the float32 cases above) runs under its recipe.
FLOW_MODELS = {
    "mlp": lambda: M.mlp(seed=1),
    "cnn": lambda: example_models.cnn(seed=1),
    "resnet": lambda: example_models.resnet(seed=1, size=16, widths=(8, 16), blocks=1),
}
CALIBRATION_SAMPLES = 4


@functools.lru_cache(maxsize=None)
def _profile(name: str):
    """A profile of FLOW_MODELS[name] calibrated on seeded inputs (glow_core.quantization.profile)."""
    from glow_core.quantization import profile
    model = FLOW_MODELS[name]()
    rng = np.random.default_rng(11)
    return profile(model, [_feeds(model, rng) for _ in range(CALIBRATION_SAMPLES)])


def _recipe(flow, name):
    """The compile options of ``flow`` for network ``name`` (its profile calibrated when the recipe quantizes)."""
    from .flows import PROFILE
    opts = dict(flow.options)
    if opts.get("quantize") == PROFILE:
        opts["quantize"] = _profile(name)
    return opts


def _flow_model(flow, name):
    """FLOW_MODELS[name] as ``flow`` takes it: the int4 flows transform the model itself."""
    model = FLOW_MODELS[name]()
    if flow.name in ("int4-weight-only", "int4-int8-act"):
        from glow_core.quantization import weight_only
        model = weight_only(model, bits=4, block_size=32, symmetric=True,
                            accuracy_level=4 if flow.name == "int4-int8-act" else 0)
    return model


def flow_cases():
    """Each network of FLOW_MODELS under each flow's recipe (``models/<network>/<flow>/recipe``): against the
    interpreter under the same recipe, or (the reference interpreter itself) against the float32 network by
    ReferenceEvaluator within the flow's SQNR."""
    from .flows import FLOWS
    out = []
    for fname, flow in FLOWS.items():
        if fname == "fp32":
            continue
        for name in FLOW_MODELS:
            def build(rng, flow=flow, name=name):
                m = _flow_model(flow, name)
                return m, _feeds(m, rng)

            def oracle(feeds, name=name):  # the float32 network (for the reference interpreter only)
                from onnx.reference import ReferenceEvaluator
                return [np.asarray(r) for r in ReferenceEvaluator(FLOW_MODELS[name]()).run(None, feeds)]
            cls = f"flow-agree-{fname}" if flow.agreement_db else "model"
            out.append(model_case(f"models/{name}/{fname}/recipe", "models", name, fname, build, cls,
                                  profiles=("models",), options=lambda m, flow=flow, name=name: _recipe(flow, name),
                                  oracle=oracle, reference_tolerance=f"flow-{fname}", flows=(fname,)))
    return out
