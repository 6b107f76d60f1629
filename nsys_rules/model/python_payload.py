"""Python stacks that nsys stores as NVTX extended payloads, decoded by the export's own schema tables.

``--python-sampling=true`` records the Python stack of each sampled thread every sampling period;
``--python-backtrace=cuda`` (with ``--cudabacktrace`` and CPU sampling) the stack at each CUDA call
that got a backtrace. nsys writes both as NVTX marks (``NVTX_EVENTS.eventType`` 34) whose
``binaryData`` holds a payload laid out by a schema of ``NVTX_PAYLOAD_SCHEMAS`` /
``NVTX_PAYLOAD_SCHEMA_ENTRIES``, named "Python Periodic Sampling" and "Python Backtrace on CUDA"
(nsys 2025.3)::

    stack schema (dynamic)        Thread state ID  UINT64   offset 0
                                  Thread state     enum     offset 8   (NVTX_PAYLOAD_ENUMS: 4 bytes,
                                                                        1 Running, 2 Blocking Wait, 3 Uninterruptible)
                                  Frames count     UINT32   offset 12
                                  Frames           array    offset 16  (flag 0x30: its length is entry 2)
    frame schema (static, 24 B)   Function         string handle (a StringIds id)  offset 0
                                  File             string handle                   offset 8
                                  Line             INT / INT32                     offset 16

Innermost frame first. The blob itself starts with the event's payload list, as
``nvtxPayloadData_t`` with the pointer turned into an offset: a UINT64 count, then per payload
(schemaId, size, offset into the blob), all UINT64; the payload data follows (offset 32 for one).

``nsys export`` writes ``binaryData`` only with ``--include-blobs=true``: a plain export keeps the
marks (time and thread) but not a single frame. The layout is read from the schema tables, not
assumed: offsets, value sizes and the array's length entry come from the export, so a later nsys
that moves a field still decodes (or says it cannot). Decoding is vectorized: every blob joined
into one buffer, each field gathered at its computed byte offsets.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

#: The schema names nsys 2025.3 registers.
SAMPLING_SCHEMA = "Python Periodic Sampling"
BACKTRACE_SCHEMA = "Python Backtrace on CUDA"
#: ``NVTX_EVENTS.eventType`` of a mark, the event type these payloads ride on.
NVTX_MARK = 34

#: NVTX payload entry types (nvToolsExtPayload.h) the stack schemas use: size in bytes and signedness.
_TYPES: dict[int, tuple[int, bool]] = {
    1: (1, True), 2: (1, False), 3: (2, True), 4: (2, False), 5: (4, True), 6: (4, False), 7: (8, True),
    8: (8, False), 9: (8, True), 10: (8, False), 11: (1, True), 12: (1, False), 13: (2, True), 14: (2, False),
    15: (4, True), 16: (4, False), 17: (8, True), 18: (8, False), 22: (8, False), 23: (8, False),
    68: (4, False), 69: (4, False), 70: (8, False), 71: (4, False), 72: (8, False), 73: (4, False), 74: (8, False),
}
#: ``NVTX_PAYLOAD_ENTRY_TYPE_NVTX_REGISTERED_STRING_HANDLE``: nsys stores the ``StringIds`` id there.
STRING_HANDLE = 80
#: ``NVTX_PAYLOAD_ENTRY_FLAG_ARRAY_LENGTH_INDEX``: an embedded array whose length is another entry's value.
_ARRAY_LENGTH_INDEX = 3 << 4
_ARRAY_FLAGS = 7 << 4
#: Dynamic schema and enum ids (registered by the tool) start here; an entry type this large names one.
_DYNAMIC_START = 1 << 32
#: Header of a blob: the payload count, then (schemaId, size, offset) per payload.
_COUNT_BYTES = 8
_ENTRY_BYTES = 24
#: More payloads than this on one mark is no stack event of nsys (damage): not decoded.
_MAX_PAYLOADS = 8

#: ``Thread state`` values (``NVTX_PAYLOAD_ENUM_ENTRIES`` of nsys 2025.3).
THREAD_STATES = {1: "Running", 2: "Blocking Wait", 3: "Uninterruptible"}


@dataclass(frozen=True)
class Field:
    """One scalar of a payload: its byte offset in the payload, size and signedness."""

    offset: int
    size: int
    signed: bool = False


@dataclass(frozen=True)
class StackLayout:
    """Where a stack schema keeps its fields, read from the export's schema tables."""

    name: str
    domain_id: int
    schema_id: int
    state: Field | None
    count: Field
    frames_offset: int
    frame_size: int
    function: Field
    file: Field
    line: Field


