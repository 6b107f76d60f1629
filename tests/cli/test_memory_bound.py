"""``--max-memory`` prices what the file stores: text in NVTX ranges or in integer columns stops the run
(exit 3) before it is read, in ``check``, ``check --jobs`` and ``stats``.

The traces here hold about 8 MB of text so the suite stays fast; ``benchmarks/hostile_memory.py``
runs the same shapes at 10-150 MB and measures the peak resident memory against the limit.
"""

from __future__ import annotations

import shutil
import sqlite3

import pytest

from nsys_rules.loaders import memory_limit, read_guard
from nsys_rules.loaders.sqlite import SqliteExport
from nsys_rules.loaders.stored_bytes import TextUse, measure_text, sample_has_text, table_storage
from nsys_rules.testing import TraceBuilder
from nsys_rules.model.trace import Trace
from tests.conftest import EXAMPLE
from tests.fuzz.harness import check_run, run_cli_inprocess

MB = 1024 * 1024


def _base(path, nvtx: int = 300, kernels: int = 600):
    b = TraceBuilder()
    for i in range(nvtx):
        b.nvtx("step", i * 100_000, i * 100_000 + 90_000, registered=False)
    for i in range(kernels):
        b.kernel("gemv", i * 50_000, 20_000)
    return b.write(path)


