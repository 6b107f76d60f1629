"""Hostile and broken inputs, one named test per case: never crash, never write, always explain.

Most cases run the CLI in process (fast); the ones about the process itself (closed stdout,
a broken pipe, file permissions as another user) run it as a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys

import pytest

from nsys_rules.testing import TraceBuilder
from tests.conftest import EXAMPLE, ROOT
from tests.fuzz.harness import check_run, digest, folder_listing, run_cli_inprocess
from tests.fuzz.mutations import KERNEL, RUNTIME, STRINGS, damaged_copy, loosen


def _check(path, *extra: str):
    return run_cli_inprocess("check", "--format", "json", "--fail-on", "never", "--no-plugins", *extra, str(path))


def _unusable(path, needle: str) -> str:
    """Run on ``path`` and assert exit 3, one line that contains ``needle``."""
    run = _check(path)
    check_run(run)
    assert run.code == 3, (run.code, run.stderr)
    assert needle in run.stderr, run.stderr
    return run.stderr


def _ran(path, *extra: str) -> dict:
    run = _check(path, *extra)
    data = check_run(run)
    assert run.code == 0 and data is not None, run.stderr
    return data


def _damage(data: dict) -> list[str]:
    return data["traces"][0].get("damage", [])


@pytest.fixture
def example_copy(tmp_path):
    target = tmp_path / "trace.sqlite"
    shutil.copyfile(EXAMPLE, target)
    return target


# -- not an nsys export: exit 3, one line ------------------------------------------------------
def test_empty_file(tmp_path):
    (tmp_path / "e.sqlite").write_bytes(b"")
    _unusable(tmp_path / "e.sqlite", "empty file")


def test_random_bytes(tmp_path):
    (tmp_path / "r.sqlite").write_bytes(os.urandom(64 * 1024))
    _unusable(tmp_path / "r.sqlite", "not a SQLite file")


@pytest.mark.parametrize("keep", [20, 100, 511, 4096, 0.5])
def test_truncated_sqlite(tmp_path, keep):
    data = EXAMPLE.read_bytes()
    cut = int(len(data) * keep) if isinstance(keep, float) else keep
    (tmp_path / "t.sqlite").write_bytes(data[:cut])
    _unusable(tmp_path / "t.sqlite", "SQLite file")


def test_export_missing_its_last_page(tmp_path):
    """SQLite would read the missing page as empty; the header's page count gives the cut away."""
    data = EXAMPLE.read_bytes()
    page = int.from_bytes(data[16:18], "big")
    (tmp_path / "cut.sqlite").write_bytes(data[:-page])
    message = _unusable(tmp_path / "cut.sqlite", "truncated SQLite file")
    assert f"{len(data) - page:,} bytes of the {len(data):,} its header declares" in message


def test_sqlite_without_nsys_tables(tmp_path):
    with sqlite3.connect(tmp_path / "o.sqlite") as db:
        db.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    _unusable(tmp_path / "o.sqlite", "not an nsys export")


def test_json_file(tmp_path):
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": []}))
    _unusable(tmp_path / "trace.json", "not a SQLite file")


def test_missing_path(tmp_path):
    _unusable(tmp_path / "nope.sqlite", "no such file")


