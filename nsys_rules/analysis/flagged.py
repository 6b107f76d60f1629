"""Flagged rows (copies, memsets, gaps, low-use regions) cut into finding-sized groups.

The rules that match ``nsys analyze`` flag rows one by one, as nsys does, and report them
``all`` (one finding per row), ``group`` (one per key) or ``auto`` (per row while a group is
small). Grouping only: what is flagged, and the words, stay in the rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import pandas as pd

#: The values of the parity rules' ``report`` option.
REPORT_MODES = ("auto", "group", "all")


@dataclass(frozen=True)
class FlaggedGroup:
    """Flagged rows of one group (or one row): what one finding reports."""

    key: tuple[Any, ...]  # the group_by columns' values, as pandas gives them (numpy scalars)
    rows: pd.DataFrame  # sorted by start; columns start, end + the rule's own
    single: bool  # one flagged row per finding
    ordinal: int = -1  # the row's position in its group when single: keeps fingerprints distinct and stable

    @property
    def key_suffix(self) -> str:
        """What to add to a finding's fingerprint key: ``#<n>`` for the n-th row of a group, else nothing."""
        return f"#{self.ordinal}" if self.single else ""

    @property
    def start(self) -> int:
        """First flagged instant: the finding's ``start_ns``."""
        return int(self.rows["start"].min())

    @property
    def end(self) -> int:
        """Last flagged instant: the finding's ``end_ns``."""
        return int(self.rows["end"].max())


def split_flagged(rows: pd.DataFrame, group_by: Sequence[str], mode: str, max_findings: int) -> Iterator[FlaggedGroup]:
    """Turn flagged rows into finding-sized groups.

    ``all``: one group per row. ``group``: one per ``group_by`` key, whose time range runs
    from its first to its last flagged row (so every flagged row overlaps its finding).
    ``auto``: per row while a group has at most ``max_findings`` rows, else per group.
    """
    if mode not in REPORT_MODES:
        raise ValueError(f"report must be one of {', '.join(REPORT_MODES)}, not {mode!r}")
    if rows.empty:
        return
    rows = rows.sort_values("start", kind="stable")
    keys = list(group_by)
    grouped = rows.groupby(keys, sort=True, observed=True, dropna=False) if keys else [((), rows)]
    for key_t, grp in grouped:  # pandas 2 keys a group-by over a list of columns by tuples, one column too
        if mode == "all" or (mode == "auto" and len(grp) <= max_findings):
            for i in range(len(grp)):
                yield FlaggedGroup(key_t, grp.iloc[i:i + 1], True, i)
        else:
            yield FlaggedGroup(key_t, grp, False)
