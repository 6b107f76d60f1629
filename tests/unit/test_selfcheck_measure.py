"""The self-checks' chunked measures against plain per-row references (nsys_rules.model.selfcheck_measure).

The measures walk the activity table and the API frame a chunk at a time and sort only what they
must; these tests hold them to the obvious row-by-row definitions on random tables with many
streams, processes and devices, operations that start at the same instant, graph nodes, and more
rows than one chunk.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from nsys_rules.malloc_tune import CHUNK_ROWS
from nsys_rules.model.activity import KERNEL, GpuOps
from nsys_rules.model.selfcheck_measure import OVERLAP_SLACK_NS, Inputs, _drop_captured, stream_overlaps
from nsys_rules.model.windows import Window


def ops_table(rng: np.random.Generator, n: int, streams: int, processes: int, graph_share: float) -> GpuOps:
    """``n`` operations in start order, starts drawn from few values (many ties), on random streams."""
    start = np.sort(rng.integers(0, n * 400, n)).astype(np.int64)
    end = start + rng.integers(-50, 3_000, n)  # some end before they start, many overlap by more than the slack
    column = np.zeros(n, np.int32)
    return GpuOps(start=start, end=end, launch=start - 10, device=rng.integers(0, 2, n).astype(np.int32),
                  stream=rng.integers(0, streams, n).astype(np.int32),
                  pid=rng.integers(100, 100 + processes, n).astype(np.int32), corr=np.arange(1, n + 1, dtype=np.int32),
                  api_row=np.arange(n, dtype=np.int32), table_row=np.arange(n), graph=column - 1,
                  kind=np.full(n, KERNEL, np.int8), cls=column.astype(np.int8), by_graph=rng.random(n) < graph_share)


def reference_overlaps(ops: GpuOps, window: Window) -> tuple[int, int, int, int, set[int]]:
    """Per stream, in (start, end) order: each operation that starts before the previous one ends (past the
    slack) or ends before it starts."""
    frame = pd.DataFrame({"pid": ops.pid, "device": ops.device, "stream": np.asarray(ops.stream),
                          "start": ops.start, "end": ops.end})[~ops.by_graph]
    bad: set[int] = set()
    for _, rows in frame.groupby(["pid", "device", "stream"]):
        rows = rows.sort_values(["start", "end"])
        index, start, end = rows.index.to_numpy(), rows["start"].to_numpy(), rows["end"].to_numpy()
        bad.update(int(i) for i, s, e in zip(index, start, end, strict=True) if e < s)
        bad.update(int(index[k]) for k in range(1, len(rows)) if start[k] < end[k - 1] - OVERLAP_SLACK_NS)
    rows = np.array(sorted(bad), np.int64)
    inside = window.mask(frame["start"].to_numpy())
    return (len(rows), len(frame), int(window.mask(ops.start[rows]).sum()), int(inside.sum()),
            {int(d) for d in ops.device[rows]})


@pytest.mark.parametrize("streams,processes,graph_share", [(1, 1, 0.0), (3, 1, 0.0), (4, 3, 0.2), (40, 2, 0.5)])
def test_stream_overlaps_match_the_per_stream_definition(streams: int, processes: int, graph_share: float) -> None:
    rng = np.random.default_rng(streams * 10 + processes)
    ops = ops_table(rng, 3 * CHUNK_ROWS + 17, streams, processes, graph_share)
    for window in (Window(None, "whole"), Window(((int(ops.start[500]), int(ops.start[-900])),), "steady")):
        measured, devices = stream_overlaps(Inputs(None, ops, None, window))  # type: ignore[arg-type]
        count, of, steady, steady_of, expected_devices = reference_overlaps(ops, window)
        assert (measured.count, measured.of, measured.steady, measured.steady_of) == (count, of, steady, steady_of)
        assert devices == expected_devices
        assert 0 < count < of  # the table has overlaps and clean rows alike: the test can fail either way


def test_stream_overlaps_do_not_follow_the_order_of_ties() -> None:
    """Operations that start at the same instant may come in any order (an export's rows in any order): the
    answer is the same, the shorter one first."""
    rng = np.random.default_rng(38)
    ops = ops_table(rng, 2 * CHUNK_ROWS, 2, 1, 0.0)
    whole = Window(None, "whole")
    first = stream_overlaps(Inputs(None, ops, None, whole))  # type: ignore[arg-type]
    # Reverse each run of equal starts (the table stays in start order).
    order = np.lexsort((-np.arange(len(ops)), ops.start))
    fields: dict[str, Any] = {name: getattr(ops, name)[order] for name in GpuOps.__dataclass_fields__}
    second = stream_overlaps(Inputs(None, GpuOps(**fields), None, whole))  # type: ignore[arg-type]
    assert first[0] == second[0] and first[1] == second[1]
    assert first[0].count == reference_overlaps(ops, whole)[0]


def test_launches_inside_a_stream_capture_are_left_out() -> None:
    """A thread's calls between its BeginCapture and the next EndCapture (nested opens too) are captured."""
    rng = np.random.default_rng(7)
    n = 5_000
    tid = rng.integers(1, 4, n).astype(np.int32)
    start = np.arange(n, dtype=np.int64) * 10
    kind = rng.choice(np.array(["launch", "begin", "end", "other"]), n, p=[0.7, 0.02, 0.02, 0.26])
    api = pd.DataFrame({"tid": tid, "start": start})
    launch, begin, end = kind == "launch", kind == "begin", kind == "end"
    expected = launch.copy()
    for thread in np.unique(tid[begin]):
        opens, closes = start[begin & (tid == thread)], start[end & (tid == thread)]
        for lo in opens:
            later = closes[closes >= lo]
            hi = later[0] if len(later) else np.iinfo(np.int64).max
            expected &= ~((tid == thread) & (start >= lo) & (start <= hi))
    _drop_captured(api, launch, begin, end)
    assert np.array_equal(launch, expected)
    assert 0 < expected.sum() < (kind == "launch").sum()
