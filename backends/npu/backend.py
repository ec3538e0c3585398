"""The reference NPU's backend: what it claims, how each claimed IR instruction becomes a tiled kernel, and the
compiled function (a program, its DRAM image, the simulator that runs it, its statistics).

Device DRAM holds the memory plan's three regions (constant, mutable, activation) one after the other, then the
*packed* constants the compiler made: weights laid out for the array ([group block][kh][kw][C][F], block-diagonal
for merged groups), per-channel zero points and (m, shift) requantization tables. Tensors of rank 4 live
channels-last (NHWC: a pixel's channels are contiguous, so a DMA row is a run of pixels) at their planned
addresses; other ranks are row-major. The host side (``execute``) writes inputs and reads outputs in that layout.
"""
from __future__ import annotations

import time

import numpy as np

from glow_core.backend import Backend, CompiledFunction, NodeInfo, Unsupported
from glow_core.errors import GlowError, MemoryLimitError, UnsupportedOpError
from glow_core.ir import IRFunction
from glow_core.memory import align_up
from glow_core.tiling import Tiling
from glow_core.ops.primitives.linalg import window_sums
from glow_core.ops.primitives.quantized import fixed_point_multiplier, real_multiplier

from . import isa
from .config import NpuConfig
from .kernels import ConvJob, CopyJob, DwJob, EltJob, PoolJob, cdiv, qadd_params
from .sim import Simulator
from .steps import Stream

Q8 = ("int8", "uint8")
DT = {"int8": "i8", "uint8": "u8", "int32": "i32"}
REQUANTIZING = ("qconv", "qmatmul", "qadd", "qmul", "rescale", "qavg_pool")
CLAIMED = ("qconv", "qmatmul", "qadd", "qmul", "rescale", "qavg_pool", "max_pool", "max", "min", "copy")


class NpuBackend(Backend):
    """The reference NPU: quantized conv (every 2-D geometry: strides, padding, dilation, groups, depthwise),
    matmul, elementwise qadd/qmul/max/min, pooling and requantization, in fixed-point arithmetic; the rest runs
    on ``cpu`` (``fallback_backends``). ``npu_config=`` (an NpuConfig, a dict or a JSON path) sizes the device.

    A scratchpad device built on these pieces (the template's ``device_kind=scratchpad``) subclasses it and sets
    ``CLAIMS`` (the IR ops it runs, each with a job builder in its function's ``JOBS``) and ``FUNCTION`` (its
    ``NpuFunction`` subclass)."""

    name = "npu"
    #: The IR ops the device claims (8-bit operands, fixed-point requantization; see ``is_op_supported``).
    CLAIMS = CLAIMED
    #: The CompiledFunction class ``compile`` builds (None: ``NpuFunction``).
    FUNCTION = None

    def __init__(self, config=None):
        self.config = NpuConfig.of(config)

    def required_options(self):
        """The array requantizes with an integer multiplier and shift only."""
        return {"requant": "fixed_point"}

    def fallback_backends(self):
        return ["cpu"]

    def is_op_supported(self, node_info: NodeInfo):
        op, ins, outs, a = node_info.op, node_info.in_dtypes, node_info.out_dtypes, node_info.attrs
        if op not in self.CLAIMS:
            return Unsupported(f"{self.name} runs {', '.join(sorted(self.CLAIMS))}; {op} runs on the fallback")
        if op == "copy":
            return True
        if not ins or any(d not in Q8 for d in ins[:2 if op in ("qadd", "qmul", "max", "min", "qmatmul") else 1]):
            return Unsupported(f"{op} on {', '.join(ins) or 'nothing'}: the NPU computes on 8-bit integers (int8, "
                               f"uint8)")
        if op in ("max", "min") and ins[0] != ins[1]:
            return Unsupported(f"{op} of {ins[0]} and {ins[1]}: the operands must have one dtype")
        if op in REQUANTIZING and outs and outs[0] not in ("int32",) + Q8:
            return Unsupported(f"{op} to {outs[0]}: the NPU writes int8, uint8 or an int32 accumulator")
        if op in REQUANTIZING and a.get("requant", "float32") != "fixed_point" and not (
                op in ("qconv", "qmatmul") and outs and outs[0] == "int32"):
            return Unsupported(f"{op} with requant={a.get('requant', 'float32')!r}: the NPU requantizes in fixed "
                               f"point only (compile with requant='fixed_point')")
        if op in ("qadd", "qmul", "rescale") and outs and outs[0] == "int32":
            return Unsupported(f"{op} to int32: the NPU writes 8-bit results")
        if op == "qconv":
            if ins[1:2] and ins[1] != "int8":
                return Unsupported(f"qconv with {ins[1]} weights: the NPU takes int8 weights")
            if len(a.get("strides", ())) not in (1, 2, 3):
                return Unsupported("qconv over more than 3 spatial dimensions")
        if op in ("qavg_pool", "max_pool") and len(a.get("kernel", ())) not in (1, 2, 3):
            return Unsupported(f"{op} over more than 3 spatial dimensions")
        if op == "qmatmul" and node_info.in_shapes and len(node_info.in_shapes[0]) != 2:
            return Unsupported(f"qmatmul of rank {len(node_info.in_shapes[0])}: the NPU multiplies matrices (rank "
                               f"2; tensors of rank 3 and more are channels-last on the device)")
        return True

    def instruction_groups(self, function: IRFunction):
        """Each ``qconv`` with the ``qadd`` reading its result (a ResNet block's residual add): one kernel, the
        add in the conv's epilogue (``residual_groups``)."""
        return residual_groups(function)

    def compile(self, function: IRFunction, options) -> CompiledFunction:
        cfg = NpuConfig.of(options.get("npu_config", self.config))
        return (self.FUNCTION or NpuFunction)(function, cfg)

    def merge_stats(self, stats):
        """The partitions' statistics summed: cycles, MACs, DRAM bytes, busy cycles; layers concatenated."""
        if len(stats) == 1:
            return stats[0]
        out = {"cycles": sum(s["cycles"] for s in stats), "macs": sum(s["macs"] for s in stats),
               "dram_bytes": sum(s["dram_bytes"] for s in stats), "layers": [x for s in stats for x in s["layers"]],
               "busy": {e: sum(s["busy"][e] for s in stats) for e in isa.ENGINES},
               "instructions": sum(s["instructions"] for s in stats), "partitions": len(stats)}
        cfg = stats[0]["config"]
        out["config"] = cfg
        out["mac_utilization"] = out["macs"] / max(1, out["cycles"] * cfg["mac_rows"] * cfg["mac_cols"])
        out["bound_cycles"] = sum(s["bound_cycles"] for s in stats)
        return out


