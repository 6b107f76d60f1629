"""The trace checked against itself: records that were lost, cut or do not fit together.

Each check measures one way a capture can lie, and its size: how many records of how many, and
how much of the steady state it touches. Checks sort what they read themselves, so an export
whose rows come in any order (nsys 2025.6 on) gives the same answer.

Left out on measurement: correlation-id gaps (every intact h200 trace skips most ids: decode_eager
sees 16,486 of 95,666, the driver's internal calls take the rest) and ``ANALYSIS_DETAILS``' own
start/stop times (another clock; only its duration is used). Same-stream overlaps below
:data:`OVERLAP_SLACK_NS` are timestamp granularity (intact eager traces overlap by up to 896 ns).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from nsys_rules.analysis.names import GRAPH_LAUNCH_APIS, KERNEL_LAUNCH_APIS, in_set
from nsys_rules.model.activity import KERNEL, MEMCPY, GpuOps, gpu_ops, kernel_symbols
from nsys_rules.model.diagnostics import CUDA_TABLES, Reason
from nsys_rules.model.trace import Trace, base_api_name
from nsys_rules.model.windows import Window

#: Same-stream overlaps are a note below UNTRUSTWORTHY_PCT (PDL kernels overlap: triton-pdl-tutorial 3.1 %).
#: Overlap of two operations on one stream that is timestamp granularity, not damage.
OVERLAP_SLACK_NS = 1_000
#: A GPU operation may start this much before its launch call by clock granularity.
LAUNCH_SLACK_NS = 1_000
#: Slack past the capture's recorded duration.
CAPTURE_SLACK_NS = 1_000_000
#: Shares (percent) above which a check is a caveat and above which the trace is untrustworthy.
CAVEAT_PCT, UNTRUSTWORTHY_PCT = 0.5, 5.0
#: NVTX event types that are ranges (push/pop and start/end, both NVTX generations).
RANGE_TYPES = (59, 60, 70, 71)

#: The API columns the step model reads anyway (a column more would read the 2.2M-row table again on the big trace;
#: failed launches, `returnValue`, are rare enough to be counted as lost).
_API_COLUMNS = ("start", "end", "correlation_id", "pid", "tid", "name")


@dataclass(frozen=True)
class Measured:
    """One check's result: ``count`` of ``of`` records, and the share of the steady state's (``steady``)."""

    count: int
    of: int
    steady: int = 0
    steady_of: int = 0

    def size(self) -> dict[str, Any]:
        """The ``size`` object of the reason."""
        out: dict[str, Any] = {"count": self.count, "of": self.of, "pct": _pct(self.count, self.of)}
        if self.steady_of:
            out["steady_pct"] = _pct(self.steady, self.steady_of)
        return out

    @property
    def worst_pct(self) -> float:
        """The larger of the whole-trace share and the steady-state share (percent)."""
        return max(_pct(self.count, self.of), _pct(self.steady, self.steady_of))


def _pct(count: int, of: int) -> float:
    return round(100.0 * count / of, 3) if of else 0.0


def self_checks(trace: Trace, steady: Window) -> tuple[list[Reason], dict[str, dict[str, Any]]]:
    """Every check of the trace: the reasons they found, and each check's measured size (``checks``)."""
    reasons: list[Reason] = []
    sizes: dict[str, dict[str, Any]] = {}
    ops = gpu_ops(trace)
    api = _api(trace)
    for code, measure in _CHECKS:
        result = measure(trace, ops, api, steady)
        if result is None:
            continue
        measured, devices = result
        sizes[code] = measured.size()
        if measured.count:
            level = _level(code, measured)
            reasons.append(Reason(code, level, "check", _MESSAGES[code].format(
                n=measured.count, of=measured.of, pct=measured.size()["pct"]), _FIXES[code], _TABLES[code],
                tuple(sorted(devices)), measured.size()))
    _LOSS_CACHE.clear()  # keyed by object ids, which a later trace may reuse
    return reasons, sizes