@pytest.fixture
def nvtx_text(tmp_path):
    """300 NVTX ranges whose inline text adds up to about 8 MB (distinct strings)."""
    path = _base(tmp_path / "nvtx.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE NVTX_EVENTS SET text = printf('%.*c', ?, 'x') || rowid", (8 * MB // 300,))
    return path


@pytest.fixture
def kernel_text(tmp_path):
    """Every other kernel's integer ``start`` holds TEXT: about 8 MB in all."""
    path = _base(tmp_path / "kstart.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = printf('%.*c', ?, 'k') || rowid WHERE rowid % 2 = 0",
                   (8 * MB // 300,))
    return path


def _stopped(run, *needles: str) -> None:
    check_run(run, json_output=False)
    assert run.code == 3 and run.stdout == "", (run.code, run.stderr)
    assert all(n in run.stderr for n in needles), run.stderr


def test_check_stops_before_reading_nvtx_text(nvtx_text):
    run = run_cli_inprocess("check", "--no-plugins", "--format", "json", "--max-memory", "30M", str(nvtx_text))
    _stopped(run, "nvtx 300 rows", "of it text", "limit is 30.0 MB")


def test_check_stops_before_reading_text_in_an_integer_column(kernel_text):
    run = run_cli_inprocess("check", "--no-plugins", "--format", "json", "--max-memory", "30M", str(kernel_text))
    _stopped(run, "kernels 600 rows", "of it text")


def test_check_jobs_stops_too(nvtx_text, tmp_path):
    other = tmp_path / "copy.sqlite"
    shutil.copyfile(nvtx_text, other)
    run = run_cli_inprocess("check", "--no-plugins", "--format", "json", "--max-memory", "60M", "--jobs", "2",
                            str(nvtx_text), str(other))
    _stopped(run, "of it text")


@pytest.mark.parametrize("report", ["nvtx_sum", "cuda_gpu_kern_sum"])
def test_stats_stops_before_reading_text(nvtx_text, kernel_text, report):
    path = nvtx_text if report == "nvtx_sum" else kernel_text
    run = run_cli_inprocess("stats", "--report", report, "--max-memory", "30M", str(path))
    _stopped(run, "reading ", "of it text", "(--max-memory)")


def test_text_that_fits_runs(nvtx_text):
    run = run_cli_inprocess("check", "--no-plugins", "--format", "json", "--fail-on", "never", "--max-memory", "2G",
                            str(nvtx_text))
    assert check_run(run) is not None and run.code == 0


def test_stats_has_a_default_limit(monkeypatch, nvtx_text):
    monkeypatch.setattr(memory_limit, "available_memory", lambda: 40 * MB)
    run = run_cli_inprocess("stats", "--report", "nvtx_sum", str(nvtx_text))
    _stopped(run, "80 % of the available memory")


def test_workers_share_the_limit(tmp_path):
    """Serially one trace at a time fits; two workers at once each get half of --max-memory."""
    paths = [tmp_path / "a.sqlite", tmp_path / "b.sqlite"]
    for p in paths:
        shutil.copyfile(EXAMPLE, p)
    args = ("check", "--no-plugins", "--format", "json", "--fail-on", "never", "--select", "graph-trace-hidden")
    trace = Trace(SqliteExport(paths[0]))
    from nsys_rules.plugin_manager import build_registry

    rule = build_registry(autoload=False).rules["graph-trace-hidden"]
    need = memory_limit.estimate(trace.export, {t: c for t, c in rule.needs().items() if trace.has(t)}).total
    trace.close()
    limit = str(int(need * 1.5))
    assert run_cli_inprocess(*args, "--max-memory", limit, *map(str, paths)).code == 0
    _stopped(run_cli_inprocess(*args, "--max-memory", limit, "--jobs", "2", *map(str, paths)), "the run needs about")


def test_text_use_is_measured_exactly(tmp_path):
    path = _base(tmp_path / "t.sqlite", nvtx=3)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = 1", ("é" * 10,))  # 10 characters, 20 bytes
        db.execute("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = 2", ("abc",))
        db.execute("UPDATE NVTX_EVENTS SET text = NULL, \"end\" = x'00ff' WHERE rowid = 3")  # a blob in an integer column
    export = SqliteExport(path)
    use = measure_text(export, "NVTX_EVENTS", ["text", "end"])
    assert use == TextUse(values=3, bytes=25, chars=15, largest=20)
    assert use.memory == 3 * 96 + 4 * 15 + 25  # one wide character: every character priced at 4 bytes
    export.close()


def test_cheap_signs_of_text(tmp_path, kernel_text):
    plain = SqliteExport(_base(tmp_path / "plain.sqlite"))
    storage = table_storage(plain, "CUPTI_ACTIVITY_KIND_KERNEL")
    if storage.payload is None:
        pytest.skip("this SQLite has no dbstat table")
    from nsys_rules.loaders.stored_bytes import holds_more_than_numbers

    cols = len(plain.columns_of("CUPTI_ACTIVITY_KIND_KERNEL"))
    assert not holds_more_than_numbers(storage, 600, cols)
    assert not sample_has_text(plain, "CUPTI_ACTIVITY_KIND_KERNEL", ["start", "end"], 600)
    hostile = SqliteExport(kernel_text)
    assert holds_more_than_numbers(table_storage(hostile, "CUPTI_ACTIVITY_KIND_KERNEL"), 600, cols)
    assert sample_has_text(hostile, "CUPTI_ACTIVITY_KIND_KERNEL", ["start", "end"], 600)
    plain.close()
    hostile.close()


def test_without_dbstat_the_sample_still_finds_widespread_text(monkeypatch, kernel_text):
    from nsys_rules.loaders import stored_bytes

    monkeypatch.setattr(memory_limit, "table_storage", lambda export, source: stored_bytes.TableStorage(None, None))
    run = run_cli_inprocess("check", "--no-plugins", "--format", "json", "--max-memory", "30M", str(kernel_text))
    _stopped(run, "of it text")


def test_unplanned_read_is_admitted_first(nvtx_text):
    """A read the engine did not plan (a rule asking for more, a stats report) is priced before it happens."""
    from nsys_rules.errors import InputError

    trace = Trace(SqliteExport(nvtx_text))
    read_guard.install_meter(trace.export, 30 * MB, trace.label)
    assert len(trace.frame("kernels", ["start", "end"])) == 600  # numbers fit
    with pytest.raises(InputError, match="reading nvtx 300 rows"):
        trace.frame("nvtx", ["start", "end", "name"])
    assert "nvtx" not in trace._frames
    trace.close()


@pytest.mark.parametrize("value", ["1e-9", "0.1", "nan", "inf", "-5M", "1e999G", "0"])
def test_max_memory_below_a_byte_or_not_a_number_is_a_usage_error(value):
    run = run_cli_inprocess("check", "--no-plugins", f"--max-memory={value}", str(EXAMPLE))
    assert run.code == 2 and run.stderr.count("\n") == 1 and "bad size" in run.stderr, run.stderr
