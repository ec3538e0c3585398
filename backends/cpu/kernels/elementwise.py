"""Kernels of the elementwise family: the elementwise loop (every unary and binary primitive, select, and casts
between computable types: one expression per element from the C table of ew.py, broadcast inputs indexed in
place, the fused activation in the store), chains of elementwise instructions as one loop (fusion rule
"chains"), and casts from or to storage-only types (lookup and threshold tables, storage_cast.py)."""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

from glow_core.errors import BackendError

from . import ew as kernels_ew
from . import storage_cast
from .codegen import KERNELS, ERR_DIV0, kernel, literal, row_strides
from .ctypes_map import ctype, supported


@dataclass(frozen=True)
class Split:
    """An elementwise loop as ``rows`` x ``cols`` (output element i = r * cols + j) and each input's index
    expression in r, j and i: the full index "i", a broadcast along the inner dims (a function of r), along
    the outer dims ("j"), or a splat ("0")."""

    rows: int
    cols: int
    index: tuple[str, ...]


def broadcast_split(out_shape, in_shapes) -> Split:
    """The loop split for inputs of ``in_shapes``: each equal to ``out_shape`` or a broadcast source of it (same
    rank, dims 1 or equal). The inner dims are the longest suffix on which each broadcast input is either all
    broadcast or all kept (and, if kept, broadcast along every outer dim)."""
    rank, n = len(out_shape), prod(out_shape)
    if all(tuple(s) == tuple(out_shape) for s in in_shapes):
        return Split(1, n, tuple("i" for _ in in_shapes))
    for q in range(rank + 1):
        index = []
        for s in in_shapes:
            idx = _split_index(out_shape, s, q)
            if idx is None:
                break
            index.append(idx)
        else:
            return Split(prod(out_shape[:q]), prod(out_shape[q:]), tuple(index))
    raise BackendError(f"cpu backend: elementwise inputs of shapes {list(map(tuple, in_shapes))} are not "
                       f"broadcasts of the output's {tuple(out_shape)}")


def _split_index(out_shape, s, q) -> "str | None":
    if tuple(s) == tuple(out_shape):
        return "i"
    if len(s) != len(out_shape) or any(a not in (1, b) for a, b in zip(s, out_shape)):
        return None
    kept = [a == b and b != 1 for a, b in zip(s, out_shape)]
    if not any(kept):
        return "0"
    inner = any(kept[q:])  # then all the inner dims must be kept: j indexes them
    if inner and not all(kept[d] or out_shape[d] == 1 for d in range(q, len(s))):
        return None
    if not any(kept[:q]):
        return "j"
    if not inner and all(kept[d] or out_shape[d] == 1 for d in range(q)):
        return "r"
    # a function of the row (mixed radix over the outer dims it keeps), plus j over kept inner dims (a
    # channel gate over NCHWc: x[N, C/cb, H, W, cb] * g[N, C/cb, 1, 1, cb])
    ost, sst = row_strides(out_shape[:q]), row_strides(s)
    terms = []
    for d in (d for d in range(q) if kept[d]):
        t = "r" if ost[d] == 1 else f"r / {ost[d]}"
        if ost[d] * out_shape[d] < prod(out_shape[:q]):
            t = f"{t} % {out_shape[d]}"
        terms.append(f"({t})" if sst[d] == 1 else f"({t}) * {sst[d]}")
    return " + ".join(terms + ["j"] * inner)


def stacked(op: str) -> bool:
    """Whether ``op``'s kernel is the elementwise loop, which reads broadcast inputs in place (fusion rule
    "broadcasts")."""
    return KERNELS.get(op) is elementwise


def _product(step) -> bool:
    """Whether a chain step's value is a product (see ``elementwise_chain``)."""
    return step[0] == "mul" or step[5] == "silu"


