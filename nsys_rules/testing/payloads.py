"""nsys's Python stacks as NVTX extended payloads, written the way nsys 2025.3 writes them (for ``TraceBuilder``).

The schema rows are the ones nsys registers ("Python Periodic Sampling" in NVTX domain 1,
"Python Backtrace on CUDA" in domain 2, each a thread state, a frame count and an array of
(function, file, line) frames); :func:`encode_stack` lays out one event's blob: the payload list
(count, then schemaId, size, offset) and the payload. ``nsys_rules.model.python_payload`` reads
the layout back from these rows, not from constants, so tests exercise the same path as a real export.
"""

from __future__ import annotations

import struct
from typing import Any, Sequence

SAMPLING_DOMAIN = 1
BACKTRACE_DOMAIN = 2
SAMPLING_SCHEMA_ID = 4294967298
SAMPLING_FRAME_SCHEMA_ID = 4294967296
SAMPLING_STATE_ENUM_ID = 4294967297
BACKTRACE_SCHEMA_ID = 4294967301
BACKTRACE_FRAME_SCHEMA_ID = 4294967299
BACKTRACE_STATE_ENUM_ID = 4294967300
#: Thread states of the stack schemas' enum.
RUNNING, BLOCKING_WAIT, UNINTERRUPTIBLE = 1, 2, 3

#: NVTX_PAYLOAD_SCHEMAS: (domainId, schemaId, name, type, flags, numEntries, payloadSize, alignTo).
SCHEMA_ROWS: list[tuple[Any, ...]] = [
    (BACKTRACE_DOMAIN, BACKTRACE_SCHEMA_ID, "Python Backtrace on CUDA", 2, None, 4, None, None),
    (BACKTRACE_DOMAIN, BACKTRACE_FRAME_SCHEMA_ID, None, 1, None, 3, 24, None),
    (SAMPLING_DOMAIN, SAMPLING_SCHEMA_ID, "Python Periodic Sampling", 2, None, 4, None, None),
    (SAMPLING_DOMAIN, SAMPLING_FRAME_SCHEMA_ID, None, 1, None, 3, 24, None),
]


def _stack_entries(domain: int, schema: int, frame_schema: int, state_enum: int, line_type: int) -> list[tuple[Any, ...]]:
    # (domainId, schemaId, idx, flags, type, name, description, arrayOrUnionDetail, offset)
    return [
        (domain, schema, 0, None, 18, "Thread state ID", None, None, None),
        (domain, schema, 1, None, state_enum, "Thread state", None, None, 8),
        (domain, schema, 2, None, 16, "Frames count", None, None, 12),
        (domain, schema, 3, 48, frame_schema, "Frames", None, 2, 16),  # 48: an array whose length is entry 2
        (domain, frame_schema, 0, None, 80, "Function", None, None, None),  # 80: a registered string handle
        (domain, frame_schema, 1, None, 80, "File", None, None, 8),
        (domain, frame_schema, 2, None, line_type, "Line", None, None, 16),
    ]


#: NVTX_PAYLOAD_SCHEMA_ENTRIES (the backtrace frame's line is an INT, the sample frame's an INT32, as nsys has them).
ENTRY_ROWS = (_stack_entries(BACKTRACE_DOMAIN, BACKTRACE_SCHEMA_ID, BACKTRACE_FRAME_SCHEMA_ID, BACKTRACE_STATE_ENUM_ID, 5)
              + _stack_entries(SAMPLING_DOMAIN, SAMPLING_SCHEMA_ID, SAMPLING_FRAME_SCHEMA_ID, SAMPLING_STATE_ENUM_ID, 15))
#: NVTX_PAYLOAD_ENUMS: (domainId, schemaId, name, numEntries, size).
ENUM_ROWS = [(BACKTRACE_DOMAIN, BACKTRACE_STATE_ENUM_ID, None, 3, 4), (SAMPLING_DOMAIN, SAMPLING_STATE_ENUM_ID, None, 3, 4)]
#: NVTX_PAYLOAD_ENUM_ENTRIES: (domainId, schemaId, idx, name, value, isFlag).
ENUM_ENTRY_ROWS = [(domain, enum, i, name, i + 1, None)
                   for domain, enum in ((BACKTRACE_DOMAIN, BACKTRACE_STATE_ENUM_ID), (SAMPLING_DOMAIN, SAMPLING_STATE_ENUM_ID))
                   for i, name in enumerate(("Running", "Blocking Wait", "Uninterruptible"))]
#: The NVTX domains nsys creates for them (NVTX_EVENTS eventType 75 rows: domainId, text).
DOMAINS = [(SAMPLING_DOMAIN, "Python Periodic Sampling"), (BACKTRACE_DOMAIN, "Python Backtrace on CUDA")]


def encode_stack(schema_id: int, state: int, frames: Sequence[tuple[int, int, int]]) -> bytes:
    """One event's ``binaryData``: the payload list (one payload), then the stack.

    ``frames``: (function string id, file string id, line), innermost first.
    """
    body = struct.pack("<QII", 1, state, len(frames)) + b"".join(
        struct.pack("<QQi4x", function, file, line) for function, file, line in frames)
    return struct.pack("<QQQQ", 1, schema_id, len(body), 32) + body
