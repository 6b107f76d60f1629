"""Reading GPU metrics samples (loaders/gpu_metrics.py): names, time ranges, formats, order, damage."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from nsys_rules.loaders import gpu_metrics as store
from nsys_rules.loaders.arrowdir import ArrowDirExport
from nsys_rules.loaders.sqlite import SqliteExport
from nsys_rules.testing import GPU_METRIC_NAMES, TraceBuilder
from tests.unit._folders import folder_from_sqlite

TYPE = (1 << 48) | (1 << 32)


def sampled(tmp_path, times, *, shuffle: bool = False, gpus=(0,), name: str = "t.sqlite"):
    """A trace with DRAM read (value = time / 1000 % 100) and tensor (value 7) sampled at ``times``."""
    b = TraceBuilder()
    b.kernel("k", start=1_000, duration=1_000)
    order = list(times)
    if shuffle:
        order = order[1::2] + order[::2]
    for gpu in gpus:
        for t in order:
            b.gpu_metric("dram_read", t, (t // 1000) % 100, gpu=gpu)
            b.gpu_metric("tensor_active", t, 7 + gpu, gpu=gpu)
    return b.write(tmp_path / name)


def test_catalog_names_each_metric_of_each_gpu(tmp_path):
    export = SqliteExport(sampled(tmp_path, range(0, 1_000_000, 100_000), gpus=(0, 1)))
    names = store.catalog(export)
    assert [(n.gpu, n.metric_id, n.name) for n in names] == [
        (0, 0, GPU_METRIC_NAMES["dram_read"]), (0, 1, GPU_METRIC_NAMES["tensor_active"]),
        (1, 0, GPU_METRIC_NAMES["dram_read"]), (1, 1, GPU_METRIC_NAMES["tensor_active"])]
    assert names[2].type_id == TYPE | 1 and names[2].key == (TYPE | 1, 0)
    assert store.available(export) and store.row_count(export) == 40


def test_a_time_range_reads_only_its_samples(tmp_path):
    times = list(range(0, 10_000_000, 100_000))
    export = SqliteExport(sampled(tmp_path, times))
    got = store.read_samples(export, [(TYPE, 0), (TYPE, 1)], 2_000_000, 3_000_000)
    dram = got[(TYPE, 0)]
    assert dram.time.tolist() == list(range(2_000_000, 3_000_001, 100_000))  # both ends included
    assert dram.value.tolist() == [(t // 1000) % 100 for t in dram.time.tolist()]
    assert got[(TYPE, 1)].value.tolist() == [7] * 11
    whole = store.read_samples(export, [(TYPE, 0)])
    assert whole[(TYPE, 0)].time.tolist() == times


def test_many_slices_and_the_range_between_two_samples(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "SLICE_ROWS", 7)  # rowid slices much smaller than the range
    times = list(range(0, 5_000_000, 100_000))
    export = SqliteExport(sampled(tmp_path, times))
    got = store.read_samples(export, [(TYPE, 0)], 1_050_000, 3_450_000)[(TYPE, 0)]
    assert got.time.tolist() == list(range(1_100_000, 3_400_001, 100_000))
    assert store.read_samples(export, [(TYPE, 0)], 9_000_000, 9_500_000)[(TYPE, 0)].time.tolist() == []


def test_rows_out_of_time_order_are_still_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "SLICE_ROWS", 5)
    times = list(range(0, 3_000_000, 100_000))
    export = SqliteExport(sampled(tmp_path, times, shuffle=True))
    got = store.read_samples(export, [(TYPE, 0)], 500_000, 1_500_000)[(TYPE, 0)]
    assert got.time.tolist() == list(range(500_000, 1_500_001, 100_000))  # sorted, none lost to a bisection


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_export_folders_read_the_same(tmp_path, kind):
    path = sampled(tmp_path, range(0, 2_000_000, 100_000), gpus=(0, 1))
    folder = ArrowDirExport(folder_from_sqlite(path, tmp_path / f"t.{kind}dir", kind))
    sqlite = SqliteExport(path)
    assert store.catalog(folder) == store.catalog(sqlite)
    keys = [(TYPE, 0), (TYPE | 1, 1)]
    a = store.read_samples(folder, keys, 300_000, 900_000)
    b = store.read_samples(sqlite, keys, 300_000, 900_000)
    for key in keys:
        assert a[key].time.tolist() == b[key].time.tolist() and a[key].value.tolist() == b[key].value.tolist()


def test_without_the_tables_nothing_is_read(tmp_path):
    b = TraceBuilder()
    b.kernel("k", start=1_000, duration=1_000)
    export = SqliteExport(b.write(tmp_path / "t.sqlite"))
    assert not store.available(export) and store.catalog(export) == () and store.row_count(export) == 0
    assert store.read_samples(export, [(TYPE, 0)]) == {}


def test_values_that_are_not_integers_are_dropped_as_damage(tmp_path):
    path = sampled(tmp_path, range(0, 1_000_000, 100_000))
    db = sqlite3.connect(path)
    db.execute("UPDATE GPU_METRICS SET value = 'x' WHERE timestamp = 300000 AND metricId = 0")
    db.commit()
    db.close()
    export = SqliteExport(path)
    got = store.read_samples(export, [(TYPE, 0)])[(TYPE, 0)]
    assert 300_000 not in got.time.tolist() and len(got) == 9
    assert any("GPU_METRICS" in line for line in export.damage)


def test_read_cost_prices_the_wanted_share_of_the_table(tmp_path):
    export = SqliteExport(sampled(tmp_path, range(0, 1_000_000, 100_000)))
    rows, nbytes = store.read_cost(export, 1)
    assert rows == 10 and nbytes == 10 * store.READ_BYTES_PER_ROW
    assert np.isclose(store.read_cost(export, 2)[0], 20)
