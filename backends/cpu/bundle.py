"""Standalone bundles: NAME.h, NAME.c, NAME.weights.bin, glow_prelude.h, main.c and a Makefile.

NAME.c is one translation unit (every kernel and the entry point); the weights file is the whole constant
region, the memory plan's weights followed by the constants kernels prepared at compile time. The generated
code allocates nothing: scratch is part of the activations region.

``make -C DIR`` builds DIR/bundle_main with only a C compiler and libc/libm; it runs as
``bundle_main WEIGHTS.bin INPUT_1.bin ... OUTPUT_DIR`` (raw little-endian inputs in model-input order) and
writes OUTPUT_DIR/<sanitized output name>.bin.
"""
from __future__ import annotations

import os
import re

from .codegen import c_comment, c_ident, template


def _unique(names, make):
    seen, out = set(), []
    for n in names:
        base = make(n)
        s, k = base, 1
        while s.upper() in seen:
            k += 1
            s = f"{base}_{k}"
        seen.add(s.upper())
        out.append(s)
    return out


def _file_name(n: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]", "_", n)[:100]
    return s if s.strip(".") else "_" + s


def write_bundle(program, out_dir, options, source, prelude) -> list[str]:
    irf = program.irf
    name = c_ident(options.get("bundle_name") or "model")
    up = name.upper()
    os.makedirs(out_dir, exist_ok=True)
    plan = irf.plan
    ins = list(irf.inputs.items())
    outs = list(irf.outputs.items())
    in_ids = _unique([n for n, _ in ins], c_ident)
    out_ids = _unique([n for n, _ in outs], c_ident)
    out_files = _unique([n for n, _ in outs], _file_name)
    io = [dict(macro=f"{up}_{i}", offset=b.address, size=b.size, comment=c_comment(n), kind="input")
          for (n, b), i in zip(ins, in_ids)]
    io += [dict(macro=f"{up}_{i}", offset=b.address, size=b.size, comment=c_comment(n), kind="output")
           for (n, b), i in zip(outs, out_ids)]
    ctx = dict(name=name, up=up, constant=program.constant_size, mutable=plan.mutable_size,
               activations=plan.activations_size, align=plan.alignment, io=io,
               inputs=[dict(macro=f"{up}_{i}", comment=c_comment(n)) for (n, _), i in zip(ins, in_ids)],
               outputs=[dict(macro=f"{up}_{i}", file=f, comment=c_comment(n))
                        for (n, _), i, f in zip(outs, out_ids, out_files)],
               march=re.sub(r"[^A-Za-z0-9_.+-]", "", str(options.get("target_cpu") or "")))
    files = {
        f"{name}.h": template("bundle.h.j2").render(**ctx),
        f"{name}.c": source.replace('#include "glow_prelude.h"', f'#include "glow_prelude.h"\n#include "{name}.h"'),
        "glow_prelude.h": prelude,
        "main.c": template("bundle_main.c.j2").render(**ctx),
        "Makefile": template("bundle.mk.j2").render(**ctx),
    }
    written = []
    for fn, text in files.items():
        p = os.path.join(out_dir, fn)
        with open(p, "w") as f:
            f.write(text)
        written.append(p)
    p = os.path.join(out_dir, f"{name}.weights.bin")
    with open(p, "wb") as f:
        f.write(program.constant_blob())
    written.append(p)
    return written
