"""The read-ahead (loaders.readahead): same frames and damage as a plain read, columns handed over once,
nothing read that the run will not use, and the CLI's check parser light enough to start it early."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsys_rules.model.steps import model_needs
from nsys_rules.inputs import open_trace
from nsys_rules.loaders import readahead
from nsys_rules.loaders.batches import ReadStopped, stoppable
from nsys_rules.loaders.tables import TABLES
from nsys_rules.testing import TraceBuilder
from tests.conftest import H200, need_shared

#: Columns the engine reads beyond the early ones in a default run (graph-trace-hidden's graph node ids).
EXTRA = {"kernels": ["graph_node_id", "short_name"], "api": ["return_value"]}


def _small_trace(path: Path, kernels: int = 300) -> Path:
    b = TraceBuilder()
    for i in range(kernels):
        b.kernel(f"k{i % 7}", 1_000_000 + i * 10_000, 5_000, grid=(i % 5 + 1, 1, 1))
        b.nvtx("step", 1_000_000 + i * 10_000, duration=8_000)
    return b.write(path)


def _frames(path: Path, early: bool) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """Every table the early columns come from, read as the engine reads them (early columns, then more)."""
    readahead.stop()
    if early:
        readahead.start(str(path), limit_set=False)
    try:
        trace = open_trace(path)
        assert (getattr(trace.export, "_ahead", None) is not None) == early
        frames = {name: trace.frame(name, list(cols)) for name, cols in readahead.EARLY_COLUMNS.items()
                  if trace.has(name)}
        for name, cols in EXTRA.items():
            if trace.has(name):
                frames[name] = trace.frame(name, list(readahead.EARLY_COLUMNS[name]) + cols)
        damage = list(trace.damage)
        trace.close()
        return frames, damage
    finally:
        readahead.stop()


def _settle(ahead: readahead.ReadAhead) -> None:
    """Wait for every planned early read to end, so that ``take`` finds them begun (none left to cancel)."""
    for units in ahead._plan.result(timeout=60).values():
        for unit in units:
            unit.future.exception(timeout=60)


def _take(ahead: readahead.ReadAhead, source: str, columns: list[str], narrow: frozenset[str] = frozenset()
          ) -> tuple[dict, dict]:
    _settle(ahead)
    return ahead.take(source, columns, narrow).wait()


def _same(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert list(a[name].columns) == list(b[name].columns), name
        pd.testing.assert_frame_equal(a[name], b[name], check_exact=True)
        for col in a[name].columns:  # dtypes, categories and narrow ints exactly as a plain read gives them
            assert a[name][col].dtype == b[name][col].dtype, (name, col)


def test_early_columns_are_what_every_check_reads(h200: Path) -> None:
    trace = open_trace(h200 / "decode_eager.sqlite")
    needs = model_needs(trace)
    for name, cols in readahead.EARLY_COLUMNS.items():
        assert set(cols) <= set(needs.get(name, ())), f"{name}: the read-ahead reads columns no check asks for"
        assert set(cols) <= set(TABLES[name].column_names)
    trace.close()


@pytest.mark.parametrize("name", ["decode_eager.sqlite", "decode_graph_node.sqlite", "engine_moe_tail.sqlite"])
def test_same_frames_and_damage_as_a_plain_read(name: str) -> None:
    path = need_shared(H200) / name
    plain, plain_damage = _frames(path, early=False)
    early, early_damage = _frames(path, early=True)
    _same(plain, early)
    assert plain_damage == early_damage


def test_same_frames_from_an_export_folder(tmp_path: Path) -> None:
    folder = need_shared(H200.parent / "formats") / "pq_small.tar.xz"
    subprocess.run(["tar", "-xJf", str(folder), "-C", str(tmp_path)], check=True, timeout=600)
    for export in sorted(tmp_path.rglob("*.parquetdir")) + sorted(tmp_path.rglob("*.arrowdir")):
        plain, plain_damage = _frames(export, early=False)
        early, early_damage = _frames(export, early=True)
        _same(plain, early)
        assert plain_damage == early_damage


def test_columns_are_handed_over_once(tmp_path: Path) -> None:
    path = _small_trace(tmp_path / "t.sqlite")
    readahead.start(str(path), limit_set=False)
    try:
        ahead = readahead.claim(path)
        assert ahead is not None and readahead.claim(path) is None  # one export takes it
        source = TABLES["kernels"].sources[0]
        taken, _ = _take(ahead, source, ["start", "end"])
        assert set(taken) == {"start", "end"} and len(taken["start"]) == 300
        assert _take(ahead, source, ["start", "end"]) == ({}, {})
        # A column read narrow early is not handed to a read that wants it wide (nor the reverse).
        assert not ahead.take(source, ["deviceId"], frozenset()).covered
        assert set(_take(ahead, source, ["deviceId"], frozenset({"deviceId"}))[0]) == {"deviceId"}
    finally:
        readahead.stop()


def test_a_read_no_worker_began_is_left_to_the_caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One worker busy with the first table: the export reads the others itself instead of waiting for them."""
    path = _small_trace(tmp_path / "t.sqlite")
    monkeypatch.setattr(readahead.os, "cpu_count", lambda: 1)  # one worker
    gate = threading.Event()
    read = readahead.ReadAhead._read

    def held(self: readahead.ReadAhead, *args: object) -> object:
        gate.wait(60)
        return read(self, *args)

    monkeypatch.setattr(readahead.ReadAhead, "_read", held)
    readahead.start(str(path), limit_set=False)
    try:
        ahead = readahead.claim(path)
        assert ahead is not None
        plan = ahead._plan.result(timeout=60)
        first = next(iter(plan))  # the biggest table: the worker's first read, held at the gate
        for _ in range(500):
            if plan[first][0].future.running():
                break
            threading.Event().wait(0.01)
        later = [source for source in plan if source != first]
        assert later and all(not ahead.take(source, ["start"], frozenset()).covered for source in later)
        assert all(unit.future.cancelled() for source in later for unit in plan[source])
        taking = ahead.take(first, ["start"], frozenset())
        assert taking.covered == {"start"}
        gate.set()
        assert len(taking.wait()[0]["start"]) == len(ahead.take(first, ["end"], frozenset()).wait()[0]["end"])
    finally:
        gate.set()
        readahead.stop()
    monkeypatch.setattr(readahead.ReadAhead, "_read", read)
    gate.set()
    _same(_frames(path, early=False)[0], _frames(path, early=True)[0])


