"""Column values as the trace keeps them: ids holding one value throughout, string ids as dense codes, NULLs."""

from __future__ import annotations

from typing import Any

import numpy as np

#: Rows from which an id column holding one value throughout is kept as that value alone.
ONE_VALUE_ROWS = 4096


def one_value(values: Any) -> Any:
    """An integer column with one value in every row as a read-only view of that value (0 bytes per row).

    Ids often are: one process, one GPU, one stream, grid z and block z of 1, no graph node.
    A million-kernel trace holds a dozen such columns; frames and arrays built from them read
    the same values (the canonical frames are read-only under copy-on-write anyway).
    """
    if (not isinstance(values, np.ndarray) or values.dtype.kind not in "iub" or len(values) < ONE_VALUE_ROWS
            or values.strides == (0,)):
        return values
    if not all_equal(values):
        return values
    return np.broadcast_to(values[:1].copy(), values.shape)


def int16_if_fits(values: Any) -> Any:
    """An integer column as int16 when every value fits (a one-value view or another type: as it is)."""
    if (not isinstance(values, np.ndarray) or values.dtype.kind not in "iu" or values.dtype.itemsize <= 2
            or not len(values) or values.strides == (0,)):
        return values
    if int(values.min()) < -(2**15) or int(values.max()) >= 2**15:
        return values
    return values.astype(np.int16)


def all_equal(values: np.ndarray) -> bool:
    """Whether every value of an integer or boolean array is the same, without a row-length mask: a
    sample first (most columns that vary do so in it), then the minimum and maximum."""
    if len(values) < 2:
        return True
    first = values[0]
    if (values[::4093] != first).any():
        return False
    return bool(values.min() == values.max())


def dense_ids(picked: np.ndarray, rows: int) -> np.ndarray | None:
    """The distinct ids among ``picked`` (valid ids of a column of ``rows`` rows), sorted, through a table
    indexed by id instead of the sort inside ``np.unique``: StringIds ids are small dense integers. None
    when ``picked`` is empty or its ids are huge and sparse (odd exports): ``np.unique`` then."""
    if not len(picked):
        return None
    top = int(picked.max())
    if top > 4 * rows + 1_000_000:
        return None
    used = np.zeros(top + 1, bool)
    used[picked] = True
    return np.flatnonzero(used).astype(np.int64)


def dense_codes(ids: np.ndarray, valid: np.ndarray, all_valid: bool) -> tuple[np.ndarray, np.ndarray]:
    """Distinct valid ids (sorted) and each row's index into them (-1 for invalid rows).

    StringIds ids are small dense integers, so a lookup table indexed by id replaces the
    sort inside ``np.unique``; huge sparse ids (odd exports) fall back to ``np.unique``.
    """
    picked = ids if all_valid else ids[valid]
    if not len(picked):
        return np.empty(0, np.int64), np.full(len(ids), -1, np.int32)
    uniq = dense_ids(picked, len(ids))
    if uniq is not None:
        code_of = np.full(int(uniq[-1]) + 1, -1, np.int32)
        code_of[uniq] = np.arange(len(uniq), dtype=np.int32)
        inverse = code_of[ids.clip(0)] if not all_valid else code_of[ids]
    else:
        uniq, inv = np.unique(picked, return_inverse=True)
        inverse = np.full(len(ids), -1, np.int32)
        inverse[valid] = inv
    if not all_valid:
        inverse[~valid] = -1
    return uniq, inverse


def isnull(values: np.ndarray) -> np.ndarray:
    """Which values are NULL (NaN, None): never for integer columns."""
    if values.dtype.kind in "iub":
        return np.zeros(len(values), bool)
    if values.dtype.kind == "f":
        return np.isnan(values)
    import pandas as pd  # here, not at import: the read-ahead reads while pandas is still importing

    return pd.isna(values)
