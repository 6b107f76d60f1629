"""The judge the capture tests share: each kind of broken expectation is reported."""

from __future__ import annotations

from tests.capture_verdicts import verdict_problems

FINDINGS = [{"rule": "sync-stall", "severity": "warning", "message": "saves 1.2 ms"},
            {"rule": "gemv-dominance", "severity": "info", "message": "not computed"}]


def test_a_kept_expectation_has_no_problem():
    expected = {"must": {"sync-stall": "warning", "gemv-dominance": "info"}, "must_not": ["alloc-churn"],
                "message_re": {"sync-stall": r"saves [0-9.]+ ms"}, "message_not_re": {"sync-stall": "TB/s"}}
    assert verdict_problems(FINDINGS, expected) == []


def test_each_broken_expectation_is_named():
    expected = {"must": {"gemv-dominance": "warning", "launch-bound": "info"}, "must_not": ["sync-stall"],
                "message_re": {"gemv-dominance": "TB/s"}, "message_not_re": {"gemv-dominance": "not computed"}}
    assert verdict_problems(FINDINGS, expected) == [
        "missing gemv-dominance>=warning", "missing launch-bound>=info", "false sync-stall",
        "gemv-dominance message lacks /TB/s/", "gemv-dominance message has /not computed/"]
