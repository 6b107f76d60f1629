"""``cuda_gpu_mem_time_sum``: time per GPU memory operation kind (memcpy direction, memset)."""

from __future__ import annotations

from nsys_rules.analysis.grouped import group_stats
from nsys_rules.model.trace import Trace
from nsys_rules.model.windows import Window
from nsys_rules.stats.common import PERCENTILES, StatsResult, duration_summary, order_rows, report_columns, rows_from_columns
from nsys_rules.stats.memops import load_memops

NAME = "cuda_gpu_mem_time_sum"
VARIANTS: tuple[str, ...] = ()
COLUMNS = ["Time (%)", "Total Time (ns)", "Count", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
           "StdDev (ns)", "Operation"]


def build(trace: Trace, window: Window | None, variant: str | None = None, percentiles: bool = False) -> StatsResult:
    """Run the report on ``trace`` restricted to ``window``."""
    columns = report_columns(COLUMNS, percentiles)
    ops = load_memops(trace, window)
    if isinstance(ops, str):
        return StatsResult(columns, reason=ops)
    stats = group_stats(ops.codes, ops.durations, len(ops.names), PERCENTILES if percentiles else ())
    cols = duration_summary(stats, [ops.names[g] for g in stats.group], "Operation", "Count", percentiles)
    rows = order_rows(rows_from_columns(cols), ("Total Time (ns)", True), ("Operation", False))
    return StatsResult(list(cols), rows, text_columns=("Operation",))
