"""``cuda_gpu_mem_size_sum``: bytes per GPU memory operation kind, in MB (10^6 bytes, three decimals, as nsys 2025)."""

from __future__ import annotations

from typing import Any

from nsys_rules.analysis.grouped import group_stats
from nsys_rules.model.trace import Trace
from nsys_rules.model.windows import Window
from nsys_rules.stats.common import (PERCENTILES, StatsResult, order_rows, python_values, report_columns, round_half_up,
                                     rows_from_columns)
from nsys_rules.stats.memops import load_memops

NAME = "cuda_gpu_mem_size_sum"
VARIANTS: tuple[str, ...] = ()
COLUMNS = ["Total (MB)", "Count", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)", "StdDev (MB)", "Operation"]
MB = 1e6


def build(trace: Trace, window: Window | None, variant: str | None = None, percentiles: bool = False) -> StatsResult:
    """Run the report on ``trace`` restricted to ``window``."""
    columns = report_columns(COLUMNS, percentiles, unit="MB")
    ops = load_memops(trace, window)
    if isinstance(ops, str):
        return StatsResult(columns, reason=ops)
    stats = group_stats(ops.codes, ops.sizes, len(ops.names), PERCENTILES if percentiles else ())

    def mb(values: Any) -> list[Any]:
        return python_values(round_half_up(values / MB, 3), "float")

    cols: dict[str, list[Any]] = {
        "Total (MB)": mb(stats.total), "Count": python_values(stats.count, "int"), "Avg (MB)": mb(stats.mean),
        "Med (MB)": mb(stats.median), "Min (MB)": mb(stats.minimum), "Max (MB)": mb(stats.maximum),
        "StdDev (MB)": mb(stats.stddev)}
    if percentiles:
        for p in PERCENTILES:
            cols[f"P{p} (MB)"] = mb(stats.percentiles[p])
    cols["Operation"] = [ops.names[g] for g in stats.group]
    # Sorted on the exact byte totals, not the rounded MB.
    rows = rows_from_columns(cols)
    exact = {id(r): int(t) for r, t in zip(rows, stats.total, strict=True)}
    rows = order_rows(rows, ("Operation", False))
    rows.sort(key=lambda r: -exact[id(r)])
    return StatsResult(list(cols), rows, text_columns=("Operation",))
