"""{{ cookiecutter.description }}.

The Glow Kit backend '{{ cookiecutter.backend_name }}' by {{ cookiecutter.vendor }}, a scratchpad accelerator built
on the pieces of Glow Kit's reference NPU (glow_npu): config.py (the device's figures), emitter.py (the instruction
emitter: one job builder per IR op), tiling.py (tile sizes and scratchpad placement), device.py (what runs the
program: the simulator, later your driver) and backend.py (the Backend class that wires them).
"""
from .backend import {{ cookiecutter.__class_name }}

__all__ = ["{{ cookiecutter.__class_name }}"]
