"""Shortcuts that skip work must give what the full computation gives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsys_rules.analysis.intervals import clip, complement, counts_in, merge_intervals, point_in
from nsys_rules.analysis.names import flag_names
from nsys_rules.inputs import open_trace
from nsys_rules.model.job.extract import collect_ranks
from nsys_rules.loaders.columns import ONE_VALUE_ROWS, one_value
from nsys_rules.testing import TraceBuilder


def _one_gpu(tmp_path, names):
    b = TraceBuilder()
    t = 1_000
    for i in range(40):
        b.kernel(names[i % len(names)], t, 2_000)
        t += 5_000
    return b.write(tmp_path / "one.sqlite")


def test_one_gpu_trace_without_communication_names_is_no_job_and_reads_no_short_names(tmp_path):
    trace = open_trace(_one_gpu(tmp_path, ["gemv", "rms_norm"]))
    try:
        trace.preload({"kernels": ["start", "end", "pid", "device_id", "name"]})
        assert collect_ranks(trace, several=False) == []
        assert "short_name" not in trace.frame("kernels", ["pid"]).columns  # nothing more was read
    finally:
        trace.close()


@pytest.mark.parametrize("name", ["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "cross_device_reduce_1stage"])
def test_one_gpu_trace_with_a_communication_kernel_is_still_a_rank(tmp_path, name):
    trace = open_trace(_one_gpu(tmp_path, ["gemv", name]))
    try:
        trace.preload({"kernels": ["start", "end", "pid", "device_id", "name"]})
        ranks = collect_ranks(trace, several=False)
        assert len(ranks) == 1 and ranks[0].instances == 20
    finally:
        trace.close()


def test_a_name_only_in_the_string_table_takes_the_full_path(tmp_path):
    b = TraceBuilder()
    b.string("ncclDevKernel_Broadcast_RING_LL")  # in StringIds, but no kernel carries it
    for i in range(10):
        b.kernel("gemv", 1_000 + 5_000 * i, 2_000)
    trace = open_trace(b.write(tmp_path / "t.sqlite"))
    try:
        assert collect_ranks(trace, several=False) == []
        assert "short_name" in trace.frame("kernels", ["pid"]).columns  # judged on the real names
    finally:
        trace.close()


# -- interval shortcuts against the plain computations -------------------------------------------


def _plain_complement(starts, ends, lo, hi):
    s, e = clip(starts, ends, lo, hi)
    gap_s, gap_e = np.concatenate([[lo], e]), np.concatenate([s, [hi]])
    keep = gap_e > gap_s
    return gap_s[keep].astype(np.int64), gap_e[keep].astype(np.int64)


@pytest.mark.parametrize("seed", range(20))
def test_complement_equals_clip_then_gaps(seed):
    rng = np.random.default_rng(seed)
    for _ in range(300):
        n = int(rng.integers(0, 12))
        start = rng.integers(0, 100, n)
        length = rng.integers(0, 15, n) * (rng.random(n) > 0.2)  # zero-length operations too
        s, e = merge_intervals(start, start + length)
        lo = int(rng.integers(-10, 80))
        hi = lo + int(rng.integers(-5, 60))
        want, got = _plain_complement(s, e, lo, hi), complement(s, e, lo, hi)
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


@pytest.mark.parametrize("seed", range(10))
def test_counts_in_equals_point_in_counts(seed):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        m, n = int(rng.integers(1, 30)), int(rng.integers(0, 300))
        s = np.sort(rng.integers(0, 1000, m))
        e = s + rng.integers(0, 200, m)  # instances may overlap the next one
        t = np.sort(rng.integers(-50, 1300, n))
        where = point_in(t, s, e)
        assert counts_in(t, s, e).tolist() == np.bincount(where[where >= 0], minlength=m).tolist()


@pytest.mark.parametrize("hits", [0, 1, 3, 4, 5, 12])
def test_flag_names_few_and_many_matches(hits):
    rng = np.random.default_rng(hits)
    names = [f"n{i}" for i in range(30)]
    codes = rng.integers(-1, 30, 5000).astype(np.int8)
    series = pd.Series(pd.Categorical.from_codes(codes, categories=names))
    members = set(names[:hits])
    assert flag_names(series, members.__contains__).tolist() == (series.isin(members).to_numpy() & (codes >= 0)).tolist()


def test_one_value_columns_hold_no_rows_and_read_the_same():
    same = np.full(ONE_VALUE_ROWS, 7, np.int32)
    kept = one_value(same)
    assert kept.strides == (0,) and kept.tolist() == same.tolist() and not kept.flags.writeable
    varied = same.copy()
    varied[-1] = 8
    assert one_value(varied) is varied
    assert one_value(same[:10]) is not None and one_value(same[:10]).strides != (0,)  # short columns stay


def test_constant_ids_load_as_one_value_and_rules_see_the_same_numbers(tmp_path):
    b = TraceBuilder()
    for i in range(ONE_VALUE_ROWS + 10):
        b.kernel("gemv" if i % 3 else "rms_norm", 1_000 + 3_000 * i, 1_000, grid=(4 + i % 2, 1, 1))
    trace = open_trace(b.write(tmp_path / "t.sqlite"))
    try:
        kernels = trace.frame("kernels", ["start", "pid", "device_id", "stream_id", "grid_x", "grid_z", "name"])
        assert kernels["pid"].to_numpy().strides == (0,) and kernels["grid_z"].to_numpy().strides == (0,)
        assert kernels["grid_x"].to_numpy().strides != (0,)
        assert set(kernels["device_id"].tolist()) == {0} and set(kernels["grid_z"].tolist()) == {1}
        assert kernels.loc[kernels["grid_x"] == 5, "pid"].nunique() == 1
        api = trace.frame("api", ["pid", "tid", "name"])
        assert api["tid"].to_numpy().strides == (0,) and api["pid"].iloc[0] == kernels["pid"].iloc[0]
        assert list(kernels["name"].cat.categories) == ["rms_norm", "gemv"]
        assert kernels["name"].cat.codes.dtype == np.int8
    finally:
        trace.close()


@pytest.mark.parametrize("seed", range(5))
def test_blocking_calls_of_one_in_order_thread_equal_the_thread_sorted_path(seed, monkeypatch):
    from nsys_rules.analysis import host

    rng = np.random.default_rng(seed)
    names = ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaMemcpy", "cuMemcpyDtoHAsync",
             "cudaDeviceSynchronize", "cudaEventSynchronize"]
    n = 3000
    start = np.cumsum(rng.integers(1, 50, n))
    api = pd.DataFrame({"start": start, "end": start + rng.integers(0, 40, n), "pid": np.full(n, 7, np.int32),
                        "tid": np.full(n, 9, np.int32), "correlation_id": np.arange(1, n + 1, dtype=np.int32)})
    base = pd.Series(pd.Categorical.from_codes(rng.integers(-1, len(names), n), categories=names))
    copies = pd.DataFrame({"copy_kind": rng.choice([-1, 1, 2], n), "bytes": rng.integers(0, 1 << 20, n)})
    for c in (None, copies):
        fast = host.blocking_calls(api, base, c)
        monkeypatch.setattr(host, "_one_thread_in_order", lambda *a: False)
        sorted_path = host.blocking_calls(api, base, c)
        monkeypatch.undo()
        assert len(fast) and fast.equals(sorted_path)


@pytest.mark.parametrize("seed", range(5))
def test_positional_tail_of_some_groups_equals_their_rows_of_the_whole(seed):
    from nsys_rules.rules.kernel_tail import tails

    rng = np.random.default_rng(seed)
    n, groups = 4000, 12
    group = rng.integers(0, groups, n).astype(np.int32)
    step = np.sort(rng.integers(-1, 40, n)).astype(np.int32)
    durations = rng.integers(1, 5000, n).astype(np.int64)
    order = rng.permutation(n) if seed % 2 else None
    p50 = tails.tail_table(group, durations)["p50"].to_numpy()
    whole = tails.positional_tail(group, step, order, durations, p50)
    chosen = np.array([1, 4, 7])
    rows = np.flatnonzero(np.isin(group, chosen))
    part = tails.positional_tail(group[rows], step[rows], None if order is None else order[rows], durations[rows], p50)
    assert part.loc[chosen].equals(whole.loc[chosen])


@pytest.mark.parametrize("case", ["rising", "repeat", "two_pids", "negative", "wide"])
def test_keys_rising_reads_the_ids_as_the_keys_would(case):
    from nsys_rules.analysis.keys import keys_rising, launch_key

    rng = np.random.default_rng(4)
    corr = np.cumsum(rng.integers(1, 5, 10_000)).astype(np.int32)
    pid = np.broadcast_to(np.array([77], np.int32), corr.shape)  # one process, as loaders.columns.one_value keeps it
    if case == "repeat":
        corr[500] = corr[499]
    elif case == "two_pids":
        pid = np.where(np.arange(len(corr)) < 5000, 5, 3).astype(np.int32)
    elif case == "negative":
        corr[0] = -7  # low 32 bits of -7 sort after every positive id
    elif case == "wide":
        corr = corr.astype(np.int64) + (1 << 33)
    key = launch_key(pid, corr)
    assert keys_rising(pid, corr) == bool((key[1:] > key[:-1]).all())
    assert keys_rising(pid, corr) is {"rising": True, "repeat": False, "two_pids": False, "negative": False,
                                      "wide": True}[case]
