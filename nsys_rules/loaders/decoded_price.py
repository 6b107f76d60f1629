"""What reading columns of a Parquet or Arrow IPC table takes once decoded, for the memory guard.

A columnar file can be tiny and decode to GBs: dictionary codes that repeat one long string,
run-length encoded repeats, compressed pages or buffers, a footer that says fewer rows than the
pages hold. The price here is what the read will meet, from the file's own page and message
headers (:mod:`.parquet_layout`, :mod:`.ipc_layout`), not from its footer's claims:

- ``rows``: the rows the pages hold (the most of any needed column);
- ``transient``: what the read holds besides its results: the parsed footer, the largest page or
  record batch decoded at once, the dictionaries;
- ``text``: the text values of the columns as decoded (every dictionary code expanded), as
  :class:`~.stored_bytes.TextUse`, the unit the SQLite pricing uses: one price for every format.

Text is first priced from the headers alone (an upper bound: plain pages hold at most their
bytes, dictionary codes at most the dictionary's size each); only when that bound does not fit
``room`` are the text columns scanned for their exact lengths, a batch at a time with dictionary
codes left coded, so that the scan itself holds no more than the pages the headers allowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nsys_rules.loaders.ipc_layout import ipc_layout
from nsys_rules.loaders.parquet_price import arrow_width, leaf_prices, scan_text
from nsys_rules.loaders.stored_bytes import TextUse
from nsys_rules.loaders.text_values import add_text, is_text_type, is_view, text_use

__all__ = ["DecodedPrice", "FOOTER_FACTOR", "add_text", "is_text_type", "price", "scan", "text_use"]

#: Bytes a parsed Parquet footer (or IPC schema) takes per stored byte, rounded up from the measured
#: 6.7x (a 112 MB footer of key-value metadata: 877 MB peak, about 120 MB of it the interpreter).
FOOTER_FACTOR = 8
#: Rows per batch of an exact text scan: the codes of one batch are 4 bytes a row.
SCAN_ROWS = 65536


@dataclass(frozen=True)
class DecodedPrice:
    """What a read of some columns of one table meets (see the module docstring)."""

    rows: int
    transient: int
    text: TextUse
    decoded: int = 0  # bytes of the columns decoded as Arrow, every value expanded (an upper bound)


def price(export: Any, source: str, columns: list[str], room: int | None) -> DecodedPrice:
    """The price of reading ``columns`` of ``source`` from a folder export (``export.kind``: parquet or arrow).

    ``room``: the bytes the text may take before an exact scan is worth its time (None: never scan).
    """
    if export.kind == "parquet":
        return _parquet(export, source, columns, room)
    return _ipc(export, source, columns, room)


def _parquet(export: Any, source: str, columns: list[str], room: int | None) -> DecodedPrice:
    leaves = leaf_prices(export, source, columns)
    rows = max((leaf.values for leaf in leaves), default=0)
    # The reader holds the parsed footer, one page decompressed, the dictionaries and one batch of every column.
    transient = (export._footer_bytes(source) * FOOTER_FACTOR + max((leaf.largest_page for leaf in leaves), default=0)
                 + sum(leaf.dictionary + leaf.batch for leaf in leaves))
    bound = TextUse()
    for leaf in leaves:
        bound = add_text(bound, leaf.text)
    # A scan only where the bound rests on codes or prefixes, it does not fit, and the scan's own reads do.
    scanning = room is not None and bound.memory > room and transient <= room and rows * 8 <= room
    text = TextUse()
    for leaf in leaves:
        found = scan_text(export, source, leaf, room) if scanning and leaf.loose else None
        text = add_text(text, leaf.text if found is None else found)
    return DecodedPrice(rows, transient, text, sum(leaf.decoded for leaf in leaves))


def _ipc(export: Any, source: str, columns: list[str], room: int | None) -> DecodedPrice:
    layout = ipc_layout(export._files[source])
    transient = layout.largest_batch + layout.dictionaries + layout.metadata * FOOTER_FACTOR
    schema = export._schema(source)
    present = [c for c in columns if c in schema.names]
    text_cols = [c for c in present if is_text_type(schema.field(c).type)]
    # Neither integers nor text (floats, decimals, timestamps) become one Python object per value.
    objects = _object_use([schema.field(c).type for c in present if c not in text_cols], layout.rows, layout.decoded)
    if not text_cols:
        return DecodedPrice(layout.rows, transient, objects, layout.decoded)
    coded = any(not _plain_text(schema.field(c).type) for c in text_cols)
    # Plain strings are slices of the decoded buffers; views and dictionaries may repeat them without limit.
    bound = TextUse(layout.rows * len(text_cols), layout.decoded, layout.decoded, layout.largest_batch)
    if (room is None or transient <= room) and (coded or (room is not None and bound.memory > room)):
        text = export._scan_text(source, text_cols)
    elif coded:  # too big to scan: each code may be the largest batch's bytes
        most = layout.rows * len(text_cols) * layout.decoded
        text = TextUse(layout.rows * len(text_cols), most, most, layout.decoded)
    else:
        text = bound
    return DecodedPrice(layout.rows, transient, add_text(text, objects), layout.decoded)


def _object_use(types: list[Any], rows: int, decoded: int) -> TextUse:
    """The Python objects columns of ``types`` become (none for integers and NULLs), ``rows`` values each."""
    import pyarrow as pa

    total = TextUse()
    for arrow_type in types:
        if pa.types.is_integer(arrow_type) or pa.types.is_null(arrow_type):
            continue
        width = arrow_width(arrow_type)
        size = rows * width if width else decoded
        total = add_text(total, TextUse(rows, size, size, width or decoded))
    return total


def _plain_text(arrow_type: Any) -> bool:
    import pyarrow as pa

    return not pa.types.is_dictionary(arrow_type) and not is_view(arrow_type)


def scan(export: Any, source: str, columns: list[str]) -> TextUse:
    """Exact decoded text of ``columns``: their values' lengths summed a batch at a time, codes left coded."""
    total = TextUse()
    for batch in export._batches(source, columns, SCAN_ROWS):
        for name in columns:
            total = add_text(total, text_use(batch.column(batch.schema.get_field_index(name))))
    return total
