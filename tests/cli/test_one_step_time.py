"""One step time (issue 42, item 1): every format and ``diff`` print the same typical step for a trace.

The typical step is the median steady step's own duration (the lower of the two middle steps for an even count:
a step that ran); the budget shows and the replay replays that very step. decode_eager has 24 steps: the two
middle ones are 4.536 and 4.577 ms, which used to give four numbers (p50 4.58, JSON 4.536, diff 4.56, HTML mean
4.52 ms).
"""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from nsys_rules.cli import main
from tests.capture_verdicts import check_json


def _run(*args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    assert code in (0, 1), err.getvalue()
    return out.getvalue()


@pytest.fixture
def eager(h200) -> dict:
    return {"trace": str(h200 / "decode_eager.sqlite"), "json": check_json(h200 / "decode_eager.sqlite")}


def test_the_json_budget_shows_and_replays_the_typical_step(eager):
    budget = eager["json"]["traces"][0]["budget"]
    typical = budget["step_ns"]["p50"]
    assert typical == 4535641  # the lower middle of 24 steps (4535641 and 4576729 ns)
    assert sum(p["median_step_ns"] for p in budget["parts"]) == typical  # the parts shown are of that step
    assert budget["replay"]["measured_step_ns"] == typical  # and the replay replays it


def test_table_markdown_html_and_diff_print_it(eager):
    trace = eager["trace"]
    assert "step time: 24 steps: p50 4.54 ms," in _run("check", trace, "--format", "table", "--fail-on", "never")
    assert "**Step time** 24 steps: p50 4.54 ms," in _run("check", trace, "--format", "markdown", "--fail-on", "never")
    page = _run("check", trace, "--format", "html", "--fail-on", "never")
    card = re.search(r"<div class='k'>Typical step</div><div class='v'>([^<]+)</div><div class='s'>([^<]+)<", page)
    assert card is not None and card.group(1) == "4.54 ms" and card.group(2).startswith("median of 24 steps")
    assert "STEP TIME" not in page.upper().replace("TYPICAL STEP", "")  # no unlabelled mean step any more
    assert "mean, summed over all GPUs and streams" in page  # GPU time per step says what it adds up
    diff = _run("diff", trace, trace)
    assert re.search(r"time per step\s+(BASE )?4\.54 ms,?\s+(NEW )?4\.54 ms", diff)  # a table row or a block
    data = json.loads(_run("diff", trace, trace, "--format", "json"))
    assert data["change"]["step"]["base_median_ns"] == 4535641


def test_check_and_diff_give_one_after_sync(h200):
    trace = h200 / "engine_worker_thread.sqlite"
    check = {p["name"]: p for p in check_json(trace)["traces"][0]["budget"]["parts"]}
    diff = {p["name"]: p for p in json.loads(_run("diff", str(trace), str(trace), "--format", "json"))["parts"]}
    assert check["after_sync"]["per_step_ns"] == diff["after_sync"]["base_per_step_ns"] == 31496.0
    assert all(check[name]["per_step_ns"] == diff[name]["base_per_step_ns"] for name in diff if name in check)


def test_launch_bound_says_why_its_host_time_differs_from_the_budget(eager):
    [finding] = [f for f in eager["json"]["findings"] if f["rule"] == "launch-bound"]
    assert ("Per step the launching thread spends 3291 us outside any CUDA call (72 % of the step, p50), against "
            "2191 us of host code in the budget's median step, which counts only the host time that left the GPU "
            "idle; the rest ran while the GPU was busy.") in finding["message"]


def test_sync_stall_says_why_its_bubbles_differ_from_the_budget():
    from tests.conftest import EXAMPLE

    report = check_json(EXAMPLE)
    [finding] = [f for f in report["findings"] if f["rule"] == "sync-stall"]
    assert finding["metrics"]["bubble_time"]["value"] == 810834 and finding["metrics"]["after_sync_idle"]["value"] == 1042296
    assert ("After each sync the GPU idles 11.7 us (p50; 0.81 ms in total) before new work arrives, counted from each "
            "call's return (the budget's after-sync idle, 1.04 ms, also counts the wait from the GPU's last work to "
            "that return): ") in finding["message"]
