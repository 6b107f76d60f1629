"""GPU metrics samples (``nsys profile --gpu-metrics-devices``): the metric names and the sampled values of a time range.

nsys writes two tables for them. ``TARGET_INFO_GPU_METRICS`` names each metric
(``typeId, sourceId, typeName, metricId, metricName``: "DRAM Read Bandwidth [Throughput %]",
"Tensor Active [Throughput %]", ...); ``GPU_METRICS`` holds one row per metric per sample
(``rawTimestamp, timestamp, typeId, metricId, value``): at the default 10 kHz a Hopper GPU writes
22 metrics, 220,000 rows a second (9.3M rows, 300 MB of a 346 MB export, for a 42 s capture).
The low byte of ``typeId`` is the GPU's index (``TARGET_INFO_GPU.id``); the same ``metricId`` may
mean another metric on another GPU type, so a metric is known by the pair.

Nothing judges here, and the table is never read whole: callers ask for a few metrics of a time
range (the steady steps), and each format answers without decoding the rest:

- SQLite: nsys inserts the samples in time order, so the rows of a time range are a rowid range,
  found by bisection with a few point reads (checked: probes across the table must be in time
  order, and the rows read too; otherwise the range is found by a scan of the whole table) and
  scanned in slices, the wanted metrics picked in SQL;
- Parquet / Arrow IPC (``nsys export --type=parquetdir|arrowdir``): the four columns stream a
  batch at a time, each batch cut to the wanted rows before the next is decoded.

SQL stays in the loaders (``tests/meta/test_sql_safety.py``): the table and column names are
constants, quoted; the numbers formatted in are ``int()``\\ s of rowids and metric ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np

from nsys_rules.errors import InputError
from nsys_rules.loaders import damage as damage_fix
from nsys_rules.loaders.sqlite import _quote

#: The samples and the metric names, as nsys names them.
METRICS_TABLE = "GPU_METRICS"
NAMES_TABLE = "TARGET_INFO_GPU_METRICS"
#: Columns of each that the reads need.
SAMPLE_COLUMNS = ("timestamp", "typeId", "metricId", "value")
NAME_COLUMNS = ("typeId", "metricId", "metricName")
#: How the capture's options name the sampling frequency (``META_DATA_CAPTURE``), in Hz.
FREQUENCY_OPTION = "GPU_METRICS_OPTIONS:SAMPLING_FREQUENCY"

#: Rowids scanned per SQL query: the answer (a few wanted metrics of them) stays a few MB.
SLICE_ROWS = 1 << 20
#: Rowids probed across the table to check that its rows are in time order before bisecting.
ORDER_PROBES = 17
#: Bytes one read sample keeps (time and value as int64) and what it costs while read (the four
#: columns of a batch before the cut, the concatenation of the kept pieces): for the memory guard.
SAMPLE_BYTES = 16
READ_BYTES_PER_ROW = 48


@dataclass(frozen=True)
class MetricName:
    """One metric of one GPU type: its ids and its name (``DRAM Read Bandwidth [Throughput %]``)."""

    type_id: int
    metric_id: int
    name: str

    @property
    def gpu(self) -> int:
        """The GPU's index (``TARGET_INFO_GPU.id``): the low byte of ``typeId``."""
        return self.type_id & 0xFF

    @property
    def key(self) -> tuple[int, int]:
        """(typeId, metricId): what identifies the metric's rows in ``GPU_METRICS``."""
        return self.type_id, self.metric_id


@dataclass(frozen=True)
class Samples:
    """One metric's samples: times (ns, the trace's clock, rising) and values, aligned."""

    time: np.ndarray
    value: np.ndarray

    def __len__(self) -> int:
        return len(self.time)


def available(export: Any) -> bool:
    """Whether the export holds GPU metrics: both tables with the columns the reads need."""
    samples = export.columns_of(METRICS_TABLE)
    names = export.columns_of(NAMES_TABLE)
    return all(c in samples for c in SAMPLE_COLUMNS) and all(c in names for c in NAME_COLUMNS)


def catalog(export: Any) -> tuple[MetricName, ...]:
    """Every (GPU type, metric) the export names, in table order; rows that do not parse are left out (noted)."""
    if not available(export):
        return ()
    out: list[MetricName] = []
    bad = 0
    for type_id, metric_id, name in export.rows(NAMES_TABLE, list(NAME_COLUMNS)):
        try:
            out.append(MetricName(int(type_id), int(metric_id), str(name)))
        except (TypeError, ValueError):
            bad += 1
    if bad:
        damage_fix.note(export.damage, f"{NAMES_TABLE}: {bad} row(s) without integer ids ignored")
    return tuple(dict.fromkeys(out))


def row_count(export: Any) -> int:
    """Rows of ``GPU_METRICS`` (0 without it)."""
    return int(export.count(METRICS_TABLE)) if available(export) else 0


