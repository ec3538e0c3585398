"""The models of bench/bench_exports.py, built the way users get them: torch's dynamo exporter
(``torch.onnx.export(..., dynamo=True)``) on torchvision, timm, transformers and diffusers architectures and on
plain torch modules, with random weights (fixed seeds, configs written here: nothing is downloaded), at opsets
18-23. Each export is cached as ``<cache>/<key>.onnx`` with its inputs as ``<key>.npz`` (``$GLOW_EXPORT_CACHE``,
default ``~/.cache/glow_kit_exports``; the key holds the case, its size, opset and the torch / library versions),
written atomically, so bench processes load files and never import torch.

Without torch, the families the kit's own builders have (``glow_conformance.example_models``) are built with
onnx.helper instead and the others are skipped.

    python bench/export_models.py [--quick] [--models a,b] [--list]     # export (or list) the cases
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

CACHE = os.environ.get("GLOW_EXPORT_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "glow_kit_exports"))
ORT_IR_VERSION = 10  # onnxruntime 1.2x reads IR 10; the exporter may write a newer one
#: Part of every cache key: raise it when a builder changes what it exports.
ZOO_VERSION = 2


@dataclass(frozen=True)
class Case:
    """One exported model: ``build(quick)`` returns (torch module in eval mode, {input name: numpy array}) with
    the inputs in ``forward``'s order; ``kind`` groups cases for ``--quick`` (one per kind); ``helper`` names the
    onnx.helper builder of ``glow_conformance.example_models`` used where torch is absent."""

    name: str
    kind: str
    library: str
    opset: int
    build: Callable
    helper: str | None = None
    rev: int = 0  # part of the cache key: raise it when this case's builder changes


# ------------------------------------------------------------------------------------------------ builders
def _seed():
    import torch
    torch.manual_seed(0)
    np.random.seed(0)


def _tokens(shape, vocab, seed=1):
    return np.random.default_rng(seed).integers(0, vocab, shape, dtype=np.int64)


def _image(shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _torchvision(arch, size):
    def build(quick):
        import torchvision
        _seed()
        m = getattr(torchvision.models, arch)(weights=None).eval()
        return m, {"x": _image((1, 3, size(quick), size(quick)))}
    return build


def _timm(arch, size, **kw):
    def build(quick):
        import timm
        _seed()
        extra = kw.get("quick", {}) if quick else kw.get("full", {})
        m = timm.create_model(arch, pretrained=False, img_size=size(quick), **extra).eval() if kw.get("img_size") \
            else timm.create_model(arch, pretrained=False, **extra).eval()
        return m, {"x": _image((1, 3, size(quick), size(quick)))}
    return build


def _hf_causal(config_cls, model_cls, full, small, seq=(128, 16)):
    """A transformers causal LM (logits of every position), prefill of ``seq`` tokens, no cache."""
    def build(quick):
        import torch
        import transformers
        _seed()
        cfg = getattr(transformers, config_cls)(**(small if quick else full))
        m = getattr(transformers, model_cls)(cfg).eval()
        s = seq[quick]

        class Prefill(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
        return Prefill().eval(), {"input_ids": _tokens((1, s), cfg.vocab_size),
                                  "attention_mask": np.ones((1, s), np.int64)}
    return build


def _hf_decode(config_cls, model_cls, full, small, past=(127, 15)):
    """One decode step of a transformers causal LM: one new token after ``past`` cached positions, the cache
    as one key and one value input per layer (as exporters of decoders with a KV cache write it); outputs the
    logits and the updated cache."""
    def build(quick):
        import torch
        import transformers
        _seed()
        cfg = getattr(transformers, config_cls)(**(small if quick else full))
        m = getattr(transformers, model_cls)(cfg).eval()
        t = past[quick]
        layers = cfg.num_hidden_layers
        kvh = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        hd = cfg.hidden_size // cfg.num_attention_heads

        class Decode(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask, position_ids, past_keys, past_values):
                cache = transformers.DynamicCache(config=cfg)
                for i in range(layers):
                    cache.update(past_keys[i], past_values[i], i)
                out = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=cache, use_cache=True)
                pk = out.past_key_values
                return (out.logits, torch.stack([pk.layers[i].keys for i in range(layers)]),
                        torch.stack([pk.layers[i].values for i in range(layers)]))
        rng = np.random.default_rng(2)
        kv = (layers, 1, kvh, t, hd)
        return Decode().eval(), {"input_ids": _tokens((1, 1), cfg.vocab_size),
                                 "attention_mask": np.ones((1, t + 1), np.int64),
                                 "position_ids": np.array([[t]], np.int64),
                                 "past_keys": rng.standard_normal(kv).astype(np.float32),
                                 "past_values": rng.standard_normal(kv).astype(np.float32)}
    return build


def _bert(quick):
    import transformers
    _seed()
    cfg = transformers.BertConfig(vocab_size=8192, hidden_size=64 if quick else 256,
                                  num_hidden_layers=1 if quick else 4, num_attention_heads=2 if quick else 4,
                                  intermediate_size=128 if quick else 1024, max_position_embeddings=512)
    m = transformers.BertModel(cfg, add_pooling_layer=False).eval()
    s = 16 if quick else 128
    return _Hidden(m), {"input_ids": _tokens((1, s), cfg.vocab_size), "attention_mask": np.ones((1, s), np.int64)}


def _t5(quick):
    import transformers
    _seed()
    cfg = transformers.T5Config(vocab_size=8192, d_model=64 if quick else 256, d_kv=32 if quick else 64,
                                d_ff=128 if quick else 1024, num_layers=1 if quick else 4,
                                num_heads=2 if quick else 4)
    m = transformers.T5EncoderModel(cfg).eval()
    s = 16 if quick else 128
    return _Hidden(m), {"input_ids": _tokens((1, s), cfg.vocab_size), "attention_mask": np.ones((1, s), np.int64)}


def _Hidden(m):
    import torch

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return Hidden().eval()


def _lstm_lm(quick):
    """Embedding, a 2-layer LSTM with its initial states as inputs (the exporter writes initial_h/initial_c),
    and the decoder to the vocabulary."""
    import torch
    _seed()
    vocab, hidden, seq = (64, 16, 8) if quick else (4096, 256, 64)

    class LSTMLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, hidden)
            self.rnn = torch.nn.LSTM(hidden, hidden, num_layers=2)
            self.dec = torch.nn.Linear(hidden, vocab)

        def forward(self, tokens, h0, c0):
            y, (h, c) = self.rnn(self.emb(tokens), (h0, c0))
            return self.dec(y), h, c
    rng = np.random.default_rng(3)
    st = (2, 1, hidden)
    return LSTMLM().eval(), {"tokens": _tokens((seq, 1), vocab),
                             "h0": rng.standard_normal(st).astype(np.float32) * 0.1,
                             "c0": rng.standard_normal(st).astype(np.float32) * 0.1}


def _gru_tagger(quick):
    """A batch-first bidirectional GRU tagger with an initial state (speech / text taggers)."""
    import torch
    _seed()
    feat, hidden, seq, tags = (8, 16, 8, 5) if quick else (80, 192, 100, 40)

    class GRUTagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.GRU(feat, hidden, num_layers=2, batch_first=True, bidirectional=True)
            self.out = torch.nn.Linear(2 * hidden, tags)

        def forward(self, x, h0):
            y, h = self.rnn(x, h0)
            return self.out(y), h
    rng = np.random.default_rng(4)
    return GRUTagger().eval(), {"x": rng.standard_normal((1, seq, feat)).astype(np.float32),
                                "h0": rng.standard_normal((4, 1, hidden)).astype(np.float32) * 0.1}


def _unet(quick):
    """The classic segmentation U-Net: double 3x3 conv + BatchNorm + ReLU blocks, max-pool down,
    ConvTranspose up, skip concatenations."""
    import torch
    from torch import nn
    _seed()
    widths = (8, 16, 32) if quick else (32, 64, 128, 256)
    size = 32 if quick else 128

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True),
                             nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True))

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.downs = nn.ModuleList()
            c = 3
            for w in widths:
                self.downs.append(block(c, w))
                c = w
            self.mid = block(widths[-1], 2 * widths[-1])
            c = 2 * widths[-1]
            self.ups, self.blocks = nn.ModuleList(), nn.ModuleList()
            for w in reversed(widths):
                self.ups.append(nn.ConvTranspose2d(c, w, 2, stride=2))
                self.blocks.append(block(2 * w, w))
                c = w
            self.head = nn.Conv2d(c, 2, 1)

        def forward(self, x):
            skips = []
            for d in self.downs:
                x = d(x)
                skips.append(x)
                x = nn.functional.max_pool2d(x, 2)
            x = self.mid(x)
            for up, b, s in zip(self.ups, self.blocks, reversed(skips)):
                x = b(torch.cat([up(x), s], 1))
            return self.head(x)
    return UNet().eval(), {"x": _image((1, 3, size, size))}


def _sd_unet(quick):
    """diffusers UNet2DConditionModel (Stable Diffusion's denoiser) at a small configuration: cross-attention
    down/up blocks over text embeddings, timestep embedding, GroupNorm, SiLU, GEGLU feed-forward."""
    import diffusers
    import torch
    _seed()
    ch = (32, 64) if quick else (64, 128, 256)
    down = ("CrossAttnDownBlock2D",) * (len(ch) - 1) + ("DownBlock2D",)
    up = ("UpBlock2D",) + ("CrossAttnUpBlock2D",) * (len(ch) - 1)
    ctx = 64 if quick else 256
    # diffusers' attention_head_dim is the number of heads per block (its legacy name): heads of 32 channels, as
    # Stable Diffusion's 40-160
    m = diffusers.UNet2DConditionModel(sample_size=16 if quick else 32, in_channels=4, out_channels=4,
                                       block_out_channels=ch, down_block_types=down, up_block_types=up,
                                       layers_per_block=1, cross_attention_dim=ctx,
                                       attention_head_dim=tuple(c // 32 for c in ch),
                                       norm_num_groups=16 if quick else 32).eval()
    size = 16 if quick else 32

    class Denoise(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, sample, timestep, encoder_hidden_states):
            return self.m(sample, timestep, encoder_hidden_states, return_dict=False)[0]
    rng = np.random.default_rng(5)
    return Denoise().eval(), {"sample": rng.standard_normal((1, 4, size, size)).astype(np.float32),
                              "timestep": np.array([500], np.int64),
                              "encoder_hidden_states": rng.standard_normal((1, 77 if not quick else 8, ctx))
                              .astype(np.float32)}


def _hf_image(config_cls, model_cls, full, small, size=(224, 64)):
    def build(quick):
        import transformers
        _seed()
        cfg = getattr(transformers, config_cls)(**(small if quick else full))
        m = getattr(transformers, model_cls)(cfg).eval()
        import torch

        class Logits(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = m

            def forward(self, pixel_values):
                return self.m(pixel_values=pixel_values).logits
        return Logits().eval(), {"pixel_values": _image((1, 3, size[quick], size[quick]))}
    return build


_LLAMA = dict(vocab_size=8192, hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=2, max_position_embeddings=512)
_LLAMA_S = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64)
_QWEN2 = dict(_LLAMA, intermediate_size=704)
_QWEN2_S = dict(_LLAMA_S)
_PHI = dict(vocab_size=8192, hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
            partial_rotary_factor=0.5, max_position_embeddings=512)
_PHI_S = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
              partial_rotary_factor=0.5, max_position_embeddings=64)
_GPT2 = dict(vocab_size=8192, n_embd=256, n_layer=4, n_head=4, n_positions=512)
_GPT2_S = dict(vocab_size=256, n_embd=64, n_layer=1, n_head=2, n_positions=64)


def _img(full, small):
    return lambda quick: small if quick else full


#: The cases, one line each (opsets spread over 18-23: the exporter's Gelu op appears from 20, RMSNormalization
#: and the Attention op are opset 23).
CASES = [
    Case("resnet50", "cnn", "torchvision", 18, _torchvision("resnet50", _img(224, 64)), helper="resnet50"),
    Case("efficientnet_b0", "cnn", "torchvision", 18, _torchvision("efficientnet_b0", _img(224, 64)),
         helper="efficientnet"),
    Case("mobilenet_v2", "cnn", "torchvision", 20, _torchvision("mobilenet_v2", _img(224, 64)), helper="mobilenetv2"),
    Case("unet", "cnn", "torch", 18, _unet, helper="unet"),
    Case("convnext_atto", "cnn", "timm", 20, _timm("convnext_atto", _img(224, 64))),
    Case("vit_tiny", "vit", "timm", 20, _timm("vit_tiny_patch16_224", _img(224, 64), img_size=True,
                                             quick=dict(depth=2)), helper="vit_tiny"),
    Case("swin_tiny", "vit", "timm", 20, _timm("swin_tiny_patch4_window7_224", _img(224, 64), img_size=True,
                                              quick=dict(depths=(1, 1), num_heads=(2, 4), embed_dim=32,
                                                         window_size=4),
                                              full=dict(depths=(2, 2, 4, 2)))),
    Case("bert_encoder", "encoder", "transformers", 18, _bert, helper="bert_encoder"),
    Case("t5_encoder", "encoder", "transformers", 20, _t5),
    Case("lstm_lm", "rnn", "torch", 18, _lstm_lm, helper="lstm_lm"),
    Case("gru_tagger", "rnn", "torch", 20, _gru_tagger),
    Case("gpt2", "decoder", "transformers", 20, _hf_causal("GPT2Config", "GPT2LMHeadModel", _GPT2, _GPT2_S)),
    Case("llama_prefill", "decoder", "transformers", 18,
         _hf_causal("LlamaConfig", "LlamaForCausalLM", _LLAMA, _LLAMA_S)),
    Case("llama_decode", "decode", "transformers", 18,
         _hf_decode("LlamaConfig", "LlamaForCausalLM", _LLAMA, _LLAMA_S)),
    Case("qwen2_prefill", "decoder", "transformers", 20,
         _hf_causal("Qwen2Config", "Qwen2ForCausalLM", _QWEN2, _QWEN2_S)),
    Case("qwen2_decode", "decode", "transformers", 20,
         _hf_decode("Qwen2Config", "Qwen2ForCausalLM", _QWEN2, _QWEN2_S)),
    Case("phi_prefill", "decoder", "transformers", 20, _hf_causal("PhiConfig", "PhiForCausalLM", _PHI, _PHI_S)),
    Case("llama_prefill_op23", "decoder", "transformers", 23,
         _hf_causal("LlamaConfig", "LlamaForCausalLM", _LLAMA, _LLAMA_S)),
    Case("sd_unet", "diffusion", "diffusers", 20, _sd_unet, rev=1),
]
BY_NAME = {c.name: c for c in CASES}


def quick_names() -> list[str]:
    """One case per kind (the first of each), for --quick."""
    seen, out = set(), []
    for c in CASES:
        if c.kind not in seen:
            seen.add(c.kind)
            out.append(c.name)
    return out


# --------------------------------------------------------------------------------------------------- cache
def have_torch() -> bool:
    try:
        import torch  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        return False
    return True


def _versions(case: Case) -> str:
    import importlib
    out = []
    for mod in ("torch", {"torchvision": "torchvision", "timm": "timm", "transformers": "transformers",
                          "diffusers": "diffusers"}.get(case.library)):
        if mod:
            out.append(f"{mod}{importlib.import_module(mod).__version__}")
    return "-".join(out)


def key_of(case: Case, quick: bool, torch: bool) -> str:
    src = "dynamo" if torch else "helper"
    tag = f"{case.name}-{'quick' if quick else 'full'}-op{case.opset}-{src}-v{ZOO_VERSION}.{case.rev}"
    if torch:
        tag += "-" + _versions(case)
    return f"{case.name}_{'q' if quick else 'f'}_{hashlib.sha256(tag.encode()).hexdigest()[:12]}"


def _trained_like(module):
    """Parameters a fresh model initializes to one value (zero biases, unit norm scales) and BatchNorm's initial
    statistics get random values near them, as a trained model has: no export is simpler than a user's."""
    import torch
    torch.manual_seed(1)
    with torch.no_grad():
        for _, p in module.named_parameters():
            flat = p.reshape(-1)
            if p.is_floating_point() and flat.numel() and bool((flat == flat[0]).all()):
                p.add_(torch.randn_like(p) * 0.02)
        for name, b in module.named_buffers():
            if name.endswith("running_var"):
                b.uniform_(0.5, 1.5)
            elif name.endswith("running_mean"):
                b.uniform_(-0.2, 0.2)


def _export(case: Case, quick: bool):
    import torch
    from glow_core.torch_import import _quiet_exporter
    module, feed = case.build(quick)
    _trained_like(module)
    args = tuple(torch.from_numpy(a) for a in feed.values())
    with torch.no_grad(), _quiet_exporter():
        prog = torch.onnx.export(module, args, input_names=list(feed), dynamo=True, opset_version=case.opset,
                                 verbose=False)
    model = prog.model_proto
    return model, feed


def _helper(case: Case, quick: bool):
    from glow_conformance import example_models as em
    small = {"resnet50": dict(size=32, classes=10, blocks=(1, 1), widths=(8, 16)),
             "efficientnet": dict(size=32, classes=10, stages=((1, 8, 1, 1, 3), (6, 16, 2, 2, 5)), head=32),
             "mobilenetv2": dict(size=32, classes=10, width=0.25), "unet": dict(size=32, widths=(4, 8, 16)),
             "vit_tiny": dict(size=32, patch=8, hidden=16, heads=2, layers=1, mlp=32, classes=10),
             "bert_encoder": dict(seq=8, hidden=32, heads=2, layers=1, ffn=64),
             "lstm_lm": dict(seq=6, vocab=30, hidden=16)}
    model = getattr(em, case.helper)(seed=0, **(small[case.helper] if quick else {}))
    rng = np.random.default_rng(1)
    feed = {}
    inits = {i.name: i for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            table = inits[model.graph.node[0].input[0]]
            feed[vi.name] = rng.integers(0, table.dims[0], shape, dtype=np.int64)
        else:
            feed[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return model, feed


def can_export(case: Case) -> bool:
    """torch and the case's library (torchvision, timm, transformers, diffusers) are installed."""
    import importlib.util
    return have_torch() and (case.library == "torch" or importlib.util.find_spec(case.library) is not None)


def available(names=None, quick=False) -> list[str]:
    """The case names that can be built here: exported where torch and the case's library are installed, else
    built with onnx.helper where the case has a helper builder."""
    names = names or (quick_names() if quick else [c.name for c in CASES])
    return [n for n in names if can_export(BY_NAME[n]) or BY_NAME[n].helper]


def paths(name: str, quick: bool, log=print) -> tuple[str, str]:
    """(model.onnx, inputs.npz) of case ``name``, exported (or built) first when not cached."""
    case = BY_NAME[name]
    torch = can_export(case)
    if not torch and not case.helper:
        raise RuntimeError(f"{name} needs torch and {case.library} (pip install torch onnxscript {case.library})")
    os.makedirs(CACHE, exist_ok=True)
    base = os.path.join(CACHE, key_of(case, quick, torch))
    if not (os.path.exists(base + ".onnx") and os.path.exists(base + ".npz")):
        t = time.perf_counter()
        model, feed = (_export if torch else _helper)(case, quick)
        model.ir_version = min(model.ir_version, ORT_IR_VERSION)
        onnx.checker.check_model(model)
        for suffix, write in ((".npz", lambda f: np.savez(f, **feed)),
                              (".onnx", lambda f: f.write(model.SerializeToString()))):
            fd, tmp = tempfile.mkstemp(dir=CACHE, suffix=suffix + ".tmp")
            with os.fdopen(fd, "wb") as f:
                write(f)
            os.replace(tmp, base + suffix)
        log(f"  {'exported' if torch else 'built'} {name} ({'quick' if quick else 'full'}, opset {case.opset}) "
            f"in {time.perf_counter() - t:.1f} s -> {base}.onnx")
    return base + ".onnx", base + ".npz"


def load(name: str, quick: bool) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The cached model and its inputs (in forward's order)."""
    mp, fp = paths(name, quick)
    with np.load(fp) as z:
        feed = {k: z[k] for k in z.files}
    return onnx.load(mp), feed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--models", default=None)
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    names = a.models.split(",") if a.models else None
    if a.list:
        for c in CASES:
            print(f"{c.name:20s} {c.kind:10s} {c.library:13s} opset {c.opset}")
        return 0
    from collections import Counter
    for n in available(names, a.quick):
        model, _ = load(n, a.quick)
        ops = Counter(nd.op_type for nd in model.graph.node)
        print(f"{n}: {len(model.graph.node)} nodes: " + ", ".join(f"{k} {v}" for k, v in ops.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
