"""How much text (and blob) data a read would pull into memory, from the bytes the file stores.

Counting rows prices every value as a number, but a hostile export can store hundreds of MB
of NVTX text, or of TEXT in an integer column, in a handful of rows; read into Python those
become strings several times their stored size. Scanning every value for its type and length
is exact but costs a full read of the table, so the answer is built in steps, each cheap, the
exact one only when needed:

1. :func:`table_storage` asks SQLite's ``dbstat`` table (one aggregate query per table) for
   the bytes a table's rows hold on disk and its largest row: no value is decoded. The
   stored bytes bound the text memory from above (:func:`worst_text_bytes`); when even that
   bound fits the memory limit, the read is safe whatever the types.
2. Otherwise the table is suspected of holding text when its rows hold more bytes than
   integers could (in total or in its largest row), or when values sampled at up to
   :data:`SAMPLE_ROWS` spread rowids are text or blobs.
3. Only a suspected table is scanned (:func:`measure_text`): per needed column, the number
   of text/blob values, their bytes, characters and the largest.

Without ``dbstat`` (SQLite built without it) step 1 is skipped and the sample decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from nsys_rules.loaders.tables import TABLES

#: Rows sampled (by rowid, evenly spread) to look for text in a table: 10-80 ms on 2M rows.
SAMPLE_ROWS = 2048
#: Bytes one SQLite integer value can take (8 bytes plus its header byte).
INT_VALUE_BYTES = 9
#: Row header and rowid bytes allowed on top of the values.
ROW_OVERHEAD = 16
#: Python memory of one text value, beyond the 8-byte array slot the column estimate already
#: counts: the str object header (49-80 B) and its share of the categorical hash table.
TEXT_VALUE_OVERHEAD = 96
#: Python bytes per stored byte, worst case: a 2-byte stored string is a 51-byte str object.
WORST_BLOWUP = 20


@dataclass(frozen=True)
class TableStorage:
    """What ``dbstat`` says of one source table (None fields: unknown)."""

    payload: int | None  # bytes the rows hold (values and record headers), overflow pages included
    largest_row: int | None  # bytes of the largest row


@dataclass(frozen=True)
class TextUse:
    """Text and blob values of the needed columns of one table."""

    values: int = 0
    bytes: int = 0
    chars: int = 0
    largest: int = 0

    @property
    def memory(self) -> int:
        """Memory these values take while read: one Python str per value (4 bytes a character
        unless every value is ASCII: a single wide character widens a whole string), plus the
        Arrow batch they arrive in (up to ``BATCH_ROWS`` values) while it is converted."""
        from nsys_rules.loaders.sqlite import BATCH_ROWS

        width = 1 if self.chars == self.bytes else 4
        batch = min(self.bytes, BATCH_ROWS * self.largest)
        return self.values * TEXT_VALUE_OVERHEAD + width * self.chars + batch


def source_columns(export: Any, table: str, columns: Iterable[str]) -> tuple[str | None, list[str]]:
    """The source table behind canonical ``table`` and the source columns a read of ``columns`` touches."""
    canonical = TABLES[table]
    source = export.source_of(canonical)
    if source is None:
        return None, []
    present = export.columns_of(source)
    picked: list[str] = []
    for name in dict.fromkeys(columns):
        col = canonical.column(name)
        # As the loader reads: the first source column present; an NVTX name reads every one present.
        found = [src for src in col.sources if src in present]
        for src in found if col.kind == "nvtx_name" else found[:1]:
            if src not in picked:
                picked.append(src)
    return source, picked


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def table_storage(export: Any, source: str) -> TableStorage:
    """Stored bytes and largest row of ``source`` from ``dbstat``; unknown when SQLite lacks it."""
    try:
        rows = export._query("SELECT sum(payload), max(mx_payload) FROM dbstat WHERE name = ? AND aggregate = TRUE",
                            (source,))
    except Exception:  # noqa: BLE001 - no dbstat in this SQLite build, or a damaged b-tree: fall back to sampling
        return TableStorage(None, None)
    payload, largest = rows[0] if rows else (None, None)
    return TableStorage(None if payload is None else int(payload), None if largest is None else int(largest))


def worst_text_bytes(storage: TableStorage, rows: int, columns: int) -> int | None:
    """The most memory text values of ``columns`` could take, whatever they are; None when unknown."""
    if storage.payload is None:
        return None
    return min(storage.payload * WORST_BLOWUP, rows * columns * TEXT_VALUE_OVERHEAD + 4 * storage.payload)


def holds_more_than_numbers(storage: TableStorage, rows: int, all_columns: int) -> bool:
    """True when the rows store more bytes than integers could: text or blobs are certainly there."""
    row_limit = all_columns * INT_VALUE_BYTES + ROW_OVERHEAD
    if storage.largest_row is not None and storage.largest_row > row_limit:
        return True
    return storage.payload is not None and storage.payload > rows * row_limit


def _typed(column: str) -> str:
    return f"typeof({_quote(column)}) IN ('text', 'blob')"


def sample_has_text(export: Any, source: str, columns: list[str], rows: int) -> bool:
    """True when values at up to :data:`SAMPLE_ROWS` evenly spread rowids of ``columns`` are text or blobs."""
    if not columns or rows <= 0:
        return False
    # Two queries: each is one b-tree descent, where "min(rowid), max(rowid)" together scans the table.
    low = export._query(f"SELECT min(rowid) FROM {_quote(source)}")[0][0]
    high = export._query(f"SELECT max(rowid) FROM {_quote(source)}")[0][0]
    if low is None:
        return False
    step = max(1, (int(high) - int(low)) // SAMPLE_ROWS)
    rowids = list(range(int(low), int(high) + 1, step))[:SAMPLE_ROWS + 1]
    test = " OR ".join(_typed(c) for c in columns)
    marks = ",".join("?" * len(rowids))
    found = export._query(f"SELECT 1 FROM {_quote(source)} WHERE rowid IN ({marks}) AND ({test}) LIMIT 1", rowids)
    return bool(found)


def measure_text(export: Any, source: str, columns: list[str]) -> TextUse:
    """Exact text/blob use of ``columns`` in ``source``: one scan of the table, four sums over per-row totals."""
    if not columns:
        return TextUse()
    typed = [f"({_typed(c)})" for c in columns]
    sizes = [f"(CASE WHEN {_typed(c)} THEN length(CAST({_quote(c)} AS BLOB)) ELSE 0 END)" for c in columns]
    chars = [f"(CASE WHEN {_typed(c)} THEN length({_quote(c)}) ELSE 0 END)" for c in columns]
    largest = sizes[0] if len(sizes) == 1 else f"max({', '.join(sizes)})"  # scalar max of the row's values
    row = export._query(f"SELECT sum({' + '.join(typed)}), sum({' + '.join(sizes)}), sum({' + '.join(chars)}), "
                       f"max({largest}) FROM {_quote(source)}")[0]
    return TextUse(*(int(v or 0) for v in row))
