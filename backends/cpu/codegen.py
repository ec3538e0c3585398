"""C code generation for the CPU backend: one translation unit per IRFunction, one static kernel per instruction.

Templates (templates/*.c.j2) hold loop skeletons and signatures; this module computes everything static:
pointers (memory-plan offsets baked in), strides, coalesced dims, dtype conversions and tiling choices.
Model names never reach C except through ``c_comment`` (escaped); identifiers are generated (k0, k1, ...).
"""
from __future__ import annotations

import os
import re
from math import prod

import jinja2
import numpy as np

from glow_core.errors import BackendError
from glow_core.types import dtype as to_dtype

from .ctypes_map import INT_LIMITS, ctype, supported
from . import kernels_ew, storage_cast

TEMPLATES = os.path.join(os.path.dirname(__file__), "templates")
_ENV: jinja2.Environment | None = None

#: Least work (elements, or multiply-adds for GEMM blocks) for which a kernel's loop runs as an OpenMP parallel
#: region; smaller loops stay serial (waking a second thread costs a few microseconds). Tuned on 2 cores with
#: bench/bench_cpu.py (BERT-style encoder at 2 threads: 12.0 -> 9.8 ms, from 131072/262144/2097152).
PARALLEL_MIN_WORK = {"elementwise": 32768, "window": 65536, "gemm": 524288}


def template(name: str) -> jinja2.Template:
    """A template of templates/ (StrictUndefined; compiled templates cached under $GLOW_CACHE_DIR/jinja)."""
    global _ENV
    if _ENV is None:
        from .toolchain import cache_dir
        try:
            d = os.path.join(cache_dir(), "jinja")
            os.makedirs(d, exist_ok=True)
            bcc = jinja2.FileSystemBytecodeCache(d)
        except OSError:
            bcc = None
        _ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                                  keep_trailing_newline=True, autoescape=False, bytecode_cache=bcc)
        _ENV.globals["par_min"] = PARALLEL_MIN_WORK
    return _ENV.get_template(name)

# Error kinds (see glow_prelude.h): the entry returns (1-based instruction number) * 8 + kind.
ERR_INDEX, ERR_DIV0, ERR_NOMEM = 1, 2, 3
ERR_KINDS = {ERR_INDEX: "index out of range", ERR_DIV0: "integer division or remainder by zero",
             ERR_NOMEM: "out of memory for scratch buffers"}


def prelude_text() -> str:
    with open(os.path.join(TEMPLATES, "glow_prelude.h.j2")) as f:
        return f.read()


_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _.,:;=+-()[]<>|@!~^&{}'\"")


def c_comment(text: str, limit: int = 160) -> str:
    """Text safe inside a C block comment: printable ASCII without '*', '/', '\\', '?', '#' or newlines;
    every other byte is percent-encoded, so no model name can close the comment or start a directive."""
    out = []
    for ch in str(text):
        if ch in _SAFE:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    s = "".join(out)
    return s if len(s) <= limit else s[:limit] + "..."


def c_ident(text: str) -> str:
    """A C identifier derived from ``text`` (for bundle names/macros): [A-Za-z0-9_], not starting with a digit."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", str(text)) or "_"
    if s[0].isdigit():
        s = "_" + s
    return s


def literal(value, dt: str) -> str:
    """A C expression of ``dt``'s storage type holding ``value`` converted as numpy would."""
    arr = np.array(value).astype(to_dtype(dt).np)
    if not supported(dt):  # storage-only 1-byte types: the byte
        return f"(uint8_t){int(arr.reshape(1).view(np.uint8)[0])}u"
    if dt == "bool":
        return "1" if bool(arr) else "0"
    if dt == "bfloat16":
        return f"(uint16_t){int(arr.view(np.uint16))}u"
    if dt in ("float32", "float64", "float16"):
        v = float(arr)
        if np.isnan(v):
            s = "NAN"
        elif np.isinf(v):
            s = "INFINITY" if v > 0 else "(-INFINITY)"
        else:
            s = float.hex(v)
        return f"(({ctype(dt).storage})({s}))"
    v = int(arr)
    if dt == "int64" and v == -2 ** 63:
        return "INT64_MIN"
    if dt.startswith("uint"):
        return f"(({ctype(dt).storage}){v}ull)"
    return f"(({ctype(dt).storage})({v}ll))"


