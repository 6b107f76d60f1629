"""The SQLite loader on real and built traces."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat

import numpy as np
import pytest

from nsys_rules.errors import InputError
from nsys_rules.loaders.sqlite import SqliteExport
from nsys_rules.testing import PID, TraceBuilder
from nsys_rules.model.trace import Trace, base_api_name
from tests.conftest import EXAMPLE


def test_example_trace_metadata():
    trace = Trace(SqliteExport(EXAMPLE))
    assert trace.export_info.nsys_version == "2025.3.2.0"
    assert trace.export_info.schema_version == "3.20.3"
    gpu = trace.gpu(0)
    assert gpu is not None and gpu.name == "NVIDIA H200"
    assert gpu.memory_bandwidth == 4_814_304_000_000 and gpu.sm_count == 132
    assert trace.capture.command[0] == "target/release/bench_serving"
    assert trace.capture.graph_trace_mode == "Node"
    assert "kernels" in trace.tables_present and "graph_trace" not in trace.tables_present


def test_example_trace_frames_are_typed():
    trace = Trace(SqliteExport(EXAMPLE))
    kernels = trace.frame("kernels", ["start", "end", "name", "pid", "device_id"])
    assert len(kernels) == 3584
    assert kernels["start"].dtype == np.int64 and kernels["name"].dtype == "category"
    assert (kernels["end"] >= kernels["start"]).all()
    assert kernels["pid"].nunique() == 1 and kernels["pid"].iloc[0] > 0
    api = trace.frame("api", ["name", "tid", "pid"])
    assert api["name"].str.startswith(("cu", "cuda")).all()


def test_version_suffix_is_removed_for_matching():
    assert base_api_name("cudaStreamSynchronize_v3020") == "cudaStreamSynchronize"
    assert base_api_name("cudaGraphLaunch_v10000") == "cudaGraphLaunch"
    assert base_api_name("cuMemcpyDtoHAsync_v2") == "cuMemcpyDtoHAsync"
    assert base_api_name("cuLaunchKernel") == "cuLaunchKernel"


def test_missing_table_is_an_empty_frame(tmp_path):
    b = TraceBuilder()
    b.api("cudaMalloc_v3020", 1000, 500)
    trace = Trace(SqliteExport(b.write(tmp_path / "t.sqlite")))
    assert not trace.has("kernels")
    frame = trace.frame("kernels", ["start", "name"])
    assert len(frame) == 0 and list(frame.columns) == ["start", "name"]


def test_global_ids_decode_to_pid_and_tid(tmp_path):
    b = TraceBuilder()
    b.api("cudaFree_v3020", 10, 5, tid=777)
    trace = Trace(SqliteExport(b.write(tmp_path / "t.sqlite")))
    api = trace.frame("api", ["pid", "tid"])
    assert api["pid"].tolist() == [PID] and api["tid"].tolist() == [777]


def test_registered_and_inline_nvtx_names(tmp_path):
    b = TraceBuilder()
    b.nvtx("inline", 0, 10)
    b.nvtx("registered", 20, 30, registered=True)
    trace = Trace(SqliteExport(b.write(tmp_path / "t.sqlite")))
    assert trace.frame("nvtx", ["name"])["name"].tolist() == ["inline", "registered"]


def test_dangling_string_id_is_reported_not_merged(tmp_path):
    import sqlite3

    b = TraceBuilder()
    b.kernel("k", 100, 10)
    path = b.write(tmp_path / "t.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 99999")
    trace = Trace(SqliteExport(path))
    assert trace.frame("kernels", ["name"])["name"].tolist() == ["<unknown string 99999>"]
    assert any("StringIds" in d for d in trace.damage)


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_read_only_folder_and_no_journal(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    copy = folder / "t.sqlite"
    shutil.copy(EXAMPLE, copy)
    before = _digest(copy)
    os.chmod(copy, stat.S_IRUSR)
    os.chmod(folder, stat.S_IRUSR | stat.S_IXUSR)
    try:
        trace = Trace(SqliteExport(copy))
        trace.frame("kernels")
        trace.frame("api")
        trace.close()
        assert sorted(p.name for p in folder.iterdir()) == ["t.sqlite"]
        assert _digest(copy) == before
    finally:
        os.chmod(folder, stat.S_IRWXU)


@pytest.mark.parametrize("content, needle", [
    (b"", "empty file"),
    (b"hello, world\n", "not a SQLite file"),
    (b'{"traceEvents": []}', "not a SQLite file"),
])
def test_not_sqlite_is_input_error(tmp_path, content, needle):
    path = tmp_path / "x.sqlite"
    path.write_bytes(content)
    with pytest.raises(InputError, match=needle):
        SqliteExport(path)


def test_sqlite_without_nsys_tables_is_input_error(tmp_path):
    import sqlite3

    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (id INTEGER)")
    with pytest.raises(InputError, match="not an nsys export"):
        SqliteExport(path)
