"""Read-only access to an nsys SQLite export.

Why both drivers: ADBC (adbc-driver-sqlite) fetches columns straight into Arrow, several times
faster than ``pandas.read_sql`` on million-row tables; the stdlib ``sqlite3`` module
serves the small metadata queries and is the fallback when ADBC's per-batch type
inference trips over a column whose type changes mid-table (damaged or odd exports).

The file is opened with the URI flags ``mode=ro`` (never write) and ``immutable=1``
(take no locks and create no ``-journal``/``-wal``/``-shm`` files, so a WAL-mode export in a
read-only folder opens too).
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from nsys_rules.errors import InputError
from nsys_rules.loaders import damage as damage_fix
from nsys_rules.loaders import claims, split
from nsys_rules.loaders.batches import fill_columns, stoppable
from nsys_rules.loaders.columnar import ColumnarExport
from nsys_rules.loaders.export import MAX_META_ROWS, MAX_STRING, NULL_INT, has_nsys_tables
from nsys_rules.loaders.guard import SQLITE_MAGIC, check_file, pending_sidecar, private_copy, remove_folder
from nsys_rules.loaders.tables import TABLES

#: What a damaged file can make the stdlib driver raise: SQLite errors, and UnicodeDecodeError
#: when SQLite's own error message quotes a garbled (non-UTF-8) name from the file.
SQLITE_ERRORS = (sqlite3.DatabaseError, UnicodeDecodeError)


def _uri(path: Path) -> str:
    # A Linux path is bytes: the percent-encoded bytes of the name as the OS holds it, so a folder
    # named with a non-UTF-8 byte (b"\xff", surrogate-escaped in Python) opens like any other.
    return "file:" + urllib.parse.quote(os.fsencode(path.resolve())) + "?mode=ro&immutable=1"


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


class SqliteExport(ColumnarExport):
    """An open nsys SQLite export: which tables and columns it has, and typed reads of them.

    Raises :class:`InputError` with a one-line reason for anything that is not a
    readable nsys export.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        check_file(self.path)
        self.damage: list[str] = []
        # The file SQLite reads: the user's, or a private merged copy when a -wal/-journal
        # beside it holds rows that immutable=1 would silently ignore (see loaders/guard.py).
        self._open_path = self.path
        self._private_dir: Path | None = None
        sidecar = pending_sidecar(self.path)
        if sidecar is not None:
            self._open_path, self._private_dir = private_copy(self.path, sidecar)
            self.damage.append(f"{sidecar.name}: unmerged rows read from a private copy (the export was still "
                               "being written or its writer crashed)")
        try:
            self._db = sqlite3.connect(_uri(self._open_path), uri=True, check_same_thread=False)
        except SQLITE_ERRORS as exc:
            remove_folder(self._private_dir)
            raise InputError(f"{self.path}: damaged or unreadable SQLite file ({exc}); re-export it with "
                             "`nsys export --type=sqlite`") from None
        # Invalid UTF-8 in a name is damage to show (as U+FFFD), not a reason to refuse the file.
        self._db.text_factory = lambda raw: raw.decode("utf-8", "replace")
        try:
            # A planted view, trigger or generated column must not run unsafe SQL functions.
            self._db.execute("PRAGMA trusted_schema = OFF")
            rows = self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        except SQLITE_ERRORS as exc:
            self.close()
            raise InputError(f"{self.path}: damaged or unreadable SQLite file ({exc}); re-export it with "
                             "`nsys export --type=sqlite`") from None
        self.table_names: frozenset[str] = frozenset(str(r[0]) for r in rows)
        self._note_planted_views()
        if "StringIds" not in self.table_names or not has_nsys_tables(self.table_names):
            self.close()
            what = ("has nsys tables but no StringIds table (damaged or stripped export)"
                    if has_nsys_tables(self.table_names)
                    else "a SQLite file, but not an nsys export (no StringIds or nsys tables)")
            raise InputError(f"{self.path}: {what}; "
                             "export the report again with `nsys export --type=sqlite REPORT.nsys-rep`")
        self._columns: dict[str, tuple[str, ...]] = {}
        self._types: dict[str, dict[str, str]] = {}  # declared column types
        self._counts: dict[str, int] = {}
        self._ordered: dict[str, bool] = {}
        # Columns read before this file was opened (check, one trace): never from a private copy.
        self._ahead = claims.claim(self.path) if self._private_dir is None else None
        self._answers: dict[tuple[str, tuple[Any, ...]], list[tuple[Any, ...]]] | None = (
            self._ahead.answers if self._ahead is not None else None)

    # -- schema --------------------------------------------------------------------------
    def columns_of(self, table: str) -> tuple[str, ...]:
        """Column names of a source table (empty when absent)."""
        if table not in self.table_names:
            return ()
        if table not in self._columns:
            try:
                info = self._db.execute(f"PRAGMA table_info({_quote(table)})").fetchall()
            except SQLITE_ERRORS:
                info = []
            self._columns[table] = tuple(str(r[1]) for r in info)
            self._types[table] = {str(r[1]): str(r[2]).upper() for r in info}
        return self._columns[table]

    def _query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a small fixed query (metadata); values are bound, never formatted in.

        One-row answers (counts, aggregates) are shared with the read-ahead of this file, which
        asks the slow ones (``count(*)``, ``dbstat``) in the background: the file is immutable.
        """
        key = (sql, tuple(params))
        known = self._answers.get(key) if self._answers is not None else None
        if known is not None:
            return list(known)
        try:
            rows = self._db.execute(sql, key[1]).fetchall()
        except SQLITE_ERRORS as exc:
            raise InputError(f"{self.path}: damaged SQLite file ({exc}); re-export the report with "
                             "`nsys export --type=sqlite`") from None
        if self._answers is not None and len(rows) == 1:
            self._answers[key] = rows
        return rows

    def count(self, table: str) -> int:
        """Row count of a source table (0 when absent)."""
        if table not in self.table_names:
            return 0
        # The file is opened immutable: a count never changes, and the engine, the memory guard and
        # the loader each ask (count(*) walks the whole table: 15 ms for 2M rows).
        if table not in self._counts:
            self._counts[table] = int(self._query(f"SELECT count(*) FROM {_quote(table)}")[0][0])
        return self._counts[table]

    # -- metadata ------------------------------------------------------------------------
    def rows(self, table: str, columns: Sequence[str], limit: int = MAX_META_ROWS) -> list[tuple[Any, ...]]:
        """The rows of a small source table in ``columns`` order; a column the table lacks reads as None.

        Text is cut to MAX_STRING characters and at most ``limit`` rows are read, in SQL: a planted
        600 MB metadata value or a million-row GPU table must not reach Python before any memory check.
        """
        present = self.columns_of(table)
        if not present:
            return []
        select = ", ".join(f"CASE WHEN typeof({_quote(c)}) = 'text' THEN substr({_quote(c)}, 1, {MAX_STRING}) "
                           f"ELSE {_quote(c)} END" if c in present else "NULL" for c in columns)
        return self._query(f"SELECT {select} FROM {_quote(table)} LIMIT ?", (int(limit),))

    def strings_size(self) -> tuple[int, int]:
        """(rows, characters of text) of ``StringIds``."""
        if "value" not in self.columns_of("StringIds"):
            return 0, 0
        # The loader cuts each string at MAX_STRING characters: count no more than it keeps.
        count, text = self._query('SELECT count(*), coalesce(sum(min(length("value"), ?)), 0) FROM "StringIds"',
                                 (MAX_STRING,))[0]
        return int(count or 0), int(text or 0)

    def _load_strings(self) -> tuple[np.ndarray, np.ndarray]:
        cols = self.columns_of("StringIds")
        if "id" not in cols or "value" not in cols:
            return np.empty(0, np.int64), np.empty(0, object)
        # Cut in SQL, so a planted multi-MB string never reaches Python (rules run regexes over
        # names). Not reported as damage: real exports hold long non-name strings (captured
        # program output, metric configs).
        rows = self._query('SELECT "id", substr("value", 1, ?) FROM "StringIds" '
                          'WHERE typeof("id") = \'integer\'', (MAX_STRING,))
        ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
        values = np.array([r[1] if isinstance(r[1], str) else str(r[1]) for r in rows], dtype=object)
        return ids, values

    # -- bulk reads ----------------------------------------------------------------------
    def early_read_safe(self, source: str) -> bool:
        """Not from a private merged copy (the later open would not take it), rows in a stable order."""
        return self._private_dir is None and self.row_order_stable(source)

    def row_order_stable(self, source: str) -> bool:
        """Whether every query over ``source`` returns its rows in rowid order: no index (SQLite may answer a
        query that names few columns from a covering index, in the index's order) and no column that hides
        the rowid by taking its name."""
        if source not in self._ordered:
            hidden = {c.lower() for c in self.columns_of(source)} & {"rowid", "_rowid_", "oid"}
            indexes = self._query("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
                                 "COLLATE NOCASE", (source,))
            self._ordered[source] = not hidden and not indexes[0][0]
        return self._ordered[source]

    def fetch_direct(self, source: str, src_cols: list[str], narrow: set[str] | frozenset[str] = frozenset(),
                     stop: Any = None) -> dict[str, np.ndarray]:
        """``src_cols`` of ``source`` through ADBC only; raises on any failure (see ``ColumnarExport``).

        A big table of integer columns is read in rowid ranges in parallel where there are cores for it
        (:mod:`.split`); the joined columns equal one read's.
        """
        if not src_cols:
            return {}
        rows = self.count(source)
        parts = split.part_count(rows)
        if parts > 1 and self.row_order_stable(source) and all(
                self._types.get(source, {}).get(c) == "INTEGER" for c in src_cols):
            low, high = self._query(f"SELECT min(rowid) FROM {_quote(source)}")[0][0], \
                self._query(f"SELECT max(rowid) FROM {_quote(source)}")[0][0]
            if low is not None:
                sql = _select(source, src_cols)

                def part(start: int, end: int, halt: Any) -> dict[str, np.ndarray]:
                    return _fetch_arrow(self._open_path, f"{sql} WHERE rowid >= {int(start)} AND rowid < {int(end)}",
                                        src_cols, min(end - start, rows), narrow, halt)

                joined = split.read_parts(part, split.rowid_ranges(int(low), int(high), parts), stop)
                if joined is not None:
                    return joined
        return _fetch_arrow(self._open_path, _select(source, src_cols), src_cols, rows, narrow, stop)

    def _fetch(self, source: str, src_cols: list[str], narrow: set[str] | frozenset[str] = frozenset()
               ) -> dict[str, np.ndarray]:
        if not src_cols:
            return {}
        taking = self._take_early(source, src_cols, narrow)
        early: dict[str, np.ndarray] = {}
        try:
            # The columns no worker began, read here while the worker's reads finish.
            rest = self.fetch_direct(source, [c for c in src_cols if c not in taking.covered], narrow)
            early, _ = taking.wait()
            rest.update(self.fetch_direct(source, [c for c in src_cols if c not in early and c not in rest], narrow))
            return {c: early[c] if c in early else rest[c] for c in src_cols}
        except Exception:  # noqa: BLE001 - any ADBC failure falls back to the stdlib reader
            pass
        # The stdlib reader reads every column, the early ones too, as one read of them all would have.
        del early
        sql = _select(source, src_cols)
        try:
            rows = self._db.execute(sql).fetchall()
        except SQLITE_ERRORS as exc:
            raise InputError(f"{self.path}: cannot read table {source} ({exc}); the file is damaged: re-export "
                             "the report with `nsys export --type=sqlite`") from None
        out: dict[str, np.ndarray] = {}
        for i, name in enumerate(src_cols):
            out[name] = np.array([r[i] for r in rows], dtype=object)
        return out

    def _note_planted_views(self) -> None:
        # Only type='table' is ever read; a view wearing an nsys table's name is reported, not used.
        sources = {s for t in TABLES.values() for s in t.sources} | {"StringIds"}
        try:
            views = [str(r[0]) for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'view'")]
        except SQLITE_ERRORS:
            return
        for name in sorted(v for v in views if v in sources):
            damage_fix.note(self.damage, f"{name}: is a view, not a table (planted or damaged export); ignored")

    def close(self) -> None:
        """Close the metadata connection (and drop a private merged copy, and the folder of an export made for
        this run, if any)."""
        self._db.close()
        remove_folder(self._private_dir)
        remove_folder(self.owned_folder)


#: Rows per Arrow batch. ADBC's default (1024) spends a third of the read in per-batch overhead;
#: 16k rows keeps that small while one batch stays a few MB (the peak is the final arrays plus one batch).
BATCH_ROWS = 16384


def _select(source: str, src_cols: list[str]) -> str:
    return "SELECT " + ", ".join(_quote(c) for c in src_cols) + " FROM " + _quote(source)


def _fetch_arrow(path: Path, sql: str, names: list[str], expected_rows: int,
                 narrow: set[str] | frozenset[str] = frozenset(), stop: Any = None) -> dict[str, np.ndarray]:
    """Stream ``sql`` as Arrow record batches into preallocated numpy columns (see :mod:`.batches`).

    Through ADBC's low-level API: its DB-API module imports pyarrow.dataset, which imports pandas,
    and the read-ahead thread must read while the main thread is still importing pandas.
    """
    import adbc_driver_manager
    import adbc_driver_sqlite
    import pyarrow as pa

    with ExitStack() as close:
        database = adbc_driver_sqlite.connect(_uri(path))
        close.callback(database.close)
        connection = adbc_driver_manager.AdbcConnection(database)
        close.callback(connection.close)
        statement = adbc_driver_manager.AdbcStatement(connection)
        close.callback(statement.close)
        try:
            statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
        except Exception:  # noqa: BLE001 - an older driver without the option still works, only slower
            pass
        statement.set_sql_query(sql)
        handle, _ = statement.execute_query()
        from_stream = getattr(pa.RecordBatchReader, "from_stream", None)  # pyarrow >= 15
        reader = from_stream(handle) if from_stream is not None else pa.RecordBatchReader._import_from_c(handle.address)
        close.callback(reader.close)  # before the statement: the stream belongs to it
        return fill_columns(stoppable(reader, stop), names, expected_rows, narrow)


__all__ = ["SqliteExport", "NULL_INT", "MAX_STRING", "SQLITE_MAGIC", "TABLES"]
