"""Time intervals: unions, busy time, gaps and overlaps, vectorized over numpy arrays.

An interval set is a pair of int64 arrays ``(starts, ends)``; "disjoint" sets are sorted and
non-overlapping (what :func:`merge_intervals` returns). Times are ns. Nothing here judges.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from nsys_rules.malloc_tune import CHUNK_ROWS
from nsys_rules.analysis.points import counts_in, point_in, runs_in  # noqa: F401 - their home before points.py


def rising(values: np.ndarray) -> bool:
    """Whether ``values`` never decrease (GPU rows usually come in start order: no sort needed)."""
    return len(values) < 2 or bool((values[1:] >= values[:-1]).all())


def merge_intervals(starts: np.ndarray, ends: np.ndarray, min_gap: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (start, end) arrays; periods less than ``min_gap`` apart
    joined too (whole ns: the default 1 joins only those that touch or overlap)."""
    if not len(starts):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    s = np.asarray(starts, np.int64)
    e = np.asarray(ends, np.int64)
    if not rising(s):
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    # One stream of serialized work has its ends in order too: the running maximum is the ends.
    running = e if rising(e) else np.maximum.accumulate(e)
    opens = np.empty(len(s), bool)  # the row opens a busy period
    opens[0] = True
    if min_gap <= 1:
        np.greater(s[1:], running[:-1], out=opens[1:])
    else:  # the gap before each row, a chunk at a time: no row-length difference
        for lo in range(0, len(s) - 1, CHUNK_ROWS):
            hi = min(lo + CHUNK_ROWS, len(s) - 1)
            np.greater_equal(np.subtract(s[lo + 1:hi + 1], running[lo:hi]), min_gap, out=opens[lo + 1:hi + 1])
    closes = np.empty(len(s), bool)  # the row's period ends before the next row
    closes[-1] = True
    closes[:-1] = opens[1:]
    return s[opens], running[closes]


