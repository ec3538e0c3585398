"""The CPU backend's GEMM blocking (templates/gemm.c.j2): cache and micro-tile sizes, the scratch its packed
panels take, and the compile-time packing of a constant B into the micro-kernel's panel layout. Shared by
kernels/matmul.py, kernels/window.py (conv) and kernels/nn.py (the RNN input projections)."""
from __future__ import annotations

import numpy as np

from glow_core.memory import align_up

# Cache blocking (kc x mc panel of A in L2, kc x nc of B in L3) and the micro-tile height with 512-bit vectors
# (mr_wide x 2 vectors; mr_narrow x 2 with narrower vectors); mc is a multiple of both heights.
GEMM_TILES = {"f32": dict(t="float", kc=384, mc=144, nc=4096, mr_wide=8, mr_narrow=6),
              "f64": dict(t="double", kc=256, mc=144, nc=2048, mr_wide=8, mr_narrow=6)}
#: The widest vector the GEMM template may use (AVX-512): scratch is sized for it, so any target fits.
MAX_VECTOR_BYTES = 64


def gemm_pack_width(sfx: str) -> int:
    """Columns per panel of a B packed at compile time: the widest micro-tile (2 vectors of MAX_VECTOR_BYTES), a
    multiple of every target's."""
    return 2 * MAX_VECTOR_BYTES // (8 if sfx == "f64" else 4)


def pack_b(b: np.ndarray, sfx: str) -> np.ndarray:
    """B[..., k, n] in the GEMM's compile-time panel layout [..., ceil(n / w), k, w] (w = gemm_pack_width, the
    columns past n zero)."""
    w = gemm_pack_width(sfx)
    *batch, k, n = b.shape
    np_ = -(-n // w) * w
    padded = np.zeros((*batch, k, np_), dtype=b.dtype)
    padded[..., :n] = b
    return np.ascontiguousarray(np.swapaxes(padded.reshape(*batch, k, np_ // w, w), -3, -2))


def gemm_scratch_bytes(sfx: str, m: int, n: int, k: int, packed_b: bool = False) -> int:
    """Bytes of packed panels glow_gemm needs for C[m,n] = A[m,k] B[k,n]: a kc x nc panel of B (none when B was
    packed at compile time) then, 64-byte aligned, a kc x mc panel of A, sized for the widest vector (so the plan
    fits any target)."""
    tl = GEMM_TILES[sfx]
    item = 8 if sfx == "f64" else 4
    nr = gemm_pack_width(sfx)
    kc = min(k, tl["kc"])
    nc = -(-n // nr) * nr if n < tl["nc"] else tl["nc"]
    mc = max(-(-m // r) * r for r in (tl["mr_wide"], tl["mr_narrow"])) if m < tl["mc"] else tl["mc"]
    return (0 if packed_b else align_up(item * kc * nc)) + item * kc * mc