def test_directory_with_no_traces(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    _unusable(tmp_path, "holds no traces")


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.sqlite"
    os.mkfifo(fifo)
    _unusable(fifo, "not a regular file")


def test_device_path_is_refused():
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero on this system")
    _unusable("/dev/zero", "not a regular file")


def test_corrupted_page_exits_3_or_reports(tmp_path):
    data = bytearray(EXAMPLE.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 4096] = bytes(4096)
    (tmp_path / "c.sqlite").write_bytes(bytes(data))
    run = _check(tmp_path / "c.sqlite")
    check_run(run)
    assert run.code in (0, 3)


def test_malformed_schema_with_a_non_utf8_name(tmp_path):
    """SQLite's error message quotes the garbled name; decoding it must not escape as a crash."""
    path = tmp_path / "g.sqlite"
    with sqlite3.connect(path) as db:
        db.execute('CREATE TABLE "StringIds" (id INTEGER, value TEXT)')
        db.execute('CREATE TABLE "CUPTI_ACTIVITY_KIND_Ab" (x INTEGER)')
    db.close()
    data = path.read_bytes().replace(b"CUPTI_ACTIVITY_KIND_Ab", b"CUPTI_ACTIVITY_KIND_\xe5(")
    path.write_bytes(data.replace(b'CREATE TABLE "CUPTI', b'CREATE TABLX "CUPTI'))
    _unusable(path, "damaged or unreadable SQLite file")


def test_dropped_string_table_exits_3(tmp_path):
    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite", [f'DROP TABLE "{STRINGS}"'])
    _unusable(path, "no StringIds table")


def _as_other_user(path):
    """Run the CLI on ``path`` as user ``nobody`` (root reads anything, so chmod alone proves nothing)."""
    def drop() -> None:  # pragma: no cover - runs in the child
        os.setgid(65534)
        os.setuid(65534)
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOME="/tmp")
    try:
        return subprocess.run([sys.executable, "-m", "nsys_rules", "check", "--no-plugins", str(path)],
                              capture_output=True, text=True, cwd="/", env=env, preexec_fn=drop, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None


def test_file_without_read_permission(tmp_path, monkeypatch):
    path = tmp_path / "secret.sqlite"
    shutil.copyfile(EXAMPLE, path)
    os.chmod(path, 0)
    if os.geteuid() != 0:
        _unusable(path, "permission denied")
        return
    # As root the permission bits do not stop reads. Best: run the CLI as `nobody`.
    os.chmod(tmp_path, 0o755)
    probe = _as_other_user(EXAMPLE)
    if probe is not None and probe.returncode in (0, 1):
        proc = _as_other_user(path)
        assert proc is not None and proc.returncode == 3, proc
        assert proc.stderr.count("\n") == 1 and "permission denied" in proc.stderr
        return
    # `nobody` cannot run this interpreter here: emulate what the kernel would answer a
    # non-root reader (EACCES from open), at the one place the loader opens the file.
    import builtins

    from nsys_rules.loaders import guard

    real_open = builtins.open

    def denying_open(file, *args, **kwargs):
        if os.fspath(file) == os.fspath(path):
            raise PermissionError(13, "Permission denied", os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(guard, "open", denying_open, raising=False)
    _unusable(path, "permission denied")


# -- damaged real exports: run with the damage reported, or exit 3 ----------------------------
def test_dropped_kernel_table_skips_kernel_rules(tmp_path):
    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite", [f'DROP TABLE "{KERNEL}"'])
    data = _ran(path, "--select", "all")
    assert "kernels" not in data["traces"][0]["tables"]
    kernel_rules = [r for r in data["skipped"] if "CUPTI_ACTIVITY_KIND_KERNEL" in r["reason"]]
    assert kernel_rules and all("--trace=cuda" in r["fix"] for r in kernel_rules)


def test_null_kernel_names_are_reported(tmp_path):
    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite",
                        loosen(KERNEL) + [f'UPDATE "{KERNEL}" SET "demangledName" = NULL WHERE rowid % 2 = 0'])
    data = _ran(path)
    assert any(d.startswith("kernels.name: 1792 row(s) with no name") for d in _damage(data)), _damage(data)


def test_negative_durations_are_dropped_and_counted(tmp_path):
    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite",
                        [f'UPDATE "{KERNEL}" SET "end" = "start" - 10 WHERE rowid % 4 = 0'])
    data = _ran(path)
    assert "kernels: 896 row(s) ending before they start dropped" in _damage(data)


def test_zero_durations_are_kept_without_damage(tmp_path):
    from nsys_rules.loaders.sqlite import SqliteExport
    from nsys_rules.model.trace import Trace

    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite", [f'UPDATE "{KERNEL}" SET "end" = "start"'])
    trace = Trace(SqliteExport(path))
    kernels = trace.frame("kernels", ["start", "end", "correlation_id"])
    assert len(kernels) == 3584 and (kernels["end"] == kernels["start"]).all()
    assert not [d for d in trace.damage if d.startswith("kernels")]
    trace.close()
    _ran(path)


