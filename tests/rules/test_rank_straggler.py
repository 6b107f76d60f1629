"""rank-straggler on simulated jobs of 2-16 ranks: planted stragglers, clock skew, noise."""

from __future__ import annotations

import pytest

from nsys_rules.findings import Severity
from nsys_rules.testing.jobs import JobPlan, run_job_rules, write_job
from nsys_rules.testing import metric_values, only_finding

RULE = "rank-straggler"


def straggler(tmp_path, plan: JobPlan, **options):
    sim = write_job(tmp_path, plan)
    outcome = run_job_rules([RULE], sim.paths, options={RULE: options} if options else None)
    return sim, outcome


@pytest.mark.parametrize("ranks,late_rank", [(2, 1), (4, 2), (8, 0), (16, 11)])
def test_planted_straggler_is_found_with_its_lateness(tmp_path, ranks, late_rank):
    stall = 1_500_000
    sim, outcome = straggler(tmp_path, JobPlan(ranks=ranks, steps=14, stall={late_rank: stall}, jitter=40_000,
                                               seed=ranks))
    f = only_finding(outcome.findings, RULE)
    m = metric_values(f)
    assert f.location.rank == late_rank and m["rank"] == late_rank
    assert f.location.trace.endswith(f"rank{late_rank}_1.sqlite")
    assert m["collectives_last"] == m["collectives_judged"] == 14
    # Held up per step: the stall, less the jitter the next-to-last rank had over it (within 10 %).
    assert m["held_up_per_step"] == pytest.approx(stall, rel=0.10)
    # The lateness comes from a host stall (its GPU idle before the all-reduce), not from compute.
    assert m["extra_host_stall_per_step"] == pytest.approx(stall, rel=0.10)
    assert abs(m["extra_compute_per_step"]) < 0.05 * stall
    assert f.severity is Severity.WARNING  # 1.5 ms of a ~3.8 ms step
    assert f.estimated_savings_ns == pytest.approx(m["held_up_total"], abs=1)


def test_lateness_only_in_some_steps_names_those_steps(tmp_path):
    stall = 4_000_000
    late_steps = (3, 6, 7, 10, 13)  # 0-based step of the simulation = collective index
    sim, outcome = straggler(tmp_path, JobPlan(ranks=4, steps=16, stall={3: stall}, stall_steps={3: late_steps},
                                               jitter=20_000, seed=4))
    f = only_finding(outcome.findings, RULE)
    m = metric_values(f)
    assert f.location.rank == 3
    # Job steps run from one all-reduce's end to the next: the stall before collective i falls in step i (1-based).
    assert "late in steps 3, 6, 7, 10, 13 of 15" in f.message
    assert m["held_up_total"] == pytest.approx(stall * len(late_steps), rel=0.10)
    assert m["held_up_per_step"] == pytest.approx(stall * len(late_steps) / 15, rel=0.10)


@pytest.mark.parametrize("skew", [{1: 2_000_000_000, 2: -1_500_000_000}, {1: 37_000, 3: -3_000_000_000}])
def test_clock_skew_up_to_seconds_is_corrected_from_collectives(tmp_path, skew):
    stall = 2_000_000
    sim, outcome = straggler(tmp_path, JobPlan(ranks=4, steps=12, stall={2: stall}, jitter=30_000, end_jitter=4_000,
                                               clock_skew=skew, seed=7))
    f = only_finding(outcome.findings, RULE)
    assert f.location.rank == 2
    assert metric_values(f)["held_up_per_step"] == pytest.approx(stall, rel=0.10)
    clock = outcome.info["clock"]
    ranks = {r["rank"]: r for r in outcome.info["ranks"]}
    for rank, error in skew.items():
        if abs(error) > 50_000:  # corrected when the session clocks disagree beyond the tolerance
            assert ranks[rank]["clock_correction_ns"] == pytest.approx(-error, abs=5_000)
        else:  # within it, left alone: what it leaves is reported as residual skew
            assert ranks[rank]["clock_correction_ns"] == 0
            assert ranks[rank]["residual_skew_ns"] == pytest.approx(abs(error), abs=5_000)
    assert clock["source"] == "session clocks corrected from collectives"
    # What is left: collective ends a few microseconds apart (the planted end jitter), or the small skew left alone.
    left_alone = max([abs(e) for e in skew.values() if abs(e) <= 50_000], default=0)
    assert 0 < clock["residual_skew_ns"] <= left_alone + 4_000
    assert all(r["residual_skew_ns"] <= left_alone + 4_000 for r in ranks.values())


def test_without_session_clocks_the_collectives_align_the_ranks(tmp_path):
    sim, outcome = straggler(tmp_path, JobPlan(ranks=3, steps=10, stall={0: 2_000_000}, write_session_start=False,
                                               session_gap=40_000_000, jitter=10_000))
    f = only_finding(outcome.findings, RULE)
    assert f.location.rank == 0
    assert metric_values(f)["held_up_per_step"] == pytest.approx(2_000_000, rel=0.10)
    assert {r["rank"]: r["clock_correction_ns"] for r in outcome.info["ranks"]} == {0: 0, 1: 40_000_000, 2: 80_000_000}
    assert "lack TARGET_INFO_SESSION_START_TIME" in " ".join(outcome.info["clock"]["notes"])


