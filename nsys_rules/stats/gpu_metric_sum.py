"""``gpu_metric_sum``: each GPU metric's samples summarized, per GPU (nsys-rules' own report).

nsys 2025.3 has no ``nsys stats`` report for GPU metrics: its summary of them is a recipe
(``nsys recipe gpu_metric_util_sum``, a pandas job over several reports). This report follows the
``nsys stats`` summaries instead: one row per GPU and metric (every metric the capture sampled,
in nsys's metric order), the number of samples and their mean, median, minimum, maximum and
sample standard deviation, in the metric's own unit (``Throughput %``, ``MHz`` ...; nsys stores the clocks in Hz: shown
in MHz as their names say). ``--filter-time`` / ``--filter-nvtx`` keep the
samples whose time falls inside the window. The samples stream through, never held as a table.
"""

from __future__ import annotations

import re

import numpy as np

from nsys_rules.loaders import gpu_metrics as store
from nsys_rules.model.trace import Trace
from nsys_rules.model.windows import Window
from nsys_rules.stats.common import PERCENTILES, StatsResult, round_half_up

NAME = "gpu_metric_sum"
VARIANTS: tuple[str, ...] = ()
COLUMNS = ["GPU", "Metric", "Unit", "Samples", "Avg", "Med", "Min", "Max", "StdDev"]

_UNIT = re.compile(r"\[([^\]]*)\]\s*$")


def build(trace: Trace, window: Window | None, variant: str | None = None, percentiles: bool = False) -> StatsResult:
    """Run the report on ``trace`` restricted to ``window``."""
    columns = COLUMNS + [f"P{p}" for p in PERCENTILES] if percentiles else list(COLUMNS)
    export = trace.export
    if not store.available(export):
        return StatsResult(columns, reason=f"{trace.path} does not contain GPU metrics ({store.METRICS_TABLE}); capture "
                           "with `nsys profile --gpu-metrics-devices=all` (nsys-rules profile --metrics)")
    names = store.catalog(export)
    if trace.meter is not None:
        samples, _ = store.read_cost(export, len(names))
        trace.meter.admit_bytes(f"the GPU metrics ({len(names)} metrics, {samples:,} samples)",
                                samples * store.SAMPLE_BYTES)
    lo = hi = None
    if window is not None and window.intervals:
        lo, hi = window.start, window.end
    index = {name.key: i for i, name in enumerate(names)}
    # Per metric, its values a slice at a time, as int32 where they fit (every metric nsys samples does: percents,
    # warp counts, clocks under 2.1 GHz): 4 bytes a sample, and each metric summarized on its own.
    values: list[list[np.ndarray]] = [[] for _ in names]
    for time, type_id, metric_id, value in store.iter_pieces(export, list(index), lo, hi):
        if window is not None:
            keep = window.mask(time)
            type_id, metric_id, value = type_id[keep], metric_id[keep], value[keep]
        for key in _keys(type_id, metric_id):
            mine = value[(type_id == key[0]) & (metric_id == key[1])]
            fits = len(mine) and int(mine.min()) >= -(2**31) and int(mine.max()) < 2**31
            values[index[key]].append(mine.astype(np.int32) if fits else mine)
    rows = []
    for name, chunks in zip(names, values, strict=True):
        if not chunks:
            continue
        data = np.concatenate(chunks).astype(np.float64)
        chunks.clear()
        if not len(data):
            continue
        unit = _UNIT.search(name.name)
        unit_text = unit.group(1) if unit else ""
        scale = 1e-6 if unit_text == "MHz" and float(np.median(data)) > 1e5 else 1.0  # clocks are stored in Hz
        data *= scale
        row = {"GPU": name.gpu, "Metric": _UNIT.sub("", name.name).strip(), "Unit": unit_text, "Samples": len(data),
               "Avg": _num(np.mean(data)), "Med": _num(np.median(data)), "Min": _num(np.min(data), scale == 1.0),
               "Max": _num(np.max(data), scale == 1.0),
               "StdDev": _num(np.std(data, ddof=1) if len(data) > 1 else float("nan"))}
        if percentiles:
            for p in PERCENTILES:
                row[f"P{p}"] = _num(np.percentile(data, p))
        rows.append((name, row))
    if not rows:
        return StatsResult(columns, reason="no GPU metrics sample in the selected time range")
    rows.sort(key=lambda item: (item[0].gpu, item[0].type_id, item[0].metric_id))
    return StatsResult(columns, [r for _, r in rows], text_columns=("Metric", "Unit"))


def _num(value: float | np.floating, whole: bool = False) -> float | int | str:
    """A statistic as the JSON holds it: whole numbers for Min/Max of integer samples, else 3 decimals; '' for NaN."""
    if not np.isfinite(value):
        return ""
    return int(value) if whole else float(round_half_up(float(value), 3))


def _keys(type_id: np.ndarray, metric_id: np.ndarray) -> list[tuple[int, int]]:
    """The distinct (typeId, metricId) pairs of a slice: one-dimensional look-ups (a 2-D ``np.unique`` sorts rows,
    0.7 s per million samples)."""
    if not len(type_id):
        return []
    types = type_id[:1] if bool((type_id == type_id[0]).all()) else np.unique(type_id)
    out: list[tuple[int, int]] = []
    for t in types.tolist():
        metrics = metric_id if len(types) == 1 else metric_id[type_id == t]
        small = int(metrics.min()) >= 0 and int(metrics.max()) < 1 << 16
        present = np.flatnonzero(np.bincount(metrics)) if small else np.unique(metrics)
        out += [(int(t), int(m)) for m in present.tolist()]
    return out
