"""``--filter-time`` / ``--filter-nvtx`` for the stats reports.

Membership follows the rest of nsys-rules, not nsys: GPU rows (kernels, memcpy, memset) belong
to the window when the API call that launched them started inside it, on any thread of the
process (engines launch from worker threads while the range was pushed on the main thread);
host rows (API calls, NVTX ranges) when they start inside it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsys_rules.model.trace import Trace
from nsys_rules.model.launches import launch_times
from nsys_rules.model.windows import Window, user_window

def stats_window(trace: Trace, filter_time: str | None, filter_nvtx: str | None) -> Window | None:
    """The window the filters select, or None when there is no filter (the whole capture)."""
    return user_window(trace, filter_time, filter_nvtx)


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
