"""Parquet files whose footer or page headers are forged to make a header walk cost more than the file.

A Parquet footer (Thrift compact protocol) gives each column chunk a byte range; the page headers in
that range are what a reader walks. These builders take a real file written by pyarrow and rewrite
the integer fields of its footer (varints are self-delimiting, so a new value may take more or fewer
bytes than the old one): every chunk pointed at one zero region, ranges past the end of the file,
ranges shared by two chunks. Nothing here decodes a page.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.fuzz.columnar_bombs import thrift_spots

MB = 1 << 20
#: Footer paths (field ids from FileMetaData down) of the integers a chunk's byte range is made of.
DATA_PAGE_OFFSET = (4, 1, 3, 9)
DICTIONARY_PAGE_OFFSET = (4, 1, 3, 11)
CHUNK_COMPRESSED = (4, 1, 3, 7)
CHUNK_FILE_OFFSET = (4, 1, 2)
GROUP_FILE_OFFSET = (4, 5)
GROUP_COMPRESSED = (4, 6)


def varint(value: int) -> bytes:
    """A Thrift compact-protocol unsigned varint."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def split(path: Path) -> tuple[bytes, bytes]:
    """(the bytes before the footer, the footer's Thrift bytes) of a Parquet file."""
    raw = path.read_bytes()
    length = struct.unpack("<I", raw[-8:-4])[0]
    return raw[:len(raw) - 8 - length], raw[len(raw) - 8 - length:len(raw) - 8]


def rewrite(footer: bytes, values: dict[tuple[int, ...], list[int] | int]) -> bytes:
    """``footer`` with the integer fields at ``values``' paths replaced (one value for every spot of a path,
    or one per spot in file order); each new varint takes the bytes it needs."""
    spots = thrift_spots(footer, 0)
    edits: list[tuple[int, int, int]] = []
    for where, value in values.items():
        for i, (lo, hi) in enumerate(spots.get(where, [])):
            edits.append((lo, hi, value[i % len(value)] if isinstance(value, list) else value))
    out = bytearray()
    at = 0
    for lo, hi, value in sorted(edits):
        out += footer[at:lo] + varint(_zigzag(value))
        at = hi
    return bytes(out + footer[at:])


def assemble(body: bytes, footer: bytes) -> bytes:
    """A Parquet file of ``body`` (magic first) and ``footer``."""
    return body + footer + struct.pack("<I", len(footer)) + b"PAR1"


def kernel_groups(path: Path, groups: int = 200) -> Path:
    """A kernel table of ``groups`` one-row row groups (the chunks the forgeries re-point)."""
    starts = np.arange(groups, dtype=np.int64) * 1000
    data = pa.table({"start": starts, "end": starts + 500, "deviceId": pa.array(np.zeros(groups, np.uint32)),
                     "streamId": pa.array(np.full(groups, 7, np.uint64)),
                     "correlationId": pa.array(np.arange(groups, dtype=np.uint32)),
                     "globalPid": pa.array(np.full(groups, 1 << 24, np.uint64)),
                     "shortName": pa.array(np.zeros(groups, np.uint64)),
                     "demangledName": pa.array(np.zeros(groups, np.uint64))})
    pq.write_table(data, path, row_group_size=1, compression="none")
    return path


def shared_zero_region(path: Path, groups: int = 200, region: int = MB) -> Path:
    """The issue's 1.9 MB case: ``groups`` row groups whose every chunk points at one ``region``-byte run of
    zero bytes (a zero byte is a complete, empty Thrift struct: a walk that trusts it advances one byte)."""
    kernel_groups(path, groups)
    _, footer = split(path)
    forged = rewrite(footer, {DATA_PAGE_OFFSET: 4, DICTIONARY_PAGE_OFFSET: 4, CHUNK_FILE_OFFSET: 4,
                              CHUNK_COMPRESSED: region, GROUP_FILE_OFFSET: 4, GROUP_COMPRESSED: region})
    path.write_bytes(assemble(b"PAR1" + bytes(region), forged))
    return path


