"""Shared pieces of the ``nsys stats`` reports: grouped statistics, rounding, names, the result type.

Every report computes the same statistics over groups of durations (or sizes): total, count,
mean, median, min, max and the sample standard deviation, as NVIDIA's reports do in SQL with
their own ``median``/``stdev`` aggregates. Here it is one vectorized pass per report: sort the
values by (group, value) once, then read totals, extremes, medians and percentiles off the
group boundaries, so a million kernels cost one sort.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

#: nsys strips a version suffix only when it is ``_v`` plus four characters at the very end
#: (its SQL tests ``substr(name, -6, 2) = '_v'``): ``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``,
#: but ``cudaGraphLaunch_v10000`` and ``cuMemcpyDtoHAsync_v2`` keep theirs.
_NSYS_VERSION_SUFFIX = re.compile(r"_v\d{4}$")

#: Quantiles ``--percentiles`` adds (beyond nsys).
PERCENTILES = (95, 99)


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


@dataclass(frozen=True)
class GroupStats:
    """Per-group statistics, one array entry per non-empty group, in group order.

    ``group`` holds the group index each entry belongs to; medians and percentiles
    interpolate linearly between the two nearest ranks (the median of an even count is the
    mean of the middle two, as nsys prints it).
    """

    group: np.ndarray
    total: np.ndarray
    count: np.ndarray
    mean: np.ndarray
    median: np.ndarray
    minimum: np.ndarray
    maximum: np.ndarray
    stddev: np.ndarray
    percentiles: dict[int, np.ndarray]


def group_stats(codes: np.ndarray, values: np.ndarray, n_groups: int,
                percentiles: Sequence[int] = ()) -> GroupStats:
    """Statistics of ``values`` grouped by ``codes`` (ints in ``[0, n_groups)``); empty groups are left out."""
    codes = np.asarray(codes, dtype=np.int64)
    values = np.asarray(values, dtype=np.int64)
    counts_all = np.bincount(codes, minlength=n_groups) if len(codes) else np.zeros(n_groups, np.int64)
    present = np.flatnonzero(counts_all)
    count = counts_all[present]
    ordered = _sorted_by_group(codes, values, n_groups)
    starts = np.zeros(len(present), np.int64)
    if len(present) > 1:
        starts[1:] = np.cumsum(count)[:-1]
    ends = starts + count - 1
    if len(present):
        total = np.add.reduceat(ordered, starts)
        minimum = ordered[starts]
        maximum = ordered[ends]
    else:
        total = minimum = maximum = np.zeros(0, np.int64)
    mean = total / np.maximum(count, 1)
    # Two-pass variance: the deviations from each group's own mean, summed per group.
    if len(present):
        group_of_sorted = np.repeat(np.arange(len(present)), count)
        deviation = ordered - mean[group_of_sorted]
        squares = np.add.reduceat(deviation * deviation, starts)
    else:
        squares = np.zeros(0)
    stddev = np.where(count > 1, np.sqrt(squares / np.maximum(count - 1, 1)), 0.0)
    median = _quantile(ordered, starts, count, 0.5)
    pct = {p: _quantile(ordered, starts, count, p / 100.0) for p in percentiles}
    return GroupStats(present, total.astype(np.int64), count, mean, median, minimum, maximum, stddev, pct)


def _sorted_by_group(codes: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """``values`` ordered by (group, value).

    One plain sort of a packed int64 key (group in the high bits, value above the minimum in the
    low bits) is several times faster than ``np.lexsort`` on a million rows; the packed key falls
    back to lexsort when it would not fit in 63 bits.
    """
    if not len(values):
        return values
    low = int(values.min())
    span = int(values.max()) - low + 1
    if span * max(n_groups, 1) < 2**62:
        key = codes * span + (values - low)
        key.sort()
        return key % span + low
    return values[np.lexsort((values, codes))]


def _quantile(ordered: np.ndarray, starts: np.ndarray, count: np.ndarray, q: float) -> np.ndarray:
    if not len(count):
        return np.zeros(0)
    position = (count - 1) * q
    low = np.floor(position).astype(np.int64)
    high = np.ceil(position).astype(np.int64)
    lo_value = ordered[starts + low].astype(np.float64)
    hi_value = ordered[starts + high].astype(np.float64)
    return lo_value + (hi_value - lo_value) * (position - low)


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


def combine_codes(*arrays: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
    """Dense group ids for rows keyed by several columns, the number of groups, and one row index per group.

    Each column is factorized and folded into the running key, which is re-factorized at every
    step so the key never exceeds the row count (no overflow whatever the cardinalities).
    """
    n = len(arrays[0])
    key = np.zeros(n, np.int64)
    for arr in arrays:
        codes, uniq = _factorize(arr)
        key = key * max(len(uniq), 1) + codes
        key, _ = _factorize(key)
    if not n:
        return key, 0, np.zeros(0, np.int64)
    # Factorized codes number groups in order of first appearance, so a group's first row is
    # where the running maximum of the codes steps up (no sort needed).
    running = np.maximum.accumulate(key)
    first = np.flatnonzero(np.concatenate(([True], running[1:] > running[:-1])))
    return key, len(first), first


def _factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import pandas as pd

    codes, uniq = pd.factorize(np.asarray(values), use_na_sentinel=False)
    return codes.astype(np.int64), np.asarray(uniq)


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
        out.sort(key=lambda r, c=column: _sortable(r[c]), reverse=descending)
    return out


def _sortable(value: Any) -> Any:
    # Strings sort by code point, which is SQLite's binary collation of UTF-8.
    return (1, 0.0) if value == "" or value is None else (0, value)