def row_strides(shape) -> list[int]:
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return st[::-1]


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


class Codegen:
    """Generates the C source for one IRFunction."""

    def __init__(self, irf, options=None):
        self.irf = irf
        self.options = dict(options or {})
        self.num_threads = int(self.options.get("num_threads") or 1)
        self.gemms: set[str] = set()

    # -- helpers ------------------------------------------------------------------------------------
    @staticmethod
    def ptr(b) -> str:
        region = {"constant": "C", "mutable": "M", "activation": "A"}[b.region]
        return f"({region} + {b.address})"

    def tptr(self, b, const=False) -> str:
        t = ctype(b.type.dtype.name).storage
        return f"(({'const ' if const else ''}{t} *){self.ptr(b)})"

    # -- module -------------------------------------------------------------------------------------
    def module(self, entry="glow_run", export="") -> str:
        kernels, calls, self.instr_of_code = [], [], []
        for idx, ins in enumerate(self.irf.code):
            fn = f"k{idx}"
            err = (idx + 1) * 8
            comment = c_comment(f"{ins.op} {ins.name}")
            src = self.kernel(ins, fn, comment, err)
            kernels.append(src)
            calls.append(fn)
            self.instr_of_code.append(ins)
        gemm_src = [template("gemm.c.j2").render(t=t, sfx=sfx, **_GEMM_TILES[sfx])
                    for sfx, t in (("f32", "float"), ("f64", "double")) if sfx in self.gemms]
        return template("module.c.j2").render(
            comment_name=c_comment(self.irf.name), entry=entry, export=export,
            openmp=self.num_threads > 1, num_threads=self.num_threads,
            kernels=gemm_src + kernels, calls=calls)

    def kernel(self, ins, fn, comment, err) -> str:
        outs = ins.outs
        if any(o.type.numel == 0 for o in outs):
            return f"/* {comment} */\nstatic int {fn}(uint8_t *C, uint8_t *M, uint8_t *A) " \
                   "{ (void)C; (void)M; (void)A; return 0; }\n"
        op = ins.op
        method = getattr(self, "k_" + op, None)
        if method is None:
            if op in kernels_ew.UNARY or op in kernels_ew.BINARY or op in ("select", "mod"):
                method = self.k_elementwise
            else:
                raise BackendError(f"cpu backend: no kernel for op {op!r} (instruction {ins.name!r})")
        return method(ins, fn=fn, comment=comment, err=err)

    # -- elementwise --------------------------------------------------------------------------------
    def k_elementwise(self, ins, fn, comment, err):
        out = ins.outs[0]
        n = out.type.numel
        args = ins.ins
        decls = [f"{ctype(out.type.dtype.name).storage} *out = {self.tptr(out)}"]
        for i, b in enumerate(args):
            decls.append(f"const {ctype(b.type.dtype.name).storage} *in{i} = {self.tptr(b, True)}")
        names = [f"in{i}[i]" for i in range(len(args))]
        expr, checks = kernels_ew.expression(ins.op, [b.type.dtype.name for b in args], out.type.dtype.name,
                                             names, {k: v for k, v in ins.attrs.items() if not k.startswith("_")})
        return template("elementwise.c.j2").render(
            comment=comment, fn=fn, decls=decls, loads=[], store=f"out[i] = {expr}", n=n,
            parallel=self.num_threads > 1, checks=checks, err=err + ERR_DIV0)

    def k_cast(self, ins, fn, comment, err):
        """Casts between computable types are elementwise expressions; those from or to a storage-only type
        use tables derived from the reference cast (see storage_cast.py)."""
        x, out = ins.ins[0], ins.outs[0]
        src, dst = x.type.dtype.name, out.type.dtype.name
        if supported(src) and supported(dst):
            return self.k_elementwise(ins, fn, comment, err)
        sat, rm = ins.attrs.get("saturate", 1), ins.attrs.get("round_mode", "up")
        sct, dct = ctype(src), ctype(dst)
        decls = [f"{dct.storage} *out = {self.tptr(out)}", f"const {sct.storage} *in0 = {self.tptr(x, True)}"]
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
            pre = template("storage_cast.c.j2").render(
                fn=fn, ut=f"uint{width}_t", ft=ft, width=width, pos_starts=[f"{b}{sfx}" for b in pos[0]],
                pos_codes=pos[1], neg_starts=[f"{b}{sfx}" for b in neg[0]], neg_codes=neg[1], nan_pos=nans[0],
                nan_neg=nans[1])
            expr = f"{fn}_cvt(({ft})({sct.ld('in0[i]')}))"
        return pre + template("elementwise.c.j2").render(
            comment=comment, fn=fn, decls=decls, loads=[], store=f"out[i] = {expr}", n=out.type.numel,
            parallel=self.num_threads > 1, checks=[], err=err)

    # -- movement -----------------------------------------------------------------------------------
    def _strided(self, fn, comment, out, pieces, fill=None):
        t = ctype(out.type.dtype.name).storage
        rendered = []
        for in_buf, shape, istr, ostr, ibase, obase in pieces:
            if prod(shape) == 0:
                continue
            dims = coalesce(list(zip(shape, istr, ostr)))
            if not dims:
                dims = [(1, 0, 0)]
            inner = dims[-1]
            outer = dims[:-1]
            rendered.append(dict(in_ptr=self.ptr(in_buf), outer_rank=len(outer),
                                 outer_shape=[d[0] for d in outer], outer_istr=[d[1] for d in outer],
                                 outer_ostr=[d[2] for d in outer], in_base=ibase, out_base=obase,
                                 outer_count=prod(d[0] for d in outer), inner=inner[0], inner_istr=inner[1],
                                 inner_ostr=inner[2]))
        return template("strided.c.j2").render(
            comment=comment, fn=fn, t=t, out_ptr=self.ptr(out), pieces=rendered,
            fill=fill, fill_n=out.type.numel)

    def _memcpy(self, fn, comment, out, src):
        return (f"/* {comment} */\nstatic int {fn}(uint8_t *C, uint8_t *M, uint8_t *A) {{\n  (void)C; (void)M; (void)A;\n"
                f"  if ({self.ptr(out)} != {self.ptr(src)}) memmove({self.ptr(out)}, {self.ptr(src)}, "
                f"{min(out.size, src.size)});\n  return 0;\n}}\n")

    def k_copy(self, ins, fn, comment, err):
        return self._memcpy(fn, comment, ins.outs[0], ins.ins[0])

    k_reshape = k_copy
    k_bitcast = k_copy

    def k_transpose(self, ins, fn, comment, err):
        x, out = ins.ins[0], ins.outs[0]
        perm = ins.attrs["perm"]
        ist = row_strides(x.type.shape)
        return self._strided(fn, comment, out, [(x, out.type.shape, [ist[p] for p in perm],
                                                 row_strides(out.type.shape), 0, 0)])

    def k_broadcast(self, ins, fn, comment, err):
        x, out = ins.ins[0], ins.outs[0]
        ist = row_strides(x.type.shape)
        istr = [0 if (s == 1 and d != 1) else st for s, d, st in zip(x.type.shape, out.type.shape, ist)]
        return self._strided(fn, comment, out, [(x, out.type.shape, istr, row_strides(out.type.shape), 0, 0)])

    def k_slice(self, ins, fn, comment, err):
        x, out = ins.ins[0], ins.outs[0]
        ist = row_strides(x.type.shape)
        starts, steps = ins.attrs["starts"], ins.attrs["steps"]
        base = sum(s * st for s, st in zip(starts, ist)) if out.type.numel else 0
        istr = [st * sp for st, sp in zip(ist, steps)]
        return self._strided(fn, comment, out, [(x, out.type.shape, istr, row_strides(out.type.shape), base, 0)])

    def k_concat(self, ins, fn, comment, err):
        out = ins.outs[0]
        axis = ins.attrs["axis"]
        ost = row_strides(out.type.shape)
        pieces, pos = [], 0
        for x in ins.ins:
            pieces.append((x, x.type.shape, row_strides(x.type.shape), ost, 0, pos * ost[axis]))
            pos += x.type.shape[axis]
        return self._strided(fn, comment, out, pieces)

    def k_pad(self, ins, fn, comment, err):
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
        return self._strided(fn, comment, out, pieces, fill=fill)

    # -- index ops -----------------------------------------------------------------------------------
    def k_gather(self, ins, fn, comment, err):
        x, idx = ins.ins
        out = ins.outs[0]
        axis = ins.attrs["axis"]
        xs = x.type.shape
        return template("gather.c.j2").render(
            comment=comment, fn=fn, out_ptr=self.ptr(out), x_ptr=self.ptr(x), idx_ptr=self.ptr(idx),
            idx_t=ctype(idx.type.dtype.name).storage, nidx=idx.type.numel, dim=xs[axis], outer=prod(xs[:axis]),
            row_bytes=prod(xs[axis + 1:]) * x.type.dtype.itemsize, err=err + ERR_INDEX)

    def k_gather_nd(self, ins, fn, comment, err):
        x, idx = ins.ins
        out = ins.outs[0]
        bd = ins.attrs.get("batch_dims", 0)
        xs, ish = x.type.shape, idx.type.shape
        k = ish[-1]
        nb = prod(xs[:bd])
        rows = prod(ish[bd:-1])
        if k == 0:  # whole slices: copy each batch's data rows times
            return self._strided(fn, comment, out, [(x, (nb, rows, prod(xs[bd:])), (prod(xs[bd:]), 0, 1),
                                                     (rows * prod(xs[bd:]), prod(xs[bd:]), 1), 0, 0)])
        xst = row_strides(xs)
        return template("gather_nd.c.j2").render(
            comment=comment, fn=fn, out_ptr=self.ptr(out), x_ptr=self.ptr(x), idx_ptr=self.ptr(idx),
            idx_t=ctype(idx.type.dtype.name).storage, k=k, dims=list(xs[bd:bd + k]), strides=xst[bd:bd + k],
            nb=nb, rows=rows, xbatch=prod(xs[bd:]), slice_bytes=prod(xs[bd + k:]) * x.type.dtype.itemsize,
            itemsize=x.type.dtype.itemsize, err=err + ERR_INDEX)

    def k_scatter_nd(self, ins, fn, comment, err):
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
            return self._memcpy(fn, comment, out, x) if idx.type.numel == 0 else \
                self._scatter_whole(ins, fn, comment, err)
        return template("scatter_nd.c.j2").render(
            comment=comment, fn=fn, t=ct.storage, out_ptr=self.ptr(out), x_ptr=self.ptr(x), idx_ptr=self.ptr(idx),
            upd_ptr=self.ptr(upd), idx_t=ctype(idx.type.dtype.name).storage, k=k, dims=list(xs[:k]),
            strides=row_strides(xs)[:k], rows=idx.type.numel // k, slice=prod(xs[k:]), nbytes=x.size,
            cmp_t=cmp_t, load_a=ct.ld("out[off + s]"), load_b=ct.ld("upd[r * %d + s]" % prod(xs[k:])),
            combine=ct.st(combine), err=err + ERR_INDEX)

    def _scatter_whole(self, ins, fn, comment, err):
        raise BackendError("cpu backend: scatter_nd with empty index tuples is not supported")

    # -- reductions ----------------------------------------------------------------------------------
    def _reduce(self, ins, fn, comment, err):
        x, out = ins.ins[0], ins.outs[0]
        axes = list(ins.attrs["axes"])
        dt = x.type.dtype.name
        ct = ctype(dt)
        op = ins.op
        ist = row_strides(x.type.shape)
        kept = [(s, st) for i, (s, st) in enumerate(zip(x.type.shape, ist)) if i not in axes and s != 1]
        red = [(s, st) for i, (s, st) in enumerate(zip(x.type.shape, ist)) if i in axes and s != 1]
        acc_t, init, update = kernels_ew.reduce_parts(op, dt)
        if any(s == 0 for s, _ in red):  # an empty reduction: one loop of no iteration leaves the identity
            red = [(0, 0)]
        load_idx = " + ".join([f"o{i} * {st}" for i, (_, st) in enumerate(kept)] +
                              [f"r{i} * {st}" for i, (_, st) in enumerate(red)]) or "0"
        kst = row_strides([s for s, _ in kept])
        out_idx = " + ".join(f"o{i} * {st}" for i, st in enumerate(kst)) or "0"
        return template("reduce.c.j2").render(
            comment=comment, fn=fn, out_t=ct.storage, in_t=ct.storage, out_ptr=self.ptr(out), in_ptr=self.ptr(x),
            parallel=self.num_threads > 1 and len(kept) > 0, work=x.type.numel, kept=[s for s, _ in kept],
            red=[s for s, _ in red], acc_t=acc_t, init=init, load=f"({acc_t})" + ct.ld(f"in[{load_idx}]"),
            update=update, out_idx=out_idx, store=ct.st(f"({ct.compute})acc"))

    k_reduce_sum = k_reduce_prod = k_reduce_max = k_reduce_min = _reduce

    def _arg(self, ins, fn, comment, err):
        x, out = ins.ins[0], ins.outs[0]
        axis = ins.attrs["axis"]
        last = ins.attrs.get("select_last_index", 0)
        xs = x.type.shape
        ct = ctype(x.type.dtype.name)
        n = xs[axis]
        inner = prod(xs[axis + 1:])
        cmp = ">" if ins.op == "argmax" else "<"
        if n == 0:
            raise BackendError(f"cpu backend: {ins.op} over an empty axis")
        return template("arg.c.j2").render(
            comment=comment, fn=fn, out_ptr=self.ptr(out), in_ptr=self.ptr(x), in_t=ct.storage, cmp_t=ct.compute,
            outer=prod(xs[:axis]), inner=inner, n=n, first=(n - 1) if last else 0,
            jexpr=f"{n - 1} - s" if last else "s", load_best=ct.ld(f"p[({(n - 1) if last else 0}) * {inner}]"),
            load_v=ct.ld(f"p[j * {inner}]"), better=f"v {cmp} best || v != v")

    k_argmax = k_argmin = _arg

    # -- matmul / conv / pool ----------------------------------------------------------------------------
    def k_matmul(self, ins, fn, comment, err):
        a, b = ins.ins
        out = ins.outs[0]
        dt = a.type.dtype.name
        ct = ctype(dt)
        m, k = a.type.shape[-2:]
        n = b.type.shape[-1]
        batch = prod(a.type.shape[:-2])
        big = m * n * k >= 32768
        acc_t = {"float64": "double"}.get(dt, "float" if ct.is_float else ("uint64_t" if not ct.signed else "int64_t"))
        if dt in ("float32", "float64") and big:
            mode, sfx = "gemm", "f32" if dt == "float32" else "f64"
        elif dt in ("float16", "bfloat16") and big:
            mode, sfx = "convert", "f32"
        else:
            mode, sfx = "naive", ""
        if sfx:
            self.gemms.add(sfx)
        if mode == "convert":
            load_a, load_b = ct.ld(f"a[bt * {m * k} + i]"), ct.ld(f"b[bt * {k * n} + i]")
            store_c = ct.st("cc[i]")
        else:
            load_a = f"({acc_t})" + ct.ld(f"a[bt * {m * k} + i * {k} + kk]")
            load_b = f"({acc_t})" + ct.ld("brow[j]")
            store_c = ct.st(f"({ct.compute})row[j]")
        return template("matmul.c.j2").render(
            comment=comment, fn=fn, out_t=ct.storage, in_t=ct.storage, out_ptr=self.ptr(out), a_ptr=self.ptr(a),
            b_ptr=self.ptr(b), mode=mode, batch=batch, m=m, n=n, k=k, sfx=sfx, acc_t=acc_t, load_a=load_a,
            load_b=load_b, store_c=store_c, err_nomem=err + ERR_NOMEM)

    def _window_dims(self, ins, x, out, kernel):
        n = x.type.rank - 2
        st, dil, pads = ins.attrs["strides"], ins.attrs["dilations"], ins.attrs["pads"]
        return [dict(o=out.type.shape[2 + i], k=kernel[i], s=st[i], dil=dil[i], p=pads[i], size=x.type.shape[2 + i])
                for i in range(n)]

    def k_conv(self, ins, fn, comment, err):
        x, w, bias = ins.ins
        out = ins.outs[0]
        dt = x.type.dtype.name
        ct = ctype(dt)
        group = ins.attrs.get("group", 1)
        kernel = w.type.shape[2:]
        dims = self._window_dims(ins, x, out, kernel)
        N, C = x.type.shape[:2]
        F = w.type.shape[0]
        cg, fg = C // group, F // group
        kk = prod(kernel)
        p = prod(out.type.shape[2:])
        in_size = prod(x.type.shape[2:])
        fast = ct.is_float
        acc_t = "double" if dt == "float64" else ("float" if fast else "int64_t")
        sfx = "f64" if dt == "float64" else "f32"
        if fast:
            self.gemms.add(sfx)
        native = dt in ("float32", "float64")
        if native and cg == 1 and fg == 1:
            return self._depthwise(fn, comment, x, w, bias, out, dims)
        direct = native and all(d["k"] == 1 and d["s"] == 1 and d["p"] == 0 for d in dims)
        istr = row_strides(x.type.shape[2:])
        ost = row_strides(out.type.shape[2:])
        kst = row_strides(kernel)
        kidx = " + ".join(f"k{i} * {s}" for i, s in enumerate(kst)) or "0"
        pidx = " + ".join(f"o{i} * {s}" for i, s in enumerate(ost)) or "0"
        xidx = " + ".join(f"(o{i} * {d['s']} + k{i} * {d['dil']} - {d['p']}) * {istr[i]}"
                          for i, d in enumerate(dims)) or "0"
        _valid_ranges(dims)
        store = ct.st(f"({ct.compute})(drow[q] + bv)")
        return template("conv.c.j2").render(
            comment=comment, fn=fn, t=ct.storage, acc_t=acc_t, out_ptr=self.ptr(out), x_ptr=self.ptr(x),
            w_ptr=self.ptr(w), b_ptr=self.ptr(bias), direct=direct, convert_w=not native, native=native, ck=cg * kk, p=p, f=F,
            fg=fg, cg=cg, c=C, batch=N, group=group, in_size=in_size, dims=dims, kk=kk, kidx=kidx, pidx=pidx,
            load_x=f"({acc_t})" + ct.ld(f"xc[{xidx}]"), load_w=f"({acc_t})" + ct.ld("w[i]"),
            load_bias=f"({acc_t})" + ct.ld("bias[g * %d + f]" % fg), fast=fast, sfx=sfx, store=store,
            err_nomem=err + ERR_NOMEM)

    def _depthwise(self, fn, comment, x, w, bias, out, dims):
        """One filter per channel (group == C == F): a direct convolution per (n, c) plane, the inner loops over
        the output range of each kernel offset that reads the unpadded input (``_valid_ranges``)."""
        ct = ctype(x.type.dtype.name)
        _valid_ranges(dims)
        n = len(dims)
        istr = row_strides(x.type.shape[2:])
        ost = row_strides(out.type.shape[2:])
        kst = row_strides(w.type.shape[2:])
        xidx = " + ".join(f"(o{i} * {d['s']} + k{i} * {d['dil']} - {d['p']}) * {istr[i]}"
                          for i, d in enumerate(dims)) or "0"
        return template("depthwise.c.j2").render(
            comment=comment, fn=fn, t=ct.storage, out_ptr=self.ptr(out), x_ptr=self.ptr(x), w_ptr=self.ptr(w),
            b_ptr=self.ptr(bias), dims=dims, nc=prod(x.type.shape[:2]), c=x.type.shape[1],
            kk=prod(w.type.shape[2:]), in_size=prod(x.type.shape[2:]), out_size=prod(out.type.shape[2:]),
            work=out.type.numel * prod(w.type.shape[2:]),
            kidx=" + ".join(f"k{i} * {kst[i]}" for i in range(n)) or "0",
            oidx=" + ".join(f"o{i} * {ost[i]}" for i in range(n)) or "0", xidx=xidx)

    def _pool(self, ins, fn, comment, err):
        x, out = ins.ins[0], ins.outs[0]
        dt = x.type.dtype.name
        ct = ctype(dt)
        dims = self._window_dims(ins, x, out, ins.attrs["kernel"])
        istr = row_strides(x.type.shape[2:])
        ost = row_strides(out.type.shape[2:])
        xidx = " + ".join(f"i{i} * {s}" for i, s in enumerate(istr)) or "0"
        oidx = " + ".join(f"o{i} * {s}" for i, s in enumerate(ost)) or "0"
        if ins.op == "max_pool":
            acc_t, init, update = kernels_ew.reduce_parts("reduce_max", dt)
            store = ct.st(f"({ct.compute})acc")
        else:
            acc_t, init, update = "double", "0.0", "acc += v"
            div = float(prod(ins.attrs["kernel"])) if ins.attrs.get("count_include_pad", 0) else "(double)cnt"
            store = ct.st(f"({ct.compute})(acc / {div})")
        return template("pool.c.j2").render(
            comment=comment, fn=fn, t=ct.storage, out_ptr=self.ptr(out), in_ptr=self.ptr(x),
            work=out.type.numel * prod(ins.attrs["kernel"]), nc=prod(x.type.shape[:2]),
            in_size=prod(x.type.shape[2:]), out_size=prod(out.type.shape[2:]), dims=dims, acc_t=acc_t, init=init,
            load=f"({acc_t})" + ct.ld(f"xp[{xidx}]"), update=update, out_idx=oidx, store=store)

    k_max_pool = k_avg_pool = _pool


