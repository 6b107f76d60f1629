"""One answer per trace (nsys_rules/answer.py): who claims a part first, what a saving may draw on, who owns a part."""

from __future__ import annotations

import numpy as np

from nsys_rules.answer import finalize, part_owners
from nsys_rules.findings import Finding, Severity
from nsys_rules.model.budget import KINDS, Budget, Part

STEP = 10_000_000


def budget(**parts: int) -> Budget:
    """A 10-step budget of 10 ms steps whose parts (ns per step) fill them exactly (idle_other takes the rest)."""
    rest = STEP - sum(parts.values())
    parts = {**parts, "idle_other": rest}
    made = tuple(Part(name, KINDS[name], ns * 10, float(ns), ns) for name, ns in parts.items())
    per_step = {name: np.full(10, ns, np.int64) for name, ns in parts.items()}
    return Budget(10, 10 * STEP, np.full(10, STEP, np.int64), made, per_step, 0, 1, (7,), 5)


def finding(rule: str, savings: int | None, part: str | None, severity: Severity = Severity.WARNING,
            key: str = "") -> Finding:
    return Finding(rule, severity, rule, "message", "do this", estimated_savings_ns=savings, budget_part=part, key=key)


def by_rule(findings: list[Finding]) -> dict[str, Finding]:
    return {f.rule: f for f in findings}


def test_a_cause_keeps_its_part_before_slow_steps_claim_it():
    # PYTORCH_NO_CUDA_MEMORY_CACHING: 3 ms a step in allocation. step-outliers (a bigger, warning-level
    # saving over the same parts) used to claim first and leave the one-line fix capped at 0.
    b = budget(gemv=2_000_000, allocation=3_000_000, launch_wait=4_000_000)
    out = by_rule(finalize([finding("step-outliers", 60_000_000, "allocation+launch_wait"),
                            finding("alloc-churn", 30_000_000, "allocation", Severity.INFO)], b, None))
    assert out["alloc-churn"].estimated_savings_ns == 30_000_000 and not out["alloc-churn"].minor
    assert out["step-outliers"].estimated_savings_ns == 40_000_000  # what the cause left: launch_wait


def test_an_idle_time_symptom_never_claims_kernel_time():
    b = budget(gemv=6_000_000, launch_wait=3_000_000)
    out = by_rule(finalize([finding("gpu-idle-gaps", 90_000_000, "gemv+launch_wait")], b, None))
    assert out["gpu-idle-gaps"].estimated_savings_ns == 30_000_000  # launch_wait only, never the GEMV time


def test_slow_steps_claim_the_kernel_time_the_causes_leave():
    # Steps whose kernels ran slower: their excess is kernel time, drawn after the GEMV finding took its part.
    b = budget(gemv=6_000_000, launch_wait=3_000_000)
    out = by_rule(finalize([finding("step-outliers", 20_000_000, "gemv"),
                            finding("gemv-dominance", 50_000_000, "gemv", Severity.INFO)], b, None))
    assert out["gemv-dominance"].estimated_savings_ns == 50_000_000
    assert out["step-outliers"].estimated_savings_ns == 10_000_000  # 60 ms of GEMV time less the 50 ms taken


def test_savings_without_a_part_draw_on_idle_time_only():
    # 80 % of the step is kernels: a finding without a part may not claim them.
    b = budget(gemv=8_000_000, launch_wait=1_500_000)
    out = by_rule(finalize([finding("launch-bound", 10_000_000, "launch_wait"),
                            finding("capture-scope", 50_000_000, None)], b, None))
    assert out["launch-bound"].estimated_savings_ns == 10_000_000
    assert out["capture-scope"].estimated_savings_ns == 10_000_000  # idle 20 ms - 10 ms claimed
    total = sum(f.estimated_savings_ns or 0 for f in out.values())
    assert total <= b.idle_ns


def test_a_part_named_first_is_drawn_on_first():
    b = budget(host_prep=2_000_000, launch_wait=5_000_000)
    out = by_rule(finalize([finding("recompile", 15_000_000, "host_prep+launch_wait"),
                            finding("launch-bound", 50_000_000, "launch_wait", Severity.INFO)], b, None))
    # recompile's 15 ms come out of host_prep (20 ms in all), named first: launch_wait stays whole for its owner.
    assert out["recompile"].estimated_savings_ns == 15_000_000
    assert out["launch-bound"].estimated_savings_ns == 50_000_000


def test_savings_outside_the_steady_steps_are_not_capped_by_them():
    b = budget(launch_wait=1_000_000)
    out = by_rule(finalize([finding("recompile", 5_000_000_000, "outside")], b, None))
    assert out["recompile"].estimated_savings_ns == 5_000_000_000


def test_owners_and_a_big_parts_owner_is_a_warning():
    b = budget(gemv=1_000_000, host_prep=5_000_000, launch_wait=500_000)
    findings = finalize([finding("input-prep", 50_000_000, "host_prep", Severity.INFO)], b, None)
    out = by_rule(findings)
    assert out["input-prep"].severity is Severity.WARNING  # 50 % of the median step
    owners = part_owners(findings, b)
    assert owners["host_prep"]["rule"] == "input-prep"
    assert owners["launch_wait"] == {"owner": None, "why": "under 10% of the median step"}
    assert owners["idle_other"]["owner"] is None and "other streams" in owners["idle_other"]["why"]


