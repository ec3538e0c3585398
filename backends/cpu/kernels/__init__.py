"""Kernel generation: the C of each instruction, by family."""
