"""The --max-memory estimate and the available-memory probe."""

from __future__ import annotations

import pytest

from nsys_rules.loaders import memory_limit, read_guard
from nsys_rules.errors import InputError
from nsys_rules.loaders.sqlite import SqliteExport
from nsys_rules.testing import TraceBuilder
from nsys_rules.model.trace import Trace


@pytest.fixture
def trace(tmp_path):
    b = TraceBuilder()
    for i in range(100):
        b.kernel("k", i * 1_000, 500)  # 100 kernels, 100 launch calls
    t = Trace(SqliteExport(b.write(tmp_path / "t.sqlite")))
    yield t
    t.close()


def test_estimate_is_rows_times_column_costs(trace):
    needs = {"kernels": ["start", "end", "name"], "api": ["start", "end"]}
    est = memory_limit.estimate(trace.export, needs)
    by_table = {t.table: t for t in est.tables}
    assert by_table["kernels"].rows == 100 and by_table["kernels"].columns == 3
    assert by_table["kernels"].bytes == 100 * (2 * memory_limit.INT_COLUMN_BYTES + memory_limit.NAME_COLUMN_BYTES)
    assert by_table["api"].bytes == 100 * 2 * memory_limit.INT_COLUMN_BYTES
    strings = 3  # "k", the launch API name, the thread name
    assert est.strings_bytes == strings * memory_limit.STRING_ROW_BYTES + len("k") + len("cudaLaunchKernel_v7000") + 4
    assert est.total == int(est.load * memory_limit.RUN_FACTOR) + memory_limit.FIXED_BYTES


def test_nothing_needed_costs_nothing(trace):
    assert memory_limit.estimate(trace.export, {}).total == 0


def test_enforce_names_the_biggest_tables_and_the_way_out(trace):
    needs = {"kernels": ["start", "end", "name"], "api": ["start", "end"]}
    need = memory_limit.estimate(trace.export, needs).total
    assert read_guard.open_guard(need, trace.label).plan(trace.export, needs).total == need  # exactly enough: runs
    with pytest.raises(InputError) as err:
        read_guard.open_guard(need - 1, trace.label).plan(trace.export, needs)
    text = str(err.value)
    assert text.index("kernels 100 rows x 3 columns") < text.index("api 100 rows x 2 columns")
    assert "--select" in text and "(--max-memory)" in text


def test_cgroup_room(tmp_path):
    (tmp_path / "memory.max").write_text("1000000\n")
    (tmp_path / "memory.current").write_text("250000\n")
    assert memory_limit._cgroup_room(tmp_path) == 750_000
    (tmp_path / "memory.max").write_text("max\n")
    assert memory_limit._cgroup_room(tmp_path) is None
    assert memory_limit._cgroup_room(tmp_path / "absent") is None


def test_available_memory_is_known_here():
    room = memory_limit.available_memory()
    assert room is None or room > 0
    if room is not None:
        assert memory_limit.default_limit() == int(room * 0.8)


@pytest.mark.parametrize("nbytes, text", [(512, "512 B"), (1536, "1.5 KB"), (3 * 1024**2, "3.0 MB"),
                                          (5 * 1024**3, "5.0 GB"), (2048 * 1024**3, "2048.0 GB")])
def test_human(nbytes, text):
    assert memory_limit.human(nbytes) == text
