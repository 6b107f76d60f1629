"""The launch join of the trace's own GPU frames, taken from the GPU activity table once it is built.

The activity table (:mod:`nsys_rules.analysis.activity`) joins every GPU operation to its launching
API call; its rows keep their frame row, so the join of a whole frame is a scatter of that result,
not another search of the API ids. Kept per trace (4 bytes a row): the frame's launch times and every
rule's ``launch_calls`` share it.
"""

from __future__ import annotations

import weakref

import numpy as np
import pandas as pd

from ..trace import Trace
from . import activity
from .launches import launch_times


def shared_api_rows(trace: Trace, gpu: pd.DataFrame) -> np.ndarray | None:
    """The launching API row of each row of one of the trace's own GPU frames (-1: none), read-only;
    None for any other frame, or before the GPU activity table is built (the join costs less than
    the whole table)."""
    name = next((n for n, f in getattr(trace, "_frames", {}).items() if f is gpu), None)
    if name is None:
        return None
    cache = _ROWS.setdefault(trace, {})
    hit = cache.get(name)
    if hit is not None and hit[0] is gpu:
        return hit[1]
    if activity._CACHE.get(trace) is None:
        return None
    rows = activity.frame_api_rows(trace, name)
    if rows is None or len(rows) != len(gpu):
        return None
    rows.flags.writeable = False
    cache[name] = (gpu, rows)
    return rows


def frame_launch_times(trace: Trace, gpu: pd.DataFrame) -> np.ndarray:
    """:func:`~nsys_rules.analysis.launches.launch_times` of ``gpu``, from :func:`shared_api_rows` where it
    has them (one gather instead of a search per row; cached alike)."""
    return launch_times(trace, gpu, shared_api_rows(trace, gpu))


#: trace -> {table: (frame, API rows)}; weak on the trace so closing it frees the arrays.
_ROWS: "weakref.WeakKeyDictionary[Trace, dict[str, tuple[pd.DataFrame, np.ndarray]]]" = weakref.WeakKeyDictionary()
