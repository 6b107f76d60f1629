"""Statistics per group: counts, quantiles, sums and spreads of values split by a group id, in one sort.

Used by the rules (kernel-tail's per-kernel percentiles) and the ``nsys stats`` reports alike.
Groups are dense ids ``0..G-1`` (:func:`group_ids` makes them from key columns). Values are
sorted by (group, value) once, by one sort of a packed int64 key where they are whole numbers
(:func:`packed_sort`), so a million values cost one sort and no Python loop per group; every
statistic is then read off the group boundaries. Quantiles interpolate linearly between the two
nearest ranks, as numpy's default (the median of an even count is the mean of the middle two,
as nsys prints it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Iterable, Sequence, SupportsInt

import numpy as np
import pandas as pd

from nsys_rules.malloc_tune import CHUNK_ROWS


# -- group ids --------------------------------------------------------------------------------
def key_int(key: Hashable) -> int:
    """A group key of an integer column (a pandas group-by's, or a frame's index label) as int.

    pandas types every key as ``Hashable``; this is ``int(key)`` for the numbers it holds, a
    ``TypeError`` for anything else.
    """
    if not isinstance(key, SupportsInt):
        raise TypeError(f"group key {key!r} is not a number")
    return int(key)


def group_ids(columns: Sequence[np.ndarray]) -> np.ndarray:
    """Dense ids 0..G-1 of the distinct rows of ``columns``, in order of first appearance (int64).

    Integer columns are folded into one int64 key by their value ranges (re-factorizing only when
    the key would grow past 2**40), then factorized once: a pandas group-by over eight columns
    costs several times more. Other columns (names, floats) are factorized first, a missing value
    being a group of its own.
    """
    n = len(columns[0]) if len(columns) else 0
    ids = np.zeros(n, np.int64)
    if not n:
        return ids
    keys = []  # (values, lowest, span) of each column that splits rows
    for col in columns:
        col = np.asarray(col)
        if col.dtype.kind not in "iu":
            col = pd.factorize(col, use_na_sentinel=False)[0].astype(np.int64)
        if col.strides == (0,):  # one value in every row (loaders.columns.one_value): splits nothing
            continue
        low = int(col.min())
        span = int(col.max()) - low + 1
        if span > 1:
            keys.append((col, low, span))
    if math.prod(span for _, _, span in keys) < (1 << 40):
        # Every column folded a chunk at a time: the chunk stays in the cache across the columns.
        for lo in range(0, n, CHUNK_ROWS):
            part = ids[lo:lo + CHUNK_ROWS]
            for col, low, span in keys:
                part *= span
                part += col[lo:lo + CHUNK_ROWS]
                if low:
                    part -= low
        return pd.factorize(ids)[0].astype(np.int64, copy=False)
    bound = 1  # every id so far is below this: no scan of the ids per column
    for col, low, span in keys:
        if bound * span >= (1 << 40):
            ids = pd.factorize(ids)[0].astype(np.int64)
            bound = int(ids.max()) + 1
            if bound * span >= (1 << 62):
                codes = pd.factorize(col)[0].astype(np.int64)
                col, low, span = codes, 0, int(codes.max()) + 1
        ids *= span  # in place: the key columns of a million rows would each be another temporary
        ids += col
        if low:
            ids -= low
        bound *= span
    return pd.factorize(ids)[0].astype(np.int64, copy=False)


def first_rows(ids: np.ndarray) -> np.ndarray:
    """Each group's first row, for ids numbered in order of first appearance (:func:`group_ids`).

    A group's first row is where the id first exceeds every id before it: no sort needed.
    """
    if not len(ids):
        return np.zeros(0, np.int64)
    opens = np.empty(len(ids), bool)
    opens[0] = True
    np.greater(ids[1:], np.maximum.accumulate(ids)[:-1], out=opens[1:])
    return np.flatnonzero(opens)


def column_codes(column: pd.Series) -> np.ndarray:
    """Integer values of a key column: category codes for names (NULL = -1), -1 for missing numbers."""
    if isinstance(column.dtype, pd.CategoricalDtype):  # narrow codes: group_ids widens as it folds
        return column.array.codes  # a view (``.cat.codes`` copies them)
    if column.dtype.kind in "iu":  # plain numpy integers: no NULLs to fill, no copy
        return column.to_numpy()
    return column.fillna(-1).to_numpy().astype(np.int64)


# -- sorting by group -------------------------------------------------------------------------
@dataclass(frozen=True)
class PackedKey:
    """Rows sorted by (group, value) as one int64 key: ``group << shift | (value - low)``.

    ``key`` is sorted; :meth:`values` gives the sorted values back. Searching ``group << shift |
    (v - low)`` finds where value ``v`` falls inside a group.
    """

    key: np.ndarray
    shift: int
    low: int

    @property
    def mask(self) -> int:
        """The bits of the key that hold the value."""
        return (1 << self.shift) - 1

    def bounds(self, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows per group and each group's first row (a search per group, not a count of every row)."""
        edges = np.searchsorted(self.key, np.arange(n_groups + 1, dtype=np.int64) << self.shift)
        return np.diff(edges), edges[:-1]

    def values(self) -> np.ndarray:
        """The sorted values, in place of the key (the key is no longer usable afterwards)."""
        key = self.key
        key &= self.mask
        if self.low:
            key += self.low
        return key


