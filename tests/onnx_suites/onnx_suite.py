"""Shared set-up of ONNX's shipped suites (``onnx.backend.test.BackendTest``) for one Glow backend: the node suite
(``node_suite``) and the model suites (``model_suites``: simple, pytorch-converted, pytorch-operator)."""
from __future__ import annotations

import os

import onnx.backend.test

import glow_core.onnx_backend

HERE = os.path.dirname(__file__)


def exclude_files(backend_name: str) -> list[str]:
    """The exclude lists for a backend: tests/onnx_suites/excludes/*.txt and tests/onnx_suites/excludes/<backend>/*.txt."""
    import glob
    d = os.path.join(HERE, "excludes")
    return sorted(glob.glob(os.path.join(d, "*.txt"))) + sorted(glob.glob(os.path.join(d, backend_name, "*.txt")))


def read_excludes(*files, kinds=("exclude", "xfail")) -> list[tuple[str, str]]:
    """(pattern, reason) pairs from exclude files; every line must give a reason.

    A line is ``PATTERN # reason`` (the case is left out: the feature is not supported) or
    ``xfail PATTERN # reason`` (the case runs and must fail: a strict expected failure).
    """
    out = []
    for f in files:
        with open(os.path.join(HERE, f)) as fh:
            for ln, line in enumerate(fh, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                pat, sep, reason = line.partition(" # ")
                if not sep or not reason.strip():
                    raise ValueError(f"{f}:{ln}: exclude '{pat}' has no reason (write 'PATTERN # reason')")
                kind = "exclude"
                if pat.startswith("xfail "):
                    kind, pat = "xfail", pat[len("xfail "):]
                if kind in kinds:
                    out.append((pat.strip(), reason.strip()))
    return out


def node_suite(backend_name: str, module: str):
    """A BackendTest over ONNX's node cases for ``backend_name`` with the checked-in excludes applied."""
    bt = onnx.backend.test.BackendTest(glow_core.onnx_backend.backend(backend_name), module)
    bt.include(r"^test_.*")
    for pat, _ in read_excludes(*exclude_files(backend_name), kinds=("exclude",)):
        bt.exclude(pat)
    for pat, _ in read_excludes(*exclude_files(backend_name), kinds=("xfail",)):
        bt.xfail(pat)
    # Only the node cases: the model suites are model_suites' (real models are downloaded: left out)
    for kind in ("RealModel",) + MODEL_SUITES:
        bt._test_items.pop(kind, None)
    return bt


#: BackendTest's categories of the model suites onnx ships with its data (no download): simple, pytorch-converted,
#: pytorch-operator.
MODEL_SUITES = ("SimpleModel", "PyTorchConvertedModel", "PyTorchOperatorModel")


def model_suites(backend_name: str, module: str):
    """A BackendTest over ONNX's shipped model suites for ``backend_name``, with the same exclude files as the
    node suite (``excludes/model_suites.txt`` holds the model cases' own)."""
    bt = onnx.backend.test.BackendTest(glow_core.onnx_backend.backend(backend_name), module)
    bt.include(r"^test_.*")
    for pat, _ in read_excludes(*exclude_files(backend_name), kinds=("exclude",)):
        bt.exclude(pat)
    for pat, _ in read_excludes(*exclude_files(backend_name), kinds=("xfail",)):
        bt.xfail(pat)
    for kind in list(bt._test_items):
        if kind not in MODEL_SUITES:
            bt._test_items.pop(kind)
    return bt
