"""``check --filter-time/--filter-nvtx`` that select nothing are usage errors; no sentinel reaches the JSON."""

from __future__ import annotations

import pytest

from tests.capture_verdicts import check_json
from tests.conftest import run_cli, validate_report
from tests.unit.test_overview import stepped_trace

#: The "open end" sentinel the windows use internally (2**62): never a number of the contract.
SENTINEL = 2**62


def big_numbers(value: object, path: str = "$") -> list[str]:
    """Where a JSON document holds a number at or beyond the sentinel."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in big_numbers(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in big_numbers(v, f"{path}[{i}]")]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) >= SENTINEL:
        return [f"{path}={value}"]
    return []


@pytest.fixture
def steps(tmp_path):
    # 6 steps of 195 us: activity from 1 ms (the first step range opens) to about 2.2 ms.
    return stepped_trace(tmp_path / "steps.sqlite")


def test_filter_time_past_the_end_names_the_trace_span(steps):
    proc = run_cli("check", "--filter-time", "10s/20s", str(steps))
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert line.count("\n") == 0
    assert line.startswith("nsys-rules: --filter-time 10s/20s selects nothing: the trace's activity runs from "
                           "0.001 s to 0.002 s after the session start")
    assert "--filter-time 1ms/3ms covers all of it" in line


def test_filter_time_inside_a_gap_selects_nothing_either(steps):
    proc = run_cli("check", "--filter-time", "5ms/6ms", str(steps))
    assert proc.returncode == 2 and "selects nothing" in proc.stderr


def test_unknown_nvtx_range_names_the_closest_ones(steps):
    proc = run_cli("check", "--filter-nvtx", "stp", str(steps))
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("no NVTX range named 'stp' in the trace; closest: 'step'")
    far = run_cli("check", "--filter-nvtx", "prefill", str(steps))
    assert far.returncode == 2
    assert far.stderr.strip().endswith("the trace has 1 range name(s), most frequent: 'step'")


def test_open_ended_filters_are_null_in_json(steps):
    for spec, start, end in (("1ms/", 1_000_000, None), ("/2ms", None, 2_000_000)):
        proc = run_cli("check", "--format", "json", "--fail-on", "never", "--filter-time", spec, str(steps))
        assert proc.returncode == 0, proc.stderr
        data = validate_report(proc.stdout)
        window = data["traces"][0]["window"]["filter"]
        assert (window["start_ns"], window["end_ns"]) == (start, end)
        assert big_numbers(data) == []


def test_no_json_of_the_h200_traces_holds_a_sentinel(h200):
    # The session's one run of each trace (tests/capture_verdicts.py), shared with the answer's property tests.
    for path in sorted(h200.glob("*.sqlite")):
        assert big_numbers(check_json(path)) == [], path.name
