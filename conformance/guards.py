"""Guard bytes: a memory plan with a gap around every buffer, filled with a canary before each run and checked
after it, for backends whose compiled functions expose their memory (``CompiledFunction.memory_regions()``).

``spread`` re-lays out the plan (before ``backend.compile``) so that every input, output, activation and
scratch buffer has its own slot with ``GUARD`` bytes before and after it: each region starts and ends with a
guard and no two buffers touch. ``arm`` fills every byte no buffer owns with ``CANARY`` and every output,
activation and scratch buffer with ``POISON`` (NaN for floats, all ones for integers), so that an element a
kernel never writes, or a kernel reading memory it did not write first (accumulating into its output,
uninitialized scratch), shows in the answers; ``check`` reports any guard byte that changed, with the buffer
it follows and the instructions writing that buffer. An exposed constant region must come back unchanged.
Reads outside a buffer are not detected (the canary is a plausible value).
"""
from __future__ import annotations

import numpy as np

from glow_core.memory import align_up

from .cases import CaseFailure

GUARD = 64
CANARY = 0xA5
POISON = 0xFF
REGIONS = ("mutable", "activation")


def spread(irf):
    """Give every input/output and activation its own slot with GUARD bytes around it."""
    plan = irf.plan
    off = GUARD
    for b in list(irf.inputs.values()) + list(irf.outputs.values()):
        b.offset = off
        off = align_up(off + max(b.size, 1), plan.alignment) + GUARD
    plan.mutable_size = off
    off = GUARD
    for b in irf.buffers:
        if b.kind == "activation" and b.base is None:
            b.offset = off
            off = align_up(off + max(b.size, 1), plan.alignment) + GUARD
    plan.activations_size = off


def regions_of(compiled):
    """The compiled function's memory regions (``memory_regions()``), or None when it exposes none."""
    fn = getattr(compiled, "memory_regions", None)
    regs = fn() if fn is not None else None
    return dict(regs) if regs else None


def _occupied(irf, region):
    if region == "mutable":
        roots = list(irf.inputs.values()) + list(irf.outputs.values())
    else:
        roots = [b for b in irf.buffers if b.base is None and b.kind == region]
    return sorted((b.offset, b.offset + b.size, b.name) for b in roots)


def _gaps(irf, region, size):
    gaps, cur = [], 0
    for lo, hi, _ in _occupied(irf, region):
        if lo > cur:
            gaps.append((cur, lo))
        cur = max(cur, hi)
    if cur < size:
        gaps.append((cur, size))
    return gaps


def _bytes(buf):
    return np.frombuffer(buf, np.uint8) if not isinstance(buf, np.ndarray) else buf.reshape(-1).view(np.uint8)


class Guard:
    """The armed guards of one compiled function: ``arm()`` before a run, ``check(describe, rerun)`` after."""

    def __init__(self, irf, regions):
        self.irf, self.regions = irf, regions

    def arm(self):
        inputs = {id(b) for b in self.irf.inputs.values()}
        for region in REGIONS:
            if region in self.regions:
                mv = _bytes(self.regions[region])
                for lo, hi in _gaps(self.irf, region, len(mv)):
                    mv[lo:hi] = CANARY
                roots = self.irf.outputs.values() if region == "mutable" else \
                    [b for b in self.irf.buffers if b.base is None and b.kind == region]
                for b in roots:
                    if id(b) not in inputs:
                        mv[b.offset:b.offset + b.size] = POISON
        self.constant = bytes(_bytes(self.regions["constant"])) if "constant" in self.regions else None

    def check(self, describe, rerun):
        for region in REGIONS:
            if region not in self.regions:
                continue
            mv = _bytes(self.regions[region])
            for lo, hi in _gaps(self.irf, region, len(mv)):
                bad = np.flatnonzero(mv[lo:hi] != CANARY)
                if bad.size:
                    self._fail(region, lo + int(bad[0]), lo + int(bad[-1]) + 1, bad.size, describe, rerun)
        if self.constant is not None and bytes(_bytes(self.regions["constant"])) != self.constant:
            changed = np.flatnonzero(_bytes(self.regions["constant"]) != np.frombuffer(self.constant, np.uint8))
            raise CaseFailure(f"{describe}\n  write into the constant region: {changed.size} byte(s) changed, "
                              f"first at byte {int(changed[0])}\n  rerun: {rerun}", stage="run")

    def _fail(self, region, first, end, count, describe, rerun):
        irf = self.irf
        prev = [n for a, e, n in _occupied(irf, region) if e <= first]
        where = f"after buffer '{prev[-1]}'" if prev else "before the first buffer"
        writers = sorted({i.op for i in irf.instrs for b, kind in i.operands
                          if kind != "in" and prev and b.root.name == prev[-1]})
        raise CaseFailure(f"{describe}\n  out-of-bounds write: {count} guard byte(s) changed in the {region} region "
                          f"at bytes [{first}, {end}) {where}"
                          + (f" (written by {', '.join(writers)})" if writers else "") + f"\n  rerun: {rerun}",
                          stage="run")
