"""Standalone bundles: per entry point NAME.h, NAME.c, NAME.weights.bin and NAME.weights.txt; shared
glow_prelude.h, main.c and a Makefile; cross-compiled for a target triple when one is given.

NAME.c is one translation unit (every kernel and the entry point); the weights file is the whole constant
region, the memory plan's weights followed by the constants kernels prepared at compile time, and
NAME.weights.txt the same bytes as a C initializer list (``#include`` it inside braces) for targets without a
file system. The generated code allocates nothing: scratch is part of the activations region.

Several models share one bundle: each ``emit_bundle`` call with ``bundle_append`` adds an entry point to the
bundle in DIR (``DIR/bundle.json`` lists them); main.c and the Makefile serve all of them. With
``shared_weights`` the entry points share one weights file, bundle.weights.bin (and bundle.weights.txt) instead
of one each: every constant tensor (and prepared constant) is stored once however many entry points use it, and
each entry point's code addresses its tensors where they lie in that file. An entry point added later appends
only the tensors not yet there, so the code of those before stays valid.

``make -C DIR`` builds DIR/bundle_main with only a C compiler and libc/libm; it runs as ``bundle_main [ENTRY]
WEIGHTS.bin INPUT_1.bin ... OUTPUT_DIR`` (ENTRY when the bundle has several; raw little-endian inputs in
model-input order) and writes OUTPUT_DIR/<sanitized output name>.bin. With ``target`` (a GNU triple such as
``aarch64-linux-gnu``) the Makefile uses ``TRIPLE-gcc`` and the bundle is built at once; ``target_cpu`` adds
``-mcpu=`` (Arm) or ``-march=`` (others). The code is portable C: the GEMM's GCC vector types become NEON on
aarch64 (and on 32-bit Arm with ``-mfpu=neon``), plain scalar code elsewhere.
"""
from __future__ import annotations

import bisect
import hashlib
import json
import os
import re
import shutil
import subprocess

from glow_core.memory import align_up

from ..kernels.codegen import c_comment, c_ident
from ..templates import template
from .toolchain import ToolchainError

MANIFEST = "bundle.json"
#: File stem of the shared weights (``shared_weights``): SHARED.weights.bin and SHARED.weights.txt.
SHARED = "bundle"


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


def _triple(options) -> str:
    triple = str(options.get("target") or "")
    if triple and not re.fullmatch(r"[A-Za-z0-9_]+(-[A-Za-z0-9_.]+){1,3}", triple):
        raise ToolchainError(f"target {triple!r} is not a GNU target triple; accepted: e.g. aarch64-linux-gnu, "
                             f"arm-linux-gnueabihf, x86_64-linux-gnu")
    return triple


def _cpu_flag(triple: str, cpu) -> str:
    cpu = re.sub(r"[^A-Za-z0-9_.+-]", "", str(cpu or ""))
    if not cpu:
        return ""
    return f"-mcpu={cpu}" if triple.startswith(("aarch64", "arm")) else f"-march={cpu}"


def weights_text(blob: bytes) -> str:
    """The bytes as a C initializer list, 16 a line, each followed by a comma."""
    return "".join(", ".join(f"0x{b:02x}" for b in blob[i:i + 16]) + ",\n" for i in range(0, len(blob), 16))


def _entry(program, name: str) -> dict:
    """What the header, driver and Makefile need of one entry point."""
    irf = program.irf
    up = name.upper()
    ins, outs = list(irf.inputs.items()), list(irf.outputs.items())
    in_ids = _unique([n for n, _ in ins], c_ident)
    out_ids = _unique([n for n, _ in outs], c_ident)
    out_files = _unique([n for n, _ in outs], _file_name)
    plan = irf.plan
    io = [dict(macro=f"{up}_{i}", offset=b.address, size=b.size, comment=c_comment(n), kind="input")
          for (n, b), i in zip(ins, in_ids)]
    io += [dict(macro=f"{up}_{i}", offset=b.address, size=b.size, comment=c_comment(n), kind="output")
           for (n, b), i in zip(outs, out_ids)]
    return dict(name=name, up=up, constant=program.constant_size, mutable=plan.mutable_size,
                activations=plan.activations_size, align=plan.alignment, io=io,
                inputs=[dict(macro=f"{up}_{i}", comment=c_comment(n)) for (n, _), i in zip(ins, in_ids)],
                outputs=[dict(macro=f"{up}_{i}", file=f, comment=c_comment(n))
                         for (n, _), i, f in zip(outs, out_ids, out_files)])


def _manifest(out_dir, triple, cpu_flag, shared: bool, append: bool) -> dict:
    """The bundle's manifest: the one in ``out_dir`` when appending (same target, CPU and weights mode), else new."""
    path = os.path.join(out_dir, MANIFEST)
    if not (append and os.path.exists(path)):
        return {"triple": triple, "cpu_flag": cpu_flag, "entries": [],
                "shared": {"size": 0, "parts": []} if shared else None}
    with open(path) as f:
        manifest = json.load(f)
    if (manifest.get("triple"), manifest.get("cpu_flag")) != (triple, cpu_flag):
        raise ToolchainError(f"bundle '{out_dir}' was made for target {manifest.get('triple') or 'host'} "
                             f"{manifest.get('cpu_flag') or ''}; every entry point of a bundle needs the same "
                             f"--target and --cpu")
    if (manifest.get("shared") is not None) != shared:
        raise ToolchainError(f"bundle '{out_dir}' was made {'with' if not shared else 'without'} shared weights; "
                             f"every entry point of a bundle needs the same --shared-weights choice")
    return manifest


