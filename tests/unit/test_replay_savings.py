"""Replayed savings shown together (nsys_rules.replay_savings): never past the fixes replayed together."""

from __future__ import annotations

import pytest

from nsys_rules.findings import Finding, Severity
from nsys_rules import replay_savings
from nsys_rules.replay_savings import cap_together, in_sequence


class _Replay:
    """A stand-in for StepReplay: 10 steps, the fixes together give back what ``gains`` says per step."""

    steps = 10
    total_ns = 10_000
    measured_ns = 1_000

    def __init__(self, gains: dict[tuple[str, ...], int]) -> None:
        self.gains = gains

    def together(self, rules: tuple[str, ...]) -> int:
        return self.gains[tuple(sorted(rules))]

    def over_steps(self, per_step_ns: float) -> int:
        return int(per_step_ns * self.steps)


def _finding(rule: str, saving: int) -> Finding:
    return Finding(rule, Severity.WARNING, rule, "m", "r", estimated_savings_ns=saving, budget_part="launch_wait",
                   savings_replay={"per_step_ns": saving // 10})


def test_overlapping_fixes_show_what_is_left_and_keep_their_own() -> None:
    # Graphs give back 100 ns a step, cached allocations 80 alone, both together 120: allocations add 20.
    replay = _Replay({("launch-bound",): 100, ("alloc-churn", "launch-bound"): 120})
    out = in_sequence([_finding("alloc-churn", 800), _finding("launch-bound", 1000)], replay)
    alloc, graphs = out
    assert graphs.estimated_savings_ns == 1000 and graphs.savings_replay["own_ns"] == 1000
    assert alloc.estimated_savings_ns == 200  # what is left of the two together
    assert alloc.savings_replay["own_ns"] == 800 and alloc.savings_replay["after_fixes_above_ns"] == 200
    assert "take the rest" in (alloc.savings_note or "")
    assert sum(f.estimated_savings_ns or 0 for f in out) == 1200


def test_compounding_fixes_keep_their_own_saving() -> None:
    # Faster kernels alone give back 4 ns a step (a host-bound step); after graphs they add 80.
    replay = _Replay({("launch-bound",): 300, ("fp32-gemm", "launch-bound"): 380})
    out = in_sequence([_finding("launch-bound", 3000), _finding("fp32-gemm", 40)], replay)
    assert [f.estimated_savings_ns for f in out] == [3000, 40]
    assert out[1].savings_replay["after_fixes_above_ns"] == 800


def test_cap_scales_the_shown_savings_to_the_shown_fixes_together(monkeypatch: pytest.MonkeyPatch) -> None:
    # The mechanism for any two replayed rules (only launch-bound's saving is replayed in a report today).
    monkeypatch.setattr(replay_savings, "REPLAYED", frozenset({"launch-bound", "alloc-churn"}))
    replay = _Replay({("alloc-churn", "launch-bound"): 100})
    out = cap_together([_finding("launch-bound", 800), _finding("alloc-churn", 600)], replay)
    assert sum(f.estimated_savings_ns or 0 for f in out) <= 1000
    assert all("scaled by 0.71" in (f.savings_note or "") for f in out)
