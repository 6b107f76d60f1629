"""``cuda_kern_exec_sum``: launch and execution time per (PID, TID, device, launch API, kernel).

Each kernel is joined to the API call that launched it (same process and correlationId; kernels
without one are left out, as nsys's inner join does). Four durations per launch:
API time (the call), queue time (call end to kernel start, only when >= 0: a kernel may start
before its launch call returns, then it has no queue time and is not in ``QCount``), kernel time,
and total time (call start to the later of call end and kernel end).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsys_rules.analysis.grouped import first_rows, group_ids, group_stats
from nsys_rules.analysis.keys import launch_pairs
from nsys_rules.loaders.export import NULL_INT
from nsys_rules.model.trace import Trace
from nsys_rules.model.windows import Window
from nsys_rules.stats.common import (PERCENTILES, StatsResult, api_frame, nsys_api_name, python_values, round_half_up,
                                     rows_from_columns)
from nsys_rules.stats.cuda_gpu_kern_sum import frame_columns, kernel_names

NAME = "cuda_kern_exec_sum"
VARIANTS = ("base", "mangled")
_PHASES = ("T", "A", "Q", "K")
COLUMNS = ["PID", "TID", "DevId", "Count", "QCount"] + [
    f"{p}{s} (ns)" for p in _PHASES for s in ("Avg", "Med", "Min", "Max", "StdDev")] + ["API Name", "Kernel Name"]


def _columns(percentiles: bool) -> list[str]:
    cols = ["PID", "TID", "DevId", "Count", "QCount"]
    for p in _PHASES:
        cols += [f"{p}{s} (ns)" for s in ("Avg", "Med", "Min", "Max", "StdDev")]
        if percentiles:
            cols += [f"{p}P{q} (ns)" for q in PERCENTILES]
    return cols + ["API Name", "Kernel Name"]


def build(trace: Trace, window: Window | None, variant: str | None = None, percentiles: bool = False) -> StatsResult:
    """Run the report on ``trace`` restricted to ``window``."""
    columns = _columns(percentiles)
    if not trace.has("kernels"):
        return StatsResult(columns, reason=f"{trace.path} does not contain CUDA kernel data "
                           "(CUPTI_ACTIVITY_KIND_KERNEL); capture with `nsys profile --trace=cuda`")
    if not trace.has("api"):
        return StatsResult(columns, reason=f"{trace.path} does not contain CUDA API data "
                           "(CUPTI_ACTIVITY_KIND_RUNTIME); capture with `nsys profile --trace=cuda`")
    kernels = trace.frame("kernels", frame_columns(variant, True) + ["device_id"])
    api = api_frame(trace, ["start", "end", "correlation_id", "pid", "tid", "name"])
    k_idx, a_idx = launch_pairs(kernels["pid"].to_numpy(), kernels["correlation_id"].to_numpy(), api["pid"].to_numpy(),
                                api["correlation_id"].to_numpy(), NULL_INT)
    a_start = api["start"].to_numpy()[a_idx]
    if window is not None:
        # The launch time is the API call's start, the same rule as everywhere else in nsys-rules.
        keep = window.mask(a_start)
        k_idx, a_idx, a_start = k_idx[keep], a_idx[keep], a_start[keep]
    if not len(k_idx):
        return StatsResult(columns, reason="no kernel launches (kernels with their launching API call) "
                           "in the selected time range")
    a_end = api["end"].to_numpy()[a_idx]
    k_start = kernels["start"].to_numpy()[k_idx]
    k_end = kernels["end"].to_numpy()[k_idx]
    api_names = api["name"].array
    # Names are stripped per category, then merged: two stored names with one printed name are one group.
    api_categories = np.array([""] + [nsys_api_name(str(c)) for c in api_names.categories], dtype=object)
    category_code, _ = pd.factorize(api_categories)
    api_cat = np.asarray(api_names.codes, dtype=np.int64)[a_idx] + 1
    api_code = category_code[api_cat]
    knames = kernel_names(trace, kernels, variant)
    kernel_categories = np.array([""] + [str(c) for c in knames.categories], dtype=object)
    kernel_codes = np.asarray(knames.codes, dtype=np.int64)[k_idx] + 1
    pid = api["pid"].to_numpy()[a_idx]
    tid = api["tid"].to_numpy()[a_idx]
    dev = kernels["device_id"].to_numpy()[k_idx]
    group = group_ids([pid, tid, dev, api_code, kernel_codes])
    first = first_rows(group)
    n_groups = len(first)

    queue = k_start - a_end
    queued = queue >= 0
    pct = PERCENTILES if percentiles else ()
    phases = {
        "T": group_stats(group, np.maximum(a_end, k_end) - a_start, n_groups, pct),
        "A": group_stats(group, a_end - a_start, n_groups, pct),
        "Q": group_stats(group[queued], queue[queued], n_groups, pct),
        "K": group_stats(group, k_end - k_start, n_groups, pct),
    }
    total = phases["T"]
    cols: dict[str, list[Any]] = {
        "PID": python_values(pid[first], "int"),
        "TID": python_values(tid[first], "int"),
        "DevId": python_values(dev[first], "int"),
        "Count": python_values(total.count, "int"),
    }
    q_count = np.zeros(n_groups, np.int64)
    q_count[phases["Q"].group] = phases["Q"].count
    cols["QCount"] = python_values(q_count, "int")
    for letter in _PHASES:
        cols.update(_phase_columns(letter, phases[letter], n_groups, percentiles))
    cols["API Name"] = [str(v) for v in api_categories[api_cat[first]]]
    cols["Kernel Name"] = [str(v) for v in kernel_categories[kernel_codes[first]]]
    rows = rows_from_columns(cols)
    # nsys orders by TAvg only; ties keep the group order (pid, tid, device, API, kernel).
    order = sorted(range(len(rows)), key=lambda i: (-total.mean[i], _group_key(rows[i])))
    return StatsResult(list(cols), [rows[i] for i in order], text_columns=("API Name", "Kernel Name"))


def _group_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["PID"], row["TID"], row["DevId"], row["API Name"], row["Kernel Name"])


def _phase_columns(letter: str, stats: Any, n_groups: int, percentiles: bool) -> dict[str, list[Any]]:
    """One phase's Avg/Med/Min/Max/StdDev columns; groups with no value (no queued launch) print ``''``."""
    def spread(values: np.ndarray, fill: float) -> np.ndarray:
        out = np.full(n_groups, fill, dtype=np.float64)
        out[stats.group] = values
        return out

    nan = float("nan")
    cols: dict[str, list[Any]] = {
        f"{letter}Avg (ns)": python_values(round_half_up(spread(stats.mean, nan)), "float"),
        f"{letter}Med (ns)": python_values(round_half_up(spread(stats.median, nan)), "float"),
    }
    minimum, maximum = spread(stats.minimum, nan), spread(stats.maximum, nan)
    cols[f"{letter}Min (ns)"] = [v if v == "" else int(v) for v in python_values(minimum, "float")]
    cols[f"{letter}Max (ns)"] = [v if v == "" else int(v) for v in python_values(maximum, "float")]
    # nsys's stdev of no values is 0.0, not empty.
    cols[f"{letter}StdDev (ns)"] = python_values(round_half_up(spread(stats.stddev, 0.0)), "float")
    if percentiles:
        for q in PERCENTILES:
            cols[f"{letter}P{q} (ns)"] = python_values(round_half_up(spread(stats.percentiles[q], nan)), "float")
    return cols
