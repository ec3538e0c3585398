"""PyTorch in: a ``torch.nn.Module`` or ``torch.export.ExportedProgram`` becomes an ONNX model in memory.

``glow_core.compile(module, backend, example_inputs=(x, ...))`` calls ``to_onnx`` first. The export is the
one users run themselves: ``torch.onnx.export`` with the dynamo exporter (opset 18 or newer, LayerNormalization
as one op, the exporter's value names: the model's inputs are named after ``forward``'s arguments). Nothing
here imports torch unless a torch object or ``example_inputs`` is given, so glow_core works without torch.
"""
from __future__ import annotations

import contextlib
import io
import logging
import sys

import numpy as np
import onnx

from .errors import GlowError, ModelLoadError

#: What brings the exporter: torch plus onnxscript, which the dynamo exporter imports.
INSTALL_HINT = ("pip install 'glow-kit[torch]' (torch and onnxscript; a CPU-only torch is enough, "
                "e.g. pip install torch==2.13.0 onnxscript where a CPU wheel is provided)")

#: The exporter's log lines that are noise for every user (optional torchvision ops it skips registering).
_NOISE = ("torchvision is not installed",)


def is_torch_model(obj) -> bool:
    """Whether ``obj`` is a torch.nn.Module or an ExportedProgram (False, without importing torch, when torch
    was never imported: then no such object can exist)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    return isinstance(obj, torch.nn.Module) or isinstance(obj, torch.export.ExportedProgram)


def _import_torch():
    try:
        import torch
        import onnxscript  # noqa: F401  (the dynamo exporter needs it; fail here with the install line)
    except ImportError as e:
        raise GlowError(f"compiling a PyTorch model needs {e.name}, which is not installed: {INSTALL_HINT}") from None
    return torch


def _as_tensor(torch, x, i):
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (np.ndarray, np.generic)):
        return torch.from_numpy(np.ascontiguousarray(x))
    if isinstance(x, (tuple, list)):
        return type(x)(_as_tensor(torch, y, i) for y in x)
    if isinstance(x, (bool, int, float)) or x is None:
        return x
    raise GlowError(f"example_inputs[{i}] is a {type(x).__name__}; give torch tensors or numpy arrays "
                    f"(one per argument of forward), e.g. example_inputs=(torch.randn(1, 3, 224, 224),)")


class _DropNoise(logging.Filter):
    def filter(self, record):
        return not any(s in record.getMessage() for s in _NOISE)


@contextlib.contextmanager
def _quiet_exporter():
    """The exporter's progress lines go to a buffer and its torchvision notices are dropped, only meanwhile."""
    flt = _DropNoise()
    handlers = [h for n in ("torch.onnx", "torch", "") for h in logging.getLogger(n).handlers]
    for h in handlers:
        h.addFilter(flt)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for h in handlers:
            h.removeFilter(flt)


def to_onnx(model, example_inputs=None) -> onnx.ModelProto:
    """Export ``model`` (torch.nn.Module or ExportedProgram) with torch.onnx.export's dynamo exporter, in
    memory. ``example_inputs`` is a tuple with one tensor (or numpy array) per argument of ``forward``; an
    ExportedProgram carries its own and needs none."""
    torch = _import_torch()
    is_program = isinstance(model, torch.export.ExportedProgram)
    if not is_program and not isinstance(model, torch.nn.Module):
        raise ModelLoadError(f"example_inputs is given, so the model should be a torch.nn.Module or "
                             f"torch.export.ExportedProgram, not {type(model).__name__}; an ONNX model "
                             f"(path, bytes or onnx.ModelProto) takes no example_inputs")
    if example_inputs is None:
        if not is_program:
            raise GlowError(f"a torch.nn.Module ({type(model).__name__}) needs example inputs to be exported: "
                            f"glow_core.compile(module, backend, example_inputs=(x, ...)), one tensor per "
                            f"argument of forward")
        args = ()
    else:
        args = example_inputs if isinstance(example_inputs, tuple) else (
            tuple(example_inputs) if isinstance(example_inputs, list) else (example_inputs,))
        args = tuple(_as_tensor(torch, x, i) for i, x in enumerate(args))
    name = type(model).__name__
    try:
        with _quiet_exporter():
            program = torch.onnx.export(model, args, dynamo=True, verbose=False)
    except ImportError as e:
        raise GlowError(f"torch.onnx.export needs {e.name}, which is not installed: {INSTALL_HINT}") from None
    except Exception as e:  # noqa: BLE001  (torch.export raises many kinds; the user needs the first line)
        first = " ".join(str(e).split())[:400]
        raise GlowError(f"torch.onnx.export could not export {name}: {type(e).__name__}: {first} (export it "
                        f"yourself with torch.onnx.export(model, args) to see the exporter's full report)") from None
    return program.model_proto
