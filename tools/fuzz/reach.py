"""Which paths of a backend a compiled model reached: for the CPU backend, the conv engine path each Conv took
(``conv_path``), read from the kernel choices of its program. ``glowc fuzz`` counts, per path, the graphs that
reached it (``Summary.conv_paths``)."""
from __future__ import annotations

import re


def conv_path(call) -> str:
    """The path a conv call takes, from its kernel's choice and its geometry: the algorithm (the engine's, with its
    input blocking and layouts, or the generic kernel's), C/group = 1, M/group = 1 and pointwise (1x1, stride 1,
    no padding)."""
    ins = call.instr
    x, w = ins.ins[0], ins.ins[1]
    g = ins.attrs.get("group", 1)
    choice = call.code.choice
    m = re.match(r"conv engine: (depthwise|direct|winograd)[^,]*?( x\d+ channels)?,", choice)
    if m:
        algo = "engine " + m.group(1) + (" multiplier" if m.group(2) else "")
        if m.group(1) == "direct":
            algo += " " + re.search(r"direct (\S+(?: input blocks)?)", choice).group(1).replace(" input blocks", "")
        algo += " " + re.search(r"(nchwc?|nhwc)->(nchwc?|nhwc)", choice).group(0)
    else:
        algo = f"generic {x.type.dtype.name} " + choice.split(",")[0]
    tags = [t for t, on in (("C/g=1", x.type.shape[1] // g == 1), ("M/g=1", w.type.shape[0] // g == 1),
                            ("pointwise", all(k == 1 for k in w.type.shape[2:]) and set(ins.attrs["strides"]) == {1}
                             and not any(ins.attrs["pads"]))) if on]
    return " ".join([algo] + tags)


def _compiled_functions(result):
    """The backend functions of one compilation (a CompileResult, or each partition's of a PartitionedResult)."""
    parts = getattr(result, "parts", None)
    return [r.compiled for r in parts] if parts is not None else [result.compiled]


def conv_paths(compiled_model) -> list[str]:
    """The distinct conv paths of every compilation a ``glow_core.api.CompiledModel`` made (backends whose
    compiled functions have no ``program.calls`` reach none)."""
    out = set()
    for result in getattr(compiled_model, "_cache", {}).values():
        for fn in _compiled_functions(result):
            for call in getattr(getattr(fn, "program", None), "calls", ()):
                if call.instr.op == "conv":
                    out.add(conv_path(call))
    return sorted(out)
