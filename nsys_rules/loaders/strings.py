"""The ``StringIds`` lookups every columnar export shares: names by id, and searches of the string table.

nsys stores every name (kernels, API calls, NVTX ranges) once in ``StringIds`` and refers to it
by id; :class:`StringLookups` turns those ids into categoricals and answers "which names contain
this", over the table a format loads once (``_load_strings``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from nsys_rules.malloc_tune import CHUNK_ROWS
from nsys_rules.loaders import damage as damage_fix
from nsys_rules.loaders.columns import dense_codes, dense_ids
from nsys_rules.loaders.export import NULL_INT

if TYPE_CHECKING:
    import pandas as pd


class StringLookups:
    """``StringIds`` lookups over the table ``_load_strings`` gives (a mixin of :class:`~.columnar.ColumnarExport`)."""

    damage: list[str]
    _strings: tuple[np.ndarray, np.ndarray] | None = None

    def _load_strings(self) -> tuple[np.ndarray, np.ndarray]:
        """``StringIds`` as (int64 ids, object values cut to :data:`~.export.MAX_STRING`), any order."""
        raise NotImplementedError

    def _string_table(self) -> tuple[np.ndarray, np.ndarray]:
        """The string table sorted by id (ids, values), loaded once."""
        if self._strings is None:
            ids, values = self._load_strings()
            order = np.argsort(ids, kind="stable")
            self._strings = (ids[order], values[order])
        return self._strings

    def strings_containing(self, needle: str, limit: int) -> list[str]:
        """Up to ``limit`` ``StringIds`` values that contain ``needle`` (in id order)."""
        out: list[str] = []
        for value in self._string_table()[1]:
            if needle in value:
                out.append(value)
                if len(out) >= limit:
                    break
        return out

    def any_string_matches(self, pattern: re.Pattern[str]) -> bool:
        """Whether any ``StringIds`` value matches ``pattern`` (``search``): a name no row can carry otherwise.

        Optional beyond :class:`Export` (callers fall back when a loader lacks it): it answers
        "could any kernel be called like this" from the string table the reads already hold.
        """
        values = self._string_table()[1]
        if len(values) > 64:
            found = _any_re2(values, pattern)
            if found is not None:
                return found
        return any(pattern.search(value) for value in values)

    def resolve_strings(self, ids: np.ndarray, what: str) -> pd.Categorical:
        """Turn ``StringIds`` references into a categorical of names.

        Ids that point nowhere become ``<unknown string N>`` and are reported as damage,
        so a broken reference is visible instead of silently merged with another name.
        """
        import pandas as pd

        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            ids = damage_fix.to_int(ids, NULL_INT)
        all_valid = not len(ids) or int(ids.min()) >= 0  # a reduction: the mask only where a NULL is
        valid = np.ones(0, bool) if all_valid else ids >= 0
        # Dense ids (the usual StringIds): a table indexed by id gives each row its final code in one
        # gather, in the codes' own narrow type (no int32 per-row index, then a second gather, then a cast).
        uniq = dense_ids(ids if all_valid else ids[valid], len(ids))
        inverse = None
        if uniq is None:
            uniq, inverse = dense_codes(ids.astype(np.int64, copy=False), np.ones(len(ids), bool) if all_valid else valid,
                                        all_valid)
        sid, svalue = self._string_table()
        pos = np.searchsorted(sid, uniq).clip(0, max(len(sid) - 1, 0))
        found = (sid[pos] == uniq) if len(sid) else np.zeros(len(uniq), bool)
        names = np.full(len(uniq), None, object)
        if len(sid):
            names[found] = svalue[pos][found]
        lost = ~found
        if lost.any():
            self.damage.append(f"{what}: {int(lost.sum())} string id(s) point to no StringIds row")
            for i in np.flatnonzero(lost):
                names[i] = f"<unknown string {int(uniq[i])}>"
        # Two ids may carry the same text: merge them so a name is one category.
        name_codes, categories = pd.factorize(pd.Series(names, dtype=object), use_na_sentinel=True)
        if inverse is None:
            # pandas keeps codes as int8/int16/int32 by the number of categories: build them so, no cast.
            narrow = np.int8 if len(categories) < 128 else np.int16 if len(categories) < 32768 else np.int32
            final = np.full(int(uniq[-1]) + 1, -1, narrow)
            final[uniq] = name_codes
            # Gathered in chunks: a gather widens its index to int64, a row-length temporary (18 MB on
            # the API table) faulted in page by page; a chunk's stays in the heap.
            full = np.empty(len(ids), narrow)
            for lo in range(0, len(ids), CHUNK_ROWS):
                part = ids[lo:lo + CHUNK_ROWS]
                full[lo:lo + CHUNK_ROWS] = final[part] if all_valid else final[np.maximum(part, 0)]
            if not all_valid:
                full[~valid] = -1
            return pd.Categorical.from_codes(full, categories=pd.Index(categories, dtype=object), validate=False)
        lookup = np.append(name_codes.astype(np.int32), np.int32(-1))  # inverse -1 (NULL) -> -1
        full = lookup[inverse]
        return pd.Categorical.from_codes(full, categories=pd.Index(categories, dtype=object), validate=False)


def _any_re2(values: np.ndarray, pattern: re.Pattern[str]) -> bool | None:
    """Whether any of ``values`` matches ``pattern``, in RE2 (pyarrow: linear in the text, one pass in C++;
    Python's engine tries every alternative at every position of every string: 0.6 ms per 4 KB name).
    None when RE2 cannot take the pattern. RE2's ``\\W`` is ASCII-only, so it matches a superset of what
    Python's Unicode ``\\W`` does: a pre-check that may only say yes more often."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        found = pc.match_substring_regex(pa.array(values, pa.large_string()), pattern=pattern.pattern,
                                         ignore_case=bool(pattern.flags & re.IGNORECASE))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, UnicodeError):
        return None  # a pattern RE2 lacks, or a string that is not UTF-8 (a lone surrogate): Python judges
    return bool(pc.any(found).as_py())
