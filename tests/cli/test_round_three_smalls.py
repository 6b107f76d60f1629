"""The round-three frictions issue 42 found still there (item 7), one test each.

A share option above 100 %, ``--github-summary`` outside GitHub Actions, side files written without a word,
``diff --format compact``, the 600-character line of ``profile --dry-run`` without nsys, folders searched only at
their top level without saying so, a compressed trace called "not a SQLite file" with no hint.
"""

from __future__ import annotations

import contextlib
import io
import lzma
import shutil
import sys
from pathlib import Path

import pytest

from nsys_rules import nsys_locate
from nsys_rules.cli import main
from tests.cli.fake_tools import tools
from tests.conftest import EXAMPLE


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("setting", ["launch-bound.max_busy_pct=500", "sync-stall.warn_share_pct=100.5",
                                     "kernel-tail.min_share_pct=101"])
def test_a_share_above_100_percent_is_a_usage_error(setting):
    code, _, err = _run("check", str(EXAMPLE), "--set", setting)
    assert code == 2
    assert f"--set: {setting.split('=')[0]} is a percent of a whole, from 0 to 100, not '{setting.split('=')[1]}'" in err


def test_100_percent_and_an_excess_above_it_are_taken():
    assert _run("check", str(EXAMPLE), "--select", "launch-bound", "--set", "launch-bound.max_busy_pct=100")[0] == 0
    # An excess over the median is no share: a step 2.5 times the median is 150 % over it.
    assert _run("check", str(EXAMPLE), "--select", "step-outliers", "--set", "step-outliers.min_excess_pct=150")[0] == 0


def test_github_summary_without_its_variable_says_so(monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    code, out, err = _run("check", str(EXAMPLE), "--github-summary", "--select", "sync-stall")
    assert code == 0 and "sync-stall" in out
    assert err == ("nsys-rules: --github-summary: $GITHUB_STEP_SUMMARY is not set (GitHub Actions sets it in a job), "
                   "so no summary was written\n")


def test_side_files_say_where_they_were_written(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    html, baseline = tmp_path / "report.html", tmp_path / "known.json"
    code, _, err = _run("check", str(EXAMPLE), "--html", str(html), "--write-baseline", str(baseline),
                        "--github-summary")
    assert code == 0 and html.is_file() and baseline.is_file() and summary.is_file()
    assert err.splitlines() == [f"nsys-rules: wrote the baseline (5 finding(s)) to {baseline}",
                                f"nsys-rules: wrote the HTML report to {html}",
                                f"nsys-rules: wrote the markdown summary (appended) to {summary} ($GITHUB_STEP_SUMMARY)"]


def test_diff_takes_compact():
    code, out, err = _run("diff", str(EXAMPLE), str(EXAMPLE), "--format", "compact")
    assert code == 0, err
    assert "time per step" in out and "verdict: inconclusive: time per step +0.0 %" in out


def test_dry_run_without_nsys_says_it_in_short_lines(tmp_path, monkeypatch, capsys):
    real = nsys_locate.STANDARD_PLACES
    tools(tmp_path, monkeypatch, with_nsys=False)
    monkeypatch.setattr(nsys_locate, "STANDARD_PLACES", tuple(str(tmp_path) + p for p in real))  # all ten, empty
    code = main(["profile", "--dry-run", "--", sys.executable, "bench.py"])
    out, err = capsys.readouterr()
    assert code == 3 and out.startswith("nsys profile ")
    assert f"stop: nsys not found (looked on PATH and in {tmp_path}/usr/local/cuda/bin," in err
    assert f"and {len(real) - 2} more places (`nsys-rules doctor` lists them))" in err
    assert "  fix: install Nsight Systems" in err and "export PATH=" in err
    assert max(len(line.replace(str(tmp_path), "")) for line in err.splitlines()) <= 200  # was one of 600


def test_a_folder_says_which_subfolders_it_did_not_search(tmp_path):
    runs = tmp_path / "runs"
    (runs / "rank1").mkdir(parents=True)
    shutil.copy(EXAMPLE, runs / "rank0.sqlite")
    shutil.copy(EXAMPLE, runs / "rank1" / "rank1.sqlite")
    code, _, err = _run("check", str(runs), "--format", "json")
    assert code == 0
    assert (f"nsys-rules: {runs}: only its top level is searched; 1 trace(s) in its subfolders rank1/ (1) are not "
            f"checked; name them to check them (e.g. `nsys-rules check {runs / 'rank1'}`)") in err
    (runs / "rank0.sqlite").unlink()
    code, _, err = _run("check", str(runs))
    assert code == 3
    assert "folder holds no traces" in err and "only its top level is searched, and 1 trace(s) in its subfolders" in err


def test_a_compressed_trace_says_how_to_decompress_it(tmp_path):
    packed = tmp_path / "run.sqlite.xz"
    packed.write_bytes(lzma.compress(EXAMPLE.read_bytes()[:65536]))
    code, _, err = _run("check", str(packed))
    assert code == 3
    assert err == (f"nsys-rules: {packed}: an xz-compressed file, not a SQLite file; decompress it first "
                   f"(`xz -dk {packed}`) and check what it gives\n")
    renamed = tmp_path / "run.sqlite"  # xz -dk refuses a name without .xz: the hint writes a new file instead
    packed.rename(renamed)
    code, _, err = _run("check", str(renamed))
    assert code == 3 and f"(`xz -dc {renamed} > run.sqlite.unpacked.sqlite`)" in err
    Path(renamed).write_bytes(b"\x1f\x8b\x08" + bytes(600))
    assert "a gzip-compressed file" in _run("check", str(renamed))[2]
