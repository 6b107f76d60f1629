"""How kernel-tail weighs a group: a tail at all, shape variation or a real tail, systematic or outliers, its cost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from nsys_rules.api import Severity
from nsys_rules.rules.kernel_tail.tails import slow_runs


def has_tail(table: pd.DataFrame, outlier_ratio: float, tail_ratio: float, min_count: int, min_share_pct: float) -> pd.Series:
    """Groups of ``table`` with outliers (max/p50) or a tail (p99/p50), enough invocations, and a tail cost's
    ``share`` of at least ``min_share_pct``: the ones that may be reported."""
    return ((table["max_p50"] > outlier_ratio) | (table["p99_p50"] > tail_ratio)) & \
        (table["count"] >= min_count) & (table["share"] >= min_share_pct / 100)


@dataclass(frozen=True)
class KernelVerdict:
    """What one kernel group's spread is, and what it costs."""

    testable: bool  # a position test applies (steps with several invocations, or a launch period)
    positional_cost: float  # the tail against each position's median (ns)
    period: int  # the launch period that explains the spread best; 0: the position in the step
    shape_variation: bool  # durations follow the position: different shapes, not a tail
    cost: float  # the tail cost the finding reports (ns)
    severity: Severity
    systematic: bool  # p99/p50 over the tail ratio with enough slow invocations; else outliers
    slow_count: int  # invocations over tail_ratio x the median
    runs: int  # runs of consecutive slow invocations
    phase: bool  # the slow invocations come in a few long runs: a phase of the run

    @property
    def kind(self) -> str:
        """``systematic tail`` or ``outlier invocations``."""
        return "systematic tail" if self.systematic else "outlier invocations"


def judge_kernel(row: pd.Series, in_order: np.ndarray, periodic: tuple[float, int, float], n_steps: int,
                 opts: Any) -> KernelVerdict:
    """Weigh one group (``row`` of the table with its positional tail; ``in_order``: its durations in launch
    order; ``periodic``: :func:`.tails.periodic_tail` of them) under the rule's options."""
    gpu_time = float(row["gpu_time"])
    plain_cost = float(row["tail_cost"])
    # Two position tests, the better explanation wins: the rank within each step (needs
    # steps with several invocations of the group), and a period in the group's own launch
    # sequence (works without step ranges, and when each step holds one invocation).
    testable = n_steps >= opts.min_steps and row["steps_seen"] >= opts.min_steps and \
        row["in_steps"] >= 0.8 * row["count"] and row["in_steps"] > row["steps_seen"]
    positional_cost = float(row["positional"]) + max(0.0, plain_cost - float(row["plain_in_steps"]))
    period = 0
    plain_tested, positional_tested = float(row["plain_in_steps"]), float(row["positional"])
    cost_p, best_period, held_out = periodic
    if best_period and held_out <= opts.shape_explained_pct / 100 and (not testable or cost_p < positional_cost):
        testable, positional_cost, plain_tested, positional_tested = True, cost_p, plain_cost, cost_p
        period = best_period
    shape_variation = testable and (positional_tested <= opts.shape_explained_pct / 100 * plain_tested
                                    or positional_cost < opts.min_share_pct / 100 * gpu_time)
    cost = min(plain_cost, positional_cost) if testable else plain_cost
    share = cost / gpu_time if gpu_time else 0.0
    slow = in_order > opts.tail_ratio * row["p50"]
    slow_count = int(slow.sum())
    # The playbook's labels: p99/p50 over tail_ratio is a systematic tail, max/p50 over
    # outlier_ratio alone means outliers. With few invocations p99 is the second-largest
    # value, so a "systematic" tail needs at least 3 slow invocations and 1 % of them.
    systematic = row["p99_p50"] > opts.tail_ratio and slow_count >= max(3, 0.01 * row["count"])
    runs = slow_runs(slow)
    return KernelVerdict(testable=bool(testable), positional_cost=positional_cost, period=period,
                         shape_variation=bool(shape_variation), cost=cost,
                         severity=Severity.WARNING if share >= opts.warn_share_pct / 100 else Severity.INFO,
                         systematic=bool(systematic), slow_count=slow_count, runs=runs,
                         phase=bool(systematic and runs <= 3 and slow_count >= 10))
