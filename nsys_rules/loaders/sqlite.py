"""Read-only access to an nsys SQLite export.

Why both drivers: ADBC (adbc-driver-sqlite) fetches columns straight into Arrow and is
~5x faster than ``pandas.read_sql`` on million-row tables; the stdlib ``sqlite3`` module
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
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..errors import InputError
from . import damage as damage_fix
from .guard import SQLITE_MAGIC, check_file, pending_sidecar, private_copy, remove_folder
from .tables import TABLES, Column, Table

# A file is an nsys export when it has StringIds and at least one table of these families.
_NSYS_PREFIXES = ("TARGET_INFO_", "META_DATA_", "EXPORT_META_DATA", "CUPTI_ACTIVITY_KIND_", "NVTX_EVENTS",
                  "ThreadNames", "OSRT_", "PROCESSES", "ANALYSIS_", "ENUM_NSYS_", "PROFILER_OVERHEAD")

#: What a damaged file can make the stdlib driver raise: SQLite errors, and UnicodeDecodeError
#: when SQLite's own error message quotes a garbled (non-UTF-8) name from the file.
SQLITE_ERRORS = (sqlite3.DatabaseError, UnicodeDecodeError)

#: Longest string kept from ``StringIds``; kernel names (deep C++ templates) stay far below it.
MAX_STRING = 65536

#: Value stored for a NULL in an optional integer column (ids are never negative in nsys).
NULL_INT = -1

#: Ids and launch dimensions, read as int32 when every value fits (memory: a 1M-kernel trace
#: carries a dozen of them; correlation ids are 32-bit in CUPTI, widened to int64 if an export
#: holds bigger ones). Times and sizes stay int64. Code that shifts ids into a join key casts
#: them to int64 first (windows._key, launch_api_rows, the stats joins).
NARROW_COLUMNS = frozenset({"device_id", "context_id", "stream_id", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
                            "block_z", "registers_per_thread", "launch_type", "copy_kind", "src_kind", "dst_kind",
                            "mem_kind", "sync_type", "event_type", "src_device_id", "dst_device_id",
                            "correlation_id", "graph_node_id"})


def _uri(path: Path) -> str:
    return "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


class SqliteExport:
    """An open nsys SQLite export: which tables and columns it has, and typed reads of them.

    Raises :class:`InputError` with a one-line reason for anything that is not a
    readable nsys export.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
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
        if "StringIds" not in self.table_names or not any(
                t.startswith(_NSYS_PREFIXES) for t in self.table_names):
            self.close()
            what = ("has nsys tables but no StringIds table (damaged or stripped export)"
                    if any(t.startswith(_NSYS_PREFIXES) for t in self.table_names)
                    else "a SQLite file, but not an nsys export (no StringIds or nsys tables)")
            raise InputError(f"{self.path}: {what}; "
                             "export the report again with `nsys export --type=sqlite REPORT.nsys-rep`")
        self._columns: dict[str, tuple[str, ...]] = {}
        self._counts: dict[str, int] = {}
        self._strings: tuple[np.ndarray, np.ndarray] | None = None

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
        return self._columns[table]

    def source_of(self, table: Table) -> str | None:
        """The source table that backs a canonical table, when the export has a usable one."""
        for source in table.sources:
            present = self.columns_of(source)
            if present and all(any(s in present for s in c.sources) for c in table.columns if c.required):
                return source
            if present:
                lacking = [c.sources[0] for c in table.columns if c.required and not any(s in present for s in c.sources)]
                damage_fix.note(self.damage, f"{source}: lacks column(s) {', '.join(lacking)}; the table is ignored "
                                             f"(rules that need {table.name} are skipped)")
            elif source in self.table_names:  # listed, but its columns cannot be read: say so, not an empty "see damage"
                damage_fix.note(self.damage, f"{source}: its columns cannot be read (damaged schema); the table is "
                                             f"ignored (rules that need {table.name} are skipped)")
        return None

    def query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a small fixed query (metadata); values are bound, never formatted in."""
        try:
            return self._db.execute(sql, tuple(params)).fetchall()
        except SQLITE_ERRORS as exc:
            raise InputError(f"{self.path}: damaged SQLite file ({exc}); re-export the report with "
                             "`nsys export --type=sqlite`") from None

    def count(self, table: str) -> int:
        """Row count of a source table (0 when absent)."""
        if table not in self.table_names:
            return 0
        # The file is opened immutable: a count never changes, and the engine, the memory guard and
        # the loader each ask (count(*) walks the whole table: 15 ms for 2M rows).
        if table not in self._counts:
            self._counts[table] = int(self.query(f"SELECT count(*) FROM {_quote(table)}")[0][0])
        return self._counts[table]

    # -- strings -------------------------------------------------------------------------
    def _string_table(self) -> tuple[np.ndarray, np.ndarray]:
        if self._strings is None:
            cols = self.columns_of("StringIds")
            if "id" not in cols or "value" not in cols:
                self._strings = (np.empty(0, np.int64), np.empty(0, object))
            else:
                # Cut in SQL, so a planted multi-MB string never reaches Python (rules run regexes
                # over names: 5 MB made one run take 20 s). Not reported as damage: real exports
                # hold long non-name strings (captured program output, metric configs; 333 KB seen).
                rows = self.query('SELECT "id", substr("value", 1, ?) FROM "StringIds" '
                                  'WHERE typeof("id") = \'integer\'', (MAX_STRING,))
                ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
                values = np.array([r[1] if isinstance(r[1], str) else str(r[1]) for r in rows], dtype=object)
                order = np.argsort(ids, kind="stable")
                self._strings = (ids[order], values[order])
        return self._strings

    def resolve_strings(self, ids: np.ndarray, what: str) -> pd.Categorical:
        """Turn ``StringIds`` references into a categorical of names.

        Ids that point nowhere become ``<unknown string N>`` and are reported as damage,
        so a broken reference is visible instead of silently merged with another name.
        """
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            ids = _to_int(ids, NULL_INT)
        ids = ids.astype(np.int64, copy=False)
        valid = ids >= 0
        all_valid = bool(valid.all())
        uniq, inverse = _dense_codes(ids, valid, all_valid)
        sid, svalue = self._string_table()
        pos = np.searchsorted(sid, uniq).clip(0, max(len(sid) - 1, 0))
        found = (sid[pos] == uniq) if len(sid) else np.zeros(len(uniq), bool)
        names = np.where(found, svalue[pos] if len(sid) else None, None).astype(object)
        lost = ~found
        if lost.any():
            self.damage.append(f"{what}: {int(lost.sum())} string id(s) point to no StringIds row")
            for i in np.flatnonzero(lost):
                names[i] = f"<unknown string {int(uniq[i])}>"
        # Two ids may carry the same text: merge them so a name is one category.
        name_codes, categories = pd.factorize(pd.Series(names, dtype=object), use_na_sentinel=True)
        lookup = np.append(name_codes.astype(np.int32), np.int32(-1))  # inverse -1 (NULL) -> -1
        full = lookup[inverse]
        return pd.Categorical.from_codes(full, categories=pd.Index(categories, dtype=object), validate=False)

    # -- bulk reads ----------------------------------------------------------------------
    def read(self, table: Table, columns: Iterable[str]) -> pd.DataFrame:
        """Read canonical ``columns`` of ``table`` as typed pandas columns.

        Rows whose required columns are NULL are dropped (and reported as damage);
        optional integer NULLs become :data:`NULL_INT`; a column the export lacks is
        filled with NULL_INT (or an empty name) so rules see a stable shape.
        """
        source = self.source_of(table)
        wanted = [table.column(c) for c in dict.fromkeys(columns)]
        if source is None:
            return _empty_frame(wanted)
        present = self.columns_of(source)
        picks: dict[str, str | None] = {c.name: next((s for s in c.sources if s in present), None) for c in wanted}
        damage_fix.note_missing_columns(table.name, source, [c for c in wanted if picks[c.name] is None], self.damage)
        src_cols = list(dict.fromkeys(s for s in picks.values() if s is not None))
        extra = [s for c in wanted if c.kind == "nvtx_name" for s in c.sources[1:] if s in present]
        src_cols += [s for s in extra if s not in src_cols]
        # Sources read straight into int32 (when their values fit): no int64 copy of them ever exists.
        narrow = {picks[c.name] for c in wanted if c.name in NARROW_COLUMNS} - {
            picks[c.name] for c in wanted if c.name not in NARROW_COLUMNS} - {None}
        raw = self._fetch(source, src_cols, narrow)  # type: ignore[arg-type]
        n = len(next(iter(raw.values()))) if raw else self.count(source)
        keep = np.ones(n, bool)
        for col in wanted:
            if col.required and picks[col.name] is not None:
                values = raw[picks[col.name]]
                # Integer columns arrive with NULL as NULL_INT: no nsys time or string id is negative.
                keep &= (values != NULL_INT) if values.dtype.kind in "iu" else ~_isnull(values)
        if not keep.all():
            required = ", ".join(c.name for c in wanted if c.required)
            self.damage.append(f"{table.name}: {int((~keep).sum())} row(s) with NULL {required} dropped")
        all_kept = bool(keep.all())
        data: dict[str, Any] = {}
        for col in wanted:
            src = picks[col.name]
            values = None if src is None else (raw[src] if all_kept else raw[src][keep])
            if col.kind == "nvtx_name":
                data[col.name] = self._nvtx_names(col, raw, keep, present)
                continue
            data[col.name] = self._convert(col, values, int(keep.sum()), f"{table.name}.{col.name}")
        frame = pd.DataFrame(data, copy=False)
        frame = damage_fix.drop_invalid_required(table.name, frame, [c.name for c in wanted if c.required],
                                                 NULL_INT, self.damage)
        if "start" in frame and "end" in frame and len(frame):
            bad = frame["end"].to_numpy() < frame["start"].to_numpy()
            if table.name == "nvtx":
                # NVTX marks and unfinished ranges have no end: treat them as instants.
                # A new array, not an in-place patch: `raw_end` may share the same buffer and must keep NULLs.
                ends = frame["end"].to_numpy()
                frame["end"] = np.where(ends == NULL_INT, frame["start"].to_numpy(), ends)
                bad = frame["end"].to_numpy() < frame["start"].to_numpy()
            if bad.any():
                self.damage.append(f"{table.name}: {int(bad.sum())} row(s) ending before they start dropped")
                frame = frame.loc[~bad].reset_index(drop=True)
        return damage_fix.drop_duplicate_rows(table.name, frame, self.damage)

    def _fetch(self, source: str, src_cols: list[str], narrow: set[str] | frozenset[str] = frozenset()
               ) -> dict[str, np.ndarray]:
        if not src_cols:
            return {}
        sql = "SELECT " + ", ".join(_quote(c) for c in src_cols) + " FROM " + _quote(source)
        try:
            return _fetch_arrow(self._open_path, sql, src_cols, self.count(source), narrow)
        except Exception:  # noqa: BLE001 - any ADBC failure falls back to the stdlib reader
            pass
        try:
            rows = self._db.execute(sql).fetchall()
        except SQLITE_ERRORS as exc:
            raise InputError(f"{self.path}: cannot read table {source} ({exc}); the file is damaged: re-export "
                             "the report with `nsys export --type=sqlite`") from None
        out: dict[str, np.ndarray] = {}
        for i, name in enumerate(src_cols):
            out[name] = np.array([r[i] for r in rows], dtype=object)
        return out

    def _nvtx_names(self, col: Column, raw: dict[str, np.ndarray], keep: np.ndarray,
                    present: tuple[str, ...]) -> pd.Categorical:
        n = int(keep.sum())
        text = raw[col.sources[0]][keep] if col.sources[0] in present else np.full(n, None, dtype=object)
        names = pd.Series(text, dtype=object)
        if col.sources[1] in present:
            ids = _to_int(raw[col.sources[1]][keep], NULL_INT)
            registered = pd.Series(np.asarray(self.resolve_strings(ids, "nvtx.name"), dtype=object))
            names = names.where(~_isnull(text), registered)
        return pd.Categorical(names)

    def _convert(self, col: Column, values: np.ndarray | None, n: int, what: str) -> Any:
        if col.kind in ("string", "text"):
            if values is None:
                return pd.Categorical.from_codes(np.full(n, -1), categories=pd.Index([], dtype=object))
            if col.kind == "text":
                return pd.Categorical(pd.Series(values, dtype=object).where(~_isnull(values), None))
            ids = _to_int(values, NULL_INT)
            if not col.required:
                self._note_unreadable(values, ids, what)
            nulls = int((ids < 0).sum()) if col.name in ("name", "short_name") else 0  # nsys always writes these
            if nulls:
                damage_fix.note(self.damage, f"{what}: {nulls} row(s) with no name (NULL string id)")
            return self.resolve_strings(ids, what)
        if values is None:
            return np.full(n, NULL_INT, np.int64)
        if values.dtype == np.int32 and col.name in NARROW_COLUMNS:
            return values  # read narrow by _fetch_arrow: already checked to fit
        ints = _to_int(values, NULL_INT)
        if not col.required:  # a required column's unreadable rows are dropped, with their own note
            self._note_unreadable(values, ints, what)
        # pid/tid are 24-bit fields of a serialized global id: int32 holds them (half the memory of
        # int64 on 2.2M API rows); small ids and launch dimensions too, when every value fits.
        if col.kind in ("pid", "tid"):
            # Straight into int32 (the ufunc casts chunk by chunk; the low 24 bits survive the cast):
            # no int64 temporaries, 18 MB each on 2.2M API rows, while the other big table loads too.
            out = np.empty(len(ints), np.int32)
            if col.kind == "pid":
                np.right_shift(ints, 24, out=out, casting="unsafe")
                out &= 0xFFFFFF
            else:
                np.bitwise_and(ints, 0xFFFFFF, out=out, casting="unsafe")
            out[ints < 0] = NULL_INT
            return out
        if col.name in NARROW_COLUMNS and len(ints) and int(ints.min()) >= -(2**31) and int(ints.max()) < 2**31:
            return ints.astype(np.int32)
        return ints

    def _note_planted_views(self) -> None:
        # Only type='table' is ever read; a view wearing an nsys table's name is reported, not used.
        sources = {s for t in TABLES.values() for s in t.sources} | {"StringIds"}
        try:
            views = [str(r[0]) for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'view'")]
        except SQLITE_ERRORS:
            return
        for name in sorted(v for v in views if v in sources):
            damage_fix.note(self.damage, f"{name}: is a view, not a table (planted or damaged export); ignored")

    def _note_unreadable(self, raw: np.ndarray, converted: np.ndarray, what: str) -> None:
        bad = damage_fix.unreadable_count(raw, converted, NULL_INT)
        if bad:
            damage_fix.note(self.damage, f"{what}: {bad} value(s) that are not integers (wrong column type) "
                                         "read as unknown")

    def close(self) -> None:
        """Close the metadata connection (and drop a private merged copy, if one was made)."""
        self._db.close()
        remove_folder(self._private_dir)


#: Rows per Arrow batch. ADBC's default (1024) spends a third of the read in per-batch overhead;
#: 16k rows keeps that small while one batch stays a few MB (the peak is the final arrays plus one batch).
BATCH_ROWS = 16384


def _fetch_arrow(path: Path, sql: str, names: list[str], expected_rows: int,
                 narrow: set[str] | frozenset[str] = frozenset()) -> dict[str, np.ndarray]:
    """Stream ``sql`` as Arrow record batches into preallocated numpy columns.

    Integer columns land in int64 arrays (NULL -> :data:`NULL_INT`) without ever holding the
    whole Arrow table next to its numpy copy: on the 1M-kernel trace that halves the peak.
    A column that turns out not to be integer (text, REAL in an integer column: damage) becomes
    an object array so the caller's converters can judge each value.
    """
    import adbc_driver_sqlite.dbapi as adbc
    import pyarrow as pa

    size = max(int(expected_rows), 0)
    ints: list[np.ndarray | None] = [np.empty(size, np.int32 if name in narrow else np.int64) for name in names]
    objs: list[np.ndarray | None] = [None for _ in names]
    pos = 0
    with adbc.connect(_uri(path)) as conn, conn.cursor() as cur:
        try:
            cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
        except Exception:  # noqa: BLE001 - an older driver without the option still works, only slower
            pass
        cur.execute(sql)
        for batch in cur.fetch_record_batch():
            rows = batch.num_rows
            if pos + rows > size:  # more rows than count(*) said (should not happen on an immutable file)
                size = max(pos + rows, size * 2)
                ints = [None if a is None else np.resize(a, size) for a in ints]
                objs = [None if a is None else np.resize(a, size) for a in objs]
            for i, column in enumerate(batch.columns):
                if objs[i] is None and pa.types.is_null(column.type):
                    ints[i][pos:pos + rows] = NULL_INT  # type: ignore[index]
                    continue
                if objs[i] is None and pa.types.is_integer(column.type):
                    if column.null_count:
                        column = column.fill_null(NULL_INT)
                    values = column.to_numpy()
                    target = ints[i]
                    assert target is not None
                    if target.dtype == np.int32 and len(values) and not (
                            int(values.min()) >= -(2**31) and int(values.max()) < 2**31):
                        target = ints[i] = target.astype(np.int64)  # a value too big for int32: widen
                    target[pos:pos + rows] = values
                    continue
                if objs[i] is None:
                    objs[i] = np.full(size, None, dtype=object)
                    if pos:
                        done = ints[i][:pos].astype(object)  # type: ignore[index]
                        done[ints[i][:pos] == NULL_INT] = None  # type: ignore[index]
                        objs[i][:pos] = done  # type: ignore[index]
                    ints[i] = None
                if not pa.types.is_null(column.type):
                    objs[i][pos:pos + rows] = column.to_numpy(zero_copy_only=False)  # type: ignore[index]
            pos += rows
    out: dict[str, np.ndarray] = {}
    for name, as_int, as_obj in zip(names, ints, objs, strict=True):
        arr = as_obj if as_obj is not None else as_int
        assert arr is not None
        out[name] = arr[:pos] if pos != len(arr) else arr
    return out


def _dense_codes(ids: np.ndarray, valid: np.ndarray, all_valid: bool) -> tuple[np.ndarray, np.ndarray]:
    """Distinct valid ids (sorted) and each row's index into them (-1 for invalid rows).

    StringIds ids are small dense integers, so a lookup table indexed by id replaces the
    sort inside ``np.unique`` (0.6 s -> 0.03 s on 2.2M API rows); huge sparse ids (odd
    exports) fall back to ``np.unique``.
    """
    picked = ids if all_valid else ids[valid]
    if not len(picked):
        return np.empty(0, np.int64), np.full(len(ids), -1, np.int32)
    top = int(picked.max())
    if top <= 4 * len(ids) + 1_000_000:
        used = np.zeros(top + 1, bool)
        used[picked] = True
        uniq = np.flatnonzero(used).astype(np.int64)
        code_of = np.full(top + 1, -1, np.int32)
        code_of[uniq] = np.arange(len(uniq), dtype=np.int32)
        inverse = code_of[ids.clip(0)] if not all_valid else code_of[ids]
    else:
        uniq, inv = np.unique(picked, return_inverse=True)
        inverse = np.full(len(ids), -1, np.int32)
        inverse[valid] = inv
    if not all_valid:
        inverse[~valid] = -1
    return uniq, inverse


def _isnull(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind in "iub":
        return np.zeros(len(values), bool)
    if values.dtype.kind == "f":
        return np.isnan(values)
    return pd.isna(values)


def _to_int(values: np.ndarray, fill: int) -> np.ndarray:
    """Integers as int64; NULLs and non-numbers (damage) become ``fill``."""
    return damage_fix.to_int(values, fill)


def _empty_frame(columns: list[Column]) -> pd.DataFrame:
    data: dict[str, Any] = {}
    for col in columns:
        if col.kind in ("string", "text"):
            data[col.name] = pd.Categorical([], categories=pd.Index([], dtype=object))
        else:
            data[col.name] = np.empty(0, np.int64)
    return pd.DataFrame(data)


__all__ = ["SqliteExport", "NULL_INT", "SQLITE_MAGIC", "TABLES"]
