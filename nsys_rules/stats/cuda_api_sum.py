"""``cuda_api_sum``: time per CUDA runtime/driver API function, as ``nsys stats`` prints it.

nsys groups by the stored name (so ``cudaGetDeviceProperties_v2_v12000`` and a plain
``cudaGetDeviceProperties_v2`` stay two rows) and only then strips a 4-digit ``_vNNNN`` suffix.
"""

from __future__ import annotations

import numpy as np

from nsys_rules.analysis.grouped import group_stats
from nsys_rules.model.trace import Trace
from nsys_rules.model.windows import Window
from nsys_rules.stats.common import (PERCENTILES, StatsResult, api_frame, duration_summary, nsys_api_name, order_rows,
                                     report_columns, rows_from_columns)
from nsys_rules.stats.filters import host_mask

NAME = "cuda_api_sum"
VARIANTS: tuple[str, ...] = ()
COLUMNS = ["Time (%)", "Total Time (ns)", "Num Calls", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
           "StdDev (ns)", "Name"]


def build(trace: Trace, window: Window | None, variant: str | None = None, percentiles: bool = False) -> StatsResult:
    """Run the report on ``trace`` restricted to ``window``."""
    columns = report_columns(COLUMNS, percentiles)
    if not trace.has("api"):
        return StatsResult(columns, reason=f"{trace.path} does not contain CUDA trace data "
                           "(CUPTI_ACTIVITY_KIND_RUNTIME); capture with `nsys profile --trace=cuda`")
    frame = api_frame(trace, ["start", "end", "name"])
    mask = host_mask(frame, window)
    names = frame["name"].array
    codes = np.asarray(names.codes, dtype=np.int64)[mask] + 1
    durations = (frame["end"].to_numpy() - frame["start"].to_numpy())[mask]
    if not len(durations):
        return StatsResult(columns, reason="no CUDA API calls in the selected time range")
    categories = [""] + [nsys_api_name(str(c)) for c in names.categories]
    stats = group_stats(codes, durations, len(categories), PERCENTILES if percentiles else ())
    cols = duration_summary(stats, [categories[g] for g in stats.group], "Name", "Num Calls", percentiles)
    rows = order_rows(rows_from_columns(cols), ("Total Time (ns)", True), ("Name", False))
    return StatsResult(list(cols), rows, text_columns=("Name",))
