"""What reading an Arrow IPC file will decode, from its message headers, before pyarrow decodes a byte.

An IPC stream is a sequence of messages, each a flatbuffer header and a body of buffers. pyarrow
decodes a record batch whole, decompressing every buffer (LZ4/ZSTD bodies can grow thousands of
times) before any of it can be looked at. :func:`ipc_layout` reads the headers only (a seek and a
small read each, plus 8 bytes per compressed buffer: its decompressed length): the rows of each
batch, the bytes its buffers take once decompressed, and those of the dictionaries, which the
reader keeps for the whole read. nsys writes the stream format; the file format (``ARROW1``)
holds the same stream after its 8-byte magic, and is read as that stream.

The flatbuffer reading is minimal and bounded: the ``Message`` table (header type, header,
body length) and the ``RecordBatch`` table (length, buffers, compression) of ``Schema.fbs`` /
``Message.fbs``; every offset is checked against the header's size.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

from nsys_rules.loaders.parquet_layout import LayoutError

#: Message header types of ``Message.fbs`` (the union ``MessageHeader``).
SCHEMA, DICTIONARY_BATCH, RECORD_BATCH = 1, 2, 3
#: Largest message header accepted: real ones are a few KB (a schema of a hundred columns).
MAX_METADATA = 64 * 1024 * 1024
#: Bytes a file-format IPC file starts with before its stream ("ARROW1" and two padding bytes).
FILE_MAGIC = b"ARROW1"


@dataclass
class IpcLayout:
    """The messages of one IPC file, from their headers."""

    rows: int = 0  # rows of every record batch
    batches: list[int] = field(default_factory=list)  # decoded bytes of each record batch (body + decompressed)
    dictionaries: int = 0  # decoded bytes of every dictionary batch (kept for the whole read)
    metadata: int = 0  # the largest message header (the schema's, mostly)
    stream_start: int = 0  # where the stream begins (8 in the file format)

    @property
    def largest_batch(self) -> int:
        """Bytes of the largest record batch once decoded: the read's largest single step."""
        return max(self.batches, default=0)

    @property
    def decoded(self) -> int:
        """Bytes of every record batch and dictionary once decoded."""
        return sum(self.batches) + self.dictionaries


def ipc_layout(path: str | os.PathLike[str]) -> IpcLayout:
    """Walk the messages of the IPC file at ``path``; LayoutError when a header does not hold together."""
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(0)
        out = IpcLayout(stream_start=8 if fh.read(6) == FILE_MAGIC else 0)
        pos = out.stream_start
        while pos + 4 <= size:
            fh.seek(pos)
            head = fh.read(8)
            length = struct.unpack_from("<i", head, 0)[0]
            skip = 4
            if length == -1:  # the continuation marker of format 0.15+; the length follows
                if len(head) < 8:
                    break
                length = struct.unpack_from("<i", head, 4)[0]
                skip = 8
            if length == 0:
                break  # end of stream
            if length < 0 or length > MAX_METADATA or pos + skip + length > size:
                raise LayoutError(f"message header of {length} bytes at byte {pos} (file of {size})")
            out.metadata = max(out.metadata, length)
            fh.seek(pos + skip)
            meta = fh.read(length)
            kind, header, body = _message(meta)
            start = pos + skip + length
            if body < 0 or start + body > size:
                raise LayoutError(f"message body of {body} bytes at byte {start} (file of {size})")
            if kind == RECORD_BATCH and header is not None:
                rows, decoded = _batch(meta, header, fh, start, body)
                out.rows += rows
                out.batches.append(body + decoded)
            elif kind == DICTIONARY_BATCH and header is not None:
                data = _offset_field(meta, header, 1)
                if data is not None:
                    out.dictionaries += body + _batch(meta, data, fh, start, body)[1]
            pos = start + body
    return out


def _u32(meta: bytes, at: int) -> int:
    if at < 0 or at + 4 > len(meta):
        raise LayoutError("flatbuffer offset outside the message header")
    return int(struct.unpack_from("<I", meta, at)[0])


