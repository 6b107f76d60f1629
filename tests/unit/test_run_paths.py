"""Shortcuts of round 5 (runs of rising times, gaps closed while merging, the loop's streams by
comparison) give what the plain computations give."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.analysis.grouped import CHUNK_ROWS
from nsys_rules.analysis.intervals import RUNS_FROM, merge_intervals, point_in
from nsys_rules.analysis.names import rows_with_codes
from nsys_rules.rules.queue_delay import close_short_gaps, queue_profile


def _plain_point_in(times, starts, ends):
    pos = np.searchsorted(starts, times, side="right") - 1
    inside = (pos >= 0) & (times <= ends[np.maximum(pos, 0)])
    return np.where(inside, pos, -1)


@pytest.mark.parametrize("seed", range(6))
def test_point_in_on_rising_times_equals_the_search_per_time(seed):
    rng = np.random.default_rng(seed)
    n_steps = int(rng.integers(1, 60))
    times = np.sort(rng.integers(0, 5_000, n_steps * RUNS_FROM + int(rng.integers(0, 500))))
    starts = np.sort(rng.integers(0, 5_000, n_steps))  # repeated starts, overlaps, gaps, empty steps
    ends = starts + rng.integers(-20, 300, n_steps)  # ends before starts: damaged steps hold nothing
    got = point_in(times, starts, ends)
    assert got.dtype == np.int64
    assert np.array_equal(got, _plain_point_in(times, starts, ends))
    assert (got >= 0).any() and (got < 0).any()


def test_point_in_runs_with_no_time_inside_any_interval():
    times = np.arange(100, dtype=np.int64)
    starts, ends = np.array([200, 300]), np.array([250, 350])
    assert np.array_equal(point_in(times, starts, ends), np.full(100, -1))


@pytest.mark.parametrize("min_gap", [-5, 0, 1, 2, 37, 500])
def test_merge_with_min_gap_equals_the_union_with_short_gaps_closed(min_gap):
    rng = np.random.default_rng(min_gap + 100)
    rows = 2 * CHUNK_ROWS + 777  # chunk edges inside the gap comparison
    starts = np.sort(rng.integers(0, 60 * rows, rows))
    ends = starts + rng.integers(-3, 80, rows)
    expect = close_short_gaps(merge_intervals(starts, ends), min_gap)
    got = merge_intervals(starts, ends, min_gap)
    assert np.array_equal(got[0], expect[0]) and np.array_equal(got[1], expect[1])
    if min_gap > 1:
        assert len(got[0]) < len(merge_intervals(starts, ends)[0])


def test_queue_profile_on_closed_busy_periods_equals_closing_them_inside():
    rng = np.random.default_rng(9)
    k_start = np.sort(rng.integers(0, 10**7, 5_000))
    k_end = k_start + rng.integers(1, 3_000, 5_000)
    api_end = k_start - rng.integers(0, 20_000, 5_000)
    busy = merge_intervals(k_start, k_end)
    plain = queue_profile(k_start, k_end, api_end, busy, 2_000, (int(k_start[10]), int(k_end[-10])))
    closed = queue_profile(k_start, k_end, api_end, merge_intervals(k_start, k_end, 2_000), 2_000,
                           (int(k_start[10]), int(k_end[-10])), closed=True)
    assert plain == closed and plain.idle_while_queued > 0


@pytest.mark.parametrize("members", [(), (7,), (7, 3, 2**31 + 5), tuple(range(0, 40, 3))])
def test_streams_by_comparison_equal_isin(members):
    rng = np.random.default_rng(len(members))
    streams = rng.integers(0, 40, 3 * CHUNK_ROWS + 5).astype(np.int32)
    got = rows_with_codes(streams, np.asarray(members, np.int64))
    assert np.array_equal(got, np.isin(streams, members))
