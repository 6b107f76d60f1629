"""Human output: fits the terminal, budget first, findings ranked with symptoms and minor ones folded."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsys_rules.settings import Settings
from nsys_rules.engine import run_check
from nsys_rules.records import TraceInfo
from nsys_rules.report import Report, TraceResult
from nsys_rules.findings import Finding, Location, Severity
from nsys_rules.formatters.compact import format_compact
from nsys_rules.formatters.markdown import format_markdown
from nsys_rules.formatters.table import format_table
from nsys_rules.formatters.wrapping import commands_in
from nsys_rules.inputs import open_trace
from nsys_rules.plugin_manager import build_registry
from nsys_rules.testing import TraceBuilder
from tests.conftest import run_cli
from tests.unit.test_overview import stepped_trace


def report_for(*paths: Path, verbose: bool = False) -> Report:
    registry = build_registry(autoload=False)
    report = run_check(list(paths), registry, Settings(), lambda p: open_trace(p))
    report.verbose = verbose
    return report


def widest(text: str, report: Report | None = None) -> int:
    """The widest line of ``text``; with ``report``, not counting a line that is one of its findings' commands
    whole (a suggested command is never wrapped: the one line allowed past the width)."""
    commands = set() if report is None else suggested_commands(report)
    return max(len(line) for line in text.splitlines() if line.strip() not in commands)


def suggested_commands(report: Report) -> set[str]:
    """Every command a finding of ``report`` suggests (its code spans that are shell commands)."""
    return {c for f in report.findings for text in (f.message, f.recommendation) for c in commands_in(text)}


def test_every_h200_trace_fits_80_and_100_columns_and_wide_terminals(h200):
    for path in sorted(h200.glob("*.sqlite")):
        report = report_for(path)
        for width in (80, 100, 119):
            text = format_table(report, width)
            assert widest(text, report) <= width, (path.name, width)
            assert "┌" not in text  # below 120 columns: the compact layout, not a table
        for width in (120, 160):
            text = format_table(report, width)
            assert widest(text, report) <= width, (path.name, width)
            if report.findings:
                assert "┌" in text


def test_columns_env_picks_the_layout_and_width(tmp_path):
    path = stepped_trace(tmp_path / "steps.sqlite")
    narrow = run_cli("check", "--fail-on", "never", str(path), env={"COLUMNS": "80"})
    assert narrow.returncode == 0, narrow.stderr
    assert widest(narrow.stdout) <= 80 and "┌" not in narrow.stdout
    assert " 1. warning  gpu-low-utilization\n    GPU 0 was under 50 % in use" in narrow.stdout
    wide = run_cli("check", "--fail-on", "never", str(path), env={"COLUMNS": "150"})
    assert widest(wide.stdout) <= 150 and "┌" in wide.stdout
    forced = run_cli("check", "--format", "compact", "--fail-on", "never", str(path), env={"COLUMNS": "150"})
    assert "┌" not in forced.stdout and widest(forced.stdout) <= 150


def test_budget_comes_first_with_the_median_step_by_part(tmp_path):
    # 6 steps of 195 us: GEMV 100 us, norm 10 us, 85 us idle while the host prepares the next launch.
    text = format_compact(report_for(stepped_trace(tmp_path / "steps.sqlite")), 100)
    lines = text.splitlines()
    assert "step time: 6 steps: p50 195 us, p90 195 us, max 195 us (1.1 ms in all)" in lines
    parts = {line[2:42].strip(): line[42:].split() for line in lines if line.startswith("  ") and " ms " in line}
    assert parts["GEMV kernels"][:4] == ["0.100", "ms", "51.3", "%"]
    assert parts["norm kernels"][:4] == ["0.010", "ms", "5.1", "%"]
    assert parts["idle: waiting for launches"][:4] == ["0.085", "ms", "43.6", "%"]
    # The launch wait split in two, the halves adding up to it.
    api = float(parts["in CUDA launch calls (launch API)"][0])
    host = float(parts["in host code outside CUDA calls"][0])
    assert api + host == pytest.approx(0.085, abs=0.0015) and host > api > 0
    assert text.index("step time:") < text.index("1. warning")


def _finding(rule: str, severity: Severity, savings: int | None, **extra) -> Finding:
    return Finding(rule, severity, rule, f"{rule} message", f"{rule} fix", location=Location(trace="t.sqlite"),
                   estimated_savings_ns=savings, **extra)


def _synthetic_report() -> Report:
    cause = _finding("launch-bound", Severity.WARNING, 60_000_000, savings_range=(40_000_000, 70_000_000),
                     budget_part="launch_wait")
    symptom = _finding("gpu-idle-gaps", Severity.WARNING, None, folded_into=cause.fingerprint,
                       savings_note="explained by launch-bound")
    error = _finding("debug-build", Severity.ERROR, None)
    withheld = _finding("sync-stall", Severity.INFO, None, minor=True, savings_note="withheld: debug-build says so")
    small = _finding("kernel-tail", Severity.WARNING, 10_000, minor=True)
    small2 = Finding("kernel-tail", Severity.INFO, "t", "m", "r", location=Location(trace="t.sqlite", kernel="k2"),
                     estimated_savings_ns=5_000, minor=True)
    info = _finding("gemv-dominance", Severity.INFO, None)
    bigger = _finding("sync-memcpy", Severity.WARNING, 80_000_000)
    result = TraceResult(_info(gpus=[{"name": "NVIDIA H200"}] * 8, tables={"kernels": 10}, budget_reason="no steps"),
                         findings=[info, small, symptom, withheld, cause, error, small2, bigger])
    return Report(rules=[], plugins=[], fail_on="error", results=[result])


def _info(**fields) -> TraceInfo:
    return TraceInfo(**{"path": "t.sqlite", "nsys_version": None, "export_schema_version": None, "gpus": [],
                        "capture": {}, "tables": {}, **fields})


def test_ranking_folds_symptoms_and_minor_findings():
    text = format_compact(_synthetic_report(), 100)
    heads = [line.split()[:3] for line in text.splitlines() if line[:4].strip().rstrip(".").isdigit()]
    # Errors first, then warnings by savings, then infos; minor and folded ones are not numbered.
    assert heads == [["1.", "error", "debug-build"], ["2.", "warning", "sync-memcpy"],
                     ["3.", "warning", "launch-bound"], ["4.", "info", "gemv-dominance"]]
    assert "saves 60 ms (40 ms-70 ms)" in text  # the range, since it differs from the point value
    block = text[text.index("3. warning"):text.index("4. info")]
    assert "also explains: gpu-idle-gaps (gpu-idle-gaps message)" in block
    assert "minor: 3 findings under the noise floor (kernel-tail x2, sync-stall)" in text
    assert "NVIDIA H200" in text and text.count("NVIDIA H200") == 1 and "8 x NVIDIA H200" in text


def test_markdown_folds_the_same_way_and_never_cuts_a_number():
    text = format_markdown(_synthetic_report())
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`" in line]
    assert [row.split("`")[1] for row in rows] == ["debug-build", "sync-memcpy", "launch-bound", "gemv-dominance"]
    assert "also explains: gpu-idle-gaps" in rows[2]
    assert "minor: 3 findings under the noise floor" in text
    from nsys_rules.formatters.markdown import cell

    assert cell("spent 123.456 ms waiting", 18) == "spent 123.456 ms…"
    assert cell("spent 123.456 ms waiting", 12) == "spent…"


def test_withheld_savings_say_why():
    f = _finding("queue-delay", Severity.INFO, None, savings_note="withheld: launch-blocking says so")
    report = Report(rules=[], plugins=[], fail_on="error",
                    results=[TraceResult(_info(tables={"kernels": 1}), findings=[f])])
    assert "savings: withheld: launch-blocking says so" in format_compact(report, 80)
    assert "savings: withheld: launch-blocking says so" in format_table(report, 160)


def test_skipped_rules_listed_only_with_verbose(tmp_path):
    path = stepped_trace(tmp_path / "steps.sqlite")
    quiet = run_cli("check", "--fail-on", "never", str(path), env={"COLUMNS": "100"})
    assert "skipped: 3 rule run(s) had nothing to judge (pageable-memcpy, sync-memcpy, sync-memset); -v says why" \
        in quiet.stdout
    assert "fix:" not in quiet.stdout
    loud = run_cli("check", "-v", "--fail-on", "never", str(path), env={"COLUMNS": "100"})
    assert "  pageable-memcpy: the trace has no CUPTI_ACTIVITY_KIND_MEMCPY table" in loud.stdout


def test_trace_without_cuda_says_so_in_one_line_and_exits_3(tmp_path):
    b = TraceBuilder()
    b.nvtx("step", 0, 1_000_000)  # NVTX only: the capture ran without --trace=cuda
    path = b.write(tmp_path / "nocuda.sqlite")
    for fmt in ("table", "json"):
        proc = run_cli("check", "--format", fmt, str(path))
        assert proc.returncode == 3 and proc.stdout == "", (fmt, proc.stdout, proc.stderr)
        assert proc.stderr.count("\n") == 1  # piped: one line for scripts
        assert proc.stderr.startswith("nsys-rules: nocuda.sqlite: no CUDA activity (no CUDA API call, kernel, copy or "
                                      "memset was recorded), so there is nothing to judge")
        # For a terminal of 80 columns the same words, wrapped, nothing past the edge.
        narrow = run_cli("check", "--format", fmt, str(path), env={"COLUMNS": "80"})
        lines = narrow.stderr.splitlines()
        assert narrow.returncode == 3 and len(lines) > 1 and max(map(len, lines)) <= 80
        assert " ".join(line.strip() for line in lines) == proc.stderr.strip()
    # With a CUDA trace beside it, the run judges that one (its own exit code); the other gets one line.
    cuda = stepped_trace(tmp_path / "steps.sqlite")
    both = run_cli("check", "--fail-on", "never", str(path), str(cuda), env={"COLUMNS": "100"})
    assert both.returncode == 0, both.stderr
    assert both.stdout.count("no CUDA activity: the trace holds no CUDA API call") == 1
    assert "skipped: " in both.stdout and "pageable-memcpy, sync-memcpy, sync-memset)" in both.stdout
