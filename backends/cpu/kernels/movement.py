"""Kernels of the data-movement primitives: copy, reshape, bitcast (memmove), transpose, broadcast, slice, concat,
pad (one strided odometer loop, dims coalesced: strided.c.j2), gather, gather_nd and scatter_nd (indices checked
before any access)."""
from __future__ import annotations

from math import prod

from glow_core.errors import BackendError

from . import ew as kernels_ew
from .codegen import ERR_INDEX, kernel, literal, row_strides
from .ctypes_map import ctype
from ..templates import PARALLEL_MIN_WORK


def coalesce(dims):
    """dims: list of (size, istr, ostr). Drops size-1 dims and merges contiguous neighbours."""
    dims = [d for d in dims if d[0] != 1]
    out = []
    for d in dims:
        if out and out[-1][1] == d[1] * d[0] and out[-1][2] == d[2] * d[0]:
            s, _, _ = out[-1]
            out[-1] = (s * d[0], d[1], d[2])
        else:
            out.append(d)
    return out


#: A transpose's block (strided.c.j2): rows of the input's contiguous dim x columns of the output's, copied while
#: the rows' input lines are in L1; the least rows and columns for which a transpose takes blocks.
TRANSPOSE_TILE = {"rows": 16, "cols": 16, "least": 4}