def total_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Summed length of disjoint intervals."""
    return int(np.subtract(ends, starts).sum()) if len(starts) else 0


def busy_ns(starts: np.ndarray, ends: np.ndarray, lo: int | None = None, hi: int | None = None) -> int:
    """Time covered by at least one interval, optionally clipped to [lo, hi].

    In start order, each interval adds the part of it past the latest end seen so far (the
    earlier intervals cover everything from its start up to that end): summed in chunks, with
    no merged copy of the intervals (two arrays as long as the busy periods, plus clipped
    copies of both: ~32 MB on a million kernels). Whole ns, so the same sum as the union's.
    """
    s = np.asarray(starts, np.int64)
    e = np.asarray(ends, np.int64)
    if not rising(s):
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    total = 0
    reach = np.iinfo(np.int64).min  # the latest end before the chunk
    for first in range(0, len(s), CHUNK_ROWS):
        cs, ce = s[first:first + CHUNK_ROWS], e[first:first + CHUNK_ROWS]
        floor = np.empty(len(cs), np.int64)  # where each interval's new part starts
        floor[0] = reach
        np.maximum.accumulate(ce[:-1], out=floor[1:])
        np.maximum(floor, reach, out=floor)
        reach = max(reach, int(floor[-1]), int(ce[-1]))
        np.maximum(floor, cs, out=floor)
        if lo is not None:
            np.maximum(floor, lo, out=floor)
        top = np.minimum(ce, hi) if hi is not None else ce.copy()
        top -= floor
        np.maximum(top, 0, out=top)
        total += int(top.sum())
    return total


def busy_within(union: tuple[np.ndarray, np.ndarray], lo: int | None = None, hi: int | None = None) -> int:
    """Covered length of a disjoint interval set (``merge_intervals``' result) inside [lo, hi]."""
    starts, ends = union
    total = 0
    # In chunks, clipped in place: no copy as long as the union (2 x 8 MB on a million busy periods).
    for first in range(0, len(starts), CHUNK_ROWS):
        s, e = starts[first:first + CHUNK_ROWS], ends[first:first + CHUNK_ROWS]
        s = np.maximum(s, lo) if lo is not None else s.astype(np.int64)
        e = np.minimum(e, hi) if hi is not None else e.astype(np.int64)
        e -= s
        np.maximum(e, 0, out=e)
        total += int(e.sum())
    return total


def busy_by_group(start: np.ndarray, end: np.ndarray, group: np.ndarray | None = None) -> pd.Series:
    """Length of the union of ``[start, end]`` intervals per ``group`` (one group when None), indexed by group.

    Overlapping work on several streams counts once: each interval adds only the part that
    reaches past the latest end seen so far in its group.
    """
    if group is None:
        group = np.zeros(len(start), np.int64)
    if not len(start):
        return pd.Series(dtype=np.int64)
    frame = pd.DataFrame({"g": group, "s": start, "e": end}).sort_values(["g", "s"], kind="stable")
    reach = frame.groupby("g", sort=False)["e"].cummax()
    before = reach.groupby(frame["g"], sort=False).shift(1)
    lo = np.maximum(frame["s"].to_numpy(np.float64), before.fillna(-np.inf).to_numpy(np.float64))
    add = np.clip(frame["e"].to_numpy(np.float64) - lo, 0, None)
    return pd.Series(add, index=frame.index).groupby(frame["g"].to_numpy()).sum().round().astype(np.int64)


def idle_gaps(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gaps between busy periods: (gap start, gap length), in time order.

    A gap starts when every operation so far has ended, so an operation that overlaps others
    never opens a false gap.
    """
    s, e = merge_intervals(starts, ends)
    if len(s) < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return e[:-1], s[1:] - e[:-1]


def gaps_at_least(starts: np.ndarray, ends: np.ndarray, min_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """The :func:`idle_gaps` at least ``min_ns`` long: (gap start, gap length), in time order.

    Found in chunks with the running end carried over: no union of the intervals, no lengths of
    every gap (a million kernels have a gap before nearly each), only the long gaps are kept.
    """
    s = np.asarray(starts, np.int64)
    e = np.asarray(ends, np.int64)
    if not rising(s):
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    found_s: list[np.ndarray] = []
    found_len: list[np.ndarray] = []
    reach: int | None = None  # the latest end before the chunk
    for first in range(0, len(s), CHUNK_ROWS):
        cs, ce = s[first:first + CHUNK_ROWS], e[first:first + CHUNK_ROWS]
        before = np.empty(len(cs), np.int64)  # the latest end before each interval
        np.maximum.accumulate(ce[:-1], out=before[1:])
        if reach is None:
            before[0] = cs[0]  # the first interval of all opens no gap
            reach = int(ce[0]) if len(cs) == 1 else max(int(before[-1]), int(ce[-1]))
        else:
            before[0] = reach
            np.maximum(before[1:], reach, out=before[1:])
            reach = max(int(before[-1]), int(ce[-1]))
        before_gap = cs - before
        long = before_gap >= max(min_ns, 1)
        found_s.append(before[long])
        found_len.append(before_gap[long])
    if not found_s:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(found_s), np.concatenate(found_len)


class Coverage:
    """Cumulative covered length of one disjoint interval set, for overlap queries.

    ``before(t)`` is the covered length in (-inf, t]; the overlap of the set with [a, b] is
    ``before(b) - before(a)``, so many query intervals cost two binary searches each.
    """

    @classmethod
    def empty(cls) -> "Coverage":
        """A set that covers nothing."""
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        self.starts = np.asarray(starts, np.int64)
        self.ends = np.asarray(ends, np.int64)
        self._prefix = np.zeros(len(self.starts) + 1, np.int64)
        if len(self.starts):  # in place: no lengths array beside the prefix
            np.subtract(self.ends, self.starts, out=self._prefix[1:])
            np.cumsum(self._prefix[1:], out=self._prefix[1:])

    @property
    def total(self) -> int:
        """Covered length of the whole set."""
        return int(self._prefix[-1])

    def before(self, t: np.ndarray, guess: np.ndarray | None = None) -> np.ndarray:
        """Covered length up to each of ``t``; ``guess``: for each, the likely number of intervals
        starting at or before it (see :func:`search_near`)."""
        t = np.asarray(t, np.int64)
        if not len(self.starts):
            return np.zeros(len(t), np.int64)
        k = np.searchsorted(self.starts, t, side="right") if guess is None else search_near(self.starts, t, guess)
        past = np.maximum(k - 1, 0)
        past = self.ends[past]  # the part of the last of them beyond t, computed in place
        past -= t
        np.maximum(past, 0, out=past)
        past[k == 0] = 0
        out = self._prefix[k]
        del k
        out -= past
        return out

    def within(self, a: np.ndarray, b: np.ndarray, guess_a: np.ndarray | None = None,
               guess_b: np.ndarray | None = None) -> np.ndarray:
        """Covered length inside each [a, b] (guesses: see :meth:`before`)."""
        out = self.before(b, guess_b)
        out -= self.before(a, guess_a)
        np.maximum(out, 0, out=out)
        return out

    def touching(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Indices of the sorted, disjoint [a, b] that may overlap the set: every other one overlaps none of it.

        A set of a few intervals (a thread's allocations) overlaps few of a million GPU idle gaps:
        found by searching the set's intervals among the queries, not each query in the set.
        """
        if not len(self.starts) or not len(a):
            return np.empty(0, np.int64)
        first = np.searchsorted(b, self.starts, side="right")  # first query ending after the interval starts
        stop = np.searchsorted(a, self.ends, side="left")  # queries starting before the interval ends
        some = stop > first
        marks = np.zeros(len(a) + 1, np.int32)
        np.add.at(marks, first[some], 1)
        np.add.at(marks, stop[some], -1)
        return np.flatnonzero(np.cumsum(marks[:-1]) > 0)


def search_near(values: np.ndarray, t: np.ndarray, guess: np.ndarray,
                side: Literal["left", "right"] = "right") -> np.ndarray:
    """``np.searchsorted(values, t, side)`` where most answers are known in advance (``guess``).

    Each guess is checked against its two neighbours (two gathers, no binary search over the whole
    array: a million searches among 2.2M API calls take ~30 ms); only wrong guesses are searched.
    """
    t = np.asarray(t, np.int64)
    n = len(values)
    if not n or not len(t):
        return np.searchsorted(values, t, side=side)
    k = np.clip(guess, 0, n).astype(np.int64)
    low = np.maximum(k - 1, 0)  # reused for the neighbour below, then above
    lower = values[low]
    np.minimum(k, n - 1, out=low)
    upper = values[low]
    del low
    # A guess of 0 or n fails its check (the neighbour outside the array is a real one) and is searched.
    ok = (lower <= t) & (upper > t) if side == "right" else (lower < t) & (upper >= t)
    del lower, upper
    wrong = np.flatnonzero(~ok)
    if len(wrong):
        k[wrong] = np.searchsorted(values, t[wrong], side=side)
    return k


def union_coverage(starts: np.ndarray, ends: np.ndarray) -> Coverage:
    """:class:`Coverage` of the union of intervals: the intervals themselves when each ends before the next
    starts (one thread's calls, the usual case), with no merged copy (2 x 18 MB on 2.2M calls)."""
    s, e = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    if len(s) < 2 or bool((s[1:] >= e[:-1]).all()) and bool((e >= s).all()):
        return Coverage(s, e)
    return Coverage(*merge_intervals(s, e))


def coverage(starts: np.ndarray, ends: np.ndarray, depth: int = 1) -> Coverage:
    """The time during which at least ``depth`` (1 or 2) of the intervals run at once, ready for overlap queries.

    ``depth=1`` is the union. ``depth=2`` answers "was anything else running?" for an interval
    that is itself in the set: inside it, the depth is 2 exactly when another one overlaps.
    Empty intervals (end at or before start) cover nothing.
    """
    if depth not in (1, 2):
        raise ValueError("depth must be 1 or 2")
    s = np.asarray(starts, np.int64)
    e = np.asarray(ends, np.int64)
    if not bool((e > s).all()):
        s, e = s[e > s], e[e > s]
    if not len(s):
        return Coverage.empty()
    if not rising(s):
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    if depth == 2:
        # In start order, interval j overlaps an earlier one exactly on [s_j, min(e_j, reach of the
        # earlier ones)): the union of those pieces is where two or more run. One pass, no event sort.
        reach = np.maximum.accumulate(e)
        upto = np.minimum(e[1:], reach[:-1])
        del reach
        piece = upto > s[1:]
        s, e = s[1:][piece], upto[piece]
        if not len(s):
            return Coverage.empty()
    return Coverage(*merge_intervals(s, e))


def overlap_length(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Length shared by two disjoint interval sets."""
    if not len(a[0]) or not len(b[0]):
        return 0
    cover = Coverage(*b)
    # ``a``'s intervals looked up in chunks: each lookup makes a few temporaries as long as its queries.
    return sum(int(cover.within(a[0][i:i + CHUNK_ROWS], a[1][i:i + CHUNK_ROWS]).sum()) for i in range(0, len(a[0]), CHUNK_ROWS))


def union(*sets: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Union of several interval sets (disjoint or not)."""
    parts = [s for s in sets if len(s[0])]
    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if len(parts) == 1:
        return merge_intervals(*parts[0])
    return merge_intervals(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint intervals cut to [lo, hi], empty pieces dropped."""
    s = np.maximum(starts, lo)
    e = np.minimum(ends, hi)
    keep = e > s
    return s[keep], e[keep]


def complement(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The parts of [lo, hi] that no interval of a disjoint set covers.

    Built straight into the two output arrays, with no temporaries as long as the set: the
    intervals reaching into [lo, hi] are one run of the sorted set, and only its first and last
    can stick out of it.
    """
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    first = int(np.searchsorted(ends, lo, side="right"))  # the first interval ending after lo
    stop = int(np.searchsorted(starts, hi, side="left"))  # intervals starting before hi
    if stop < first:
        stop = first
    s, e = starts[first:stop], ends[first:stop]
    if len(s):
        # Clipped to [lo, hi], an empty interval (a zero-length operation) covers nothing: no gap edge.
        positive = e > s
        positive[0] = min(int(e[0]), hi) > max(int(s[0]), lo)
        positive[-1] = min(int(e[-1]), hi) > max(int(s[-1]), lo)
        if not positive.all():
            s, e = s[positive], e[positive]
        del positive
    gap_s = np.empty(len(s) + 1, np.int64)
    gap_e = np.empty(len(s) + 1, np.int64)
    gap_s[0], gap_e[-1] = lo, hi
    gap_s[1:] = e
    gap_e[:-1] = s
    if len(s):
        gap_e[0] = max(int(s[0]), lo)
        gap_s[-1] = min(int(e[-1]), hi)
    keep = gap_e > gap_s
    # Usually only the edges are empty (the first busy period starts at lo): a slice, not a copy.
    a, b = int(not keep[0]), len(keep) - int(not keep[-1])
    if a < b and keep[a:b].all():
        return gap_s[a:b], gap_e[a:b]
    return gap_s[keep], gap_e[keep]
