"""The int8 engine: quantized conv, matmul, elementwise, pooling and lookup kernels (vpdpbusd register tiles,
requantization in the epilogue) and their compile-time constants (engine.py: the planners' interface)."""
