"""How much memory a run will take, and the ``--max-memory`` guard (``nsys_rules.memory`` tunes malloc).

The engine knows, before it reads a row, which tables and columns the selected rules need
and how many rows each table has (``count(*)`` on the file). That is enough for an honest
upper estimate, so a run that would take the machine down stops first, with exit 3 and a
line that says how much it needs and how to need less.

The per-column costs follow the loader (:mod:`nsys_rules.loaders.sqlite`): an integer column
ends as an int64 array (8 B a row) and, while it is read, may exist twice (the streamed
array plus the copy made when damaged rows are dropped); a name column holds the raw
string ids (8 B) and the categorical codes (up to 4 B) at the same time. ``StringIds``
becomes Python strings (object header plus text).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping

from .errors import InputError
from .loaders.tables import TABLES

if TYPE_CHECKING:
    from .trace import Trace

#: Share of the available memory a run may plan to use when ``--max-memory`` is not given.
DEFAULT_SHARE = 0.8
#: Peak bytes per row of one canonical column while it is loaded (see the module docstring).
INT_COLUMN_BYTES = 16
NAME_COLUMN_BYTES = 20
#: Python string object overhead per ``StringIds`` row, plus the id and the array slot.
STRING_ROW_BYTES = 80
#: Rules and windows work on copies of what was loaded (cuts to a window, group-bys, launch
#: times), and the rule pack holds some fixed working state. ``benchmarks/memory_estimate.py``
#: measures the real peak above the interpreter (with pyarrow/ADBC imported): on the 1M-kernel
#: big trace 454 MB for a 436 MB load estimate, on the h200 traces 13-33 MB for 0.2-20 MB
#: loads. Planned as 1.5 x the load + 16 MB, every measured run stays below its estimate
#: (ratios 0.68-0.8).
RUN_FACTOR = 1.5
FIXED_BYTES = 16 * 1024**2


@dataclass(frozen=True)
class TableCost:
    """Estimated peak bytes of loading one canonical table."""

    table: str
    rows: int
    columns: int
    bytes: int


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
    def total(self) -> int:
        """Peak bytes of the whole run: the load plus the rules' working copies and fixed state."""
        return int(self.load * RUN_FACTOR) + FIXED_BYTES if self.tables else 0

    def biggest(self, n: int = 3) -> list[TableCost]:
        """The ``n`` most expensive tables, largest first."""
        return sorted(self.tables, key=lambda t: t.bytes, reverse=True)[:n]


def column_bytes(table: str, column: str) -> int:
    """Peak bytes per row of one canonical column while loading."""
    kind = TABLES[table].column(column).kind
    return NAME_COLUMN_BYTES if kind in ("string", "text", "nvtx_name") else INT_COLUMN_BYTES


def estimate(trace: "Trace", needs: Mapping[str, Iterable[str]]) -> MemoryEstimate:
    """Estimate the memory to load ``needs`` (canonical table -> columns) from ``trace``.

    Only ``row_count`` and the export's string-table size are used, so nothing is loaded.
    """
    costs: list[TableCost] = []
    for table, cols in needs.items():
        columns = list(dict.fromkeys(cols))
        rows = int(trace.row_count(table))
        per_row = sum(column_bytes(table, c) for c in columns)
        costs.append(TableCost(table, rows, len(columns), rows * per_row))
    return MemoryEstimate(tuple(costs), _strings_bytes(trace) if needs else 0)


def _strings_bytes(trace: "Trace") -> int:
    export = getattr(trace, "export", None)
    if export is None or "StringIds" not in getattr(export, "table_names", ()):
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


def enforce_limit(trace: "Trace", needs: Mapping[str, Iterable[str]], max_memory: int | None) -> MemoryEstimate:
    """Raise :class:`InputError` (exit 3) when loading ``needs`` would take more than the limit.

    ``max_memory`` is ``--max-memory`` in bytes; None means 80 % of the available memory.
    Returns the estimate when it fits.
    """
    explicit = max_memory is not None
    limit = max_memory if explicit else default_limit()
    cost = estimate(trace, needs)
    if limit is None or cost.total <= limit:
        return cost
    label = getattr(trace, "label", "trace")
    parts = ", ".join(f"{t.table} {t.rows:,} rows x {t.columns} columns {human(t.bytes)}" for t in cost.biggest())
    where = "--max-memory" if explicit else "80 % of the available memory (set --max-memory to change it)"
    raise InputError(f"{label}: the run needs about {human(cost.total)} (it loads {parts}) but the limit is {human(limit)} "
                     f"({where}); read less with --select (fewer rules read fewer tables and columns), "
                     "or run on a machine with more memory")
