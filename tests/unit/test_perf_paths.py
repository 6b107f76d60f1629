"""The fast paths taken for big traces give the same answers as the plain ones."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsys_rules.inputs import open_trace
from nsys_rules.loaders.columns import dense_codes
from nsys_rules.loaders.sqlite import _fetch_arrow
from nsys_rules.loaders.damage import _shared_start
from nsys_rules.rule import _contiguous
from nsys_rules.analysis.intervals import merge_intervals
from nsys_rules.testing import TraceBuilder
from nsys_rules.analysis.intervals import overlap_length
from nsys_rules.model.launches import api_key_index, launch_times
from nsys_rules.model.windows import Window


def test_dense_codes_match_np_unique():
    rng = np.random.default_rng(0)
    ids = rng.integers(-1, 50, 1000)
    valid = ids >= 0
    uniq, inverse = dense_codes(ids, valid, bool(valid.all()))
    ref_uniq, ref_inverse = np.unique(ids[valid], return_inverse=True)
    assert uniq.tolist() == ref_uniq.tolist()
    assert inverse[valid].tolist() == ref_inverse.tolist() and (inverse[~valid] == -1).all()
    huge = np.array([5, 10**15, 5, 7])  # sparse ids take the np.unique path
    uniq, inverse = dense_codes(huge, huge >= 0, True)
    assert uniq.tolist() == [5, 7, 10**15] and inverse.tolist() == [0, 2, 0, 1]


@pytest.mark.parametrize("starts", [[1, 2, 2, 3, 5, 5, 5, 9], [4, 1, 4, 2, 9, 1], [7], [3, 3]])
def test_shared_start_is_duplicated_keep_false(starts):
    arr = np.array(starts, np.int64)
    if len(arr) < 2:
        return
    assert _shared_start(arr).tolist() == pd.Series(arr).duplicated(keep=False).tolist()


def test_contiguous_window_rows():
    assert _contiguous(np.array([True, True])) is None
    assert _contiguous(np.array([False, True, True, False])) == (1, 3)
    assert _contiguous(np.array([True, False, True])) == (-1, -1)
    assert _contiguous(np.array([False, False])) == (0, 0)


def test_one_interval_mask_equals_the_general_mask():
    times = np.array([-5, 0, 3, 10, 11, 2**40])
    one = Window(((0, 10),), "t")
    assert one.mask(times).tolist() == [False, True, True, True, False, False]
    two = Window(((0, 3), (10, 10)), "t")
    assert two.mask(times).tolist() == [False, True, True, True, False, False]


def test_overlap_equals_merging_both_lists():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n, m = rng.integers(0, 30, 2)
        a = rng.integers(0, 500, n)
        c = rng.integers(0, 500, m)
        q_lo, q_hi = merge_intervals(a, a + rng.integers(0, 40, n))
        b_lo, b_hi = merge_intervals(c, c + rng.integers(0, 40, m))
        both_lo, both_hi = merge_intervals(np.concatenate([q_lo, b_lo]), np.concatenate([q_hi, b_hi]))
        union_minus_b = int((both_hi - both_lo).sum() - (b_hi - b_lo).sum())
        assert int((q_hi - q_lo).sum() - overlap_length((q_lo, q_hi), (b_lo, b_hi))) == union_minus_b


def test_merge_intervals_sorted_and_unsorted_agree():
    s = np.array([0, 5, 6, 20, 21])
    e = np.array([4, 10, 8, 25, 22])
    order = np.array([3, 0, 4, 2, 1])
    assert [x.tolist() for x in merge_intervals(s, e)] == [x.tolist() for x in merge_intervals(s[order], e[order])]
    assert [x.tolist() for x in merge_intervals(s, e)] == [[0, 5, 20], [4, 10, 25]]


def _trace(tmp_path, shuffled: bool):
    b = TraceBuilder()
    for i in range(30):
        b.kernel("k", start=1_000_000 + i * 10_000, duration=5_000, grid=(i + 1, 1, 1))
    path = b.write(tmp_path / ("t.sqlite" if not shuffled else "s.sqlite"))
    if shuffled:  # API rows out of correlation order: the index must sort them
        import sqlite3

        db = sqlite3.connect(path)
        # Rows are read in start order whatever order the file stores them in: the correlation ids fall instead.
        for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"):
            db.execute(f"UPDATE {table} SET correlationId = 1000000 - correlationId")
        db.commit()
        db.close()
    return open_trace(path)


@pytest.mark.parametrize("shuffled", [False, True])
def test_launch_times_join_by_correlation_id(tmp_path, shuffled):
    trace = _trace(tmp_path, shuffled)
    try:
        kernels = trace.frame("kernels", ["start", "correlation_id", "pid"])
        api = trace.frame("api", ["start", "correlation_id", "pid"])
        launch = launch_times(trace, kernels)
        expected = api.set_index("correlation_id")["start"].reindex(kernels["correlation_id"]).to_numpy()
        assert launch.tolist() == expected.tolist()
        assert launch_times(trace, kernels) is launch  # cached for the trace's own frame
        key, order = api_key_index(trace)
        assert (order is None) == (not shuffled)
        assert bool((key[1:] >= key[:-1]).all())
    finally:
        trace.close()


def test_narrow_columns_are_int32_and_widen_when_a_value_does_not_fit(tmp_path):
    b = TraceBuilder()
    b.kernel("k", start=1_000, duration=10, grid=(7, 1, 1))
    path = b.write(tmp_path / "n.sqlite")
    trace = open_trace(path)
    try:
        frame = trace.frame("kernels", ["start", "grid_x", "device_id", "pid"])
        assert frame["grid_x"].dtype == np.int16 and frame["pid"].dtype == np.int32  # a launch dimension: int16
        assert frame["device_id"].dtype == np.int32
        assert frame["start"].dtype == np.int64 and int(frame["grid_x"].iloc[0]) == 7
    finally:
        trace.close()
    out = _fetch_arrow(path, 'SELECT "start", 4294967296 + "gridX" FROM CUPTI_ACTIVITY_KIND_KERNEL', ["a", "b"], 1,
                       frozenset({"b"}))
    assert out["b"].dtype == np.int64 and int(out["b"][0]) == 4294967296 + 7


def test_packed_lexsort_matches_numpy():
    from nsys_rules.analysis.grouped import packed_lexsort

    rng = np.random.default_rng(3)
    for _ in range(100):
        n = int(rng.integers(1, 200))
        for keys in ((rng.integers(0, 50, n).astype(float), rng.integers(0, 7, n)),  # packs
                     (rng.integers(0, 2**40, n), rng.integers(0, 2**30, n)),  # too wide: numpy
                     (rng.random(n), rng.integers(0, 3, n)),  # fractions: numpy
                     (rng.integers(-5, 5, n), rng.integers(0, 3, n))):  # negative: numpy
            assert packed_lexsort(keys).tolist() == np.lexsort(keys).tolist()


def test_launch_dimensions_are_int16_only_where_every_value_fits(tmp_path):
    # Issue 39: the four launch dimensions that vary are most of a kernel row's ids; int16 halves them, but a
    # grid of 40000 blocks (legal: grids reach 2**31 - 1 in x) keeps the column int32 with its values whole.
    b = TraceBuilder()
    b.kernel("k", start=1_000, duration=10, grid=(40_000, 3, 1), block=(128, 1, 1))
    b.kernel("k", start=2_000, duration=10, grid=(7, 5, 1), block=(256, 1, 1))
    path = b.write(tmp_path / "s.sqlite")
    trace = open_trace(path)
    try:
        frame = trace.frame("kernels", ["grid_x", "grid_y", "block_x"])
        assert frame["grid_x"].dtype == np.int32 and frame["grid_x"].tolist() == [40_000, 7]
        assert frame["grid_y"].dtype == np.int16 and frame["grid_y"].tolist() == [3, 5]
        assert frame["block_x"].dtype == np.int16 and frame["block_x"].tolist() == [128, 256]
    finally:
        trace.close()
