"""Every GPU operation of a trace as one table: kernels, copies, memsets and graph replays.

One notion of GPU activity for the step model, the budget and every rule. In
``--cuda-graph-trace=graph`` captures the kernels of a graph have no rows of their own: the
replay (a ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` row) is the GPU work, on its stream and device.
In node mode the kernels are there, launched by the graph launch call. Idle is what none of
the operations covers.

The table is built once per trace and shared; on a 1M-kernel trace it holds about 50 bytes per
operation, so it keeps narrow integer types and leaves what few callers need (the launching
call's end and thread, kernel symbols, copy sizes) to lookups by row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, cast

import numpy as np
import pandas as pd

from nsys_rules.loaders.columns import ONE_VALUE_ROWS, one_value
from nsys_rules.analysis.taxonomy import CLASSES, classify
from nsys_rules.model.trace import Trace
from nsys_rules.model.launches import launching_rows
from nsys_rules.analysis.names import GRAPH_LAUNCH_APIS, in_set, rows_with_codes
from nsys_rules.analysis.intervals import rising
from nsys_rules.analysis.spliced import Spliced, interleave
from nsys_rules.model.activity_merge import SPLICED_FIELDS, merge_parts

#: Operation kinds (``GpuOps.kind``).
KERNEL, MEMCPY, MEMSET, REPLAY = 0, 1, 2, 3
KIND_TABLES = {KERNEL: "kernels", MEMCPY: "memcpy", MEMSET: "memset", REPLAY: "graph_trace"}

#: Busy classes (``GpuOps.cls`` indexes this): the kernel taxonomy, then copies and memsets done by
#: the copy engines, then graph replays whose kernels the capture hid.
BUSY_CLASSES: tuple[str, ...] = (*CLASSES, "copy", "graph replay")
COPY_CLASS = BUSY_CLASSES.index("copy")
REPLAY_CLASS = BUSY_CLASSES.index("graph replay")

#: Tables (and their columns) the activity table reads.
COLUMNS: dict[str, tuple[str, ...]] = {
    "kernels": ("start", "end", "device_id", "stream_id", "pid", "correlation_id", "name", "grid_x", "grid_y",
                "grid_z", "block_x", "block_y", "block_z"),
    "memcpy": ("start", "end", "device_id", "stream_id", "pid", "correlation_id", "copy_kind", "bytes"),
    "memset": ("start", "end", "device_id", "stream_id", "pid", "correlation_id", "bytes"),
    "graph_trace": ("start", "end", "device_id", "stream_id", "pid", "correlation_id", "graph_id"),
    "api": ("start", "end", "correlation_id", "pid", "tid", "name"),
}


@dataclass(frozen=True, eq=False)
class GpuOps:
    """GPU operations sorted by start; every field is an array aligned with the others.

    ``launch`` is the start of the launching API call and ``api_row`` its row in the trace's API
    frame (-1 when the API was not traced); ``table_row`` is the operation's row in its own
    canonical frame (``KIND_TABLES[kind]``); ``graph`` identifies the graph of a replay row
    (graph mode), -1 elsewhere. ``table_row``, ``corr``, ``stream`` and ``kind`` may be
    :class:`~.spliced.Spliced` (indexed: arrays; sliced: narrower ones; ``==`` a scalar: a mask).
    """

    start: np.ndarray
    end: np.ndarray
    launch: np.ndarray
    device: np.ndarray
    stream: "np.ndarray | Spliced"
    pid: np.ndarray
    corr: "np.ndarray | Spliced"
    api_row: np.ndarray
    table_row: "np.ndarray | Spliced"
    graph: np.ndarray
    kind: "np.ndarray | Spliced"
    cls: np.ndarray
    by_graph: np.ndarray

    def __len__(self) -> int:
        return len(self.start)

    def take(self, rows: np.ndarray | slice) -> "GpuOps":
        """The operations at ``rows`` (a mask, row numbers or a slice), in the same order."""
        return GpuOps(**{name: getattr(self, name)[rows] for name in _FIELDS})

    def on_streams(self, streams: Sequence[int]) -> np.ndarray:
        """Which operations run on one of ``streams``: one stream by a comparison (a one-value column, or a
        :class:`~.spliced.Spliced` one, answers it without a scan), several compared in chunks on the column's
        own values (``np.isin`` over a million operations: ~10 ms)."""
        if len(streams) == 1:
            return np.asarray(self.stream == streams[0])
        return rows_with_codes(self.stream, np.asarray(streams, np.int64))

    @property
    def duration(self) -> np.ndarray:
        """End minus start of each operation."""
        return self.end - self.start

    def near(self, lo: int, hi: int, device: int | None = None) -> "GpuOps":
        """The operations overlapping [lo, hi) (on ``device``): views of a slice when one device runs them all."""
        first = int(np.searchsorted(self.start, lo, side="left"))
        last = int(np.searchsorted(self.start, hi, side="left"))
        # Operations that began before lo may still run at lo (long kernels, graph replays).
        early = np.flatnonzero(self.end[:first] > lo)
        begin = int(early[0]) if len(early) else first
        part = self.take(slice(begin, last))
        keep = part.end > lo
        if device is not None:
            keep &= part.device == device
        if keep.all():
            return part
        # Usually only a few leading operations drop out: a narrower slice keeps views, not copies.
        skip = int(np.argmax(keep)) if keep.any() else len(keep)
        if keep[skip:].all():
            return self.take(slice(begin + skip, last))
        return part.take(keep)


_FIELDS = tuple(GpuOps.__dataclass_fields__)


def gpu_ops(trace: Trace) -> GpuOps:
    """The trace's GPU operations (cached per trace: the step model, the budget and rules share it)."""
    return trace.memo(_GPU_OPS, lambda: _build(trace))[0]


