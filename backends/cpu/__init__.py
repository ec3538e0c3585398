"""glow_cpu: the CPU backend (C generated from jinja2 templates, compiled with the system C compiler)."""