def _transpose_tile(outer, inner):
    """(outer dims with the tiled one last, as blocks, tile record) when the copy is a transpose: the inner dim
    strided in the input and an outer dim contiguous in it, both at least TRANSPOSE_TILE["least"] long; else
    (outer, None)."""
    rows, least = TRANSPOSE_TILE["rows"], TRANSPOSE_TILE["least"]
    at = next((k for k, d in enumerate(outer) if d[1] == 1), None)
    if inner[1] == 1 or inner[0] < least or at is None or outer[at][0] < least:
        return outer, None
    size, istr, ostr = outer[at]
    blocks = -(-size // rows)
    tile = dict(rows=rows, cols=TRANSPOSE_TILE["cols"], blocks=blocks, last=size - (blocks - 1) * rows, istr=istr,
                ostr=ostr)
    return outer[:at] + outer[at + 1:] + [(blocks, rows * istr, rows * ostr)], tile


def _strided(gen, fn, out, pieces, fill=None):
    """The strided copy of ``pieces`` (source, shape, input strides, output strides, bases) into ``out``: dims
    coalesced, transposes in blocks (``_transpose_tile``), and, at more than one thread, each piece of more than
    PARALLEL_MIN_WORK["elementwise"] elements split over the threads by its outer iterations (fill too)."""
    t = ctype(out.type.dtype.name).storage
    rendered, notes = [], []
    for in_buf, shape, istr, ostr, ibase, obase in pieces:
        if prod(shape) == 0:
            continue
        dims = coalesce(list(zip(shape, istr, ostr)))
        if not dims:
            dims = [(1, 0, 0)]
        inner = dims[-1]
        outer, tile = _transpose_tile(dims[:-1], inner)
        count = prod(d[0] for d in outer)
        chunks = min(gen.nt, count) if gen.nt > 1 and prod(shape) > PARALLEL_MIN_WORK["elementwise"] else 1
        notes.append((f"blocks of {tile['rows']} x {tile['cols']}" if tile else "rows")
                     + (f", {chunks} threads" if chunks > 1 else ""))
        rendered.append(dict(in_ptr=gen.ptr(in_buf), outer_rank=len(outer),
                             outer_shape=[d[0] for d in outer], outer_istr=[d[1] for d in outer],
                             outer_ostr=[d[2] for d in outer], in_base=ibase, out_base=obase,
                             outer_count=count, inner=inner[0], inner_istr=inner[1],
                             inner_ostr=inner[2], tile=tile, chunks=chunks))
    fill_parallel = fill is not None and gen.nt > 1 and out.type.numel > PARALLEL_MIN_WORK["elementwise"]
    if notes:
        gen.choice = f"{gen.ki.op}, strided copy by " + (notes[0] if len(set(notes)) == 1 else
                                                         "; ".join(f"piece {i} {n}" for i, n in enumerate(notes)))
    return gen.t("strided.c.j2",
        fn=fn, t=t, out_ptr=gen.ptr(out), pieces=rendered,
        fill=fill, fill_n=out.type.numel, fill_parallel=fill_parallel)


def _memcpy(gen, fn, out, src):
    gen.choice = "memmove"
    return (f"GLOW_KERNEL int {fn}(uint8_t *const *p) {{\n"
            f"  if ({gen.ptr(out)} != {gen.ptr(src)}) memmove({gen.ptr(out)}, {gen.ptr(src)}, "
            f"{min(out.size, src.size)});\n  return 0;\n}}\n")


@kernel("copy", "reshape", "bitcast")
def copy(gen, ins, fn):
    return _memcpy(gen, fn, ins.outs[0], ins.ins[0])


@kernel("transpose")
def transpose(gen, ins, fn):
    x, out = ins.ins[0], ins.outs[0]
    perm = ins.attrs["perm"]
    ist = row_strides(x.type.shape)
    return _strided(gen, fn, out, [(x, out.type.shape, [ist[p] for p in perm],
                                             row_strides(out.type.shape), 0, 0)])


@kernel("broadcast")
def broadcast(gen, ins, fn):
    x, out = ins.ins[0], ins.outs[0]
    ist = row_strides(x.type.shape)
    istr = [0 if (s == 1 and d != 1) else st for s, d, st in zip(x.type.shape, out.type.shape, ist)]
    return _strided(gen, fn, out, [(x, out.type.shape, istr, row_strides(out.type.shape), 0, 0)])


@kernel("slice")
def slice_(gen, ins, fn):
    x, out = ins.ins[0], ins.outs[0]
    ist = row_strides(x.type.shape)
    starts, steps = ins.attrs["starts"], ins.attrs["steps"]
    base = sum(s * st for s, st in zip(starts, ist)) if out.type.numel else 0
    istr = [st * sp for st, sp in zip(ist, steps)]
    return _strided(gen, fn, out, [(x, out.type.shape, istr, row_strides(out.type.shape), base, 0)])


@kernel("concat")
def concat(gen, ins, fn):
    out = ins.outs[0]
    axis = ins.attrs["axis"]
    ost = row_strides(out.type.shape)
    pieces, pos = [], 0
    for x in ins.ins:
        pieces.append((x, x.type.shape, row_strides(x.type.shape), ost, 0, pos * ost[axis]))
        pos += x.type.shape[axis]
    return _strided(gen, fn, out, pieces)


@kernel("pad")
def pad(gen, ins, fn):
    x, out = ins.ins[0], ins.outs[0]
    n = x.type.rank
    pads = ins.attrs["pads"]
    interior = ins.attrs.get("interior") or [0] * n
    ost = row_strides(out.type.shape)
    value = ins.attrs.get("value", 0.0)
    dt = out.type.dtype.name
    fill = literal(bool(value) if dt == "bool" else value, dt)
    obase = sum(pads[i] * ost[i] for i in range(n))
    pieces = [(x, x.type.shape, row_strides(x.type.shape), [ost[i] * (interior[i] + 1) for i in range(n)],
               0, obase)]
    return _strided(gen, fn, out, pieces, fill=fill)


@kernel("gather")
def gather(gen, ins, fn):
    x, idx = ins.ins
    out = ins.outs[0]
    axis = ins.attrs["axis"]
    xs = x.type.shape
    return gen.t("gather.c.j2",
        fn=fn, out_ptr=gen.ptr(out), x_ptr=gen.ptr(x), idx_ptr=gen.ptr(idx),
        idx_t=ctype(idx.type.dtype.name).storage, nidx=idx.type.numel, dim=xs[axis], outer=prod(xs[:axis]),
        row_bytes=prod(xs[axis + 1:]) * x.type.dtype.itemsize, err=ERR_INDEX)


@kernel("gather_nd")
def gather_nd(gen, ins, fn):
    x, idx = ins.ins
    out = ins.outs[0]
    bd = ins.attrs.get("batch_dims", 0)
    xs, ish = x.type.shape, idx.type.shape
    k = ish[-1]
    nb = prod(xs[:bd])
    rows = prod(ish[bd:-1])
    if k == 0:  # whole slices: copy each batch's data rows times
        return _strided(gen, fn, out, [(x, (nb, rows, prod(xs[bd:])), (prod(xs[bd:]), 0, 1),
                                                 (rows * prod(xs[bd:]), prod(xs[bd:]), 1), 0, 0)])
    xst = row_strides(xs)
    return gen.t("gather_nd.c.j2",
        fn=fn, out_ptr=gen.ptr(out), x_ptr=gen.ptr(x), idx_ptr=gen.ptr(idx),
        idx_t=ctype(idx.type.dtype.name).storage, k=k, dims=list(xs[bd:bd + k]), strides=xst[bd:bd + k],
        nb=nb, rows=rows, xbatch=prod(xs[bd:]), slice_bytes=prod(xs[bd + k:]) * x.type.dtype.itemsize,
        itemsize=x.type.dtype.itemsize, err=ERR_INDEX)


@kernel("scatter_nd")
def scatter_nd(gen, ins, fn):
    x, idx, upd = ins.ins
    out = ins.outs[0]
    dt = x.type.dtype.name
    ct = ctype(dt)
    k = idx.type.shape[-1]
    xs = x.type.shape
    red = ins.attrs.get("reduction", "none")
    cmp_t = ct.compute
    combine = kernels_ew.combine(red, dt, "a", "b")
    if k == 0:
        return _memcpy(gen, fn, out, x) if idx.type.numel == 0 else \
            _scatter_whole(gen, ins, fn)
    return gen.t("scatter_nd.c.j2",
        fn=fn, t=ct.storage, out_ptr=gen.ptr(out), x_ptr=gen.ptr(x), idx_ptr=gen.ptr(idx),
        upd_ptr=gen.ptr(upd), idx_t=ctype(idx.type.dtype.name).storage, k=k, dims=list(xs[:k]),
        strides=row_strides(xs)[:k], rows=idx.type.numel // k, slice=prod(xs[k:]), nbytes=x.size,
        cmp_t=cmp_t, load_a=ct.ld("out[off + s]"), load_b=ct.ld("upd[r * %d + s]" % prod(xs[k:])),
        combine=ct.st(combine), err=ERR_INDEX)


def _scatter_whole(gen, ins, fn):
    raise BackendError("cpu backend: scatter_nd with empty index tuples is not supported")