def built_gpu_ops(trace: Trace) -> tuple[GpuOps | None, frozenset[int]]:
    """The trace's GPU operations if :func:`gpu_ops` built them already (None: builds nothing), and the kinds
    whose rows all sit there in frame order, each with its launching call."""
    built = cast("tuple[GpuOps, frozenset[int]] | None", trace.memo_peek(_GPU_OPS))
    return (None, frozenset()) if built is None else built


#: The memo key of the trace's GPU operations and the kinds kept in frame order.
_GPU_OPS = ("activity.gpu_ops",)


def _build(trace: Trace) -> tuple[GpuOps, frozenset[int]]:
    parts: list[dict[str, np.ndarray]] = []
    in_order: set[int] = set()
    in_order_parts: list[bool] = []
    for kind, table in KIND_TABLES.items():
        if not trace.has(table):
            continue
        frame = trace.frame(table, COLUMNS[table])
        if not len(frame):
            continue
        part, launched = _part(trace, kind, frame)
        parts.append(part)
        in_order_parts.append(rising(part["start"]))
        if launched and in_order_parts[-1]:  # the merge keeps a part's row order when it needs no sort
            in_order.add(kind)
    if not parts:
        return GpuOps(**{name: np.empty(0, bool if name == "by_graph" else np.int64) for name in _FIELDS}), frozenset()
    # Rows that differ at both ends are not one value: no scan of a million rows to find out.
    merged = {name: values if isinstance(values, Spliced) or len(values) and values[0] != values[-1]
              else one_value(values) for name, values in merge_parts(parts, _FIELDS, in_order_parts, SPLICED_FIELDS).items()}
    for values in merged.values():
        if not isinstance(values, Spliced) and values.flags.writeable:
            values.flags.writeable = False  # shared by every rule of the trace
    return GpuOps(**merged), frozenset(in_order)


def _int(frame: pd.DataFrame, column: str, dtype: type = np.int32, fill: int = -1) -> np.ndarray:
    """A column as a narrow integer array (NULLs as ``fill``), without a copy when it already is one."""
    if column not in frame:
        return np.full(len(frame), fill, dtype)
    series = frame[column]
    if isinstance(series.dtype, pd.api.extensions.ExtensionDtype) or series.dtype.kind == "f":
        return series.to_numpy(dtype=np.float64, na_value=fill).astype(dtype)  # nullable ints from damaged exports
    values = series.to_numpy()
    if values.dtype.kind in "iu" and values.dtype.itemsize > np.dtype(dtype).itemsize and len(values) and (
            values.max() > np.iinfo(dtype).max or values.min() < np.iinfo(dtype).min):
        return values.astype(np.int64)  # ids too wide for the narrow type: keep them whole
    return values.astype(dtype, copy=False)


