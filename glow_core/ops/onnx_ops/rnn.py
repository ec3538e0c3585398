"""Recurrent ONNX ops: RNN, GRU, LSTM, unrolled over the static sequence length.

Each direction runs a Python loop over time steps emitting matmul, slice and
elementwise primitives; the input projection X @ W^T is one matmul for all
steps. ``layout=1`` (batch-major) is handled with transposes around the
time-major computation. With ``sequence_lens`` (forward direction), steps past a
sequence's length keep the previous state and write zeros to Y.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..registry import onnx_op

#: Longest sequence the unrolled RNN lowerings accept (each step is a few nodes).
MAX_STEPS = 1 << 16


def _str(s):
    return s.decode() if isinstance(s, bytes) else s


def _act(b, name, x, alpha, beta):
    """One ONNX RNN activation function written with primitives."""
    n = _str(name).lower()

    def c(v):
        return b.scalar_like(v, x)
    if n == "sigmoid":
        return b.sigmoid(x)
    if n == "tanh":
        return b.tanh(x)
    if n == "relu":
        return b.max(x, c(0))
    if n == "leakyrelu":
        a = 0.01 if alpha is None else alpha
        return b.select(b.ge(x, c(0)), x, b.mul(x, c(a)))
    if n == "thresholdedrelu":
        a = 1.0 if alpha is None else alpha
        return b.select(b.gt(x, c(a)), x, c(0))
    if n == "scaledtanh":
        a, bb = (1.0 if alpha is None else alpha), (1.0 if beta is None else beta)
        return b.mul(c(a), b.tanh(b.mul(x, c(bb))))
    if n == "hardsigmoid":
        a, bb = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        return b.max(c(0), b.min(c(1), b.add(b.mul(x, c(a)), c(bb))))
    if n == "elu":
        a = 1.0 if alpha is None else alpha
        return b.select(b.ge(x, c(0)), x, b.mul(c(a), b.sub(b.exp(x), c(1))))
    if n == "softsign":
        return b.div(x, b.add(c(1), b.abs(x)))
    if n == "softplus":
        return b.log(b.add(b.exp(x), c(1)))
    if n == "affine":
        a, bb = (1.0 if alpha is None else alpha), (0.0 if beta is None else beta)
        return b.add(b.mul(x, c(a)), c(bb))
    raise ShapeError(f"{b.where}: activation '{n}' is not supported; accepted: Sigmoid, Tanh, Relu, LeakyRelu, "
                     f"ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus, Affine")


def _cols(b, x, i, h):
    """Gate block i (columns i*h..(i+1)*h) of a [B, G*h] matrix."""
    return b.slice(x, starts=[0, i * h], ends=[x.shape[0], (i + 1) * h], steps=[1, 1])


def _check(b, what, v, want, meaning):
    """Raise a ShapeError naming optional input ``what`` unless its shape is ``want`` (it may be absent)."""
    if v is not None and tuple(v.shape) != tuple(want):
        raise ShapeError(f"{b.where}: {what} has shape {tuple(v.shape)}, expected {tuple(want)} ({meaning})")


def _dir(b, x, d):
    """Direction d of a [D, ...] tensor, without the direction axis."""
    s = b.slice(x, starts=[d] + [0] * (x.rank - 1), ends=[d + 1] + list(x.shape[1:]), steps=[1] * x.rank)
    return b.reshape_(s, x.shape[1:])


class _Rnn:
    """Shared setup of the three recurrent ops: shapes, layout, directions, activations."""

    def __init__(self, b, kind, gates, x, w, r, bias, seq_lens, init_h, attrs, default_acts):
        self.b = b
        direction = _str(attrs.get("direction") or "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ShapeError(f"{b.where}: direction '{direction}' is not forward, reverse or bidirectional")
        self.dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        self.layout = attrs.get("layout") or 0
        if x.rank != 3:
            raise ShapeError(f"{b.where}: X {x.shape} must be rank 3")
        if self.layout:
            x = b.transpose_(x, (1, 0, 2))
            if init_h is not None:
                init_h = b.transpose_(init_h, (1, 0, 2))
        self.x = x
        self.s, self.n, _ = x.shape
        if not 1 <= self.s <= MAX_STEPS:
            raise ShapeError(f"{b.where}: a sequence of {self.s} steps; the lowering unrolls the recurrence and "
                             f"accepts 1 to {MAX_STEPS} steps")
        h = attrs.get("hidden_size") or (w.shape[1] // gates if w.rank == 3 else 0)
        self.h, self.g = h, gates
        nd = len(self.dirs)
        if w.rank != 3 or w.shape[0] != nd or w.shape[1] != gates * h or r.shape != (nd, gates * h, h):
            raise ShapeError(f"{b.where}: W {w.shape} / R {r.shape} do not match {nd} direction(s), {gates} gates "
                             f"and hidden_size {h}")
        self.w, self.r = w, r
        _check(b, "B (bias)", bias, (nd, 2 * gates * h), f"[num_directions={nd}, 2*{gates}*hidden_size]")
        _check(b, "initial_h", init_h, (nd, self.n, h), f"[num_directions={nd}, batch={self.n}, hidden_size={h}]")
        dt = x.dtype.np
        self.bias = bias if bias is not None else b.const(np.zeros((nd, 2 * gates * h), dtype=dt))
        self.init_h = init_h if init_h is not None else b.const(np.zeros((nd, self.n, h), dtype=dt))
        self.clip = attrs.get("clip")
        acts = [_str(a) for a in (attrs.get("activations") or default_acts * nd)]
        if nd == 1 and len(acts) == 2 * len(default_acts):
            acts = acts[:len(default_acts)]  # RNN's schema default lists both directions' activations
        if len(acts) != len(default_acts) * nd:
            raise ShapeError(f"{b.where}: {len(acts)} activations given; {kind} needs {len(default_acts)} per "
                             f"direction")
        alphas = list(attrs.get("activation_alpha") or [])
        betas = list(attrs.get("activation_beta") or [])
        self.acts = [(a, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None)
                     for i, a in enumerate(acts)]
        self.nacts = len(default_acts)
        self.seq_mask = None
        if seq_lens is not None:
            if seq_lens.is_const and np.all(np.asarray(seq_lens.const) == self.s):
                pass  # every sequence is full length
            elif "reverse" in self.dirs:
                raise ShapeError(f"{b.where}: sequence_lens shorter than the sequence are supported for the "
                                 f"forward direction only")
            else:
                lens = b.reshape_(b.cast_(seq_lens, "int64"), (self.n, 1))
                self.seq_mask = [b.broadcast_to(b.binary("lt", b.const(np.asarray([[t]], dtype=np.int64)), lens),
                                                (self.n, h)) for t in range(self.s)]

    def act(self, d, i, x):
        a, alpha, beta = self.acts[d * self.nacts + i]
        return _act(self.b, a, x, alpha, beta)

    def clipped(self, x):
        if self.clip is None:
            return x
        c = self.b.scalar_like(self.clip, x)
        return self.b.min(self.b.max(x, self.b.neg(c)), c)

    def steps(self, d):
        return range(self.s - 1, -1, -1) if self.dirs[d] == "reverse" else range(self.s)

    def xw(self, d, w):
        """[S, N, G*h] input projections of direction d (w: [G*h, I])."""
        b = self.b
        xs = b.reshape_(self.x, (self.s * self.n, self.x.shape[2]))
        p = b.matmul(xs, b.transpose_(w, (1, 0)))
        return b.reshape_(p, (self.s, self.n, w.shape[0]))

    def at(self, p, t):
        return self.b.reshape_(self.b.slice(p, starts=[t, 0, 0], ends=[t + 1] + list(p.shape[1:]), steps=[1, 1, 1]),
                               p.shape[1:])

    def keep(self, t, new, old):
        """new where step t is inside the sequence, else old (sequence_lens)."""
        if self.seq_mask is None:
            return new
        return self.b.select(self.seq_mask[t], new, old)

    def outputs(self, ys, finals):
        """Y [S, D, N, h] (or batch-major) and final states [D, N, h] from per-direction lists."""
        b = self.b
        per_dir = []
        for d, y in enumerate(ys):
            ordered = [y[t] for t in range(self.s)]
            st = b.concat(*[b.reshape_(v, (1, 1, self.n, self.h)) for v in ordered], axis=0)
            per_dir.append(st)
        y = per_dir[0] if len(per_dir) == 1 else b.concat(*per_dir, axis=1)
        outs = [y]
        for f in finals:
            fs = [b.reshape_(v, (1, self.n, self.h)) for v in f]
            outs.append(fs[0] if len(fs) == 1 else b.concat(*fs, axis=0))
        if self.layout:
            outs = [b.transpose_(outs[0], (2, 0, 1, 3))] + [b.transpose_(o, (1, 0, 2)) for o in outs[1:]]
        return outs

    def y_value(self, t, h):
        if self.seq_mask is None:
            return h
        return self.b.select(self.seq_mask[t], h, self.b.scalar_like(0, h))


@onnx_op("RNN")
def rnn(b, x, w, r, bias=None, sequence_lens=None, initial_h=None, **attrs):
    """H = f(x W^T + H R^T + Wb + Rb) per step, unrolled with matmul and elementwise primitives."""
    m = _Rnn(b, "RNN", 1, x, w, r, bias, sequence_lens, initial_h, attrs, ["Tanh"])
    ys, hs = [], []
    for d in range(len(m.dirs)):
        wd, rd, bd = _dir(b, m.w, d), _dir(b, m.r, d), _dir(b, m.bias, d)
        bsum = b.add(b.slice(bd, starts=[0], ends=[m.h], steps=[1]), b.slice(bd, starts=[m.h], ends=[2 * m.h], steps=[1]))
        p = m.xw(d, wd)
        h = _dir(b, m.init_h, d)
        rt = b.transpose_(rd, (1, 0))
        y = {}
        for t in m.steps(d):
            pre = b.binary("add", b.add(m.at(p, t), b.matmul(h, rt)), bsum)
            h = m.keep(t, m.act(d, 0, m.clipped(pre)), h)
            y[t] = m.y_value(t, h)
        ys.append(y)
        hs.append(h)
    return m.outputs(ys, [hs])


@onnx_op("GRU")
def gru(b, x, w, r, bias=None, sequence_lens=None, initial_h=None, *, linear_before_reset=0, **attrs):
    """Gates z, r, h per step (ONNX order z r h) with matmul/slice/sigmoid/tanh; H = (1-z)*h + z*H."""
    m = _Rnn(b, "GRU", 3, x, w, r, bias, sequence_lens, initial_h, attrs, ["Sigmoid", "Tanh"])
    hh = m.h
    ys, hs = [], []
    for d in range(len(m.dirs)):
        wd, rd, bd = _dir(b, m.w, d), _dir(b, m.r, d), _dir(b, m.bias, d)
        wb = b.reshape_(b.slice(bd, starts=[0], ends=[3 * hh], steps=[1]), (1, 3 * hh))
        rb = b.reshape_(b.slice(bd, starts=[3 * hh], ends=[6 * hh], steps=[1]), (1, 3 * hh))
        p = m.xw(d, wd)
        h = _dir(b, m.init_h, d)
        rt = b.transpose_(rd, (1, 0))  # [h, 3h]
        rt_zr = b.slice(rt, starts=[0, 0], ends=[hh, 2 * hh], steps=[1, 1])
        rt_h = b.slice(rt, starts=[0, 2 * hh], ends=[hh, 3 * hh], steps=[1, 1])
        y = {}
        for t in m.steps(d):
            xp = b.binary("add", m.at(p, t), wb)  # [N, 3h]
            hzr = b.binary("add", b.matmul(h, rt_zr), _cols(b, rb, 0, 2 * hh))
            z = m.act(d, 0, m.clipped(b.add(_cols(b, xp, 0, hh), _cols(b, hzr, 0, hh))))
            rg = m.act(d, 0, m.clipped(b.add(_cols(b, xp, 1, hh), _cols(b, hzr, 1, hh))))
            rbh = _cols(b, rb, 2, hh)
            if linear_before_reset:
                hr = b.mul(rg, b.binary("add", b.matmul(h, rt_h), rbh))
            else:
                hr = b.binary("add", b.matmul(b.mul(rg, h), rt_h), rbh)
            cand = m.act(d, 1, m.clipped(b.add(_cols(b, xp, 2, hh), hr)))
            one = b.scalar_like(1, z)
            new = b.add(b.mul(b.sub(one, z), cand), b.mul(z, h))
            h = m.keep(t, new, h)
            y[t] = m.y_value(t, h)
        ys.append(y)
        hs.append(h)
    return m.outputs(ys, [hs])


@onnx_op("LSTM")
def lstm(b, x, w, r, bias=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, *,
         input_forget=0, **attrs):
    """Gates i, o, f, c per step (ONNX order i o f c) with optional peepholes; C = f*C + i*g(c),
    H = o*h(C); unrolled with matmul/slice/elementwise primitives."""
    m = _Rnn(b, "LSTM", 4, x, w, r, bias, sequence_lens, initial_h, attrs, ["Sigmoid", "Tanh", "Tanh"])
    hh, nd = m.h, len(m.dirs)
    if initial_c is not None and m.layout:
        initial_c = b.transpose_(initial_c, (1, 0, 2))
    _check(b, "initial_c", initial_c, (nd, m.n, hh), f"[num_directions={nd}, batch={m.n}, hidden_size={hh}]")
    _check(b, "P (peepholes)", p, (nd, 3 * hh), f"[num_directions={nd}, 3*hidden_size]")
    if initial_c is None:
        initial_c = b.const(np.zeros((nd, m.n, hh), dtype=x.dtype.np))
    ys, hs, cs = [], [], []
    for d in range(nd):
        wd, rd, bd = _dir(b, m.w, d), _dir(b, m.r, d), _dir(b, m.bias, d)
        bsum = b.reshape_(b.add(b.slice(bd, starts=[0], ends=[4 * hh], steps=[1]),
                                b.slice(bd, starts=[4 * hh], ends=[8 * hh], steps=[1])), (1, 4 * hh))
        peep = None
        if p is not None:
            pd = b.reshape_(_dir(b, p, d), (1, 3 * hh))
            peep = [_cols(b, pd, i, hh) for i in range(3)]  # p_i, p_o, p_f
        proj = m.xw(d, wd)
        h, c = _dir(b, m.init_h, d), _dir(b, initial_c, d)
        rt = b.transpose_(rd, (1, 0))
        y = {}
        for t in m.steps(d):
            g = b.binary("add", b.add(m.at(proj, t), b.matmul(h, rt)), bsum)
            gi, go, gf, gc = (_cols(b, g, i, hh) for i in range(4))
            if peep is not None:
                gi = b.binary("add", gi, b.binary("mul", peep[0], c))
                gf = b.binary("add", gf, b.binary("mul", peep[2], c))
            i_ = m.act(d, 0, m.clipped(gi))
            f_ = b.sub(b.scalar_like(1, i_), i_) if input_forget else m.act(d, 0, m.clipped(gf))
            c_ = m.act(d, 1, m.clipped(gc))
            new_c = b.add(b.mul(f_, c), b.mul(i_, c_))
            if peep is not None:
                go = b.binary("add", go, b.binary("mul", peep[1], new_c))
            o_ = m.act(d, 0, m.clipped(go))
            new_h = b.mul(o_, m.act(d, 2, new_c))
            h, c = m.keep(t, new_h, h), m.keep(t, new_c, c)
            y[t] = m.y_value(t, h)
        ys.append(y)
        hs.append(h)
        cs.append(c)
    return m.outputs(ys, [hs, cs])