def _beyond_int64(path: Path, columns: list[str]) -> None:
    """Put unsigned values beyond int64 (damage the reads note per column) in every 30th row of ``columns``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = pq.read_table(path) if path.suffix == ".parquet" else pa.ipc.open_stream(pa.OSFile(str(path))).read_all()
    for name in columns:
        values = [2**64 - 1 if i % 30 == 0 else v for i, v in enumerate(data.column(name).to_pylist())]
        data = data.set_column(data.schema.get_field_index(name), name, pa.array(values, pa.uint64()))
    if path.suffix == ".parquet":
        pq.write_table(data, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, data.schema) as out:
            out.write_table(data)


def test_halves_balance_bytes_and_keep_small_tables_whole() -> None:
    cols = ["start", "end", "correlationId", "globalTid", "nameId"]
    narrow = frozenset({"correlationId", "nameId"})
    halves = readahead._halves(cols, narrow, 2_000_000)
    assert sorted(c for half in halves for c in half) == sorted(cols) and len(halves) == 2
    weights = [sum(4 if c in narrow else 8 for c in half) for half in halves]
    assert abs(weights[0] - weights[1]) <= 4 and all(half == [c for c in cols if c in half] for half in halves)
    assert readahead._halves(cols, narrow, readahead.SPLIT_ROWS - 1) == [cols]
    assert readahead._halves(["start"], narrow, 2_000_000) == [["start"]]


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_a_folder_read_in_halves_gives_the_plain_frames(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         kind: str) -> None:
    """Each big table as two early reads of half its columns, the export taking some and reading the rest:
    the same frames (types included) and damage notes, in the same order, as one plain read."""
    from tests.unit._folders import folder_from_sqlite

    b = TraceBuilder()
    for i in range(400):
        b.kernel(f"k{i % 7}", 1_000_000 + i * 10_000, 5_000, grid=(i % 5 + 1, 1, 1))
        b.nvtx("step", 1_000_000 + i * 10_000, duration=8_000)
    db = b.write(tmp_path / "t.sqlite")
    con = sqlite3.connect(db)
    # Damage the reads note: names pointing to no string, a start after the end.
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 987654 WHERE rowid % 50 = 0")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 987655 WHERE rowid % 40 = 0")
    con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = "end" + 5 WHERE rowid % 60 = 0')
    con.commit()
    con.close()
    folder = folder_from_sqlite(db, tmp_path / f"t.{kind}dir", kind)
    _beyond_int64(folder / f"CUPTI_ACTIVITY_KIND_KERNEL.{kind}", ["globalPid", "streamId", "demangledName"])
    monkeypatch.setattr(readahead, "SPLIT_ROWS", 1)
    plain, plain_damage = _frames(folder, early=False)
    early, early_damage = _frames(folder, early=True)
    _same(plain, early)
    assert plain_damage == early_damage, (plain_damage, early_damage)
    assert sum("beyond int64" in line for line in plain_damage) >= 3, plain_damage


def test_not_claimed_for_another_or_a_changed_file(tmp_path: Path) -> None:
    path = _small_trace(tmp_path / "t.sqlite")
    other = _small_trace(tmp_path / "u.sqlite", kernels=10)
    readahead.start(str(path), limit_set=False)
    try:
        assert readahead.claim(other) is None
        with open(path, "ab") as fh:  # the file changed after the read began
            fh.write(b"\0")
        assert readahead.claim(path) is None
    finally:
        readahead.stop()


def test_nothing_read_early_under_a_memory_limit_or_for_a_report(tmp_path: Path) -> None:
    path = _small_trace(tmp_path / "t.sqlite")
    readahead.start(str(path), limit_set=True)
    assert readahead.claim(path) is None
    rep = tmp_path / "t.nsys-rep"
    rep.write_bytes(b"")
    readahead.start(str(rep), limit_set=False)
    assert readahead.claim(rep) is None


def test_a_table_with_an_index_is_read_by_the_export(tmp_path: Path) -> None:
    path = _small_trace(tmp_path / "t.sqlite")
    db = sqlite3.connect(path)
    db.execute('CREATE INDEX corr ON CUPTI_ACTIVITY_KIND_KERNEL ("correlationId")')
    db.commit()
    db.close()
    readahead.start(str(path), limit_set=False)
    try:
        ahead = readahead.claim(path)
        assert ahead is not None
        assert _take(ahead, "CUPTI_ACTIVITY_KIND_KERNEL", ["start"]) == ({}, {})
        assert set(_take(ahead, "CUPTI_ACTIVITY_KIND_RUNTIME", ["start"])[0]) == {"start"}
    finally:
        readahead.stop()
    plain, _ = _frames(path, early=False)
    early, _ = _frames(path, early=True)
    _same(plain, early)


def test_stop_ends_a_read_between_batches() -> None:
    stop = threading.Event()
    batches = stoppable(iter(range(5)), stop)
    assert next(batches) == 0
    stop.set()
    with pytest.raises(ReadStopped):
        next(batches)


def test_check_parses_its_flags_without_pandas() -> None:
    code = ("import sys; from nsys_rules.cli import build_parser, command_of; "
            "args = build_parser(command_of(['check', 'x.sqlite'])).parse_args(['check', 'x.sqlite']); "
            "heavy = [m for m in ('pandas', 'numpy', 'pyarrow', 'nsys_rules.engine') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("kind", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"])
def test_integer_batches_convert_as_arrow_does(kind: str) -> None:
    """The reader's own integer conversion (no pandas) gives what ``Array.to_numpy`` gives, slices and NULLs too."""
    import pyarrow as pa

    from nsys_rules.loaders.batches import _integers

    values = pa.array([7, None, 0, 100, None, 3, 1, *range(20), None], type=getattr(pa, kind)())
    for column in (values, values.slice(2), values.slice(1, 3), values.slice(5, 0), values.slice(2, 2), values.slice(9)):
        got, beyond = _integers(column)
        want = column.cast(pa.int64()) if column.null_count and kind.startswith("u") else column
        want = (want.fill_null(-1) if column.null_count else want).to_numpy()
        assert beyond == 0 and got.dtype == want.dtype and got.tolist() == want.tolist()


