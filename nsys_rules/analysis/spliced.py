"""A column of the GPU activity table kept as its biggest frame's own rows with a few others spliced in.

The activity table (:mod:`.activity`) holds nearly every row of one frame (the kernels) in that
frame's row order, with a few copies or memsets slotted in. Its row-number and correlation-id
columns are then that frame's row numbers and its own column with a few values in between: kept
as such (:class:`Spliced`), they cost nothing a row, where row-length copies cost 4 bytes a row
each for the whole run. Columns of one value in nearly every row (the stream, the kind) are its
zero-stride view with the few others spliced in. Callers index them (a slice, a mask or row
numbers) and get a plain array, or a narrower :class:`Spliced` for a slice; ``==`` and ``!=``
with a scalar give a mask; numpy functions see the whole column (``__array__``).
"""

from __future__ import annotations

from typing import Any, overload

import numpy as np


class Spliced:
    """``len(at) + len(base)`` values: ``values[j]`` at position ``at[j]`` (sorted), ``base`` in order elsewhere.

    ``base`` None stands for the row numbers 0, 1, ... of the base rows (as ``dtype``). Read-only.
    """

    def __init__(self, base: np.ndarray | None, rows: int, at: np.ndarray, values: np.ndarray,
                 dtype: Any, lo: int = 0, hi: int | None = None) -> None:
        self.base, self.rows, self.at, self.values, self.dtype = base, rows, at, values, np.dtype(dtype)
        self.lo, self.hi = lo, (rows + len(at) if hi is None else hi)

    def __len__(self) -> int:
        return self.hi - self.lo

    @property
    def shape(self) -> tuple[int]:
        """As an array's."""
        return (len(self),)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._values(self.lo, self.hi)
        return out if dtype is None else out.astype(dtype, copy=False)

    @overload
    def __getitem__(self, key: slice) -> Spliced: ...
    @overload
    def __getitem__(self, key: int | np.integer) -> Any: ...
    @overload
    def __getitem__(self, key: np.ndarray | list[int]) -> np.ndarray: ...

    def __getitem__(self, key: Any) -> Any:
        """A slice (of step 1): a narrower Spliced; one position: its value; a mask or row numbers: an array."""
        if isinstance(key, slice) and key.step in (None, 1):
            lo, hi, _ = key.indices(len(self))
            return Spliced(self.base, self.rows, self.at, self.values, self.dtype, self.lo + lo,
                           self.lo + max(lo, hi))
        if isinstance(key, (int, np.integer)):
            return self._at(np.array([key]))[0]
        key = np.asarray(key)
        if key.dtype.kind in "iu" and key.ndim == 1 and len(key) * 8 < len(self):
            return self._at(key)  # a few rows: each found among the spliced ones, no whole column
        return self._values(self.lo, self.hi)[key]

    # A mask, as an array's == and != give: not object's bool, which mypy holds every __eq__ to.
    def __eq__(self, other: object) -> np.ndarray:  # type: ignore[override]
        return self._compare(other, np.equal)

    def __ne__(self, other: object) -> np.ndarray:  # type: ignore[override]
        return self._compare(other, np.not_equal)

    __hash__ = None  # type: ignore[assignment]  # unhashable, as an array (== is elementwise)

    def _compare(self, other: Any, op: Any) -> np.ndarray:
        """``op(self, other)`` for a scalar ``other``: a base of one value (a zero-stride view) is compared once."""
        if not np.isscalar(other) or self.base is None or self.base.strides != (0,):
            return op(self._values(self.lo, self.hi), np.asarray(other) if not np.isscalar(other) else other)
        out = np.full(len(self), bool(op(self.base[0], other)) if self.rows else False)
        first, last = (int(i) for i in np.searchsorted(self.at, [self.lo, self.hi], side="left"))
        out[self.at[first:last] - self.lo] = op(self.values[first:last], other)
        return out

    def tolist(self) -> list[Any]:
        """The values as a list."""
        return self._values(self.lo, self.hi).tolist()

    def _at(self, rows: np.ndarray) -> np.ndarray:
        pos = np.where(rows < 0, rows + len(self), rows).astype(np.int64) + self.lo
        k = np.searchsorted(self.at, pos, side="left")  # spliced rows before each position
        hit = k < len(self.at)
        hit[hit] = self.at[k[hit]] == pos[hit]
        base_rows = pos - k
        out = (base_rows if self.base is None else self.base[np.minimum(base_rows, max(self.rows - 1, 0))]).astype(
            self.dtype)
        out[hit] = self.values[k[hit]]
        return out

    def _values(self, lo: int, hi: int) -> np.ndarray:
        """Positions [lo, hi) as a new array: the base between the spliced rows, block by block."""
        out = np.empty(hi - lo, self.dtype)
        first, last = (int(i) for i in np.searchsorted(self.at, [lo, hi], side="left"))
        pos, base_row = lo, lo - first  # base rows before lo: lo minus the spliced rows before it
        for j in range(first, last + 1):
            stop = int(self.at[j]) if j < last else hi
            n = stop - pos
            if n:
                out[pos - lo:stop - lo] = (np.arange(base_row, base_row + n) if self.base is None
                                           else self.base[base_row:base_row + n])
            base_row += n
            if j < last:
                out[stop - lo] = self.values[j]
                pos = stop + 1
        return out


def splice(base: np.ndarray | None, rows: int, at: np.ndarray, values: np.ndarray, dtype: Any) -> Spliced:
    """``base`` (None: row numbers of ``rows`` rows) with ``values`` at the sorted positions ``at``."""
    if base is not None:
        base = base.view()
        base.flags.writeable = False  # shared by every rule of the trace
    at = np.asarray(at, np.int64)
    return Spliced(base, rows, at, np.asarray(values).astype(dtype), dtype)


def interleave(base: np.ndarray, at: np.ndarray, values: np.ndarray, dtype: Any) -> np.ndarray:
    """``base`` with ``values`` at the sorted final positions ``at``, as a new array of ``dtype``: the base
    copied in blocks between them (a few rows among a million: no row-length mask as ``np.insert`` makes)."""
    at = np.asarray(at, np.int64)
    return Spliced(base, len(base), at, np.asarray(values), dtype)._values(0, len(base) + len(at))
