"""What reading columns of a Parquet file decodes, one price for every physical type and encoding.

The price comes from the footer's schema (physical type, fixed length, nesting) and the page
headers (:func:`~.parquet_layout.chunk_pages`: values, decompressed sizes, encodings), never from
decoding a value. Per leaf column of ``v`` values (NULLs and list slots included):

- fixed-width types (BOOLEAN, INT32/64/96, FLOAT, DOUBLE, FIXED_LEN_BYTE_ARRAY) decode to ``v`` values
  of a known width, whatever the encoding (PLAIN, dictionary, DELTA_BINARY_PACKED, BYTE_STREAM_SPLIT,
  RLE): the width is the larger of the stored one and the Arrow type's (a decimal stored as INT32 is
  16 bytes decoded). Exact, so an FLBA dictionary of one long value is priced at its expansion;
- BYTE_ARRAY values take at most their page bytes when stored plainly (PLAIN, DELTA_LENGTH_BYTE_ARRAY);
  a dictionary code at most the dictionary page; a DELTA_BYTE_ARRAY value (a prefix of the one before
  plus a suffix) at most its page. These bounds are loose for codes and prefixes, so such text
  columns may be scanned for their exact lengths (:func:`scan_text`), a batch small enough for the
  largest value at a time, stopping once the total passes what is left;
- nested leaves (lists, structs, maps) decode a whole top-level row at once: a batch of them is every
  value, not a batch of rows.

Every column that is neither integers nor text arrives as Python objects (floats, decimals,
timestamps: ``batches.fill_columns``), priced as text of its decoded bytes (one object per value).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterator

from nsys_rules.loaders.parquet_layout import ChunkPages, LayoutError, check_ranges, chunk_pages, footer_length
from nsys_rules.loaders.stored_bytes import TextUse
from nsys_rules.loaders.text_values import add_text, is_text_type, text_use

#: Bytes of one decoded value by physical type (a BOOLEAN bit counted as a byte: an upper bound).
PHYSICAL_WIDTH = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}
#: Encodings whose values point back at bytes stored once: dictionary codes and DELTA_BYTE_ARRAY prefixes.
DELTA_BYTE_ARRAY = 7
#: Bytes per value besides the value: its validity bit (as a byte) and an 8-byte offset (strings, lists).
VALUE_OVERHEAD = 9
#: Rows per batch of a read (``arrowdir.BATCH_ROWS``) and of a scan.
BATCH_ROWS = 65536
#: Most bytes one batch of an exact text scan may decode (its rows are cut to the largest value's bound).
SCAN_BATCH_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class LeafPrice:
    """What reading one leaf column decodes, from its headers (see the module docstring)."""

    name: str  # the top-level column it belongs to
    values: int  # values of its pages (NULLs and list slots included)
    decoded: int  # bytes of the whole column decoded as Arrow, every value expanded (an upper bound)
    batch: int  # bytes of one read batch as the loader decodes it (text dictionary codes left coded)
    dictionary: int  # bytes the dictionary takes while the read holds it
    largest_page: int  # the largest page decompressed (the reader's buffer)
    text: TextUse  # the values that become Python objects (text, or neither integers nor text)
    loose: bool  # the text bound rests on codes or prefixes: a scan may find it smaller
    largest_value: int  # the longest value any of its pages can hold
    uncoded_value: int = 0  # the longest value stored plainly or by prefix (what a read decodes in a batch)


def leaf_prices(export: Any, source: str, columns: list[str]) -> list[LeafPrice]:
    """The price of every leaf of ``columns`` (top-level names) of ``source``; LayoutError when the file's
    chunks do not hold together (see :func:`walk_leaves`)."""
    meta = export._metadata(source)
    schema = export._schema(source)
    wanted = [c for c in dict.fromkeys(columns) if c in schema.names]
    leaves = {name: [i for i in range(meta.num_columns) if _top(meta.schema.column(i).path) == name]
              for name in wanted}
    pages = walk_leaves(export, source, [i for found in leaves.values() for i in found])
    out = []
    for name, found in leaves.items():
        field_type = schema.field(name).type
        types = list(_leaf_types(field_type))
        for at, leaf in enumerate(found):
            column = meta.schema.column(leaf)
            leaf_type = types[at] if len(types) == len(found) else None
            out.append(_leaf(name, column, leaf_type, pages[leaf], nested=_nested(field_type)))
    return out


def walk_leaves(export: Any, source: str, leaves: list[int]) -> dict[int, ChunkPages]:
    """The pages of each leaf (column index) across the row groups, walked once per export and file.

    Before a byte is walked, every chunk range to walk (and every one walked before in this file) must
    lie inside the file's data and share no byte with another: else LayoutError. A walk then costs
    at most the bytes of the file, however its footer points.
    """
    known: dict[tuple[str, int], ChunkPages] = export.__dict__.setdefault("_leaf_walks", {})
    walked: dict[str, list[tuple[int, int]]] = export.__dict__.setdefault("_walked_ranges", {})
    todo = [leaf for leaf in dict.fromkeys(leaves) if (source, leaf) not in known]
    if todo:
        meta = export._metadata(source)
        path = export._files[source]
        size = os.path.getsize(path)
        data_end = size - 8 - footer_length(path)
        ranges: dict[int, list[tuple[int, int]]] = {}
        for leaf in todo:
            ranges[leaf] = [r for group in range(meta.num_row_groups)
                            if (r := _chunk_range(meta.row_group(group).column(leaf))) is not None]
        spans = [*walked.get(source, []), *(r for found in ranges.values() for r in found)]
        check_ranges(spans, data_end)
        walked[source] = spans
        with open(path, "rb") as fh:
            for leaf in todo:
                total = ChunkPages()
                for start, length in ranges[leaf]:
                    total = total.plus(chunk_pages(fh, start, length))
                known[(source, leaf)] = total
    return {leaf: known[(source, leaf)] for leaf in leaves}


def _chunk_range(chunk: Any) -> tuple[int, int] | None:
    """(start, stored bytes) of a column chunk: from its dictionary page when it has one, else its first data
    page (pyarrow writes a data page offset of 0 for a chunk of no rows); None when it stores nothing."""
    length = int(chunk.total_compressed_size)
    if length == 0:
        return None
    if length < 0:
        raise LayoutError(f"column chunk of {length} bytes")
    offsets = [int(chunk.data_page_offset)]
    if chunk.has_dictionary_page and chunk.dictionary_page_offset:
        offsets.append(int(chunk.dictionary_page_offset))
    real = [o for o in offsets if o > 0]
    return min(real) if real else 0, length


def _top(path: str) -> str:
    return path.split(".", 1)[0]


def _nested(arrow_type: Any) -> bool:
    import pyarrow as pa

    kind = arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type
    return bool(pa.types.is_nested(kind))


def _leaf_types(arrow_type: Any) -> Iterator[Any]:
    """The Arrow types of the Parquet leaves of a column, depth first (the order of the file's leaves)."""
    import pyarrow as pa

    if pa.types.is_struct(arrow_type):
        for i in range(arrow_type.num_fields):
            yield from _leaf_types(arrow_type.field(i).type)
    elif pa.types.is_map(arrow_type):
        yield from _leaf_types(arrow_type.key_type)
        yield from _leaf_types(arrow_type.item_type)
    elif pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or \
            pa.types.is_fixed_size_list(arrow_type) or getattr(pa.types, "is_list_view", lambda t: False)(arrow_type):
        yield from _leaf_types(arrow_type.value_type)
    else:
        yield arrow_type


def arrow_width(arrow_type: Any) -> int:
    """Bytes of one value of a fixed-width Arrow type (a dictionary's values; 0: variable width or unknown)."""
    import pyarrow as pa

    if arrow_type is None:
        return 0
    if pa.types.is_dictionary(arrow_type):
        return max(arrow_width(arrow_type.value_type), arrow_type.index_type.bit_width // 8)
    try:
        return max(int(arrow_type.bit_width) // 8, 1)
    except ValueError:
        return 0


def _leaf(name: str, column: Any, arrow_type: Any, pages: ChunkPages, nested: bool) -> LeafPrice:
    """The price of one leaf (``column``: its footer descriptor, ``arrow_type``: its Arrow type, None when the
    schemas disagree: then priced as objects) from its pages (see the module docstring)."""
    import pyarrow as pa

    v = pages.values
    levels = max(int(column.max_repetition_level), 0)
    extra = v * VALUE_OVERHEAD + v * 8 * levels  # validity, value offsets and one offset per list level
    in_batch = v if nested or levels else min(v, BATCH_ROWS)
    batch_extra = in_batch * (VALUE_OVERHEAD + 8 * levels)
    physical = column.physical_type
    text_type = arrow_type is not None and is_text_type(arrow_type)
    integers = arrow_type is not None and (pa.types.is_integer(arrow_type) or pa.types.is_null(arrow_type))
    if physical == "BYTE_ARRAY":
        plain = max(pages.decompressed - pages.dictionary, 0)
        coded = pages.coded_values * pages.dictionary
        prefixed = (v - pages.coded_values) * pages.largest if DELTA_BYTE_ARRAY in pages.encodings else 0
        data = plain + coded + prefixed
        largest_value = max(pages.largest, pages.dictionary)
        # Top-level text is read with its dictionary codes kept: a batch holds only the values stored plainly or
        # by prefix. Text inside lists or structs is read expanded.
        flat_text = text_type and not nested and not levels
        uncoded = plain + prefixed if flat_text else data
        batch = min(uncoded, in_batch * largest_value) + batch_extra
        width = arrow_width(arrow_type)  # a decimal stored as BYTE_ARRAY is fixed width once decoded
        if width:
            data = max(data, v * width)
            batch = max(batch, in_batch * width + batch_extra)
        loose = bool(coded or prefixed)
        uncoded_value = pages.largest if plain + prefixed else 0
        dictionary = 3 * pages.dictionary  # the entries, their offsets and validity
    else:
        width = max(PHYSICAL_WIDTH.get(physical, int(column.length or 0)), arrow_width(arrow_type), 1)
        data = v * width
        largest_value = width
        batch = in_batch * width + batch_extra
        loose = flat_text = False
        uncoded_value = width
        dictionary = pages.dictionary
    if integers and not nested and not levels:
        text = TextUse()  # priced per row by the caller, as numbers
    else:
        text = TextUse(v, data, data, largest_value)
    return LeafPrice(name, v, data + extra + dictionary, batch, dictionary, pages.largest, text,
                     loose and flat_text, largest_value, uncoded_value)


def scan_text(export: Any, source: str, leaf: LeafPrice, limit: int | None) -> TextUse | None:
    """The exact text of a loose leaf (a top-level text column): its values' lengths summed a batch at a time,
    each batch cut so that it decodes at most :data:`SCAN_BATCH_BYTES`; None when the total passes ``limit``
    (the bound stands: the read cannot fit whatever the exact number). Complete scans are kept per export."""
    done: dict[tuple[str, str], TextUse] = export.__dict__.setdefault("_text_scans", {})
    if (source, leaf.name) in done:
        return done[(source, leaf.name)]
    # Codes kept coded cost 4 bytes a row; a value stored plainly or by prefix may be as long as its page.
    budget = max(SCAN_BATCH_BYTES, (limit or 0) // 4)
    rows = max(1, min(BATCH_ROWS, budget // max(leaf.uncoded_value, 1)))
    total = TextUse()
    for batch in export._batches(source, [leaf.name], rows):
        total = add_text(total, text_use(batch.column(0)))
        if limit is not None and total.memory > limit:
            return None
    done[(source, leaf.name)] = total
    return total
