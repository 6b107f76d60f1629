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
#: Bytes read for one page header, and for a window of many when pages are small.
SMALL_READ = 4096
BIG_READ = 65536


class LayoutError(ValueError):
    """The file's bytes are not what their headers say (truncated or hostile)."""


#: Thrift compact types (``field header & 0x0F``) whose value is one byte or sits in the header.
_BOOL_TYPES = (1, 2)


@dataclass(frozen=True)
class ChunkPages:
    """What one column chunk's pages hold, from their headers."""

    values: int = 0  # values in the data pages (NULLs included): the rows a read meets
    decompressed: int = 0  # bytes of every page once decompressed
    largest: int = 0  # the largest single page, decompressed: one allocation of the read
    dictionary: int = 0  # bytes of the dictionary page, decompressed (0: none)
    coded: bool = False  # some data page holds dictionary codes
    encodings: frozenset[int] = frozenset()  # the value encodings of the data pages
    coded_values: int = 0  # values of the data pages that hold dictionary codes

    def plus(self, other: "ChunkPages") -> "ChunkPages":
        """Two chunks' pages as one column's (sums; the largest page and dictionary of either)."""
        return ChunkPages(self.values + other.values, self.decompressed + other.decompressed,
                          max(self.largest, other.largest), max(self.dictionary, other.dictionary),
                          self.coded or other.coded, self.encodings | other.encodings,
                          self.coded_values + other.coded_values)


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


def check_ranges(ranges: list[tuple[int, int]], data_end: int) -> None:
    """LayoutError unless every (start, length) byte range lies between the leading magic and ``data_end``
    (where the footer starts) and no two of them share a byte: then walking them all reads each byte of
    the file at most once, however many row groups point where."""
    spans = sorted((start, start + length) for start, length in ranges)
    for start, end in spans:
        if start < len(MAGIC) or end > data_end or end < start:
            raise LayoutError(f"column chunk at bytes {start}-{end} lies outside the data of the file "
                              f"(bytes {len(MAGIC)}-{data_end})")
    for (first, end), (start, _) in zip(spans, spans[1:], strict=False):
        if start < end:
            raise LayoutError(f"two column chunks share bytes (one at bytes {first}-{end}, the next starts at "
                              f"byte {start})")


def chunk_pages(fh: BinaryIO, start: int, length: int) -> ChunkPages:
    """Walk the page headers of the column chunk at ``start`` spanning ``length`` stored bytes.

    Each page must hold together (its required header fields present, its bytes inside the chunk):
    else LayoutError. Every page advances by its header and body, so the walk reads each byte of the
    chunk once, through a window that grows while pages are small (one read, many headers).
    """
    size = fh.seek(0, os.SEEK_END)
    end = start + max(length, 0)
    if start < 0 or end > size:
        raise LayoutError(f"column chunk at bytes {start}-{end} in a {size}-byte file")
    pos = start
    values = decompressed = largest = dictionary = coded_values = 0
    encodings: set[int] = set()
    window = b""
    window_at = 0
    want = SMALL_READ
    while pos < end:
        header, used, window, window_at = _page_header(fh, pos, end, window, window_at, want)
        kind = header.get(1)
        raw = header.get(2)
        stored = header.get(3)
        if type(kind) is not int or type(raw) is not int or type(stored) is not int or raw < 0 or stored < 0:
            raise LayoutError(f"page at byte {pos}: no page type and sizes (not a page header)")
        if pos + used + stored > end:
            raise LayoutError(f"page at byte {pos} runs past the end of its column chunk (byte {end})")
        if kind == DICTIONARY_PAGE:
            detail = header.get(7)
            if not isinstance(detail, dict) or type(detail.get(1)) is not int:
                raise LayoutError(f"dictionary page at byte {pos} has no dictionary page header")
            dictionary = max(dictionary, raw)
        elif kind in DATA_PAGES:
            detail = header.get(5 if kind == 0 else 8)
            count = detail.get(1) if isinstance(detail, dict) else None
            encoding = detail.get(2 if kind == 0 else 4) if isinstance(detail, dict) else None
            if type(count) is not int or type(encoding) is not int:
                raise LayoutError(f"data page at byte {pos} has no value count or encoding")
            count = max(count, 0)
            values += count
            encodings.add(encoding)
            if encoding in DICTIONARY_ENCODINGS:
                coded_values += count
        decompressed += raw
        largest = max(largest, raw)
        step = used + stored
        # Pages far smaller than a read: read ahead many at once (the next header is likely in the window).
        want = BIG_READ if step < SMALL_READ // 4 else SMALL_READ
        pos += step
    return ChunkPages(values, decompressed, largest, dictionary, bool(coded_values), frozenset(encodings),
                      coded_values)


def _page_header(fh: BinaryIO, pos: int, end: int, window: bytes, window_at: int,
                 want: int) -> tuple[dict[int, Any], int, bytes, int]:
    """The page header at ``pos`` (from ``window`` when it holds it), its size, and the window now held."""
    if window_at <= pos < window_at + len(window):
        try:
            header, used = read_struct(window, pos - window_at)
            return header, used - (pos - window_at), window, window_at
        except IndexError:
            pass  # cut off by the window's end: read from here
    while True:
        fh.seek(pos)
        data = fh.read(min(want, end - pos))
        try:
            header, used = read_struct(data, 0)
            return header, used, data, pos
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
    Every value takes at least one byte (booleans in a list or map too), and a list or map that counts
    more elements than bytes remain is cut off: the work is bounded by the bytes read.
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
        if kind == 5 or kind == 6 or kind == 4:  # the integers of a page header: inline, the walk's hot path
            byte = data[pos]
            if byte < 0x80:
                fields[field] = (byte >> 1) ^ -(byte & 1)
                pos += 1
                continue
        fields[field], pos = _value(data, pos, kind, depth)


def _value(data: bytes, pos: int, kind: int, depth: int) -> tuple[Any, int]:
    if kind in _BOOL_TYPES:  # a struct's booleans live in the field header
        return kind == 1, pos
    if kind == 3:
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
        if count > len(data) - pos:
            raise IndexError  # each element takes a byte at least: more than the bytes at hand
        if element in _BOOL_TYPES:  # booleans in a list are one byte each
            element = 3
        for _ in range(count):
            _, pos = _value(data, pos, element, depth + 1)
        return None, pos
    if kind == 11:
        count, pos = _varint(data, pos)
        if count:
            if 2 * count > len(data) - pos:
                raise IndexError
            types = data[pos]
            pos += 1
            key, value = types >> 4, types & 0x0F
            key = 3 if key in _BOOL_TYPES else key
            value = 3 if value in _BOOL_TYPES else value
            for _ in range(count):
                _, pos = _value(data, pos, key, depth + 1)
                _, pos = _value(data, pos, value, depth + 1)
        return None, pos
    if kind == 12:
        return read_struct(data, pos, depth + 1)
    raise LayoutError(f"unknown Thrift type {kind}")