def chunk_past_the_end(path: Path) -> Path:
    """Every chunk's range runs 1 GB past the end of the file."""
    kernel_groups(path, 20)
    _, footer = split(path)
    path.write_bytes(assemble(*_with_body(path, rewrite(footer, {CHUNK_COMPRESSED: 1 << 30}))))
    return path


def chunk_before_the_start(path: Path) -> Path:
    """Every chunk starts inside the magic bytes (offset 0)."""
    kernel_groups(path, 20)
    _, footer = split(path)
    path.write_bytes(assemble(*_with_body(path, rewrite(footer, {DATA_PAGE_OFFSET: 0, DICTIONARY_PAGE_OFFSET: 0}))))
    return path


def chunks_overlap(path: Path) -> Path:
    """Two row groups' chunks point at the same bytes (the first group's), every other byte unchanged."""
    kernel_groups(path, 2)
    body, footer = split(path)
    spots = thrift_spots(footer, 0)
    offsets = [_read_zigzag(footer, lo) for lo, _ in spots[DATA_PAGE_OFFSET]]
    half = len(offsets) // 2
    path.write_bytes(assemble(body, rewrite(footer, {DATA_PAGE_OFFSET: offsets[:half] * 2,
                                                     DICTIONARY_PAGE_OFFSET: _dictionaries(footer, half)})))
    return path


def _dictionaries(footer: bytes, half: int) -> list[int]:
    spots = thrift_spots(footer, 0)
    found = [_read_zigzag(footer, lo) for lo, _ in spots.get(DICTIONARY_PAGE_OFFSET, [])]
    return found[:half] * 2 if found else [0]


def _with_body(path: Path, footer: bytes) -> tuple[bytes, bytes]:
    body, _ = split(path)
    return body, footer


def _read_zigzag(data: bytes, pos: int) -> int:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1)
        shift += 7


def tiny_pages(path: Path, size: int = 2 * MB) -> Path:
    """The ``start`` column's chunk re-pointed at ``size`` bytes of the smallest page headers that hold together
    (index pages: type and sizes, no body): the most headers a byte range can hold, each a step of the walk.
    The other chunks keep their bytes."""
    kernel_groups(path, 1)
    body, footer = split(path)
    page = bytes([0x15]) + varint(_zigzag(1)) + bytes([0x15, 0x00, 0x15, 0x00, 0x00])  # INDEX_PAGE, 0, 0
    region = page * (size // len(page))
    spots = thrift_spots(footer, 0)
    offsets = [_read_zigzag(footer, lo) for lo, _ in spots[DATA_PAGE_OFFSET]]
    dictionaries = [_read_zigzag(footer, lo) for lo, _ in spots[DICTIONARY_PAGE_OFFSET]]
    sizes = [_read_zigzag(footer, lo) for lo, _ in spots[CHUNK_COMPRESSED]]
    forged = rewrite(footer, {DATA_PAGE_OFFSET: [len(body), *offsets[1:]],
                              DICTIONARY_PAGE_OFFSET: [len(body), *dictionaries[1:]],
                              CHUNK_COMPRESSED: [len(region), *sizes[1:]]})
    path.write_bytes(assemble(body + region, forged))
    return path


def fixed_width_dictionary(path: Path, width: int = MB, rows: int = 4096, group: int = 64) -> Path:
    """The issue's StringIds: ``value`` a FIXED_LEN_BYTE_ARRAY of ``width`` bytes, one dictionary entry for
    every row (about 16 KB stored, ``rows * width`` decoded: the dictionary option of a read does not
    apply to this type, so any read expands it). Written ``group`` rows at a time, so that building it never
    holds more than ``group * width`` bytes."""
    entry = pa.array([b"s" * width], pa.binary(width))
    schema = pa.schema([("id", pa.int32()), ("value", pa.binary(width))])
    with pq.ParquetWriter(path, schema, compression="zstd", use_dictionary=True,
                          dictionary_pagesize_limit=4 * width) as writer:
        for lo in range(0, rows, group):
            n = min(group, rows - lo)
            writer.write_table(pa.table({"id": pa.array(np.arange(lo, lo + n, dtype=np.int32)),
                                         "value": entry.take(pa.array(np.zeros(n, np.int32)))}, schema=schema))
    return path
