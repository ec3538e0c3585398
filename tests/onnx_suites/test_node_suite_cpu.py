"""ONNX's node suite through the whole pipeline on the CPU backend (excludes in tests/onnx_suites/excludes/cpu/ carry reasons)."""
from tests.onnx_suites.onnx_suite import node_suite

globals().update(node_suite("cpu", __name__).enable_report().test_cases)
