"""Work shared between rules, or cut short, must give what the plain computation gives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsys_rules.model.activity import COLUMNS, gpu_ops
from nsys_rules.analysis.grouped import CHUNK_ROWS, duration_sum, group_ids
from nsys_rules.model.launch_rows import frame_launch_times, shared_api_rows
from nsys_rules.model.launches import launch_api_rows, launch_times, launching_rows
from nsys_rules.analysis.names import rows_with_codes
from nsys_rules.inputs import open_trace
from nsys_rules.loaders.columns import all_equal
from nsys_rules.loaders.damage import any_below, drop_invalid_required, rises_strictly
from nsys_rules.testing import MAIN_TID, TraceBuilder


@pytest.mark.parametrize("hits", [0, 1, 5, 12, 13, 25])
def test_rows_with_codes_across_chunks_equals_isin(hits):
    rng = np.random.default_rng(hits)
    codes = rng.integers(-1, 30, CHUNK_ROWS * 2 + 123).astype(np.int8)
    wanted = np.sort(rng.choice(30, hits, replace=False)) if hits else np.zeros(0, np.int64)
    table = np.zeros(31, bool)
    table[wanted] = True  # the last entry (code -1) stays False
    plain = np.isin(codes, wanted)
    assert rows_with_codes(codes, wanted, table).tolist() == plain.tolist()
    assert rows_with_codes(codes, wanted).tolist() == plain.tolist()


def _plain_group_ids(columns):
    frame = pd.DataFrame({i: np.asarray(c) for i, c in enumerate(columns)})
    return frame.groupby(list(frame.columns), sort=False, dropna=False).ngroup().to_numpy()


@pytest.mark.parametrize("seed", range(4))
def test_group_ids_skipping_one_value_columns_equals_a_group_by(seed):
    rng = np.random.default_rng(seed)
    n = 5_000
    one = np.broadcast_to(np.array([3], np.int32), (n,))  # as loaders.columns.one_value keeps it
    columns = [one, rng.integers(0, 4, n).astype(np.int8), np.full(n, 9, np.int64), rng.integers(-2, 3, n),
               rng.integers(0, 2**30, n) if seed % 2 else rng.integers(0, 50, n), rng.integers(0, 2**30, n)]
    assert group_ids(columns).tolist() == _plain_group_ids(columns).tolist()


@pytest.mark.parametrize("mask", ["none", "bool", "slice"])
def test_duration_sum_equals_the_plain_sum(mask):
    rng = np.random.default_rng(7)
    n = CHUNK_ROWS * 2 + 77
    start = rng.integers(0, 2**40, n)
    end = start + rng.integers(0, 10**6, n)
    pick = {"none": None, "bool": rng.random(n) < 0.3, "slice": slice(1000, n - 5)}[mask]
    plain = int((end - start).sum()) if pick is None else int((end[pick] - start[pick]).sum())
    assert duration_sum(start, end, pick) == plain


def _mixed_trace(tmp_path):
    """Kernels with copies and memsets between them, one kernel launched by no traced call, ids not in row order."""
    b = TraceBuilder()
    t = 10_000
    for i in range(60):
        if i % 7 == 3:
            b.memcpy(t, 1_500, 4096)
        elif i % 11 == 5:
            b.memset(t, 800, 256)
        b.kernel("gemv" if i % 2 else "rms_norm", t + 2_000, 1_000 + 37 * (i % 5), api=None if i == 17 else
                 "cudaLaunchKernel_v7000", stream=7 + i % 2)
        t += 6_000
    return b.write(tmp_path / "mixed.sqlite")


def test_launch_rows_from_the_activity_table_equal_the_join(tmp_path):
    trace = open_trace(_mixed_trace(tmp_path))
    try:
        trace.preload({table: list(columns) for table, columns in COLUMNS.items()})  # as a check reads them
        plain = {}
        for table in ("kernels", "memcpy", "memset"):
            frame = trace.frame(table, ["start", "pid", "correlation_id"])
            assert shared_api_rows(trace, frame) is None  # the activity table is not built yet: the join
            rows, found = launching_rows(trace, frame["pid"].to_numpy(), frame["correlation_id"].to_numpy())
            plain[table] = (launch_times(trace, frame).copy(), np.where(found, rows, -1), launch_api_rows(trace, frame))
            trace._frames[table] = frame.copy()  # a fresh frame: nothing cached for it
        gpu_ops(trace)
        for table, (times, rows, calls) in plain.items():
            frame = trace.frame(table, ["start", "pid", "correlation_id"])
            shared = shared_api_rows(trace, frame)
            assert shared is not None and shared.tolist() == rows.tolist()
            assert frame_launch_times(trace, frame).tolist() == times.tolist()
            pd.testing.assert_frame_equal(launch_api_rows(trace, frame, api_rows=shared), calls)
            narrow = launch_api_rows(trace, frame, api_rows=shared, columns=("api_end", "api_name"))
            pd.testing.assert_frame_equal(narrow, calls[["api_end", "api_name"]])
        assert (frame_launch_times(trace, trace.frame("kernels", ["start"])) == trace.frame("kernels", ["start"])[
            "start"].to_numpy()).sum() == 1  # the one kernel no traced call launched keeps its own start
    finally:
        trace.close()


def test_drop_invalid_required_by_range_drops_what_the_masks_drop():
    start = np.arange(10, dtype=np.int64) * 100
    clean = pd.DataFrame({"start": start, "end": start + 5, "correlation_id": np.arange(1, 11)})
    damage: list[str] = []
    assert drop_invalid_required("kernels", clean, ["start", "end"], -1, damage) is clean and not damage
    bad = clean.copy()
    bad.loc[3, "start"] = -1  # text in an INTEGER column, read as NULL_INT
    bad.loc[6, "end"] = 2**62  # no capture's timestamp
    out = drop_invalid_required("kernels", bad, ["start", "end"], -1, damage)
    assert out["correlation_id"].tolist() == [1, 2, 3, 5, 6, 8, 9, 10]
    assert len(damage) == 2


@pytest.mark.parametrize("at", [None, 1, 4093, 9_999])
def test_all_equal_by_sample_and_range_equals_a_comparison_of_every_row(at):
    values = np.full(10_000, 5, np.int32)
    if at is not None:
        values[at] = 6  # one differing row, on or off the sampled positions
    assert all_equal(values) == bool((values == values[0]).all())
    assert all_equal(values.astype(bool)) == bool((values.astype(bool) == bool(values[0])).all())


def test_string_codes_gathered_in_chunks_equal_a_lookup_per_row(tmp_path):
    b = TraceBuilder()
    ids = [b.string(f"name{i}") for i in range(40)]
    b.kernel("gemv", 1_000, 500)
    trace = open_trace(b.write(tmp_path / "s.sqlite"))
    try:
        rng = np.random.default_rng(3)
        refs = rng.choice(np.array(ids + [-1], np.int32), 600_000)  # -1: a NULL string id
        names = trace.export.resolve_strings(refs, "test")
        sid, svalue = trace.export._string_table()
        text = dict(zip(sid.tolist(), svalue.tolist(), strict=True))
        assert [None if pd.isna(v) else v for v in names[:2000]] == [text.get(int(r)) for r in refs[:2000]]
        assert list(pd.isna(names)) == list(refs < 0)
        assert names.codes.dtype == np.int8
    finally:
        trace.close()


@pytest.mark.parametrize("at", [None, 0, CHUNK_ROWS - 1, CHUNK_ROWS, CHUNK_ROWS + 5])
def test_chunked_row_checks_equal_the_whole_masks(at):
    start = np.arange(CHUNK_ROWS + 10, dtype=np.int64) * 10
    end = start + 3
    if at is not None:
        start[at + 1] = start[at]  # a shared start, on or across a chunk edge
        end[at] = start[at] - 1  # and a row ending before it starts
    assert rises_strictly(start) == bool((start[1:] > start[:-1]).all())
    assert any_below(end, start) == bool((end < start).any())


@pytest.mark.parametrize("seed", range(4))
def test_frame_view_blocks_and_whole_equal_the_frame_order(seed):
    from nsys_rules.model.launch_rows import FrameView

    rng = np.random.default_rng(seed)
    n = 500
    others = np.sort(rng.choice(n, [0, 1, 3, 9][seed], replace=False)).astype(np.int64)
    values = rng.integers(0, 10**9, n)
    frame = np.delete(values, others)  # the plain frame order
    view = FrameView(None, others, others - np.arange(len(others)))  # type: ignore[arg-type]
    assert view.whole(values).tolist() == frame.tolist()
    assert view.whole(values, np.intp).dtype == np.intp and view.whole(values, np.intp).tolist() == frame.tolist()
    positions = np.delete(np.arange(n), others)  # where each frame row sits among the values
    for lo, hi in [(0, len(frame)), (0, 0), *rng.integers(0, len(frame), (40, 2)).tolist()]:
        lo, hi = min(lo, hi), max(lo, hi)
        rows = view.rows(lo, hi)
        between = hi > lo and bool(((others > positions[lo]) & (others < positions[hi - 1])).any())
        assert (rows is None) == between
        if rows is not None:
            assert values[rows].tolist() == frame[lo:hi].tolist()


def test_window_frames_from_the_activity_table_equal_the_plain_join(tmp_path):
    from nsys_rules.rule import RuleContext
    from nsys_rules.model.windows import FULL, Window

    b = TraceBuilder()
    t = 10_000
    for i in range(80):
        if i in (5, 6, 60):
            b.memset(t, 800, 256)
        b.kernel("gemv" if i % 2 else "rms_norm", t + 2_000, 1_000 + 37 * (i % 5), api="cudaLaunchKernel_v7000")
        t += 6_000
    trace = open_trace(b.write(tmp_path / "kernels.sqlite"))
    gpu_ops(trace)
    full = trace.frame("kernels", ["start", "pid", "correlation_id"])
    from nsys_rules.model.launch_rows import frame_view

    assert frame_view(trace, "kernels", len(full)) is not None  # the path under test
    plain = launch_times(open_trace(b.write(tmp_path / "again.sqlite")), full.copy())
    plain_rows = launch_api_rows(trace, full.copy(), columns=("api_start", "api_end"))
    lo, hi = int(plain[10]), int(plain[40])  # no memset among them: views; then the whole with memsets
    for window in (Window(((lo, hi),), "test"), Window(((int(plain[2]), int(plain[70])),), "test"), FULL):
        ctx = RuleContext(trace, None, None, window)  # type: ignore[arg-type]
        kept = window.mask(plain)
        frame = ctx.frame("kernels", ["start", "pid", "correlation_id"])
        assert frame["launch_start"].tolist() == plain[kept].tolist()
        other = ctx.frame("kernels", ["start"])  # another frame of the table: the same launch times
        other["launch_start"] += 1  # a rule writing into its frame changes no other frame
        assert frame["launch_start"].tolist() == plain[kept].tolist()
        assert other["launch_start"].tolist() == (plain[kept] + 1).tolist()
        calls = ctx.launch_calls("kernels", columns=("api_start", "api_end"))
        assert calls.to_dict("list") == plain_rows[kept].reset_index(drop=True).to_dict("list")


@pytest.mark.parametrize("seed", range(6))
def test_spliced_columns_index_as_the_plain_column(seed):
    from nsys_rules.analysis.spliced import splice

    rng = np.random.default_rng(seed)
    rows = 300
    count = [0, 1, 2, 8, 8, 5][seed]
    at = np.sort(rng.choice(rows + count, count, replace=False))
    if seed == 5:
        at = np.arange(count) + rows  # every spliced row at the end
    values = rng.integers(-5, 5, len(at))
    base = None if seed % 2 else rng.integers(0, 10**6, rows).astype(np.int32)
    column = splice(base, rows, at, values, np.int64)
    plain = np.empty(rows + len(at), np.int64)
    plain[at] = values
    plain[np.setdiff1d(np.arange(len(plain)), at)] = np.arange(rows) if base is None else base
    assert np.asarray(column).tolist() == plain.tolist() and len(column) == len(plain)
    for lo, hi in [(0, len(plain)), (3, 3), *np.sort(rng.integers(0, len(plain), (20, 2))).tolist()]:
        part = column[lo:hi]
        assert len(part) == hi - lo and part.tolist() == plain[lo:hi].tolist()
        mask = rng.random(hi - lo) < 0.5
        assert part[mask].tolist() == plain[lo:hi][mask].tolist()
        picks = rng.integers(0, max(hi - lo, 1), 3) if hi > lo else np.zeros(0, np.int64)
        assert part[picks].tolist() == plain[lo:hi][picks].tolist()
        assert [part[int(i)] for i in picks] == plain[lo:hi][picks].tolist()
        for value in (0, 3, -5):
            assert (part == value).tolist() == (plain[lo:hi] == value).tolist()
            assert (part != value).tolist() == (plain[lo:hi] != value).tolist()


@pytest.mark.parametrize("rows", [0, 1, 50])
def test_spliced_one_value_columns_compare_as_the_plain_column(rows):
    from nsys_rules.analysis.spliced import splice

    base = np.broadcast_to(np.array([7], np.int32), rows)  # as loaders.columns.one_value keeps it
    at, values = np.array([0, min(2, rows + 1), rows + 2]), np.array([7, 3, 9])
    column = splice(base, rows, at, values, np.int32)
    plain = np.asarray(column)
    assert plain.tolist() == np.insert(np.full(rows, 7), at - np.arange(3), values).tolist()
    for lo, hi in [(0, len(plain)), (1, len(plain) - 1), (2, 3)]:
        for value in (7, 3, 9, 0):
            assert (column[lo:hi] == value).tolist() == (plain[lo:hi] == value).tolist()


def test_spliced_activity_fields_equal_the_merged_ones(tmp_path):
    from nsys_rules.model import activity
    from nsys_rules.model.activity_merge import merge_parts
    from nsys_rules.analysis.spliced import Spliced

    trace = open_trace(_mixed_trace(tmp_path))
    ops = gpu_ops(trace)
    assert isinstance(ops.table_row, Spliced) and isinstance(ops.corr, Spliced)  # the path under test
    plain = merge_parts([activity._part(trace, kind, trace.frame(table, COLUMNS[table]))[0]
                         for kind, table in activity.KIND_TABLES.items() if trace.has(table)], activity._FIELDS)
    for name in activity.SPLICED_FIELDS:
        assert np.asarray(getattr(ops, name)).tolist() == plain[name].tolist(), name
        assert (getattr(ops, name) == 1).tolist() == (plain[name] == 1).tolist(), name
    kernels = ops.kind == activity.KERNEL
    symbols = activity._symbols(trace.frame("kernels", COLUMNS["kernels"]))
    assert activity.kernel_symbols(trace).tolist() == np.where(kernels, symbols[np.minimum(
        plain["table_row"], len(symbols) - 1)], -1).tolist()


@pytest.mark.parametrize("streams", [(), (7,), (3,), (7, 9), (3, 9, 11, 7)])
def test_operations_on_streams_equal_isin(streams):
    """GpuOps.on_streams on a plain, a one-value and a spliced stream column: what np.isin gives."""
    from nsys_rules.model.activity import _FIELDS, GpuOps
    from nsys_rules.analysis.spliced import splice

    rows = 3 * CHUNK_ROWS + 5
    rng = np.random.default_rng(len(streams))
    one = np.broadcast_to(np.array([7], np.int32), rows)
    spliced = splice(one, rows - 3, np.array([0, 40_000, rows - 1]), np.array([3, 9, 11]), np.int32)
    for column in (rng.choice(np.array([3, 7, 9, 11], np.int32), rows), one, spliced):
        fields = {name: np.zeros(rows, np.int32) for name in _FIELDS}
        ops = GpuOps(**{**fields, "stream": column})
        want = np.isin(np.asarray(column), np.asarray(streams, np.int64))
        got = ops.on_streams(streams)
        assert isinstance(got, np.ndarray) and got.dtype == bool and got.tolist() == want.tolist()


@pytest.mark.parametrize("seed", range(6))
def test_interleave_equals_np_insert(seed):
    """spliced.interleave (the merge's and insert_in_order's block copies) against np.insert, ends included."""
    from nsys_rules.analysis.spliced import interleave

    rng = np.random.default_rng(seed)
    for _ in range(50):
        base = rng.integers(-50, 50, int(rng.integers(0, 40))).astype(np.int32)
        places = np.sort(rng.integers(0, len(base) + 1, int(rng.integers(0, 8))))
        values = rng.integers(1000, 2000, len(places))
        final = places + np.arange(len(places))
        got = interleave(base, final, values, np.int64)
        assert got.dtype == np.int64 and got.tolist() == np.insert(base.astype(np.int64), places, values).tolist()


@pytest.mark.parametrize("threads", [1, 2])
def test_launch_calls_give_the_calling_thread(tmp_path, threads):
    # One thread: its tid column is one value (a zero-stride array), filled rather than gathered;
    # two threads: gathered. Either way the shared join and the plain join agree, -1 where no call.
    from nsys_rules.rule import RuleContext
    from nsys_rules.model.windows import FULL

    b = TraceBuilder()
    tids = [MAIN_TID + (i % threads) * 7 for i in range(40)]
    for i, tid in enumerate(tids):
        b.kernel("gemv", 10_000 + 5_000 * i, 1_000, tid=tid)
    b.kernel("orphan", 500_000, 1_000, correlation_id=999_999)  # no traced call launched it
    trace = open_trace(b.write(tmp_path / "threads.sqlite"))
    try:
        trace.preload({table: list(columns) for table, columns in COLUMNS.items()})
        frame = trace.frame("kernels", ["start", "pid", "correlation_id"])
        plain = launch_api_rows(trace, frame, columns=("api_tid", "api_start"))
        gpu_ops(trace)
        shared = RuleContext(trace, None, None, FULL).launch_calls("kernels", columns=("api_tid",))  # type: ignore[arg-type]
    finally:
        trace.close()
    expected = [*tids, -1]
    assert plain["api_tid"].tolist() == expected and shared["api_tid"].tolist() == expected
    assert (plain["api_start"] < 0).tolist() == [False] * 40 + [True]


@pytest.mark.parametrize("every", [True, False])
def test_gather_from_a_one_value_column_equals_take(every):
    # Big traces keep a one-thread tid column as one value (loaders.columns.one_value); small test traces do not.
    from nsys_rules.model.launches import _at

    values = np.broadcast_to(np.array([4242], np.int32), 1000)
    rows = np.array([0, 999, 5, -1 if not every else 6], np.intp)
    found = rows >= 0
    out = _at(values, rows, found, every)
    expected = np.where(found, np.take(np.ascontiguousarray(values), rows, mode="clip"), -1)
    assert out.dtype == values.dtype and out.tolist() == expected.tolist()
