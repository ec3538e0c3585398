"""Golden artifacts for silicon: ``glowc conformance --backend NAME --export-golden DIR``.

A conformance run with ``--export-golden DIR`` judges every case as usual and, for each case of the tiers whose
expectations are the reference's (``TIERS``: primitives, ops, models, memory), writes what a device needs to
replay it without Python:

- the backend's compiled artifact: ``Backend.emit_bundle`` of the function the case compiled (for the CPU backend a
  C bundle: ``DIR/cases/ENTRY/ENTRY.c``, ``ENTRY.h``, ``ENTRY.weights.bin``; see vendor_guide/bundles.md), with
  ``ENTRY`` the case's entry-point name (``g_`` and 12 hex digits of the case id's SHA-1);
- for every run the case compared with an expectation (an input set): the inputs and the expected outputs as
  raw little-endian files (``setN/inK.bin``, ``setN/outK.bin``), and for outputs held to an error bound the bound
  of each element as float64 (``setN/boundK.f64``); when the checker measured an accumulation from a float64
  reference (``ref64``), that reference (``setN/centerK.f64``) and the sums of |a * b| (``setN/magnitudeK.f64``)
  for TOSA's dot-product statistics;
- ``case.json``: the case, the host's outcome, and per output its dtype, shape, tolerance class (and the
  checker's compliance mode when it names one), the checker's tolerance (``Tol``) and the replay check:
  ``bitwise``, ``exact``, ``lsb K`` or ``bound K`` (within K ULPs of the result type, or within the element's
  bound from the expected value or the reference; NaN only where NaN is expected, infinities matching;
  ``flush``: an expected subnormal may come back as a zero of its sign; ``statistics``: TOSA's dot-product
  tests over the tensor).

Everything is recorded where the suite already is: the compiled functions a case runs (``harness.execute``,
``harness.run_compiled``) and the comparisons it makes (``checker.compare``), matched by the output arrays, so
the manifest carries exactly the tolerance the checker applied on the host. The bounds come from the checker
itself (``float_verdict``'s allowance, which does not depend on the answer). Compile groups are off (every case
compiles alone). At the end of the run ``finish`` writes ``DIR/manifest.json`` (every case: exported or why
not), ``DIR/golden.txt`` (the same for the C runner, one record per line), ``DIR/entries.c`` (the table of entry
points, from each bundle's header), ``DIR/replay.c`` and ``DIR/Makefile``: ``make -C DIR`` (or ``make -C DIR
CC=aarch64-linux-gnu-gcc``) builds ``DIR/replay``, and ``DIR/replay DIR`` runs every case, checks each output
as the checker did, and prints the failures and a summary (exit status 0 when every case passed).

Artifacts are bundles of the backend's ``emit_bundle``: a backend without one gets the inputs and expectations
only (``artifact: null`` with the reason). The CPU backend's bundles are single-threaded (cases compiled with
``num_threads=2`` replay the same function on one thread).
"""
from __future__ import annotations

import glob
import hashlib
import inspect
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field

import numpy as np

from .cases import Case, CaseFailure, Unsupported

#: Tiers whose cases are exported (their expectations are the reference's or the specification's); the others
#: compare the backend with itself (passes, partition), check errors (negative) or the runtime (device).
TIERS = ("primitives", "ops", "models", "memory")
HERE = os.path.dirname(os.path.abspath(__file__))
REPLAY_DIR = os.path.join(HERE, "replay")
FORMAT = "glow-golden 1"
#: The runner's sources, copied into the golden folder (entries.c is generated there).
RUNNER = ("replay.c", "replay.h", "Makefile")
#: Where the suite runs compiled code and compares answers: (module, function) pairs recorded during a case.
RUNS = (("glow_conformance.harness", "execute"), ("glow_conformance.harness", "run_compiled"))
COMPARES = (("glow_conformance.checker", "compare"),)
#: Element types the C runner knows (IEEE floats, integers, bool, the one-byte storage formats' NaN and zero
#: codes); others it compares byte for byte.
NUMERIC = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
           "int64", "uint64", "bool", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "float8e8m0",
           "float4e2m1", "float6e2m3", "float6e3m2")


