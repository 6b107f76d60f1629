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
from .tables import TABLES, Column, Table

SQLITE_MAGIC = b"SQLite format 3\x00"

# A file is an nsys export when it has StringIds and at least one table of these families.
_NSYS_PREFIXES = ("TARGET_INFO_", "META_DATA_", "EXPORT_META_DATA", "CUPTI_ACTIVITY_KIND_", "NVTX_EVENTS",
                  "ThreadNames", "OSRT_", "PROCESSES", "ANALYSIS_", "ENUM_NSYS_", "PROFILER_OVERHEAD")

#: Value stored for a NULL in an optional integer column (ids are never negative in nsys).
NULL_INT = -1


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
        _check_file(self.path)
        try:
            self._db = sqlite3.connect(_uri(self.path), uri=True, check_same_thread=False)
            rows = self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{self.path}: damaged or unreadable SQLite file ({exc}); re-export it with "
                             "`nsys export --type=sqlite`") from None
        self.table_names: frozenset[str] = frozenset(str(r[0]) for r in rows)
        if "StringIds" not in self.table_names or not any(
                t.startswith(_NSYS_PREFIXES) for t in self.table_names):
            raise InputError(f"{self.path}: a SQLite file, but not an nsys export (no StringIds or nsys tables); "
                             "export a report with `nsys export --type=sqlite REPORT.nsys-rep`")
        self._columns: dict[str, tuple[str, ...]] = {}
        self._strings: tuple[np.ndarray, np.ndarray] | None = None
        self.damage: list[str] = []

    # -- schema --------------------------------------------------------------------------
    def columns_of(self, table: str) -> tuple[str, ...]:
        """Column names of a source table (empty when absent)."""
        if table not in self.table_names:
            return ()
        if table not in self._columns:
            try:
                info = self._db.execute(f"PRAGMA table_info({_quote(table)})").fetchall()
            except sqlite3.DatabaseError:
                info = []
            self._columns[table] = tuple(str(r[1]) for r in info)
        return self._columns[table]

    def source_of(self, table: Table) -> str | None:
        """The source table that backs a canonical table, when the export has a usable one."""
        for source in table.sources:
            present = self.columns_of(source)
            if present and all(any(s in present for s in c.sources) for c in table.columns if c.required):
                return source
        return None

    def query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a small fixed query (metadata); values are bound, never formatted in."""
        try:
            return self._db.execute(sql, tuple(params)).fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{self.path}: damaged SQLite file ({exc})") from None

    def count(self, table: str) -> int:
        """Row count of a source table (0 when absent)."""
        if table not in self.table_names:
            return 0
        return int(self.query(f"SELECT count(*) FROM {_quote(table)}")[0][0])

    # -- strings -------------------------------------------------------------------------
    def _string_table(self) -> tuple[np.ndarray, np.ndarray]:
        if self._strings is None:
            cols = self.columns_of("StringIds")
            if "id" not in cols or "value" not in cols:
                self._strings = (np.empty(0, np.int64), np.empty(0, object))
            else:
                rows = self.query('SELECT "id", "value" FROM "StringIds" WHERE typeof("id") = \'integer\'')
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
        missing_ref = ids < 0 if ids.dtype.kind == "i" else np.zeros(len(ids), bool)
        uniq, inverse = np.unique(ids, return_inverse=True)
        sid, svalue = self._string_table()
        pos = np.searchsorted(sid, uniq).clip(0, max(len(sid) - 1, 0))
        found = (sid[pos] == uniq) if len(sid) else np.zeros(len(uniq), bool)
        names = np.where(found, svalue[pos] if len(sid) else None, None).astype(object)
        lost = (~found) & (uniq >= 0)
        if lost.any():
            self.damage.append(f"{what}: {int(lost.sum())} string id(s) point to no StringIds row")
            for i in np.flatnonzero(lost):
                names[i] = f"<unknown string {int(uniq[i])}>"
        codes, categories = pd.factorize(pd.Series(names, dtype=object), use_na_sentinel=True)
        full = codes[inverse]
        full[missing_ref] = -1
        return pd.Categorical.from_codes(full, categories=pd.Index(categories, dtype=object))

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
        src_cols = list(dict.fromkeys(s for s in picks.values() if s is not None))
        extra = [s for c in wanted if c.kind == "nvtx_name" for s in c.sources[1:] if s in present]
        src_cols += [s for s in extra if s not in src_cols]
        raw = self._fetch(source, src_cols)
        n = len(next(iter(raw.values()))) if raw else self.count(source)
        keep = np.ones(n, bool)
        for col in wanted:
            if col.required and picks[col.name] is not None:
                keep &= ~_isnull(raw[picks[col.name]])
        if not keep.all():
            required = ", ".join(c.name for c in wanted if c.required)
            self.damage.append(f"{table.name}: {int((~keep).sum())} row(s) with NULL {required} dropped")
        data: dict[str, Any] = {}
        for col in wanted:
            src = picks[col.name]
            values = raw[src][keep] if src is not None else None
            if col.kind == "nvtx_name":
                data[col.name] = self._nvtx_names(col, raw, keep, present)
                continue
            data[col.name] = self._convert(col, values, int(keep.sum()), f"{table.name}.{col.name}")
        frame = pd.DataFrame(data, copy=False)
        if "start" in frame and "end" in frame and len(frame):
            bad = frame["end"].to_numpy() < frame["start"].to_numpy()
            if table.name == "nvtx":
                # NVTX marks and unfinished ranges have no end: treat them as instants.
                frame.loc[frame["end"] == NULL_INT, "end"] = frame["start"]
                bad = frame["end"].to_numpy() < frame["start"].to_numpy()
            if bad.any():
                self.damage.append(f"{table.name}: {int(bad.sum())} row(s) ending before they start dropped")
                frame = frame.loc[~bad].reset_index(drop=True)
        return frame

    def _fetch(self, source: str, src_cols: list[str]) -> dict[str, np.ndarray]:
        if not src_cols:
            return {}
        sql = "SELECT " + ", ".join(_quote(c) for c in src_cols) + " FROM " + _quote(source)
        try:
            return _fetch_arrow(self.path, sql, src_cols)
        except Exception:  # noqa: BLE001 - any ADBC failure falls back to the stdlib reader
            pass
        try:
            rows = self._db.execute(sql).fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{self.path}: cannot read table {source} ({exc})") from None
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
            return self.resolve_strings(ids, what)
        if values is None:
            return np.full(n, NULL_INT, np.int64)
        ints = _to_int(values, NULL_INT)
        if col.kind == "pid":
            return np.where(ints >= 0, (ints >> 24) & 0xFFFFFF, NULL_INT)
        if col.kind == "tid":
            return np.where(ints >= 0, ints & 0xFFFFFF, NULL_INT)
        return ints

    def close(self) -> None:
        """Close the metadata connection."""
        self._db.close()


def _fetch_arrow(path: Path, sql: str, names: list[str]) -> dict[str, np.ndarray]:
    import adbc_driver_sqlite.dbapi as adbc

    with adbc.connect(_uri(path)) as conn, conn.cursor() as cur:
        cur.execute(sql)
        table = cur.fetch_arrow_table()
    out: dict[str, np.ndarray] = {}
    for name, column in zip(names, table.columns, strict=True):
        import pyarrow as pa

        if pa.types.is_integer(column.type):
            out[name] = column.fill_null(NULL_INT).to_numpy().astype(np.int64, copy=False)
        elif pa.types.is_null(column.type):
            out[name] = np.full(len(column), None, dtype=object)
        else:
            out[name] = column.to_numpy(zero_copy_only=False)
        del column
    return out


def _isnull(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind in "iub":
        return np.zeros(len(values), bool)
    if values.dtype.kind == "f":
        return np.isnan(values)
    return pd.isna(values)


def _to_int(values: np.ndarray, fill: int) -> np.ndarray:
    """Integers as int64; NULLs and non-numbers (damage) become ``fill``."""
    if values.dtype.kind in "iu":
        return values.astype(np.int64, copy=False)
    numeric = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce")
    return numeric.fillna(fill).to_numpy().astype(np.int64)


def _empty_frame(columns: list[Column]) -> pd.DataFrame:
    data: dict[str, Any] = {}
    for col in columns:
        if col.kind in ("string", "text"):
            data[col.name] = pd.Categorical([], categories=pd.Index([], dtype=object))
        else:
            data[col.name] = np.empty(0, np.int64)
    return pd.DataFrame(data)


def _check_file(path: Path) -> None:
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a trace")
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except PermissionError:
        raise InputError(f"{path}: permission denied; make the file readable (chmod +r)") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if not head:
        raise InputError(f"{path}: empty file; re-export the report with `nsys export --type=sqlite`")
    if head != SQLITE_MAGIC:
        raise InputError(f"{path}: not a SQLite file; give an nsys SQLite export "
                         "(`nsys profile --export=sqlite` or `nsys export --type=sqlite REPORT.nsys-rep`)")


__all__ = ["SqliteExport", "NULL_INT", "TABLES"]
