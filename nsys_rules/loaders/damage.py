"""Repairs the loader makes to a damaged export, each one reported as a damage note.

A damaged export must never turn into a wrong number presented as fact: a row the loader
cannot trust is dropped, and the drop is written to ``SqliteExport.damage`` (shown as the
trace's ``damage`` list in JSON) so the reader knows the numbers cover less than the file.

pandas is imported where it is used: the read-ahead (:mod:`.readahead`) loads this module in a
thread that reads the trace while the main thread is still importing pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from nsys_rules.malloc_tune import CHUNK_ROWS
from nsys_rules.loaders.tables import Column

if TYPE_CHECKING:
    import pandas as pd

#: Tables whose rows carry a correlationId that is unique per launch or call. Two rows that
#: agree on it and on their times (and stream, device, thread, name when read) are the same
#: event written twice: kept, they would double-count GPU or API time.
IDENTITY_TABLES = ("kernels", "api", "memcpy", "memset", "sync", "graph_trace")
_IDENTITY_COLUMNS = ("start", "end", "correlation_id", "device_id", "stream_id", "pid", "tid", "name")


def note(damage: list[str], text: str) -> None:
    """Append ``text`` to ``damage`` once (a table read twice must not report twice)."""
    if text not in damage:
        damage.append(text)


#: Columns every nsys version since 2020 writes (checked on the public corpus): when one is
#: absent the table was damaged or hand-made, and rules see -1 or no name in its place.
CORE_COLUMNS = frozenset({"device_id", "context_id", "stream_id", "correlation_id", "pid", "tid", "name",
                          "short_name", "bytes", "copy_kind"})


def note_missing_columns(table: str, source: str, missing: list[Column], damage: list[str]) -> None:
    """Report core columns the source table lacks (read as unknown instead)."""
    lost = [c for c in missing if c.name in CORE_COLUMNS and c.kind != "nvtx_name"]
    if lost:
        names = ", ".join(c.sources[0] for c in lost)
        note(damage, f"{source}: no {names} column(s); {table} rows read them as unknown")


#: Largest believable timestamp, in ns from the session start: 2^53 ns is 104 days (the public
#: corpus tops out at 156 s), and below it int64 sums and float conversions stay exact.
MAX_TIME_NS = 2**53
TIME_COLUMNS = ("start", "end")


def drop_invalid_required(table: str, frame: pd.DataFrame, required: list[str], null_int: int,
                          damage: list[str]) -> pd.DataFrame:
    """Drop rows whose required integer column could not be read as a number.

    Text or a blob in an INTEGER column (damage) converts to ``null_int``; a start time of
    -1 would be a wrong number, so such rows go, with a note.
    """
    if not len(frame):
        return frame
    # Two reductions per column first (no row-length temporaries): a clean export, the usual
    # case, is done with them; only a column whose range holds a bad value is judged row by row.
    cols = [c for c in required if c in frame and frame[c].dtype.kind == "i"]
    times = [c for c in TIME_COLUMNS if c in frame and frame[c].dtype.kind == "i"]
    nulls = [c for c in cols if _may_hold(frame[c].to_numpy(), null_int, null_int)]
    wilds = [c for c in times if not _within(frame[c].to_numpy(), -MAX_TIME_NS, MAX_TIME_NS)]
    if not nulls and not wilds:
        return frame
    bad = np.zeros(len(frame), bool)
    for col in nulls:
        bad |= frame[col].to_numpy() == null_int
    if bad.any():
        note(damage, f"{table}: {int(bad.sum())} row(s) with a non-numeric {'/'.join(cols)} dropped")
    # A timestamp beyond ~104 days from the session start is no capture's: kept, one such row
    # would overflow int64 sums of durations into nonsense totals.
    wild = np.zeros(len(frame), bool)
    for col in wilds:
        values = frame[col].to_numpy()
        wild |= (values > MAX_TIME_NS) | (values < -MAX_TIME_NS)
    if wild.any():
        note(damage, f"{table}: {int(wild.sum())} row(s) with an impossible timestamp (beyond 2^53 ns) dropped")
    bad |= wild
    if not bad.any():
        return frame
    return frame.loc[~bad].reset_index(drop=True)


def _may_hold(values: np.ndarray, lo: int, hi: int) -> bool:
    """Whether some value could lie in [lo, hi] (False when the column's range misses it)."""
    return bool(len(values)) and int(values.min()) <= hi and int(values.max()) >= lo


def _within(values: np.ndarray, lo: int, hi: int) -> bool:
    """Whether every value lies in [lo, hi]."""
    return not len(values) or (int(values.min()) >= lo and int(values.max()) <= hi)


def drop_duplicate_rows(table: str, frame: pd.DataFrame, damage: list[str]) -> pd.DataFrame:
    """Drop exact repeats of an event (same correlationId, times and place), with a note."""
    if table not in IDENTITY_TABLES or len(frame) < 2:
        return frame
    key = [c for c in _IDENTITY_COLUMNS if c in frame]
    if not {"start", "end", "correlation_id"} <= set(key):
        return frame  # too few columns read to tell a repeat from two real events
    # Cheap first pass on one column: only rows sharing a start time can be repeats.
    if rises_strictly(frame["start"].to_numpy()):  # no start shared: nothing can repeat (no masks built)
        return frame
    same_start = _shared_start(frame["start"].to_numpy())
    if not same_start.any():
        return frame
    candidates = frame.loc[same_start, key]
    repeat = np.zeros(len(frame), bool)
    repeat[np.flatnonzero(same_start)] = candidates.duplicated(keep="first").to_numpy()
    if not repeat.any():
        return frame
    note(damage, f"{table}: {int(repeat.sum())} duplicate row(s) dropped (same correlationId, start and end)")
    return frame.loc[~repeat].reset_index(drop=True)




def rises_strictly(values: np.ndarray) -> bool:
    """Whether each value is above the one before it, checked in chunks (no row-length mask)."""
    for lo in range(0, len(values) - 1, CHUNK_ROWS):
        part = values[lo:lo + CHUNK_ROWS + 1]
        if not bool((part[1:] > part[:-1]).all()):
            return False
    return True


def any_below(values: np.ndarray, bound: np.ndarray) -> bool:
    """Whether some ``values[i] < bound[i]``, checked in chunks (no row-length mask)."""
    return any(bool((values[lo:lo + CHUNK_ROWS] < bound[lo:lo + CHUNK_ROWS]).any())
               for lo in range(0, len(values), CHUNK_ROWS))


def _shared_start(start: np.ndarray) -> np.ndarray:
    """Rows whose start time another row shares (``duplicated(keep=False)``).

    Exports are in time order, so equal starts are neighbours: one vectorized comparison
    instead of a hash table of every row.
    """
    import pandas as pd

    if bool((start[1:] >= start[:-1]).all()):
        equal = start[1:] == start[:-1]
        return np.r_[equal, False] | np.r_[False, equal]
    return pd.Series(start, copy=False).duplicated(keep=False).to_numpy()


def unreadable_count(raw: np.ndarray, converted: np.ndarray, null_int: int) -> int:
    """How many non-NULL raw values did not convert to an integer (text, blob, huge REAL)."""
    import pandas as pd

    if raw.dtype.kind in "iu":
        return 0
    if raw.dtype.kind == "f":
        present = ~np.isnan(raw)
    else:
        present = ~pd.isna(raw)
    return int((present & (converted == null_int)).sum())


def to_int(values: np.ndarray, fill: int) -> np.ndarray:
    """Integers as int64; NULLs and what is not an integer in range (damage) become ``fill``."""
    import pandas as pd

    if values.dtype.kind in "iu":
        return values.astype(np.int64, copy=False)
    if values.dtype.kind == "b":
        # A boolean column where a time or an id belongs (a hand-made or damaged columnar export): True is
        # no timestamp. Read as 0/1 the kernels all started at the session start, and a rule divided by zero.
        return np.full(len(values), fill, np.int64)
    if values.dtype.kind == "O":
        values = _without_booleans(values)
    numeric = values if values.dtype.kind == "f" else pd.to_numeric(
        pd.Series(values, dtype=object), errors="coerce").to_numpy()
    if numeric.dtype.kind in "iu":
        return numeric.astype(np.int64, copy=False)
    numeric = numeric.astype(np.float64, copy=False)
    # A REAL beyond int64 (or inf/NaN) has no integer value: casting it is undefined.
    ok = np.isfinite(numeric) & (np.abs(numeric) < 9.2e18)
    out = np.full(len(numeric), fill, np.int64)
    out[ok] = numeric[ok].astype(np.int64)
    return out


def _without_booleans(values: np.ndarray) -> np.ndarray:
    """An object column with its booleans made None: ``pd.to_numeric`` would read them as 0 and 1.

    One pass in Python, as ``pd.to_numeric`` makes over an object column anyway (only a damaged
    integer column is an object column).
    """
    flags = np.fromiter((isinstance(v, (bool, np.bool_)) for v in values), bool, len(values))
    if not flags.any():
        return values
    out = values.copy()
    out[flags] = None
    return out
