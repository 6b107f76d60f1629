"""Read-only access to ``nsys export --type=parquetdir`` and ``--type=arrowdir`` folders.

nsys writes one file per table (``CUPTI_ACTIVITY_KIND_KERNEL.parquet``, ``StringIds.arrow``, ...)
with the same table and column names as its SQLite export, so the canonical tables of
:mod:`nsys_rules.loaders.tables` map onto them unchanged. Parquet is columnar: only the
columns asked for are decoded, several times faster than the same columns from SQLite. Arrow
IPC files are read, not memory-mapped: a mapped file truncated while it is read kills the
process with SIGBUS, where a read only comes up short (exit 3).

Nothing in the folder is ever written; a file that is not a regular file (a FIFO would block
``open``) is never opened, nor one a symbolic link places outside the folder.

What a read will decode is judged from the files' own page and message headers before pyarrow
decodes them (:mod:`.decoded_price`), and every read tells ``meter`` (the memory guard, when one is
set) what it holds as it goes, so a file whose headers lie is stopped by the read (exit 3).
Dictionary-coded text stays coded until each entry is made a Python string once.
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
from nsys_rules.loaders.batches import fill_columns, note_column, object_bytes, stoppable
from nsys_rules.loaders.columnar import ColumnarExport
from nsys_rules.loaders.decoded_price import DecodedPrice, FOOTER_FACTOR, add_text, is_text_type, price, scan
from nsys_rules.loaders.export import MAX_META_ROWS, NULL_INT, has_nsys_tables
from nsys_rules.loaders.folders import SUFFIXES, folder_kind, guess_kind, py_values
from nsys_rules.loaders.guard import remove_folder
from nsys_rules.loaders.ipc_layout import IpcLayout, ipc_layout
from nsys_rules.loaders.parquet_layout import footer_length
from nsys_rules.loaders.stored_bytes import TextUse

def _arrow_can_name(path: Path) -> bool:
    """Whether Arrow can open ``path`` by name: it takes names as UTF-8, and a Linux path is bytes
    (a folder named with b"\\xff" is ``"\\udcff"`` in Python); such a file is opened by Python instead."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: Rows decoded per Parquet batch: large enough that per-batch overhead stays small, small enough
#: that one batch of a dozen columns is a few MB.
BATCH_ROWS = 65536

#: Bytes read from a Parquet file at a time (see ``_parquet``).
READ_BUFFER = 1 << 20
#: Rows per batch of a metadata read (``rows``): a few, so a planted long value costs one batch.
META_BATCH_ROWS = 1024
#: Text bound (bytes) of ``StringIds`` from which its exact decoded size is worth a scan.
STRINGS_SCAN_FROM = 64 * 1024 * 1024