def test_extra_compute_is_named_as_the_cause(tmp_path):
    extra = 1_000_000
    sim, outcome = straggler(tmp_path, JobPlan(ranks=4, steps=12, extra_compute={1: extra}, jitter=20_000, seed=2))
    f = only_finding(outcome.findings, RULE)
    m = metric_values(f)
    assert f.location.rank == 1
    assert m["extra_compute_per_step"] == pytest.approx(extra, rel=0.05)
    assert m["extra_host_stall_per_step"] < 0.1 * extra
    assert "more GPU work" in f.message and "Balance the work" in f.recommendation
    assert "nsys-rules diff" in f.recommendation  # separate traces: the exact command to compare them


def test_ranks_as_processes_of_one_trace(tmp_path):
    sim, outcome = straggler(tmp_path, JobPlan(ranks=4, steps=10, stall={2: 1_000_000}, one_trace=True, jitter=10_000))
    f = only_finding(outcome.findings, RULE)
    assert (f.location.rank, f.location.device, f.location.pid) == (2, 2, 1002)
    assert outcome.info["clock"]["source"] == "one trace (one clock)"
    assert [r["rank_source"] for r in outcome.info["ranks"]][2] == "GPU 2 / process 1002 of a trace with 4 ranks"


def test_ranks_from_the_recorded_environment(tmp_path):
    # File names without a rank, listed out of rank order: RANK in each export's environment decides.
    sim = write_job(tmp_path, JobPlan(ranks=3, steps=10, stall={1: 1_000_000}, environment_rank=True,
                                      file_name="trace_{index}.sqlite", jitter=10_000))
    paths = [sim.paths[2], sim.paths[0], sim.paths[1]]
    outcome = run_job_rules([RULE], paths)
    f = only_finding(outcome.findings, RULE)
    assert f.location.rank == 1 and f.location.trace.endswith("trace_1.sqlite")
    assert {r["rank_source"] for r in outcome.info["ranks"]} == {"environment RANK"}


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_random_jitter_is_no_straggler(tmp_path, seed):
    # Every rank is sometimes last by up to 0.8 ms: nobody is systematically late.
    sim, outcome = straggler(tmp_path, JobPlan(ranks=4, steps=16, jitter=800_000, seed=seed))
    assert [f for f in outcome.findings if f.rule == RULE] == []


def test_two_ranks_taking_turns_is_no_straggler(tmp_path):
    # Rank 0 is 1 ms late at even steps, rank 1 at odd ones: each causes half the waiting.
    sim, outcome = straggler(tmp_path, JobPlan(ranks=2, steps=16, stall={0: 1_000_000, 1: 1_000_000},
                                               stall_steps={0: tuple(range(0, 16, 2)), 1: tuple(range(1, 16, 2))},
                                               jitter=5_000, seed=3))
    assert outcome.findings == []


def test_late_at_half_the_steps_with_ties_elsewhere_is_a_straggler(tmp_path):
    # Rank 0 is 1 ms late at every other step and nobody is ever late otherwise: all the waiting is its.
    sim, outcome = straggler(tmp_path, JobPlan(ranks=2, steps=16, stall={0: 1_000_000},
                                               stall_steps={0: tuple(range(0, 16, 2))}))
    m = metric_values(only_finding(outcome.findings, RULE))
    assert m["rank"] == 0 and m["held_share"] == 100.0
    assert m["held_up_total"] == pytest.approx(7 * 1_000_000, rel=0.01)  # steps 2..16 hold 7 of the late ones


def test_min_share_boundary(tmp_path):
    # 100 us late per ~2.4 ms step is about 4 %: reported at min_share_pct 3, not at 5.
    plan = JobPlan(ranks=2, steps=12, stall={1: 100_000}, jitter=2_000)
    sim = write_job(tmp_path, plan)
    found = run_job_rules([RULE], sim.paths, options={RULE: {"min_share_pct": 3.0}}).findings
    assert only_finding(found, RULE).severity is Severity.INFO  # below warn_share_pct 5
    assert run_job_rules([RULE], sim.paths, options={RULE: {"min_share_pct": 5.0}}).findings == []


def test_one_rank_is_skipped_with_the_reason(tmp_path):
    sim = write_job(tmp_path, JobPlan(ranks=1, steps=6))
    outcome = run_job_rules([RULE], sim.paths)
    assert outcome.findings == []
    assert outcome.skipped[0].rule == RULE and "1 rank(s)" in outcome.skipped[0].reason
    assert "%q{RANK}" in outcome.skipped[0].fix


@pytest.mark.parametrize("command,word,absent", [
    (("python", "-m", "torch.distributed.run", "train.py"), "DataLoader(num_workers", "prefetch_to_device"),
    (("python", "train_jax.py"), "prefetch_to_device", "DataLoader"),
    (("./build/trainer",), "another thread", "DataLoader")])
def test_a_host_stall_is_fixed_in_the_programs_framework(tmp_path, command, word, absent):
    _, outcome = straggler(tmp_path, JobPlan(ranks=2, steps=14, stall={1: 1_500_000}, jitter=40_000, command=command))
    f = only_finding(outcome.findings, RULE)
    assert word in f.recommendation and absent not in f.recommendation
