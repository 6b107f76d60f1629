"""``check --what-if RULE[,RULE]``: the median step replayed with chosen fixes, its budget before and after."""

from __future__ import annotations

import pytest

from tests.conftest import H200, run_cli, validate_report

EAGER = H200 / "decode_eager.sqlite"
pytestmark = pytest.mark.skipif(not EAGER.exists(), reason=f"{EAGER} is absent (no shared traces)")


def test_what_if_json_carries_the_replayed_budget() -> None:
    done = run_cli("check", str(EAGER), "--format", "json", "--what-if", "launch-bound")
    assert done.returncode in (0, 1), done.stderr
    report = validate_report(done.stdout)
    replay = report["traces"][0]["budget"]["replay"]
    assert abs(replay["error_pct"]) <= 2
    what = replay["what_if"]
    assert what["rules"] == ["launch-bound"]
    # decode_eager -> decode_graph_node measured 4.58 -> 1.45 ms per step: the replay lands within 0.8-1.25x.
    assert 0.8 <= what["saving_per_step_ns"] / (4_576_729 - 1_452_990) <= 1.25
    parts = {p["name"]: p for p in what["parts"]}
    assert parts["gemv"]["before_ns"] == parts["gemv"]["after_ns"] > 0  # the kernels stay
    assert parts["idle"]["after_ns"] < parts["idle"]["before_ns"] / 10  # the launch waits go
    finding = next(f for f in report["findings"] if f["rule"] == "launch-bound")
    assert finding["savings_replay"]["per_step_ns"] == what["saving_per_step_ns"]
    # Over the steady steps: as much in each step, never more than the same share of each.
    share = what["saving_per_step_ns"] / replay["measured_step_ns"]
    steps, total = finding["savings_replay"]["steps"], report["traces"][0]["budget"]["total_ns"]
    assert finding["estimated_savings_ns"] == pytest.approx(min(what["saving_per_step_ns"] * steps, share * total), abs=2)


def test_what_if_table_shows_before_and_after() -> None:
    done = run_cli("check", str(EAGER), "--what-if", "launch-bound,sync-stall", env={"COLUMNS": "200"})
    assert done.returncode in (0, 1), done.stderr
    assert "what if launch-bound, sync-stall were fixed: the median step replayed 4.536 ms -> " in done.stdout
    assert "the replayed median step by part:" in done.stdout


def test_what_if_unknown_rule_is_a_usage_error() -> None:
    done = run_cli("check", str(EAGER), "--what-if", "launch-bnd")
    assert done.returncode == 2
    assert "did you mean 'launch-bound'" in done.stderr
    assert "Traceback" not in done.stderr
