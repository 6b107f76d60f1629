"""Read-only access to ``nsys export --type=parquetdir`` and ``--type=arrowdir`` folders.

nsys writes one file per table (``CUPTI_ACTIVITY_KIND_KERNEL.parquet``, ``StringIds.arrow``, ...)
with the same table and column names as its SQLite export, so the canonical tables of
:mod:`nsys_rules.loaders.tables` map onto them unchanged. Parquet is columnar: only the
columns asked for are decoded, several times faster than the same columns from SQLite. Arrow
IPC files are memory-mapped, so integer columns become numpy arrays without a copy.

Nothing in the folder is ever written; a file that is not a regular file (a FIFO would block
``open``) is never opened.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np

from nsys_rules.errors import InputError
from nsys_rules.malloc_tune import release_free_memory
from nsys_rules.loaders import damage as damage_fix
from nsys_rules.loaders import claims
from nsys_rules.loaders.batches import fill_columns, note_column, stoppable
from nsys_rules.loaders.columnar import ColumnarExport
from nsys_rules.loaders.export import MAX_META_ROWS, MAX_STRING, NULL_INT, has_nsys_tables

def _arrow_can_name(path: Path) -> bool:
    """Whether Arrow can open ``path`` by name: it takes names as UTF-8, and a Linux path is bytes
    (a folder named with b"\\xff" is ``"\\udcff"`` in Python); such a file is opened by Python instead."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _mapped_by_python(path: Path) -> Any:
    """An Arrow reader over ``path`` memory-mapped by Python (the path as the OS holds it), still without a copy."""
    import mmap

    import pyarrow as pa

    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_size == 0:
            return pa.BufferReader(b"")
        # The map outlives the file object: the buffer holds it until the last array over it is gone.
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    return pa.BufferReader(pa.py_buffer(mapped))


#: Folder kinds by the file suffix nsys gives each table.
SUFFIXES = {"parquet": ".parquet", "arrow": ".arrow"}
#: Folder name endings ``nsys export`` uses by default for each kind.
FOLDER_ENDINGS = {".parquetdir": "parquet", ".arrowdir": "arrow"}

#: Rows decoded per Parquet batch: large enough that per-batch overhead stays small, small enough
#: that one batch of a dozen columns is a few MB.
BATCH_ROWS = 65536

#: Bytes read from a Parquet file at a time (see ``_parquet``).
READ_BUFFER = 1 << 20

_HINT = "export the report again with `nsys export --type=parquetdir REPORT.nsys-rep`"


def folder_kind(path: Path) -> str | None:
    """``parquet`` or ``arrow`` when ``path`` looks like an nsys export folder (by name or by its files), else None."""
    by_name = FOLDER_ENDINGS.get(path.suffix.lower())
    if by_name is not None:
        return by_name
    try:
        if not path.is_dir():
            return None
        for kind, suffix in SUFFIXES.items():
            if (path / f"StringIds{suffix}").exists():
                return kind
        # No StringIds but nsys table files: still an export folder (a damaged one, said when opened).
        for entry in path.iterdir():
            for kind, suffix in SUFFIXES.items():
                if entry.name.endswith(suffix) and has_nsys_tables([entry.name]):
                    return kind
    except OSError:
        return None
    return None