def _valid_ranges(dims):
    """For every kernel offset k of each window dim, the output range [lo[k], hi[k]) whose input index
    o * s + k * dil - p lies inside the unpadded input: loops over it need no bounds checks, and outputs
    outside it read padding. (A bounds check per element instead, ``in ? x[i] : 0``, was miscompiled by GCC
    12's loop vectorizer with AVX2/AVX-512: dilated convolutions whose windows reach far into the padding
    returned memory that was never written; conformance case ops/Conv/float32/fuzz_dilated_window_in_padding.)"""
    for d in dims:
        los, his = [], []
        for k in range(d["k"]):
            shift = k * d["dil"] - d["p"]
            los.append(min(d["o"], max(0, -(shift // d["s"]))))  # ceil(-shift / s)
            his.append(max(0, min(d["o"], (d["size"] - 1 - shift) // d["s"] + 1)))
        d.update(lo=los, hi=his)


# Cache blocking (kc x mc panel of A in L2, kc x nc of B in L3) and the micro-tile height with 512-bit vectors
# (mr_wide x 2 vectors; 6 x 2 with narrower vectors); mc is a multiple of both heights.
_GEMM_TILES = {"f32": dict(kc=384, mc=144, nc=4096, mr_wide=8),
               "f64": dict(kc=256, mc=144, nc=2048, mr_wide=8)}

__all__ = ["Codegen", "c_comment", "c_ident", "literal", "prelude_text", "ERR_KINDS", "INT_LIMITS"]
