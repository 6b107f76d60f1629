"""rank-imbalance: uneven GPU work per step across ranks, beyond noise."""

from __future__ import annotations

import pytest

from nsys_rules.findings import Severity
from nsys_rules.testing.jobs import JobPlan, run_job_rules, write_job
from nsys_rules.testing import metric_values, only_finding

RULE = "rank-imbalance"


def imbalance(tmp_path, plan: JobPlan, **options):
    sim = write_job(tmp_path, plan)
    return run_job_rules([RULE], sim.paths, options={RULE: options} if options else None)


@pytest.mark.parametrize("ranks", [2, 8])
def test_a_rank_with_more_work_per_step(tmp_path, ranks):
    extra = 400_000  # 20 % more than the 2 ms the others compute
    outcome = imbalance(tmp_path, JobPlan(ranks=ranks, steps=10, extra_compute={ranks - 1: extra}, jitter=30_000,
                                          seed=ranks))
    f = only_finding(outcome.findings, RULE)
    m = metric_values(f)
    assert f.location.rank == ranks - 1 and m["busiest_rank"] == ranks - 1
    assert m["busiest_per_step"] == 2_000_000 + extra and m["others_median_per_step"] == 2_000_000
    assert m["excess_per_step"] == extra and m["excess_share"] == pytest.approx(20.0)
    assert f.severity is Severity.WARNING  # 20 % >= warn_excess_pct 15
    # An even split of the same work: the busiest rank gives away its excess over the mean, nine steps long.
    balanced = extra - extra / ranks
    assert m["balanced_gain_per_step"] == pytest.approx(balanced)
    assert f.estimated_savings_ns == pytest.approx(9 * balanced, abs=1)
    assert "gemm_kernel" in f.message  # the kernel that takes the extra time
    assert "nsys-rules diff" in f.recommendation


def test_equal_work_with_jitter_is_quiet(tmp_path):
    outcome = imbalance(tmp_path, JobPlan(ranks=4, steps=12, jitter=300_000, seed=5))
    assert outcome.findings == []


def test_min_excess_boundary(tmp_path):
    sim = write_job(tmp_path, JobPlan(ranks=4, steps=10, extra_compute={0: 80_000}))  # 4 % more
    found = run_job_rules([RULE], sim.paths, options={RULE: {"min_excess_pct": 3.0}}).findings
    assert only_finding(found, RULE).severity is Severity.INFO
    assert run_job_rules([RULE], sim.paths, options={RULE: {"min_excess_pct": 5.0}}).findings == []


def test_excess_in_one_step_only_is_not_beyond_noise(tmp_path):
    # 2 ms more in one of ten steps averages 10 % but does not repeat: no imbalance.
    outcome = imbalance(tmp_path, JobPlan(ranks=4, steps=11, extra_compute={2: 2_000_000}, extra_compute_steps={2: (5,)},
                                          jitter=10_000))
    assert outcome.findings == []


def test_too_few_steps_is_skipped(tmp_path):
    outcome = imbalance(tmp_path, JobPlan(ranks=2, steps=3, extra_compute={1: 500_000}))
    assert outcome.findings == []
    assert outcome.skipped[0].rule == RULE and "too few" in outcome.skipped[0].reason
