"""A baseline hides known findings, but not one that got worse: its saving grew past the gate."""

from __future__ import annotations

import json

import pytest

from nsys_rules.baseline import MIN_GROWTH_NS, grew, read_baseline
from nsys_rules.testing import TraceBuilder
from tests.conftest import run_cli, validate_report
from tests.rules.scenarios import eager_steps


def eager(tmp_path, name: str, steps: int):
    """An eager decode loop (launch-bound); its saving grows with the number of steps."""
    b = TraceBuilder()
    eager_steps(b, steps=steps)
    return b.write(tmp_path / name)


def launch_bound(data: dict) -> dict | None:
    return next((f for f in data["findings"] if f["rule"] == "launch-bound"), None)


@pytest.fixture
def pair(tmp_path):
    """(baseline file written from a 10-step loop, its launch-bound saving, a 30-step loop's trace)."""
    small, big = eager(tmp_path, "small.sqlite", 10), eager(tmp_path, "big.sqlite", 30)
    base = tmp_path / "base.json"
    first = run_cli("check", "--format", "json", "--fail-on", "never", "--write-baseline", str(base), str(small))
    assert first.returncode == 0, first.stderr
    known = launch_bound(json.loads(first.stdout))["estimated_savings_ns"]
    return base, known, big


def test_a_known_finding_that_grew_is_shown_as_worse_and_fails(pair):
    base, known, big = pair
    proc = run_cli("check", "--format", "json", "--fail-on", "warning", "--baseline", str(base), str(big))
    data = validate_report(proc.stdout)
    f = launch_bound(data)
    assert f is not None and f["baseline_savings_ns"] == known
    assert f["estimated_savings_ns"] > 2.5 * known  # three times the steps
    assert f["message"].startswith("Known, grew from ")
    assert data["traces"][0]["baseline"]["worse"] == 1
    assert proc.returncode == 1 and f["severity"] == "warning"  # counts for --fail-on like a new finding
    assert "1 known finding(s) grew past the gate" in proc.stderr


@pytest.mark.parametrize("gate,shown", [(150, True), (250, False)])
def test_the_gate_decides(pair, gate, shown):
    base, known, big = pair  # the saving grew by about 200 %
    proc = run_cli("check", "--format", "json", "--fail-on", "warning", "--baseline", str(base),
                   "--baseline-gate", str(gate), str(big))
    assert (launch_bound(validate_report(proc.stdout)) is not None) is shown
    assert proc.returncode == (1 if shown else 0)


def test_the_same_trace_against_its_own_baseline_shows_nothing(pair, tmp_path):
    base, _, _ = pair
    proc = run_cli("check", "--format", "json", "--fail-on", "info", "--baseline", str(base),
                   str(tmp_path / "small.sqlite"))
    data = validate_report(proc.stdout)
    assert proc.returncode == 0 and data["findings"] == [] and data["traces"][0]["baseline"]["worse"] == 0


def test_growth_needs_the_share_and_a_millisecond():
    assert grew(70_900_000, 196_000_000)  # the newcomer's case
    assert not grew(70_900_000, 70_900_000 * 1.2)  # exactly 20 %: not more than the gate
    assert grew(70_900_000, int(70_900_000 * 1.2) + 1)
    assert not grew(100_000, 100_000 + MIN_GROWTH_NS - 1)  # 10x, but under a millisecond: noise
    assert grew(100_000, 100_000 + MIN_GROWTH_NS)
    assert not grew(None, 196_000_000) and not grew(70_900_000, None)  # unknown is not growth


def test_the_largest_saving_of_a_fingerprint_is_the_known_one(tmp_path):
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"findings": [
        {"fingerprint": "a" * 16, "savings_ns": 5}, {"fingerprint": "a" * 16, "estimated_savings_ns": 9},
        {"fingerprint": "b" * 16}, {"fingerprint": "c" * 16, "savings_ns": "x"}]}))
    assert read_baseline(path) == {"a" * 16: 9, "b" * 16: None, "c" * 16: None}


@pytest.mark.parametrize("args", [["--baseline-gate", "-5"], ["--baseline-gate", "lots"], ["--baseline-gate", "20"]])
def test_a_bad_gate_is_a_usage_error(tmp_path, args):
    trace = eager(tmp_path, "t.sqlite", 10)
    proc = run_cli("check", *args, str(trace))  # the last one: a gate without --baseline
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
