"""Rows in start order, whatever order the export stored them in.

nsys 2025.6 and later may write an export's rows in any order (SQLite, Arrow, Parquet alike), and
older exports keep the API table's rows of several processes apart. Everything above the loaders
has a fast path for rows that come in start order and a slower one, with sorts and searches, for
rows that do not: a shuffled 1M-kernel trace spent 2.2x the time of the ordered one, most of it in
those sorts, repeated by every reader. A table read in start order once (a stable sort, so rows
that start at once keep the order the file gave them, and every read of a table, whatever its
columns, puts its rows in the same order) takes the fast paths everywhere.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nsys_rules.malloc_tune import CHUNK_ROWS

#: The column rows are ordered by; :meth:`ColumnarExport.read` reads it with every read of a table that has it.
ORDER_COLUMN = "start"


def rising(values: np.ndarray) -> bool:
    """Whether ``values`` never decrease, checked in chunks (no row-length mask)."""
    for lo in range(0, len(values) - 1, CHUNK_ROWS):
        part = values[lo:lo + CHUNK_ROWS + 1]
        if not bool((part[1:] >= part[:-1]).all()):
            return False
    return True


def put_in_start_order(columns: dict[str, Any]) -> None:
    """Puts the rows of ``columns`` (name -> a table's column, all of one length) in start order, in place
    (stable); nothing to do when they are already. Each column is replaced by its copy in that order, one at a
    time, so the old one is freed before the next is copied; a one-value column stays its zero-stride view,
    a categorical keeps its categories."""
    import pandas as pd

    start = columns.get(ORDER_COLUMN)
    if start is None or rising(np.asarray(start)):
        return
    order = np.argsort(np.asarray(start), kind="stable")
    del start
    for name in list(columns):
        values = columns.pop(name)  # the dict's reference gone: the source is freed once its copy is made
        if isinstance(values, pd.Categorical):
            columns[name] = pd.Categorical.from_codes(values.codes[order], dtype=values.dtype)
        elif isinstance(values, np.ndarray):
            columns[name] = values if values.strides == (0,) else values[order]
        else:
            columns[name] = np.asarray(values)[order]
        del values
