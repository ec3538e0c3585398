"""Casts from and to the storage-only 1-byte types (float8, float6, float4, int4/uint4, int2/uint2, float8e8m0).

Every such cast is derived, bit by bit, from the specification's own kernel: the reference kernel of the
``cast`` primitive (its record in ``glow_core.ops.primitives.casts``). The conformance suite checks both that
kernel and this backend against an independent oracle of the ONNX text (``glow_conformance.storage_formats``):
- from any 1-byte type: a 256-entry lookup table of the results for every byte;
- float/int -> a storage float type: rounding is monotone within each binade of the input, so each output code
  is produced by contiguous ranges of input bit patterns; the ranges' starts are found by bisection between
  binade starts and the C code binary-searches them (one table per sign, NaN handled apart);
- -> int4/uint4/int2/uint2: like any integer cast (truncate, clip to int64, wrap), keeping the low bits.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from glow_core.ops.primitives.casts import cast as spec_cast
from glow_core.types import STORAGE_ONLY
from glow_core.types import dtype as to_dtype

ONE_BYTE_STORAGE = tuple(n for n in STORAGE_ONLY if to_dtype(n).itemsize == 1)
INT_STORAGE = {"int4": 0xF, "uint4": 0xF, "int2": 0x3, "uint2": 0x3}


def _cast(x, dst, saturate, round_mode):
    with np.errstate(all="ignore"):
        return spec_cast(x, dst, saturate=saturate, round_mode=round_mode)


@lru_cache(maxsize=None)
def byte_table(src: str, dst: str, saturate: int, round_mode: str) -> np.ndarray:
    """The results of casting every byte pattern of 1-byte ``src`` to ``dst``."""
    x = np.arange(256, dtype=np.uint8).view(to_dtype(src).np)
    return np.asarray(_cast(x, dst, saturate, round_mode)).astype(to_dtype(dst).np)


@lru_cache(maxsize=None)
def threshold_tables(width: int, dst: str, saturate: int, round_mode: str):
    """For a float source of ``width`` bits (32 or 64): per sign, (range starts over magnitude bits, codes),
    and the codes of +NaN and -NaN."""
    fnp, unp = (np.float32, np.uint32) if width == 32 else (np.float64, np.uint64)
    inf_bits = int(np.array(np.inf, fnp).view(unp))
    sign = 1 << (width - 1)

    def f(s, m):
        v = np.array([s | m], dtype=unp).view(fnp)
        return int(np.asarray(_cast(v, dst, saturate, round_mode)).view(np.uint8)[0])

    # every binade start (and inf): the code sequence is monotone inside a binade, not over the whole range
    # (saturate=0 gives NaN both below and above the representable range)
    mbits = 23 if width == 32 else 52
    edges = list(range(0, inf_bits, 1 << mbits)) + [inf_bits]
    tables = []
    for s in (0, sign):
        starts, codes = [0], [f(s, 0)]
        vals = [f(s, e) for e in edges]
        stack = [(a, b, fa, fb) for a, b, fa, fb in zip(edges, edges[1:], vals, vals[1:])]
        found = []
        while stack:
            lo, hi, flo, fhi = stack.pop()
            if flo == fhi:
                continue
            if hi == lo + 1:
                found.append((hi, fhi))
                continue
            mid = (lo + hi) // 2
            fm = f(s, mid)
            stack.append((lo, mid, flo, fm))
            stack.append((mid, hi, fm, fhi))
        for b, c in sorted(found):
            starts.append(b)
            codes.append(c)
        tables.append((starts, codes))
    nan = np.array(np.nan, fnp).view(unp)
    nan_codes = [int(np.asarray(_cast(np.array([int(nan) | s], unp).view(fnp), dst, saturate, round_mode))
                     .view(np.uint8)[0]) for s in (0, sign)]
    return tables, nan_codes