def _level(code: str, m: Measured) -> str:
    """Only lost GPU records make a trace untrustworthy (the GPU's time is what the rules judge); the rest is at
    most a caveat: a GPU operation without its call is still measured, only the call's time and thread are missing."""
    pct = m.worst_pct
    if code in ("capture-end-cut", "nvtx-unclosed", "untraced-process", "outside-capture", "graph-replays-partial"):
        return "untrustworthy" if code == "graph-replays-partial" and pct >= UNTRUSTWORTHY_PCT else "caveat"
    if code == "stream-overlap":  # programmatic dependent launch overlaps kernels of one stream by design
        return "caveat" if pct >= UNTRUSTWORTHY_PCT else "note"
    if code == "launches-without-gpu" and pct >= UNTRUSTWORTHY_PCT:
        return "untrustworthy"
    return "caveat" if pct >= CAVEAT_PCT else "note"


def check_needs(trace: Trace) -> dict[str, tuple[str, ...]]:
    """Tables and columns the checks read (for the engine's one preload)."""
    wanted = {"api": _API_COLUMNS, "nvtx": ("start", "raw_end", "event_type")}
    return {table: cols for table, cols in wanted.items() if trace.has(table)}


def _api(trace: Trace) -> pd.DataFrame | None:
    if not trace.has("api"):
        return None
    frame = trace.frame("api", _API_COLUMNS)
    return frame if len(frame) else None


