"""Chunked computations (bounded temporaries on big traces) give what the whole-array computation gives."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.analysis.grouped import CHUNK_ROWS, code_durations, masked_durations
from nsys_rules.analysis.intervals import (Coverage, busy_ns, busy_within, gaps_at_least, idle_gaps, merge_intervals,
                                          overlap_length, point_in, union_coverage)

#: More rows than two chunks, so chunk edges fall inside busy periods.
ROWS = 2 * CHUNK_ROWS + 12_345


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_busy_ns_equals_the_union_length(seed):
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.integers(0, 50 * ROWS, ROWS))
    ends = starts + rng.integers(-3, 400, ROWS)  # overlaps, touching and damaged (end < start) intervals
    if seed == 2:
        rng.shuffle(starts)  # out of start order: sorted inside
    for lo, hi in ((None, None), (int(starts.min()) + 1000, None), (None, 25 * ROWS), (10 * ROWS, 40 * ROWS)):
        expect = busy_within(merge_intervals(starts, ends), lo, hi)
        assert busy_ns(starts, ends, lo, hi) == expect
        assert expect > 0


def test_code_durations_and_masked_durations_match_the_plain_sums():
    rng = np.random.default_rng(5)
    codes = rng.integers(-1, 30, ROWS).astype(np.int8)
    start = rng.integers(0, 10**12, ROWS)
    end = start + rng.integers(0, 10**6, ROWS)
    count, total = code_durations(codes, start, end, 30)
    known = codes >= 0
    assert count.tolist() == np.bincount(codes[known], minlength=30).tolist()
    assert total.tolist() == np.bincount(codes[known], weights=(end - start)[known], minlength=30).tolist()
    mask = rng.random(ROWS) < 0.3
    assert np.array_equal(masked_durations(start, end, mask), (end - start)[mask])


def test_union_coverage_and_point_in_match_the_plain_forms():
    rng = np.random.default_rng(9)
    starts = np.cumsum(rng.integers(0, 50, 5000))
    ends = starts + rng.integers(0, 30, 5000)
    serial = ends[:-1] <= starts[1:]
    a, b = np.sort(rng.integers(0, int(ends[-1]), (2, 3000)), axis=0)
    merged = merge_intervals(starts, ends)
    plain = union_coverage(*merged).within(a, b)
    assert np.array_equal(union_coverage(starts, ends).within(a, b), plain)
    assert not serial.all()  # the merged path was taken, and the serial one by the union itself
    # Calls that follow one another, touching or empty: taken as they are, the same numbers as merged.
    gaps = rng.integers(0, 3, 5000)
    lengths = rng.integers(0, 4, 5000)
    serial_s = np.cumsum(gaps + np.concatenate(([0], lengths[:-1])))
    serial_e = serial_s + lengths
    assert (serial_e[:-1] <= serial_s[1:]).all() and ((serial_e[:-1] == serial_s[1:]) & (lengths[1:] > 0)).any()
    qa, qb = np.sort(rng.integers(0, int(serial_e[-1]) + 5, (2, 3000)), axis=0)
    assert np.array_equal(union_coverage(serial_s, serial_e).within(qa, qb),
                          Coverage(*merge_intervals(serial_s, serial_e)).within(qa, qb))
    times = rng.integers(0, int(ends[-1]), 4000)
    pos = np.searchsorted(merged[0], times, side="right") - 1
    expect = np.where((pos >= 0) & (times <= merged[1][np.maximum(pos, 0)]), pos, -1)
    got = point_in(times, *merged)
    assert got.dtype == np.int64 and np.array_equal(got, expect)


@pytest.mark.parametrize("min_ns", [0, 1, 150])
def test_gaps_at_least_are_the_long_idle_gaps(min_ns):
    rng = np.random.default_rng(min_ns)
    starts = np.sort(rng.integers(0, 300 * ROWS, ROWS))
    ends = starts + rng.integers(-2, 500, ROWS)
    gap_start, gap_len = idle_gaps(starts, ends)
    keep = gap_len >= min_ns
    got_start, got_len = gaps_at_least(starts, ends, min_ns)
    assert keep.sum() > 1000
    assert np.array_equal(got_start, gap_start[keep]) and np.array_equal(got_len, gap_len[keep])


def test_overlap_length_in_chunks_is_the_whole_overlap():
    rng = np.random.default_rng(3)
    a = merge_intervals(*(lambda s: (s, s + rng.integers(0, 30, ROWS)))(np.sort(rng.integers(0, 100 * ROWS, ROWS))))
    b = merge_intervals(*(lambda s: (s, s + rng.integers(0, 30, ROWS)))(np.sort(rng.integers(0, 100 * ROWS, ROWS))))
    expect = int(Coverage(*b).within(a[0], a[1]).sum())
    assert len(a[0]) > CHUNK_ROWS and expect > 0
    assert overlap_length(a, b) == expect


def test_prefix_sums_at_are_the_cumulative_sums_bit_for_bit():
    from nsys_rules.analysis.device_time import prefix_sums_at

    rng = np.random.default_rng(11)
    values = np.sort(rng.integers(10**15, 4 * 10**15, ROWS))  # sums far past 2**53: float rounding on every add
    whole = np.concatenate(([0.0], np.cumsum(values, dtype=np.float64)))
    at = np.sort(rng.integers(0, ROWS + 1, 5000))
    at[:3] = (0, CHUNK_ROWS, ROWS)
    got = prefix_sums_at(values, at)
    assert got.tobytes() == whole[at].tobytes()
    assert whole[-1] != float(sum(int(v) for v in values))  # the float sums did round: order matters
