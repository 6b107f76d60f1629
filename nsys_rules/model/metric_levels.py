"""What the GPU metrics measured, as values: each budget part's levels (:class:`PartActivity`), the bound
in words, and the steady steps as the metrics saw them (:class:`BudgetMetrics`, ``Budget.metrics``).

:mod:`.gpu_metrics` builds them; rules and the output formats read them. No judgement: the bound is
what the levels say (a unit near its peak), not whether that is good.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nsys_rules.loaders import gpu_metrics as store
from nsys_rules.model.budget_parts import KINDS as PART_KINDS

#: At or above this percent of its peak a unit bounds a kind of work (DRAM: read + write; compute:
#: the busier of SM issue and the tensor pipes). Below it, a unit still bounds the work when it is
#: clearly the one nearest its peak: at least LEAN_PCT and LEAN_RATIO times the other (a GEMV at
#: 57 % of DRAM peak and 10 % issue is memory-bound, short of saturation); else the work is latency-bound.
BOUND_PCT = 60.0
LEAN_PCT = 30.0
LEAN_RATIO = 3.0


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
