"""How much memory a run will take, and the ``--max-memory`` guard (``nsys_rules.memory`` tunes malloc).

The engine knows, before it reads a row, which tables and columns the selected rules need
and how many rows each table has (``count(*)`` on the file). For numbers that is enough for
an honest upper estimate; text is priced from the bytes the file stores
(:mod:`nsys_rules.loaders.stored_bytes`: cheap bounds first, an exact scan of a table only when it
may hold enough text to matter). A run that would take the machine down stops first, with
exit 3 and a line that says how much it needs and how to need less.

Reads the engine did not plan (``stats``, ``diff``, a rule asking for more columns) go
through the same prices: :class:`~nsys_rules.loaders.read_guard.ReadGuard`, built once when a trace is
opened (:func:`~nsys_rules.loaders.read_guard.install_meter`, called by :func:`nsys_rules.inputs.open_trace`
from the settings) and handed to the export as its :class:`~nsys_rules.loaders.export.ReadMeter`, admits
each read before it happens and stops the one that would pass the limit. It prices an export and its
row counts; it never sees a trace.

``--max-memory`` (the flag or the config file's ``max-memory``) is parsed in one place,
:func:`nsys_rules.config.parse_max_memory`.

Parquet and Arrow folders are priced by what they decode, not by what they store
(:mod:`nsys_rules.loaders.decoded_price`: rows and sizes from the page and message headers,
dictionary codes expanded), and their reads report what they hold as they go
(:meth:`~nsys_rules.loaders.read_guard.ReadGuard.check_read`): a file whose headers lie is stopped by
its read, with the same line.

The per-column costs follow the loader (:mod:`nsys_rules.loaders.sqlite`): an integer column
ends as an int64 array (8 B a row) and, while it is read, may exist twice (the streamed
array plus the copy made when damaged rows are dropped); a name column holds the raw
string ids (8 B) and the categorical codes (up to 4 B) at the same time. ``StringIds``
becomes Python strings (object header plus text).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from nsys_rules.loaders.export import Export
from nsys_rules.loaders.tables import TABLES
from nsys_rules.loaders.stored_bytes import (holds_more_than_numbers, measure_text, sample_has_text, source_columns,
                                             table_storage, worst_text_bytes)

#: Share of the available memory a run may plan to use when ``--max-memory`` is not given.
DEFAULT_SHARE = 0.8
#: Peak bytes per row of one canonical column while it is loaded (see the module docstring).
INT_COLUMN_BYTES = 16
NAME_COLUMN_BYTES = 20
#: Python string object overhead per ``StringIds`` row, plus the id and the array slot.
STRING_ROW_BYTES = 80
#: Rules and windows work on copies of what was loaded (cuts to a window, group-bys, launch
#: times), and the rule pack holds some fixed working state: 1.5 x the load + 16 MB keeps every
#: run ``benchmarks/memory_estimate.py`` measures below its estimate (docs/performance.md).
RUN_FACTOR = 1.5
FIXED_BYTES = 16 * 1024**2
#: Text is worked on harder than numbers: names are copied per row (``nvtx_sum`` builds a
#: "domain:name" string per range), hashed into categories and compared: the highest peak
#: ``benchmarks/hostile_memory.py`` measures, in multiples of the text's memory.
TEXT_RUN_FACTOR = 4.5
#: What one distinct name costs a ``stats`` report beyond its read: its output row (a dict of ten
#: values), the formatted cells and the printed line (measured: docs/performance.md).
STATS_BYTES_PER_NAME = 2048


@dataclass(frozen=True)
class TableCost:
    """Estimated peak bytes of loading one canonical table (``text``: the part that is text or blob values)."""

    table: str
    rows: int
    columns: int
    bytes: int
    text: int = 0
    text_values: int = 0  # how many values are text (an upper bound when not scanned)

    def describe(self) -> str:
        """``kernels 3,584 rows x 14 columns 798.0 KB`` (and how much of it is text)."""
        text = f" ({human(self.text)} of it text)" if self.text else ""
        return f"{self.table} {self.rows:,} rows x {self.columns} columns {human(self.bytes)}{text}"


@dataclass(frozen=True)
class MemoryEstimate:
    """What loading the needed tables will take, table by table."""

    tables: tuple[TableCost, ...]
    strings_bytes: int

    @property
    def load(self) -> int:
        """Peak bytes of loading: all tables plus the string table."""
        return sum(t.bytes for t in self.tables) + self.strings_bytes

    @property
    def text(self) -> int:
        """The part of :attr:`load` that is text or blob values in the tables (not the string table)."""
        return sum(t.text for t in self.tables)

    @property
    def total(self) -> int:
        """Peak bytes of the whole run: the load plus the rules' working copies and fixed state."""
        if not self.tables:
            return 0
        return int((self.load - self.text) * RUN_FACTOR + self.text * TEXT_RUN_FACTOR) + FIXED_BYTES

    def biggest(self, n: int = 3) -> list[TableCost]:
        """The ``n`` most expensive tables, largest first."""
        return sorted(self.tables, key=lambda t: t.bytes, reverse=True)[:n]


def column_bytes(table: str, column: str) -> int:
    """Peak bytes per row of one canonical column while loading."""
    kind = TABLES[table].column(column).kind
    return NAME_COLUMN_BYTES if kind in ("string", "text", "nvtx_name") else INT_COLUMN_BYTES


def row_count(export: Export, table: str) -> int:
    """Rows of canonical ``table`` in the export's file (0 when absent), without reading them."""
    source = export.source_of(TABLES[table])
    return export.count(source) if source else 0


