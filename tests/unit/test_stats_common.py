"""The statistics helpers behind every stats report: exact numbers, nsys rounding and names."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.analysis.grouped import first_rows, group_ids, group_stats
from nsys_rules.stats.common import nsys_api_name, order_rows, percent, round_half_up


def test_group_stats_exact_numbers():
    codes = np.array([0, 0, 0, 2, 2, 3])
    values = np.array([3, 1, 2, 10, 20, 5])
    s = group_stats(codes, values, 4)
    assert s.group.tolist() == [0, 2, 3]  # group 1 is empty: left out
    assert s.total.tolist() == [6, 30, 5]
    assert s.count.tolist() == [3, 2, 1]
    assert s.mean.tolist() == [2.0, 15.0, 5.0]
    assert s.median.tolist() == [2.0, 15.0, 5.0]  # even count: mean of the middle two
    assert s.minimum.tolist() == [1, 10, 5]
    assert s.maximum.tolist() == [3, 20, 5]
    # Sample standard deviation (n - 1), 0.0 for a single value, as nsys prints it.
    assert s.stddev.tolist() == pytest.approx([1.0, 50 ** 0.5, 0.0])


def test_median_of_even_count_is_mean_of_middle_two():
    s = group_stats(np.zeros(4, int), np.array([40, 10, 30, 20]), 1)
    assert s.median[0] == 25.0
    assert s.stddev[0] == pytest.approx((500 / 3) ** 0.5)


def test_percentiles_interpolate_between_ranks():
    s = group_stats(np.zeros(100, int), np.arange(1, 101), 1, (95, 99))
    assert s.percentiles[95][0] == pytest.approx(95.05)
    assert s.percentiles[99][0] == pytest.approx(99.01)


def test_huge_values_fall_back_to_lexsort_and_stay_exact():
    codes = np.array([1, 0, 1, 0])
    values = np.array([2**61, 7, 3, 2**60])
    s = group_stats(codes, values, 4)
    assert s.minimum.tolist() == [7, 3]
    assert s.maximum.tolist() == [2**60, 2**61]
    assert s.total.tolist() == [2**60 + 7, 2**61 + 3]


def test_negative_values_sort_correctly():
    s = group_stats(np.array([0, 0, 1]), np.array([-5, 5, -1]), 2)
    assert s.minimum.tolist() == [-5, -1] and s.maximum.tolist() == [5, -1]


def test_empty_input():
    s = group_stats(np.zeros(0, int), np.zeros(0, int), 3)
    assert len(s.group) == 0 and len(s.median) == 0


def test_round_half_up_like_sqlite():
    assert round_half_up(0.25, 1) == 0.3  # Python's round(0.25, 1) gives 0.2
    assert round_half_up(-0.25, 1) == -0.3
    assert round_half_up(12674 / 1e6, 3) == 0.013
    assert round_half_up(45918.75, 1) == 45918.8


def test_percent_of_total():
    assert percent(np.array([1, 1, 2])).tolist() == [25.0, 25.0, 50.0]
    assert percent(np.array([0, 0])).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("stored, printed", [
    ("cudaLaunchKernel_v7000", "cudaLaunchKernel"),
    ("cudaStreamSynchronize_v3020", "cudaStreamSynchronize"),
    ("cudaGraphLaunch_v10000", "cudaGraphLaunch_v10000"),
    ("cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2"),
    ("cudaGetDeviceProperties_v2_v12000", "cudaGetDeviceProperties_v2_v12000"),
    ("cuLaunchKernel", "cuLaunchKernel"),
])
def test_nsys_strips_only_four_digit_version_suffixes(stored, printed):
    assert nsys_api_name(stored) == printed


def test_group_ids_dense_groups_and_first_rows():
    a = np.array([5, 5, 7, 5, 7])
    b = np.array(["x", "y", "x", "x", None], dtype=object)
    group = group_ids([a, b])
    assert group.tolist() == [0, 1, 2, 0, 3]  # a missing name is a group of its own
    assert first_rows(group).tolist() == [0, 1, 2, 4]


def test_order_rows_multi_key_stable():
    rows = [{"t": 1, "n": "b"}, {"t": 2, "n": "c"}, {"t": 1, "n": "a"}]
    assert [r["n"] for r in order_rows(rows, ("t", True), ("n", False))] == ["c", "a", "b"]