def entry_name(case_id: str) -> str:
    """The case's entry point and folder name: a C identifier unique per case id."""
    return "g_" + hashlib.sha1(case_id.encode()).hexdigest()[:12]


# -- recording what a case runs and compares ----------------------------------------------------------------
@dataclass
class Run:
    ir: object  # the IRFunction compiled (None: partitioned across backends)
    backend: object
    feeds: dict  # copies of the inputs given, by name
    outs: dict  # the outputs returned, by name


@dataclass
class Recording:
    runs: list = field(default_factory=list)
    compares: list = field(default_factory=list)  # the checker's arguments, by parameter name


_ACTIVE: list = []  # the recording of the case running in this process (at most one)
_ORIGINALS: dict = {}  # (module, name) -> the function before recording


def _record_run(kind, orig):
    def recorded(ctx, what, feeds, *args, **kwargs):
        copies = {k: np.array(v, copy=True) for k, v in feeds.items()}
        outs = orig(ctx, what, feeds, *args, **kwargs)
        if _ACTIVE:
            if kind == "execute":
                ir, backend = what.ir, ctx.backend
                copies = {k: v for k, v in copies.items() if k in ir.inputs}
            else:
                ir = what.last.ir if what.last is not None else None
                backend = what.backend
            _ACTIVE[-1].runs.append(Run(ir, backend, copies, dict(outs)))
        return outs
    return recorded


def _record_compare(orig):
    sig = inspect.signature(orig)

    def recorded(*args, **kwargs):
        if _ACTIVE:
            try:
                bound = sig.bind(*args, **kwargs)
                bound.apply_defaults()
                _ACTIVE[-1].compares.append(dict(bound.arguments))
            except TypeError:
                pass  # a wrong call fails in the checker itself
        return orig(*args, **kwargs)
    return recorded


def install():
    """Record runs and comparisons in every glow_conformance module that imported the functions (idempotent)."""
    import importlib
    recorders = [(spec, lambda f, kind=spec[1]: _record_run(kind, f)) for spec in RUNS] + \
        [(spec, _record_compare) for spec in COMPARES]
    for spec, recorder in recorders:
        module = importlib.import_module(spec[0])
        if spec not in _ORIGINALS:
            if not hasattr(module, spec[1]):
                raise RuntimeError(f"--export-golden: {spec[0]}.{spec[1]} does not exist; update golden.RUNS/COMPARES")
            _ORIGINALS[spec] = (getattr(module, spec[1]), recorder(getattr(module, spec[1])))
        orig, rec = _ORIGINALS[spec]
        for m in list(sys.modules.values()):
            if getattr(m, "__name__", "").startswith(("glow_conformance", "conformance")) and \
                    getattr(m, spec[1], None) is orig:
                setattr(m, spec[1], rec)


# -- export of one case -------------------------------------------------------------------------------------
def wrap(case: Case, out_dir: str) -> Case:
    """The case, exporting its golden artifacts after it ran (in the process that runs it). A case of another
    tier is returned as it is."""
    if case.tier not in TIERS:
        return case
    inner = case.run

    def run(ctx):
        install()
        rec = Recording()
        _ACTIVE.append(rec)
        outcome = "pass"
        try:
            inner(ctx)
        except Unsupported as e:
            outcome = None if e.kind == "refused" else f"skip:{e.kind}"  # refused: nothing ran, nothing to replay
            raise
        except CaseFailure:
            outcome = "fail"
            raise
        except BaseException:
            outcome = "error"
            raise
        finally:
            _ACTIVE.remove(rec)
            if outcome is not None:
                export(case, rec, outcome, out_dir)
    return Case(case.id, case.tier, case.subject, case.dtype, run, case.profiles, case.info)


def _match(rec: Recording, got):
    """(run, output name) whose returned array the checker was given."""
    for r in reversed(rec.runs):
        for k, v in r.outs.items():
            if v is got or (isinstance(v, np.ndarray) and isinstance(got, np.ndarray) and v.size and
                            got.size and np.shares_memory(v, got) and v.shape == got.shape):
                return r, k
    return None, None