def test_string_ids_that_point_nowhere(tmp_path):
    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite",
                        [f'UPDATE "{KERNEL}" SET "demangledName" = 987654321 WHERE rowid % 10 = 0'])
    data = _ran(path)
    assert "kernels.name: 1 string id(s) point to no StringIds row" in _damage(data)


def test_exact_duplicate_rows_are_dropped_not_double_counted(tmp_path):
    from nsys_rules.loaders.sqlite import SqliteExport
    from nsys_rules.model.trace import Trace

    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite",
                        loosen(KERNEL) + [f'INSERT INTO "{KERNEL}" SELECT * FROM "{KERNEL}" WHERE rowid % 3 = 0'])
    cols = ["start", "end", "correlation_id", "device_id", "stream_id", "name"]
    clean, dirty = Trace(SqliteExport(EXAMPLE)), Trace(SqliteExport(path))
    a, b = clean.frame("kernels", cols), dirty.frame("kernels", cols)
    assert len(b) == len(a) == 3584
    assert int((b["end"] - b["start"]).sum()) == int((a["end"] - a["start"]).sum())
    assert "kernels: 1194 duplicate row(s) dropped (same correlationId, start and end)" in dirty.damage
    clean.close()
    dirty.close()
    assert any("duplicate" in d for d in _damage(_ran(path)))


def test_graph_kernels_sharing_a_correlation_id_are_not_duplicates(tmp_path):
    from nsys_rules.loaders.sqlite import SqliteExport
    from nsys_rules.model.trace import Trace

    b = TraceBuilder()
    corr = b.graph_launch(1_000, 50_000)
    for i in range(4):  # graph nodes: one launch's correlationId, different times
        b.kernel("node", 2_000 + i * 1_000, 500, api=None)
    path = b.write(tmp_path / "g.sqlite")
    with sqlite3.connect(path) as db:
        db.execute(f'UPDATE "{KERNEL}" SET "correlationId" = ?', (corr,))
    trace = Trace(SqliteExport(path))
    assert len(trace.frame("kernels", ["start", "end", "correlation_id"])) == 4
    assert not trace.damage
    trace.close()


def test_five_megabyte_string(tmp_path):
    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite", [
        f"UPDATE \"{STRINGS}\" SET \"value\" = printf('%.*c', 5000000, 'k') "
        f'WHERE "id" = (SELECT "demangledName" FROM "{KERNEL}" LIMIT 1)'])
    data = _ran(path)
    assert data["summary"]["errors"] == 0
    from nsys_rules.loaders.sqlite import MAX_STRING, SqliteExport
    from nsys_rules.model.trace import Trace

    trace = Trace(SqliteExport(path))
    longest = max(len(str(n)) for n in trace.frame("kernels", ["name"])["name"].cat.categories)
    trace.close()
    assert longest == MAX_STRING  # cut when read: rules never regex over 5 MB


def test_planted_trigger_never_fires(tmp_path):
    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite", [
        'CREATE TABLE "_log" (x)',
        f'CREATE TRIGGER "_t" AFTER INSERT ON "{KERNEL}" BEGIN INSERT INTO "_log" VALUES (1); END',
        f'CREATE TRIGGER "_u" AFTER UPDATE ON "{RUNTIME}" BEGIN DELETE FROM "{KERNEL}"; END'])
    before = digest(path)
    _ran(path)
    assert digest(path) == before
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        assert db.execute('SELECT count(*) FROM "_log"').fetchone()[0] == 0
        assert db.execute(f'SELECT count(*) FROM "{KERNEL}"').fetchone()[0] == 3584


