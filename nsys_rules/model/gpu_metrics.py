"""Measured GPU activity: the trace's GPU metrics samples, by name, and what they say about the step budget's parts.

A capture with ``nsys profile --gpu-metrics-devices=all`` samples the GPU's counters (10 kHz by
default): DRAM read and write bandwidth, SMs active, SM issue, tensor pipes active, PCIe
traffic, each as a percent of its peak. :mod:`.gpu_metric_set` resolves the metric
names and reads only the metrics and the time range of the steady steps; this module measures,
for each part of the step budget, the level of each metric *while that part runs*:

- each sample covers the period up to the next one (``analysis.unmix.sample_periods``);
- each period is split among the budget's parts exactly as the budget splits time (the loop's
  busy classes in :data:`~.budget.BUSY_PRIORITY` order, other streams' work, idle);
- the samples are unmixed (``analysis.unmix.unmix``): least squares of the sample values on
  those shares gives each part's own level and its standard error. A part whose time is too
  short or too entangled with another's is left unresolved, never guessed.

DRAM throughput also comes in bytes per second against the GPU's peak
(``TARGET_INFO_GPU.memoryBandwidth``: the ``[Throughput %]`` metrics are percents of it), and each
kernel part gets its bound in words (:func:`~.metric_levels.bound_of`; the values are in
:mod:`.metric_levels`). No judgement: rules read this
(``Budget.metrics``) and decide what it means.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

import numpy as np

from nsys_rules.analysis.intervals import Coverage, merge_intervals
from nsys_rules.analysis.unmix import interval_means, sample_periods, unmix, weighted_levels
from nsys_rules.errors import InputError
from nsys_rules.model.activity import BUSY_CLASSES, KERNEL, GpuOps, gpu_ops
from nsys_rules.model.budget import Budget
from nsys_rules.model.budget_parts import BUSY_PRIORITY, PARTS, part_of_class
from nsys_rules.model.gpu_metric_set import KINDS, MARGIN_PERIODS, MetricSet, metric_set, read_kinds
from nsys_rules.model.metric_levels import BudgetMetrics, PartActivity, unavailable
from nsys_rules.model.steps import StepModel
from nsys_rules.model.trace import Trace

__all__ = ["BudgetMetrics", "PartActivity", "measure_budget", "measure_kernels", "with_gpu_metrics"]

#: Unmixing: a part must cover this many sample periods of the steady steps to be measured, and its
#: level must come out with at most this standard error (percentage points).
MIN_PERIODS = 5.0
MAX_STDERR = 5.0
#: Sampling frequency assumed when the capture does not record it (nsys's default).
DEFAULT_FREQUENCY_HZ = 10_000


def with_gpu_metrics(trace: Trace, model: StepModel, budget: Budget) -> Budget:
    """``budget`` with its measured activity (``Budget.metrics``) when the trace holds GPU metrics; unchanged otherwise."""
    found = metric_set(trace)
    if found is None:
        return budget
    return dataclasses.replace(budget, metrics=measure_budget(trace, model, budget, found))


def measure_budget(trace: Trace, model: StepModel, budget: Budget, found: MetricSet) -> BudgetMetrics:
    """Each budget part's measured activity over the steady steps (see the module docstring)."""
    chosen = found.for_device(budget.device, one_gpu=len(trace.gpus) <= 1)
    if chosen is None:
        sampled = ", ".join(str(g) for g in found.gpus) or "none"
        return unavailable(f"the GPU metrics sample GPU(s) {sampled}, not the loop's GPU {budget.device}")
    gpu, metrics = chosen
    if not metrics:
        return unavailable("the GPU metrics hold none of the metrics read here (DRAM, SM, tensor, PCIe throughput)")
    steps = model.gpu
    lo, hi = int(steps[0, 0]), int(steps[-1, 1])
    period = 1e9 / (found.frequency_hz or DEFAULT_FREQUENCY_HZ)
    margin = int(MARGIN_PERIODS * period)
    try:
        read = read_kinds(trace, metrics, [k.key for k in KINDS], lo - margin, hi + margin)
    except InputError as exc:
        return unavailable(f"not read: {exc}")
    except NotImplementedError as exc:
        return unavailable(str(exc))
    series = {k: s for k, s in read.items() if len(s) >= 2}
    if not series:
        return unavailable("no GPU metrics sample falls in the steady steps")
    time = next(iter(series.values())).time
    starts, ends, index = sample_periods(time)
    inside = (starts >= lo) & (ends <= hi)
    starts, ends, index = starts[inside], ends[inside], index[inside]
    if len(starts) < 2 * MIN_PERIODS:
        return unavailable(f"only {len(starts)} GPU metrics sample(s) fall inside the steady steps "
                           f"({(hi - lo) / 1e6:.1f} ms): sample faster (`--gpu-metrics-frequency`) or capture more steps")
    columns, shares = _shares(trace, model, budget, starts, ends)
    values: dict[str, np.ndarray] = {}
    for kind, s in series.items():
        if len(s.time) == len(time) and np.array_equal(s.time, time):
            values[kind] = s.value[index].astype(np.float64)
        else:  # sampled at other times: each period's level read off this metric's own samples
            own_s, own_e, own_i = sample_periods(s.time)
            values[kind] = interval_means(own_s, own_e, s.value[own_i], starts, ends)
    gpu_info = trace.gpu(budget.device) if budget.device is not None else None
    peak = float(gpu_info.memory_bandwidth) if gpu_info is not None and gpu_info.memory_bandwidth else None
    parts = _in_budget_order(_measure(columns, shares, values, peak))
    step_a, step_b = steps[:, 0], steps[:, 1]
    per_step = {k: interval_means(starts, ends, v, step_a, step_b) for k, v in values.items()}
    lengths = (ends - starts).astype(np.float64)
    step_mean = {k: float(np.sum(v * lengths) / np.sum(lengths)) for k, v in values.items() if np.isfinite(v).all()}
    return BudgetMetrics(gpu, found.frequency_hz, len(starts), float(np.median(lengths)), peak, parts, step_mean,
                         per_step, None, (starts, ends), values, tuple(columns), shares, (lo, hi, budget.device))