def packed_sort(group: np.ndarray, values: np.ndarray) -> PackedKey | None:
    """``values`` sorted by (group, value) as a :class:`PackedKey`; None when they are not whole numbers or
    group and value do not fit 62 bits together.

    One sort of one int64 key instead of a two-key lexsort (several times faster on a million
    rows), built in place.
    """
    if not len(values):
        return None
    ints = values.astype(np.int64, copy=False)
    if not (ints is values or np.array_equal(ints, values)):
        return None
    low = int(ints.min())
    shift = max(1, (int(ints.max()) - low).bit_length())
    if shift + max(1, int(group.max()).bit_length()) > 62:
        return None
    key = np.left_shift(group, shift, dtype=np.int64)
    key += ints  # the value bits are zero: the same as |=
    if low:
        key -= low
    del ints
    key.sort()
    return PackedKey(key, shift, low)


def sorted_by_group(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` ordered by (group, value) (int64 for whole numbers, else their own type)."""
    packed = packed_sort(group, values)
    if packed is not None:
        return packed.values()
    return values[np.lexsort((values, group))]


def packed_lexsort(keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """``np.lexsort(keys)`` (last key first), by one stable sort of a packed key when they fit.

    Non-negative whole-number keys whose bit widths add up to 62 or less pack into one int64:
    a single sort instead of one pass per key.
    """
    widths = []
    for key in keys:
        arr = np.asarray(key)
        if arr.dtype.kind not in "iuf" or not len(arr):
            return np.lexsort(keys)
        if arr.dtype.kind == "f" and not np.array_equal(arr.astype(np.int64), arr):
            return np.lexsort(keys)
        if arr.min() < 0:
            return np.lexsort(keys)
        widths.append(int(arr.max()).bit_length())
    if sum(widths) > 62:
        return np.lexsort(keys)
    packed = np.zeros(len(np.asarray(keys[0])), np.int64)  # one key at a time: no int64 copy of all at once
    shift = 0
    for key, width in zip(keys, widths, strict=True):
        arr = np.asarray(key)
        packed |= np.left_shift(arr.astype(np.int64) if arr.dtype.kind == "f" else arr, shift, dtype=np.int64)
        shift += width
    return np.argsort(packed, kind="stable")


# -- statistics ---------------------------------------------------------------------------
def quantiles(sorted_values: np.ndarray, first: np.ndarray, counts: np.ndarray, qs: Iterable[float],
              packed: PackedKey | None = None) -> np.ndarray:
    """Quantiles per group (one row per ``q``) of values sorted by (group, value), linear interpolation.

    ``first`` and ``counts`` locate each group; an empty group's entries are meaningless. With
    ``packed``, ``sorted_values`` is its key and only the entries read are unpacked.
    """
    out = []
    top = max(len(sorted_values) - 1, 0)  # an empty group after the last row reads the last row, not past it
    for q in qs:
        position = q * (counts - 1)
        low = np.floor(position).astype(np.int64)
        high = np.ceil(position).astype(np.int64)
        a = sorted_values[np.minimum(first + low, top)]
        b = sorted_values[np.minimum(first + high, top)]
        if packed is not None:
            a, b = (a & packed.mask) + packed.low, (b & packed.mask) + packed.low
        a, b = a.astype(np.float64), b.astype(np.float64)
        out.append(a + (b - a) * (position - low))
    return np.vstack(out) if out else np.empty((0, len(counts)))


def group_quantiles(group: np.ndarray, values: np.ndarray, qs: Iterable[float],
                    n_groups: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-group counts and quantiles of ``values``; groups are 0..n_groups-1 (by default up to the largest id)."""
    if n_groups is None:
        n_groups = int(group.max()) + 1 if len(group) else 0
    packed = packed_sort(group, values)
    if packed is not None:
        counts, first = packed.bounds(n_groups)
        return counts, quantiles(packed.values(), first, counts, qs)
    sorted_values = values[np.lexsort((values, group))].astype(np.float64)
    counts = np.bincount(group, minlength=n_groups)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return counts, quantiles(sorted_values, first, counts, qs)


def segment_sums(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Sum of ``values[bounds[i]:bounds[i + 1]]`` for each i (0 for empty segments), as float64."""
    counts = np.diff(bounds)
    out = np.zeros(len(counts))
    present = counts > 0
    if present.any():
        out[present] = np.add.reduceat(values, bounds[:-1][present])
    return out


def code_durations(codes: np.ndarray, start: np.ndarray, end: np.ndarray, n_codes: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per code ``0..n_codes-1``: how many rows carry it and their summed ``end - start`` (float64; rows
    with a code below 0 left out).

    Chunked: a bincount over every row copies the codes to int64 and the durations to float64,
    two row-length temporaries (18 MB each on 2.2M API calls). Durations are whole ns and their
    sums stay under 2**53, so the float sums are exact whatever the order.
    """
    counts = np.zeros(n_codes, np.int64)
    totals = np.zeros(n_codes, np.float64)
    for lo in range(0, len(codes), CHUNK_ROWS):
        part = codes[lo:lo + CHUNK_ROWS]
        length = np.subtract(end[lo:lo + CHUNK_ROWS], start[lo:lo + CHUNK_ROWS], dtype=np.int64)
        if len(part) and int(part.min()) < 0:
            known = part >= 0
            part, length = part[known], length[known]
        index = part.astype(np.intp)  # widened once for both counts (bincount widens on each call)
        counts += np.bincount(index, minlength=n_codes)
        totals += np.bincount(index, weights=length, minlength=n_codes)
    return counts, totals


def masked_durations(start: np.ndarray, end: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``end - start`` (int64) of the rows in ``mask``, in row order, built in chunks: no gathered
    temporary as long as the result."""
    out = np.empty(int(np.count_nonzero(mask)), np.int64)
    at = 0
    length = np.empty(min(len(mask), CHUNK_ROWS), np.int64)
    for lo in range(0, len(mask), CHUNK_ROWS):
        part = mask[lo:lo + CHUNK_ROWS]
        n = int(np.count_nonzero(part))
        if n:  # every row's length in the chunk, then one selection (two gathers cost more)
            np.subtract(end[lo:lo + CHUNK_ROWS], start[lo:lo + CHUNK_ROWS], out=length[:len(part)], dtype=np.int64)
            np.compress(part, length[:len(part)], out=out[at:at + n])
            at += n
    return out


def duration_sum(start: np.ndarray, end: np.ndarray, mask: np.ndarray | slice | None = None) -> int:
    """Sum of ``end - start`` over the rows in ``mask`` (all rows when None), as an exact int, in chunks:
    no row-length difference or gathered copies (8 MB each per million rows)."""
    if isinstance(mask, slice):
        start, end, mask = start[mask], end[mask], None
    total = 0
    for lo in range(0, len(start), CHUNK_ROWS):
        hi = lo + CHUNK_ROWS
        if mask is None:
            total += int(np.subtract(end[lo:hi], start[lo:hi], dtype=np.int64).sum())
        else:
            part = mask[lo:hi]
            total += int(np.subtract(end[lo:hi][part], start[lo:hi][part], dtype=np.int64).sum())
    return total


@dataclass(frozen=True)
class GroupStats:
    """Per-group statistics, one array entry per non-empty group, in group order.

    ``group`` holds the group index each entry belongs to.
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


def group_stats(codes: np.ndarray, values: np.ndarray, n_groups: int, percentiles: Sequence[int] = ()) -> GroupStats:
    """Total, count, mean, median, min, max, sample standard deviation and ``percentiles`` of ``values``
    grouped by ``codes`` (ints in ``[0, n_groups)``); empty groups are left out."""
    codes = np.asarray(codes, dtype=np.int64)
    values = np.asarray(values, dtype=np.int64)
    counts_all = np.bincount(codes, minlength=n_groups) if len(codes) else np.zeros(n_groups, np.int64)
    present = np.flatnonzero(counts_all)
    count = counts_all[present]
    ordered = sorted_by_group(codes, values) if len(values) else values
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
    # Two passes: the deviations from each group's own mean, summed per group.
    if len(present):
        group_of_sorted = np.repeat(np.arange(len(present)), count)
        deviation = ordered - mean[group_of_sorted]
        squares = np.add.reduceat(deviation * deviation, starts)
    else:
        squares = np.zeros(0)
    stddev = np.where(count > 1, np.sqrt(squares / np.maximum(count - 1, 1)), 0.0)
    if len(count):
        median, *rest = quantiles(ordered, starts, count, (0.5, *(p / 100.0 for p in percentiles)))
    else:
        median, rest = np.zeros(0), [np.zeros(0) for _ in percentiles]
    return GroupStats(present, total.astype(np.int64), count, mean, median, minimum, maximum, stddev,
                      dict(zip(percentiles, rest, strict=True)))
