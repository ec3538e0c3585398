"""ONNX's shipped model suites (simple, pytorch-converted, pytorch-operator) through the whole pipeline on the CPU
backend (excludes in tests/onnx_suites/excludes/ carry their reasons)."""
from tests.onnx_suites.onnx_suite import model_suites

globals().update(model_suites("cpu", __name__).enable_report().test_cases)
