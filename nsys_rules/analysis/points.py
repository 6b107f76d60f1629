"""Times placed among intervals: which interval holds each time, and the run of sorted times each
interval holds (:mod:`nsys_rules.analysis.intervals` re-exports these).
"""

from __future__ import annotations

import numpy as np


def point_in(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Index of the interval (sorted by start, disjoint) holding each time, -1 when none."""
    times = np.asarray(times, np.int64)
    if not len(starts):
        return np.full(len(times), -1, np.int64)
    if len(times) >= RUNS_FROM * len(starts) and (len(times) < 2 or bool((times[1:] >= times[:-1]).all())):
        return _point_in_runs(times, starts, ends)
    pos = np.searchsorted(starts, times, side="right")
    pos -= 1
    # Gathers over every row (clipped) beat boolean-mask selections on a million launches; the
    # answer is written into the positions themselves (one row-length array fewer at the peak).
    reach = ends[np.maximum(pos, 0)]
    inside = times <= reach
    del reach
    inside &= pos >= 0
    np.logical_not(inside, out=inside)
    pos[inside] = -1
    return pos.astype(np.int64, copy=False)


#: Times per interval from which :func:`point_in` on rising times searches the intervals' bounds among
#: the times instead of each time among the intervals.
RUNS_FROM = 8


def _point_in_runs(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """:func:`point_in` for rising ``times``: each interval's run of times (:func:`runs_in`, two searches per
    interval), written out as runs of its index between runs of -1 (one pass, no binary search per time)."""
    first, upto = runs_in(times, starts, ends)
    held = np.flatnonzero(upto > first)
    first, upto = first[held], upto[held]
    values = np.full(2 * len(held) + 1, -1, np.int64)  # -1 before, between and after the runs
    values[1::2] = held
    lengths = np.empty(len(values), np.int64)
    lengths[1::2] = upto - first
    lengths[0::2] = np.append(first, len(times)) - np.insert(upto, 0, 0)  # the gaps around the runs
    return np.repeat(values, lengths)


def counts_in(sorted_times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many of ``sorted_times`` :func:`point_in` puts in each interval (starts sorted), by searches of
    the intervals' bounds among the times: a few thousand searches instead of one per time."""
    first, upto = runs_in(sorted_times, starts, ends)
    return np.maximum(upto - first, 0)


def runs_in(sorted_times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The run ``[first, upto)`` of ``sorted_times`` that :func:`point_in` puts in each interval (starts
    sorted; an empty run has ``upto <= first``).

    A time belongs to the last interval starting at or before it, when it does not end before
    the time; so interval i holds the times in [start i, next start) up to its own end.
    """
    first = np.searchsorted(sorted_times, starts, side="left")
    upto = np.searchsorted(sorted_times, ends, side="right")
    if len(starts) > 1:
        np.minimum(upto[:-1], first[1:], out=upto[:-1])
    return first, upto