def read_samples(export: Any, keys: Iterable[tuple[int, int]], lo: int | None = None,
                 hi: int | None = None) -> dict[tuple[int, int], Samples]:
    """The samples of each (typeId, metricId) in ``keys`` with ``lo <= timestamp <= hi`` (None: unbounded).

    Raises :class:`NotImplementedError` for an export format this module cannot read (a plugin's
    loader), :class:`InputError` for a damaged table.
    """
    wanted = sorted(set((int(t), int(m)) for t, m in keys))
    if not wanted or not available(export):
        return {}
    pieces = list(iter_pieces(export, wanted, lo, hi))
    time = _concat([p[0] for p in pieces])
    type_id = _concat([p[1] for p in pieces])
    metric_id = _concat([p[2] for p in pieces])
    value = _concat([p[3] for p in pieces])
    del pieces
    out: dict[tuple[int, int], Samples] = {}
    for key in wanted:
        mine = (type_id == key[0]) & (metric_id == key[1])
        t, v = time[mine], value[mine]
        if len(t) > 1 and not bool((t[1:] >= t[:-1]).all()):
            order = np.argsort(t, kind="stable")
            t, v = t[order], v[order]
        out[key] = Samples(t, v)
    return out


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def iter_pieces(export: Any, wanted: list[tuple[int, int]], lo: int | None = None,
                hi: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """The wanted samples a slice at a time, as (time, typeId, metricId, value) arrays: for a consumer that
    aggregates as they come (a summary of the whole table) instead of holding every sample."""
    from nsys_rules.loaders.arrowdir import ArrowDirExport
    from nsys_rules.loaders.sqlite import SqliteExport

    if isinstance(export, SqliteExport):
        yield from _sqlite_pieces(export, wanted, lo, hi)
    elif isinstance(export, ArrowDirExport):
        yield from _folder_pieces(export, wanted, lo, hi)
    else:
        raise NotImplementedError(f"{type(export).__name__} exports do not give GPU metrics")


def _cut(columns: list[np.ndarray], wanted: list[tuple[int, int]], lo: int | None, hi: int | None,
         damage: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One batch cut to the wanted metrics and times (values that are not integers are damage: dropped)."""
    time, type_id, metric_id, value = (damage_fix.to_int(np.asarray(c), -(2**63)) if np.asarray(c).dtype.kind not in "iu"
                                       else np.asarray(c, np.int64) for c in columns)
    keep = np.zeros(len(time), bool)
    for t, m in wanted:
        keep |= (metric_id == m) & (type_id == t)
    if lo is not None:
        keep &= time >= lo
    if hi is not None:
        keep &= time <= hi
    unreadable = keep & ((time == -(2**63)) | (value == -(2**63)))
    if unreadable.any():
        damage_fix.note(damage, f"{METRICS_TABLE}: samples with a time or value that is not an integer dropped")
        keep &= ~unreadable
    return time[keep], type_id[keep], metric_id[keep], value[keep]


# -- SQLite -------------------------------------------------------------------------------
def _sqlite_pieces(export: Any, wanted: list[tuple[int, int]], lo: int | None,
                   hi: int | None) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    bounds = _rowid_bounds(export)
    if bounds is None:
        return
    first, last = bounds
    start, stop = first, last + 1
    ordered = _time_ordered(export, first, last)
    if ordered and lo is not None:
        start = _first_rowid_at(export, first, last, lo, strict=False)
    if ordered and hi is not None:
        stop = _first_rowid_at(export, first, last, hi, strict=True)
    metrics = sorted({m for _, m in wanted})
    previous: int | None = None
    for begin in range(start, stop, SLICE_ROWS):
        end = min(begin + SLICE_ROWS, stop)
        piece = _cut(_sqlite_slice(export, begin, end, metrics, None if ordered else (lo, hi)), wanted,
                     lo, hi, export.damage)
        if ordered and len(piece[0]):
            times = piece[0]
            if (previous is not None and times[0] < previous) or not bool((times[1:] >= times[:-1]).all()):
                # Rows out of time order after all: the range may hold rows elsewhere. Scan the whole table.
                yield from _sqlite_scan(export, first, last, wanted, metrics, lo, hi)
                return
            previous = int(times[-1])
        yield piece


def _sqlite_scan(export: Any, first: int, last: int, wanted: list[tuple[int, int]], metrics: list[int],
                 lo: int | None, hi: int | None) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    for begin in range(first, last + 1, SLICE_ROWS):
        yield _cut(_sqlite_slice(export, begin, min(begin + SLICE_ROWS, last + 1), metrics, (lo, hi)), wanted, lo, hi,
                   export.damage)


def _sqlite_slice(export: Any, begin: int, end: int, metrics: list[int],
                  times: tuple[int | None, int | None] | None) -> list[np.ndarray]:
    from nsys_rules.loaders.sqlite import _fetch_arrow

    where = [f"rowid >= {int(begin)}", f"rowid < {int(end)}"]
    where.append(f"{_quote('metricId')} IN ({', '.join(str(int(m)) for m in metrics)})")
    if times is not None and times[0] is not None:
        where.append(f"{_quote('timestamp')} >= {int(times[0])}")
    if times is not None and times[1] is not None:
        where.append(f"{_quote('timestamp')} <= {int(times[1])}")
    sql = (f"SELECT {', '.join(_quote(c) for c in SAMPLE_COLUMNS)} FROM {_quote(METRICS_TABLE)} "
           f"WHERE {' AND '.join(where)}")
    try:
        columns = _fetch_arrow(export._open_path, sql, list(SAMPLE_COLUMNS), max(0, (end - begin) // 8))
    except Exception:  # noqa: BLE001 - ADBC trips over mixed column types: the stdlib reader judges each value
        try:
            rows = export._db.execute(sql).fetchall()
        except Exception as exc:  # noqa: BLE001 - sqlite3.DatabaseError and friends: a damaged file
            raise InputError(f"{export.path}: cannot read {METRICS_TABLE} ({exc}); the file is damaged: re-export "
                             "the report with `nsys export --type=sqlite`") from None
        return [np.array([r[i] for r in rows], dtype=object) for i in range(len(SAMPLE_COLUMNS))]
    return [columns[c] for c in SAMPLE_COLUMNS]


def _rowid_bounds(export: Any) -> tuple[int, int] | None:
    # Two queries: SQLite answers min() and max() of the rowid from the b-tree's ends only one at a time.
    low = export._query(f"SELECT min(rowid) FROM {_quote(METRICS_TABLE)}")[0][0]
    high = export._query(f"SELECT max(rowid) FROM {_quote(METRICS_TABLE)}")[0][0]
    if low is None or high is None:
        return None
    return int(low), int(high)


def _time_at(export: Any, rowid: int) -> tuple[int, int | None] | None:
    """(rowid, timestamp) of the first row at or after ``rowid``; None past the end."""
    rows = export._query(f"SELECT rowid, {_quote('timestamp')} FROM {_quote(METRICS_TABLE)} "
                         "WHERE rowid >= ? ORDER BY rowid LIMIT 1", (int(rowid),))
    if not rows:
        return None
    value = rows[0][1]
    return int(rows[0][0]), (int(value) if isinstance(value, int) else None)


def _time_ordered(export: Any, first: int, last: int) -> bool:
    """Whether probes spread over the table find its timestamps rising (nsys writes them so)."""
    seen: list[int] = []
    for rowid in np.linspace(first, last, ORDER_PROBES).round().astype(np.int64).tolist():
        found = _time_at(export, rowid)
        if found is None or found[1] is None:
            return False
        seen.append(found[1])
    return all(b >= a for a, b in zip(seen[:-1], seen[1:], strict=True))


def _first_rowid_at(export: Any, first: int, last: int, t: int, strict: bool) -> int:
    """The first rowid whose timestamp is >= ``t`` (> ``t`` when ``strict``); ``last + 1`` when none is."""
    low, high = first, last + 1
    while low < high:
        mid = (low + high) // 2
        found = _time_at(export, mid)
        if found is None:
            high = mid
            continue
        rowid, time = found
        if time is None:
            return first if not strict else last + 1  # damaged: the caller's check falls back to a scan
        if time > t or (time == t and not strict):
            high = mid
        else:
            low = rowid + 1
    return low


# -- Parquet / Arrow IPC folders ------------------------------------------------------------
def _folder_pieces(export: Any, wanted: list[tuple[int, int]], lo: int | None,
                   hi: int | None) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    from nsys_rules.loaders.arrowdir import BATCH_ROWS
    from nsys_rules.malloc_tune import release_free_memory

    columns = list(SAMPLE_COLUMNS)
    with export._reading(METRICS_TABLE):
        for batch in export._batches(METRICS_TABLE, columns, BATCH_ROWS):
            picked = batch.select(columns)
            yield _cut([_column(picked.column(i)) for i in range(len(columns))], wanted, lo, hi, export.damage)
    release_free_memory()


def _column(array: Any) -> np.ndarray:
    import pyarrow as pa

    if pa.types.is_integer(array.type) and not array.null_count:
        return array.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return np.array(array.to_pylist(), dtype=object)


def read_cost(export: Any, wanted: int) -> tuple[int, int]:
    """(rows, bytes) a read of ``wanted`` metrics may take at most: the table's rows times the share of its
    metrics that are wanted (every metric is sampled at every tick), for the memory guard."""
    rows = row_count(export)
    names = max(1, len(catalog(export)))
    share = min(1.0, wanted / names)
    kept = int(rows * share)
    return kept, kept * READ_BYTES_PER_ROW
