"""The Python API (issue 42, item 5): ``nsys_rules.check(path, **options)`` and what it returns.

Real numbers from the committed example (examples/rust_release_build.sqlite): the same findings, budget and
step time as ``check --format json``, DataFrames of findings and budget parts, the HTML report for Jupyter.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys

import pytest

import nsys_rules
from nsys_rules.errors import InputError, UsageError
from nsys_rules.findings import Finding, Severity
from tests.conftest import EXAMPLE, ROOT


@pytest.fixture(scope="module")
def report() -> nsys_rules.CheckReport:
    return nsys_rules.check(EXAMPLE)


@pytest.fixture(scope="module")
def cli_json() -> dict:
    out = subprocess.run([sys.executable, "-m", "nsys_rules", "check", str(EXAMPLE), "--format", "json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_report_is_typed_objects_with_the_example_numbers(report):
    assert isinstance(report, nsys_rules.CheckReport) and report.exit_code == 0
    assert [f.rule for f in report.findings] == ["sync-stall", "capture-scope", "gemv-dominance", "kernel-tail",
                                                 "queue-delay"]
    assert all(isinstance(f, Finding) for f in report.findings)
    assert report.findings[0].severity is Severity.WARNING
    (trace,) = report.traces
    assert trace.path.endswith("rust_release_build.sqlite") and trace.gpus == ("NVIDIA H200",)
    budget = trace.budget
    assert budget is report.budget and isinstance(budget, nsys_rules.StepBudget)
    assert (budget.steps, budget.total_ns, budget.typical_step_ns) == (64, 120584069, 1883662)
    assert budget.busy_ns + budget.idle_ns == budget.total_ns  # the parts add up to the steady time
    after_sync = budget.part("after_sync")
    assert isinstance(after_sync, nsys_rules.BudgetPart)
    assert (after_sync.total_ns, after_sync.owner) == (1042296, "sync-stall")
    assert after_sync.owner_fingerprint == report.findings[0].fingerprint
    assert budget.mean_step_ns == pytest.approx(sum(p.per_step_ns for p in budget.parts))
    assert budget.mean_step_ns != budget.typical_step_ns  # labelled apart: the mean is no typical step


def test_the_api_says_what_the_command_says(report, cli_json):
    assert [f.to_json() for f in report.findings] == cli_json["findings"]
    assert report.traces[0].budget.raw == cli_json["traces"][0]["budget"]
    assert report.traces[0].budget.typical_step_ns == cli_json["traces"][0]["budget"]["step_ns"]["p50"]
    assert report.report.summary() == cli_json["summary"]


def test_findings_frame(report):
    frame = report.to_frame()
    assert list(frame.index) == [1, 2, 3, 4, 5] and frame.index.name == "rank"
    first = frame.loc[1]
    assert (first["rule"], first["severity"], first["budget_part"]) == ("sync-stall", "warning", "after_sync")
    assert first["savings_ns"] == report.findings[0].estimated_savings_ns
    assert first["metrics"]["blocking_calls"] == 64 and first["api"] == "cudaDeviceSynchronize"
    assert str(frame["savings_ns"].dtype) == "Int64"  # a finding without a saving is <NA>, not a float NaN


def test_budget_and_metrics_frames(report):
    parts = report.to_frame("budget")
    assert list(parts["part"])[:3] == ["gemv", "norm", "elementwise"]
    assert parts["total_ns"].sum() == 120584069
    assert parts["share_pct"].sum() == pytest.approx(100, abs=0.05)
    row = parts.set_index("part").loc["after_sync"]
    assert (row["total_ns"], row["owner"]) == (1042296, "sync-stall")
    assert report.budget.to_frame().equals(parts)  # one trace: its budget's frame is the report's
    metrics = report.to_frame("metrics")
    sync = metrics[(metrics["rank"] == 1) & (metrics["metric"] == "blocked_time")]
    assert (int(sync["value"].iloc[0]), sync["unit"].iloc[0]) == (98930206, "ns")
    with pytest.raises(ValueError, match="choose 'findings', 'budget' or 'metrics'"):
        report.to_frame("steps")


def test_jupyter_shows_the_html_report_in_a_frame(report):
    shown = report._repr_html_()
    assert shown.startswith('<iframe srcdoc="') and shown.endswith("</iframe>")
    page = html.unescape(shown.split('srcdoc="', 1)[1].split('" title=', 1)[0])
    assert page == report.text("html") and "nsys-rules report" in page
    assert "GPU time by kernel class" in page  # the profile was computed (profile=True by default)
    assert "<style" not in shown.split("srcdoc=", 1)[0]  # the page's style stays inside the frame


def test_text_formats_and_repr(report):
    assert json.loads(report.text("json"))["findings"][0]["rule"] == "sync-stall"
    assert "sync-stall" in report.text("compact")
    assert repr(report) == "<CheckReport: 1 trace, 5 findings (0 error, 1 warning, 4 info), exit code 0>"
    with pytest.raises(ValueError, match="unknown format 'pdf'"):
        report.text("pdf")


def test_options_are_the_commands_flags():
    only = nsys_rules.check(str(EXAMPLE), select="sync-stall,kernel-tail", fail_on="warning", profile=False)
    assert sorted(f.rule for f in only.findings) == ["kernel-tail", "sync-stall"] and only.exit_code == 1
    quiet = nsys_rules.check(EXAMPLE, select=["sync-stall"], profile=False,
                             options={"sync-stall": {"min_calls": 65}})
    assert [f.rule for f in quiet.findings] == []


@pytest.mark.parametrize("kwargs, message", [
    ({"select": ["no-such-rule"]}, "unknown rule 'no-such-rule'"),
    ({"options": {"sync-stall": {"no_such_option": 1}}}, "rule sync-stall has no option 'no_such_option'"),
    ({"options": {"kernel-tail": {"warn_share_pct": "lots"}}}, "kernel-tail.warn_share_pct expects float"),
    ({"fail_on": "sometimes"}, "choose from info, warning, error, never"),
])
def test_bad_options_are_usage_errors(kwargs, message):
    with pytest.raises(UsageError, match=message):
        nsys_rules.check(EXAMPLE, profile=False, **kwargs)


def test_an_unreadable_input_is_an_input_error(tmp_path):
    bad = tmp_path / "notes.sqlite"
    bad.write_text("not a database")
    with pytest.raises(InputError, match="not a SQLite file"):
        nsys_rules.check(bad)


def test_import_stays_cheap_and_the_docstring_names_what_exists():
    code = ("import sys, nsys_rules; heavy = [m for m in ('pandas', 'numpy', 'nsys_rules.notebook') if m in sys.modules];"
            " print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stderr
    import nsys_rules.api
    import nsys_rules.testing

    doc = nsys_rules.__doc__ or ""
    for name in ("TraceBuilder", "run_rule", "run_rules"):
        assert name in doc and name in nsys_rules.testing.__all__
    for name in ("Rule", "RuleContext", "Finding", "Severity", "hookimpl"):
        assert name in doc and name in nsys_rules.api.__all__
    assert "check" in dir(nsys_rules) and callable(nsys_rules.check)
    with pytest.raises(AttributeError):
        nsys_rules.no_such_name  # noqa: B018 - the lazy lookup refuses unknown names