def _launches(api: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Rows of successful kernel and graph launch calls made outside stream capture (a launch while its thread
    captures a graph records the kernel into the graph and runs nothing), and which of them are graph launches."""
    names = api["name"]
    distinct = [str(n) for n in (names.cat.categories if hasattr(names, "cat") else pd.unique(names))]

    def calls(keep: Any) -> np.ndarray:
        return in_set(names, frozenset(n for n in distinct if keep(n)))

    is_launch = calls(lambda n: base_api_name(n) in KERNEL_LAUNCH_APIS | GRAPH_LAUNCH_APIS)
    is_graph = calls(lambda n: base_api_name(n) in GRAPH_LAUNCH_APIS)
    begin = calls(lambda n: "BeginCapture" in n)
    if begin.any():
        is_launch &= ~_in_capture(api, begin, calls(lambda n: "EndCapture" in n))
    rows = np.flatnonzero(is_launch)
    return rows, is_graph[rows]


def _in_capture(api: pd.DataFrame, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Which calls ran between a thread's BeginCapture and its EndCapture."""
    tid = api["tid"].to_numpy(np.int64)
    start = api["start"].to_numpy(np.int64)
    inside = np.zeros(len(api), bool)
    for t in np.unique(tid[begin]):
        opens = np.sort(start[begin & (tid == t)])
        closes = np.sort(start[end & (tid == t)])
        mine = tid == t
        for lo in opens:
            later = closes[closes >= lo]
            hi = later[0] if len(later) else np.iinfo(np.int64).max
            inside |= mine & (start >= lo) & (start <= hi)
    return inside


def _lost_launches(trace: Trace, ops: GpuOps, api: pd.DataFrame | None, steady: Window, tail: bool
                   ) -> tuple[Measured, set[int]] | None:
    """Launch calls whose GPU work is not in the trace: before the last GPU operation of their process (lost) or
    after it (``tail``: the capture ended before the work was recorded)."""
    if api is None:
        return None
    key = (id(ops), id(api), id(steady))
    if _LOSS_CACHE.get("key") != key:  # the lost and the cut check share one pass over the launches
        _LOSS_CACHE.clear()
        _LOSS_CACHE.update(key=key, value=_launch_loss(trace, ops, api))
    loss = _LOSS_CACHE["value"]
    if loss is None:
        return None
    rows, pid, start, missing, after = loss
    hit = missing & (after if tail else ~after)
    in_steady = steady.mask(start)
    devices = {int(d) for p in np.unique(pid[hit]) for d in np.unique(ops.device[ops.pid == p])}
    return Measured(int(hit.sum()), len(rows), int((hit & in_steady).sum()), int(in_steady.sum())), devices


_LOSS_CACHE: dict[str, Any] = {}


def _launch_loss(trace: Trace, ops: GpuOps, api: pd.DataFrame) -> Any:
    """The launch rows, their process and start, which have no GPU record, and which come after their process's
    last GPU operation. A GPU operation knows its launching row (``GpuOps.api_row``, the launch join): marking
    those rows costs one pass, no hashing of a million keys."""
    rows, graph = _launches(api)
    if not len(rows):
        return None
    if graph.any() and not (np.asarray(ops.by_graph).any() or trace.has("graph_trace")):
        rows = rows[~graph]  # graph work hidden by the capture mode: graph-trace-hidden says so
    launched = np.zeros(len(api), bool)
    known = ops.api_row[ops.api_row >= 0]
    launched[known[known < len(api)]] = True
    pid = api["pid"].to_numpy(np.int64)[rows]
    start = api["start"].to_numpy(np.int64)[rows]
    # A process with no GPU record at all lost its GPU activity (or never had it traced): no cut end, all lost.
    return rows, pid, start, ~launched[rows], start > _last_start_of(ops, pid)


def _last_start_of(ops: GpuOps, pid: np.ndarray) -> np.ndarray:
    """For each of ``pid``: the start of its process's last GPU operation (int64 max when it has none)."""
    out = np.full(len(pid), np.iinfo(np.int64).max, np.int64)
    if not len(ops) or not len(pid):
        return out
    pids = np.asarray(ops.pid, np.int64)
    distinct = np.sort(pd.unique(pids))
    last = np.array([int(ops.start[pids == p].max()) for p in distinct], np.int64)  # a few processes at most
    at = np.clip(np.searchsorted(distinct, pid), 0, len(distinct) - 1)
    found = distinct[at] == pid
    out[found] = last[at[found]]
    return out


def _check_lost(trace: Trace, ops: GpuOps, api: pd.DataFrame | None, steady: Window) -> Any:
    return _lost_launches(trace, ops, api, steady, tail=False)


def _check_cut(trace: Trace, ops: GpuOps, api: pd.DataFrame | None, steady: Window) -> Any:
    return _lost_launches(trace, ops, api, steady, tail=True)


def _check_orphans(trace: Trace, ops: GpuOps, api: pd.DataFrame | None, steady: Window) -> Any:
    """GPU operations of a traced process whose launching call is not in the trace (Unified Memory migrations,
    correlationId 0, have no call and are left out)."""
    if api is None or not len(ops):
        return None
    corr = np.asarray(ops.corr, np.int64)
    traced = np.isin(ops.pid, pd.unique(api["pid"].to_numpy(np.int64)))
    candidates = traced & (corr > 0)
    hit = candidates & (ops.api_row < 0)
    in_steady = steady.mask(ops.start) & candidates
    return (Measured(int(hit.sum()), int(candidates.sum()), int((hit & in_steady).sum()), int(in_steady.sum())),
            {int(d) for d in np.unique(ops.device[hit])})


def _check_untraced(trace: Trace, ops: GpuOps, api: pd.DataFrame | None, steady: Window) -> Any:
    """GPU work of processes whose calls the capture did not record (their launches, syncs and gaps unseen)."""
    if api is None or not len(ops):
        return None
    hit = ~np.isin(ops.pid, pd.unique(api["pid"].to_numpy(np.int64)))
    in_steady = steady.mask(ops.start)
    return (Measured(int(hit.sum()), len(ops), int((hit & in_steady).sum()), int(in_steady.sum())),
            {int(d) for d in np.unique(ops.device[hit])})


def _check_partial_replays(trace: Trace, ops: GpuOps, api: pd.DataFrame | None, steady: Window) -> Any:
    """Node-mode graph replays holding fewer operations than the usual replay of the same graph (the graph known
    by its first kernel): nodes of some replays were not recorded."""
    mask = np.asarray(ops.by_graph)
    if not mask.any():
        return None
    symbols = kernel_symbols(trace)[mask].astype(np.int64)
    frame = pd.DataFrame({"pid": np.asarray(ops.pid[mask], np.int64), "corr": np.asarray(ops.corr, np.int64)[mask],
                          "start": ops.start[mask], "symbol": symbols, "device": ops.device[mask]})
    frame = frame.sort_values(["pid", "corr", "start", "symbol"], kind="stable")
    replays = frame.groupby(["pid", "corr"], sort=True).agg(n=("start", "size"), start=("start", "min"),
                                                             graph=("symbol", "first"), device=("device", "first"))
    usual = replays.groupby("graph")["n"].agg(lambda n: int(n.value_counts().sort_index(ascending=False).idxmax()))
    sizes = replays.groupby("graph")["n"].transform("size")
    partial = (replays["n"].to_numpy() < replays["graph"].map(usual).to_numpy()) & (sizes.to_numpy() >= 3)
    in_steady = steady.mask(replays["start"].to_numpy(np.int64))
    return (Measured(int(partial.sum()), len(replays), int((partial & in_steady).sum()), int(in_steady.sum())),
            {int(d) for d in np.unique(replays["device"].to_numpy()[partial])})


def _check_overlap(trace: Trace, ops: GpuOps, api: pd.DataFrame | None, steady: Window) -> Any:
    """Operations on one stream that overlap (a stream runs its work in order) or end before they start."""
    if not len(ops):
        return None
    keep = ~np.asarray(ops.by_graph)  # a graph's branches run side by side on the launch stream
    pid = np.asarray(ops.pid, np.int64)[keep]
    dev = np.asarray(ops.device, np.int64)[keep]
    stream = np.asarray(ops.stream, np.int64)[keep]
    start, end = ops.start[keep], ops.end[keep]
    order = np.lexsort((end, start, stream, dev, pid))
    pid, dev, stream, start, end = pid[order], dev[order], stream[order], start[order], end[order]
    same = (pid[1:] == pid[:-1]) & (dev[1:] == dev[:-1]) & (stream[1:] == stream[:-1])
    bad = np.zeros(len(start), bool)
    bad[1:] = same & (start[1:] < end[:-1] - OVERLAP_SLACK_NS)
    bad |= end < start
    in_steady = steady.mask(start)
    return (Measured(int(bad.sum()), len(start), int((bad & in_steady).sum()), int(in_steady.sum())),
            {int(d) for d in np.unique(dev[bad])})


def _check_before_launch(trace: Trace, ops: GpuOps, api: pd.DataFrame | None, steady: Window) -> Any:
    """GPU operations that start before the call that launched them: the GPU and CPU clocks disagree."""
    if api is None or not len(ops):
        return None
    known = ops.api_row >= 0
    kinds = np.asarray(ops.kind)
    known &= (kinds == KERNEL) | (kinds == MEMCPY)
    hit = known & (ops.start < ops.launch - LAUNCH_SLACK_NS)
    in_steady = steady.mask(ops.start) & known
    return (Measured(int(hit.sum()), int(known.sum()), int((hit & in_steady).sum()), int(in_steady.sum())),
            {int(d) for d in np.unique(ops.device[hit])})


def _check_outside(trace: Trace, ops: GpuOps, api: pd.DataFrame | None, steady: Window) -> Any:
    """Records timed before the capture began (negative) or after its recorded duration (ANALYSIS_DETAILS)."""
    rows = trace.export.rows("ANALYSIS_DETAILS", ("startTime", "stopTime"), limit=4)
    spans = [int(b) - int(a) for a, b in rows if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer))]
    if not spans or not len(ops):
        return None
    limit = max(spans) + CAPTURE_SLACK_NS
    hit = (ops.start < 0) | (ops.end > limit)
    count, of = int(hit.sum()), len(ops)
    if api is not None:
        start, end = api["start"].to_numpy(np.int64), api["end"].to_numpy(np.int64)
        count += int(((start < 0) | (end > limit)).sum())
        of += len(api)
    return Measured(count, of), {int(d) for d in np.unique(ops.device[hit])}


