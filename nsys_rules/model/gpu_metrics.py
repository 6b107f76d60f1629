"""Measured GPU activity: the trace's GPU metrics samples, by name, and what they say about the step budget's parts.

A capture with ``nsys profile --gpu-metrics-devices=all`` samples the GPU's counters (10 kHz by
default): DRAM read and write bandwidth, SMs active, SM issue, tensor pipes active, PCIe
traffic, each as a percent of its peak. This module resolves the metric names
(:data:`KINDS`), reads only the metrics and the time range of the steady steps
(:mod:`nsys_rules.loaders.gpu_metrics`, priced by the trace's memory guard first) and measures,
for each part of the step budget, the level of each metric *while that part runs*:

- each sample covers the period up to the next one (``analysis.unmix.sample_periods``);
- each period is split among the budget's parts exactly as the budget splits time (the loop's
  busy classes in :data:`~.budget.BUSY_PRIORITY` order, other streams' work, idle);
- the samples are unmixed (``analysis.unmix.unmix``): least squares of the sample values on
  those shares gives each part's own level and its standard error. A part whose time is too
  short or too entangled with another's is left unresolved, never guessed.

DRAM throughput also comes in bytes per second against the GPU's peak
(``TARGET_INFO_GPU.memoryBandwidth``: the ``[Throughput %]`` metrics are percents of it), and each
kernel part gets its bound in words (:func:`bound_of`). No judgement: rules read this
(``Budget.metrics``) and decide what it means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from nsys_rules.analysis.intervals import Coverage, merge_intervals
from nsys_rules.analysis.unmix import interval_means, sample_periods, unmix, weighted_levels
from nsys_rules.errors import InputError
from nsys_rules.loaders import gpu_metrics as store
from nsys_rules.model.activity import BUSY_CLASSES, KERNEL, GpuOps, gpu_ops
from nsys_rules.model.trace import Trace

if TYPE_CHECKING:
    from nsys_rules.model.budget import Budget
    from nsys_rules.model.steps import StepModel


@dataclass(frozen=True)
class MetricKind:
    """A metric this module reads: its key, how people read it, and the pattern of nsys's names for it."""

    key: str
    label: str
    pattern: str


#: The metrics read, by what their names start with (nsys names them alike on every GPU that has them;
#: only ``[Throughput %]`` ones: percents of the unit's peak).
KINDS: tuple[MetricKind, ...] = (
    MetricKind("dram_read", "DRAM read", r"dram read bandwidth"),
    MetricKind("dram_write", "DRAM write", r"dram write bandwidth"),
    MetricKind("sm_active", "SMs active", r"sms? active"),
    MetricKind("sm_issue", "SM issue", r"sm issue"),
    MetricKind("tensor_active", "tensor active", r"tensor active"),
    MetricKind("pcie_rx", "PCIe RX", r"pcie rx"),
    MetricKind("pcie_tx", "PCIe TX", r"pcie tx"),
    MetricKind("gr_active", "GR active", r"gr active"),
)
KIND_LABELS = {k.key: k.label for k in KINDS}
_PERCENT = "[throughput %]"

#: At or above this percent of its peak a unit bounds a kind of work (DRAM: read + write; compute:
#: the busier of SM issue and the tensor pipes). Below it, a unit still bounds the work when it is
#: clearly the one nearest its peak: at least LEAN_PCT and LEAN_RATIO times the other (a GEMV at
#: 57 % of DRAM peak and 10 % issue is memory-bound, short of saturation); else the work is latency-bound.
BOUND_PCT = 60.0
LEAN_PCT = 30.0
LEAN_RATIO = 3.0
#: Unmixing: a part must cover this many sample periods of the steady steps to be measured, and its
#: level must come out with at most this standard error (percentage points).
MIN_PERIODS = 5.0
MAX_STDERR = 5.0
#: Samples read beyond the steady steps on each side, in sample periods: the period that holds the
#: first step's start begins before it.
MARGIN_PERIODS = 4
#: Sampling frequency assumed when the capture does not record it (nsys's default).
DEFAULT_FREQUENCY_HZ = 10_000


