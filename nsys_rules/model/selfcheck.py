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

from typing import Any

import numpy as np
import pandas as pd

from nsys_rules.model.activity import gpu_ops, kernel_symbols
from nsys_rules.model.diagnostics import CUDA_TABLES, Reason
from nsys_rules.model.selfcheck_measure import (LAUNCH_SLACK_NS, OVERLAP_SLACK_NS, Inputs, Measured, Result,
                                                before_launch, lost_launches, outside, plain, stream_overlaps)
from nsys_rules.model.trace import Trace
from nsys_rules.model.windows import Window

__all__ = ["CAPTURE_SLACK_NS", "LAUNCH_SLACK_NS", "OVERLAP_SLACK_NS", "Measured", "check_needs", "self_checks"]

#: Slack past the capture's recorded duration.
CAPTURE_SLACK_NS = 1_000_000
#: Shares (percent) above which a check is a caveat and above which the trace is untrustworthy.
#: Same-stream overlaps are a note below UNTRUSTWORTHY_PCT (PDL kernels overlap: triton-pdl-tutorial 3.1 %).
CAVEAT_PCT, UNTRUSTWORTHY_PCT = 0.5, 5.0
#: NVTX event types that are ranges (push/pop and start/end, both NVTX generations).
RANGE_TYPES = (59, 60, 70, 71)

#: The API columns the step model reads anyway (a column more would read the 2.2M-row table again on the big trace;
#: failed launches, `returnValue`, are rare enough to be counted as lost).
_API_COLUMNS = ("start", "end", "correlation_id", "pid", "tid", "name")
#: The NVTX columns the step model reads anyway: an unclosed range's ``end`` reads as its start (the loader
#: makes it an instant); only such ranges need ``raw_end`` (its NULL) to tell them from ranges of no length.
_NVTX_COLUMNS = ("start", "end", "event_type")


def self_checks(trace: Trace, steady: Window) -> tuple[list[Reason], dict[str, dict[str, Any]]]:
    """Every check of the trace: the reasons they found, and each check's measured size (``checks``)."""
    reasons: list[Reason] = []
    sizes: dict[str, dict[str, Any]] = {}
    inputs = Inputs(trace, gpu_ops(trace), _api(trace), steady)
    for code, measure in _CHECKS:
        result = measure(inputs)
        if result is None:
            continue
        measured, devices = result
        sizes[code] = measured.size()
        if measured.count:
            level = _level(code, measured)
            reasons.append(Reason(code, level, "check", _MESSAGES[code].format(
                n=measured.count, of=measured.of, pct=measured.size()["pct"]), _FIXES[code], _TABLES[code],
                tuple(sorted(devices)), measured.size()))
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
    wanted = {"api": _API_COLUMNS, "nvtx": _NVTX_COLUMNS}
    return {table: cols for table, cols in wanted.items() if trace.has(table)}


def _api(trace: Trace) -> pd.DataFrame | None:
    if not trace.has("api"):
        return None
    frame = trace.frame("api", _API_COLUMNS)
    return frame if len(frame) else None


def _check_lost(inputs: Inputs) -> Result:
    return lost_launches(inputs, tail=False)


def _check_cut(inputs: Inputs) -> Result:
    return lost_launches(inputs, tail=True)


def _check_orphans(inputs: Inputs) -> Result:
    """GPU operations of a traced process whose launching call is not in the trace (Unified Memory migrations,
    correlationId 0, have no call and are left out)."""
    if inputs.api is None or not len(inputs.ops):
        return None
    ops = inputs.ops

    def flag(rows: slice) -> tuple[np.ndarray, np.ndarray]:
        counted = inputs.traced(rows) & (plain(ops.corr, rows) > 0)
        return counted, counted & (ops.api_row[rows] < 0)

    return inputs.tally(flag)


def _check_untraced(inputs: Inputs) -> Result:
    """GPU work of processes whose calls the capture did not record (their launches, syncs and gaps unseen)."""
    if inputs.api is None or not len(inputs.ops):
        return None

    def flag(rows: slice) -> tuple[np.ndarray, np.ndarray]:
        hit = ~inputs.traced(rows)
        return np.ones(len(hit), bool), hit

    return inputs.tally(flag)


def _check_partial_replays(inputs: Inputs) -> Result:
    """Node-mode graph replays holding fewer operations than the usual replay of the same graph (the graph known
    by its first kernel): nodes of some replays were not recorded."""
    ops = inputs.ops
    mask = np.asarray(ops.by_graph)
    if not mask.any():
        return None
    symbols = kernel_symbols(inputs.trace)[mask].astype(np.int64)
    frame = pd.DataFrame({"pid": np.asarray(ops.pid[mask], np.int64), "corr": np.asarray(ops.corr[mask], np.int64),
                          "start": ops.start[mask], "symbol": symbols, "device": ops.device[mask]})
    frame = frame.sort_values(["pid", "corr", "start", "symbol"], kind="stable")
    replays = frame.groupby(["pid", "corr"], sort=True).agg(n=("start", "size"), start=("start", "min"),
                                                             graph=("symbol", "first"), device=("device", "first"))
    usual = replays.groupby("graph")["n"].agg(lambda n: int(n.value_counts().sort_index(ascending=False).idxmax()))
    sizes = replays.groupby("graph")["n"].transform("size")
    partial = (replays["n"].to_numpy() < replays["graph"].map(usual).to_numpy()) & (sizes.to_numpy() >= 3)
    in_steady = inputs.steady.mask(replays["start"].to_numpy(np.int64))
    return (Measured(int(partial.sum()), len(replays), int((partial & in_steady).sum()), int(in_steady.sum())),
            {int(d) for d in np.unique(replays["device"].to_numpy()[partial])})


def _check_overlap(inputs: Inputs) -> Result:
    return stream_overlaps(inputs) if len(inputs.ops) else None


def _check_before_launch(inputs: Inputs) -> Result:
    return before_launch(inputs) if inputs.api is not None and len(inputs.ops) else None


def _check_outside(inputs: Inputs) -> Result:
    """Records timed before the capture began (negative) or after its recorded duration (ANALYSIS_DETAILS)."""
    rows = inputs.trace.export.rows("ANALYSIS_DETAILS", ("startTime", "stopTime"), limit=4)
    spans = [int(b) - int(a) for a, b in rows if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer))]
    if not spans or not len(inputs.ops):
        return None
    return outside(inputs, max(spans) + CAPTURE_SLACK_NS)


def _check_nvtx(inputs: Inputs) -> Result:
    """NVTX ranges never closed: the range (often the last step) runs to the end of the capture, or its end was
    lost; step ranges and NVTX-based windows read them as longer than they were."""
    if not inputs.trace.has("nvtx"):
        return None
    nvtx = inputs.trace.frame("nvtx", _NVTX_COLUMNS)
    ranges = nvtx["event_type"].isin(RANGE_TYPES).to_numpy()
    if not ranges.any():
        return None
    hit = ranges & (nvtx["end"].to_numpy() == nvtx["start"].to_numpy())
    if hit.any():  # no real trace has a range of no length, but one would read as unclosed: the raw end decides
        nvtx = inputs.trace.frame("nvtx", (*_NVTX_COLUMNS, "raw_end"))
        ranges = nvtx["event_type"].isin(RANGE_TYPES).to_numpy()
        hit = ranges & (nvtx["raw_end"].to_numpy(np.int64) < 0)
    in_steady = inputs.steady.mask(nvtx["start"].to_numpy(np.int64)) & ranges
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
