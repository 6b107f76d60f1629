"""Job rules are pluggable: the register_job_rules hook, its checks, and isolation of a failing job rule."""

from __future__ import annotations

import types
from dataclasses import dataclass

from nsys_rules.settings import Settings
from nsys_rules.engine import run_check
from nsys_rules.errors import ExitCode
from nsys_rules.hooks import hookimpl
from nsys_rules.inputs import open_trace
from nsys_rules.job_rule import JobContext, JobRule
from nsys_rules.testing.jobs import JobPlan, write_job
from nsys_rules.plugin_manager import build_registry
from nsys_rules.rule import Rule


@dataclass(frozen=True)
class NoOptions:
    """No options."""


class CountRanks(JobRule):
    """Reports how many ranks the job has.

    What it detects: x. Why it hurts: x. Evidence: x. Next optimizations: x. Options: none.
    Requires: x. False positives: x.
    """

    name = "count-ranks"
    title = "ranks counted"
    Options = NoOptions

    def check(self, ctx: JobContext):
        yield ctx.finding(f"{ctx.job.size} ranks", "nothing", rank=ctx.job.ranks[-1].rank)


class Broken(JobRule):
    """Raises."""

    name = "broken-job-rule"
    title = "raises"
    Options = NoOptions

    def check(self, ctx: JobContext):
        raise RuntimeError("bug in a job rule")


class TraceRule(Rule):
    """A per-trace rule."""

    name = "per-trace"
    title = "per trace"
    Options = NoOptions

    def check(self, ctx):
        return []


def plugin(**hooks) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{name: hookimpl(func) for name, func in hooks.items()})


def test_a_plugin_job_rule_runs_once_over_all_ranks(tmp_path):
    sim = write_job(tmp_path, JobPlan(ranks=3, steps=5))
    registry = build_registry(autoload=False, extra=(("counter", plugin(register_job_rules=lambda: [CountRanks])),))
    assert registry.errors == [] and registry.rules["count-ranks"].scope == "job"
    report = run_check(sim.paths, registry, Settings(select=["count-ranks"]), open_trace)
    assert [f.message for f in report.findings] == ["3 ranks"]  # once for the job, not once per trace
    assert report.findings[0].location.rank == 2
    assert report.results and all(r.findings == [] for r in report.results)


def test_rules_registered_through_the_wrong_hook_are_refused():
    registry = build_registry(autoload=False, extra=(
        ("mixed", plugin(register_rules=lambda: [CountRanks], register_job_rules=lambda: [TraceRule])),))
    errors = sorted(e.error for e in registry.errors)
    assert errors == ["rule count-ranks is a job rule: register it with register_job_rules",
                      "rule per-trace is a trace rule: register it with register_rules"]
    assert "count-ranks" not in registry.rules and "per-trace" not in registry.rules


def test_a_failing_job_rule_is_an_error_entry_and_exit_4(tmp_path):
    sim = write_job(tmp_path, JobPlan(ranks=2, steps=5))
    registry = build_registry(autoload=False, extra=(
        ("broken", plugin(register_job_rules=lambda: [Broken, CountRanks])),))
    report = run_check(sim.paths, registry, Settings(select=["broken-job-rule", "count-ranks"]), open_trace)
    assert [e.rule for e in report.all_errors] == ["broken-job-rule"]
    assert "bug in a job rule" in report.all_errors[0].error
    assert [f.message for f in report.findings] == ["2 ranks"]  # the other job rule still ran
    assert report.exit_code == ExitCode.INCOMPLETE


class Oversold(JobRule):
    """Claims more savings than the job runs."""

    name = "oversold"
    title = "oversold"
    Options = NoOptions

    def check(self, ctx: JobContext):
        yield ctx.finding("too good", "nothing", estimated_savings_ns=10**15)


def test_savings_are_bounded_by_the_steps_time(tmp_path):
    sim = write_job(tmp_path, JobPlan(ranks=2, steps=6, compute=1_000_000, transfer=200_000, launch_gap=20_000))
    registry = build_registry(autoload=False, extra=(("oversold", plugin(register_job_rules=lambda: [Oversold])),))
    report = run_check(sim.paths, registry, Settings(select=["oversold"]), open_trace)
    assert report.findings[0].estimated_savings_ns == 5 * (20_000 + 1_000_000 + 200_000)  # five steps


class Noisy(JobRule):
    """Prints, then floods findings from a generator that never ends."""

    name = "noisy-job-rule"
    title = "noisy"
    Options = NoOptions

    def check(self, ctx: JobContext):
        print("a job rule's print")
        i = 0
        while True:
            i += 1
            yield ctx.finding(f"finding {i}", "nothing", key=str(i))


def test_a_job_rule_is_contained_and_capped_like_a_trace_rule(tmp_path, capfd):
    """Job rules run through the same isolation as trace rules: output off stdout, findings cut at the cap."""
    sim = write_job(tmp_path, JobPlan(ranks=2, steps=5))
    registry = build_registry(autoload=False, extra=(("noisy", plugin(register_job_rules=lambda: [Noisy])),))
    report = run_check(sim.paths, registry, Settings(select=["noisy-job-rule"], max_findings=50), open_trace)
    out, err = capfd.readouterr()
    assert "a job rule's print" not in out and "a job rule's print" in err
    assert len(report.findings) == 50
    assert [(c.rule, c.kept, c.dropped) for c in report.all_capped] == [("noisy-job-rule", 50, None)]
