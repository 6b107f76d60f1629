"""``nvtx_sum``: time per NVTX range (push/pop and start/end), as ``nsys stats`` prints it.

A range is named ``<domain>:<text>`` (the default domain has no name, hence ``:step``); the
domain's name comes from its ``nvtxDomainCreate`` event in the same process. Push/pop and
start/end ranges of one name are separate rows (``Style``). A range still open when the capture
ended runs to the last NVTX timestamp, as in nsys. Marks are not ranges and are left out.
"""

from __future__ import annotations

import numpy as np

from nsys_rules.analysis.grouped import first_rows, group_ids, group_stats
from nsys_rules.loaders.sqlite import NULL_INT
from nsys_rules.model.trace import Trace
from nsys_rules.model.windows import Window
from nsys_rules.stats.common import PERCENTILES, StatsResult, duration_summary, order_rows, report_columns, rows_from_columns
from nsys_rules.stats.filters import host_mask

NAME = "nvtx_sum"
VARIANTS: tuple[str, ...] = ()
COLUMNS = ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
           "StdDev (ns)", "Style", "Range"]

#: NVTX_EVENTS.eventType values (nsys's ENUM_NSYS_EVENT_TYPE).
DOMAIN_CREATE = 75
STYLES = {59: "PushPop", 60: "StartEnd", 70: "PushPop", 71: "StartEnd"}  # NVTX and NVTXT (nvtx-trace) ranges


def build(trace: Trace, window: Window | None, variant: str | None = None, percentiles: bool = False) -> StatsResult:
    """Run the report on ``trace`` restricted to ``window``."""
    columns = report_columns(COLUMNS, percentiles, names=2)
    if not trace.has("nvtx"):
        return StatsResult(columns, reason=f"{trace.path} does not contain NV Tools Extension (NVTX) data; "
                           "annotate with NVTX and capture with `nsys profile --trace=nvtx`")
    nvtx = trace.frame("nvtx", ["start", "end", "raw_end", "event_type", "name", "pid", "domain_id"])
    event_type = nvtx["event_type"].to_numpy()
    start = nvtx["start"].to_numpy()
    raw_end = nvtx["raw_end"].to_numpy()
    last = max(int(start.max()), int(raw_end.max())) if len(start) else 0
    is_range = np.isin(event_type, list(STYLES)) & host_mask(nvtx, window)
    if not is_range.any():
        return StatsResult(columns, reason="no NVTX push/pop or start/end ranges"
                           + (" in the selected time range" if window is not None else " in the trace"))
    names = nvtx["name"].astype(object).to_numpy()
    pid = nvtx["pid"].to_numpy()
    domain = nvtx["domain_id"].to_numpy()
    domain_names = _domain_names(event_type, start, names, pid, domain)
    idx = np.flatnonzero(is_range)
    prefixes = [domain_names.get((int(p), int(d)), "") for p, d in zip(pid[idx], domain[idx], strict=True)]
    tags = np.array([f"{pre}:{'' if _missing(n) else n}" for pre, n in zip(prefixes, names[idx], strict=True)],
                    dtype=object)
    styles = np.array([STYLES[int(t)] for t in event_type[idx]], dtype=object)
    durations = np.where(raw_end[idx] == NULL_INT, last, raw_end[idx]) - start[idx]
    group = group_ids([tags, styles])
    first = first_rows(group)
    n_groups = len(first)
    stats = group_stats(group, durations, n_groups, PERCENTILES if percentiles else ())
    cols = duration_summary(stats, [str(tags[first[g]]) for g in stats.group], "Range", "Instances", percentiles)
    ranges = cols.pop("Range")
    cols["Style"] = [str(styles[first[g]]) for g in stats.group]
    cols["Range"] = ranges
    rows = order_rows(rows_from_columns(cols), ("Total Time (ns)", True), ("Range", False), ("Style", False))
    return StatsResult(list(cols), rows, text_columns=("Style", "Range"))


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def _domain_names(event_type: np.ndarray, start: np.ndarray, names: np.ndarray, pid: np.ndarray,
                  domain: np.ndarray) -> dict[tuple[int, int], str]:
    """(pid, domainId) -> the domain's name, from the earliest ``nvtxDomainCreate`` in that process."""
    out: dict[tuple[int, int], tuple[int, str]] = {}
    for i in np.flatnonzero(event_type == DOMAIN_CREATE):
        key = (int(pid[i]), int(domain[i]))
        name = "" if _missing(names[i]) else str(names[i])
        if key not in out or int(start[i]) < out[key][0]:
            out[key] = (int(start[i]), name)
    return {k: v[1] for k, v in out.items()}
