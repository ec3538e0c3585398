"""{{ cookiecutter.description }}.

The Glow Kit backend '{{ cookiecutter.backend_name }}' by {{ cookiecutter.vendor }}: see backend.py (the
Backend class), device.py (the simulated device: memory regions and DMA) and kernels.py (one kernel per
primitive, each starting as the primitive's reference kernel).
"""
from .backend import {{ cookiecutter.__class_name }}

__all__ = ["{{ cookiecutter.__class_name }}"]
