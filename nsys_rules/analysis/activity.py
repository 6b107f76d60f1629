"""Every GPU operation of a trace as one table: kernels, copies, memsets and graph replays.

One notion of GPU activity for the step model, the budget and every rule. In
``--cuda-graph-trace=graph`` captures the kernels of a graph have no rows of their own: the
replay (a ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` row) is the GPU work, on its stream and device.
In node mode the kernels are there, launched by the graph launch call. Idle is what none of
the operations covers.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..taxonomy import CLASSES, classify
from ..trace import Trace
from .launches import launching_rows
from .names import GRAPH_LAUNCH_APIS, in_set

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
                "grid_z", "block_x", "block_y", "block_z", "graph_node_id"),
    "memcpy": ("start", "end", "device_id", "stream_id", "pid", "correlation_id", "copy_kind", "bytes"),
    "memset": ("start", "end", "device_id", "stream_id", "pid", "correlation_id", "bytes"),
    "graph_trace": ("start", "end", "device_id", "stream_id", "pid", "correlation_id", "graph_id"),
    "api": ("start", "end", "correlation_id", "pid", "tid", "name"),
}


@dataclass(frozen=True, eq=False)
class GpuOps:
    """GPU operations sorted by start; every field is an array aligned with the others.

    ``launch``/``launch_end``/``tid`` describe the launching API call (-1 when the API was not
    traced). ``symbol`` identifies a kernel by name and launch configuration (the unit of the
    repeating kernel sequence); a graph replay's symbol is its graph (``graph_id`` in graph
    mode, the first node of the replay in node mode); copies and memsets have -1.
    """

    start: np.ndarray
    end: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    pid: np.ndarray
    kind: np.ndarray
    cls: np.ndarray
    corr: np.ndarray
    launch: np.ndarray
    launch_end: np.ndarray
    tid: np.ndarray
    by_graph: np.ndarray
    symbol: np.ndarray
    nbytes: np.ndarray
    copy_kind: np.ndarray
    table_row: np.ndarray

    def __len__(self) -> int:
        return len(self.start)

    def take(self, mask: np.ndarray) -> "GpuOps":
        """The operations where ``mask`` is true (or at the given row numbers), in the same order."""
        return GpuOps(**{name: getattr(self, name)[mask] for name in _FIELDS})

    @property
    def duration(self) -> np.ndarray:
        """End minus start of each operation."""
        return self.end - self.start


_FIELDS = tuple(GpuOps.__dataclass_fields__)


def gpu_ops(trace: Trace) -> GpuOps:
    """The trace's GPU operations (cached per trace: the step model, the budget and rules share it)."""
    hit = _CACHE.get(trace)
    if hit is None:
        hit = _build(trace)
        _CACHE[trace] = hit
    return hit


_CACHE: "weakref.WeakKeyDictionary[Trace, GpuOps]" = weakref.WeakKeyDictionary()


def _build(trace: Trace) -> GpuOps:
    parts: list[dict[str, np.ndarray]] = []
    for kind, table in KIND_TABLES.items():
        if not trace.has(table):
            continue
        frame = trace.frame(table, COLUMNS[table])
        if not len(frame):
            continue
        parts.append(_part(trace, kind, frame))
    if not parts:
        empty = {name: np.empty(0, np.int64) for name in _FIELDS}
        empty["by_graph"] = np.empty(0, bool)
        return GpuOps(**empty)
    merged = {name: np.concatenate([p[name] for p in parts]) if len(parts) > 1 else parts[0][name] for name in _FIELDS}
    if not _rising(merged["start"]):
        order = np.argsort(merged["start"], kind="stable")
        merged = {name: values[order] for name, values in merged.items()}
    for values in merged.values():
        values.flags.writeable = False  # shared by every rule of the trace
    return GpuOps(**merged)


def _rising(values: np.ndarray) -> bool:
    return len(values) < 2 or bool((values[1:] >= values[:-1]).all())


def _int(frame: pd.DataFrame, column: str, dtype: type = np.int64, fill: int = -1) -> np.ndarray:
    if column not in frame:
        return np.full(len(frame), fill, dtype)
    series = frame[column]
    if isinstance(series.dtype, pd.api.extensions.ExtensionDtype) or series.dtype.kind == "f":
        return series.to_numpy(dtype=np.float64, na_value=fill).astype(dtype)  # nullable ints from damaged exports
    return series.to_numpy().astype(dtype, copy=False)


