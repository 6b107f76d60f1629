"""Issue 43 item 3: output a CI log cannot execute, JSON a strict parser accepts, every file name.

The traces here name their kernels, ranges and command with GitHub Actions workflow commands; every text
output (table, compact, markdown at several widths, diff's rows, the job summary, the error lines) must
show them without a line a runner would execute, and every JSON output must parse strictly.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from nsys_rules.testing import TraceBuilder
from nsys_rules.textsafe import ci_log_safe, json_safe, output_safe
from tests.fuzz.harness import check_run, run_cli_inprocess
from tests.security.ci_safety import (EVIL_COMMAND, EVIL_KERNEL, EVIL_NEWLINE, EVIL_RANGE, command_lines,
                                      strict_loads)

STEP = 1_000_000


def _hostile(path: Path, slow: int = 20_000) -> Path:
    b = TraceBuilder(command=list(EVIL_COMMAND))
    for i in range(30):
        b.nvtx(EVIL_RANGE, i * STEP, i * STEP + 900_000, registered=False)
        b.kernel(EVIL_KERNEL, i * STEP + 10_000, slow)
        b.kernel(EVIL_NEWLINE, i * STEP + 600_000, 5_000)
        b.memcpy(i * STEP + 700_000, 50_000, 1 << 20, kind="HtoD", src="pageable")
        b.sync(i * STEP + 40_000, 500_000)
    return b.write(path)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("ci")
    bad = Path(os.fsdecode(bytes(folder) + b"/odd\xffname.sqlite"))
    return {"base": _hostile(folder / "base.sqlite"), "new": _hostile(folder / "new.sqlite", slow=60_000),
            "bad": _hostile(bad)}


def test_the_neutraliser_itself():
    """Every line start a runner trims to, and the legacy form anywhere; JSON keeps its exact strings."""
    text = "a\n  ::error::x\n\u2028::y ##[add-mask]z\n\t\u200b::w\n::"
    assert command_lines(ci_log_safe(text)) == []
    assert ci_log_safe("no colons here") == "no colons here"
    assert strict_loads(output_safe('{"k": "##[add-mask]x"}', "json")) == {"k": "##[add-mask]x"}
    assert json_safe({"a\udcff": [float("nan"), float("inf"), "b\ud800"]}) == {"a\\xff": [None, None, "b\\ud800"]}


@pytest.mark.parametrize("fmt", ["table", "compact", "markdown"])
@pytest.mark.parametrize("width", ["40", "60", "100", "200"])
def test_check_text_formats_run_no_command(traces, fmt, width, monkeypatch):
    """Before: at 40-60 columns the kernel table put `::error ...` and `::add-mask::` first on a line; at 100+
    the cross-trace summary did; markdown carried `##[add-mask]` in a cell."""
    monkeypatch.setenv("COLUMNS", width)
    run = run_cli_inprocess("check", "--no-plugins", "-v", "--format", fmt, str(traces["base"]), str(traces["new"]))
    check_run(run, json_output=False)
    assert "pwned" in run.stdout and "add-mask" in run.stdout  # the names are shown...
    assert command_lines(run.stdout) == [] and command_lines(run.stderr) == []  # ...never run


@pytest.mark.parametrize("fmt", ["table", "markdown", "json"])
def test_diff_movers_run_no_command(traces, fmt, monkeypatch):
    """Before: diff's "biggest movers" rows started with the kernel name (`::error title=pwned...`)."""
    monkeypatch.setenv("COLUMNS", "50")
    run = run_cli_inprocess("diff", str(traces["base"]), str(traces["new"]), "--format", fmt)
    assert run.code in (0, 1), run.stderr  # the steps keep their length: the kernels moved, not the step
    assert "pwned" in run.stdout and command_lines(run.stdout) == [] and command_lines(run.stderr) == []
    if fmt == "json":
        data = strict_loads(run.stdout)
        assert EVIL_KERNEL in {row["name"] for row in data["movers"]}  # JSON keeps the exact name


def test_diff_json_has_no_infinity(traces, monkeypatch):
    """BASE's steps ran no GPU work (busy 0 per step): gpu_time_change_pct was the bare token `Infinity`, not JSON.
    The change from zero is forced here (a step model needs GPU work in its steps); the JSON says null."""
    from nsys_rules.diff.result import DiffResult, _pct

    assert _pct(0.0, 5.0) == float("inf")  # what a BASE without GPU work per step gives
    monkeypatch.setattr(DiffResult, "gpu_change_pct", property(lambda self: _pct(0.0, 5.0)))
    run = run_cli_inprocess("diff", str(traces["base"]), str(traces["new"]), "--format", "json")
    assert run.code in (0, 1), run.stderr
    assert "Infinity" not in run.stdout and "NaN" not in run.stdout
    data = strict_loads(run.stdout)
    assert data["gpu_time_change_pct"] is None and isinstance(data["step_time_change_pct"], float)
    import jsonschema

    from nsys_rules.diff import diff_schema

    jsonschema.validate(data, diff_schema())


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_non_utf8_file_name_json_and_sarif(traces, fmt):
    """Before: --format sarif ended in exit 4 and no SARIF (UnicodeEncodeError); JSON held `\\udcff`."""
    bad = traces["bad"]
    run = run_cli_inprocess("check", "--no-plugins", "--format", fmt, str(bad))
    assert run.code == 0, run.stderr
    data = strict_loads(run.stdout)
    if fmt == "json":
        check_run(run)
        entry = data["traces"][0]
        assert entry["path"].endswith("odd\\xffname.sqlite")
        assert base64.b64decode(entry["path_bytes"]) == os.fsencode(bad)  # the exact name, byte for byte
    else:
        uris = [a["location"]["uri"] for a in data["runs"][0]["artifacts"]]
        assert uris == [bad.as_uri()] and uris[0].endswith("odd%FFname.sqlite")


def test_utf8_file_name_has_no_path_bytes(traces):
    entry = strict_loads(run_cli_inprocess("check", "--no-plugins", "--format", "json", str(traces["base"])).stdout)
    assert "path_bytes" not in entry["traces"][0]


def test_non_utf8_file_name_github_summary(traces, tmp_path, monkeypatch):
    """Before: --github-summary ended in an internal error (exit 4) for such a name; now the section is written
    with the byte shown as \\xff, and its workflow commands neutralised."""
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run = run_cli_inprocess("check", "--no-plugins", "--github-summary", "--format", "json", str(traces["bad"]))
    check_run(run)
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("earlier step\n") and "odd\\xffname.sqlite" in text
    assert "pwned" in text and command_lines(text) == []


def test_stats_outputs(traces):
    """stats: csv and table run no command; json is strict and keeps the exact name."""
    for fmt in ("csv", "table"):
        run = run_cli_inprocess("stats", "-r", "cuda_gpu_kern_sum", "--format", fmt, str(traces["base"]))
        assert run.code == 0 and "pwned" in run.stdout and command_lines(run.stdout) == [], run.stdout
    run = run_cli_inprocess("stats", "-r", "cuda_gpu_kern_sum", "--format", "json", str(traces["base"]))
    assert EVIL_KERNEL in {row["Name"] for row in strict_loads(run.stdout)}


def test_error_lines_run_no_command(tmp_path):
    """An unreadable input named like a command: its one error line on stderr runs nothing."""
    path = tmp_path / "##[add-mask]x.sqlite"
    path.write_bytes(b"not sqlite")
    run = run_cli_inprocess("check", "--no-plugins", str(path))
    assert run.code == 3 and "add-mask" in run.stderr and command_lines(run.stderr) == []
