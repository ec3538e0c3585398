"""Linear-algebra ONNX ops: MatMul, Gemm, Einsum."""
from __future__ import annotations

from math import prod

import numpy as np

from ...errors import ShapeError
from ..registry import onnx_op


def batched_matmul(b, x, y):
    """numpy.matmul on two operands of rank >= 2: with a 2-D ``y``, one `matmul` of x's leading dims as rows;
    otherwise broadcast the batch dims, then primitive `matmul`."""
    if x.shape[-1] != y.shape[-2]:
        raise ShapeError(f"{b.where}: inner dims differ: {x.shape} x {y.shape}")
    if y.rank == 2 and x.rank > 2:  # no copy of y per batch
        lead = x.shape[:-1]
        return b.reshape_(b.matmul(b.reshape_(x, (prod(lead), x.shape[-1])), y), lead + (y.shape[-1],))
    batch = b.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    x = b.broadcast_to(x, batch + x.shape[-2:])
    y = b.broadcast_to(y, batch + y.shape[-2:])
    return b.matmul(x, y)


@onnx_op("MatMul")
def matmul(b, a, bm):
    """numpy.matmul: 1-D operands get a unit dim (removed after), batch dims broadcast, primitive `matmul`."""
    if a.rank == 0 or bm.rank == 0:
        raise ShapeError(f"{b.where}: MatMul operands must have rank >= 1, got {a.shape} and {bm.shape}")
    x = b.reshape_(a, (1,) + a.shape) if a.rank == 1 else a
    y = b.reshape_(bm, bm.shape + (1,)) if bm.rank == 1 else bm
    out = batched_matmul(b, x, y)
    shape = list(out.shape)
    if bm.rank == 1:
        shape.pop(-1)
    if a.rank == 1:
        shape.pop(-2 if bm.rank != 1 else -1)
    return b.reshape_(out, shape)


