"""Kernel generation: the C of each instruction, by family. ``codegen.py`` holds what a kernel sees
(``KernelInstr``), what it gives (``KernelCode``), the registry and ``kernel_code``; each family module
(elementwise, movement, reduce, matmul, window, nn, quantized) registers one function per op with
``@kernel("op")``, and its scratch with ``@kernel_scratch("op")``. The elementwise C is the table of ew.py."""