def _check_of(args: dict) -> dict:
    """How the checker judged one output, for the runner: ``check`` (bitwise, exact, lsb, bound), ``param``
    (ULPs or LSBs), ``flush`` (an expected subnormal may come back as a signed zero), the checker's ``tol``, the
    expected array as the checker compared it (``want``), and for ``bound`` the per-element ``bound``, the float64
    ``center`` it is measured from (a DOT_PRODUCT's reference, when the checker was given one) and, for TOSA's
    dot-product statistics, the ``magnitude`` (sums of |a * b|)."""
    from . import checker
    from glow_core.types import dtype as gdtype
    want = np.asarray(args["want"])
    tol = checker.tolerance(args["tolerance_class"], want.dtype)
    out = dict(tol=tol, want=want, param=0, flush=False, bound=None, center=None, magnitude=None, statistics=False)
    if not gdtype(want.dtype).is_float:
        lsb = int(getattr(tol, "lsb", 0))
        return dict(out, check="lsb" if lsb else "exact", param=lsb)
    # a checker that takes the float64 reference (ref64) measures accumulations from it, and one that takes
    # ``flush`` judges flushing devices against flushed expectations instead of letting any subnormal go
    center = None
    if args.get("ref64") is not None and tol.acc:
        center = np.asarray(args["ref64"], np.float64).reshape(want.shape)
        with np.errstate(all="ignore"):
            want = center.astype(want.dtype)
    flush_rule = "flush" not in args
    if not flush_rule and args["flush"]:
        flushed = checker.flush_subnormals(want)
        if center is not None:
            center = np.where(flushed != want, flushed.astype(np.float64), center)
        want = flushed
    out["want"] = want
    if tol.bitwise:
        return dict(out, check="bitwise")
    if tol == checker.EXACT:
        return dict(out, check="exact")
    if getattr(tol, "sqnr", 0):
        raise ValueError(f"tolerance class {args['tolerance_class']} ({tol}) is judged over the whole tensor (SQNR): "
                         f"the replay runner has no such check")
    kw = {"center": center} if center is not None else {}
    allowed = checker.float_verdict(want, want, tol, args.get("n", 1), args.get("magnitude"), **kw)[3]
    stats = center is not None and args.get("magnitude") is not None and want.dtype in (np.float32, np.float64)
    return dict(out, check="bound", param=int(tol.ulp), flush=flush_rule, center=center, statistics=stats,
                bound=_shaped(allowed, want.shape),
                magnitude=_shaped(args["magnitude"], want.shape) if stats else None)


def _shaped(a, shape) -> np.ndarray:
    """``a`` as float64 of ``shape`` (the checker returns rank-0 results as 1 element; scalars broadcast)."""
    a = np.asarray(a, np.float64)
    return a.reshape(shape) if a.size == int(np.prod(shape)) else np.broadcast_to(a, shape)


def _checker():
    from . import checker
    return checker


def _raw(a: np.ndarray) -> bytes:
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.byteswap().view(a.dtype.newbyteorder("<"))
    return a.tobytes()


HEADER_IO = re.compile(r"/\* (input|output) (.*?) \*/\s*\n#define (\w+)_OFFSET (\d+)\s*\n#define \w+_SIZE (\d+)")


def header_io(path: str) -> dict:
    """The inputs and outputs a bundle header declares (vendor_guide/bundles.md's contract): {kind: [(name,
    macro, offset, size)]}."""
    with open(path) as f:
        text = f.read()
    out = {"input": [], "output": []}
    for kind, name, macro, off, size in HEADER_IO.findall(text):
        out[kind].append((name, macro, int(off), int(size)))
    return out


def export(case: Case, rec: Recording, outcome: str, out_dir: str):
    """Write the case's folder and case.json (a failure to export is recorded there, never raised)."""
    entry = entry_name(case.id)
    folder = os.path.join(out_dir, "cases", entry)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    meta = {"id": case.id, "tier": case.tier, "subject": case.subject, "dtype": case.dtype, "entry": entry,
            "host_outcome": outcome, "threads": case.info.get("threads", 1), "artifact": None, "sets": []}
    try:
        _export(case, rec, folder, entry, meta)
    except Exception as e:  # noqa: BLE001  (the case's verdict stands; the manifest says why it has no golden)
        meta["not_exported"] = f"{type(e).__name__}: {e}"
    with open(os.path.join(folder, "case.json"), "w") as f:
        json.dump(meta, f, indent=1)


