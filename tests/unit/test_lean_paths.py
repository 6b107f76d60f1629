"""The memory-lean paths (in-place, no row-length copies) give the same numbers as the plain computations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsys_rules.analysis import grouped

from nsys_rules.rules.kernel_tail import tails
from nsys_rules.analysis.device_time import chunk_utilization, device_intervals
from nsys_rules.analysis.intervals import busy_ns
from nsys_rules.testing import TraceBuilder, run_rule
from nsys_rules.inputs import open_trace
from nsys_rules.model.launches import launch_times, launching_rows


def _plain_tail(group: np.ndarray, durations: np.ndarray) -> tuple[np.ndarray, ...]:
    """tail_table's numbers as first written: lexsort, quantiles by index, bincount sums in float64."""
    durations = durations.astype(np.float64)
    counts = np.bincount(group)
    ordered = durations[np.lexsort((durations, group))]
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    quantiles = []
    for q in (0.5, 0.95, 0.99, 1.0):
        pos = q * (counts - 1)
        lo, hi = np.floor(pos).astype(np.int64), np.ceil(pos).astype(np.int64)
        a = ordered[np.clip(first + lo, 0, len(ordered) - 1)]
        b = ordered[np.clip(first + hi, 0, len(ordered) - 1)]
        quantiles.append(a + (b - a) * (pos - lo))
    p50 = quantiles[0]
    tail = np.bincount(group, weights=np.clip(durations - p50[group], 0, None), minlength=len(counts))
    total = np.bincount(group, weights=durations, minlength=len(counts))
    return counts, *quantiles, total, tail


