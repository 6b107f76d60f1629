"""Every `nsys-rules check ...` command the tool suggests works as suggested.

A suggestion is taken from the findings' recommendation and message (backticked, as printed), run
as given (plus `--format json`), and its result checked: the steady steps are all still there
(same count, same kernels in them) and the finding does not suggest the same command again. The
h200 traces are the real cases; a synthetic trace stands in when they are absent.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from nsys_rules.cli import main
from nsys_rules.testing import TraceBuilder
from tests.conftest import validate_report
from tests.rules.scenarios import sync_loop

SUGGESTION = re.compile(r"`(nsys-rules check [^`]*)`")


def check_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    code = main(["check", *argv, "--format", "json", "--fail-on", "never"])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    return validate_report(out)


def suggestions(data: dict) -> list[tuple[str, list[str]]]:
    """(trace, argv after `nsys-rules check`) for each runnable suggestion; placeholders (`<bytes>`) are not."""
    out = []
    for f in data["findings"]:
        for text in (f["recommendation"], f["message"]):
            for command in SUGGESTION.findall(text):
                if "<" not in command:
                    out.append((f["location"].get("trace", ""), shlex.split(command)[2:]))
    return out


def steady_of(data: dict, trace: str) -> tuple[int, int | None]:
    """(steps, kernels launch-bound counted) of ``trace`` in a report, whichever window it judged."""
    [entry] = [t for t in data["traces"] if t["path"] == trace]
    window = entry["window"]["steady"]  # with a filter: the steady steps inside it
    kernels = [f["metrics"]["kernels"]["value"] for f in data["findings"]
               if f["rule"] == "launch-bound" and f["location"].get("trace") == trace]
    return window["steps"], (kernels[0] if kernels else None)


def apply_all(paths: list[Path], capsys: pytest.CaptureFixture[str]) -> int:
    """Run each suggestion of a check over ``paths``; returns how many were applied."""
    data = check_json([str(p) for p in paths], capsys)
    found = suggestions(data)
    for trace, argv in found:
        before = steady_of(data, trace)
        after_data = check_json(argv, capsys)
        after = steady_of(after_data, trace)
        assert after == before, (trace, argv, before, after)
        again = [a for t, a in suggestions(after_data) if t == trace]
        assert argv not in again, (trace, argv)
    return len(found)


def test_suggestions_on_a_synthetic_trace_work_as_suggested(tmp_path, capsys):
    b = TraceBuilder()
    b.api("cudaFree", 100_000_000, 900_000_000)  # a second of start-up before the loop
    for i in range(20):  # warm-up kernels then the loop
        b.kernel("init_weights", start=1_100_000_000 + i * 1_000_000, duration=500_000)
    sync_loop(b, steps=24, t0=1_500_600_123)  # off a millisecond: rounding to the nearest would cut step 1
    trace = b.write(tmp_path / "t.sqlite")
    assert apply_all([trace], capsys) >= 1


def test_suggestions_on_the_h200_traces_work_as_suggested(h200, capsys):
    traces = sorted(h200.glob("*.sqlite"))
    if not traces:
        pytest.skip(f"no .sqlite traces in {h200}")
    assert apply_all(traces, capsys) >= 1