# -- compilation ---------------------------------------------------------------------------------------------
def residual_groups(irf: IRFunction) -> list:
    """[qconv, qadd] pairs the NPU runs as one kernel: the qadd reads the qconv's 8-bit result C (its only reader;
    C no output of the function, written by the conv alone) and a value B computed before the conv (or a
    constant or input), and writes an 8-bit Y that is not an operand of the conv (Y may be C itself: the add in
    place; C is never stored then). No instruction between the two touches B or Y (the group runs at the conv's
    place), and the memory plan keeps all of them live over the pair (``Backend.instruction_groups``). One pass
    over the code."""
    code = irf.code
    touch: dict = {}  # id(root) -> indices of the instructions naming it, in order
    for i, ins in enumerate(code):
        for b, _ in ins.operands:
            t = touch.setdefault(id(b.root), [])
            if not t or t[-1] != i:
                t.append(i)
    outputs = {id(b.root) for b in irf.outputs.values()}
    groups = []
    for i, conv in enumerate(code):
        if conv.op != "qconv" or len(conv.outs) != 1 or conv.outs[0].type.dtype.name not in Q8:
            continue
        c = conv.outs[0].root
        at = touch[id(c)]
        if id(c) in outputs or len(at) < 2 or at[0] != i:
            continue
        j = at[1]
        add = code[j]
        if add.op != "qadd" or add.outs[0].type.dtype.name not in Q8 or add.ins[0].root is add.ins[1].root:
            continue
        if not any(b.root is c for b in add.ins):
            continue
        y = add.outs[0].root
        if y is not c and len(at) != 2:  # C has another reader (when y is c, later uses are y's)
            continue
        other = add.ins[1] if add.ins[0].root is c else add.ins[0]
        if other.type.dtype.name not in Q8 or not (other.type.shape == add.outs[0].type.shape == conv.outs[0].type.shape):
            continue
        if any(b.root is y for b in conv.ins):
            continue
        if any(i < k < j for r in (other.root, y) for k in touch.get(id(r), ())):
            continue
        groups.append([conv, add])
    return groups


def nhwc_order(shape):
    """The device order of a tensor's axes: channels-last ([N, *spatial, C]) for rank 3 and more."""
    r = len(shape)
    return (0, *range(2, r), 1) if r >= 3 else tuple(range(r))


def geometry3(sp, k, strides, dilations, pads):
    """1-, 2- or 3-D window geometry as 3-D: ((D, H, W), (kd, kh, kw), (sd, sh, sw), (dd, dh, dw), (pf, pt, pl)),
    missing leading dimensions of extent 1."""
    n = len(sp)
    lead = 3 - n
    return ((1,) * lead + tuple(sp), (1,) * lead + tuple(k), (1,) * lead + tuple(strides),
            (1,) * lead + tuple(dilations), (0,) * lead + tuple(pads[:n]))


