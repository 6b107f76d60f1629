"""Tables read in start order whatever order the export stored their rows in (nsys_rules.loaders.row_order).

nsys 2025.6 and later may store rows in any order; the loader sorts them by start (stable) once,
so every reader takes its in-order path and every read of a table, whatever its columns, gives its
rows in the same order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from nsys_rules.inputs import open_trace
from nsys_rules.loaders.row_order import put_in_start_order, rising
from nsys_rules.loaders.tables import TABLES
from nsys_rules.testing import TraceBuilder
from tests.trace_edit import shuffled_copy


def _ordered(tmp_path: Path) -> Path:
    b = TraceBuilder()
    for i in range(200):
        b.kernel(f"k{i % 7}", start=1_000_000 + i * 10_000, duration=5_000 + i, grid=(i % 5 + 1, 1, 1))
    return b.write(tmp_path / "ordered.sqlite")


def test_a_shuffled_table_reads_as_the_ordered_one(tmp_path: Path) -> None:
    ordered = _ordered(tmp_path)
    shuffled = shuffled_copy(ordered, tmp_path / "shuffled.sqlite", seed=5)
    columns = ["start", "end", "name", "pid", "correlation_id", "grid_x"]
    frames = []
    for path in (ordered, shuffled):
        trace = open_trace(path)
        try:
            frames.append(trace.frame("kernels", columns))
            assert trace.frame("api", ["start", "correlation_id"])["start"].is_monotonic_increasing
        finally:
            trace.close()
    a, b = frames
    for name in columns:  # the same values row by row (names compared as text: the categories may differ)
        assert a[name].astype(object).tolist() == b[name].astype(object).tolist(), name
    assert b["pid"].dtype == a["pid"].dtype and b["grid_x"].dtype == a["grid_x"].dtype


def test_every_read_of_a_table_orders_its_rows_alike(tmp_path: Path) -> None:
    """A read without ``start`` reads it anyway: a later read with more columns must not move rows."""
    shuffled = shuffled_copy(_ordered(tmp_path), tmp_path / "shuffled.sqlite", seed=9)
    trace = open_trace(shuffled)
    try:
        names = trace.export.read(TABLES["kernels"], ["name"])
        full = trace.export.read(TABLES["kernels"], ["name", "end", "grid_x"])
        assert names["name"].astype(object).tolist() == full["name"].astype(object).tolist()
        assert rising(full["start"].to_numpy())
    finally:
        trace.close()


def test_ties_keep_the_stored_order_and_columns_keep_their_kind() -> None:
    start = np.array([30, 10, 20, 10, 30], np.int64)
    columns = {"start": start, "end": start + np.array([5, 1, 2, 3, 4]),
               "pid": np.broadcast_to(np.array([7], np.int32), (5,)),
               "name": pd.Categorical(["e", "b", "c", "d", "a"])}
    put_in_start_order(columns)
    assert columns["start"].tolist() == [10, 10, 20, 30, 30]
    assert columns["end"].tolist() == [11, 13, 22, 35, 34]  # rows that start at once: as stored
    assert list(columns["name"]) == ["b", "d", "c", "e", "a"]
    assert list(columns["name"].categories) == ["a", "b", "c", "d", "e"]
    assert columns["pid"].strides == (0,)
    before = {name: values for name, values in columns.items()}
    put_in_start_order(columns)  # in order already: nothing copied
    assert all(columns[name] is before[name] for name in columns)
