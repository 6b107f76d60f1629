"""step-outliers (issue 37, item 3): steps of two kinds (a prefill every 8th step among decode steps) are named as
kinds with their own counts and medians, never as outliers; an outlier of the usual kind is still one."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.api import step_kinds
from nsys_rules.testing import TraceBuilder, metric_values, run_rule

T0 = 100_000_000
KERNEL = 100_000


def _serve(b: TraceBuilder, steps: int = 48, *, every: int = 8, slow_at: int = -1) -> None:
    """A serving loop (NVTX ``serve_step``): 10 decode kernels a step, 20 in every ``every``-th step (a prefill)."""
    t = T0
    for i in range(steps):
        start = t
        count = 20 if i % every == 0 else 10
        for k in range(count):
            b.kernel("decode_gemv" if count == 10 else "prefill_gemm", start=t + 10_000 + k * KERNEL,
                     duration=KERNEL - 5_000, launch_at=t + k * 1_000)
        t += count * KERNEL + 50_000 + (5_000_000 if i == slow_at else 0)
        b.nvtx("serve_step", start, t - 1_000)


def _by_key(findings):
    return {f.key: f for f in findings}


def test_prefill_steps_are_a_kind_not_outliers(tmp_path):
    b = TraceBuilder()
    _serve(b)
    found = _by_key(run_rule("step-outliers", b.write(tmp_path / "t.sqlite")))
    assert list(found) == ["kinds"], [f.message for f in found.values()]
    f = found["kinds"]
    m = metric_values(f)
    assert (m["usual_steps"], m["other_steps"]) == (42, 6)  # steps 1, 9, ..., 41 prefill
    assert (m["usual_kernels"], m["other_kernels"]) == (10, 20)
    assert m["other_median"] == pytest.approx(2 * m["usual_median"], rel=0.1)
    assert "every 8 steps" in f.message and "not outliers" in f.message


def test_an_outlier_of_the_usual_kind_is_still_reported(tmp_path):
    b = TraceBuilder()
    _serve(b, slow_at=21)
    found = _by_key(run_rule("step-outliers", b.write(tmp_path / "t.sqlite")))
    assert "kinds" in found
    outliers = [f for k, f in found.items() if k != "kinds"]
    assert len(outliers) == 1 and "1 of 42 steady steps of the usual kind" in outliers[0].message
    assert "step 22 " in outliers[0].message  # 1-based


def test_kinds_need_recurring_same_sized_steps_without_one_off_costs():
    durations = np.full(20, 1_000_000)
    kernels = np.full(20, 10)
    none = np.zeros(20, bool)
    assert step_kinds(kernels, durations, none) == []
    kernels[5] = 20  # one step: an outlier's business
    assert step_kinds(kernels, durations, none) == []
    kernels[12] = 20
    kinds = step_kinds(kernels, durations, none)
    assert [len(k.steps) for k in kinds] == [18, 2] and kinds[1].kernels == 20
    loads = none.copy()
    loads[12] = True  # a compile in that step: not a kind
    assert step_kinds(kernels, durations, loads) == []
    kernels[12] = 40  # the other steps disagree on their size: variation, not a kind
    assert step_kinds(kernels, durations, none) == []
