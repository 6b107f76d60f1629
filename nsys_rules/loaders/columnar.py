"""The typed reads every columnar export shares: raw columns into canonical typed frames.

:class:`ColumnarExport` holds what does not depend on the format: turning raw columns into
canonical typed frames (string ids into categoricals, serialized global ids into pid/tid,
NULLs and damage into notes). A format only supplies raw numpy columns (``_fetch``) and the
``StringIds`` table (``_load_strings``, looked up by :class:`~.strings.StringLookups`).

pandas is imported where frames are built: the read-ahead (:mod:`.readahead`) fetches raw
columns through this module in a thread while the main thread is still importing pandas.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from nsys_rules.loaders import damage as damage_fix
from nsys_rules.loaders.columns import ONE_VALUE_ROWS, all_equal, int16_if_fits, isnull, one_value
from nsys_rules.loaders.export import DEVICE_COLUMNS, MAX_DEVICE_ID, NULL_INT, ReadMeter
from nsys_rules.loaders.row_order import ORDER_COLUMN, put_in_start_order
from nsys_rules.loaders.strings import StringLookups
from nsys_rules.loaders.tables import Column, Table
from nsys_rules.loaders.taking import NOTHING, Taking

if TYPE_CHECKING:
    import pandas as pd

#: Ids and launch dimensions, read as int32 when every value fits (memory: a 1M-kernel trace
#: carries a dozen of them; correlation ids are 32-bit in CUPTI, widened to int64 if an export
#: holds bigger ones). Times and sizes stay int64. Code that shifts ids into a join key casts
#: them to int64 first (windows._key, launch_api_rows, the stats joins).
NARROW_COLUMNS = frozenset({"device_id", "context_id", "stream_id", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
                            "block_z", "registers_per_thread", "launch_type", "copy_kind", "src_kind", "dst_kind",
                            "mem_kind", "sync_type", "event_type", "src_device_id", "dst_device_id",
                            "correlation_id", "graph_node_id"})
#: Launch dimensions, held as int16 when every value fits (blocks are at most 1024 threads a side, grids of
#: most kernels far below 32768): 2 bytes per kernel and dimension instead of 4, 8 bytes per kernel over the
#: four that vary (issue 39: what a long capture holds). Readers fold them into int64 keys or read single values.
SHORT_COLUMNS = frozenset({"grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"})


class ColumnarExport(StringLookups, ABC):
    """Typed canonical reads over raw columns; subclasses provide the raw columns."""

    path: Path
    damage: list[str]
    table_names: frozenset[str]
    parallel_reads: bool = True
    #: Leave out the rows a table's :class:`~nsys_rules.loaders.tables.RowDrop` names (``--cudabacktrace``'s second
    #: row of a call). ``stats`` keeps them: ``nsys stats`` counts them, and its output is matched as printed.
    row_drops: bool = True

    def __init__(self) -> None:
        self._strings: tuple[np.ndarray, np.ndarray] | None = None
        #: The memory guard the reads are priced against (see :class:`~nsys_rules.loaders.export.ReadMeter`).
        self.meter: ReadMeter | None = None
        #: A temporary folder this export was written into for this run (a ``.nsys-rep`` exported by
        #: nsys-rules), removed when the export closes; None for the user's own export.
        self.owned_folder: Path | None = None

    # -- what a format provides ---------------------------------------------------------
    @abstractmethod
    def columns_of(self, table: str) -> tuple[str, ...]:
        """Column names of a source table (empty when absent)."""

    @abstractmethod
    def count(self, table: str) -> int:
        """Row count of a source table (0 when absent)."""

    @abstractmethod
    def _fetch(self, source: str, src_cols: list[str], narrow: set[str] | frozenset[str] = frozenset()
               ) -> dict[str, np.ndarray]:
        """Raw columns of ``source``: integer columns as int64 (int32 for ``narrow`` ones when they fit)
        with NULL as :data:`NULL_INT`; anything else (text, damage) as object arrays."""

    @abstractmethod
    def _load_strings(self) -> tuple[np.ndarray, np.ndarray]:
        """``StringIds`` as (int64 ids, object values cut to :data:`MAX_STRING`), any order."""

    # -- schema --------------------------------------------------------------------------
    def source_of(self, table: Table) -> str | None:
        """The source table that backs a canonical table, when the export has a usable one."""
        for source in table.sources:
            present = self.columns_of(source)
            if present and all(any(s in present for s in c.sources) for c in table.columns if c.required):
                return source
            if present:
                lacking = [c.sources[0] for c in table.columns if c.required and not any(s in present for s in c.sources)]
                damage_fix.note(self.damage, f"{source}: lacks column(s) {', '.join(lacking)}; the table is ignored "
                                             f"(rules that need {table.name} are skipped)")
            elif source in self.table_names:  # listed, but its columns cannot be read: say so, not an empty "see damage"
                damage_fix.note(self.damage, f"{source}: its columns cannot be read (damaged schema); the table is "
                                             f"ignored (rules that need {table.name} are skipped)")
        return None

    # -- bulk reads ----------------------------------------------------------------------
    def source_columns(self, table: Table, wanted: list[Column], source: str
                       ) -> tuple[dict[str, str | None], list[str], set[str]]:
        """How canonical columns ``wanted`` of ``table`` are read from ``source``: the source column each
        one takes (None: the export lacks it), the source columns to fetch, and those fetched as int32."""
        present = self.columns_of(source)
        picks: dict[str, str | None] = {c.name: next((s for s in c.sources if s in present), None) for c in wanted}
        src_cols = list(dict.fromkeys(s for s in picks.values() if s is not None))
        extra = [s for c in wanted if c.kind == "nvtx_name" for s in c.sources[1:] if s in present]
        src_cols += [s for s in extra if s not in src_cols]
        # Sources read straight into int32 (when their values fit): no int64 copy of them ever exists.
        # String ids too: StringIds are numbered densely from 0, so int32 holds them (widened if not).
        narrowed = [c for c in wanted if c.name in NARROW_COLUMNS or c.kind == "string"]
        wide = {picks[c.name] for c in wanted if c not in narrowed}
        narrow = {s for c in narrowed if (s := picks[c.name]) is not None and s not in wide}
        return picks, src_cols, narrow

    def early_read_safe(self, source: str) -> bool:
        """Whether ``source`` may be read ahead (:mod:`.readahead`): its columns then come from two reads."""
        return True

    def fetch_direct(self, source: str, src_cols: list[str], narrow: set[str] | frozenset[str] = frozenset(),
                     stop: Any = None) -> dict[str, np.ndarray]:
        """Raw columns as ``_fetch`` gives them, through the format's fast reader only (no fallback: it raises
        on any failure); ``stop`` (a ``threading.Event``) ends the read early with :class:`ReadStopped`."""
        raise NotImplementedError

    def _take_early(self, source: str, src_cols: list[str], narrow: set[str] | frozenset[str]) -> Taking:
        """The read-ahead's reads of ``source`` (:class:`~.taking.Taking`): read the columns it does not
        cover here, then wait for the ones it does."""
        ahead = getattr(self, "_ahead", None)
        return ahead.take(source, src_cols, narrow) if ahead is not None else NOTHING

    def read(self, table: Table, columns: Iterable[str]) -> pd.DataFrame:
        """Read canonical ``columns`` of ``table`` as typed pandas columns.

        Rows whose required columns are NULL are dropped (and reported as damage);
        optional integer NULLs become :data:`NULL_INT`; a column the export lacks is
        filled with NULL_INT (or an empty name) so rules see a stable shape.
        """
        import pandas as pd

        source = self.source_of(table)
        columns = list(dict.fromkeys(columns))
        if ORDER_COLUMN in table.column_names and ORDER_COLUMN not in columns:
            columns.append(ORDER_COLUMN)  # every read of a table puts its rows in the same (start) order
        wanted = [table.column(c) for c in columns]
        if source is None:
            return _empty_frame(wanted)
        present = self.columns_of(source)
        picks, src_cols, narrow = self.source_columns(table, wanted, source)
        damage_fix.note_missing_columns(table.name, source, [c for c in wanted if picks[c.name] is None], self.damage)
        drop = table.drop_rows if self.row_drops and table.drop_rows is not None and \
            table.drop_rows.column in present and table.drop_rows.only_with in self.table_names else None
        if drop is not None and drop.column not in src_cols:
            src_cols = [*src_cols, drop.column]
        raw = self._fetch(source, src_cols, narrow)
        n = len(next(iter(raw.values()))) if raw else self.count(source)
        keep: np.ndarray | None = None  # built only when a required column may hold a NULL
        for col in wanted:
            if col.required and (src := picks[col.name]) is not None:
                values = raw[src]
                # Integer columns arrive with NULL as NULL_INT: no nsys time or string id is negative. A
                # column whose minimum is above it holds none: no mask of its rows.
                if values.dtype.kind in "iu" and (not len(values) or int(values.min()) > NULL_INT):
                    continue
                present_rows = (values != NULL_INT) if values.dtype.kind in "iu" else ~isnull(values)
                keep = present_rows if keep is None else keep & present_rows
        all_kept = keep is None or bool(keep.all())
        if keep is None:
            keep = np.ones(n, bool) if any(c.kind == "nvtx_name" for c in wanted) else np.ones(0, bool)
        if not all_kept:
            required = ", ".join(c.name for c in wanted if c.required)
            self.damage.append(f"{table.name}: {int((~keep).sum())} row(s) with NULL {required} dropped")
        if drop is not None:
            # Rows that belong to another kind of record (see RowDrop): left out, no damage.
            marks = raw[drop.column]
            dropped = np.isin(marks if marks.dtype.kind in "iu" else damage_fix.to_int(marks, NULL_INT), drop.values)
            if dropped.any():
                keep = (keep if len(keep) == n else np.ones(n, bool)) & ~dropped
                all_kept = False
        data: dict[str, Any] = {}
        for col in wanted:
            src = picks[col.name]
            kept = None if src is None else (raw[src] if all_kept else raw[src][keep])
            if col.kind == "nvtx_name":
                data[col.name] = self._nvtx_names(col, raw, keep, present)
                continue
            data[col.name] = self._convert(col, kept, n if all_kept else int(keep.sum()), f"{table.name}.{col.name}")
            if col.kind in ("pid", "tid") or col.name in NARROW_COLUMNS:
                data[col.name] = one_value(data[col.name])
            if col.name in SHORT_COLUMNS:
                data[col.name] = int16_if_fits(data[col.name])
        del raw  # the raw columns freed before the sort below (``data`` holds what is kept)
        kept = None
        put_in_start_order(data)  # column by column, each source freed as its sorted copy is made
        frame = pd.DataFrame(data, copy=False)
        frame = damage_fix.drop_invalid_required(table.name, frame, [c.name for c in wanted if c.required],
                                                 NULL_INT, self.damage)
        if "start" in frame and "end" in frame and len(frame):
            ends, starts = frame["end"].to_numpy(), frame["start"].to_numpy()
            # Checked in chunks first: the mask of every row only where a row ends before it starts.
            bad = ends < starts if table.name == "nvtx" or damage_fix.any_below(ends, starts) else np.zeros(0, bool)
            if table.name == "nvtx":
                # NVTX marks and unfinished ranges have no end: treat them as instants.
                # A new array, not an in-place patch: `raw_end` may share the same buffer and must keep NULLs.
                ends = frame["end"].to_numpy()
                frame["end"] = np.where(ends == NULL_INT, frame["start"].to_numpy(), ends)
                bad = frame["end"].to_numpy() < frame["start"].to_numpy()
            if bad.any():
                self.damage.append(f"{table.name}: {int(bad.sum())} row(s) ending before they start dropped")
                frame = frame.loc[~bad].reset_index(drop=True)
        return damage_fix.drop_duplicate_rows(table.name, frame, self.damage)

    def _nvtx_names(self, col: Column, raw: dict[str, np.ndarray], keep: np.ndarray,
                    present: tuple[str, ...]) -> pd.Categorical:
        import pandas as pd

        n = int(keep.sum())
        text = raw[col.sources[0]][keep] if col.sources[0] in present else np.full(n, None, dtype=object)
        names = pd.Series(text, dtype=object)
        if col.sources[1] in present:
            ids = damage_fix.to_int(raw[col.sources[1]][keep], NULL_INT)
            registered = pd.Series(np.asarray(self.resolve_strings(ids, "nvtx.name"), dtype=object))
            names = names.where(~isnull(text), registered)
        return pd.Categorical(names)

    def _convert(self, col: Column, values: np.ndarray | None, n: int, what: str) -> Any:
        import pandas as pd

        if col.kind == "blob":
            # Raw bytes or None; a column read as integers held only NULLs (an export without blobs).
            if values is None or values.dtype.kind in "iuf":
                return np.full(n, None, dtype=object)
            return values
        if col.kind in ("string", "text"):
            if values is None:
                return pd.Categorical.from_codes(np.full(n, -1), categories=pd.Index([], dtype=object))
            if col.kind == "text":
                return pd.Categorical(pd.Series(values, dtype=object).where(~isnull(values), None))
            ids = values if values.dtype.kind in "iu" else damage_fix.to_int(values, NULL_INT)  # int32 as read
            if not col.required:
                self._note_unreadable(values, ids, what)
            nulls = int((ids < 0).sum()) if col.name in ("name", "short_name") else 0  # nsys always writes these
            if nulls:
                damage_fix.note(self.damage, f"{what}: {nulls} row(s) with no name (NULL string id)")
            return self.resolve_strings(ids, what)
        if values is None:
            return np.full(n, NULL_INT, np.int64)
        if values.dtype == np.int32 and col.name in NARROW_COLUMNS:
            if col.name in DEVICE_COLUMNS:
                self._note_implausible_devices(values, what)
            return values  # read narrow by the format's _fetch: already checked to fit
        ints = damage_fix.to_int(values, NULL_INT)
        if col.name in DEVICE_COLUMNS:
            self._note_implausible_devices(ints, what)
        if not col.required:  # a required column's unreadable rows are dropped, with their own note
            self._note_unreadable(values, ints, what)
        # pid/tid are 24-bit fields of a serialized global id: int32 holds them in half the memory of
        # int64; small ids and launch dimensions too, when every value fits.
        if col.kind in ("pid", "tid"):
            if len(ints) >= ONE_VALUE_ROWS and ints[0] >= 0 and all_equal(ints):
                # One process (one thread): the one value, no per-row array at all (see one_value).
                single = (int(ints[0]) >> 24) & 0xFFFFFF if col.kind == "pid" else int(ints[0]) & 0xFFFFFF
                return np.broadcast_to(np.array([single], np.int32), (len(ints),))
            # Straight into int32 (the ufunc casts chunk by chunk; the low 24 bits survive the cast): no
            # int64 temporaries while the other big table loads in parallel.
            out = np.empty(len(ints), np.int32)
            if col.kind == "pid":
                np.right_shift(ints, 24, out=out, casting="unsafe")
                out &= 0xFFFFFF
            else:
                np.bitwise_and(ints, 0xFFFFFF, out=out, casting="unsafe")
            if len(ints) and int(ints.min()) < 0:  # a NULL (or damaged) id: no mask of every row otherwise
                out[ints < 0] = NULL_INT
            return out
        if col.name in NARROW_COLUMNS and len(ints) and int(ints.min()) >= -(2**31) and int(ints.max()) < 2**31:
            return ints.astype(np.int32)
        return ints

    def _note_implausible_devices(self, values: np.ndarray, what: str) -> None:
        """A damage note for deviceIds no GPU has (beyond :data:`MAX_DEVICE_ID`, or negative but NULL).

        The rows stay, with the id as the file gives it: the note says the numbers by device rest on
        damaged ids. Two reductions first: a clean column (the usual case) needs no mask of its rows.
        """
        if not len(values) or (int(values.min()) >= NULL_INT and int(values.max()) < MAX_DEVICE_ID):
            return  # the only negative value left is NULL_INT itself
        bad = int(np.count_nonzero((values >= MAX_DEVICE_ID) | ((values < 0) & (values != NULL_INT))))
        if bad:
            damage_fix.note(self.damage, f"{what}: {bad} row(s) with a device id no GPU has (at or beyond "
                                         f"{MAX_DEVICE_ID:,}, or negative); their GPU is unknown to the trace")

    def _note_unreadable(self, raw: np.ndarray, converted: np.ndarray, what: str) -> None:
        bad = damage_fix.unreadable_count(raw, converted, NULL_INT)
        if bad:
            damage_fix.note(self.damage, f"{what}: {bad} value(s) that are not integers (wrong column type) "
                                         "read as unknown")


def _empty_frame(columns: list[Column]) -> pd.DataFrame:
    import pandas as pd

    data: dict[str, Any] = {}
    for col in columns:
        if col.kind in ("string", "text"):
            data[col.name] = pd.Categorical([], categories=pd.Index([], dtype=object))
        else:
            data[col.name] = np.empty(0, np.int64)
    return pd.DataFrame(data)
