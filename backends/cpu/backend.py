"""Placeholder until the CPU backend lands: refuses every op so discovery works."""
from glow_core.backend import Backend


class CPUBackend(Backend):
    """The CPU backend (work in progress)."""

    name = "cpu"

    def is_op_supported(self, node_info):
        return False

    def compile(self, function, options):
        raise NotImplementedError