@dataclass(frozen=True)
class MetricSet:
    """What the trace samples: the metrics by GPU (the index in ``typeId``) and kind, and the frequency."""

    names: tuple[store.MetricName, ...]
    frequency_hz: int | None
    by_gpu: dict[int, dict[str, store.MetricName]] = field(default_factory=dict)

    @property
    def gpus(self) -> tuple[int, ...]:
        """The GPUs that were sampled."""
        return tuple(sorted(self.by_gpu))

    def for_device(self, device: int | None, one_gpu: bool = False) -> tuple[int, dict[str, store.MetricName]] | None:
        """The sampled metrics of the GPU the kernels call ``device``; on a host of one GPU (``one_gpu``) its only
        sampled GPU whatever its index (nsys numbers the GPUs it samples its own way)."""
        if device is not None and int(device) in self.by_gpu:
            return int(device), self.by_gpu[int(device)]
        if one_gpu and len(self.by_gpu) == 1:
            gpu = next(iter(self.by_gpu))
            return gpu, self.by_gpu[gpu]
        return None


def kind_of(name: str) -> str | None:
    """The :data:`KINDS` key of an nsys metric name; None for one this module does not read."""
    low = name.strip().lower()
    if _PERCENT not in low:
        return None
    for kind in KINDS:
        if re.match(kind.pattern, low):
            return kind.key
    return None


def metric_set(trace: Trace) -> MetricSet | None:
    """The trace's GPU metrics (cached per trace); None when it holds none."""
    return trace.memo(("gpu_metrics.metric_set",), lambda: _metric_set(trace))


def _metric_set(trace: Trace) -> MetricSet | None:
    """:func:`metric_set`, read."""
    names = store.catalog(trace.export) if store.available(trace.export) else ()
    found: MetricSet | None = None
    if names:
        by_gpu: dict[int, dict[str, store.MetricName]] = {}
        for name in names:
            kind = kind_of(name.name)
            if kind is not None:
                by_gpu.setdefault(name.gpu, {}).setdefault(kind, name)
        frequency = _int(trace.capture.options.get(store.FREQUENCY_OPTION))
        found = MetricSet(names, frequency if frequency and frequency > 0 else None, by_gpu)
    return found


def _int(value: object) -> int | None:
    try:
        return int(str(value).strip()) if value is not None else None
    except ValueError:
        return None


def read_kinds(trace: Trace, metrics: dict[str, store.MetricName], kinds: Iterable[str], lo: int | None,
               hi: int | None) -> dict[str, store.Samples]:
    """The samples of ``kinds`` in [lo, hi], admitted by the trace's memory guard first (:class:`InputError` when
    they do not fit, ``NotImplementedError`` for an export format without them)."""
    wanted = {k: metrics[k] for k in kinds if k in metrics}
    if not wanted:
        return {}
    guard = getattr(trace, "read_guard", None)
    if guard is not None:
        rows, nbytes = _range_cost(trace, len(wanted), lo, hi)
        guard.admit_bytes(trace, f"the GPU metrics ({len(wanted)} metrics, {rows:,} samples)", nbytes)
    read = store.read_samples(trace.export, [m.key for m in wanted.values()], lo, hi)
    return {k: read.get(m.key, store.Samples(np.empty(0, np.int64), np.empty(0, np.int64))) for k, m in wanted.items()}


def _range_cost(trace: Trace, wanted: int, lo: int | None, hi: int | None) -> tuple[int, int]:
    """Samples and peak bytes a read of ``wanted`` metrics over [lo, hi] takes: the whole table's share of them,
    cut to the range's share of the sampled time when the frequency is known."""
    found = metric_set(trace)
    if lo is None or hi is None or found is None or not found.frequency_hz:
        return store.read_cost(trace.export, wanted)  # the whole table's share (counts its rows: 0.2 s for 9M)
    # The wanted metrics of each sampled GPU, at the recorded frequency, over the range: a read never takes more.
    per_metric = int((hi - lo) / 1e9 * found.frequency_hz) + 2 * MARGIN_PERIODS + 2
    ranged = per_metric * wanted * max(1, len(found.by_gpu))
    return ranged, ranged * store.READ_BYTES_PER_ROW


