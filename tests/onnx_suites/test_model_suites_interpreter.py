"""ONNX's shipped model suites (simple, pytorch-converted, pytorch-operator) on the interpreter (excludes carry
their reasons; the opset-6 models are upgraded by the importer, glow_core/importer/legacy.py)."""
from tests.onnx_suites.onnx_suite import model_suites

globals().update(model_suites("interpreter", __name__).enable_report().test_cases)