def test_view_named_like_an_nsys_table_is_not_read(tmp_path):
    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite", [
        f'ALTER TABLE "{KERNEL}" RENAME TO "_real"',
        f'CREATE VIEW "{KERNEL}" AS SELECT * FROM "_real" LIMIT 5'])
    data = _ran(path)
    assert "kernels" not in data["traces"][0]["tables"]
    assert f"{KERNEL}: is a view, not a table (planted or damaged export); ignored" in _damage(data)


def test_text_in_an_integer_column(tmp_path):
    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite", loosen(KERNEL) + [
        f"UPDATE \"{KERNEL}\" SET \"start\" = 'soon' WHERE rowid % 8 = 0",
        f"UPDATE \"{KERNEL}\" SET \"deviceId\" = 'gpu0' WHERE rowid % 8 = 1"])
    data = _ran(path)
    assert "kernels: 448 row(s) with a non-numeric start/end dropped" in _damage(data)
    assert any(d.startswith("kernels.device_id: 448 value(s) that are not integers") for d in _damage(data))


def test_device_ids_no_gpu_has_are_noted_as_damage(tmp_path):
    """deviceId 2^40 (a uint64 column's garbage) once gave a finding on "device 1099511627776" and no note."""
    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite", [
        f'UPDATE "{KERNEL}" SET "deviceId" = {2**40} WHERE rowid % 8 = 0',
        'UPDATE "TARGET_INFO_GPU" SET "id" = 70000'])
    data = _ran(path)
    assert any(d.startswith("kernels.device_id: 448 row(s) with a device id no GPU has") for d in _damage(data)), \
        _damage(data)
    assert any(d.startswith("TARGET_INFO_GPU: GPU id 70000 is no device index") for d in _damage(data))
    clean = _ran(EXAMPLE)
    assert not any("device" in d for d in _damage(clean))


def test_kernel_table_missing_columns(tmp_path):
    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite", [
        f'ALTER TABLE "{KERNEL}" DROP COLUMN "deviceId"', f'ALTER TABLE "{KERNEL}" DROP COLUMN "correlationId"'])
    data = _ran(path)
    notes = [d for d in _damage(data) if d.startswith(KERNEL)]
    assert notes and "correlationId" in notes[0] and "deviceId" in notes[0]


def test_kernel_table_missing_a_required_column_is_ignored(tmp_path):
    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite", [f'ALTER TABLE "{KERNEL}" DROP COLUMN "end"'])
    data = _ran(path, "--select", "all")
    assert "kernels" not in data["traces"][0]["tables"]
    assert any(d.startswith(f"{KERNEL}: lacks column(s) end") for d in _damage(data))
    assert any("lacks required columns" in s["reason"] for s in data["skipped"])


def test_null_required_times_are_dropped(tmp_path):
    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite",
                        loosen(RUNTIME) + [f'UPDATE "{RUNTIME}" SET "start" = NULL WHERE rowid % 2 = 0'])
    data = _ran(path)
    assert any(d.startswith("api: 3622 row(s) with NULL") for d in _damage(data)), _damage(data)


def test_invalid_utf8_name_is_shown_not_fatal(tmp_path):
    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite", loosen(STRINGS) + [
        f"UPDATE \"{STRINGS}\" SET \"value\" = CAST(x'c328ff41' AS TEXT) WHERE \"id\" % 2 = 0"])
    assert _check(path).code in (0, 1, 3)
    check_run(_check(path))


# -- read-only: the input is never changed, nothing is left beside it -------------------------
def test_input_unchanged_and_no_sidecar(example_copy):
    before = digest(example_copy)
    _ran(example_copy)
    assert digest(example_copy) == before
    assert folder_listing(example_copy.parent) == ["trace.sqlite"]


def test_read_only_file(example_copy):
    os.chmod(example_copy, stat.S_IRUSR | stat.S_IRGRP)
    before = digest(example_copy)
    _ran(example_copy)
    assert digest(example_copy) == before
    assert folder_listing(example_copy.parent) == ["trace.sqlite"]