def _part(trace: Trace, kind: int, frame: pd.DataFrame) -> dict[str, np.ndarray]:
    n = len(frame)
    pid = _int(frame, "pid")
    corr = _int(frame, "correlation_id", fill=0)
    launch = np.full(n, -1, np.int64)
    launch_end = np.full(n, -1, np.int64)
    tid = np.full(n, -1, np.int64)
    by_graph = np.zeros(n, bool)
    if trace.has("api"):
        api = trace.frame("api", COLUMNS["api"])
        if len(api):
            rows, found = launching_rows(trace, pid, corr)
            launch = np.where(found, api["start"].to_numpy()[rows], -1)
            launch_end = np.where(found, api["end"].to_numpy()[rows], -1)
            tid = np.where(found, _int(api, "tid")[rows], -1)
            by_graph = found & in_set(trace.api_names(), GRAPH_LAUNCH_APIS)[rows]
    out = {
        "start": frame["start"].to_numpy(np.int64), "end": frame["end"].to_numpy(np.int64),
        "device": _int(frame, "device_id"), "stream": _int(frame, "stream_id"), "pid": pid,
        "kind": np.full(n, kind, np.int8), "corr": corr, "launch": launch, "launch_end": launch_end, "tid": tid,
        "by_graph": by_graph, "nbytes": _int(frame, "bytes", fill=0), "copy_kind": _int(frame, "copy_kind"),
        "table_row": np.arange(n, dtype=np.int64),
    }
    if kind == KERNEL:
        out["cls"] = classify(frame["name"]).cat.codes.to_numpy().astype(np.int8)
        out["symbol"] = kernel_symbols(frame)
    else:
        out["cls"] = np.full(n, REPLAY_CLASS if kind == REPLAY else COPY_CLASS, np.int8)
        out["symbol"] = _int(frame, "graph_id") if kind == REPLAY else np.full(n, -1, np.int64)
    return out


def kernel_symbols(kernels: pd.DataFrame) -> np.ndarray:
    """One code per distinct (name, grid, block): the same kernel on the same shape of launch.

    The name alone merges a layer's GEMVs with the lm_head's (one kernel, another grid); the
    launch configuration tells them apart, which is what makes a step's kernel sequence visible.
    """
    cols = [kernels["name"].cat.codes.to_numpy().astype(np.int64)] if "name" in kernels else []
    for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"):
        if c in kernels:
            cols.append(_int(kernels, c))
    if not cols:
        return np.full(len(kernels), -1, np.int64)
    if len(cols) == 1:
        return cols[0]
    keys = np.stack(cols, axis=1)
    _, codes = np.unique(keys, axis=0, return_inverse=True)
    return codes.reshape(-1).astype(np.int64)


def graph_replays(ops: GpuOps) -> pd.DataFrame:
    """One row per graph launch call: its GPU interval, device, stream, thread and graph identity.

    Graph mode: the replay row itself. Node mode: the kernels (and copies) sharing the launch's
    correlationId, from the first start to the last end; the graph is known by the symbol of
    its first kernel. Columns: pid, corr, launch, launch_end, tid, device, stream, start, end, graph.
    """
    mask = ops.by_graph
    if not mask.any():
        return pd.DataFrame(columns=["pid", "corr", "launch", "launch_end", "tid", "device", "stream", "start", "end",
                                     "graph"])
    frame = pd.DataFrame({"pid": ops.pid[mask], "corr": ops.corr[mask], "launch": ops.launch[mask],
                          "launch_end": ops.launch_end[mask], "tid": ops.tid[mask], "device": ops.device[mask],
                          "stream": ops.stream[mask], "start": ops.start[mask], "end": ops.end[mask],
                          "graph": np.where(ops.kind[mask] == REPLAY, ops.symbol[mask], -1),
                          "first_symbol": ops.symbol[mask]})
    grouped = frame.groupby(["pid", "corr"], sort=False)
    out = grouped.agg(launch=("launch", "first"), launch_end=("launch_end", "first"), tid=("tid", "first"),
                      device=("device", "first"), stream=("stream", "first"), start=("start", "min"),
                      end=("end", "max"), graph=("graph", "max"), first_symbol=("first_symbol", "first"))
    out = out.reset_index()
    # Node mode has no graph id: the first kernel's symbol stands for the graph.
    out["graph"] = np.where(out["graph"] >= 0, out["graph"], 1_000_000_000 + out["first_symbol"])
    return out.drop(columns="first_symbol").sort_values("launch", kind="stable").reset_index(drop=True)
