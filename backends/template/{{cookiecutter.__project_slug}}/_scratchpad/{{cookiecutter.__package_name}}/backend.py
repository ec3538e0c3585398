"""The '{{ cookiecutter.backend_name }}' backend for Glow Kit: {{ cookiecutter.description }}.

A scratchpad accelerator built on the pieces of Glow Kit's reference NPU (``glow_npu``; the walk-through is
vendor_guide/npu.md). How a model reaches the device:

1. ``required_options``: the device requantizes with an integer multiplier and shift, so every model is compiled
   with ``requant="fixed_point"``, and ``glow_core.compile(model, "interpreter", requant="fixed_point")`` is its
   bit-exact reference (the conformance suite compiles its expectation that way too);
2. the quantizer runs before placement (a QDQ model, or ``quantize=``), and ``is_op_supported`` claims the
   quantized primitives in ``CLAIMS`` on 8-bit integers; the rest runs on ``FALLBACK`` (the partitioner says why);
3. ``instruction_groups``: a conv and the residual add reading its result are one kernel, decided before the
   memory plan so that the plan keeps their buffers apart;
4. ``compile`` builds a ``{{ cookiecutter.__class_name[:-7] }}Function``: the DRAM image (the memory plan's regions and the
   packed constants), each IR instruction as jobs (emitter.JOBS), each job tiled (tiling.choose) and emitted as
   steps with tokens, the program encoded (``encode``) and run on the device (device.Device).

Replace the pieces one at a time, re-running the conformance suite after each: config.py, emitter.py,
tiling.py, device.py, then ``encode`` / ``decode`` below when your instruction words differ.
"""
from __future__ import annotations

from importlib import resources

from glow_npu.backend import NpuBackend, NpuFunction

from . import tiling
from .config import CONFIG
from .device import Device
from .emitter import JOBS


class {{ cookiecutter.__class_name[:-7] }}Function(NpuFunction):
    """A compiled function on the {{ cookiecutter.vendor }} device: ``program`` (instructions), ``binary``,
    ``layers`` (each with its jobs and tilings: ``describe()``, ``glowc dump --source``), ``asm()``
    (``glowc dump --asm``), ``stats()`` (cycles against the roofline, ``CompiledModel.stats()``)."""

    #: IR op -> job builder (emitter.py).
    JOBS = JOBS
    #: What runs the program (device.py).
    SIMULATOR = Device

    def tiling(self, job):
        """Tile sizes, loop order and scratchpad offsets of one job (tiling.py)."""
        return tiling.choose(job, self.cfg)

    def encode(self, program) -> bytes:
        # >>> YOUR INSTRUCTION WORDS HERE; day one: the reference NPU's 64-byte words (glow_npu.isa). <<<
        return super().encode(program)

    def decode(self, binary: bytes) -> list:
        return super().decode(binary)


class {{ cookiecutter.__class_name }}(NpuBackend):
    """{{ cookiecutter.vendor }}: {{ cookiecutter.description }}."""

    #: The name users select the backend by; must equal the entry-point name in pyproject.toml.
    name = "{{ cookiecutter.backend_name }}"

    #: The IR ops the device claims: those with a job builder. Drop one to run it on FALLBACK instead.
    CLAIMS = frozenset(JOBS)

    #: The compiled function class.
    FUNCTION = {{ cookiecutter.__class_name[:-7] }}Function

    #: Backends that run what the device refuses, in order. `glowc partition MODEL --backend NAME` shows who runs
    #: what and why.
    FALLBACK = ("cpu",)

    def __init__(self, config=None):
        """``config``: an NpuConfig, a dict of its fields or a JSON file's path; None: config.CONFIG."""
        super().__init__(CONFIG if config is None else config)

    # -- the hooks the reference NPU implements, shown with what they do ---------------------------------------
    def required_options(self):
        """The compile options the device's results depend on: fixed-point requantization."""
        return super().required_options()

    def is_op_supported(self, node_info):
        """An op of CLAIMS on 8-bit integers (and fixed-point requantization); refusals say why. Add your
        device's limits here (a kernel size above the hardware's, a dtype it lacks)."""
        return super().is_op_supported(node_info)

    def instruction_groups(self, function):
        """Instructions run as one kernel: each qconv with the qadd reading its result (the residual add in the
        conv's epilogue), chosen before the memory plan. The qconv job builder receives the qadd as ``fused``: a
        builder of yours that does not compute it must come with ``return []`` here."""
        return super().instruction_groups(function)

    def fallback_backends(self):
        return list(self.FALLBACK)

    def known_failures(self) -> list[tuple[str, str]]:
        """Conformance cases expected to fail, with reasons: read from known_failures.txt. Keep it short."""
        out = []
        text = resources.files(__package__).joinpath("known_failures.txt").read_text(encoding="utf-8")
        for line in text.splitlines():
            pattern, _, reason = line.partition("#")
            if pattern.strip():
                out.append((pattern.strip(), reason.strip() or "no reason given"))
        return out
