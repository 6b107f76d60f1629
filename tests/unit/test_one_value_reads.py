"""Id columns of one value read as that value, not an array per row (issue 39), with the same values out."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from nsys_rules.loaders.batches import ONE_VALUE_FROM, fill_columns
from nsys_rules.loaders.export import NULL_INT

ROWS = 3000  # rows per batch: three batches are past ONE_VALUE_FROM


def _batches(columns: dict[str, list[np.ndarray | None]]) -> list[pa.RecordBatch]:
    """Record batches from per-batch arrays (None: an all-NULL batch typed null, as ADBC gives it)."""
    out = []
    for k in range(len(next(iter(columns.values())))):
        arrays = [pa.nulls(ROWS) if parts[k] is None else pa.array(parts[k]) for parts in columns.values()]
        out.append(pa.RecordBatch.from_arrays(arrays, names=list(columns)))
    return out


def test_one_value_ids_are_views_and_a_late_difference_is_kept():
    start = [np.arange(k * ROWS, (k + 1) * ROWS, dtype=np.int64) for k in range(3)]
    pid = [np.full(ROWS, (455 << 24) | 7, np.int64) for _ in range(3)]  # one process and thread
    stream = [np.full(ROWS, 7, np.int64), np.full(ROWS, 7, np.int64), np.r_[np.full(ROWS - 1, 7), 13]]
    node = [None, None, None]  # no graph node: NULL everywhere
    device = [np.full(ROWS, 2**40, np.int64) for _ in range(3)]  # one value beyond int32: kept int64
    cols = {"start": start, "globalTid": pid, "streamId": stream, "graphNodeId": node, "deviceId": device}
    out = fill_columns(_batches(cols), list(cols), 3 * ROWS, narrow={"streamId", "graphNodeId", "deviceId"})
    assert 3 * ROWS >= ONE_VALUE_FROM
    assert out["start"].tolist() == np.concatenate(start).tolist() and out["start"].strides != (0,)
    assert out["globalTid"].strides == (0,) and out["globalTid"].dtype == np.int64
    assert len(out["globalTid"]) == 3 * ROWS and int(out["globalTid"][0]) == (455 << 24) | 7
    # The stream changes in the last row: an array, every earlier row the value seen before it.
    assert out["streamId"].strides != (0,) and out["streamId"].dtype == np.int32
    assert out["streamId"].tolist() == np.concatenate(stream).tolist()
    assert out["graphNodeId"].strides == (0,) and out["graphNodeId"].dtype == np.int32
    assert set(out["graphNodeId"].tolist()) == {NULL_INT}
    assert out["deviceId"].dtype == np.int64 and int(out["deviceId"][-1]) == 2**40 and out["deviceId"].strides == (0,)


def test_a_small_read_keeps_its_arrays():
    # Below ONE_VALUE_FROM rows nothing changes: the canonical frames keep small columns as arrays too.
    batch = pa.RecordBatch.from_arrays([pa.array(np.full(10, 5, np.int64))], names=["globalPid"])
    out = fill_columns([batch], ["globalPid"], 10)
    assert out["globalPid"].strides != (0,) and out["globalPid"].tolist() == [5] * 10
