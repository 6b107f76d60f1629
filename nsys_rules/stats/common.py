"""Shared pieces of the ``nsys stats`` reports: rounding, names, columns, the result type.

Every report computes the same statistics over groups of durations (or sizes): total, count,
mean, median, min, max and the sample standard deviation, as NVIDIA's reports do in SQL with
their own ``median``/``stdev`` aggregates: :func:`nsys_rules.analysis.grouped.group_stats`, one
sort per report.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from nsys_rules.analysis.grouped import GroupStats
from nsys_rules.loaders.tables import TABLES

if TYPE_CHECKING:
    import pandas as pd

    from nsys_rules.model.trace import Trace

#: nsys strips a version suffix only when it is ``_v`` plus four characters at the very end
#: (its SQL tests ``substr(name, -6, 2) = '_v'``): ``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``,
#: but ``cudaGraphLaunch_v10000`` and ``cuMemcpyDtoHAsync_v2`` keep theirs.
_NSYS_VERSION_SUFFIX = re.compile(r"_v\d{4}$")

#: Quantiles ``--percentiles`` adds (beyond nsys).
PERCENTILES = (95, 99)


def report_columns(columns: list[str], percentiles: bool, unit: str = "ns", names: int = 1) -> list[str]:
    """A report's columns; with ``percentiles``, a ``P95 (<unit>)`` column per :data:`PERCENTILES` goes
    before the last ``names`` columns (the name columns stay last, as in nsys)."""
    if not percentiles:
        return list(columns)
    return columns[:-names] + [f"P{p} ({unit})" for p in PERCENTILES] + columns[-names:]
def api_frame(trace: Trace, columns: list[str]) -> pd.DataFrame:
    """The api table as ``nsys stats`` counts it.

    The trace's own api frame leaves out the second row ``--cudabacktrace`` writes for each call it
    took a backtrace of (eventClass 67: the rules must not count a call twice); ``nsys stats``
    counts both (``cuda_api_sum``, ``cuda_kern_exec_sum`` match it only so). Read apart from the
    trace's cache, and only where the export has such rows.
    """
    table = TABLES["api"]
    export = trace.export
    drop = table.drop_rows
    if not getattr(export, "row_drops", False) or drop is None or drop.only_with not in export.table_names:
        return trace.frame("api", columns)
    if trace.meter is not None:
        trace.meter.admit(export, "api", columns)
    export.row_drops = False  # type: ignore[attr-defined]
    try:
        return export.read(table, columns)
    finally:
        export.row_drops = True  # type: ignore[attr-defined]


def nsys_api_name(name: str) -> str:
    """The API name as ``nsys stats`` prints it (only a 4-digit ``_vNNNN`` suffix removed)."""
    return _NSYS_VERSION_SUFFIX.sub("", name)


@dataclass
class StatsResult:
    """One report's output: ordered column names and rows (JSON-ready values), or why it is empty.

    ``reason`` is set when the report has no rows (missing table, nothing in the window); the
    command prints it on stderr and ``[]`` on stdout, as nsys does.
    """

    columns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = None
    text_columns: tuple[str, ...] = ()  # left-aligned in the table output (names)


def round_half_up(values: np.ndarray | float, digits: int = 1) -> np.ndarray:
    """SQLite's ``round(x, digits)``: halves go away from zero (Python's ``round`` would go to even)."""
    scale = 10.0 ** digits
    arr = np.asarray(values, dtype=np.float64)
    return np.sign(arr) * np.floor(np.abs(arr) * scale + 0.5) / scale


def percent(total: np.ndarray) -> np.ndarray:
    """``Time (%)``: each row's share of the summed totals, one decimal."""
    grand = float(np.sum(total))
    if grand <= 0:
        return np.zeros(len(total))
    return round_half_up(np.asarray(total, dtype=np.float64) * 100.0 / grand, 1)


def python_values(array: np.ndarray, kind: str) -> list[Any]:
    """JSON-ready Python values: ``int`` columns as ints, ``float`` columns as floats (NaN -> ``''``, as nsys)."""
    if kind == "int":
        return [int(v) for v in np.asarray(array, dtype=np.int64).tolist()]
    out: list[Any] = []
    for v in np.asarray(array, dtype=np.float64).tolist():
        out.append("" if math.isnan(v) else float(v))
    return out


def rows_from_columns(columns: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Column lists -> a list of row dicts, keys in column order."""
    names = list(columns)
    if not names:
        return []
    return [dict(zip(names, values, strict=True)) for values in zip(*(columns[n] for n in names), strict=True)]


def duration_summary(stats: GroupStats, names: list[str], name_column: str, count_column: str,
                     percentiles: bool, *, with_percent: bool = True) -> dict[str, list[Any]]:
    """The columns shared by the duration summaries (kernels, API calls, memory ops, NVTX ranges).

    ``names`` has one entry per entry of ``stats``; the name column comes last, as in nsys.
    """
    cols: dict[str, list[Any]] = {}
    if with_percent:
        cols["Time (%)"] = python_values(percent(stats.total), "float")
    cols["Total Time (ns)"] = python_values(stats.total, "int")
    cols[count_column] = python_values(stats.count, "int")
    cols["Avg (ns)"] = python_values(round_half_up(stats.mean), "float")
    cols["Med (ns)"] = python_values(round_half_up(stats.median), "float")
    cols["Min (ns)"] = python_values(stats.minimum, "int")
    cols["Max (ns)"] = python_values(stats.maximum, "int")
    cols["StdDev (ns)"] = python_values(round_half_up(stats.stddev), "float")
    if percentiles:
        for p in PERCENTILES:
            cols[f"P{p} (ns)"] = python_values(round_half_up(stats.percentiles[p]), "float")
    cols[name_column] = names
    return cols


def order_rows(rows: list[dict[str, Any]], *keys: tuple[str, bool]) -> list[dict[str, Any]]:
    """Sort rows by ``(column, descending)`` keys, most significant first; stable for ties."""
    out = list(rows)
    for column, descending in reversed(keys):
        out.sort(key=_sort_key(column), reverse=descending)
    return out


def _sort_key(column: str) -> Callable[[dict[str, Any]], Any]:
    return lambda row: _sortable(row[column])


def _sortable(value: Any) -> Any:
    # Strings sort by code point, which is SQLite's binary collation of UTF-8.
    return (1, 0.0) if value == "" or value is None else (0, value)