def estimate(export: Export, needs: Mapping[str, Iterable[str]], limit: int | None = None,
             per_text_value: int = 0) -> MemoryEstimate:
    """Estimate the memory to load ``needs`` (canonical table -> columns) from ``export``.

    Nothing is loaded: row counts price the values as numbers; when ``limit`` is given and the
    stored bytes could hold enough text to pass it, the text is priced
    too (see :mod:`nsys_rules.loaders.stored_bytes`; only a table suspected of holding text is scanned).
    ``per_text_value``: what the consumer adds per text value (see :class:`ReadGuard`).
    """
    costs: list[TableCost] = []
    for table, cols in needs.items():
        columns = list(dict.fromkeys(cols))
        rows = int(row_count(export, table))
        per_row = sum(column_bytes(table, c) for c in columns)
        costs.append(TableCost(table, rows, len(columns), rows * per_row))
    cost = MemoryEstimate(tuple(costs), _strings_bytes(export) if needs else 0)
    if limit is None or cost.total > limit:
        return cost
    return _with_text(export, needs, cost, limit - cost.total, per_text_value)


def _with_text(export: Any, needs: Mapping[str, Iterable[str]], cost: MemoryEstimate, room: int,
               per_text_value: int) -> MemoryEstimate:
    # The formats differ in how text is measured: a folder's decoded price, a SQLite file's stored bytes.
    if hasattr(export, "decoded_price"):
        return _decoded(export, needs, cost, room, per_text_value)
    if not hasattr(export, "_query"):
        return cost  # a plugin loader's export: no SQL file to measure
    looks = []
    for item in cost.tables:
        source, columns = source_columns(export, item.table, needs[item.table])
        if source is None or not columns or not item.rows:
            continue
        storage = table_storage(export, source)
        bound = worst_text_bytes(storage, item.rows, len(columns))
        looks.append((item, source, columns, storage, None if bound is None else
                      int(bound * TEXT_RUN_FACTOR) + item.rows * len(columns) * per_text_value))
    worst = _total([w for *_, w in looks])
    if worst is not None and worst <= room:
        return cost  # even if every stored byte were text, the read fits
    suspects = [look for look in looks if holds_more_than_numbers(look[3], look[0].rows, len(export.columns_of(look[1])))
                or sample_has_text(export, look[1], look[2], look[0].rows)]
    bounds = _total([w for *_, w in suspects])
    # The suspects' worst case is their price when it fits (no scan); else each is scanned for the exact bytes.
    scan = bounds is None or bounds > room
    priced = {}
    for item, source, columns, _storage, bound in suspects:
        use = measure_text(export, source, columns) if scan else None
        text = use.memory if use is not None else int((bound or 0) / TEXT_RUN_FACTOR)
        values = use.values if use is not None else item.rows * len(columns)
        priced[item.table] = replace(item, bytes=item.bytes + text, text=text, text_values=values)
    return MemoryEstimate(tuple(priced.get(t.table, t) for t in cost.tables), cost.strings_bytes)


def _decoded(export: Any, needs: Mapping[str, Iterable[str]], cost: MemoryEstimate, room: int,
             per_text_value: int) -> MemoryEstimate:
    """A columnar export's tables priced by what they decode: the rows the pages hold (not the footer's
    count), the largest page or batch and the dictionaries held while reading, the text expanded."""
    priced = []
    for item in cost.tables:
        source, columns = source_columns(export, item.table, needs[item.table])
        if source is None or not columns:
            priced.append(item)
            continue
        found = export.decoded_price(source, columns, int(room / TEXT_RUN_FACTOR))
        rows = max(item.rows, found.rows)
        numbers = rows * sum(column_bytes(item.table, c) for c in dict.fromkeys(needs[item.table]))
        text = found.text.memory
        priced.append(replace(item, rows=rows, bytes=numbers + found.transient + text, text=text,
                              text_values=found.text.values))
    return MemoryEstimate(tuple(priced), cost.strings_bytes)


def _total(bounds: list[int | None]) -> int | None:
    """The sum of ``bounds``; None when one of them is unknown."""
    known = [b for b in bounds if b is not None]
    return sum(known) if len(known) == len(bounds) else None


def _strings_bytes(export: Export) -> int:
    if "StringIds" not in export.table_names:
        return 0
    count, text = export.strings_size()
    return count * STRING_ROW_BYTES + text


def available_memory() -> int | None:
    """Bytes this process can still take: MemAvailable, capped by a cgroup v2 limit; None if unknown."""
    found: list[int] = []
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    if not found:
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            pass
    cgroup = _cgroup_room(Path("/sys/fs/cgroup"))
    if cgroup is not None:
        found.append(cgroup)
    return min(found) if found else None


def _cgroup_room(root: Path) -> int | None:
    # Containers (CI bots) are limited by their cgroup, not by the host's free memory.
    try:
        limit = (root / "memory.max").read_text().strip()
        current = int((root / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    if limit == "max":
        return None
    try:
        return max(int(limit) - current, 0)
    except ValueError:
        return None


def default_limit() -> int | None:
    """80 % of the available memory, or None when it cannot be known."""
    room = available_memory()
    return int(room * DEFAULT_SHARE) if room is not None else None


def human(nbytes: float) -> str:
    """``1536`` -> ``1.5 KB``; powers of 1024, one decimal."""
    value = float(nbytes)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(value) < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"  # pragma: no cover