def test_unsigned_values_beyond_int64_read_as_unknown() -> None:
    import pyarrow as pa

    from nsys_rules.loaders.batches import _integers

    column = pa.array([1, 2**64 - 1, None, 2**63, 5], pa.uint64()).slice(1)
    got, beyond = _integers(column)
    assert beyond == 2 and got.dtype == np.int64 and got.tolist() == [-1, -1, -1, 5]


def test_an_early_read_imports_no_pandas(tmp_path: Path) -> None:
    """``Array.to_numpy`` imports pandas on first use: a read-ahead worker would wait for the main thread's
    pandas import (~0.2 s) before its first batch. Integer and text columns are converted without it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": pa.array([1, 2, None], pa.uint64()), "b": pa.array([4, 5, 6], pa.int32()),
                             "t": pa.array(["x", None, "é"], pa.large_string())}), path)
    code = ("import sys, pyarrow.parquet as pq; from nsys_rules.loaders.batches import fill_columns; "
            f"out = fill_columns(pq.ParquetFile({str(path)!r}).iter_batches(), ['a', 'b', 't'], 3, {{'b'}}); "
            "assert out['a'].tolist() == [1, 2, -1] and out['b'].tolist() == [4, 5, 6], out; "
            "assert out['t'].tolist() == ['x', None, 'é'] and out['t'].dtype == object, out; "
            "assert 'pandas' not in sys.modules and 'pyarrow.compute' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_text_batches_convert_as_arrow_does() -> None:
    import pyarrow as pa

    from nsys_rules.loaders.batches import _objects

    for column in (pa.array(["a", None, "h\u00e9llo", ""], pa.string()), pa.array(["x", None, "y"], pa.large_string()).slice(1),
                   pa.array([1.5, None, 2.0]), pa.array([True, None])):
        got, want = _objects(column), column.to_numpy(zero_copy_only=False)
        assert got.dtype == object or got.dtype == want.dtype
        assert [repr(v) for v in got.tolist()] == [repr(v) for v in want.tolist()]
    bad = pa.array([b"ab\xff", None], pa.large_binary()).cast(pa.large_string(), safe=False)  # not UTF-8
    assert _objects(bad).tolist() == ["ab\ufffd", None]


def test_command_stubs_match_the_commands_help() -> None:
    from nsys_rules.cli import COMMANDS, build_parser

    def helps(parser: object) -> dict[str, str]:
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")  # type: ignore[attr-defined]
        return {a.dest: a.help for a in sub._choices_actions}

    full, light = helps(build_parser()), helps(build_parser(""))
    assert full == light == {name: text for name, text in COMMANDS.values()}


def test_narrow_reads_match_whole_table_reads(tmp_path: Path) -> None:
    """fill_columns is column by column: a column read alone equals the same column read with others."""
    from nsys_rules.loaders.sqlite import SqliteExport

    path = _small_trace(tmp_path / "t.sqlite")
    export = SqliteExport(path)
    source = "CUPTI_ACTIVITY_KIND_KERNEL"
    cols = ["start", "end", "deviceId", "gridX", "demangledName"]
    together = export.fetch_direct(source, cols, {"deviceId", "gridX"})
    for col in cols:
        alone = export.fetch_direct(source, [col], {"deviceId", "gridX"})[col]
        assert alone.dtype == together[col].dtype and np.array_equal(alone, together[col])
    export.close()


@pytest.mark.parametrize("parts", [2, 3, 7])
def test_a_table_read_in_parts_equals_it_read_whole(parts: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from nsys_rules.loaders import split
    from nsys_rules.loaders.sqlite import SqliteExport, _fetch_arrow, _select

    path = need_shared(H200) / "engine_moe_tail.sqlite"
    export = SqliteExport(path)
    monkeypatch.setattr(split, "part_count", lambda rows: parts)
    for name in ("kernels", "api"):
        table = TABLES[name]
        source = export.source_of(table)
        assert source is not None
        _, cols, narrow = export.source_columns(table, list(table.columns), source)
        cols = [c for c in cols if export._types[source].get(c) == "INTEGER"]
        whole = _fetch_arrow(path, _select(source, cols), cols, export.count(source), narrow)
        joined = export.fetch_direct(source, cols, narrow)
        for col in cols:
            assert joined[col].dtype == whole[col].dtype and np.array_equal(joined[col], whole[col]), (name, col)
    export.close()


def test_parts_with_nulls_wide_values_and_damage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NULL runs, a value too wide for int32 in one part, text in an integer column: the same as a whole read."""
    from nsys_rules.loaders import split

    path = _small_trace(tmp_path / "t.sqlite", kernels=3000)
    db = sqlite3.connect(path)
    db.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "graphNodeId" = NULL WHERE rowid < 1500')
    db.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "gridY" = 5000000000 WHERE rowid = 2500')
    db.commit()
    db.close()
    damaged = tmp_path / "d.sqlite"
    damaged.write_bytes(path.read_bytes())
    db = sqlite3.connect(damaged)
    db.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "streamId" = \'x\' WHERE rowid = 2000')
    db.commit()
    db.close()
    cols = list(TABLES["kernels"].column_names)
    for trace in (path, damaged):
        monkeypatch.setattr(split, "part_count", lambda rows: 1)
        whole = open_trace(trace)
        expected = whole.frame("kernels", cols)
        monkeypatch.setattr(split, "part_count", lambda rows: 4)
        parts = open_trace(trace)
        got = parts.frame("kernels", cols)
        pd.testing.assert_frame_equal(expected, got, check_exact=True)
        assert [expected[c].dtype for c in cols] == [got[c].dtype for c in cols]
        assert whole.damage == parts.damage
        whole.close()
        parts.close()