def _in_budget_order(parts: dict[str, PartActivity]) -> dict[str, PartActivity]:
    """The parts in the budget's reporting order (``PARTS``), idle last."""
    order = {name: i for i, (name, _, _) in enumerate(PARTS)}
    return dict(sorted(parts.items(), key=lambda item: order.get(item[0], len(order))))


def _measure(columns: list[str], shares: np.ndarray, values: dict[str, np.ndarray], peak: float | None,
             only: Iterable[str] | None = None) -> dict[str, PartActivity]:
    """Unmix every metric over ``columns``; the activity of each column (of ``only`` when given)."""
    keep = np.array([c == "idle" for c in columns])
    fits = {}
    for kind, y in values.items():
        ok = np.isfinite(y)
        fits[kind] = (unmix(shares[ok], y[ok], min_weight=MIN_PERIODS, max_stderr=MAX_STDERR, keep=keep),
                      weighted_levels(shares[ok], y[ok]))
    out: dict[str, PartActivity] = {}
    n = max(len(shares), 1)
    for i, name in enumerate(columns):
        if only is not None and name not in only:
            continue
        weight = float(shares[:, i].sum())
        if weight <= 0:
            continue
        pct = {k: float(f.level[i]) for k, (f, _) in fits.items() if f.resolved[i]}
        err = {k: float(f.stderr[i]) for k, (f, _) in fits.items() if f.resolved[i]}
        mixed = {k: float(m[i]) for k, (_, m) in fits.items() if np.isfinite(m[i])}
        out[name] = PartActivity(name, weight / n, pct, err, mixed, peak)
    return out


