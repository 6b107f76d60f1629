"""The GEMVs' DRAM traffic as the trace's GPU metrics measured it: the step budget's ``gemv`` part, or the rule's
own GEMV kernels when its name patterns add some. Shared by the gemv family; no judgement here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nsys_rules.rules.gemv.bandwidth import per_step_time
from nsys_rules.api import plain_number
from nsys_rules.api import PartActivity, RuleContext


@dataclass(frozen=True)
class MeasuredGemv:
    """What the GEMVs did to DRAM while they ran, in percent of peak and bytes per second, and their time per step."""

    read_pct: float
    read_stderr: float
    write_pct: float | None
    peak: float  # B/s
    samples: int
    frequency_hz: int | None
    gemv_ns_per_step: float
    steps: int
    steps_source: str

    @property
    def read_bps(self) -> float:
        """DRAM read bandwidth while the GEMVs run, B/s."""
        return self.read_pct / 100.0 * self.peak

    @property
    def write_bps(self) -> float | None:
        """DRAM write bandwidth while the GEMVs run, B/s (None when not resolved)."""
        return None if self.write_pct is None else self.write_pct / 100.0 * self.peak

    @property
    def fraction(self) -> float:
        """DRAM traffic (read + write) as a fraction of peak: the memory roofline's measure."""
        return (self.read_pct + (self.write_pct or 0.0)) / 100.0

    @property
    def bytes_per_step(self) -> float:
        """DRAM bytes the GEMVs read per step."""
        return self.read_bps * self.gemv_ns_per_step / 1e9

    @property
    def rate_text(self) -> str:
        """`` at 10 kHz`` when the capture recorded its sampling frequency."""
        if not self.frequency_hz:
            return ""
        khz = self.frequency_hz / 1000
        return f" at {plain_number(khz, 6)} kHz" if khz >= 1 else f" at {self.frequency_hz} Hz"


def measured_gemv(ctx: RuleContext, kernels: pd.DataFrame, is_gemv: np.ndarray, device: int,
                  peak: float | None) -> MeasuredGemv | None:
    """The GEMVs of ``device`` as the GPU metrics measured them; None without GPU metrics for the loop's GPU, or when
    the GEMVs' DRAM reads could not be told apart from the rest (too little time of their own)."""
    budget = ctx.budget
    metrics = budget.metrics if budget is not None else None
    if budget is None or metrics is None or not metrics.measured or budget.device != device:
        return None
    peak = metrics.peak_dram or peak
    if not peak:
        return None
    on_device = (kernels["device_id"].to_numpy() == device) & is_gemv
    part: PartActivity | None
    if ctx.options.extra_gemv_patterns:
        names = pd.unique(kernels.loc[on_device, "name"].astype(object))
        part = ctx.measure_kernels([str(n) for n in names], "gemv kernels")
    else:
        part = metrics.part("gemv")
    if part is None or part.level("dram_read") is None:
        return None
    durations = (kernels["end"] - kernels["start"]).to_numpy()[on_device]
    per_step, used = per_step_time(kernels["launch_start"].to_numpy()[on_device], durations, ctx.window.steps)
    model = ctx.window.model
    source = f"{used} steps of {model.name}" if model is not None and model.count and model.name else f"{used} steps"
    return MeasuredGemv(float(part.pct["dram_read"]), float(part.stderr.get("dram_read", 0.0)),
                        part.pct.get("dram_write"), float(peak), metrics.samples, metrics.frequency_hz, per_step, used,
                        source)