@onnx_op("Gemm")
def gemm(b, a, bm, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    """alpha * op(A) @ op(B) + beta * C with transposes, matmul, mul and add."""
    if transA:
        a = b.transpose(a, perm=[1, 0])
    if transB:
        bm = b.transpose(bm, perm=[1, 0])
    y = b.matmul(a, bm)
    if alpha != 1.0:
        y = b.mul(y, b.scalar_like(alpha, y))
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = b.binary("mul", c, b.scalar_like(beta, c, shape=()))
        y = b.binary("add", y, c)
    return y


# -- Einsum -------------------------------------------------------------------------------------------
def _parse_einsum(b, equation, operands):
    """Terms per operand and output as lists of single-letter labels, '...' expanded to fresh labels."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ShapeError(f"{b.where}: equation '{equation}' has {len(terms)} operands, the node has "
                         f"{len(operands)}")
    n_ell = 0
    parsed = []
    for t, x in zip(terms, operands):
        pre, dots, post = t.partition("...")
        k = x.rank - len(pre) - len(post) if dots else 0
        if k < 0 or (not dots and len(t) != x.rank):
            raise ShapeError(f"{b.where}: term '{t}' does not fit operand of shape {x.shape}")
        n_ell = max(n_ell, k)
        # ellipsis dims are right-aligned across operands: ("ell", m) is the m-th from the right
        parsed.append(list(pre) + [("ell", k - j) for j in range(k)] + list(post))
    ell = [("ell", n_ell - j) for j in range(n_ell)]
    if arrow:
        if "..." in rhs:
            pre, post = rhs.split("...")
            out = list(pre) + ell + list(post)
        else:
            out = list(rhs)
    else:
        counts = {}
        for lab in parsed:
            for c in lab:
                counts[c] = counts.get(c, 0) + 1
        out = ell + sorted(c for c, n in counts.items() if n == 1 and not isinstance(c, tuple))
    return parsed, out


def _diagonal(b, x, labels):
    """Take the diagonal of repeated labels in one operand (reshape + gather on the flattened pair)."""
    while True:
        seen = {}
        pair = None
        for i, c in enumerate(labels):
            if c in seen:
                pair = (seen[c], i)
                break
            seen[c] = i
        if pair is None:
            return x, labels
        i, j = pair
        perm = [k for k in range(x.rank) if k not in (i, j)] + [i, j]
        x = b.transpose_(x, perm)
        n = x.shape[-1]
        if x.shape[-2] != n:
            raise ShapeError(f"{b.where}: repeated label has dims {x.shape[-2]} and {n}")
        x = b.reshape_(x, x.shape[:-2] + (n * n,))
        x = b.gather(x, b.const(np.arange(n, dtype=np.int64) * (n + 1)), axis=x.rank - 1)
        labels = [labels[k] for k in perm[:-2]] + [labels[i]]


def _sum_out(b, x, labels, keep):
    """reduce_sum over labels not in ``keep``."""
    axes = [i for i, c in enumerate(labels) if c not in keep]
    if not axes:
        return x, labels
    x = b.reduce("reduce_sum", x, axes, keepdims=False)
    return x, [c for i, c in enumerate(labels) if i not in axes]


def _contract(b, x, lx, y, ly, keep):
    """Contract two operands over shared labels not in ``keep`` with one batched matmul."""
    sizes = {}
    for v, lab in ((x, lx), (y, ly)):
        for c, s in zip(lab, v.shape):
            if sizes.get(c, 1) != 1 and s != 1 and sizes[c] != s:
                raise ShapeError(f"{b.where}: label sizes differ ({sizes[c]} and {s})")
            sizes[c] = max(sizes.get(c, 1), s)
    batch = [c for c in lx if c in ly and c in keep]
    con = [c for c in lx if c in ly and c not in keep]
    left = [c for c in lx if c not in ly]
    right = [c for c in ly if c not in lx]

    def arrange(v, lab, first, second):
        v = b.transpose_(v, [lab.index(c) for c in batch + first + second])
        v = b.broadcast_to(v, [sizes[c] for c in batch] + list(v.shape[len(batch):]))
        return b.reshape_(v, [sizes[c] for c in batch] + [prod(v.shape[len(batch):len(batch) + len(first)]),
                                                          prod(v.shape[len(batch) + len(first):])])

    # a contracted label of size 1 on one side (broadcast): sum(x * y) = sum(x) * sum(y), sum it out of both
    bcast = {c for c in con if x.shape[lx.index(c)] != y.shape[ly.index(c)]}
    if bcast:
        x, lx = _sum_out(b, x, lx, set(lx) - bcast)
        y, ly = _sum_out(b, y, ly, set(ly) - bcast)
        con = [c for c in con if c not in bcast]
    xm = arrange(x, lx, left, con)
    ym = arrange(y, ly, con, right)
    out = b.matmul(xm, ym)
    shape = [sizes[c] for c in batch] + [x.shape[lx.index(c)] for c in left] + [y.shape[ly.index(c)] for c in right]
    return b.reshape_(out, shape), batch + left + right


@onnx_op("Einsum")
def einsum(b, *operands, equation=""):
    """Per operand: diagonals (gather) and sums of private labels (reduce_sum); operands then folded pairwise
    with transpose/broadcast/reshape/matmul; finally a transpose to the output order."""
    parsed, out = _parse_einsum(b, equation, operands)
    xs = []
    for i, (x, lab) in enumerate(zip(operands, parsed)):
        x, lab = _diagonal(b, x, lab)
        others = set(out).union(*[set(p) for k, p in enumerate(parsed) if k != i])
        x, lab = _sum_out(b, x, lab, others)
        xs.append((x, lab))
    x, lx = xs[0]
    for k in range(1, len(xs)):
        y, ly = xs[k]
        keep = set(out).union(*[set(p) for p in parsed[k + 1:]])
        x, lx = _contract(b, x, lx, y, ly, keep)
    x, lx = _sum_out(b, x, lx, set(out))
    if sorted(lx, key=str) != sorted(out, key=str):
        raise ShapeError(f"{b.where}: output labels of '{equation}' do not match the operands")
    return b.transpose_(x, [lx.index(c) for c in out])