def test_read_only_folder(example_copy):
    folder = example_copy.parent
    before = digest(example_copy)
    os.chmod(folder, stat.S_IRUSR | stat.S_IXUSR)
    try:
        _ran(example_copy)
        assert folder_listing(folder) == ["trace.sqlite"]
    finally:
        os.chmod(folder, stat.S_IRWXU)
    assert digest(example_copy) == before


def test_wal_mode_database(tmp_path):
    path = tmp_path / "wal.sqlite"
    shutil.copyfile(EXAMPLE, path)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    before = digest(path)
    _ran(path)
    assert digest(path) == before
    assert folder_listing(tmp_path) == ["wal.sqlite"]


def test_wal_with_unmerged_rows_reads_them_from_a_private_copy(tmp_path):
    """A -wal beside the export holds rows; immutable=1 alone would silently miss them."""
    live = tmp_path / "live"
    live.mkdir()
    shutil.copyfile(EXAMPLE, live / "w.sqlite")
    writer = sqlite3.connect(live / "w.sqlite")
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute(f'DELETE FROM "{KERNEL}" WHERE rowid % 2 = 0')
    writer.commit()
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    for name in ("w.sqlite", "w.sqlite-wal"):  # a snapshot as a crashed writer leaves it
        shutil.copyfile(live / name, frozen / name)
    writer.close()
    before = {p: digest(frozen / p) for p in folder_listing(frozen)}
    data = _ran(frozen / "w.sqlite")
    assert data["traces"][0]["tables"]["kernels"] == 1792
    assert any(d.startswith("w.sqlite-wal: unmerged rows") for d in _damage(data))
    assert {p: digest(frozen / p) for p in folder_listing(frozen)} == before  # no -shm, nothing changed


# -- values are bound, never formatted into SQL -----------------------------------------------
def test_hostile_nvtx_filter_and_names_stay_data(tmp_path):
    b = TraceBuilder()
    evil = "step'; DROP TABLE StringIds; --"
    for i in range(3):
        b.nvtx(evil, i * 100_000, i * 100_000 + 90_000, registered=bool(i % 2))
        b.kernel('k"; DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL; --', i * 100_000 + 10_000, 5_000)
    path = b.write(tmp_path / "n.sqlite")
    before = digest(path)
    run = _check(path, "--filter-nvtx", evil)
    check_run(run)
    assert run.code == 0, run.stderr
    assert digest(path) == before


# -- isolation: a failing rule or plugin, output complete or absent ---------------------------
class _Boom:
    """A plugin whose rule raises."""

    @staticmethod
    def rule_class():
        from dataclasses import dataclass

        from nsys_rules.rule import Rule

        @dataclass(frozen=True)
        class Options:
            """No options."""

        class Exploding(Rule):
            """Raises on purpose.

            What it detects: nothing.
            """

            name = "exploding"
            title = "explodes"
            requires = ("kernels",)

            def check(self, ctx):
                ctx.frame("kernels")
                raise RuntimeError("kaboom")

        Exploding.Options = Options
        return Exploding


def test_rule_that_raises_is_isolated(monkeypatch, example_copy):
    from nsys_rules.commands import check as check_cmd
    from nsys_rules.hooks import hookimpl
    from nsys_rules.plugin_manager import build_registry

    class Plugin:
        @hookimpl
        def register_rules(self):
            return [_Boom.rule_class()]

    monkeypatch.setattr(check_cmd, "registry_for", lambda args: build_registry(autoload=False, extra=(("boom", Plugin()),)))
    run = _check(example_copy)
    data = check_run(run)
    assert run.code == 4
    assert [e["rule"] for e in data["errors"]] == ["exploding"]
    assert "kaboom" in data["errors"][0]["error"]
    assert "graph-trace-hidden" in {r["name"] for r in data["rules"]}


def test_plugin_that_raises_is_isolated(monkeypatch, example_copy):
    from nsys_rules.commands import check as check_cmd
    from nsys_rules.hooks import hookimpl
    from nsys_rules.plugin_manager import build_registry

    class Plugin:
        @hookimpl
        def register_rules(self):
            raise ImportError("missing dependency")

    monkeypatch.setattr(check_cmd, "registry_for", lambda args: build_registry(autoload=False, extra=(("bad", Plugin()),)))
    run = _check(example_copy)
    data = check_run(run)
    assert run.code == 4 and data["errors"] and "missing dependency" in json.dumps(data["errors"])


