"""Shortcuts of round 5 (runs of rising times, gaps closed while merging, the loop's streams by
comparison) give what the plain computations give."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsys_rules.rules.gemv.bandwidth import device_shares, gemv_mask
from nsys_rules.analysis.device_time import FEW_ROWS, insert_in_order
from nsys_rules.analysis.grouped import CHUNK_ROWS, group_ids
from nsys_rules.analysis.intervals import merge_intervals, point_in
from nsys_rules.analysis.points import RUNS_FROM
from nsys_rules.analysis.names import rows_with_codes
from nsys_rules.rules.queue_delay.measure import close_short_gaps, queue_profile
from nsys_rules.analysis.taxonomy import classify


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


@pytest.mark.parametrize("extra", [0, 1, 5, FEW_ROWS, FEW_ROWS + 1])
def test_insert_in_order_equals_np_insert(extra):
    rng = np.random.default_rng(extra)
    starts = np.sort(rng.integers(0, 10_000, 3_000))
    ends = starts + rng.integers(0, 50, 3_000)
    other_s = np.sort(np.concatenate([rng.integers(-10, 10_010, extra), starts[:min(extra, 3)]]))  # ties, both ends
    other_e = other_s + 7
    at = np.searchsorted(starts, other_s, side="right")
    got_s, got_e = insert_in_order(starts, ends, other_s, other_e)
    assert np.array_equal(got_s, np.insert(starts, at, other_s)) and np.array_equal(got_e, np.insert(ends, at, other_e))
    assert (np.diff(got_s) >= 0).all() and len(got_s) == len(starts) + len(other_s)


@pytest.mark.parametrize("wide", [False, True])
def test_group_ids_chunked_fold_equals_first_appearance_of_each_row(wide):
    rng = np.random.default_rng(int(wide))
    rows = 2 * CHUNK_ROWS + 99
    top = 2**30 if wide else 50  # wide: spans past 2**40 together, the column-by-column fold
    cols = [rng.integers(-3, 4, rows).astype(np.int16), rng.integers(0, top, rows) % 7 * (top // 7 or 1),
            np.full(rows, 5), rng.integers(10, 13, rows).astype(np.int32) * (1 + int(wide) * 2**20)]
    got = group_ids(cols)
    frame = pd.DataFrame({i: c for i, c in enumerate(cols)})
    expect = pd.factorize(pd.MultiIndex.from_frame(frame))[0]
    assert got.dtype == np.int64 and np.array_equal(got, expect)


def test_gemv_mask_on_codes_equals_the_row_labels():
    names = ["gemv2T_kernel_val<float>", "ampere_sgemm_128x64_nn", "my_matvec_thing", "vectorized_elementwise", None]
    rng = np.random.default_rng(3)
    picked = [names[i] for i in rng.integers(0, len(names), 3 * CHUNK_ROWS + 1)]
    column = pd.Series(pd.Categorical(picked))
    for extra in ((), ("my_matvec",)):
        labels = classify(column, {"gemv": list(extra)} if extra else None)
        expect = (labels == "gemv").to_numpy()
        got = gemv_mask(column, extra)
        assert np.array_equal(got, expect) and expect.any() and not expect.all()
        assert np.array_equal(gemv_mask(column.astype(object), extra), expect)


def test_device_shares_of_one_device_equal_the_plain_sums():
    rng = np.random.default_rng(4)
    rows = 2 * CHUNK_ROWS + 3
    start = np.cumsum(rng.integers(1, 100, rows))
    kernels = pd.DataFrame({"device_id": np.zeros(rows, np.int32), "start": start,
                            "end": start + rng.integers(0, 5_000, rows)})
    is_gemv = rng.random(rows) < 0.4
    got = device_shares(kernels, is_gemv)
    dur = (kernels["end"] - kernels["start"]).to_numpy()
    assert got["total"].tolist() == [int(dur.sum())] and got["gemv"].tolist() == [int(dur[is_gemv].sum())]
    assert got["gemv_count"].tolist() == [int(is_gemv.sum())]
    assert got["share"].tolist() == [int(dur[is_gemv].sum()) / int(dur.sum())]
