"""Output that fits where it goes: piped, every command and format keeps to the width (issue 42, item 2).

``check`` (one trace, and a folder of three), ``diff`` and ``stats`` at 60, 80, 120 and 200 columns
(``COLUMNS``, output not a terminal) and with ``COLUMNS`` unset (80 columns, as ruff, git and pytest lay
out a pipe). The one line allowed past the width is a suggested command, printed whole on a line of
its own so it can be copied: each such line must be exactly a command a finding suggests.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nsys_rules.cli import main
from nsys_rules.formatters.wrapping import commands_in, wrap_text
from tests.conftest import H200, need_shared, run_cli

WIDTHS = (60, 80, 120, 200)
#: Three small H200 traces for the folder run (a debug build, a release build, a graph capture).
FOLDER = ("rust_debug_build.sqlite", "rust_release_build.sqlite", "decode_graph_default.sqlite")


def _at(capsys: pytest.CaptureFixture[str], width: int, *args: object) -> str:
    """What ``nsys-rules ARGS`` prints at ``COLUMNS=width`` (in process: the output is captured, no terminal)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", str(width))
        assert main([str(a) for a in args]) in (0, 1)
    return capsys.readouterr().out


def _suggested(capsys: pytest.CaptureFixture[str], *paths: Path) -> set[str]:
    """Every command the findings of ``paths`` suggest, from the JSON report."""
    report = json.loads(_at(capsys, 200, "check", "--format", "json", "--fail-on", "never", *paths))
    return {c for f in report["findings"] for text in (f["message"], f["recommendation"]) for c in commands_in(text)}


def _too_wide(text: str, width: int, commands: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """The lines wider than ``width`` that are not one of ``commands`` whole."""
    return [line for line in text.splitlines() if len(line) > width and line.strip() not in commands]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_shared(H200)
    out = tmp_path_factory.mktemp("three")
    for name in FOLDER:
        shutil.copy(H200 / name, out / name)
    return out


def test_check_of_one_trace_fits_every_width_but_for_whole_commands(h200, capsys):
    trace = h200 / "decode_eager.sqlite"
    commands = _suggested(capsys, trace)
    assert any(len(c) > 60 for c in commands)  # a command longer than the narrowest width: the exception is used
    for fmt in ("table", "compact"):
        for width in WIDTHS:
            text = _at(capsys, width, "check", "--fail-on", "never", "--format", fmt, trace)
            assert not _too_wide(text, width, commands), (fmt, width)
            # Each command a finding suggests is printed whole, on its own line.
            lines = {line.strip() for line in text.splitlines()}
            assert commands <= lines, (fmt, width, commands - lines)


def test_a_folder_leads_with_the_ranked_findings_and_fits(folder, capsys):
    commands = _suggested(capsys, folder)
    for width in WIDTHS:
        text = _at(capsys, width, "check", "--fail-on", "never", folder)
        assert not _too_wide(text, width, commands), width
        # The ranked findings come before the first trace's budget.
        lines = text.splitlines()
        first = next(i for i, line in enumerate(lines) if line.startswith((" 1. ", "│ 1 ")))
        budget = next(i for i, line in enumerate(lines) if line.startswith("the median step by part:"))
        assert first < budget, width


def test_diff_and_stats_fit_every_width(h200, capsys):
    eager, graphs = h200 / "decode_eager.sqlite", h200 / "decode_graph_node.sqlite"
    for width in WIDTHS:
        diff = _at(capsys, width, "diff", eager, graphs, "--force")
        assert not _too_wide(diff, width), width
        assert "verdict: faster" in diff
        stats = _at(capsys, width, "stats", eager)
        assert not _too_wide(stats, width), width
        # Every kernel of the kernel summary is still there, whole, at any width.
        assert "nvjet_sm90_tst_128x8_64x12_4x1_v_bz_splitK_TNT" in stats
    wide = _at(capsys, 200, "stats", "-r", "cuda_gpu_kern_sum", eager)
    assert wide.splitlines()[0].split()[:3] == ["Time", "(%)", "Total"]  # nsys's one-line rows where they fit
    narrow = _at(capsys, 80, "stats", "-r", "cuda_gpu_kern_sum", eager)
    assert "    Time (%) " in narrow  # one block per row: its name, then "column value" pairs


def test_a_pipe_without_columns_gets_80(h200):
    """A real pipe, COLUMNS unset (the test session's own is removed in conftest): 80 columns, as ruff and git."""
    eager = h200 / "decode_eager.sqlite"
    check = run_cli("check", "--fail-on", "never", str(eager)).stdout
    assert "┌" not in check and " 1. warning  launch-bound" in check  # the compact layout
    assert max(len(line) for line in check.splitlines() if not line.startswith("        nsys")) <= 80
    diff = run_cli("diff", str(eager), str(h200 / "decode_graph_node.sqlite"), "--force").stdout
    assert max(map(len, diff.splitlines())) <= 80 and "verdict: faster" in diff


def test_a_command_is_never_broken_and_code_stays_whole():
    command = "nsys profile -c cudaProfilerApi --capture-range-end=stop -o run python3 llm.py --steps 24"
    text = f"Capture only the loop: `{command}` with `torch.cuda.profiler.start()` around the steps."
    lines = wrap_text(text, 40, "    ", "      ")
    assert "        " + command in lines  # its own line, whole, past the width
    assert all(len(line) <= 40 for line in lines if line.strip() != command)
    assert any("`torch.cuda.profiler.start()`" in line for line in lines)  # a code span is not split
    # A sentence's full stop after a command is not pasted with it; spacing inside a line is kept.
    assert wrap_text(f"run `{command}`.", 200)[-1].strip() == command
    assert wrap_text("NEW  /a/b.sqlite: 6 steps", 80) == ["NEW  /a/b.sqlite: 6 steps"]
