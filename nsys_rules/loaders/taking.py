"""What the read-ahead holds of one table, as the export that claims it takes it (see :mod:`.readahead`).

Its own module so that the exports (which take) and the read-ahead (which reads with the exports)
do not import each other; only the standard library is used here.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Early:
    """The raw columns of one source table read early, until the export takes them."""

    narrow: frozenset[str]
    columns: dict[str, Any]
    #: Notes the read made (Parquet: unsigned values beyond int64), handed over with their columns.
    notes: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Unit:
    """One planned early read: some columns of one source table."""

    columns: tuple[str, ...]
    narrow: frozenset[str]
    future: Future[Early | None]


class Taking:
    """What the read-ahead holds of one table for the export taking it (see ``ReadAhead.take``)."""

    def __init__(self, lock: threading.Lock, begun: list[Unit], columns: list[str],
                 narrow: set[str] | frozenset[str]) -> None:
        self._lock = lock  # the read-ahead's, over the columns it hands over
        self._begun = begun
        #: Columns whose early read has begun (or ended): :meth:`wait` hands them over. Read any other here.
        self.covered = frozenset(c for u in begun for c in u.columns
                                 if c in columns and (c in narrow) == (c in u.narrow))

    def wait(self) -> tuple[dict[str, Any], dict[str, list[str]]]:
        """The covered columns once their reads end, and the notes the reads made for them; each column is
        handed over once. A read that failed or was stopped hands nothing: the export reads those columns."""
        picked: dict[str, Any] = {}
        notes: dict[str, list[str]] = {}
        for unit in self._begun:
            try:
                early = unit.future.result()
            except Exception:  # noqa: BLE001 - stopped (cancelled) or failed: the export reads it itself
                continue
            if early is None:
                continue
            with self._lock:
                for c in self.covered & set(unit.columns):
                    if c in early.columns:
                        picked[c] = early.columns.pop(c)
                        if c in early.notes:
                            notes[c] = early.notes.pop(c)
        return picked, notes


#: What an export takes when no read-ahead holds its table.
NOTHING = Taking(threading.Lock(), [], [], frozenset())