def _part(trace: Trace, kind: int, frame: pd.DataFrame) -> tuple[dict[str, np.ndarray], bool]:
    """The frame's operations as activity fields, and whether every one has its launching call."""
    n = len(frame)
    launched = False
    pid = _int(frame, "pid")
    corr = _int(frame, "correlation_id", fill=0)
    launch = np.full(n, -1, np.int64)
    api_row = np.full(n, -1, np.int32)
    by_graph = np.zeros(n, bool)
    if trace.has("api"):
        api = trace.frame("api", COLUMNS["api"])
        if len(api):
            rows, found = launching_rows(trace, pid, corr)
            launched = bool(found.all())
            if launched:  # every operation's launch traced (the usual trace): gathers, no selections
                launch = api["start"].to_numpy()[rows]
                api_row = rows.astype(np.int32)
            else:
                launch = np.where(found, api["start"].to_numpy()[rows], -1)
                api_row = np.where(found, rows, -1).astype(np.int32)
            names = trace.api_names()
            if any(str(name) in GRAPH_LAUNCH_APIS for name in names.cat.categories):  # else no row is one
                by_graph = found & in_set(names, GRAPH_LAUNCH_APIS)[rows]
    if kind == KERNEL:
        cls = classify(frame["name"]).cat.codes.to_numpy().astype(np.int8)
    else:
        cls = np.full(n, REPLAY_CLASS if kind == REPLAY else COPY_CLASS, np.int8)
    return {
        "start": frame["start"].to_numpy(np.int64), "end": frame["end"].to_numpy(np.int64), "launch": launch,
        "device": _int(frame, "device_id"), "stream": _int(frame, "stream_id"), "pid": pid, "corr": corr,
        "api_row": api_row, "table_row": np.arange(n, dtype=np.int32),
        "graph": _int(frame, "graph_id") if kind == REPLAY else _same(n, -1, np.int32),
        "kind": _same(n, kind, np.int8), "cls": cls, "by_graph": by_graph if by_graph.any() else _same(n, False, bool),
    }, launched


def _same(n: int, value: int | bool, dtype: type) -> np.ndarray:
    """``n`` rows of one value: a zero-stride view where :func:`one_value` would make it one anyway."""
    if n < ONE_VALUE_ROWS:
        return np.full(n, value, dtype)
    return np.broadcast_to(np.array([value], dtype), n)


def frame_api_rows(trace: Trace, table: str) -> np.ndarray | None:
    """The launching API row of each row of the trace's ``table`` frame (-1: none), from the shared join.

    None when the table is not among the activity's (or its frame no longer lines up with it).
    The operations keep their frame row (``table_row``), so this is a scatter, not a second join.
    """
    kind = next((k for k, name in KIND_TABLES.items() if name == table), None)
    if kind is None or not trace.has(table):
        return None
    ops = gpu_ops(trace)
    mine = ops.kind == kind
    n = len(trace.frame(table, ["start"]))
    if int(mine.sum()) != n:
        return None
    out = np.full(n, -1, np.int32 if len(ops.api_row) and ops.api_row.dtype == np.int32 else np.int64)
    out[ops.table_row[mine]] = ops.api_row[mine]
    return out


def launch_ends(trace: Trace, ops: GpuOps) -> np.ndarray:
    """End of each operation's launching API call (-1 where the API was not traced)."""
    if not trace.has("api") or not len(ops):
        return np.full(len(ops), -1, np.int64)
    end = trace.frame("api", COLUMNS["api"])["end"].to_numpy()
    return np.where(ops.api_row >= 0, end[np.maximum(ops.api_row, 0)], -1)


def launch_threads(trace: Trace, ops: GpuOps) -> np.ndarray:
    """Thread id of each operation's launching API call (-1 where the API was not traced)."""
    if not trace.has("api") or not len(ops):
        return np.full(len(ops), -1, np.int64)
    tid = trace.frame("api", COLUMNS["api"])["tid"].to_numpy()
    return np.where(ops.api_row >= 0, tid[np.maximum(ops.api_row, 0)], -1)


def kernel_symbols(trace: Trace) -> np.ndarray:
    """One code per distinct (name, grid, block) of each operation (-1 for copies, memsets and replays), int32.

    The name alone merges a layer's GEMVs with the lm_head's (one kernel, another grid); the
    launch configuration tells them apart, which is what makes a step's kernel sequence visible.
    Computed on demand (the kernel-sequence step detector and a few rules need it) and cached.
    """
    return trace.memo(("activity.kernel_symbols",), lambda: _kernel_symbols(trace))