def chainable(instr) -> bool:
    """Whether instruction ``instr`` may join an elementwise chain (fusion rule "chains"): its kernel is the elementwise
    loop over a non-empty output of computable types, without divisor checks."""
    if len(instr.outs) != 1 or instr.scratch is not None or instr.outs[0].type.numel == 0:
        return False
    dts = [b.type.dtype.name for b in instr.ins]
    out = instr.outs[0].type.dtype.name
    if not (stacked(instr.op) or instr.op == "cast") or not all(supported(d) for d in dts + [out]):
        return False
    return not kernels_ew.expression(instr.op, dts, out, [f"a{i}" for i in range(len(dts))], instr.attrs)[1]


def elementwise(gen, ins, fn):
    out = ins.outs[0]
    n = out.type.numel
    args = ins.ins
    decls = [f"{ctype(out.type.dtype.name).storage} *out = {gen.tptr(out)}"]
    for i, b in enumerate(args):
        decls.append(f"const {ctype(b.type.dtype.name).storage} *in{i} = {gen.tptr(b, True)}")
    split = broadcast_split(out.type.shape, [b.type.shape for b in args])
    names = [f"in{i}[{idx}]" for i, idx in enumerate(split.index)]
    expr, checks = kernels_ew.expression(ins.op, [b.type.dtype.name for b in args], out.type.dtype.name,
                                         names, {k: v for k, v in ins.attrs.items() if not k.startswith("_")})
    gen.choice = ins.op + "".join(f", input {i} read in place from its broadcast source ({idx})"
                                   for i, (b, idx) in enumerate(zip(args, split.index))
                                   if b.type.shape != out.type.shape)
    epi = gen.epilogue(out.type.dtype.name)
    store = f"out[i] = {expr}" if epi is None else \
        f"const {ctype(out.type.dtype.name).storage} v = {expr}; out[i] = {epi}"
    if checks:  # divisor checks, over input 1's own elements (a broadcast reads each of them)
        checks = kernels_ew.expression(ins.op, [b.type.dtype.name for b in args], out.type.dtype.name,
                                       [f"in{i}[i]" for i in range(len(args))], {})[1]
    return gen.t("elementwise.c.j2",
        fn=fn, decls=decls, loads=[], store=store, n=n, rows=split.rows, cols=split.cols,
        check_n=args[1].type.numel if checks else n, parallel=gen.nt > 1, checks=checks, err=ERR_DIV0)


@kernel("elementwise_chain")
def elementwise_chain(gen, ins, fn):
    """A chain of elementwise instructions (fusion rule "chains") as one loop: each member's value is a local of its
    storage type, computed by the member's own expression and rounded as its kernel stores it, so the loop
    computes bit for bit what the members' kernels do. A float member value that is a product (mul, a silu
    epilogue) gets + glow_nz, -0.0 the compiler cannot see (x + -0.0 == x for every x but a signaling NaN):
    a product feeding another member's addition would otherwise be contracted into an FMA that the
    separate kernels, storing the product in between, do not compute."""
    out, args = ins.outs[0], ins.ins
    split = broadcast_split(out.type.shape, [b.type.shape for b in args])
    decls = [f"{ctype(out.type.dtype.name).storage} *out = {gen.tptr(out)}"]
    decls += [f"const {ctype(b.type.dtype.name).storage} *in{i} = {gen.tptr(b, True)}"
              for i, b in enumerate(args)]
    steps = ins.attrs["steps"]
    barriers = {ctype(s[4]).compute for s in steps[:-1] if _product(s) and s[4] in ("float32", "float64")}
    decls += [f"volatile {c} glow_vnz_{c} = -0.0; const {c} glow_nz_{c} = glow_vnz_{c}" for c in sorted(barriers)]
    lines, shown = [], []
    for k, (op, attrs, refs, in_dts, out_dt, act, params) in enumerate(steps):
        names = [f"in{a}[{split.index[a]}]" if kind == "in" else f"t{a}" for kind, a in refs]
        expr = kernels_ew.expression(op, list(in_dts), out_dt, names, attrs)[0]
        t = ctype(out_dt).storage
        if act:
            lines.append(f"const {t} t{k}_v = {expr}")
            expr = kernels_ew.activation(act, out_dt, f"t{k}_v", {p: literal(v, out_dt) for p, v in params.items()})
        shown.append(f"{'out' if k == len(steps) - 1 else f't{k}'} = {op}"
                     f"({', '.join(f'{kind}{a}' if kind == 'in' else f't{a}' for kind, a in refs)})"
                     + (f" + {act}" if act else ""))
        if k < len(steps) - 1:
            if _product(steps[k]) and out_dt in ("float32", "float64"):
                expr = f"({expr}) + glow_nz_{ctype(out_dt).compute}"
            lines.append(f"const {t} t{k} = {expr}")
    gen.choice = (f"elementwise chain of {len(steps)} in one loop: {'; '.join(shown)}"
                   + "".join(f", in{i} read in place from its broadcast source ({idx})"
                             for i, (b, idx) in enumerate(zip(args, split.index))
                             if b.type.shape != out.type.shape))
    return gen.t("elementwise.c.j2",
        fn=fn, decls=decls, loads=lines, store=f"out[i] = {expr}", n=out.type.numel, rows=split.rows,
        cols=split.cols, parallel=gen.nt > 1, checks=[], err=0)


