"""What reading a Parquet column will decode, from the file's own page headers, not only its footer.

The footer (``FileMetaData``) says how many rows a file holds and how big its column chunks are
once decompressed, but nothing checks it: a hostile file can claim 1,000 rows for 4 M, or small
chunks whose pages decompress to GBs. pyarrow reads the byte range the footer gives a column
chunk and trusts each page header inside it for the page's decompressed size and value count.
So the truth a read will meet is in those page headers, and :func:`chunk_pages` walks them (a
seek and a small read each, no page is decompressed): the values, the decompressed bytes, the
largest page, and whether the values are dictionary codes (whose decoded size is the codes times
the dictionary's entries, not the page size).

Page headers are Thrift compact-protocol structs; :func:`read_struct` reads one generically
(nesting and sizes bounded), keeping the integer fields and the sizes of binary ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, BinaryIO

#: Parquet files end with the footer's length (4 bytes) and this magic.
MAGIC = b"PAR1"
#: Deepest struct nesting a page header may have (real ones nest two levels).
MAX_DEPTH = 16
#: Largest page header read (pyarrow's own limit is 16 MB; statistics of long strings make headers big).
MAX_HEADER = 16 * 1024 * 1024
#: Page types (``PageType``) and value encodings that hold dictionary codes.
DICTIONARY_PAGE = 2
DATA_PAGES = (0, 3)
DICTIONARY_ENCODINGS = (2, 8)  # PLAIN_DICTIONARY, RLE_DICTIONARY


class LayoutError(ValueError):
    """The file's bytes are not what their headers say (truncated or hostile)."""


@dataclass(frozen=True)
class ChunkPages:
    """What one column chunk's pages hold, from their headers."""

    values: int = 0  # values in the data pages (NULLs included): the rows a read meets
    decompressed: int = 0  # bytes of every page once decompressed
    largest: int = 0  # the largest single page, decompressed: one allocation of the read
    dictionary: int = 0  # bytes of the dictionary page, decompressed (0: none)
    coded: bool = False  # some data page holds dictionary codes

    def plus(self, other: "ChunkPages") -> "ChunkPages":
        """Two chunks' pages as one column's (sums; the largest page and dictionary of either)."""
        return ChunkPages(self.values + other.values, self.decompressed + other.decompressed,
                          max(self.largest, other.largest), max(self.dictionary, other.dictionary),
                          self.coded or other.coded)


def footer_length(path: str | os.PathLike[str]) -> int:
    """Bytes of a Parquet file's footer metadata, from its last 8 bytes; LayoutError when it has none."""
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size < 12:
            raise LayoutError("too short for a Parquet file")
        fh.seek(size - 8)
        tail = fh.read(8)
    if len(tail) != 8 or tail[4:] != MAGIC:
        raise LayoutError("no Parquet magic at the end of the file")
    length = int.from_bytes(tail[:4], "little")
    if length > size - 12:
        raise LayoutError(f"footer of {length} bytes in a {size}-byte file")
    return length


def chunk_pages(fh: BinaryIO, start: int, length: int) -> ChunkPages:
    """Walk the page headers of the column chunk at ``start`` spanning ``length`` stored bytes."""
    size = fh.seek(0, os.SEEK_END)
    end = min(start + max(length, 0), size)
    pos = start
    out = ChunkPages()
    while 0 <= pos < end:
        header, used = _page_header(fh, pos, end)
        kind = header.get(1)
        raw = header.get(2, 0)
        stored = header.get(3, 0)
        if not isinstance(raw, int) or not isinstance(stored, int) or raw < 0 or stored < 0:
            raise LayoutError(f"page at byte {pos}: bad sizes")
        page = ChunkPages(decompressed=raw, largest=raw)
        if kind == DICTIONARY_PAGE:
            page = ChunkPages(decompressed=raw, largest=raw, dictionary=raw)
        elif kind in DATA_PAGES:
            detail = header.get(5 if kind == 0 else 8)
            detail = detail if isinstance(detail, dict) else {}
            values = detail.get(1, 0)
            encoding = detail.get(2 if kind == 0 else 4)
            page = ChunkPages(values if isinstance(values, int) and values > 0 else 0, raw, raw, 0,
                              encoding in DICTIONARY_ENCODINGS)
        out = out.plus(page)
        pos += used + stored
    return out


def _page_header(fh: BinaryIO, pos: int, end: int) -> tuple[dict[int, Any], int]:
    want = 4096
    while True:
        fh.seek(pos)
        data = fh.read(min(want, max(end - pos, 0)))
        try:
            header, used = read_struct(data, 0)
            return header, used
        except IndexError:
            if len(data) < want or want >= MAX_HEADER:
                raise LayoutError(f"page header at byte {pos} is cut off or larger than {MAX_HEADER} bytes") from None
            want *= 4


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 70:
            raise LayoutError("varint longer than 10 bytes")


def _zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def read_struct(data: bytes, pos: int, depth: int = 0) -> tuple[dict[int, Any], int]:
    """One compact-protocol struct at ``pos``: {field id: int, nested dict, or the length of a binary}, end.

    IndexError when ``data`` ends inside it (the caller reads more); LayoutError when it is not Thrift.
    """
    if depth > MAX_DEPTH:
        raise LayoutError("Thrift structs nested too deeply")
    fields: dict[int, Any] = {}
    last = 0
    while True:
        byte = data[pos]
        pos += 1
        if byte == 0:
            return fields, pos
        kind = byte & 0x0F
        delta = byte >> 4
        if delta:
            field = last + delta
        else:
            raw, pos = _varint(data, pos)
            field = _zigzag(raw)
        last = field
        fields[field], pos = _value(data, pos, kind, depth)


def _value(data: bytes, pos: int, kind: int, depth: int) -> tuple[Any, int]:
    if kind in (1, 2):  # booleans live in the field header
        return kind == 1, pos
    if kind == 3:
        data[pos]
        return data[pos], pos + 1
    if kind in (4, 5, 6):
        raw, pos = _varint(data, pos)
        return _zigzag(raw), pos
    if kind == 7:
        if pos + 8 > len(data):
            raise IndexError
        return None, pos + 8
    if kind == 8:
        length, pos = _varint(data, pos)
        if pos + length > len(data):
            raise IndexError
        return length, pos + length
    if kind in (9, 10):
        head = data[pos]
        pos += 1
        count, element = head >> 4, head & 0x0F
        if count == 15:
            count, pos = _varint(data, pos)
        for _ in range(count):
            _, pos = _value(data, pos, element if element != 1 else 3, depth + 1)
        return None, pos
    if kind == 11:
        count, pos = _varint(data, pos)
        if count:
            types = data[pos]
            pos += 1
            for _ in range(count):
                _, pos = _value(data, pos, types >> 4, depth + 1)
                _, pos = _value(data, pos, types & 0x0F, depth + 1)
        return None, pos
    if kind == 12:
        return read_struct(data, pos, depth + 1)
    raise LayoutError(f"unknown Thrift type {kind}")
