"""Interval arithmetic over numpy arrays: busy time by depth, and its running total at any time.

Everything here is vectorized: a rank's million kernels become a handful of sorted arrays,
and "how much was busy between a and b" is two binary searches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Busy:
    """Sorted disjoint busy intervals with a running total, so busy time up to ``t`` is a lookup."""

    starts: np.ndarray
    ends: np.ndarray
    before: np.ndarray  # busy time before each interval starts

    @classmethod
    def empty(cls) -> "Busy":
        """Never busy."""
        zero = np.zeros(0, np.int64)
        return cls(zero, zero, zero)

    def until(self, times: np.ndarray) -> np.ndarray:
        """Busy time from the beginning up to each of ``times`` (int64)."""
        times = np.asarray(times, np.int64)
        if not len(self.starts):
            return np.zeros(len(times), np.int64)
        i = np.searchsorted(self.starts, times, side="right") - 1
        inside = np.clip(times - self.starts[i.clip(0)], 0, (self.ends - self.starts)[i.clip(0)])
        return np.where(i >= 0, self.before[i.clip(0)] + inside, 0)

    def between(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Busy time inside each ``[lo, hi]`` (0 where hi <= lo)."""
        return np.maximum(self.until(hi) - self.until(lo), 0)

    @property
    def total(self) -> int:
        """All busy time."""
        return int((self.ends - self.starts).sum())


def busy(starts: np.ndarray, ends: np.ndarray, depth: int = 1) -> Busy:
    """The time during which at least ``depth`` (1 or 2) of the intervals run at once.

    ``depth=1`` is the union. ``depth=2`` answers "was anything else running?" for an interval
    that is itself in the set: inside it, the depth is 2 exactly when another one overlaps.
    """
    if depth not in (1, 2):
        raise ValueError("depth must be 1 or 2")
    s = np.asarray(starts, np.int64)
    e = np.asarray(ends, np.int64)
    if not bool((e > s).all()):
        s, e = s[e > s], e[e > s]
    if not len(s):
        return Busy.empty()
    if len(s) > 1 and not bool((s[1:] >= s[:-1]).all()):
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
            return Busy.empty()
    seg_s, seg_e = _union(s, e)
    lengths = seg_e - seg_s
    before = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return Busy(seg_s, seg_e, before)


def _union(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint intervals covering ``[s, e)`` (``s`` sorted)."""
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(s) - 1]
    return s[first], reach[last]