def _field_at(meta: bytes, table: int, index: int) -> int | None:
    """Where field ``index`` of the table at ``table`` is stored; None when absent (its default)."""
    vtable = table - struct.unpack_from("<i", meta, table)[0] if 0 <= table <= len(meta) - 4 else -1
    if vtable < 0 or vtable + 4 > len(meta):
        raise LayoutError("flatbuffer vtable outside the message header")
    vsize = struct.unpack_from("<H", meta, vtable)[0]
    slot = 4 + 2 * index
    if slot + 2 > vsize or vtable + slot + 2 > len(meta):
        return None
    offset = struct.unpack_from("<H", meta, vtable + slot)[0]
    return table + offset if offset else None


def _scalar(meta: bytes, table: int, index: int, fmt: str, default: int = 0) -> int:
    at = _field_at(meta, table, index)
    if at is None:
        return default
    if at + struct.calcsize(fmt) > len(meta):
        raise LayoutError("flatbuffer field outside the message header")
    return int(struct.unpack_from(fmt, meta, at)[0])


def _offset_field(meta: bytes, table: int, index: int) -> int | None:
    at = _field_at(meta, table, index)
    return None if at is None else at + _u32(meta, at)


def _message(meta: bytes) -> tuple[int, int | None, int]:
    """(header type, where the header table is, body length) of a ``Message``."""
    root = _u32(meta, 0)
    return _scalar(meta, root, 1, "<B"), _offset_field(meta, root, 2), _scalar(meta, root, 3, "<q")


def _batch(meta: bytes, table: int, fh: BinaryIO, body_start: int, body: int) -> tuple[int, int]:
    """(rows, decompressed bytes beyond the body) of a ``RecordBatch``."""
    rows = _scalar(meta, table, 0, "<q")
    if rows < 0:
        raise LayoutError(f"record batch of {rows} rows")
    buffers = _offset_field(meta, table, 2)
    if _offset_field(meta, table, 3) is None or buffers is None:
        return rows, 0  # not compressed: the buffers are slices of the body
    count = _u32(meta, buffers)
    if buffers + 4 + 16 * count > len(meta):
        raise LayoutError("record batch buffer list outside the message header")
    pairs = np.frombuffer(meta, dtype="<i8", count=2 * count, offset=buffers + 4).reshape(count, 2)
    offsets, lengths = pairs[:, 0], pairs[:, 1]
    compressed = lengths >= 8  # shorter: no 8-byte length prefix, stored as is
    offsets, lengths = offsets[compressed], lengths[compressed]
    if len(offsets) and (int(offsets.min()) < 0 or int((offsets + lengths).max()) > body or int(lengths.max()) > body):
        raise LayoutError("compressed buffer outside the message body")
    # Each distinct prefix read once, in body order: buffers that share one cost no second read.
    where = np.unique(offsets)
    prefixes = _prefixes(fh, body_start, where)
    decoded = prefixes[np.searchsorted(where, offsets)]
    return rows, int(np.maximum(decoded, 0).sum(dtype=np.float64))  # -1: stored as is (part of the body already)


#: Bytes of a body read at once when many compressed buffers' prefixes are looked up.
WINDOW = 1 << 20


def _prefixes(fh: BinaryIO, body_start: int, offsets: "np.ndarray") -> "np.ndarray":
    """The 8-byte decompressed lengths at sorted, distinct ``offsets`` of a body, read a window at a time (each
    byte at most once): however many buffers a header lists, the walk reads at most the body."""
    out = np.empty(len(offsets), np.int64)
    at = 0
    while at < len(offsets):
        start = int(offsets[at])
        fh.seek(body_start + start)
        # Up to the last prefix that fits a window: one 8-byte read for a lone buffer, one read for many close ones.
        last = int(np.searchsorted(offsets, start + WINDOW - 8, side="right")) - 1
        data = fh.read(int(offsets[max(last, at)]) + 8 - start)
        end = at
        while end < len(offsets) and int(offsets[end]) + 8 <= start + len(data):
            out[end] = struct.unpack_from("<q", data, int(offsets[end]) - start)[0]
            end += 1
        if end == at:
            raise LayoutError("compressed buffer cut off")
        at = end
    return out