def to_device(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(a, nhwc_order(a.shape)))


def from_device(raw: np.ndarray, shape) -> np.ndarray:
    order = nhwc_order(shape)
    return np.transpose(raw.reshape([shape[i] for i in order]), np.argsort(order))


def const_value(b) -> "np.ndarray | None":
    """The value of a constant buffer (a view of one included), else None."""
    if b.region != "constant":
        return None
    root = b.root
    raw = np.ascontiguousarray(root.data).reshape(-1).view(np.uint8)
    off = b.address - root.offset
    return raw[off:off + b.type.nbytes].view(b.type.dtype.np).reshape(b.type.shape)


class Layer:
    """One IR instruction (or fused group) on the device: its kernel jobs with their tilings, MACs and the bytes
    its operands occupy (for the roofline bound)."""

    def __init__(self, name, op, instr, macs, nbytes):
        self.name, self.op, self.instr, self.macs, self.nbytes = name, op, instr, macs, nbytes
        self.jobs = []  # (job, tiling)
        self.tiling = None  # the tiling its builder chose, shared by its jobs (None: planned at emission)


class NpuFunction(CompiledFunction):
    """The compiled program for one IR function: ``program`` (decoded instructions), ``binary`` (its encoding),
    ``layers`` (with the tilings chosen), the DRAM image, and a Simulator to run it on.

    Hooks a scratchpad device built on it overrides, one piece at a time: ``JOBS`` (the instruction emitter: IR
    op -> job builder), ``tiling(job)`` (the tile sizes, loop order and scratchpad placement of a job),
    ``encode`` / ``decode`` (the binary) and ``SIMULATOR`` (what runs the program)."""

    #: IR op -> ``builder(fn, ins, fused, layer) -> [job, ...]``: the jobs computing instruction ``ins`` (``fused``:
    #: the qadd of its residual group, else None; a builder sets ``layer.macs``). A job has ``plan()`` (a
    #: ``glow_core.tiling.Tiling``) and ``emit(tiling, stream, layer_name)`` (its ``steps.Step``s); the jobs of
    #: one instruction share the first one's tiling.
    JOBS = {
        "qconv": lambda fn, ins, fused, layer: fn._conv(ins, fused, layer),
        "qmatmul": lambda fn, ins, fused, layer: fn._matmul(ins, layer),
        "qavg_pool": lambda fn, ins, fused, layer: [fn._pool(ins)],
        "max_pool": lambda fn, ins, fused, layer: [fn._pool(ins)],
        **{op: (lambda fn, ins, fused, layer: [fn._elementwise(ins)]) for op in ("qadd", "qmul", "rescale", "max",
                                                                                 "min")},
        "copy": lambda fn, ins, fused, layer: [CopyJob(ins.name, ins.outs[0].type.nbytes, fn.addr(ins.ins[0]),
                                                       fn.addr(ins.outs[0]), fn.cfg)],
    }
    #: The machine the program runs on: ``SIMULATOR(config).run(program, dram, functional=..., check_hazards=...)``
    #: returns ``sim.SimStats``.
    SIMULATOR = Simulator

    def __init__(self, irf: IRFunction, cfg: NpuConfig):
        self.irf, self.cfg = irf, cfg
        plan = irf.plan
        self.base = {"constant": 0}
        self.base["mutable"] = align_up(plan.constant_size)
        self.base["activation"] = self.base["mutable"] + align_up(plan.mutable_size)
        self.packed_base = self.base["activation"] + align_up(plan.activations_size)
        self.packed = bytearray()
        self.layers: list[Layer] = []
        self._device_consts: dict = {}
        stream = Stream()
        self._compile(stream)
        self.program = stream.program()
        self.binary = self.encode(self.program)
        self.program = self.decode(self.binary)  # the device runs what the binary says
        self._tag_layers(stream)
        size = self.packed_base + align_up(len(self.packed))
        if size > cfg.dram_bytes:
            raise MemoryLimitError(f"NPU '{irf.name}': DRAM needs {size} bytes (constant {plan.constant_size}, "
                                   f"mutable {plan.mutable_size}, activations {plan.activations_size}, packed "
                                   f"weights {len(self.packed)}) but the device has {cfg.dram_bytes}")
        self.dram = np.zeros(size, np.uint8)
        self.dram[:plan.constant_size] = np.frombuffer(irf.constant_blob(), np.uint8)
        for b, arr in self._device_consts.values():
            a = self.addr(b)
            self.dram[a:a + arr.nbytes] = arr.reshape(-1).view(np.uint8)
        self.dram[self.packed_base:self.packed_base + len(self.packed)] = np.frombuffer(bytes(self.packed), np.uint8)
        self.sim = self.SIMULATOR(cfg)
        self._stats = None
        self._layer_of = {l.name: l for l in self.layers}

    def _tag_layers(self, stream):
        tags = []
        for i, s in enumerate(stream.steps):
            layer = next((x.layer for x in s.loads + s.computes + s.stores), "")
            n = max(1, len(s.loads)) + max(1, len(s.computes)) + max(1, len(s.stores))
            tags += [layer] * n
        for insn, tag in zip(self.program, tags):
            insn.layer = tag

    # -- addresses and packed constants -------------------------------------------------------------------
    def addr(self, b) -> int:
        return self.base[b.region] + b.address

    def pack(self, arr: np.ndarray) -> int:
        """Append ``arr`` to the packed constants (64-byte aligned); its DRAM address."""
        pad = align_up(len(self.packed)) - len(self.packed)
        self.packed += b"\0" * pad
        at = self.packed_base + len(self.packed)
        self.packed += np.ascontiguousarray(arr).tobytes()
        return at

    def device_const(self, b):
        """A constant data operand of rank 3 or more: its bytes rewritten channels-last in the DRAM image."""
        if b.region == "constant" and len(b.type.shape) >= 3 and id(b) not in self._device_consts:
            self._device_consts[id(b)] = (b, to_device(const_value(b)))

    def _need_const(self, ins, b, what):
        v = const_value(b)
        if v is None:
            raise UnsupportedOpError(f"instruction '{ins.name}' ({ins.op}): the NPU needs {what} as a constant "
                                     f"(the compiler derives the device's tables from it)")
        return v

    # -- the kernels ----------------------------------------------------------------------------------------
    def _compile(self, stream: Stream):
        fused_with = {id(g[0]): g[1] for g in self.irf.groups}
        absorbed = {id(g[1]) for g in self.irf.groups}
        for ins in self.irf.code:
            if id(ins) in absorbed:
                continue
            stream.barrier()
            fused = fused_with.get(id(ins))
            if fused is not None:
                self._check_group(ins, fused)
            layer = self._layer(ins, fused)
            self.layers.append(layer)
            tiling, count = layer.tiling, {}
            for job in layer.jobs_todo:  # group blocks: one job each, all alike, one tiling
                tiling = tiling or self.tiling(job)
                layer.jobs.append((job, tiling))
                if isinstance(job, ConvJob):
                    job.emit(tiling, stream, layer.name, count)
                else:
                    job.emit(tiling, stream, layer.name)

    def tiling(self, job) -> Tiling:
        """The tiling of ``job``: tile sizes, loop order and each buffer's scratchpad offsets. Default: the job's
        own ``plan()``, ``glow_core.tiling.plan`` over its loop nest, buffers and analytical cost with the config's
        scratchpads."""
        return job.plan()

    def encode(self, program) -> bytes:
        """The program's binary (``isa.encode_program``: 64-byte words)."""
        return isa.encode_program(program)

    def decode(self, binary: bytes) -> list:
        """The instructions of a binary (``isa.decode_program``)."""
        return isa.decode_program(binary)

    def _check_group(self, conv, add):
        """The memory plan kept the group's buffers apart (``instruction_groups``): the add's result overlaps
        no operand of the conv, and its other operand only exactly."""
        y = add.outs[0]
        lo, hi = self.addr(y), self.addr(y) + y.type.nbytes
        other = add.ins[1] if add.ins[0].root is conv.outs[0].root else add.ins[0]
        for b in conv.ins + [other]:
            bl = self.addr(b)
            if b.region != "constant" and bl < hi and lo < bl + b.type.nbytes and not (
                    b is other and bl == lo and b.type.nbytes == y.type.nbytes):
                raise GlowError(f"NPU '{self.irf.name}': the memory plan placed '{add.name}''s result over "
                                f"'{b.name}', which the fused group '{conv.name}+{add.name}' still reads")

    def _layer(self, ins, fused=None) -> Layer:
        op = ins.op
        nbytes = sum(b.type.nbytes for b in ins.ins + ins.outs)
        name = ins.name if fused is None else f"{ins.name}+{fused.name}"
        if fused is not None:
            nbytes += sum(b.type.nbytes for b in fused.ins + fused.outs) - 2 * ins.outs[0].type.nbytes
        layer = Layer(name, op if fused is None else f"{op}+qadd", ins, 0, nbytes)
        build = self.JOBS.get(op)
        if build is None:
            raise UnsupportedOpError(f"instruction '{ins.name}': no job builder for {op} (the emitter has "
                                     f"{', '.join(sorted(self.JOBS))})")
        layer.jobs_todo = list(build(self, ins, fused, layer))
        if fused is not None and not any(getattr(j, "residual", None) for j in layer.jobs_todo):
            raise GlowError(f"instruction '{ins.name}' ({op}): its job builder ignored the residual '{fused.name}' "
                            f"(qadd) of its instruction group; compute it in the jobs' epilogue (ConvJob.residual) or "
                            f"return no such group from the backend's instruction_groups")
        return layer

    def _requant_table(self, ins, x_scale, w_scale, out_scale, f):
        reals = [real_multiplier(x_scale, s, out_scale=out_scale) for s in np.broadcast_to(w_scale, (f,))]
        return self.pack(np.array([fixed_point_multiplier(r) for r in reals], np.int32).reshape(-1))

    def _conv(self, ins, fused, layer):
        cfg = self.cfg
        a = ins.attrs
        x, w, bias, ws, wo = ins.ins
        y = ins.outs[0]
        N, C = x.type.shape[:2]
        wv = self._need_const(ins, w, "the weights")
        F, Cg = wv.shape[:2]
        (D, H, W), (kd, kh, kw), (sd, sh, sw), (dd, dh, dw), (pf, pt, pl) = geometry3(
            x.type.shape[2:], wv.shape[2:], a["strides"], a["dilations"], a["pads"])
        wv = wv.reshape(F, Cg, kd, kh, kw)
        wsv = self._need_const(ins, ws, "the weight scales").reshape(-1)
        wov = np.broadcast_to(self._need_const(ins, wo, "the weight offsets").reshape(-1), (F,)).astype(np.int64)
        if wov.min() < -128 or wov.max() > 127:
            raise UnsupportedOpError(f"instruction '{ins.name}' (qconv): weight offsets outside int8 "
                                     f"[{wov.min()}, {wov.max()}]")
        OD, OH, OW = (1,) * (5 - len(y.type.shape)) + tuple(y.type.shape[2:])
        g = a["group"]
        Fg = F // g
        layer.macs = N * F * OD * OH * OW * Cg * kd * kh * kw
        # merge gb groups into one block-diagonal GEMM when a group is narrower than the array
        best = None
        for gb in (d for d in range(1, g + 1) if g % d == 0):
            if gb > 1 and gb * Cg > max(cfg.mac_rows, Cg) * 4:
                continue
            c = (g // gb) * cdiv(kw * gb * Cg, cfg.mac_rows) * cdiv(gb * Fg, cfg.mac_cols)
            if best is None or c < best[0]:
                best = (c, gb)
        gb = best[1]
        Kb, Nb = gb * Cg, gb * Fg
        ydt = DT[y.type.dtype.name]
        i32 = ydt == "i32"
        table_all = None if i32 else self._requant_table(ins, a["x_scale"], wsv, a["out_scale"], F)
        bias_addr = self.addr(bias)
        r = None
        if fused is not None:
            other = fused.ins[1] if fused.ins[0].root is y.root else fused.ins[0]
            qa = fused.attrs
            conv_is_a = fused.ins[0].root is y.root
            p = qadd_params(qa["a_scale"], qa["b_scale"], qa["out_scale"], fused.ins[0].type.dtype,
                            fused.ins[1].type.dtype)
            r = dict(dt=DT[other.type.dtype.name],
                     conv_is_a=conv_is_a, a_zp=int(qa["a_offset"]), b_zp=int(qa["b_offset"]), L=p["L"],
                     ma=p["ma"], mb=p["mb"], mo=p["mo"], out_zp=int(qa["out_offset"]), lo=qa.get("clamp_min"),
                     hi=qa.get("clamp_max"), ydt=DT[fused.outs[0].type.dtype.name], conv_dt=ydt)
            self.device_const(other)
        geometry = dict(H=H, W=W, OH=OH, OW=OW, kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, pt=pt, pl=pl, D=D, OD=OD,
                        kd=kd, sd=sd, dd=dd, pf=pf, x_plane=H * W * C)
        ex = 4 if i32 else 1
        sp_in, sp_out = D * H * W * C, OD * OH * OW * F

        def gemm_job(blk, w_addr, zp_addr):
            g0 = blk * gb
            f0 = g0 * Fg
            job = ConvJob(
                name=ins.name, images=N, K=Kb, N=Nb, y_plane=OH * OW * F, **geometry,
                x_addr=[self.addr(x) + img * sp_in + g0 * Cg for img in range(N)], x_row=W * C, x_pix=C,
                xdt=DT[x.type.dtype.name], xzp=int(a["x_offset"]), w_addr=[w_addr] * N, w_row=Nb, wdt="i8",
                w_zp=zp_addr, bias=bias_addr + 4 * f0, table=None if i32 else table_all + 8 * f0,
                y_addr=[self.addr(y) + ex * (img * sp_out + f0) for img in range(N)], y_row=OW * F, y_pix=F,
                ydt=ydt, out_zp=int(a["out_offset"]), lo=a.get("clamp_min"), hi=a.get("clamp_max"),
                macs=N * Fg * gb * OD * OH * OW * Cg * kd * kh * kw, cfg=cfg)
            if r is not None:
                rr = dict(r)
                rr["addr"] = [self.addr(other) + img * sp_out + f0 for img in range(N)]
                rr["row"], rr["pix"] = OW * F, F
                rr["y_addr"] = [self.addr(fused.outs[0]) + img * sp_out + f0 for img in range(N)]
                job.residual = rr
            return job

        # the cost model chooses: block-diagonal GEMMs on the array, or (depthwise) the vector unit
        layer.tiling = self.tiling(gemm_job(0, 0, 0))
        bv = const_value(bias)
        if fused is None and not i32 and Cg == 1 and Fg == 1 and bv is not None:
            xzp = int(a["x_offset"])
            wd = wv.reshape(F, kd * kh * kw).astype(np.int64) - wov[:, None]  # (w - w_zp), per channel and tap
            dwj = DwJob(name=ins.name, images=N, C=C, **geometry, x_addr=[self.addr(x) + img * sp_in for img in range(N)],
                        x_row=W * C, xdt=DT[x.type.dtype.name], xzp=xzp, w=0, bias=0, table=table_all,
                        y_addr=[self.addr(y) + img * sp_out for img in range(N)], y_row=OW * F, y_plane=OH * OW * F,
                        ydt=ydt, out_zp=int(a["out_offset"]), lo=a.get("clamp_min"), hi=a.get("clamp_max"),
                        macs=layer.macs, cfg=cfg)
            t_dw = self.tiling(dwj)
            if t_dw.cost < layer.tiling.cost * (g // gb):
                dwj.w = self.pack(np.ascontiguousarray(wd.T).astype(np.int32))
                b2 = bv.astype(np.int64) - xzp * wd.sum(axis=1)  # the padding (x_offset) then adds exactly 0
                dwj.bias = self.pack(((b2 + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32))
                layer.tiling = t_dw
                return [dwj]
        jobs = []
        for blk in range(g // gb):
            g0 = blk * gb
            packed = np.empty((kd, kh, kw, Kb, Nb), np.int8)
            packed[...] = wov[g0 * Fg:(g0 + gb) * Fg].astype(np.int8)  # off the diagonal blocks (w - zp) = 0
            for q in range(gb):
                fs = slice((g0 + q) * Fg, (g0 + q + 1) * Fg)
                packed[:, :, :, q * Cg:(q + 1) * Cg, q * Fg:(q + 1) * Fg] = np.transpose(wv[fs], (2, 3, 4, 1, 0))
            jobs.append(gemm_job(blk, self.pack(packed), self.pack(wov[g0 * Fg:(g0 + gb) * Fg].astype(np.int32))))
        return jobs

    def _matmul(self, ins, layer):
        cfg = self.cfg
        a_, b_, bias, bs, bo = ins.ins
        y = ins.outs[0]
        at = ins.attrs
        shape = a_.type.shape
        if len(shape) != 2:
            raise UnsupportedOpError(f"instruction '{ins.name}' (qmatmul): rank {len(shape)} (the NPU multiplies "
                                     f"matrices)")
        M, K = shape
        Nn = b_.type.shape[-1]
        batch = 1
        layer.macs = batch * M * K * Nn
        bsv = self._need_const(ins, bs, "the scales of B").reshape(-1)
        bov = np.broadcast_to(self._need_const(ins, bo, "the offsets of B").reshape(-1), (Nn,)).astype(np.int64)
        if bov.min() < -256 or bov.max() > 255:
            raise UnsupportedOpError(f"instruction '{ins.name}' (qmatmul): B's offsets outside [-256, 255]")
        ydt = DT[y.type.dtype.name]
        i32 = ydt == "i32"
        bval = const_value(b_)
        if bval is not None:
            w_addr = [self.pack(bval.reshape(batch, K, Nn)[i]) for i in range(batch)] if len(b_.type.shape) > 2 \
                else [self.pack(bval)] * batch
        else:
            w_addr = [self.addr(b_) + i * K * Nn for i in range(batch)] if len(b_.type.shape) > 2 \
                else [self.addr(b_)] * batch
        ex = 4 if i32 else 1
        job = ConvJob(
            name=ins.name, images=batch, H=M, W=1, K=K, N=Nn, OH=M, OW=1, kh=1, kw=1, sh=1, sw=1, dh=1, dw=1, pt=0,
            pl=0, x_addr=[self.addr(a_) + i * M * K for i in range(batch)], x_row=K, x_pix=K,
            xdt=DT[a_.type.dtype.name], xzp=int(at["a_offset"]), w_addr=w_addr, w_row=Nn, wdt=DT[b_.type.dtype.name],
            w_zp=self.pack(bov.astype(np.int32)), bias=self.addr(bias),
            table=None if i32 else self._requant_table(ins, at["a_scale"], bsv, at["out_scale"], Nn),
            y_addr=[self.addr(y) + ex * i * M * Nn for i in range(batch)], y_row=Nn, y_pix=Nn, ydt=ydt,
            out_zp=int(at["out_offset"]), lo=at.get("clamp_min"), hi=at.get("clamp_max"), macs=layer.macs, cfg=cfg)
        return [job]

    def _pool(self, ins):
        a = ins.attrs
        x, y = ins.ins[0], ins.outs[0]
        N, C = x.type.shape[:2]
        (D, H, W), (kd, kh, kw), (sd, sh, sw), (dd, dh, dw), (pf, pt, pl) = geometry3(
            x.type.shape[2:], a["kernel"], a["strides"], a["dilations"], a["pads"])
        OD, OH, OW = (1,) * (5 - len(y.type.shape)) + tuple(y.type.shape[2:])
        scales = None
        kind = "max" if ins.op == "max_pool" else "avg"
        if kind == "avg":
            _, cnt = window_sums(np.ones((1, 1) + tuple(x.type.shape[2:])), a["kernel"], a["strides"],
                                 a["dilations"], a["pads"], a["count_include_pad"])
            cnt = cnt.reshape(OD, OH, OW)
            cache = {}
            scales = [[[cache.setdefault(c, fixed_point_multiplier(real_multiplier(
                a["x_scale"], out_scale=float(a["out_scale"]) * c))) for c in row] for row in plane]
                for plane in cnt.tolist()]
        dt = DT[x.type.dtype.name]
        return PoolJob(
            name=ins.name, images=N, H=H, W=W, C=C, OH=OH, OW=OW, kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, pt=pt,
            pl=pl, D=D, OD=OD, kd=kd, sd=sd, dd=dd, pf=pf, x_plane=H * W * C, y_plane=OH * OW * C,
            x_addr=[self.addr(x) + i * D * H * W * C for i in range(N)], x_row=W * C, x_pix=C, xdt=dt,
            y_addr=[self.addr(y) + i * OD * OH * OW * C for i in range(N)], y_row=OW * C, y_pix=C,
            ydt=DT[y.type.dtype.name], kind=kind, xzp=int(a.get("x_offset", 0)), out_zp=int(a.get("out_offset", 0)),
            scales=scales, cfg=self.cfg)

    def _elementwise(self, ins):
        a = ins.attrs
        x = ins.ins[0]
        y = ins.outs[0]
        for b in ins.ins:
            self.device_const(b)
        count = x.type.numel
        op = ins.op
        b = ins.ins[1] if len(ins.ins) > 1 else None
        if op == "qadd":
            p = qadd_params(a["a_scale"], a["b_scale"], a["out_scale"], x.type.dtype, b.type.dtype)
            p.update(a_zp=int(a["a_offset"]), b_zp=int(a["b_offset"]), out_zp=int(a["out_offset"]),
                     lo=a.get("clamp_min"), hi=a.get("clamp_max"))
        elif op == "qmul":
            p = dict(a_zp=int(a["a_offset"]), b_zp=int(a["b_offset"]), out_zp=int(a["out_offset"]),
                     m=fixed_point_multiplier(real_multiplier(a["a_scale"], a["b_scale"], out_scale=a["out_scale"])),
                     lo=a.get("clamp_min"), hi=a.get("clamp_max"))
        elif op == "rescale":
            p = dict(a_zp=int(a["in_offset"]), out_zp=int(a["out_offset"]),
                     m=fixed_point_multiplier(real_multiplier(a["in_scale"], out_scale=a["out_scale"])))
        else:
            p = {}
        return EltJob(ins.name, op, count, self.addr(x), DT[x.type.dtype.name],
                      None if b is None else self.addr(b), None if b is None else DT[b.type.dtype.name],
                      self.addr(y), DT[y.type.dtype.name], p, self.cfg)

    # -- running ------------------------------------------------------------------------------------------
    def memory_regions(self):
        """The device DRAM's three planned regions (views of the DRAM image)."""
        p = self.irf.plan
        return {"constant": self.dram[:p.constant_size],
                "mutable": self.dram[self.base["mutable"]:self.base["mutable"] + p.mutable_size],
                "activation": self.dram[self.base["activation"]:self.base["activation"] + p.activations_size]}

    def _run(self, inputs, timed):
        for name, b in self.irf.inputs.items():
            raw = to_device(np.asarray(inputs[name], b.type.dtype.np)).reshape(-1).view(np.uint8)
            a = self.addr(b)
            self.dram[a:a + raw.size] = raw
        st = self.sim.run(self.program, self.dram, functional=True)
        self._stats = st
        outs = {}
        for name, b in self.irf.outputs.items():
            a = self.addr(b)
            raw = self.dram[a:a + b.type.nbytes].view(b.type.dtype.np)
            outs[name] = from_device(raw, b.type.shape).copy()
        return outs, st

    def execute(self, inputs):
        return self._run(inputs, False)[0]

    def execute_timed(self, inputs):
        """Every device instruction's span, on the track of its engine ("load", "compute", "store"), in device
        time (cycles / clock_hz); consecutive instructions of one layer on one engine are one span."""
        outs, st = self._run(inputs, True)
        hz = self.cfg.clock_hz
        timings, cur = [], None
        by_name = {l.name: l.instr for l in self.layers}
        for pc, eng, s, e in sorted(st.events, key=lambda ev: (ev[1], ev[2])):
            if e == s:
                continue
            layer = self.program[pc].layer
            if cur is not None and cur[0] == eng and cur[1] == layer and s <= cur[3]:
                cur[3] = max(cur[3], e)
                continue
            if cur is not None:
                timings.append((by_name.get(cur[1], self.layers[0].instr), cur[2] / hz, (cur[3] - cur[2]) / hz,
                                cur[0]))
            cur = [eng, layer, s, e]
        if cur is not None:
            timings.append((by_name.get(cur[1], self.layers[0].instr), cur[2] / hz, (cur[3] - cur[2]) / hz, cur[0]))
        return outs, timings

    def stats(self) -> dict:
        """``cycles``, ``macs``, ``mac_utilization``, ``dram_bytes``, ``busy`` (cycles per engine), ``bound_cycles``,
        ``instructions`` and ``layers``: per layer ``name``, ``op``, ``cycles`` (from the previous layer's end to
        its own), ``bound_cycles`` (max(MACs / (rows * cols), operand bytes / DMA bytes per cycle)), ``macs``,
        ``dram_bytes`` and its ``tiling``. Timed by a run of the timed simulator (the last run's, if any)."""
        st = self._stats or self.sim.run(self.program, None, functional=False, check_hazards=False)
        cfg = self.cfg
        ends: dict = {}
        dram: dict = {}
        for pc, eng, s, e in st.events:
            insn = self.program[pc]
            ends[insn.layer] = max(ends.get(insn.layer, 0), e)
            if insn.op in ("LOAD", "STORE"):
                f = insn.f
                dram[insn.layer] = dram.get(insn.layer, 0) + f["n2"] * f["n1"] * f["n0"] * (4 if f["dt"] == 2 else 1)
        layers, prev = [], 0
        for l in self.layers:
            end = ends.get(l.name, prev)
            bound = max(l.macs / cfg.macs_per_cycle, l.nbytes / cfg.dma_bytes_per_cycle)
            layers.append({"name": l.name, "op": l.op, "cycles": int(end - prev), "bound_cycles": float(bound),
                           "macs": int(l.macs), "dram_bytes": int(dram.get(l.name, 0)),
                           "tiling": "; ".join(t.describe() for _, t in l.jobs[:1])
                           + (f" (x{len(l.jobs)} group blocks)" if len(l.jobs) > 1 else "")})
            prev = max(prev, end)
        macs = sum(l.macs for l in self.layers)
        return {"cycles": int(st.cycles), "macs": int(macs),
                "mac_utilization": macs / max(1, st.cycles * cfg.macs_per_cycle),
                "dram_bytes": int(st.dram_bytes), "busy": dict(st.busy), "instructions": len(self.program),
                "bound_cycles": float(sum(x["bound_cycles"] for x in layers)), "layers": layers,
                "config": cfg.to_dict()}

    def describe(self) -> str:
        """The layers with their kernels' tilings (``glowc dump``)."""
        lines = [f"npu program for {self.irf.name}: {len(self.program)} instructions, {len(self.binary)} bytes, "
                 f"packed constants {len(self.packed)} bytes"]
        for l in self.layers:
            for job, t in l.jobs:
                lines.append(f"  {l.name} ({l.op}): {type(job).__name__} {t.describe()}")
        return "\n".join(lines)

    @property
    def source(self) -> str:
        """What ``glowc dump --source`` prints: each layer's kernel and its tiling."""
        return self.describe()

    def asm(self) -> str:
        """The program as assembly text (``glowc dump --asm``)."""
        return isa.disassemble(self.program)
