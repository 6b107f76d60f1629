"""Printing a stats report: ``table`` (nsys's column layout), ``csv`` and ``json`` (the bare array nsys prints)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from nsys_rules.formatters.fitted import fitted_table
from nsys_rules.textsafe import csv_cell, json_safe, terminal_safe
from nsys_rules.stats.common import StatsResult

FORMATS = ("table", "csv", "json")

#: ``--timeunit`` names nsys accepts, and the unit's suffix and size in ns.
TIME_UNITS = {"nsec": ("ns", 1), "nanoseconds": ("ns", 1), "usec": ("us", 1_000), "microseconds": ("us", 1_000),
              "msec": ("ms", 1_000_000), "milliseconds": ("ms", 1_000_000), "sec": ("s", 1_000_000_000),
              "seconds": ("s", 1_000_000_000)}
#: File name extension of each format for ``-o``.
EXTENSIONS = {"table": "txt", "csv": "csv", "json": "json"}


def in_time_unit(result: StatsResult, unit: str) -> StatsResult:
    """The report with its ``(ns)`` columns in ``unit`` (renamed ``(us)``, ``(ms)``, ``(s)``); ns stays as is.

    Values are divided, not rounded again: a microsecond column keeps the nanoseconds as its
    three decimals.
    """
    suffix, scale = TIME_UNITS[unit]
    if scale == 1:
        return result
    renamed = {c: c.replace("(ns)", f"({suffix})") for c in result.columns if c.endswith("(ns)")}

    def convert(value: Any) -> Any:
        return value / scale if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    rows = [{renamed.get(c, c): (convert(v) if c in renamed else v) for c, v in row.items()} for row in result.rows]
    return StatsResult([renamed.get(c, c) for c in result.columns], rows, result.reason, result.text_columns)

#: nsys shortens long names in its table (not in csv/json) to this many characters, ending in "…".
TABLE_NAME_WIDTH = 100


def render(result: StatsResult, fmt: str, width: int | None = None) -> str:
    """The report as text in ``fmt``; an empty report is ``[]`` in json and nothing elsewhere.

    ``width``: the table's columns on a terminal or a pipe (None: nsys's layout, as ``-o`` files keep
    it). A table wider than that has its widest name column cut to fit; when the numbers alone do
    not fit, each row is a block (its name, then ``column value`` pairs), so no line passes ``width``.
    """
    if fmt == "json":
        # Strict JSON: a NaN statistic is null, a lone surrogate (a name's non-UTF-8 byte) its \xHH escape.
        return json.dumps(json_safe(result.rows), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if fmt == "csv":
        return _csv(result)
    text = _table(result)
    if width is None or all(len(line) <= width for line in text.splitlines()):
        return text
    return _narrow(result, width)


def _narrow(result: StatsResult, width: int) -> str:
    cells = [[_cell(row[c], c) for c in result.columns] for row in result.rows]
    texts = [i for i, c in enumerate(result.columns) if c in result.text_columns]
    name = max(texts, key=lambda i: max(len(r[i]) for r in cells)) if texts else len(result.columns) - 1
    # The full name in a block (nsys's 100-character cut is for its one-line rows).
    full = [[terminal_safe(str(row[c]), newlines=False) if i == name else cell
             for i, (c, cell) in enumerate(zip(result.columns, cells_row, strict=True))]
            for row, cells_row in zip(result.rows, cells, strict=True)]
    return "\n".join(fitted_table(result.columns, full, width, name)) + "\n"


def _csv(result: StatsResult) -> str:
    if not result.rows:
        return ""
    out = io.StringIO()
    # Like nsys: plain header and numbers, quotes only where a name needs them (commas, quotes); a name
    # a spreadsheet would run as a formula, or with control characters, is made inert (csv_cell).
    writer = csv.writer(out, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    writer.writerow(result.columns)
    for row in result.rows:
        writer.writerow([csv_cell(row[c]) for c in result.columns])
    return out.getvalue()


def _cell(value: Any, column: str) -> str:
    if isinstance(value, bool) or value is None or value == "":
        return ""
    if isinstance(value, int):
        return f"{value:,}" if _grouped(column) else str(value)
    if isinstance(value, float):
        # One decimal as nsys prints ns; MB to the byte; a larger time unit to the nanosecond.
        digits = 3 if "(MB)" in column else {"(us)": 3, "(ms)": 6, "(s)": 9}.get(column[column.rfind("("):], 1)
        return f"{value:,.{digits}f}"
    text = terminal_safe(str(value), newlines=False)  # a name holding a newline must not start a fake row
    return text if len(text) <= TABLE_NAME_WIDTH else text[:TABLE_NAME_WIDTH - 1] + "…"


def _grouped(column: str) -> bool:
    # Ids (PID, TID, DevId) print plain; counts and durations with thousands separators.
    return column not in ("PID", "TID", "DevId")


def _table(result: StatsResult) -> str:
    if not result.rows:
        return ""
    cells = [[_cell(row[c], c) for c in result.columns] for row in result.rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(result.columns)]
    left = [c in result.text_columns for c in result.columns]

    def line(values: list[str]) -> str:
        parts = [v.ljust(w) if is_left else v.rjust(w) for v, w, is_left in zip(values, widths, left, strict=True)]
        return " " + "  ".join(parts).rstrip()

    header = [c.center(w) if is_left else c.rjust(w) for c, w, is_left in zip(result.columns, widths, left, strict=True)]
    lines = [" " + "  ".join(header).rstrip(), " " + "  ".join("-" * w for w in widths)]
    lines += [line(r) for r in cells]
    return "\n".join(lines) + "\n"