@dataclass(frozen=True)
class Stacks:
    """Decoded stacks of one schema: one row per event, its frames in ``frame_*`` (innermost first).

    ``first[i]`` is the index of event ``i``'s innermost frame in the frame arrays and ``depth[i]``
    its number of frames; ``function``/``file`` are ``StringIds`` ids (resolved by the caller).
    """

    time: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    state: np.ndarray
    first: np.ndarray
    depth: np.ndarray
    function: np.ndarray
    file: np.ndarray
    line: np.ndarray
    #: Marks of this schema whose payload could not be decoded (short, inconsistent): left out.
    undecodable: int = 0

    def __len__(self) -> int:
        return len(self.time)


def signed64(value: Any) -> int | None:
    """An id column value as a signed 64-bit int (Arrow exports write domain -2 as 2**64 - 2)."""
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number - (1 << 64) if number >= 1 << 63 else number


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def read_layouts(schemas: Sequence[tuple[Any, ...]], entries: Sequence[tuple[Any, ...]],
                 enums: Sequence[tuple[Any, ...]]) -> dict[str, StackLayout]:
    """The stack layouts by schema name, from the rows of the three schema tables.

    ``schemas``: (domainId, schemaId, name, payloadSize); ``entries``: (domainId, schemaId, idx, flags,
    type, name, arrayOrUnionDetail, offset); ``enums``: (domainId, schemaId, size). A schema whose
    layout is not a stack of (function, file, line) frames is left out.
    """
    sizes: dict[tuple[int | None, int | None], int] = {}
    names: dict[tuple[int | None, int | None], str] = {}
    for domain, schema, name, size in schemas:
        key = (signed64(domain), signed64(schema))
        if _int(size):
            sizes[key] = int(size)
        if isinstance(name, str) and name:
            names[key] = name
    for domain, schema, size in enums:
        if _int(size):
            sizes[(signed64(domain), signed64(schema))] = int(size)
    by_schema: dict[tuple[int | None, int | None], list[tuple[Any, ...]]] = {}
    for row in entries:
        by_schema.setdefault((signed64(row[0]), signed64(row[1])), []).append(row)
    for rows in by_schema.values():
        rows.sort(key=lambda r: _int(r[2]) or 0)
    out: dict[str, StackLayout] = {}
    for key, name in names.items():
        if name not in (SAMPLING_SCHEMA, BACKTRACE_SCHEMA) or key not in by_schema:
            continue
        layout = _stack_layout(name, key, by_schema, sizes)
        if layout is not None:
            out[name] = layout
    return out


