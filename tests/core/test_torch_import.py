"""PyTorch in: ``glow_core.compile(module, backend, example_inputs=...)`` against torch's own output.

Three model families (ResNet-style, transformer-style, LSTM) are exported in memory by torch.onnx.export's
dynamo exporter and run on the interpreter and the cpu backend; the outputs are held to the conformance
suite's model tolerance against torch's eager result. Skipped with its reason where torch is not installed;
CI installs the CPU wheel and sets GLOW_REQUIRE_TORCH=1, so there a missing torch fails instead.
"""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

import glow_core
from glow_core.errors import GlowError, ModelLoadError
from glow_conformance.checker import compare

if os.environ.get("GLOW_REQUIRE_TORCH"):
    import onnxscript  # noqa: F401  (CI installed the exporter: a missing one fails loudly here)
    import torch
else:
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'glow-kit[torch]')")
    pytest.importorskip("onnxscript", reason="torch.onnx.export's dynamo exporter needs onnxscript")
nn = torch.nn
F = torch.nn.functional


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + self.down(x))


class SmallResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.blocks = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 32, 2))
        self.fc = nn.Linear(32, 10)

    def forward(self, image):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(image)), 1), 1))


class TinyTransformer(nn.Module):
    """Token and position embeddings, one encoder layer (multi-head attention, LayerNorm, GELU), a head."""

    def __init__(self, vocab=100, d=32):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(64, d)
        self.enc = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, activation="gelu", batch_first=True)
        self.head = nn.Linear(d, 5)

    def forward(self, tokens):
        h = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1]))
        return self.head(self.enc(h))


class LSTMTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(16, 24, num_layers=2, batch_first=True)
        self.fc = nn.Linear(24, 7)

    def forward(self, seq):
        return self.fc(self.lstm(seq)[0])


def _randomize_batchnorm(m):
    """Non-trivial running statistics, so BatchNorm folding is exercised with real numbers."""
    g = torch.Generator().manual_seed(1)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.copy_(torch.rand(mod.num_features, generator=g) * 0.2 - 0.1)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.bias.data.copy_(torch.rand(mod.num_features, generator=g) * 0.2 - 0.1)
    return m


def _models():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    return {
        "resnet": (_randomize_batchnorm(SmallResNet()), (torch.randn(2, 3, 32, 32, generator=g),), ["image"]),
        "transformer": (TinyTransformer(), (torch.randint(0, 100, (2, 12), generator=g),), ["tokens"]),
        "lstm": (LSTMTagger(), (torch.randn(3, 6, 16, generator=g),), ["seq"]),
    }


MODELS = _models()
#: name -> {backend: max |glow - torch|}, printed at the end of the module (pytest -s, or -rA shows it)
MAX_DIFF: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    if MAX_DIFF:
        print("\ntorch vs glow max abs differences:", MAX_DIFF)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("name", list(MODELS))
def test_torch_model_matches_torch(name, backend):
    module, args, input_names = MODELS[name]
    module.eval()
    with torch.no_grad():
        want = module(*args).numpy()
    cm = glow_core.compile(module, backend, example_inputs=args)
    # The dynamo exporter's model: opset 18 or newer, inputs named after forward's arguments.
    assert max(o.version for o in cm.model.opset_import if o.domain in ("", "ai.onnx")) >= 18
    assert cm.input_names == input_names
    if name == "transformer":
        assert "LayerNormalization" in {n.op_type for n in cm.model.graph.node}
    got = list(cm.run({nm: a.numpy() for nm, a in zip(input_names, args)}).values())
    assert len(got) == 1
    MAX_DIFF.setdefault(name, {})[backend] = float(np.abs(got[0].astype(np.float64) - want).max())
    compare(got[0], want, "model", f"{name} on {backend} vs torch", "pytest tests/core/test_torch_import.py")


def test_exported_program_and_numpy_inputs():
    module, args, _ = MODELS["lstm"]
    module.eval()
    with torch.no_grad():
        want = module(*args).numpy()
    ep = torch.export.export(module, args)
    cm = glow_core.compile(ep, "interpreter")
    got = cm.run({"seq": args[0]})  # torch tensors are accepted as inputs too
    compare(list(got.values())[0], want, "model", "ExportedProgram", "pytest tests/core/test_torch_import.py")
    cm2 = glow_core.compile(module, "interpreter", example_inputs=(args[0].numpy(),))
    compare(list(cm2.run({"seq": args[0].numpy()}).values())[0], want, "model", "numpy example inputs", "-")


def test_module_needs_example_inputs():
    with pytest.raises(GlowError, match=r"needs example inputs.*example_inputs=\(x, \.\.\.\)"):
        glow_core.compile(MODELS["lstm"][0], "interpreter")


def test_example_inputs_with_an_onnx_model_is_refused():
    with pytest.raises(ModelLoadError, match="takes no example_inputs"):
        glow_core.compile(onnx.ModelProto(), "interpreter", example_inputs=(np.zeros(2),))


def test_export_failure_is_one_glow_error():
    class DataDependent(nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # control flow on a value: torch.export cannot trace it
                return x * 2
            return x

    with pytest.raises(GlowError, match="torch.onnx.export could not export DataDependent"):
        glow_core.compile(DataDependent(), "interpreter", example_inputs=(torch.ones(3),))