def _subprocess_check(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "nsys_rules", "check", "--format", "json", "--no-plugins", *args],
                          cwd=ROOT, timeout=120, **kwargs)


def test_closed_stdout_writes_nothing_and_says_so():
    proc = _subprocess_check(str(EXAMPLE), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: os.close(1))
    assert proc.returncode == 4
    assert proc.stderr.strip().splitlines() == ["nsys-rules: cannot write the output (standard output is closed); "
                                                "nothing more written"]


def test_broken_pipe_is_quiet():
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = _subprocess_check(str(EXAMPLE), stdout=write_end, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr


def test_full_disk_output_is_one_line():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        proc = _subprocess_check(str(EXAMPLE), stdout=full, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 4
    assert proc.stderr.count("\n") == 1 and "cannot write the output" in proc.stderr


def test_failing_formatter_prints_nothing(monkeypatch, example_copy):
    from nsys_rules.commands import check as check_cmd
    from nsys_rules.plugin_manager import build_registry

    def registry(args):
        reg = build_registry(autoload=False)
        reg.formatters["json"] = lambda report: (_ for _ in ()).throw(ValueError("half way"))
        return reg

    monkeypatch.setattr(check_cmd, "registry_for", registry)
    run = _check(example_copy)
    assert run.stdout == "" and run.code == 4
    assert run.stderr.count("\n") == 1


# -- memory bound -----------------------------------------------------------------------------
def test_max_memory_too_small_exits_3_with_the_need(example_copy):
    from nsys_rules.loaders import memory_limit
    from nsys_rules.loaders.sqlite import SqliteExport
    from nsys_rules.plugin_manager import build_registry
    from nsys_rules.model.trace import Trace

    from nsys_rules.model.steps import model_needs

    rule = build_registry(autoload=False).rules["graph-trace-hidden"]
    trace = Trace(SqliteExport(example_copy))
    needs = {t: list(c) for t, c in rule.needs().items() if trace.has(t)}
    for table, cols in model_needs(trace).items():  # the step model and the budget read these on every run
        needs.setdefault(table, []).extend(c for c in cols if c not in needs.get(table, []))
    need = memory_limit.estimate(trace.export, needs)
    api_rows = trace.row_count("api")
    trace.close()
    assert api_rows == 7244 and need.total > 16 * 1024**2
    run = _check(example_copy, "--select", "graph-trace-hidden", "--max-memory", "1M")
    check_run(run)
    assert run.code == 3
    assert f"needs about {memory_limit.human(need.total)}" in run.stderr and "api 7,244 rows" in run.stderr
    assert "--select" in run.stderr and "limit is 1.0 MB" in run.stderr
    # The estimate is enough (1 % of room: with a limit, text columns are priced from a sample).
    fits = _check(example_copy, "--select", "graph-trace-hidden", "--max-memory", str(int(need.total * 1.01)))
    assert fits.code == 0, fits.stderr


def test_max_memory_large_enough_runs(example_copy):
    _ran(example_copy, "--max-memory", "64M")


def test_default_memory_limit_is_80_percent_of_available(monkeypatch, example_copy):
    from nsys_rules.loaders import memory_limit as memory

    monkeypatch.setattr(memory, "available_memory", lambda: 2_000_000)
    run = _check(example_copy)
    check_run(run)
    assert run.code == 3 and "limit is 1.5 MB (80 % of the available memory" in run.stderr


# -- names from the file never drive the terminal ---------------------------------------------
def test_terminal_escapes_in_names_are_shown_escaped(tmp_path):
    b = TraceBuilder()
    evil = "evil\x1b]0;pwned\x07\x1b[2J\rkernel"
    for i in range(60):  # a tail (every tenth run is 4x slower): kernel-tail names the kernel
        b.kernel(evil, i * 500_000, 400_000 if i % 10 == 5 else 90_000)
    path = b.write(tmp_path / "esc.sqlite")
    table = run_cli_inprocess("check", "--fail-on", "never", "--no-plugins", str(path))
    check_run(table, json_output=False)
    assert "\x1b" not in table.stdout and "\x07" not in table.stdout and "\r" not in table.stdout
    assert "evil\\x1b]0;pwned\\x07" in table.stdout
    stats = run_cli_inprocess("stats", "--report", "cuda_gpu_kern_sum", str(path))
    assert stats.code == 0 and "\x1b" not in stats.stdout and "evil\\x1b" in stats.stdout
    data = check_run(_check(path))  # JSON keeps the exact name, escaped by the JSON encoder
    assert data is not None


def test_terminal_safe_keeps_tabs_newlines_and_unicode():
    from nsys_rules.textsafe import terminal_safe

    assert terminal_safe("a\tb\nc µs ✓") == "a\tb\nc µs ✓"
    assert terminal_safe("x\x1b[31my\x9bz\x00") == "x\\x1b[31my\\x9bz\\x00"


def test_loader_plugin_that_raises_is_one_line(monkeypatch, tmp_path):
    from nsys_rules.commands import check as check_cmd
    from nsys_rules.hooks import hookimpl
    from nsys_rules.plugin_manager import build_registry

    class Plugin:
        @hookimpl
        def register_loaders(self):
            def load(path):
                raise KeyError("no such field")
            return {".weird": load}

    monkeypatch.setattr(check_cmd, "registry_for",
                        lambda args: build_registry(autoload=False, extra=(("weird", Plugin()),)))
    (tmp_path / "t.weird").write_text("{}")
    run = _check(tmp_path / "t.weird")
    check_run(run)
    assert run.code == 3 and "the plugin loader for .weird failed: KeyError" in run.stderr


def test_impossible_timestamps_are_dropped_not_summed(tmp_path):
    from nsys_rules.loaders.sqlite import SqliteExport
    from nsys_rules.model.trace import Trace

    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite", [
        f'UPDATE "{KERNEL}" SET "end" = 9223372036854775807 WHERE rowid % 100 = 0',
        f'UPDATE "{KERNEL}" SET "start" = -9223372036854775807 WHERE rowid % 100 = 1'])
    trace = Trace(SqliteExport(path))
    kernels = trace.frame("kernels", ["start", "end"])
    assert len(kernels) == 3584 - 71  # 35 rows with rowid % 100 == 0, 36 with 1
    assert int((kernels["end"] - kernels["start"]).sum()) > 0
    assert "kernels: 71 row(s) with an impossible timestamp (beyond 2^53 ns) dropped" in trace.damage
    trace.close()
    _ran(path)