def test_part_counts_and_ranges() -> None:
    from nsys_rules.loaders import split

    assert split.part_count(1000) == 1
    assert split.rowid_ranges(1, 10, 3) == [(1, 5), (5, 9), (9, 11)]
    assert split.rowid_ranges(5, 5, 4) == [(5, 6)]
    ranges = split.rowid_ranges(1, 1_011_922, 8)
    assert ranges[0][0] == 1 and ranges[-1][1] == 1_011_923
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))


def test_metadata_answers_are_shared_with_the_export(tmp_path: Path) -> None:
    """Row counts the read-ahead asked are the export's answers too (same file, same SQL, same result)."""
    path = _small_trace(tmp_path / "t.sqlite")
    readahead.start(str(path), limit_set=False)
    try:
        ahead = readahead.claim(path)
        assert ahead is not None
        _settle(ahead)  # the plan is done
        for future in list(ahead._pool._futures):  # and the metadata task too
            future.exception(timeout=60)
        key = ('SELECT count(*) FROM "CUPTI_ACTIVITY_KIND_KERNEL"', ())
        assert ahead.answers[key] == [(300,)]
        from nsys_rules.loaders.sqlite import SqliteExport

        plain = SqliteExport(path)
        assert plain._answers is None and plain.count("CUPTI_ACTIVITY_KIND_KERNEL") == 300
        plain.close()
    finally:
        readahead.stop()


