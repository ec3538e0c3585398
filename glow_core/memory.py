"""Memory allocator utilities, reusable by any backend (on-chip SRAM included).

Given buffers with sizes and live intervals (instruction indices, inclusive),
``allocate`` assigns offsets in one region so that no two buffers live at the
same time overlap. It tries several orderings and keeps the smallest peak:
largest-size-first, longest-lifetime-first and largest-area-first (size times
lifetime), each placed best-fit. ``max_live_bytes`` is the lower bound no
allocation can beat; ``efficiency`` is lower bound / peak.

Which buffers overlap in time is found once, by a sweep over the intervals in
start order with the live set in a heap (``overlapping``): each placement then
looks only at the buffers live with it, so planning is O(n log n + pairs of
simultaneously live buffers), near-linear because the live set stays small.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from .errors import GlowError, MemoryLimitError

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


def overlapping(intervals: list[Interval]) -> list[list[int]]:
    """For each interval (by position), the positions of the others live at the same time, found by one sweep in
    start order with the live set in a heap keyed by end. Raises GlowError for an interval ending before it
    starts."""
    for iv in intervals:
        if iv.end < iv.start:
            raise GlowError(f"buffer '{iv.key}': live range [{iv.start}, {iv.end}] ends before it starts; "
                            f"intervals are [start, end] with start <= end")
    neighbours: list[list[int]] = [[] for _ in intervals]
    live: list[tuple[int, int]] = []  # (end, position)
    for i in sorted(range(len(intervals)), key=lambda i: intervals[i].start):
        start = intervals[i].start
        while live and live[0][0] < start:
            heapq.heappop(live)
        for _, j in live:
            neighbours[i].append(j)
            neighbours[j].append(i)
        heapq.heappush(live, (intervals[i].end, i))
    return neighbours


def _place(intervals: list[Interval], order: list[int], neighbours: list[list[int]],
           alignment: int) -> tuple[dict, int]:
    placed: dict[int, int] = {}  # position -> offset
    offsets, peak = {}, 0
    for i in order:
        iv = intervals[i]
        size = align_up(iv.size, alignment)
        busy = sorted((placed[j], placed[j] + align_up(intervals[j].size, alignment))
                      for j in neighbours[i] if j in placed)
        best, best_gap, cursor = None, None, 0
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, hi)
        if best is None:
            best = cursor
        offsets[iv.key] = best
        placed[i] = best
        peak = max(peak, best + size)
    return offsets, peak


def allocate(intervals: list[Interval], alignment: int = ALIGNMENT, capacity: int | None = None,
             strategies: tuple[str, ...] = tuple(STRATEGIES), region: str = "activations") -> Allocation:
    """Place every interval; keep the strategy with the smallest peak. Raises MemoryLimitError over capacity."""
    bound = max_live_bytes(intervals, alignment)
    neighbours = overlapping(intervals)
    best, tried = None, {}
    for s in strategies:
        key = STRATEGIES[s]
        order = sorted(range(len(intervals)), key=lambda i: key(intervals[i]))
        offsets, peak = _place(intervals, order, neighbours, alignment)
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
    """Pairs of buffers live at the same time whose byte ranges overlap (empty when the plan is sound), each
    pair in the order the intervals are given."""
    bad = []
    for i, near in enumerate(overlapping(intervals)):
        a = intervals[i]
        for j in sorted(j for j in near if j > i):
            b = intervals[j]
            if a.size and b.size:
                oa, ob = offsets[a.key], offsets[b.key]
                if oa < ob + b.size and ob < oa + a.size:
                    bad.append((a.key, b.key))
    return bad