def _shared_weights(out_dir, program, shared: dict, align: int):
    """Add ``program``'s constant parts to the bundle's shared weights, each distinct content once. Returns the
    relocation of the program's constant-region addresses, the new manifest record and the shared bytes."""
    path = os.path.join(out_dir, f"{SHARED}.weights.bin")
    blob = bytearray()
    if shared["size"]:
        with open(path, "rb") as f:
            blob = bytearray(f.read())
        if len(blob) != shared["size"]:
            raise ToolchainError(f"'{path}' has {len(blob)} bytes but {MANIFEST} says {shared['size']}: the bundle "
                                 f"changed outside glowc; emit every entry point again into an empty directory")
    where = {key: off for key, off, _ in shared["parts"]}
    parts = [list(p) for p in shared["parts"]]
    moves = []  # (offset in the program's constant region, bytes, offset in the shared weights), by offset
    for off, raw in program.constant_parts():
        if not raw.size:
            continue
        data = raw.tobytes()
        key = hashlib.sha256(data).hexdigest()
        if key not in where:
            where[key] = align_up(len(blob), align)
            blob.extend(bytes(where[key] - len(blob)) + data)
            parts.append([key, where[key], len(data)])
        moves.append((off, len(data), where[key]))
    starts = [m[0] for m in moves]

    def relocate(addr: int) -> int:
        i = bisect.bisect_right(starts, addr) - 1
        if i >= 0 and addr < moves[i][0] + moves[i][1]:
            return moves[i][2] + addr - moves[i][0]
        return 0  # every byte a kernel reads from the constant region lies in a part: this operand is empty

    return relocate, {"size": len(blob), "parts": parts}, bytes(blob)


def write_bundle(program, out_dir, options, prelude) -> list[str]:
    name = c_ident(options.get("bundle_name") or "model")
    triple = _triple(options)
    cpu_flag = _cpu_flag(triple, options.get("target_cpu"))
    os.makedirs(out_dir, exist_ok=True)
    manifest = _manifest(out_dir, triple, cpu_flag, bool(options.get("shared_weights")),
                         options.get("bundle_append", False))
    entry = _entry(program, name)
    if manifest["shared"] is not None:
        relocate, manifest["shared"], blob = _shared_weights(out_dir, program, manifest["shared"],
                                                             program.irf.plan.alignment)
        entry["constant"] = manifest["shared"]["size"]
        weights = SHARED
    else:
        relocate, blob, weights = None, program.constant_blob(), name
    entries = [e for e in manifest["entries"] if e["name"].upper() != entry["up"]] + [entry]
    manifest["entries"] = entries
    shared = None if manifest["shared"] is None else manifest["shared"]["size"]
    source = program.source(entry=name, relocate=relocate)
    files = {
        f"{name}.h": template("bundle.h.j2").render(**entry, shared=shared is not None),
        f"{name}.c": source.replace('#include "glow_prelude.h"', f'#include "glow_prelude.h"\n#include "{name}.h"'),
        f"{weights}.weights.txt": weights_text(blob),
        "glow_prelude.h": prelude,
        "main.c": template("bundle_main.c.j2").render(entries=entries, multi=len(entries) > 1, shared=shared,
                                                      weights=SHARED),
        "Makefile": template("bundle.mk.j2").render(entries=entries, triple=triple, cpu_flag=cpu_flag,
                                                    shared=shared is not None, weights=SHARED),
    }
    written = []
    for fn, text in files.items():
        p = os.path.join(out_dir, fn)
        with open(p, "w") as f:
            f.write(text)
        written.append(p)
    p = os.path.join(out_dir, f"{weights}.weights.bin")
    with open(p, "wb") as f:
        f.write(blob)
    written.append(p)
    with open(os.path.join(out_dir, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=1)
    if options.get("build", bool(triple)):
        written.append(build_bundle(out_dir, triple))
    return written


def build_bundle(out_dir: str, triple: str = "") -> str:
    """``make -C out_dir`` (with ``TRIPLE-gcc`` for a target triple); returns the path of bundle_main."""
    cc = f"{triple}-gcc" if triple else "cc"
    if not shutil.which(cc):
        hint = (f"install the cross compiler (Debian/Ubuntu: apt-get install gcc-{triple})" if triple
                else "install a C compiler (Debian/Ubuntu: apt-get install gcc)")
        raise ToolchainError(f"{cc} was not found on PATH: {hint}")
    if not shutil.which("make"):
        raise ToolchainError("make was not found on PATH: install it (Debian/Ubuntu: apt-get install make)")
    r = subprocess.run(["make", "-C", out_dir, "bundle_main"], capture_output=True, text=True)
    if r.returncode != 0:
        raise ToolchainError(f"building the bundle in '{out_dir}' with {cc} failed:\n{r.stderr[-4000:]}")
    return os.path.join(out_dir, "bundle_main")