def _kernel_symbols(trace: Trace) -> np.ndarray:
    """:func:`kernel_symbols`, built."""
    ops = gpu_ops(trace)
    kernels = ops.kind == KERNEL
    if kernels.any():
        symbols = _symbols(trace.frame("kernels", COLUMNS["kernels"]))
        rows = ops.table_row
        if isinstance(rows, Spliced) and rows.base is None and rows.rows == len(symbols) and not (
                ops.kind[rows.at] == KERNEL).any():  # the kernels in frame order, the other rows spliced in
            out = interleave(symbols, rows.at, np.full(len(rows.at), -1), symbols.dtype)
        else:
            # Every row gathered by its table row (clipped: a copy's row may lie past the kernels), then
            # the other kinds set to -1: no masked row-number and value arrays beside the result.
            out = np.take(symbols, np.asarray(rows), mode="clip")
            out[~kernels] = -1
        del symbols
        if KERNEL not in built_gpu_ops(trace)[1]:  # kernel rows not in start order: number them as met
            out = _first_seen_codes(out)
    else:
        out = np.full(len(ops), -1, np.int32)
    out.flags.writeable = False
    return out


def _first_seen_codes(codes: np.ndarray) -> np.ndarray:
    """``codes`` renumbered by first appearance in operation order (-1 kept). Codes come numbered in the kernel
    table's row order; when that is not start order (nsys 2025.6 on may export rows in any order), the numbers
    would follow the file, and the detectors that break ties by symbol with them."""
    out = np.full(len(codes), -1, codes.dtype)
    known = codes >= 0
    out[known] = pd.factorize(codes[known])[0]
    return out


def _symbols(kernels: pd.DataFrame) -> np.ndarray:
    """Codes of (name, grid, block) per kernel row: a 64-bit mix of the fields, then one hash factorization."""
    key = kernels["name"].cat.codes.to_numpy().astype(np.uint64) if "name" in kernels else np.zeros(
        len(kernels), np.uint64)
    # In place (the same bits as int64 -> uint64 conversions): one key array, not four temporaries per field.
    with np.errstate(over="ignore"):
        for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"):
            if c not in kernels:
                continue
            np.multiply(key, np.uint64(1_000_003), out=key)
            dtype = kernels[c].dtype  # a numpy integer column as it is; nullable or float ones through _int
            field = kernels[c].to_numpy() if isinstance(dtype, np.dtype) and dtype.kind in "iu" else _int(
                kernels, c, np.int64)
            if field.strides == (0,):  # one launch dimension for every kernel (loaders.columns.one_value)
                field = field[:1].astype(np.int64)
            np.bitwise_xor(key, field, out=key, casting="unsafe", dtype=np.uint64)  # sign-extended, as int64 -> uint64
    codes, _ = pd.factorize(key)
    # Dense codes (fewer than rows): int32 holds them, half the bytes kept for the run.
    return codes.astype(np.int32 if len(codes) < 2**31 else np.int64)


def graph_replays(trace: Trace, ops: GpuOps | None = None) -> pd.DataFrame:
    """One row per graph launch call: its GPU interval, device, stream, thread and graph identity.

    Graph mode: the replay row itself. Node mode: the kernels (and copies) sharing the launch's
    correlationId, from the first start to the last end; the graph is known by the symbol of
    its first kernel. Columns: pid, corr, launch, launch_end, tid, device, stream, start, end, graph.
    """
    ops = gpu_ops(trace) if ops is None else ops
    mask = ops.by_graph
    columns = ["pid", "corr", "launch", "launch_end", "tid", "device", "stream", "start", "end", "graph"]
    if not mask.any():
        return pd.DataFrame(columns=columns)
    mine = ops.take(mask)
    symbols = kernel_symbols(trace)[mask].astype(np.int64) if ops is gpu_ops(trace) else np.full(
        int(mask.sum()), -1, np.int64)
    frame = pd.DataFrame({"pid": mine.pid, "corr": mine.corr, "launch": mine.launch,
                          "launch_end": launch_ends(trace, mine), "tid": launch_threads(trace, mine),
                          "device": mine.device, "stream": mine.stream, "start": mine.start, "end": mine.end,
                          "graph": mine.graph, "first_symbol": symbols})
    grouped = frame.groupby(["pid", "corr"], sort=False)
    out = grouped.agg(launch=("launch", "first"), launch_end=("launch_end", "first"), tid=("tid", "first"),
                      device=("device", "first"), stream=("stream", "first"), start=("start", "min"),
                      end=("end", "max"), graph=("graph", "max"), first_symbol=("first_symbol", "first"))
    out = out.reset_index()
    # Node mode has no graph id: the first kernel's symbol stands for the graph.
    out["graph"] = np.where(out["graph"] >= 0, out["graph"], 1_000_000_000 + out["first_symbol"])
    return out.drop(columns="first_symbol").sort_values("launch", kind="stable").reset_index(drop=True)