# -- what each part of the budget does to the counters --------------------------------------------
@dataclass(frozen=True)
class PartActivity:
    """The measured levels of one budget part (or of a set of kernels): percent of each unit's peak."""

    name: str
    share: float  # of the sampled steady time
    pct: dict[str, float]  # resolved kinds only
    stderr: dict[str, float]
    mixed: dict[str, float]  # the share-weighted mean of the samples (what unmixing corrects)
    peak_dram: float | None  # B/s

    def level(self, kind: str) -> float | None:
        """Percent of ``kind``'s peak while the part runs; None when not resolved."""
        return self.pct.get(kind)

    def dram_bytes_per_s(self, kind: str = "dram_read") -> float | None:
        """DRAM throughput in B/s (``dram_read`` or ``dram_write``) against the GPU's peak; None when unknown."""
        level = self.pct.get(kind)
        return None if level is None or not self.peak_dram else level / 100.0 * self.peak_dram

    @property
    def dram_pct(self) -> float | None:
        """DRAM read + write, percent of peak (write counted 0 when unresolved)."""
        read = self.pct.get("dram_read")
        return None if read is None else read + self.pct.get("dram_write", 0.0)

    @property
    def compute_pct(self) -> float | None:
        """The busier of SM issue and the tensor pipes, percent of peak; None when neither is resolved."""
        values = [self.pct[k] for k in ("sm_issue", "tensor_active") if k in self.pct]
        return max(values) if values else None

    @property
    def bound(self) -> str | None:
        """``memory``, ``compute``, ``memory+compute`` or ``latency`` (see :func:`bound_of`); None when unmeasured."""
        return bound_of(self.dram_pct, self.compute_pct)

    def to_json(self, kernel_part: bool = True) -> dict[str, Any]:
        """One entry of ``budget.metrics.parts``."""
        out: dict[str, Any] = {"name": self.name, "share": round(self.share, 4),
                               "pct": {k: round(v, 1) for k, v in self.pct.items()},
                               "stderr": {k: round(v, 2) for k, v in self.stderr.items()}}
        for kind in ("dram_read", "dram_write"):
            value = self.dram_bytes_per_s(kind)
            if value is not None:
                out[f"{kind}_bytes_per_s"] = round(value)
        unresolved = [k for k in self.mixed if k not in self.pct]
        if unresolved:
            out["unresolved"] = unresolved
        if kernel_part and self.bound is not None:
            out["bound"] = self.bound
            out["bound_words"] = bound_words(self)
        return out


def bound_of(dram_pct: float | None, compute_pct: float | None) -> str | None:
    """What bounds a kind of work, from its DRAM (read + write) and compute (issue or tensor) percents of peak."""
    if dram_pct is None and compute_pct is None:
        return None
    memory = dram_pct is not None and (dram_pct >= BOUND_PCT or _leans(dram_pct, compute_pct))
    compute = compute_pct is not None and (compute_pct >= BOUND_PCT or _leans(compute_pct, dram_pct))
    if memory and compute:
        return "memory+compute"
    if memory:
        return "memory"
    if compute:
        return "compute"
    # Latency-bound only when both were measured low: one unmeasured unit may be the one at its peak.
    return "latency" if dram_pct is not None and compute_pct is not None else None


def _leans(mine: float, other: float | None) -> bool:
    return other is not None and mine >= LEAN_PCT and mine >= LEAN_RATIO * other


def bound_words(part: PartActivity) -> str:
    """The part's bound as the budget says it: ``memory-bound (DRAM 84 % of peak)``."""
    dram, compute = part.dram_pct, part.compute_pct
    which = "tensor pipes" if part.pct.get("tensor_active", -1.0) >= part.pct.get("sm_issue", -1.0) else "SM issue"
    d = f"DRAM {dram:.0f} % of peak" if dram is not None else "DRAM unmeasured"
    c = f"{which} {compute:.0f} %" if compute is not None else "compute unmeasured"
    bound = part.bound
    if bound == "memory":
        short = "" if (dram or 0) >= BOUND_PCT else ", short of saturation"
        return f"memory-bound ({d}{short}; {c})"
    if bound == "compute":
        short = "" if (compute or 0) >= BOUND_PCT else ", short of saturation"
        return f"compute-bound ({c}{short}; {d})"
    if bound == "memory+compute":
        return f"memory- and compute-bound ({d}, {c})"
    return (f"latency-bound ({d}, {c}: neither near its peak: small grids, data the L2 cache holds, or waiting "
            "on dependencies)")