def _shares(trace: Trace, model: StepModel, budget: Budget, starts: np.ndarray,
            ends: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The share of each sample period each budget part covers: the loop's busy classes in priority order (as the
    budget splits overlapped time), other streams' work (contention), and idle."""
    lo, hi = int(model.gpu[0, 0]), int(model.gpu[-1, 1])
    ops = gpu_ops(trace).near(lo, hi, model.device)
    own = _own(ops, budget)
    length = (ends - starts).astype(np.float64)
    columns: list[str] = []
    shares: list[np.ndarray] = []
    before = np.zeros(len(starts), np.int64)
    grown = np.zeros(len(ops), bool)
    for cls in BUSY_PRIORITY:
        mine = own & (ops.cls == BUSY_CLASSES.index(cls))
        if not mine.any():
            continue
        grown |= mine
        cover = Coverage(*merge_intervals(ops.start[grown], ops.end[grown])).within(starts, ends)
        columns.append(part_of_class(cls))
        shares.append((cover - before) / length)
        before = cover
    everything = Coverage(*merge_intervals(ops.start, ops.end)).within(starts, ends) if len(ops) else before
    if (everything > before).any():
        columns.append("contention")
        shares.append((everything - before) / length)
    columns.append("idle")
    shares.append(1.0 - everything / length)
    return columns, np.clip(np.column_stack(shares), 0.0, 1.0)


def _own(ops: GpuOps, budget: Budget) -> np.ndarray:
    """The loop's own operations, as the budget counts them: its process, on its loop streams."""
    mine = ops.pid == budget.pid if budget.pid is not None else np.ones(len(ops), bool)
    return mine & ops.on_streams(budget.loop_streams) if budget.loop_streams else mine


def measure_kernels(trace: Trace, budget: Budget | None, names: Iterable[str], label: str = "kernels"
                    ) -> PartActivity | None:
    """The measured activity while the loop runs the kernels called ``names`` (split out of their parts);
    None without GPU metrics, when those kernels do not run in the steady steps, or cover too little sampled time.

    For a rule whose kernels are not a whole budget part (the FP32 GEMMs among the GEMMs, GEMVs by a
    rule's own name patterns).
    """
    metrics = budget.metrics if budget is not None else None
    if budget is None or metrics is None or not metrics.measured:
        return None
    lo, hi, device = metrics._window
    starts, ends = metrics._periods
    wanted = set(str(n) for n in names)
    if not wanted or not trace.has("kernels"):
        return None
    ops = gpu_ops(trace).near(lo, hi, device)
    kernels = trace.frame("kernels", ["name"])["name"]
    categories = kernels.cat.categories
    codes = np.flatnonzero(np.isin(np.asarray(categories, dtype=object), list(wanted)))
    is_kernel = np.asarray(ops.kind == KERNEL)
    rows = np.asarray(ops.table_row)[is_kernel]
    picked = np.zeros(len(ops), bool)
    picked[np.flatnonzero(is_kernel)] = np.isin(kernels.cat.codes.to_numpy()[rows], codes)
    picked &= _own(ops, budget)
    if not picked.any():
        return None
    length = (ends - starts).astype(np.float64)
    subset = Coverage(*merge_intervals(ops.start[picked], ops.end[picked])).within(starts, ends) / length
    shares = metrics._shares.copy()
    columns = list(metrics._columns)
    # The subset's time comes out of the parts its kernels belong to (by their class).
    for code in np.unique(ops.cls[picked]):
        part = part_of_class(BUSY_CLASSES[int(code)])
        if part in columns:
            mine = picked & (ops.cls == code)
            taken = Coverage(*merge_intervals(ops.start[mine], ops.end[mine])).within(starts, ends) / length
            at = columns.index(part)
            shares[:, at] = np.clip(shares[:, at] - taken, 0.0, 1.0)
    columns.append(label)
    shares = np.column_stack([shares, subset])
    found = _measure(columns, shares, metrics._values, metrics.peak_dram, only=(label,))
    return found.get(label)


