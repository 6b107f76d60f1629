"""What every export format gives the trace model: the interface, and the constants the formats share.

:class:`Export` is the interface :class:`nsys_rules.model.trace.Trace` and the rest of the code use:
table and column names, row counts, canonical frames, small metadata rows and the string
table. No caller writes SQL; each format answers in its own way (SQLite through ADBC and
``sqlite3``, ``nsys export --type=parquetdir|arrowdir`` folders through pyarrow).

:class:`~.columnar.ColumnarExport` (:mod:`.columnar`) holds what does not depend on the format:
turning raw columns into canonical typed frames; :mod:`.strings` its ``StringIds`` lookups.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from nsys_rules.loaders.tables import Table

if TYPE_CHECKING:
    import pandas as pd

#: Longest string kept from ``StringIds``; kernel names (deep C++ templates) stay far below it.
MAX_STRING = 65536
#: Metadata rows read per table: real exports write a few hundred (one per environment variable).
MAX_META_ROWS = 100_000

#: Value stored for a NULL in an optional integer column (ids are never negative in nsys).
NULL_INT = -1

#: A GPU's ``deviceId`` is its CUDA device index, numbered from 0 per host (the public corpus tops out
#: at 7): an id at or beyond this is damage, whatever the column's type can hold.
MAX_DEVICE_ID = 2**16
#: Canonical columns that hold a GPU's deviceId.
DEVICE_COLUMNS = frozenset({"device_id", "src_device_id", "dst_device_id"})

#: A source holds nsys data when it has StringIds and at least one table of these families.
NSYS_PREFIXES = ("TARGET_INFO_", "META_DATA_", "EXPORT_META_DATA", "CUPTI_ACTIVITY_KIND_", "NVTX_EVENTS",
                 "ThreadNames", "OSRT_", "PROCESSES", "ANALYSIS_", "ENUM_NSYS_", "PROFILER_OVERHEAD")


class ReadMeter(Protocol):
    """What an export's reads are priced against: the memory limit (``--max-memory``), given when the trace opens.

    It prices an export and its row counts, never a trace; :class:`nsys_rules.loaders.read_guard.ReadGuard`
    is nsys-rules' own. Each method raises :class:`~nsys_rules.errors.InputError` (exit 3, one line saying
    how much is needed and how to need less) instead of letting a read pass the limit.
    """

    label: str

    def plan(self, export: "Export", needs: Mapping[str, Iterable[str]]) -> object:
        """Price the engine's planned load (canonical table -> columns) at once, before any of it is read."""
        ...

    def admit(self, export: "Export", table: str, columns: Iterable[str]) -> None:
        """Price a read of canonical ``columns`` of ``table`` the plan did not cover, before it happens."""
        ...

    def admit_bytes(self, what: str, nbytes: int) -> None:
        """Price a read its caller priced itself (``what``: its name), ``nbytes`` at its peak."""
        ...

    def check_read(self, what: str, nbytes: int) -> None:
        """A read under way holds ``nbytes``: stop it when that passes what is left (a file whose headers lied)."""
        ...


@runtime_checkable
class Export(Protocol):
    """An open nsys export, whatever its format. Opened read-only; never written."""

    path: Path
    #: What the loader had to drop or patch, one line each.
    damage: list[str]
    #: The memory guard its reads are priced against, handed over when the trace is opened
    #: (:func:`nsys_rules.inputs.open_trace`); None: reads are not metered (a trace built by hand).
    meter: ReadMeter | None
    #: Names of the tables the export holds.
    table_names: frozenset[str]
    #: Whether reading two big tables at once in threads pays (see ``Trace.preload``).
    parallel_reads: bool

    def columns_of(self, table: str) -> tuple[str, ...]:
        """Column names of a source table (empty when absent)."""
        ...

    def source_of(self, table: Table) -> str | None:
        """The source table backing canonical ``table``, when the export has a usable one."""
        ...

    def count(self, table: str) -> int:
        """Row count of a source table (0 when absent)."""
        ...

    def read(self, table: Table, columns: Iterable[str]) -> pd.DataFrame:
        """Canonical ``columns`` of ``table`` as typed pandas columns."""
        ...

    def rows(self, table: str, columns: Sequence[str], limit: int = MAX_META_ROWS) -> list[tuple[Any, ...]]:
        """The rows (at most ``limit``) of a small source table (metadata), as Python values in ``columns`` order.

        Text values are cut to :data:`MAX_STRING` characters before they reach Python where the format allows.

        A column the table lacks reads as None; an absent table gives no rows.
        """
        ...

    def strings_size(self) -> tuple[int, int]:
        """(rows, bytes of text) of ``StringIds``, for memory estimates; read cheaply, may be approximate."""
        ...

    def strings_containing(self, needle: str, limit: int) -> list[str]:
        """Up to ``limit`` ``StringIds`` values that contain ``needle``."""
        ...

    def resolve_strings(self, ids: np.ndarray, what: str) -> pd.Categorical:
        """``StringIds`` references as a categorical of names."""
        ...

    def close(self) -> None:
        """Release the files."""
        ...


def has_nsys_tables(names: Iterable[str]) -> bool:
    """True when ``names`` include a table of an nsys family (besides StringIds)."""
    return any(t.startswith(NSYS_PREFIXES) for t in names)
