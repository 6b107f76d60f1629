"""``cuda_gpu_kern_sum``: time per kernel name, as ``nsys stats`` prints it.

Variants: ``:base`` groups by the short (base) kernel name, ``:mangled`` by the mangled name
(falling back to the demangled one where the export lacks it, as nsys does).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsys_rules.analysis.grouped import group_stats
from nsys_rules.model.trace import Trace
from nsys_rules.model.windows import Window
from nsys_rules.stats.common import PERCENTILES, StatsResult, duration_summary, order_rows, report_columns, rows_from_columns
from nsys_rules.stats.filters import gpu_mask

NAME = "cuda_gpu_kern_sum"
VARIANTS = ("base", "mangled")
COLUMNS = ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
           "StdDev (ns)", "Name"]

_NAME_COLUMN = {None: "name", "base": "short_name", "mangled": "mangled_name"}


def kernel_names(trace: Trace, frame: pd.DataFrame, variant: str | None) -> pd.Categorical:
    """The kernel name each row is summarized under for ``variant`` (None: demangled)."""
    if variant == "mangled":
        mangled = frame["mangled_name"]
        if mangled.notna().any():
            # Rows without a mangled name keep their demangled one, as nsys's kernel view does.
            merged = mangled.astype(object).where(mangled.notna(), frame["name"].astype(object))
            return pd.Categorical(merged)
    column = _NAME_COLUMN[variant] if variant != "mangled" else "name"
    return frame[column].array


def frame_columns(variant: str | None, filtered: bool) -> list[str]:
    """Kernel columns the report reads."""
    cols = ["start", "end", "name"]
    if variant == "base":
        cols.append("short_name")
    elif variant == "mangled":
        cols.append("mangled_name")
    if filtered:
        cols += ["correlation_id", "pid"]
    return cols


def build(trace: Trace, window: Window | None, variant: str | None = None, percentiles: bool = False) -> StatsResult:
    """Run the report on ``trace`` restricted to ``window``."""
    columns = report_columns(COLUMNS, percentiles)
    if not trace.has("kernels"):
        return StatsResult(columns, reason=f"{trace.path} does not contain CUDA kernel data "
                           "(CUPTI_ACTIVITY_KIND_KERNEL); capture with `nsys profile --trace=cuda`")
    frame = trace.frame("kernels", frame_columns(variant, window is not None))
    mask = gpu_mask(trace, frame, window)
    names = kernel_names(trace, frame, variant)
    codes = np.asarray(names.codes, dtype=np.int64)[mask] + 1  # 0: a kernel without a name
    durations = (frame["end"].to_numpy() - frame["start"].to_numpy())[mask]
    if not len(durations):
        return StatsResult(columns, reason="no CUDA kernels in the selected time range")
    categories = [""] + [str(c) for c in names.categories]
    stats = group_stats(codes, durations, len(categories), PERCENTILES if percentiles else ())
    cols = duration_summary(stats, [categories[g] for g in stats.group], "Name", "Instances", percentiles)
    rows = order_rows(rows_from_columns(cols), ("Total Time (ns)", True), ("Instances", False), ("Name", False))
    return StatsResult(list(cols), rows, text_columns=("Name",))