@kernel("cast")
def cast(gen, ins, fn):
    """Casts between computable types are elementwise expressions; those from or to a storage-only type
    use tables derived from the reference cast (see storage_cast.py)."""
    x, out = ins.ins[0], ins.outs[0]
    src, dst = x.type.dtype.name, out.type.dtype.name
    if supported(src) and supported(dst):
        return elementwise(gen, ins, fn)
    sat, rm = ins.attrs.get("saturate", 1), ins.attrs.get("round_mode", "up")
    sct, dct = ctype(src), ctype(dst)
    decls = [f"{dct.storage} *out = {gen.tptr(out)}", f"const {sct.storage} *in0 = {gen.tptr(x, True)}"]
    pre = ""
    if x.type.dtype.itemsize == 1:
        table = storage_cast.byte_table(src, dst, sat, rm)
        lits = [str(int(v)) for v in table.view(np.uint8)] if not supported(dst) else \
            [literal(v, dst) for v in table]
        decls.append(f"static const {dct.storage} lut[256] = {{ {', '.join(lits)} }}")
        expr = "lut[(uint8_t)in0[i]]"
    elif dst in storage_cast.INT_STORAGE:
        mask = storage_cast.INT_STORAGE[dst]
        v = f"glow_f2i_wrap((double)({sct.ld('in0[i]')}))" if sct.is_float else sct.ld("in0[i]")
        expr = f"(uint8_t)((uint64_t)({v}) & {mask}u)"
    else:
        width = 32 if src in ("float32", "float16", "bfloat16") or dst == "float8e8m0" else 64
        (pos, neg), nans = storage_cast.threshold_tables(width, dst, sat, rm)
        sfx = "u" if width == 32 else "ull"
        ft = "float" if width == 32 else "double"
        pre = gen.t("storage_cast.c.j2",
            fn=fn, ut=f"uint{width}_t", ft=ft, width=width, pos_starts=[f"{b}{sfx}" for b in pos[0]],
            pos_codes=pos[1], neg_starts=[f"{b}{sfx}" for b in neg[0]], neg_codes=neg[1], nan_pos=nans[0],
            nan_neg=nans[1])
        expr = f"{fn}_cvt(({ft})({sct.ld('in0[i]')}))"
    return pre + gen.t("elementwise.c.j2",
        fn=fn, decls=decls, loads=[], store=f"out[i] = {expr}", n=out.type.numel,
        parallel=gen.nt > 1, checks=[], err=0)


#: The ops whose kernel is the elementwise loop (one expression per element).
ELEMENTWISE = frozenset(kernels_ew.UNARY | kernels_ew.BINARY | {"select"})
kernel(*sorted(ELEMENTWISE))(elementwise)