@dataclass(frozen=True, eq=False)
class BudgetMetrics:
    """The steady steps as the GPU metrics saw them: each part's measured activity, per-step levels.

    ``reason`` is set (and everything else empty) when the trace has GPU metrics that could not be
    measured here (another GPU sampled, too few samples, a read that does not fit the memory limit).
    """

    gpu: int | None
    frequency_hz: int | None
    samples: int
    period_ns: float
    peak_dram: float | None
    parts: dict[str, PartActivity]
    step_mean: dict[str, float]
    per_step: dict[str, np.ndarray]
    reason: str | None = None
    # What measure_kernels() needs to fit more columns: the periods, the values and the budget's shares.
    _periods: tuple[np.ndarray, np.ndarray] = field(default=(np.empty(0, np.int64), np.empty(0, np.int64)), repr=False)
    _values: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _columns: tuple[str, ...] = field(default=(), repr=False)
    _shares: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), repr=False)
    _window: tuple[int, int, int | None] = field(default=(0, 0, None), repr=False)  # lo, hi, device

    @property
    def measured(self) -> bool:
        """Whether any part was measured."""
        return self.reason is None and bool(self.parts)

    def part(self, name: str) -> PartActivity | None:
        """The measured activity of budget part ``name`` (``idle`` for all idle time, ``contention`` for other
        streams' work); None when that part was not sampled."""
        return self.parts.get(name)

    def to_json(self) -> dict[str, Any]:
        """``traces[i].budget.metrics`` of the JSON envelope."""
        if self.reason is not None:
            return {"measured": False, "reason": self.reason}
        from nsys_rules.model.budget import KINDS as PART_KINDS

        return {
            "measured": True, "source": store.METRICS_TABLE, "gpu": self.gpu, "frequency_hz": self.frequency_hz,
            "samples": self.samples, "sample_period_ns": round(self.period_ns, 1),
            "peak_dram_bytes_per_s": self.peak_dram,
            "step_mean": {k: round(v, 1) for k, v in self.step_mean.items()},
            "parts": [p.to_json(kernel_part=PART_KINDS.get(p.name) == "busy" and p.name not in _NOT_KERNELS)
                      for p in self.parts.values()],
        }

    def strip(self) -> dict[str, Any]:
        """Per step: the mean DRAM read, DRAM write and tensor activity (percent of peak), for the HTML strip."""
        return {k: [None if np.isnan(v) else round(float(v), 1) for v in self.per_step[k]]
                for k in ("dram_read", "dram_write", "tensor_active", "sm_active") if k in self.per_step}


#: Busy parts that are not kernels: no bound in words for them.
_NOT_KERNELS = frozenset({"copy", "graph_replay", "contention"})


def unavailable(reason: str) -> BudgetMetrics:
    """A :class:`BudgetMetrics` that says why the trace's GPU metrics could not be measured."""
    return BudgetMetrics(None, None, 0, 0.0, None, {}, {}, {}, reason)


def with_gpu_metrics(trace: Trace, model: "StepModel", budget: "Budget") -> "Budget":
    """``budget`` with its measured activity (``Budget.metrics``) when the trace holds GPU metrics; unchanged otherwise."""
    import dataclasses

    found = metric_set(trace)
    if found is None:
        return budget
    return dataclasses.replace(budget, metrics=measure_budget(trace, model, budget, found))


def measure_budget(trace: Trace, model: "StepModel", budget: "Budget", found: MetricSet) -> BudgetMetrics:
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
    from nsys_rules.model.budget import PARTS

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


def _shares(trace: Trace, model: "StepModel", budget: "Budget", starts: np.ndarray,
            ends: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The share of each sample period each budget part covers: the loop's busy classes in priority order (as the
    budget splits overlapped time), other streams' work (contention), and idle."""
    from nsys_rules.model.budget import BUSY_PRIORITY, part_of_class

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


def _own(ops: GpuOps, budget: "Budget") -> np.ndarray:
    """The loop's own operations, as the budget counts them: its process, on its loop streams."""
    mine = ops.pid == budget.pid if budget.pid is not None else np.ones(len(ops), bool)
    return mine & ops.on_streams(budget.loop_streams) if budget.loop_streams else mine


def measure_kernels(trace: Trace, budget: "Budget | None", names: Iterable[str], label: str = "kernels"
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
    from nsys_rules.model.budget import part_of_class

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