def test_a_severity_the_user_set_is_never_raised():
    b = budget(host_prep=5_000_000)
    out = by_rule(finalize([finding("input-prep", 50_000_000, "host_prep", Severity.INFO)], b, None,
                           fixed=frozenset({"input-prep"})))
    assert out["input-prep"].severity is Severity.INFO


def test_a_misleading_trace_error_owns_what_nobody_claims():
    b = budget(launch_wait=6_000_000)
    findings = finalize([finding("launch-blocking", None, None, Severity.ERROR)], b, None)
    assert part_owners(findings, b)["launch_wait"]["rule"] == "launch-blocking"


# -- the exit code is decided by what is shown ---------------------------------------------------
def test_a_symptom_never_folds_into_a_cause_under_the_noise_floor():
    # The 2-GPU training trace's case: big idle gaps (a warning) and a sync whose removal saves 0.1 % of
    # the steady state. Folded into it, the warning decided --fail-on from inside the minor line.
    b = budget(gemv=8_000_000, after_sync=100_000, launch_wait=1_500_000)
    out = by_rule(finalize([finding("sync-stall", 100_000, "after_sync", Severity.INFO),
                            finding("gpu-idle-gaps", None, None, Severity.WARNING)], b, None))
    assert out["sync-stall"].minor and out["sync-stall"].severity is Severity.INFO
    assert out["gpu-idle-gaps"].folded_into is None and out["gpu-idle-gaps"].severity is Severity.WARNING


def test_a_folded_finding_is_never_more_severe_than_its_owner():
    # A sync that saves 5 % of the steady state (over the floor, under the raise) explains the gaps: one
    # finding, judged as the cause is; the gaps' own severity stays in the note.
    b = budget(gemv=8_000_000, after_sync=500_000, launch_wait=1_000_000)
    out = by_rule(finalize([finding("sync-stall", 5_000_000, "after_sync", Severity.INFO),
                            finding("gpu-idle-gaps", None, None, Severity.WARNING)], b, None))
    gaps = out["gpu-idle-gaps"]
    assert not out["sync-stall"].minor and out["sync-stall"].severity is Severity.INFO
    assert gaps.folded_into == out["sync-stall"].fingerprint
    assert gaps.severity is Severity.INFO and gaps.savings_note == "explained by sync-stall (warning on its own)"
    # A warning cause keeps a warning symptom a warning.
    out = by_rule(finalize([finding("sync-stall", 5_000_000, "after_sync", Severity.WARNING),
                            finding("gpu-idle-gaps", None, None, Severity.WARNING)], b, None))
    assert out["gpu-idle-gaps"].severity is Severity.WARNING and out["gpu-idle-gaps"].folded_into


def test_no_answer_hides_a_severity_above_what_it_shows():
    # Every mix of causes and symptoms, severities and savings (0 to 10 % of the steady state): a folded
    # finding is at most its owner's severity and a minor one at most info, so the shown severities decide.
    import itertools

    b = budget(gemv=7_000_000, after_sync=1_000_000, launch_wait=1_500_000)
    severities = (Severity.INFO, Severity.WARNING, Severity.ERROR)
    for cause_sev, symptom_sev, saving in itertools.product(severities, severities, (0, 10_000, 400_000, 10_000_000)):
        out = finalize([finding("sync-stall", saving, "after_sync", cause_sev),
                        finding("gpu-idle-gaps", None, None, symptom_sev),
                        finding("queue-delay", saving // 2, "launch_wait", symptom_sev)], b, None)
        owners = {f.fingerprint: f for f in out if not f.folded_into}
        for f in out:
            assert not (f.minor and f.severity is not Severity.INFO), f
            if f.folded_into:
                assert f.severity.rank <= owners[f.folded_into].severity.rank, (cause_sev, symptom_sev, saving, f)


def test_an_error_the_user_set_does_not_lift_a_finding_out_of_the_noise_floor():
    # [tool.nsys-rules.severity] kernel-tail = "error": a tail that saves nothing is minor (info), not an error;
    # an error a rule judged itself (a misleading trace) stays an error whatever it saves.
    b = budget(gemv=8_000_000, launch_wait=1_000_000)
    out = by_rule(finalize([finding("kernel-tail", 0, "gemv", Severity.ERROR),
                            finding("debug-build", 0, None, Severity.ERROR)], b, None, fixed=frozenset({"kernel-tail"})))
    assert out["kernel-tail"].minor and out["kernel-tail"].severity is Severity.INFO
    assert not out["debug-build"].minor and out["debug-build"].severity is Severity.ERROR
    out = by_rule(finalize([finding("kernel-tail", 20_000_000, "gemv", Severity.ERROR)], b, None,
                           fixed=frozenset({"kernel-tail"})))
    assert not out["kernel-tail"].minor and out["kernel-tail"].severity is Severity.ERROR