def _export(case, rec, folder, entry, meta):
    sets = {}  # id(run) -> (run, [(output name, comparison args)])
    for args in rec.compares:
        run, name = _match(rec, args.get("got"))
        if run is None:
            continue
        sets.setdefault(id(run), (run, []))[1].append((name, args))
    if not sets:
        raise ValueError("the case compared no output of a compiled function with an expectation")
    runs = list(sets.values())
    irs = {id(r.ir) for r, _ in runs}
    if len(irs) != 1:
        raise ValueError("the case compared the outputs of several compiled functions")
    run0 = runs[0][0]
    if run0.ir is None:
        raise ValueError("the compiled model is partitioned across backends: no single artifact")
    irf = run0.ir
    try:
        files = run0.backend.emit_bundle(irf, folder, {"bundle_name": entry})
        header = os.path.join(folder, f"{entry}.h")
        io = header_io(header) if os.path.exists(header) else None
        meta["artifact"] = {"kind": "bundle", "files": sorted(os.path.relpath(p, folder) for p in files),
                            "weights": f"{entry}.weights.bin" if os.path.exists(
                                os.path.join(folder, f"{entry}.weights.bin")) else None}
        if io is None or [n for n, *_ in io["input"]] != list(irf.inputs) or \
                [n for n, *_ in io["output"]] != list(irf.outputs):
            meta["artifact"]["replayable"] = False
            meta["artifact"]["why"] = (f"{entry}.h does not declare the function's inputs and outputs in order "
                                       f"(the bundle header contract of vendor_guide/bundles.md)")
        else:
            meta["artifact"]["replayable"] = True
            meta["artifact"]["inputs"] = [dict(name=n, macro=m, offset=o, size=s) for n, m, o, s in io["input"]]
            meta["artifact"]["outputs"] = [dict(name=n, macro=m, offset=o, size=s) for n, m, o, s in io["output"]]
    except Exception as e:  # noqa: BLE001  (a backend without bundles: the data alone is still of use)
        meta["artifact"] = None
        meta["no_artifact"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    from glow_core.types import dtype as gdtype
    meta["inputs"] = [dict(name=n, dtype=gdtype(b.type.dtype).name, shape=list(b.type.shape))
                      for n, b in irf.inputs.items()]
    outputs = {}
    for s, (run, compared) in enumerate(runs):
        d = os.path.join(folder, f"set{s}")
        os.makedirs(d)
        st = {"inputs": [], "outputs": {}}
        for k, spec in enumerate(meta["inputs"]):
            if spec["name"] not in run.feeds:
                raise ValueError(f"input {spec['name']} of the compiled function was not given by the case")
            a = np.asarray(run.feeds[spec["name"]])
            if a.dtype != gdtype(spec["dtype"]).np or list(a.shape) != spec["shape"]:
                a = a.astype(gdtype(spec["dtype"]).np).reshape(spec["shape"])
            p = os.path.join(d, f"in{k}.bin")
            with open(p, "wb") as f:
                f.write(_raw(a))
            st["inputs"].append(os.path.relpath(p, folder))
        for name, args in compared:
            if name not in irf.outputs:
                continue  # an output the compiled function does not compute (an input or a constant)
            k = list(irf.outputs).index(name)
            c = _check_of(args)
            want = c["want"]
            spec = dict(name=name, dtype=gdtype(want.dtype).name, shape=list(want.shape),
                        tolerance_class=args["tolerance_class"], tolerance=str(c["tol"]), check=c["check"],
                        param=c["param"], flush=c["flush"], n=int(args.get("n", 1) or 1), statistics=c["statistics"])
            if hasattr(_checker(), "mode"):  # the checker's compliance mode of the class (EXACT, ULP, ...)
                spec["mode"] = _checker().mode(args["tolerance_class"])
            if outputs.setdefault(k, spec) != spec and \
                    (outputs[k]["check"], outputs[k]["param"]) != (c["check"], c["param"]):
                raise ValueError(f"output {name} is checked in two ways by the case")
            files = {"expected": os.path.join(d, f"out{k}.bin")}
            with open(files["expected"], "wb") as f:
                f.write(_raw(want))
            for kind in ("bound", "center", "magnitude"):
                if c[kind] is not None:
                    files[kind] = os.path.join(d, f"{kind}{k}.f64")
                    with open(files[kind], "wb") as f:
                        f.write(_raw(np.ascontiguousarray(c[kind], np.float64)))
            st["outputs"][str(k)] = {t: os.path.relpath(p, folder) for t, p in files.items()}
        meta["sets"].append(st)
    if not outputs:
        raise ValueError("no compared output is an output of the compiled function")
    meta["outputs"] = [dict(outputs.get(k, {}), index=k, name=n) for k, n in enumerate(irf.outputs)]


# -- the end of the run: manifest, the runner's table and its sources ------------------------------------------
def finish(out_dir: str, info: dict | None = None) -> dict:
    """Gather every case.json under ``out_dir``: write manifest.json, golden.txt and entries.c, copy the runner's
    sources (``RUNNER``); return the counts."""
    metas = []
    for p in sorted(glob.glob(os.path.join(out_dir, "cases", "*", "case.json"))):
        with open(p) as f:
            metas.append(json.load(f))
    metas.sort(key=lambda m: m["id"])
    seen = {}
    for m in metas:
        if m["entry"] in seen and seen[m["entry"]] != m["id"]:
            raise RuntimeError(f"cases {seen[m['entry']]} and {m['id']} share the entry name {m['entry']}")
        seen[m["entry"]] = m["id"]
    replayable = [m for m in metas if not m.get("not_exported") and m.get("artifact")
                  and m["artifact"].get("replayable")]
    counts = {"cases": len(metas), "replayable": len(replayable),
              "data_only": sum(1 for m in metas if not m.get("not_exported") and not m.get("artifact")),
              "not_exported": sum(1 for m in metas if m.get("not_exported"))}
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump({"format": FORMAT, "run": info or {}, "counts": counts, "cases": metas}, f, indent=1)
    with open(os.path.join(out_dir, "golden.txt"), "w") as f:
        f.write(golden_text(replayable))
    with open(os.path.join(out_dir, "entries.c"), "w") as f:
        f.write(entries_c(replayable))
    for name in RUNNER:
        shutil.copy(os.path.join(REPLAY_DIR, name), os.path.join(out_dir, name))
    return counts


def golden_text(metas) -> str:
    """The runner's manifest: per case ``case ENTRY ID WEIGHTS``, ``in NAME DTYPE BYTES ITEM`` per input, ``out
    NAME DTYPE BYTES ITEM CHECK PARAM FLUSH N STATISTICS`` per output (CHECK ``-`` for an output not compared; N
    the reduction length; STATISTICS 1 for TOSA's dot-product tests), then per input set ``set``, ``file
    in|out|bound|center|magnitude K PATH`` lines and ``run``; ``end``. Paths are relative to the golden folder."""
    from glow_core.types import dtype as gdtype
    lines = [FORMAT]
    for m in metas:
        base = f"cases/{m['entry']}"
        w = m["artifact"].get("weights")
        lines.append(f"case {m['entry']} {_token(m['id'])} {base + '/' + w if w else '-'}")
        for spec, io in zip(m["inputs"], m["artifact"]["inputs"]):
            lines.append(f"in {_token(spec['name'])} {_dt(spec['dtype'])} {io['size']} "
                         f"{gdtype(spec['dtype']).itemsize}")
        for spec, io in zip(m["outputs"], m["artifact"]["outputs"]):
            check = spec.get("check", "-")
            dt = spec.get("dtype") or "raw"
            lines.append(f"out {_token(spec['name'])} {_dt(dt)} {io['size']} "
                         f"{gdtype(dt).itemsize if dt != 'raw' else 1} {check} {spec.get('param', 0)} "
                         f"{int(bool(spec.get('flush')))} {spec.get('n', 1)} {int(bool(spec.get('statistics')))}")
        for st in m["sets"]:
            lines.append("set")
            lines += [f"file in {k} {base}/{p}" for k, p in enumerate(st["inputs"])]
            for k, files in st["outputs"].items():
                lines.append(f"file out {k} {base}/{files['expected']}")
                lines += [f"file {t} {k} {base}/{files[t]}" for t in ("bound", "center", "magnitude") if t in files]
            lines.append("run")
        lines.append("end")
    return "\n".join(lines) + "\n"


def _dt(name: str) -> str:
    return name if name in NUMERIC else "raw"


def _token(s: str) -> str:
    return re.sub(r"\s", "_", s) or "-"


def entries_c(metas) -> str:
    """The table of entry points the runner calls, from each bundle's header macros."""
    out = ["/* Generated by glow_conformance.golden: every replayable case's entry point and memory layout. */",
           '#include "replay.h"']
    for m in metas:
        out.append(f'#include "cases/{m["entry"]}/{m["entry"]}.h"')
    out.append("/* weak: a case whose bundle did not compile is left out of the link; its entry is then NULL */")
    out += [f"#pragma weak {m['entry']}" for m in metas]
    for m in metas:
        e, up = m["entry"], m["entry"].upper()
        a = m["artifact"]

        def arr(kind, what, a=a):
            items = [f"{io['macro']}_{what}" for io in a[kind]]
            return "{" + ", ".join(items + ["0"]) + "}"
        out.append(f"static const size_t {e}_io[4][{max(len(a['inputs']), len(a['outputs'])) + 1}] = "
                   f"{{{arr('inputs', 'OFFSET')}, {arr('inputs', 'SIZE')}, {arr('outputs', 'OFFSET')}, "
                   f"{arr('outputs', 'SIZE')}}};")
    out.append("const struct golden_entry golden_entries[] = {")
    for m in metas:
        e, up, a = m["entry"], m["entry"].upper(), m["artifact"]
        out.append(f'  {{"{e}", {e}, {up}_CONSTANT_MEM_SIZE, {up}_MUTABLE_MEM_SIZE, {up}_ACTIVATIONS_MEM_SIZE, '
                   f'{up}_MEM_ALIGN, {len(a["inputs"])}, {len(a["outputs"])}, {e}_io[0], {e}_io[1], {e}_io[2], '
                   f'{e}_io[3]}},')
    out.append("  {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}\n};")
    out.append(f"const int golden_n_entries = {len(metas)};")
    return "\n".join(out) + "\n"


def start(out_dir: str):
    """Make ``out_dir`` ready for a new export (the cases of an earlier one are removed)."""
    os.makedirs(out_dir, exist_ok=True)
    shutil.rmtree(os.path.join(out_dir, "cases"), ignore_errors=True)
    for name in ("manifest.json", "golden.txt", "entries.c") + RUNNER:
        p = os.path.join(out_dir, name)
        if os.path.exists(p):
            os.remove(p)


class Exporter:
    """The pytest plugin object of ``--export-golden`` on the controller: clears the folder when the run starts,
    writes the manifest and the runner's files when it ends, and says what it wrote."""

    def __init__(self, config, out_dir: str):
        self.config, self.out_dir, self.counts = config, out_dir, None
        start(out_dir)

    def pytest_sessionfinish(self, session):
        ctx = self.config._glow
        self.counts = finish(self.out_dir, {"backend": ctx.backend.name, "seed": ctx.seed,
                                            "filter": [f"--case {p}" for p in self.config.getoption("glow_cases")]})

    def pytest_terminal_summary(self, terminalreporter):
        if self.counts is None:
            return
        c = self.counts
        terminalreporter.write_line(
            f"golden artifacts: {c['cases']} cases exported to {self.out_dir} ({c['replayable']} replayable, "
            f"{c['data_only']} inputs and expectations only, {c['not_exported']} not exported: see manifest.json); "
            f"build and run: make -C {self.out_dir} && {self.out_dir}/replay {self.out_dir}")