def test_hot_journal_is_rolled_back_in_a_private_copy(tmp_path):
    """A writer died mid-transaction: the -journal holds the pages to restore; the file itself is torn."""
    live = tmp_path / "live"
    live.mkdir()
    shutil.copyfile(EXAMPLE, live / "j.sqlite")
    writer = sqlite3.connect(live / "j.sqlite", isolation_level=None)
    writer.execute("PRAGMA cache_size = 1")  # spill changed pages into the file before commit
    writer.execute("BEGIN")
    writer.execute(f'DELETE FROM "{KERNEL}"')
    writer.execute(f'UPDATE "{RUNTIME}" SET "start" = "start" + 1')
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    for name in ("j.sqlite", "j.sqlite-journal"):
        shutil.copyfile(live / name, frozen / name)
    writer.execute("ROLLBACK")
    writer.close()
    before = {p: digest(frozen / p) for p in folder_listing(frozen)}
    data = _ran(frozen / "j.sqlite")
    assert data["traces"][0]["tables"]["kernels"] == 3584  # the rolled-back state, not the torn one
    assert any(d.startswith("j.sqlite-journal: unmerged rows") for d in _damage(data))
    assert {p: digest(frozen / p) for p in folder_listing(frozen)} == before


def test_debug_shows_the_traceback(tmp_path):
    (tmp_path / "e.sqlite").write_bytes(b"")
    run = run_cli_inprocess("--debug", "check", str(tmp_path / "e.sqlite"))
    assert run.code == 3
    assert "Traceback" in run.stderr and run.stderr.rstrip().endswith("empty file; re-export the report with "
                                                                     "`nsys export --type=sqlite`")