class ArrowDirExport(ColumnarExport):
    """An open ``parquetdir`` or ``arrowdir`` export folder.

    Raises :class:`InputError` with a one-line reason when the folder is not a readable nsys export.
    """

    #: Parquet reads are cheap: two in flight would gain little time and add both reads' transients to the peak.
    parallel_reads = False

    def __init__(self, path: str | os.PathLike[str], kind: str | None = None) -> None:
        super().__init__()
        self.path = Path(path)
        self.damage: list[str] = []
        found = kind or folder_kind(self.path)
        if not self.path.is_dir():
            what = "not a folder" if self.path.exists() else "no such folder"
            raise InputError(f"{self.path}: {what}; give an nsys parquetdir/arrowdir export folder or a .sqlite")
        self.kind = found if found in SUFFIXES else _guess_kind(self.path)
        suffix = SUFFIXES[self.kind]
        try:
            entries = sorted(self.path.iterdir())
        except OSError as exc:
            raise InputError(f"{self.path}: cannot list the folder ({exc.strerror or exc}); make it readable") from None
        self._files: dict[str, Path] = {}
        for entry in entries:
            if entry.suffix != suffix or not entry.stem:
                continue
            try:
                regular = stat.S_ISREG(entry.stat().st_mode)
            except OSError:
                regular = False
            if regular:
                self._files[entry.stem] = entry
            else:
                damage_fix.note(self.damage, f"{entry.name}: not a regular file; ignored")
        self.table_names: frozenset[str] = frozenset(self._files)
        if "StringIds" not in self.table_names or not has_nsys_tables(self.table_names):
            what = (f"has nsys tables but no StringIds{suffix} (damaged or partial export)"
                    if has_nsys_tables(self.table_names)
                    else f"holds no nsys {self.kind} tables (no StringIds{suffix} and no CUPTI_*/NVTX_*/META_DATA_* files)")
            raise InputError(f"{self.path}: {what}; {_HINT}")
        self._schemas: dict[str, tuple[str, ...]] = {}
        self._counts: dict[str, int] = {}
        self._ahead = claims.claim(self.path)  # columns read before the folder was opened (check, one trace)

    # -- schema --------------------------------------------------------------------------
    def columns_of(self, table: str) -> tuple[str, ...]:
        """Column names of a source table (empty when absent); a file whose schema cannot be read is an InputError."""
        if table not in self._files:
            return ()
        if table not in self._schemas:
            with self._reading(table):
                self._schemas[table] = tuple(self._schema(table).names)
        return self._schemas[table]

    def count(self, table: str) -> int:
        """Row count of a source table (0 when absent), from the file's metadata."""
        if not self.columns_of(table):
            return 0
        if table not in self._counts:
            with self._reading(table):
                if self.kind == "parquet":
                    self._counts[table] = int(self._parquet(table).metadata.num_rows)
                else:
                    self._counts[table] = sum(batch.num_rows for batch in self._ipc(table))
        return self._counts[table]

    # -- metadata ------------------------------------------------------------------------
    def rows(self, table: str, columns: Sequence[str], limit: int = MAX_META_ROWS) -> list[tuple[Any, ...]]:
        """The first ``limit`` rows of a small source table in ``columns`` order, text cut to MAX_STRING."""
        present = self.columns_of(table)
        if not present:
            return []
        picked = [c for c in dict.fromkeys(columns) if c in present]
        with self._reading(table):
            data = self._table(table, picked)
            data = data.slice(0, limit)
            values = {c: [v[:MAX_STRING] if isinstance(v, str) else v for v in data.column(c).to_pylist()]
                      for c in picked}
        n = min(self.count(table), limit)
        return [tuple(values[c][i] if c in values else None for c in columns) for i in range(n)]

    def strings_size(self) -> tuple[int, int]:
        """(rows, bytes) of ``StringIds``: the text size from the Parquet metadata, or the Arrow file's size."""
        if "value" not in self.columns_of("StringIds"):
            return 0, 0
        rows = self.count("StringIds")
        with self._reading("StringIds"):
            if self.kind == "parquet":
                meta = self._parquet("StringIds").metadata
                at = self.columns_of("StringIds").index("value")
                text = sum(meta.row_group(g).column(at).total_uncompressed_size for g in range(meta.num_row_groups))
            else:
                text = self._files["StringIds"].stat().st_size
        return rows, int(text)

    def _load_strings(self) -> tuple[np.ndarray, np.ndarray]:
        import pyarrow as pa
        import pyarrow.compute as pc

        cols = self.columns_of("StringIds")
        if "id" not in cols or "value" not in cols:
            return np.empty(0, np.int64), np.empty(0, object)
        with self._reading("StringIds"):
            data = self._table("StringIds", ["id", "value"])
            ids = fill_columns(data.select(["id"]).to_batches(), ["id"], data.num_rows)["id"]
            value = data.column("value")
            if pa.types.is_string(value.type) or pa.types.is_large_string(value.type) or pa.types.is_binary(
                    value.type) or pa.types.is_large_binary(value.type):
                # Cut before Python sees it, so a planted multi-MB string costs nothing later (see sqlite.py);
                # bytes that are not UTF-8 (Parquet does not check) show as U+FFFD, as from SQLite.
                raw = pc.binary_slice(value.cast(pa.large_binary()), 0, 4 * MAX_STRING).to_pylist()
                texts = [None if v is None else v.decode("utf-8", "replace")[:MAX_STRING] for v in raw]
            else:
                texts = [None if v is None else str(v) for v in value.to_pylist()]
        ids = damage_fix.to_int(ids, NULL_INT)
        keep = ids >= 0
        values = np.array(["" if v is None else v for v in texts], dtype=object)
        return ids[keep], values[keep]

    # -- bulk reads ----------------------------------------------------------------------
    def _fetch(self, source: str, src_cols: list[str], narrow: set[str] | frozenset[str] = frozenset()
               ) -> dict[str, np.ndarray]:
        taking = self._take_early(source, src_cols, narrow)
        if not taking.covered:
            return self.fetch_direct(source, src_cols, narrow)
        seen = len(self.damage)
        # The columns no worker began, read here while the worker's reads finish.
        rest = self.fetch_direct(source, [c for c in src_cols if c not in taking.covered], narrow)
        early, notes = taking.wait()
        late = [c for c in src_cols if c not in early and c not in rest]  # an early read that failed
        rest.update(self.fetch_direct(source, late, narrow))
        for line in self.damage[seen:]:
            notes.setdefault(note_column(line, source), []).append(line)
        # The notes in column order, as one read of every column would have written them.
        del self.damage[seen:]
        for column in [*src_cols, ""]:
            self.damage.extend(notes.get(column, []))
        return {c: early[c] if c in early else rest[c] for c in src_cols}

    def fetch_direct(self, source: str, src_cols: list[str], narrow: set[str] | frozenset[str] = frozenset(),
                     stop: Any = None) -> dict[str, np.ndarray]:
        """``src_cols`` of ``source`` from its file (see ``ColumnarExport``); a damaged file is an InputError."""
        if not src_cols:
            return {}
        with self._reading(source):
            if self.kind == "parquet":
                # Decoded a batch at a time into the final arrays: the decoded table never exists whole.
                batches = self._parquet(source).iter_batches(batch_size=BATCH_ROWS, columns=src_cols,
                                                             use_threads=False)
            else:
                batches = iter(self._ipc(source))
            out = fill_columns((batch.select(src_cols) for batch in stoppable(batches, stop)), src_cols,
                               self.count(source), narrow, damage=self.damage, what=source)
        # Arrow's pool keeps the freed batches' pages: hand them back before the next table is read,
        # so they do not add to its peak.
        release_free_memory()
        return out

    # -- files ---------------------------------------------------------------------------
    def _reading(self, table: str) -> "_Reading":
        return _Reading(self, table)

    def _schema(self, table: str) -> Any:
        if self.kind == "parquet":
            return self._parquet(table).schema_arrow
        return self._ipc(table).schema

    def _parquet(self, table: str) -> Any:
        import pyarrow.parquet as pq

        # Column chunks streamed a buffer at a time instead of read whole: a big table's chunks would
        # otherwise sit beside the arrays being filled from them.
        path = self._files[table]
        source: Any = str(path) if _arrow_can_name(path) else open(path, "rb")
        return pq.ParquetFile(source, memory_map=False, pre_buffer=False, buffer_size=READ_BUFFER)

    def _ipc(self, table: str) -> Any:
        import pyarrow as pa

        path = self._files[table]
        source = pa.memory_map(str(path), "r") if _arrow_can_name(path) else _mapped_by_python(path)
        head = source.read(6)
        source.seek(0)
        # nsys writes the IPC stream format; the file format ("ARROW1" magic) is read too.
        return pa.ipc.open_file(source) if head == b"ARROW1" else pa.ipc.open_stream(source)

    def _table(self, table: str, columns: list[str]) -> Any:
        if self.kind == "parquet":
            return self._parquet(table).read(columns=columns, use_threads=False)
        reader = self._ipc(table)
        data = reader.read_all()
        return data.select(columns)

    def close(self) -> None:
        """Nothing stays open between reads; present for the :class:`~nsys_rules.loaders.export.Export` interface."""


class _Reading:
    """Turn any failure while reading one table file into a one-line :class:`InputError` (exit 3)."""

    def __init__(self, export: ArrowDirExport, table: str) -> None:
        self.export = export
        self.table = table

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if exc is None or isinstance(exc, (InputError, MemoryError, KeyboardInterrupt)):
            return False
        name = self.export._files[self.table].name if self.table in self.export._files else self.table
        raise InputError(f"{self.export.path}: cannot read {name} ({_one_line(exc)}); the folder is damaged: "
                         f"{_HINT}") from None


def _guess_kind(path: Path) -> str:
    try:
        names = [p.suffix for p in path.iterdir()]
    except OSError:
        return "parquet"
    return "arrow" if names.count(".arrow") > names.count(".parquet") else "parquet"


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:300]