@pytest.mark.parametrize("seed", range(40))
def test_tail_sums_from_packed_key_equal_row_sums(seed):
    rng = np.random.default_rng(seed)
    n, groups = int(rng.integers(1, 500)), int(rng.integers(1, 40))
    group = rng.integers(0, groups, n)
    if seed % 3 == 0:
        group[group == groups // 2] = 0  # an empty group in the middle
    if seed % 2:
        group = group.astype(np.int32)
    durations = rng.integers(0, (4, 1000, 10**9)[seed % 3], n).astype(np.int64)  # ties, half-ns medians
    counts, (p50, p95, p99, mx), total, tail = tails._sums_from_packed(group, durations)
    ref = _plain_tail(group, durations)
    present = ref[0] > 0
    assert counts.tolist() == ref[0].tolist()
    for got, want in zip((p50, p95, p99, mx), ref[1:5], strict=True):
        assert got[present].tolist() == want[present].tolist()
    assert total.tolist() == ref[5].tolist()
    assert tail.tolist() == ref[6].tolist()  # exact: whole ns and half-ns medians


def test_tail_table_float_durations_take_the_plain_path():
    group = np.array([0, 0, 0, 1, 1])
    durations = np.array([1.5, 2.25, 10.0, 3.0, 3.0])
    table = tails.tail_table(group, durations)
    assert table["tail_cost"].tolist() == [7.75, 0.0] and table["total"].tolist() == [13.75, 6.0]


def test_positional_tail_without_order_equals_identity_order():
    rng = np.random.default_rng(1)
    n = 600
    group = rng.integers(0, 5, n)
    step = np.repeat(np.arange(20), n // 20)
    step[::37] = -1  # some launches outside every step
    durations = rng.integers(1, 500, n).astype(np.int64)
    p50 = grouped.group_quantiles(group, durations, (0.5,))[1][0]
    with_order = tails.positional_tail(group, step, np.arange(n), durations, p50)
    without = tails.positional_tail(group, step, None, durations, p50)
    floats = tails.positional_tail(group, step, np.arange(n), durations.astype(np.float64), p50)
    pd.testing.assert_frame_equal(with_order, without)
    assert np.allclose(floats.to_numpy(dtype=float), with_order.to_numpy(dtype=float))


def test_packed_lexsort_with_narrow_and_float_keys_matches_np_lexsort():
    rng = np.random.default_rng(2)
    keys = (rng.integers(0, 50, 300).astype(np.int32), rng.integers(0, 4, 300).astype(np.float64),
            rng.integers(0, 7, 300).astype(np.uint16))
    assert grouped.packed_lexsort(keys).tolist() == np.lexsort(keys).tolist()


def test_busy_and_chunks_in_place_match_plain():
    rng = np.random.default_rng(3)
    s = np.sort(rng.integers(0, 10_000, 400))
    e = s + rng.integers(0, 300, 400)
    covered = np.zeros(10_400, bool)
    for a, b in zip(s, e, strict=True):
        covered[a:b] = True
    assert busy_ns(s, e) == int(covered.sum())
    assert busy_ns(s, e, 2_000, 5_000) == int(covered[2_000:5_000].sum())
    _, _, pct_sorted = chunk_utilization(s, e, 0, 10_400, 13)
    order = rng.permutation(400)
    _, _, pct_shuffled = chunk_utilization(s[order], e[order], 0, 10_400, 13)
    assert np.allclose(pct_sorted, pct_shuffled)


def test_device_intervals_one_pair_and_several():
    one = pd.DataFrame({"start": [0, 5], "end": [3, 9], "pid": [7, 7], "device_id": [0, 0]})
    other = pd.DataFrame({"start": [4], "end": [6], "pid": [7], "device_id": [0]})
    got = list(device_intervals([one, other]))
    # One pair: the smaller frame's rows inserted at their place in time, each end with its start.
    assert len(got) == 1 and got[0][2].tolist() == [0, 4, 5] and got[0][3].tolist() == [3, 6, 9]
    unsorted = pd.DataFrame({"start": [5, 0], "end": [9, 3], "pid": [7, 7], "device_id": [0, 0]})
    got = list(device_intervals([unsorted, other]))
    assert sorted(zip(got[0][2].tolist(), got[0][3].tolist(), strict=True)) == [(0, 3), (4, 6), (5, 9)]
    mixed = pd.DataFrame({"start": [0, 1, 2], "end": [1, 2, 3], "pid": [2, 1, 1], "device_id": [0, 1, 0]})
    keys = [(int(p), int(d), s.tolist()) for p, d, s, _ in device_intervals([mixed])]
    assert keys == [(1, 0, [2]), (1, 1, [1]), (2, 0, [0])]


@pytest.mark.parametrize("pids", [(100,), (100, 200)])
def test_launching_rows_one_process_fast_path_and_key_path_agree(tmp_path, pids):
    b = TraceBuilder()
    t = 1_000
    for i in range(30):
        # Every third kernel has no launching call in the trace (api=None): it must not match.
        b.kernel("k", t + 500, 100, pid=pids[i % len(pids)], api=None if i % 3 == 2 else "cudaLaunchKernel_v7000",
                 launch_at=t)
        t += 1_000
    path = b.write(tmp_path / "t.sqlite")
    trace = open_trace(path)
    try:
        kernels = trace.frame("kernels", ["start", "correlation_id", "pid"])
        api = trace.frame("api", ["start", "correlation_id", "pid"])
        rows, found = launching_rows(trace, kernels["pid"].to_numpy(), kernels["correlation_id"].to_numpy())
        assert int(found.sum()) == 20
        key = api.set_index(["pid", "correlation_id"])
        for i in range(len(kernels)):
            pair = (kernels["pid"].iloc[i], kernels["correlation_id"].iloc[i])
            assert bool(found[i]) == (pair in key.index)
            if found[i]:
                assert api["start"].iloc[rows[i]] == key.loc[pair, "start"]
        assert len(launch_times(trace, kernels)) == len(kernels)
    finally:
        trace.close()


@pytest.mark.parametrize("rule", ["launch-bound", "launch-blocking", "queue-delay", "kernel-tail"])
def test_rules_with_several_kernels_per_launch_call_run(h200, rule):
    # Node-traced graph replays: many kernels share one launch call (pid + correlationId), which
    # takes the hash (not the rising-key) path; its masks must be writable copies.
    findings = run_rule(rule, h200 / "decode_graph_node.sqlite")
    assert all(f.rule == rule for f in findings)
