"""ONNX's own node suite through the whole pipeline on the interpreter (excludes carry their reasons)."""
from tests.onnx_suites.onnx_suite import node_suite

globals().update(node_suite("interpreter", __name__).enable_report().test_cases)
