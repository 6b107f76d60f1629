"""One step numbering everywhere: the step the text names is the HTML bar of that label and the JSON number.

The text has always counted steps from 1 ("step 7 22.32 ms"); the HTML timeline counted from 0, so the
step the text named was the bar labelled one less. JSON carries the same 1-based numbers in
``location.steps`` (schema 1.3).
"""

from __future__ import annotations

import re

from nsys_rules.testing import TraceBuilder
from tests.conftest import run_cli, validate_report
from tests.rules.scenarios import sync_loop

SLOW = 9  # builder index of the slow step (0-based in the builder's loop)


def test_text_json_and_html_name_the_same_step(tmp_path):
    b = TraceBuilder()
    sync_loop(b, steps=24, slower={SLOW: 2_000_000})
    trace = b.write(tmp_path / "t.sqlite")
    page = tmp_path / "report.html"

    text = run_cli("check", "--format", "markdown", "--select", "step-outliers", "--fail-on", "never",
                   "--html", str(page), str(trace))
    assert text.returncode == 0, text.stderr
    shown = re.search(r"step (\d+) (\d+\.\d+) ms", text.stdout)
    assert shown, text.stdout
    number, ms = int(shown.group(1)), float(shown.group(2))

    data = validate_report(run_cli("check", "--format", "json", "--select", "step-outliers", "--fail-on", "never",
                                   str(trace)).stdout)
    [finding] = [f for f in data["findings"] if f["rule"] == "step-outliers"]
    assert finding["location"]["steps"] == [number]

    # The HTML bars: "step N: wall X" per step, numbered from 1; the slowest bar is the one the text named.
    html = page.read_text(encoding="utf-8")
    bars = [(int(n), wall) for n, wall in re.findall(r"<title>step (\d+): wall ([^,]+),", html)]
    assert [n for n, _ in bars] == list(range(1, len(bars) + 1))
    labels = dict(bars)
    assert labels[number] == f"{ms:.2f} ms"  # the slow step's bar, with the text's duration
    assert sum(wall == labels[number] for wall in labels.values()) == 1
    # And the number is where the builder put the slow step, counted from 1 among the steady steps.
    assert number == SLOW + 1 - (24 - len(bars))