def _check_nvtx(trace: Trace, ops: GpuOps, api: pd.DataFrame | None, steady: Window) -> Any:
    """NVTX ranges never closed: the range (often the last step) runs to the end of the capture, or its end was
    lost; step ranges and NVTX-based windows read them as longer than they were."""
    if not trace.has("nvtx"):
        return None
    nvtx = trace.frame("nvtx", ("start", "raw_end", "event_type"))
    ranges = nvtx["event_type"].isin(RANGE_TYPES).to_numpy()
    if not ranges.any():
        return None
    hit = ranges & (nvtx["raw_end"].to_numpy(np.int64) < 0)
    in_steady = steady.mask(nvtx["start"].to_numpy(np.int64)) & ranges
    return Measured(int(hit.sum()), int(ranges.sum()), int((hit & in_steady).sum()), int(in_steady.sum())), set()


_CHECKS = (
    ("launches-without-gpu", _check_lost),
    ("capture-end-cut", _check_cut),
    ("gpu-without-launch", _check_orphans),
    ("untraced-process", _check_untraced),
    ("graph-replays-partial", _check_partial_replays),
    ("stream-overlap", _check_overlap),
    ("gpu-before-launch", _check_before_launch),
    ("outside-capture", _check_outside),
    ("nvtx-unclosed", _check_nvtx),
)