_HINT = "export the report again with `nsys export --type=parquetdir REPORT.nsys-rep`"


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
        self.kind = found if found in SUFFIXES else guess_kind(self.path)
        suffix = SUFFIXES[self.kind]
        try:
            entries = sorted(self.path.iterdir())
        except OSError as exc:
            raise InputError(f"{self.path}: cannot list the folder ({exc.strerror or exc}); make it readable") from None
        self._files: dict[str, Path] = {}
        inside = self.path.resolve()
        for entry in entries:
            if entry.suffix != suffix or not entry.stem:
                continue
            if entry.is_symlink() and not _stays_inside(entry, inside):
                raise InputError(f"{self.path}: {entry.name} is a symbolic link to a file outside the folder; "
                                 "refused (an export folder holds its own files: copy the file in)")
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
        self._footers: dict[str, Any] = {}
        self._layouts: dict[str, IpcLayout] = {}
        self._scans: dict[tuple[str, str], TextUse] = {}
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
                    self._counts[table] = max(int(self._metadata(table).num_rows), 0)
                else:
                    self._counts[table] = self._layout(table).rows  # from the message headers: nothing decoded
        return self._counts[table]

    def decoded_price(self, source: str, columns: list[str], room: int | None) -> DecodedPrice:
        """What reading ``columns`` of ``source`` decodes (:mod:`.decoded_price`); InputError when unreadable."""
        with self._reading(source):
            return price(self, source, [c for c in columns if c in self.columns_of(source)], room)

    def _scan_text(self, source: str, columns: list[str]) -> TextUse:
        """The exact decoded text of ``columns`` (a read of their lengths, codes left coded), once per column."""
        total = TextUse()
        for column in columns:
            if (source, column) not in self._scans:
                self._scans[(source, column)] = scan(self, source, [column])
            total = add_text(total, self._scans[(source, column)])
        return total

    # -- metadata ------------------------------------------------------------------------
    def rows(self, table: str, columns: Sequence[str], limit: int = MAX_META_ROWS) -> list[tuple[Any, ...]]:
        """The first ``limit`` rows of a small source table in ``columns`` order, text cut to MAX_STRING."""
        present = self.columns_of(table)
        if not present:
            return []
        picked = [c for c in dict.fromkeys(columns) if c in present]
        values: dict[str, list[Any]] = {c: [] for c in picked}
        n = 0
        with self._reading(table):
            held = 0
            # A few rows a batch, text cut before Python sees it: a metadata table is read before any guard
            # has priced the trace, so a planted long or repeated value must cost no more than one batch.
            for batch in self._batches(table, picked, META_BATCH_ROWS):
                batch = batch.slice(0, limit - n)
                for c in picked:
                    column = batch.column(batch.schema.get_field_index(c))
                    values[c].extend(py_values(column))
                    held += object_bytes(column)
                n += batch.num_rows
                self._spend(f"{table} (metadata)", held)
                if n >= limit:
                    break
        return [tuple(values[c][i] if c in values else None for c in columns) for i in range(n)]

    def strings_size(self) -> tuple[int, int]:
        """(rows, bytes) of ``StringIds``: the text size from the Parquet metadata, or the Arrow file's size."""
        if "value" not in self.columns_of("StringIds"):
            return 0, 0
        cost = self.decoded_price("StringIds", ["id", "value"], STRINGS_SCAN_FROM)
        return max(cost.rows, self.count("StringIds")), cost.text.memory + cost.transient

    def _load_strings(self) -> tuple[np.ndarray, np.ndarray]:
        cols = self.columns_of("StringIds")
        if "id" not in cols or "value" not in cols:
            return np.empty(0, np.int64), np.empty(0, object)
        id_parts: list[np.ndarray] = []
        texts: list[str | None] = []
        with self._reading("StringIds"):
            held = 0
            for batch in self._batches("StringIds", ["id", "value"], BATCH_ROWS):
                id_parts.append(fill_columns([batch.select(["id"])], ["id"], batch.num_rows)["id"])
                # Cut before Python sees it, so a planted multi-MB string costs nothing later (see sqlite.py);
                # bytes that are not UTF-8 (Parquet does not check) show as U+FFFD, as from SQLite.
                value = batch.column(batch.schema.get_field_index("value"))
                texts.extend(None if v is None else str(v) for v in py_values(value, as_text=True))
                held += object_bytes(value) + 8 * batch.num_rows
                self._spend("StringIds", held)
        ids = np.concatenate(id_parts) if id_parts else np.empty(0, np.int64)
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
            # Decoded a batch at a time into the final arrays: the decoded table never exists whole.
            batches = self._batches(source, src_cols, BATCH_ROWS)
            out = fill_columns((batch.select(src_cols) for batch in stoppable(batches, stop)), src_cols,
                               self.count(source), narrow, damage=self.damage, what=source,
                               spend=lambda held: self._spend(source, held))
        # Arrow's pool keeps the freed batches' pages: hand them back before the next table is read,
        # so they do not add to its peak.
        release_free_memory()
        return out

    # -- files ---------------------------------------------------------------------------
    def _reading(self, table: str) -> "_Reading":
        return _Reading(self, table)

    def _spend(self, what: str, held: int) -> None:
        """Tell the meter a read of ``what`` holds ``held`` bytes; it raises InputError past the limit."""
        if self.meter is not None:
            self.meter.check_read(f"{self.path.name}/{what}", held)

    def _schema(self, table: str) -> Any:
        if self.kind == "parquet":
            return self._metadata(table).schema.to_arrow_schema()
        return self._ipc(table).schema

    def _footer_bytes(self, table: str) -> int:
        return footer_length(self._files[table])

    def _metadata(self, table: str) -> Any:
        """The file's parsed footer, once: its size is judged before pyarrow parses it (a planted 200 MB
        footer takes over 1 GB parsed)."""
        if table not in self._footers:
            import pyarrow.parquet as pq

            self._spend(f"{self._files[table].name} (footer)", self._footer_bytes(table) * FOOTER_FACTOR)
            path = self._files[table]
            if _arrow_can_name(path):
                self._footers[table] = pq.read_metadata(str(path), memory_map=False)
            else:  # parsed whole here, so the file can close at once
                with open(path, "rb") as file:
                    self._footers[table] = pq.read_metadata(file, memory_map=False)
        return self._footers[table]

    def _layout(self, table: str) -> IpcLayout:
        """The IPC file's message headers (:mod:`.ipc_layout`), once; the largest one is judged before pyarrow
        parses the schema (what one batch decodes is judged by ``_batches``, before a read)."""
        if table not in self._layouts:
            layout = ipc_layout(self._files[table])
            self._spend(f"{self._files[table].name} (schema)", layout.metadata * FOOTER_FACTOR)
            self._layouts[table] = layout
        return self._layouts[table]

    def _parquet(self, table: str) -> Any:
        import pyarrow.parquet as pq

        meta = self._metadata(table)
        schema = meta.schema.to_arrow_schema()
        # Text stays dictionary-coded as stored: a code repeated 3,000 times is not 3,000 copies of its string.
        coded = [f.name for f in schema if is_text_type(f.type)]
        # Column chunks streamed a buffer at a time instead of read whole: a big table's chunks would
        # otherwise sit beside the arrays being filled from them.
        path = self._files[table]
        source: Any = str(path) if _arrow_can_name(path) else open(path, "rb")
        return pq.ParquetFile(source, metadata=meta, memory_map=False, pre_buffer=False,
                              buffer_size=READ_BUFFER, read_dictionary=coded)

    def _ipc(self, table: str, fields: list[int] | None = None) -> Any:
        import pyarrow as pa

        layout = self._layout(table)
        # Read, not memory-mapped (see the module docstring); nsys writes the IPC stream format, and the
        # file format ("ARROW1" magic) holds the same stream after its 8 bytes.
        path = self._files[table]
        source = pa.OSFile(str(path), "r") if _arrow_can_name(path) else pa.PythonFile(open(path, "rb"), mode="r")
        source.seek(layout.stream_start)
        # Only the wanted columns' buffers are decompressed and kept (the body is still read whole).
        options = pa.ipc.IpcReadOptions(included_fields=fields) if fields is not None else None
        return pa.ipc.open_stream(source, options=options)

    def _batches(self, table: str, columns: list[str], rows: int) -> Any:
        """Record batches of ``columns`` of ``table``, about ``rows`` rows each for Parquet (IPC: as stored)."""
        if self.kind == "parquet":
            yield from self._parquet(table).iter_batches(batch_size=rows, columns=columns, use_threads=False)
            return
        layout = self._layout(table)
        self._spend(f"{self._files[table].name} (largest batch)", layout.largest_batch + layout.dictionaries)
        names = self._schema(table).names
        fields = sorted({names.index(c) for c in columns if c in names})
        for batch in self._ipc(table, fields):
            yield batch.select(columns)

    def close(self) -> None:
        """Nothing stays open between reads; the folder of an export made for this run is removed."""
        remove_folder(self.owned_folder)


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


def _stays_inside(link: Path, folder: Path) -> bool:
    try:
        target = link.resolve(strict=True)
    except (OSError, RuntimeError):
        return True  # a dangling or looping link: not regular, noted as damage below
    return target == folder or folder in target.parents


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:300]
