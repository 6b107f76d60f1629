"""nsys ``parquetdir``/``arrowdir`` export folders: the same trace model as the SQLite export."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nsys_rules.inputs import expand_inputs, open_trace
from nsys_rules.loaders.arrowdir import ArrowDirExport
from nsys_rules.loaders.folders import folder_kind
from nsys_rules.loaders.export import NULL_INT, Export
from nsys_rules.loaders.tables import TABLES
from nsys_rules.testing import GpuSpec, TraceBuilder, run_rules
from tests.conftest import run_cli
from tests.rules.scenarios import T0, eager_steps
from tests.unit._folders import folder_from_sqlite


def _scenario(tmp_path: Path) -> Path:
    """Every table the loader reads, with NULLs, registered and inline NVTX names, two GPUs."""
    b = TraceBuilder(environment={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, command=("python3", "serve.py", "--x=1"),
                     gpus=(GpuSpec(), GpuSpec(id=1, name="NVIDIA H100")))
    eager_steps(b, steps=6, per_step=8)
    b.nvtx("warmup", T0 - 50_000, T0 - 10_000, registered=True)
    b.nvtx("mark", T0 - 5_000, None)
    b.memcpy(T0 + 5_000_000, 20_000, 1 << 20, kind="DtoH", src="device", dst="pageable", api="cudaMemcpy_v3020")
    b.memset(T0 + 5_100_000, 1_000, 4096, device=1)
    b.sync(T0 + 5_200_000, 300_000)
    b.graph_launch(T0 + 6_000_000, 50_000)
    b.memory_event(T0 + 6_100_000, 1 << 20)
    b.overhead("CUDA profiling data flush", T0 + 7_000_000, 100_000)
    b.osrt("futex", T0 + 7_200_000, 50_000)
    b.kernel("gemv<float>(int)", T0 + 8_000_000, 9_000, api=None)  # no launching call: NULL-free but unmatched
    return b.write(tmp_path / "scenario.sqlite")


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_every_canonical_frame_and_the_metadata_match_the_sqlite_export(tmp_path, kind):
    sqlite_path = _scenario(tmp_path)
    folder = folder_from_sqlite(sqlite_path, tmp_path / f"scenario.{kind}dir", kind)
    reference, other = open_trace(sqlite_path), open_trace(folder)
    try:
        assert isinstance(other.export, ArrowDirExport) and isinstance(other.export, Export)
        assert other.tables_present == reference.tables_present
        assert len(other.tables_present) == len(TABLES)  # the scenario fills every canonical table
        for name in TABLES:
            assert other.row_count(name) == reference.row_count(name) > 0
            expected, got = reference.frame(name), other.frame(name)
            pd.testing.assert_frame_equal(got, expected, check_categorical=False)
        assert other.gpus == reference.gpus and len(other.gpus) == 2
        assert other.capture == reference.capture
        assert other.capture.environment["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"
        assert other.export_info == reference.export_info
        assert other.damage == reference.damage == []
        assert other.export.strings_size()[0] == reference.export.strings_size()[0]
        assert other.export.rows("ENUM_NOT_THERE", ["id"]) == []
    finally:
        reference.close()
        other.close()


def test_rules_give_the_same_findings_on_all_three_formats(tmp_path):
    sqlite_path = _scenario(tmp_path)
    folders = [folder_from_sqlite(sqlite_path, tmp_path / f"s.{k}dir", k) for k in ("parquet", "arrow")]
    rules = ["launch-bound", "alloc-churn", "sync-stall", "sync-memcpy", "pageable-memcpy", "kernel-tail",
             "gpu-idle-gaps", "capture-scope", "debug-build"]

    def outcome(path: Path) -> tuple:
        result = run_rules(rules, path)
        return (sorted((f.rule, f.severity.value, f.fingerprint) for f in result.findings),
                sorted(s.rule for s in result.skipped), result.errors)

    expected = outcome(sqlite_path)
    assert expected[0] and not expected[2]  # something fired, nothing failed
    assert all(outcome(folder) == expected for folder in folders)


def test_unsigned_ids_nulls_and_values_beyond_int64(tmp_path):
    sqlite_path = _scenario(tmp_path)
    folder = folder_from_sqlite(sqlite_path, tmp_path / "u.parquetdir")
    kernels = pq.read_table(folder / "CUPTI_ACTIVITY_KIND_KERNEL.parquet")
    n = kernels.num_rows
    corr = pa.array([None] + [7] * (n - 1), pa.uint32())
    stream = pa.array([2**64 - 1] + [7] * (n - 1), pa.uint64())
    kernels = kernels.set_column(kernels.schema.get_field_index("correlationId"), "correlationId", corr)
    kernels = kernels.set_column(kernels.schema.get_field_index("streamId"), "streamId", stream)
    pq.write_table(kernels, folder / "CUPTI_ACTIVITY_KIND_KERNEL.parquet")
    trace = open_trace(folder)
    try:
        frame = trace.frame("kernels", ["start", "correlation_id", "stream_id"])
        assert len(frame) == n
        assert frame["correlation_id"].dtype == np.int32 and int(frame["correlation_id"].iloc[0]) == NULL_INT
        assert int(frame["stream_id"].iloc[0]) == NULL_INT and int(frame["stream_id"].iloc[1]) == 7
        assert any("streamId: 1 value(s) beyond int64" in d for d in trace.damage)
    finally:
        trace.close()


@pytest.mark.parametrize("table", ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"])
def test_a_boolean_time_column_is_damage_not_zero_and_one(tmp_path, table):
    """A bool ``start`` once read as 0/1: every kernel began at the session start and step-outliers divided
    by zero (exit 4). Booleans are no times: the rows go, with a note, and the run completes."""
    folder = folder_from_sqlite(_scenario(tmp_path), tmp_path / "b.parquetdir")
    data = pq.read_table(folder / f"{table}.parquet")
    flags = pa.array([i % 2 == 0 for i in range(data.num_rows)], pa.bool_())
    pq.write_table(data.set_column(data.schema.get_field_index("start"), "start", flags), folder / f"{table}.parquet")
    proc = run_cli("check", "--format", "json", "--fail-on", "never", "--no-plugins", str(folder))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["errors"] == [] and report["summary"]["errors"] == 0
    canonical = {"CUPTI_ACTIVITY_KIND_KERNEL": "kernels", "CUPTI_ACTIVITY_KIND_RUNTIME": "api", "NVTX_EVENTS": "nvtx"}
    notes = [d for d in report["traces"][0]["damage"] if d.startswith(canonical[table] + ":")]
    assert notes and f"{data.num_rows} row(s) with a non-numeric start" in notes[0], report["traces"][0]["damage"]


def test_a_boolean_id_column_is_read_as_unknown(tmp_path):
    folder = folder_from_sqlite(_scenario(tmp_path), tmp_path / "b.parquetdir")
    kernels = pq.read_table(folder / "CUPTI_ACTIVITY_KIND_KERNEL.parquet")
    flags = pa.array([True] * kernels.num_rows, pa.bool_())
    at = kernels.schema.get_field_index("deviceId")
    pq.write_table(kernels.set_column(at, "deviceId", flags), folder / "CUPTI_ACTIVITY_KIND_KERNEL.parquet")
    trace = open_trace(folder)
    try:
        frame = trace.frame("kernels", ["start", "device_id"])
        assert len(frame) == kernels.num_rows and (frame["device_id"] == NULL_INT).all()
        assert any(d.startswith(f"kernels.device_id: {kernels.num_rows} value(s) that are not integers")
                   for d in trace.damage)
    finally:
        trace.close()


def test_folder_detection_and_expansion(tmp_path):
    sqlite_path = _scenario(tmp_path)
    runs = tmp_path / "runs"
    runs.mkdir()
    named = folder_from_sqlite(sqlite_path, runs / "a.parquetdir")
    unnamed = folder_from_sqlite(sqlite_path, runs / "rank1", "arrow")  # found by its StringIds.arrow
    (runs / "notes").mkdir()
    (runs / "c.sqlite").write_bytes(sqlite_path.read_bytes())
    assert folder_kind(named) == "parquet" and folder_kind(unnamed) == "arrow" and folder_kind(runs) is None
    assert folder_kind(tmp_path / "missing.arrowdir") == "arrow"  # by name: opening it says what is wrong
    assert expand_inputs([str(runs)]) == [named, runs / "c.sqlite", unnamed]
    assert expand_inputs([str(named)]) == [named]


def _exit3(*args: str) -> str:
    proc = run_cli("check", *args)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    return proc.stderr


def test_bad_folders_give_one_line_and_exit_3(tmp_path):
    empty = tmp_path / "empty.parquetdir"
    empty.mkdir()
    assert "holds no nsys parquet tables" in _exit3(str(empty))
    assert "no such folder" in _exit3(str(tmp_path / "absent.arrowdir"))
    (tmp_path / "file.parquetdir").write_bytes(b"PAR1")
    assert "not a folder" in _exit3(str(tmp_path / "file.parquetdir"))
    stripped = folder_from_sqlite(_scenario(tmp_path), tmp_path / "stripped.parquetdir")
    (stripped / "StringIds.parquet").unlink()
    assert "no StringIds.parquet" in _exit3(str(stripped))
    garbage = folder_from_sqlite(_scenario(tmp_path), tmp_path / "garbage.parquetdir")
    (garbage / "CUPTI_ACTIVITY_KIND_KERNEL.parquet").write_bytes(b"PAR1 not really")
    assert "CUPTI_ACTIVITY_KIND_KERNEL.parquet" in _exit3(str(garbage), "--select", "kernel-tail")
    cut = folder_from_sqlite(_scenario(tmp_path), tmp_path / "cut.arrowdir", "arrow")
    data = (cut / "CUPTI_ACTIVITY_KIND_RUNTIME.arrow").read_bytes()
    (cut / "CUPTI_ACTIVITY_KIND_RUNTIME.arrow").write_bytes(data[: len(data) // 2])
    assert "CUPTI_ACTIVITY_KIND_RUNTIME.arrow" in _exit3(str(cut), "--select", "alloc-churn")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_in_the_folder_is_never_opened(tmp_path):
    folder = folder_from_sqlite(_scenario(tmp_path), tmp_path / "f.parquetdir")
    (folder / "CUPTI_ACTIVITY_KIND_MEMSET.parquet").unlink()
    os.mkfifo(folder / "CUPTI_ACTIVITY_KIND_MEMSET.parquet")
    export = ArrowDirExport(folder)
    assert "CUPTI_ACTIVITY_KIND_MEMSET" not in export.table_names
    assert any("not a regular file" in d for d in export.damage)


def test_the_folder_is_never_written(tmp_path):
    folder = folder_from_sqlite(_scenario(tmp_path), tmp_path / "ro.parquetdir")
    before = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}
    folder.chmod(0o555)
    try:
        proc = run_cli("check", "--format", "json", "--fail-on", "never", str(folder))
        assert proc.returncode == 0, proc.stderr
    finally:
        folder.chmod(0o755)
    assert {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()} == before


def test_nsys_rep_exported_to_parquetdir_when_asked(tmp_path):
    """`--export-format parquetdir` runs `nsys export --type=parquetdir` into a temporary folder."""
    source = folder_from_sqlite(_scenario(tmp_path), tmp_path / "made.parquetdir")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "nsys.log"
    fake = bin_dir / "nsys"
    # A stand-in for `nsys export --type=parquetdir ... -o OUT IN`: logs its arguments, copies the folder to OUT.
    fake.write_text(f"#!{sys.executable}\nimport shutil, sys\nargs = sys.argv\n"
                    f"open({str(log)!r}, 'w').write(' '.join(args[1:]))\n"
                    f"shutil.copytree({str(source)!r}, args[args.index('-o') + 1])\n")
    fake.chmod(0o755)
    data = tmp_path / "data"
    data.mkdir()
    rep = data / "run.nsys-rep"
    rep.write_bytes(b"report")
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = run_cli("check", "--format", "json", "--fail-on", "never", "--export-format", "parquetdir", str(rep),
                   env=env)
    assert proc.returncode == 0, proc.stderr
    assert "--type=parquetdir" in log.read_text()
    assert json.loads(proc.stdout)["traces"][0]["tables"]["kernels"] == 6 * 8 + 1
    assert sorted(p.name for p in data.iterdir()) == ["run.nsys-rep"]
    proc = run_cli("check", "--export-format", "xml", str(rep), env=env)
    assert proc.returncode == 2


def test_string_table_is_cut_and_bad_utf8_is_shown_not_fatal(tmp_path):
    folder = folder_from_sqlite(_scenario(tmp_path), tmp_path / "s.parquetdir")
    strings = pq.read_table(folder / "StringIds.parquet")
    ids = strings.column("id").to_pylist()
    values = [v.encode() for v in strings.column("value").to_pylist()]
    values[0] = b"k\xff\xfe" + b"x" * 100_000  # not UTF-8, and longer than MAX_STRING
    pq.write_table(pa.table({"id": pa.array(ids, pa.int32()), "value": pa.array(values, pa.large_binary())}),
                   folder / "StringIds.parquet")
    export = ArrowDirExport(folder)
    names = export.resolve_strings(np.array([ids[0], ids[1]]), "test")
    assert names[0].startswith("k\ufffd") and len(names[0]) <= 65536 and names[1] == strings.column("value")[1].as_py()
