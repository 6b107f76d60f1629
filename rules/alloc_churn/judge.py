"""How alloc-churn weighs its evidence: churn or a handful, and how severe it is."""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsys_rules.api import Severity, pct, spread
from nsys_rules.rules.alloc_churn.measure import ChurnEvidence


def is_churn(calls: pd.DataFrame, steps: int, steady_ns: int, span: tuple[int, int], min_calls: int,
             min_calls_per_step: float, min_spread_pct: float, warn_share_pct: float) -> bool:
    """Whether the loop's ``calls`` recur at a steady rate, or cost enough to report at any rate.

    Few calls can still cost much: a cudaFree every N steps synchronizes the device and may
    block the host for milliseconds. Judged by the host time the calls block in the loop.
    """
    if pct(int(calls["duration"].sum()), steady_ns) >= warn_share_pct:
        return True
    per_step = len(calls) / steps if steps else None
    if len(calls) < min_calls:
        return False
    if per_step is not None and per_step < min_calls_per_step:
        return False
    return not (per_step is None and spread(calls["start"].to_numpy(np.int64), *span) < min_spread_pct / 100)


def severity(ev: ChurnEvidence, min_calls_per_step: float, warn_share_pct: float) -> Severity:
    """Warning when the GPU's idle time in the calls reaches ``warn_share_pct`` of the steady state, or caching is off."""
    # A debugging switch that turns the allocator off is a configuration mistake with a one-line
    # fix: a warning however much of this trace's time it happens to cost.
    switched_off = ev.no_cache and (ev.per_step is None or ev.per_step >= min_calls_per_step)
    return Severity.WARNING if pct(ev.gpu_idle, ev.steady_ns) >= warn_share_pct or switched_off else Severity.INFO