_MESSAGES = {
    "launches-without-gpu": "{n} of {of} kernel launches ({pct}%) have no GPU record: their work was lost, so idle "
                            "time measured around them is no idle time",
    "capture-end-cut": "{n} of {of} kernel launches at the end have no GPU record: the capture ended before their "
                       "work was recorded (the last step is cut)",
    "gpu-without-launch": "{n} of {of} GPU operations ({pct}%) have no launching call: API records were lost",
    "untraced-process": "{n} of {of} GPU operations ({pct}%) belong to processes whose calls were not traced",
    "graph-replays-partial": "{n} of {of} CUDA graph replays ({pct}%) hold fewer nodes than the same graph's other "
                             "replays: nodes were not recorded",
    "stream-overlap": "{n} of {of} GPU operations ({pct}%) overlap the previous one on their stream or end before "
                      "they start: timestamps are off",
    "gpu-before-launch": "{n} of {of} GPU operations ({pct}%) start before the call that launched them: GPU and "
                         "CPU clocks disagree",
    "outside-capture": "{n} of {of} records ({pct}%) lie outside the capture's time span",
    "nvtx-unclosed": "{n} of {of} NVTX ranges ({pct}%) were never closed: cut by the capture's end or their end "
                     "lost; steps they mark read longer than they were",
}

_FIXES = {
    "launches-without-gpu": "capture again with larger CUPTI buffers (`--cuda-flush-interval=100`), fewer traced "
                            "APIs (`--trace=cuda,nvtx`) or a shorter `--duration`",
    "capture-end-cut": "end the capture after the work finishes (`cudaDeviceSynchronize()` before "
                       "`cudaProfilerStop()`, or a longer `--duration`)",
    "gpu-without-launch": "capture again with larger CUPTI buffers (`--cuda-flush-interval=100`) and the same "
                          "`--trace` for every process",
    "untraced-process": "capture every process of the program: `nsys profile --trace=cuda` on the launcher "
                        "(child processes are followed) rather than on one worker",
    "graph-replays-partial": "capture graph replays whole: `--cuda-graph-trace=graph` (one record per replay), or "
                             "node mode with larger buffers (`--cuda-flush-interval=100`)",
    "stream-overlap": "re-export with the nsys that captured it; if it persists, capture again (`nsys status -e`)",
    "gpu-before-launch": "capture again; on a VM or with an unstable TSC, pin the clock source "
                         "(`nsys status -e` checks the timer)",
    "outside-capture": "re-export the report with the nsys that captured it (`nsys export --type=sqlite`)",
    "nvtx-unclosed": "end every range before the capture stops (a `with` block, or `cudaProfilerStop()` after the "
                     "last step's range ends)",
}

_TABLES: dict[str, tuple[str, ...]] = {
    "launches-without-gpu": ("kernels", "memcpy", "memset", "graph_trace"),
    "capture-end-cut": ("kernels", "memcpy", "memset", "graph_trace"),
    "gpu-without-launch": ("api",),
    "untraced-process": ("api",),
    "graph-replays-partial": ("kernels", "graph_trace"),
    "stream-overlap": ("kernels", "memcpy", "memset"),
    "gpu-before-launch": CUDA_TABLES,
    "outside-capture": CUDA_TABLES,
    "nvtx-unclosed": ("nvtx",),
}
