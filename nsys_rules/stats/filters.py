"""``--filter-time`` / ``--filter-nvtx`` for the stats reports.

Membership follows the rest of nsys-rules, not nsys: GPU rows (kernels, memcpy, memset) belong
to the window when the API call that launched them started inside it, on any thread of the
process (engines launch from worker threads while the range was pushed on the main thread);
host rows (API calls, NVTX ranges) when they start inside it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace import Trace
from ..windows import Window, filter_time_window, launch_times, nvtx_filter_window

#: nsys exports store times relative to the session start, so ``--filter-time 5s/7s`` starts at 5e9.
SESSION_ORIGIN_NS = 0


def stats_window(trace: Trace, filter_time: str | None, filter_nvtx: str | None) -> Window | None:
    """The window the filters select, or None when there is no filter (the whole capture)."""
    window: Window | None = None
    if filter_time:
        window = filter_time_window(filter_time, SESSION_ORIGIN_NS)
    if filter_nvtx:
        nvtx = nvtx_filter_window(trace, filter_nvtx)
        window = nvtx if window is None else intersect(window, nvtx)
    return window


def intersect(a: Window, b: Window) -> Window:
    """The instants inside both windows."""
    out = []
    for s1, e1 in a.intervals or ():
        for s2, e2 in b.intervals or ():
            lo, hi = max(s1, s2), min(e1, e2)
            if lo <= hi:
                out.append((lo, hi))
    return Window(tuple(out) or ((0, -1),), f"{a.source} and {b.source}")


def gpu_mask(trace: Trace, frame: pd.DataFrame, window: Window | None) -> np.ndarray:
    """Which GPU rows were launched inside the window (needs ``start``, ``correlation_id``, ``pid``)."""
    if window is None:
        return np.ones(len(frame), bool)
    return window.mask(launch_times(trace, frame))


def host_mask(frame: pd.DataFrame, window: Window | None) -> np.ndarray:
    """Which host rows (API calls, NVTX ranges) start inside the window."""
    if window is None:
        return np.ones(len(frame), bool)
    return window.mask(frame["start"].to_numpy())