def test_switch_interval_shortened_while_reading_and_put_back_after(tmp_path: Path, monkeypatch) -> None:
    path = _small_trace(tmp_path / "t.sqlite")
    readahead.stop()
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.004)
    # The reads of a 300-row trace can all end before the first check on a loaded machine (and put the interval
    # back): each read waits here until the shortened interval has been seen.
    seen = threading.Event()
    real_read = readahead.ReadAhead._read

    def held_read(self, *args):  # type: ignore[no-untyped-def]
        seen.wait(30)
        return real_read(self, *args)

    monkeypatch.setattr(readahead.ReadAhead, "_read", held_read)
    try:
        readahead.start(str(path), limit_set=False)
        ahead = readahead.claim(path)
        assert ahead is not None
        assert sys.getswitchinterval() == pytest.approx(min(0.004, readahead.SWITCH_INTERVAL))
        seen.set()
        source = TABLES["kernels"].sources[0]
        assert len(_take(ahead, source, ["start"])[0]["start"]) == 300  # waits for that read
        for _ in range(200):  # the last read or metadata query ends, then the export closes and it is put back
            if sys.getswitchinterval() == pytest.approx(0.004):
                break
            threading.Event().wait(0.01)
        assert sys.getswitchinterval() == pytest.approx(0.004)
        readahead.start(str(path), limit_set=False)  # stopped at once: put back by stop() too
        readahead.stop()
        assert sys.getswitchinterval() == pytest.approx(0.004)
    finally:
        readahead.stop()
        sys.setswitchinterval(before)
