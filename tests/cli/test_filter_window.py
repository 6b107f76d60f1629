"""One window per run: with --filter-time or --filter-nvtx every finding's numbers come from one window (issue 42, 3).

The steady rules judge the steady steps inside the filter, so a finding's counts and the step budget
it splits come from the same steps; the full-capture rules judge the filter; and the window the tool
itself suggests as covering all of a trace (the usage error of a filter that selects nothing) gives
the very report of no filter, on every H200 trace.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from nsys_rules.cli import main
from tests.capture_verdicts import check_json

NAMED = re.compile(r"--filter-time (\S+) covers all of it")


def _json(capsys: pytest.CaptureFixture[str], *args: object) -> dict[str, Any]:
    assert main(["check", "--format", "json", "--fail-on", "never", *map(str, args)]) == 0
    return json.loads(capsys.readouterr().out)


def _covering(capsys: pytest.CaptureFixture[str], trace: object) -> str:
    """The window the tool names as covering all of the trace (asked with a filter past its end)."""
    assert main(["check", "--filter-time", "100000s/100001s", str(trace)]) == 2
    found = NAMED.search(capsys.readouterr().err)
    assert found, "the usage error names a covering window"
    return found.group(1)


def _numbers(report: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Each finding as what it says in numbers: rule, severity, fingerprint, savings, metrics, fold and floor."""
    return sorted((f["rule"], f["severity"], f["fingerprint"], f.get("estimated_savings_ns"),
                   json.dumps(f["metrics"], sort_keys=True), f.get("folded_into"), f.get("minor"))
                  for f in report["findings"])


def test_the_covering_window_gives_the_report_of_no_filter_on_every_h200_trace(h200, capsys):
    traces = sorted(h200.glob("*.sqlite"))
    assert len(traces) >= 17
    for trace in traces:
        spec = _covering(capsys, trace)
        plain, cut = check_json(trace), _json(capsys, "--filter-time", spec, trace)
        assert _numbers(cut) == _numbers(plain), (trace.name, spec)
        assert cut["traces"][0]["budget"] == plain["traces"][0]["budget"], trace.name
        assert cut["traces"][0]["window"]["filter"]["source"] == f"--filter-time {spec}"  # named once, in the window


def test_a_filter_over_warm_up_and_steps_keeps_one_window(h200, capsys):
    # decode_eager: warm-up from 5.17 s, 24 decode steps from 6.18 s; the filter keeps the first 15 steps and
    # 0.68 s of warm-up before them.
    report = _json(capsys, "--filter-time", "5.5s/6.25s", h200 / "decode_eager.sqlite")
    trace = report["traces"][0]
    budget, steady = trace["budget"], trace["window"]["steady"]
    assert budget["steps"] == steady["steps"] == 15
    by_rule = {f["rule"]: f for f in report["findings"]}
    launch = by_rule["launch-bound"]
    # The kernel counts and the busy share are over the same 15 steps as the budget's host split, not over the
    # filter's 0.75 s (which held 0.68 s of warm-up).
    assert launch["metrics"]["steady_time"]["value"] == budget["total_ns"]
    assert launch["metrics"]["kernels"]["value"] == pytest.approx(15 * 241, rel=0.03)
    assert by_rule["step-outliers"]["metrics"]["steps"]["value"] == 15
    # The full-capture rules judge the filter: capture-scope counts the warm-up the filter kept.
    scope = by_rule["capture-scope"]["metrics"]
    assert scope["time_before_steady_state"]["value"] == pytest.approx(6.1817e9 - 5.5e9, rel=1e-3)