def test_damage_is_shown_in_the_human_formats(tmp_path):
    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite",
                        [f'UPDATE "{KERNEL}" SET "end" = "start" - 10 WHERE rowid % 4 = 0'])
    note = "kernels: 896 row(s) ending before they start dropped"
    for fmt, prefix in (("table", "damaged export: "), ("markdown", "⚠ damaged export: "),
                        ("html", "<p class='sub'>⚠ damaged export: ")):
        run = run_cli_inprocess("check", "--format", fmt, "--fail-on", "never", "--no-plugins", str(path))
        check_run(run, json_output=False)
        assert prefix + note in run.stdout, (fmt, run.stdout[:600])


def test_damage_is_a_sarif_notification(tmp_path):
    from tests.cli.test_outputs import validate_sarif

    path = damaged_copy(EXAMPLE, tmp_path / "d.sqlite",
                        [f'UPDATE "{KERNEL}" SET "end" = "start" - 10 WHERE rowid % 4 = 0'])
    run = run_cli_inprocess("check", "--format", "sarif", "--fail-on", "never", "--no-plugins", str(path))
    assert run.code == 0, run.stderr
    doc = json.loads(run.stdout)
    validate_sarif(doc)
    texts = [n["message"]["text"] for n in doc["runs"][0]["invocations"][0]["toolExecutionNotifications"]]
    assert f"damaged export {path}: kernels: 896 row(s) ending before they start dropped" in texts
    assert doc["runs"][0]["invocations"][0]["executionSuccessful"] is True


# -- a -wal beside the trace: checked before it is copied --------------------------------------
def _wal_mode_copy(folder):
    folder.mkdir()
    path = folder / "w.sqlite"
    shutil.copyfile(EXAMPLE, path)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    return path


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """A temporary folder of our own, to see what a run leaves in it."""
    import tempfile

    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_sparse_wal_is_refused_before_it_is_copied(tmp_path, private_tmp):
    """4 kB on disk, 2 GiB apparent: copying it would fill the temporary folder with zeros."""
    path = _wal_mode_copy(tmp_path / "t")
    wal = path.with_name("w.sqlite-wal")
    with open(wal, "wb") as fh:
        fh.write(b"\x37\x7f\x06\x82" + bytes(28))  # a WAL header, then holes
        fh.truncate(2 * 1024**3)
    before = digest(path)
    message = _unusable(path, "sparse file")
    assert "w.sqlite-wal" in message and "2,147,483,648 bytes" in message
    assert os.listdir(private_tmp) == [] and digest(path) == before


def test_wal_copy_that_does_not_fit_the_temporary_folder_is_refused(tmp_path, private_tmp, monkeypatch):
    live = tmp_path / "live"
    path = _wal_mode_copy(live)
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute(f'DELETE FROM "{KERNEL}" WHERE rowid % 2 = 0')
    writer.commit()
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    for name in ("w.sqlite", "w.sqlite-wal"):
        shutil.copyfile(live / name, frozen / name)
    writer.close()
    from nsys_rules.loaders import guard

    monkeypatch.setattr(guard.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 5_000_000, 5_000_000))
    message = _unusable(frozen / "w.sqlite", "has 5,000,000 bytes free")
    assert "TMPDIR" in message and os.listdir(private_tmp) == []


def test_sidecar_without_a_sqlite_header_is_not_copied(tmp_path, private_tmp):
    path = _wal_mode_copy(tmp_path / "t")
    path.with_name("w.sqlite-wal").write_bytes(os.urandom(64 * 1024))
    data = _ran(path)
    assert not any("unmerged rows" in d for d in _damage(data))
    assert os.listdir(private_tmp) == []
