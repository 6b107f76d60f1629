"""The ``--max-memory`` guard of one opened export: each read priced before it happens, the one that cannot fit stopped.

Built once per trace, from the settings, when the trace is opened (:func:`install_meter`, called by
:func:`nsys_rules.inputs.open_trace`), and handed to the export as its
:class:`~nsys_rules.loaders.export.ReadMeter`. The prices are :mod:`nsys_rules.loaders.memory_limit`'s:
the engine's planned load at once (:meth:`ReadGuard.plan`), then every read it did not plan
(:meth:`ReadGuard.admit`), reads priced by their callers (:meth:`ReadGuard.admit_bytes`: the GPU metrics)
and what a folder export's read holds as it goes (:meth:`ReadGuard.check_read`).
"""

from __future__ import annotations

import threading
from typing import Iterable, Mapping

from nsys_rules.errors import InputError
from nsys_rules.loaders.export import Export
from nsys_rules.loaders.memory_limit import (FIXED_BYTES, RUN_FACTOR, TEXT_RUN_FACTOR, MemoryEstimate, TableCost,
                                             default_limit, estimate, human)


def _where(explicit: bool) -> str:
    return "--max-memory" if explicit else "80 % of the available memory (set --max-memory to change it)"


class ReadGuard:
    """Admits each table read of one export against the memory limit, before the read (thread-safe).

    The :class:`~nsys_rules.loaders.export.ReadMeter` of nsys-rules' own exports. The first read also
    pays for the string table and the fixed working state; a table read again with more columns pays
    the difference.
    """

    def __init__(self, limit: int | None, explicit: bool, per_text_value: int = 0, label: str = "trace") -> None:
        self.limit = limit
        self.explicit = explicit
        self.per_text_value = per_text_value
        self.label = label
        self._charged: dict[str, tuple[frozenset[str], int]] = {}
        self._used = FIXED_BYTES
        self._strings_paid = False
        self._lock = threading.RLock()  # a read priced under the lock reports to check_read

    def plan(self, export: Export, needs: Mapping[str, Iterable[str]]) -> MemoryEstimate:
        """Price the engine's planned load (canonical table -> columns) at once: :class:`InputError` (exit 3)
        naming the biggest tables when it would take more than the limit, else its estimate, charged."""
        cost = estimate(export, needs, self.limit)
        if self.limit is not None and cost.total > self.limit:
            parts = ", ".join(t.describe() for t in cost.biggest())
            raise InputError(f"{self.label}: the run needs about {human(cost.total)} (it loads {parts}) but the limit "
                             f"is {human(self.limit)} ({_where(self.explicit)}); read less with --select (fewer rules "
                             "read fewer tables and columns), or run on a machine with more memory")
        self.charge(cost, needs)
        return cost

    def charge(self, cost: MemoryEstimate, needs: Mapping[str, Iterable[str]]) -> None:
        """Record reads already priced by :meth:`plan` (the engine's planned load)."""
        with self._lock:
            for item in cost.tables:
                self._record(item.table, frozenset(needs[item.table]), _run_bytes(item))
            if cost.tables:
                self._used += int(cost.strings_bytes * RUN_FACTOR)
                self._strings_paid = True

    def _record(self, table: str, columns: frozenset[str], nbytes: int) -> None:
        previous = self._charged.get(table)
        self._used += nbytes - (previous[1] if previous else 0)
        self._charged[table] = (columns | (previous[0] if previous else frozenset()), nbytes)

    def admit(self, export: Export, table: str, columns: Iterable[str]) -> None:
        """Raise :class:`InputError` (exit 3) when reading ``columns`` of ``table`` would pass the limit."""
        wanted = frozenset(columns)
        with self._lock:
            previous = self._charged.get(table)
            if previous is not None and wanted <= previous[0]:
                return
            if self.limit is None:
                return
            all_columns = wanted | (previous[0] if previous else frozenset())
            room = self.limit - self._used + (previous[1] if previous else 0)
            cost = estimate(export, {table: all_columns}, max(room, 0) + FIXED_BYTES, self.per_text_value)
            strings = 0 if self._strings_paid else int(cost.strings_bytes * RUN_FACTOR)
            need = sum(_run_bytes(t) + t.text_values * self.per_text_value for t in cost.tables) + strings
            if need > room:
                (item,) = cost.tables
                raise InputError(f"{self.label}: reading {item.describe()} needs about "
                                 f"{human(need)} more, {human(max(room, 0))} is left of the {human(self.limit)} limit "
                                 f"({_where(self.explicit)}); read less (check: --select; stats: --filter-time, another "
                                 "report), or run on a machine with more memory")
            self._record(table, all_columns, need - strings)
            self._used += strings
            self._strings_paid = True

    def check_read(self, what: str, nbytes: int) -> None:
        """A read under way holds ``nbytes`` (``what``: the file and part of it): :class:`InputError` (exit 3)
        when that passes what is left of the limit, the read's own admitted price included. The read's
        price came from the file's headers; a read that outgrows it found them lying."""
        with self._lock:
            if self.limit is None:
                return
            # The read may use what it was admitted for plus what is left; its price is among the charged.
            charged = max((n for _, n in self._charged.values()), default=0)
            room = self.limit - self._used + charged
            if nbytes > room:
                raise InputError(f"{self.label}: reading {what} needs about {human(nbytes)} more, "
                                 f"{human(max(room, 0))} is left of the {human(self.limit)} limit "
                                 f"({_where(self.explicit)}); read less (check: --select; stats: --filter-time, "
                                 "another report), or run on a machine with more memory")

    def admit_bytes(self, what: str, nbytes: int) -> None:
        """Admit a read priced by its caller (``what``: its name, e.g. the GPU metrics of a time range), in bytes
        at its peak; :class:`InputError` (exit 3) when it would pass the limit. A second read of the same name
        replaces the first one's price."""
        with self._lock:
            previous = self._charged.get(what)
            room = (self.limit - self._used + (previous[1] if previous else 0)) if self.limit is not None else None
            if room is not None and nbytes > room:
                raise InputError(f"{self.label}: reading {what} needs about {human(nbytes)} "
                                 f"more, {human(max(room, 0))} is left of the {human(self.limit or 0)} limit "
                                 f"({_where(self.explicit)})")
            self._record(what, frozenset(), nbytes)


def _run_bytes(item: TableCost) -> int:
    return int((item.bytes - item.text) * RUN_FACTOR + item.text * TEXT_RUN_FACTOR)


def install_meter(export: Export, max_memory: int | None, label: str, per_text_value: int = 0) -> ReadGuard:
    """Build the memory guard of one opened export and hand it over as the export's meter: the one installer.

    ``max_memory`` is ``--max-memory`` in bytes (None: 80 % of the available memory, as measured now);
    ``label`` names the trace in its messages; ``per_text_value``: bytes each text value costs beyond its
    read, for a consumer whose output grows with the names (``stats`` prints one row per distinct name:
    :data:`STATS_BYTES_PER_NAME`). Installed before the trace reads its metadata, so that a folder
    export's metadata reads are checked too.
    """
    guard = open_guard(max_memory, label, per_text_value)
    export.meter = guard
    return guard


def open_guard(max_memory: int | None, label: str, per_text_value: int = 0) -> ReadGuard:
    """A :class:`ReadGuard` for ``--max-memory`` (bytes; None: 80 % of the available memory)."""
    explicit = max_memory is not None
    return ReadGuard(max_memory if explicit else default_limit(), explicit, per_text_value, label)

