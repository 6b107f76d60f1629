"""Reading one big SQLite table in parts, in parallel, on a machine with many cores.

ADBC decodes one query on one core (~40 ns a value: 0.6 s for the 13 kernel columns of a
1M-kernel trace), and SQLite can start a scan anywhere in a table's rowid order. So a table
of a million rows or more is read as a few rowid ranges at once, each over its own read-only
connection, and the parts are joined in rowid order: the same rows in the same order as one
``SELECT`` over the table gives, as long as that query scans the table itself (the caller
checks that no index could answer it, see ``SqliteExport.row_order_stable``).

The parts are filled by the same :func:`~.batches.fill_columns` as a whole read, column by
column, so a column joined from parts equals the column read whole: int32 where every part
fits, int64 where one needed it (a whole read widens then too). A part that meets anything but
integers (text in an integer column: damage) gives up the split; the caller then reads the
table whole, the way it always has.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

import numpy as np

#: Rows from which a table is read in parts (below it one part is fast enough).
SPLIT_ROWS = 500_000
#: Most parts (connections) for one table.
MAX_PARTS = 8
#: Seconds an interrupted read waits for its parts to stop (each stops within one batch).
STOP_WAIT = 3.0


def part_count(rows: int) -> int:
    """How many parts to read ``rows`` rows in: half the usable cores (the kernel and API tables are read
    at once), at most :data:`MAX_PARTS`, none below :data:`SPLIT_ROWS` rows; 1 means read it whole."""
    if rows < SPLIT_ROWS:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(MAX_PARTS, cores // 2, rows // (SPLIT_ROWS // 2)))


def rowid_ranges(low: int, high: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` half-open rowid ranges covering ``low..high`` in order."""
    step = -(-(high - low + 1) // parts)
    return [(low + i * step, min(low + (i + 1) * step, high + 1)) for i in range(parts) if low + i * step <= high]


def read_parts(read: Callable[[int, int, Any], dict[str, np.ndarray]], ranges: list[tuple[int, int]],
               stop: Any = None) -> dict[str, np.ndarray] | None:
    """``read(start, end, stop)`` of every rowid range in threads, joined in order; None when a part holds
    anything but integers (the caller reads the table whole). A failure of any part is raised.

    Daemon threads, stopped (within a batch) and waited for when the wait is interrupted (Ctrl-C):
    none is left in a reader's C code when Python exits, and none can hold the exit forever (see
    ``readahead._Workers``).
    """
    either = _Either(stop)
    results: list[Any] = [None] * len(ranges)

    def run(i: int) -> None:
        try:
            results[i] = read(*ranges[i], either)
        except BaseException as exc:  # noqa: BLE001 - raised below, in the caller's thread
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,), name=f"nsys-rules-part-{i}", daemon=True)
               for i in range(len(ranges))]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:
        either.own.set()
        for thread in threads:
            thread.join(STOP_WAIT)
        raise
    for result in results:
        if isinstance(result, BaseException):
            raise result
    parts: list[dict[str, np.ndarray]] = results
    if any(a.dtype.kind not in "iu" for part in parts for a in part.values()):
        return None
    out: dict[str, np.ndarray] = {}
    for name in list(parts[0]):
        pieces = [part.pop(name) for part in parts]
        out[name] = _join(pieces)
        del pieces  # each column's parts go before the next column is joined: the peak is one column more
    return out


class _Either:
    """Set when the caller's stop event is, or when this read stops its own parts."""

    def __init__(self, outer: Any) -> None:
        self.outer = outer
        self.own = threading.Event()

    def is_set(self) -> bool:
        return self.own.is_set() or (self.outer is not None and self.outer.is_set())


def _join(pieces: list[Any]) -> np.ndarray:
    if len(pieces) == 1:
        return pieces[0]
    dtype = np.result_type(*pieces)  # int32 parts and an int64 one: int64, as a whole read widens
    return np.concatenate(pieces).astype(dtype, copy=False)