def _placed(rows: list[tuple[Any, ...]], sizes: dict[tuple[int | None, int | None], int], domain: int | None
            ) -> list[tuple[tuple[Any, ...], int, int]]:
    """Each entry with its offset and size: a NULL offset is the next naturally aligned one (nsys leaves the
    first entry's offset NULL)."""
    placed: list[tuple[tuple[Any, ...], int, int]] = []
    end = 0
    for row in rows:
        kind = _int(row[4]) or 0
        size = _TYPES.get(kind, (0, False))[0] or (8 if kind == STRING_HANDLE else sizes.get((domain, kind), 0))
        offset = _int(row[7])
        if offset is None:
            align = min(size, 8) or 1
            offset = -(-end // align) * align
        placed.append((row, offset, size))
        end = max(end, offset + size)
    return placed


def _field(entry: tuple[tuple[Any, ...], int, int] | None) -> Field | None:
    if entry is None or not entry[2]:
        return None
    kind = _int(entry[0][4]) or 0
    signed = _TYPES.get(kind, (0, False))[1]
    return Field(entry[1], entry[2], signed)


def _stack_layout(name: str, key: tuple[int | None, int | None],
                  by_schema: dict[tuple[int | None, int | None], list[tuple[Any, ...]]],
                  sizes: dict[tuple[int | None, int | None], int]) -> StackLayout | None:
    domain, schema = key
    placed = _placed(by_schema[key], sizes, domain)
    named = {str(row[5]): (row, off, size) for row, off, size in placed if isinstance(row[5], str)}
    frames = named.get("Frames") or next(
        (p for p in placed if (_int(p[0][3]) or 0) & _ARRAY_FLAGS and (_int(p[0][4]) or 0) >= _DYNAMIC_START), None)
    if frames is None or (_int(frames[0][3]) or 0) & _ARRAY_FLAGS != _ARRAY_LENGTH_INDEX:
        return None
    length_index = _int(frames[0][6])
    count = next((p for p in placed if _int(p[0][2]) == length_index), None) or named.get("Frames count")
    state = named.get("Thread state") or next(
        (p for p in placed if p is not frames and (_int(p[0][4]) or 0) >= _DYNAMIC_START), None)
    frame_key = (domain, signed64(frames[0][4]))
    if frame_key not in by_schema or frame_key not in sizes:
        return None
    frame_fields = _placed(by_schema[frame_key], sizes, domain)
    frame_named = {str(row[5]): (row, off, size) for row, off, size in frame_fields if isinstance(row[5], str)}
    handles = [p for p in frame_fields if _int(p[0][4]) == STRING_HANDLE]
    function = frame_named.get("Function") or (handles[0] if handles else None)
    file = frame_named.get("File") or (handles[1] if len(handles) > 1 else None)
    line = frame_named.get("Line") or next((p for p in frame_fields if p not in handles and p[2]), None)
    fields = [_field(count), _field(function), _field(file), _field(line)]
    if any(f is None for f in fields):
        return None
    count_f, function_f, file_f, line_f = fields
    assert count_f and function_f and file_f and line_f
    return StackLayout(name, domain if domain is not None else 0, schema if schema is not None else 0, _field(state),
                       count_f, frames[1], sizes[frame_key], function_f, file_f, line_f)


def _gather(buf: np.ndarray, pos: np.ndarray, field: Field) -> np.ndarray:
    """Little-endian integers of ``field``'s size at byte positions ``pos`` of ``buf``, as int64."""
    if not len(pos):
        return np.zeros(0, np.int64)
    raw = buf[pos[:, None] + np.arange(field.size)]
    values = np.ascontiguousarray(raw).view(f"<{'i' if field.signed else 'u'}{field.size}").ravel()
    return values.astype(np.int64)


def _u64(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return _gather(buf, pos, Field(0, 8, False))


def decode(blobs: np.ndarray, time: np.ndarray, pid: np.ndarray, tid: np.ndarray, layout: StackLayout) -> Stacks:
    """The stacks of ``layout``'s schema among marks with payloads ``blobs`` (bytes or None, one per mark).

    Marks of another schema are skipped; marks of this one whose payload does not fit its layout
    (truncated, a frame count past the payload's end) are counted in ``undecodable``.
    """
    lengths = np.fromiter((len(b) if isinstance(b, (bytes, bytearray)) else 0 for b in blobs), np.int64, len(blobs))
    rows = np.flatnonzero(lengths >= _COUNT_BYTES + _ENTRY_BYTES)
    buf = np.frombuffer(b"".join(blobs[i] for i in rows), np.uint8) if len(rows) else np.zeros(0, np.uint8)
    lengths = lengths[rows]
    base = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64) if len(rows) else np.zeros(0, np.int64)
    payloads = _u64(buf, base)
    # The payload of this schema: the first listed entry with its id (one entry is all nsys writes).
    found = np.full(len(rows), -1, np.int64)
    for k in range(_MAX_PAYLOADS):
        header_end = _COUNT_BYTES + _ENTRY_BYTES * (k + 1)
        open_rows = np.flatnonzero((found < 0) & (payloads > k) & (payloads <= _MAX_PAYLOADS) & (lengths >= header_end))
        if not len(open_rows):
            break
        ids = _u64(buf, base[open_rows] + _COUNT_BYTES + _ENTRY_BYTES * k)
        found[open_rows[ids == layout.schema_id]] = k
    mine = found >= 0
    rows, base, lengths, found = rows[mine], base[mine], lengths[mine], found[mine]
    entry = base + _COUNT_BYTES + _ENTRY_BYTES * found
    size = _u64(buf, entry + 8)
    start = _u64(buf, entry + 16)
    fixed_end = max(layout.count.offset + layout.count.size, layout.frames_offset,
                    (layout.state.offset + layout.state.size) if layout.state else 0)
    ok = (start >= 0) & (size >= fixed_end) & (start + size <= lengths)
    count = np.zeros(len(rows), np.int64)
    at = base + start
    count[ok] = _gather(buf, at[ok] + layout.count.offset, layout.count)
    ok &= (count >= 0) & (layout.frames_offset + count * layout.frame_size <= size)
    undecodable = int((~ok).sum())
    rows, at, count = rows[ok], at[ok], count[ok]
    state = (_gather(buf, at + layout.state.offset, layout.state) if layout.state
             else np.zeros(len(rows), np.int64)).astype(np.int32)
    first = np.concatenate(([0], np.cumsum(count)[:-1])).astype(np.int64) if len(rows) else np.zeros(0, np.int64)
    total = int(count.sum())
    owner = np.repeat(np.arange(len(rows)), count)
    within = np.arange(total, dtype=np.int64) - first[owner]
    frame_at = at[owner] + layout.frames_offset + within * layout.frame_size
    function = _gather(buf, frame_at + layout.function.offset, layout.function)
    file = _gather(buf, frame_at + layout.file.offset, layout.file)
    line = _gather(buf, frame_at + layout.line.offset, layout.line).astype(np.int32)
    return Stacks(np.asarray(time)[rows].astype(np.int64), np.asarray(pid)[rows].astype(np.int32),
                  np.asarray(tid)[rows].astype(np.int32), state, first, count.astype(np.int32), function, file, line,
                  undecodable)


def display_name(text: str) -> str:
    """A Python name or path as the program wrote it: nsys stores ``<module>`` as ``&lt;module&gt;``."""
    return html.unescape(text) if "&" in text else text
