"""Memory allocator utilities, reusable by any backend (on-chip SRAM included).

Given buffers with sizes and live intervals (instruction indices, inclusive),
``allocate`` assigns offsets in one region so that no two buffers live at the
same time overlap. It tries several orderings and keeps the smallest peak:
largest-size-first, longest-lifetime-first and largest-area-first (size times
lifetime), each placed best-fit. ``max_live_bytes`` is the lower bound no
allocation can beat; ``efficiency`` is lower bound / peak.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import MemoryLimitError

ALIGNMENT = 64


def align_up(n: int, a: int = ALIGNMENT) -> int:
    """Round n up to a multiple of a."""
    return (n + a - 1) // a * a


@dataclass(frozen=True)
class Interval:
    """A buffer to place: its key, size in bytes and live range [start, end] (instruction indices)."""

    key: object
    size: int
    start: int
    end: int

    def overlaps(self, other: "Interval") -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass
class Allocation:
    """The result of ``allocate``: offsets by key, the peak, the lower bound and the strategy that won."""

    offsets: dict
    peak: int
    lower_bound: int
    strategy: str
    tried: dict = field(default_factory=dict)

    @property
    def efficiency(self) -> float:
        return 1.0 if self.peak == 0 else self.lower_bound / self.peak


def max_live_bytes(intervals: list[Interval], alignment: int = ALIGNMENT) -> int:
    """The maximum over time of the (aligned) bytes live at once: a lower bound on any peak."""
    events = []
    for iv in intervals:
        events.append((iv.start, 0, align_up(iv.size, alignment)))
        events.append((iv.end, 1, -align_up(iv.size, alignment)))
    live = best = 0
    for _, _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        live += delta
        best = max(best, live)
    return best


STRATEGIES = {
    "largest-first": lambda iv: (-iv.size, iv.start),
    "longest-lifetime-first": lambda iv: (-(iv.end - iv.start), -iv.size),
    "largest-area-first": lambda iv: (-(iv.end - iv.start + 1) * iv.size, -iv.size),
    "earliest-first": lambda iv: (iv.start, -iv.size),
}


def _place(order: list[Interval], alignment: int) -> tuple[dict, int]:
    placed: list[tuple[Interval, int]] = []
    offsets, peak = {}, 0
    for iv in order:
        size = align_up(iv.size, alignment)
        busy = sorted((off, off + align_up(o.size, alignment)) for o, off in placed if o.overlaps(iv))
        best, best_gap, cursor = None, None, 0
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, hi)
        if best is None:
            best = cursor
        offsets[iv.key] = best
        placed.append((iv, best))
        peak = max(peak, best + size)
    return offsets, peak


def allocate(intervals: list[Interval], alignment: int = ALIGNMENT, capacity: int | None = None,
             strategies: tuple[str, ...] = tuple(STRATEGIES), region: str = "activations") -> Allocation:
    """Place every interval; keep the strategy with the smallest peak. Raises MemoryLimitError over capacity."""
    bound = max_live_bytes(intervals, alignment)
    best, tried = None, {}
    for s in strategies:
        offsets, peak = _place(sorted(intervals, key=STRATEGIES[s]), alignment)
        tried[s] = peak
        if best is None or peak < best.peak:
            best = Allocation(offsets, peak, bound, s)
    if best is None:
        best = Allocation({}, 0, 0, "none")
    best.tried = tried
    if capacity is not None and best.peak > capacity:
        big = max(intervals, key=lambda iv: iv.size)
        raise MemoryLimitError(f"{region} need {best.peak} bytes (lower bound {bound}) but the capacity is "
                               f"{capacity} bytes; the largest buffer is '{big.key}' with {big.size} bytes")
    return best


def check_no_overlap(intervals: list[Interval], offsets: dict, alignment: int = 1) -> list[tuple]:
    """Pairs of buffers live at the same time whose byte ranges overlap (empty when the plan is sound)."""
    bad = []
    for i, a in enumerate(intervals):
        for b in intervals[i + 1:]:
            if a.overlaps(b) and a.size and b.size:
                oa, ob = offsets[a.key], offsets[b.key]
                if oa < ob + b.size and ob < oa + a.size:
                    bad.append((a.key, b.key))
    return bad
