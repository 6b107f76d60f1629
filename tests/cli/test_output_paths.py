"""No output option can write over an input or an nsys export; outputs are written whole or not at all."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.conftest import EXAMPLE
from tests.fuzz.harness import check_run, digest, folder_listing, run_cli_inprocess


@pytest.fixture
def ranks(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    for name in ("rank0.sqlite", "rank1.sqlite"):
        shutil.copyfile(EXAMPLE, folder / name)
    return folder / "rank0.sqlite", folder / "rank1.sqlite"


def _check(*args: str, env: dict[str, str] | None = None, monkeypatch=None):
    if env and monkeypatch:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
    return run_cli_inprocess("check", "--no-plugins", "--fail-on", "never", "--select", "graph-trace-hidden", *args)


def _refused(run, needle: str) -> None:
    assert run.code == 2, (run.code, run.stderr)
    assert run.stdout == "" and run.stderr.count("\n") == 1 and needle in run.stderr, run.stderr


@pytest.mark.parametrize("flag", ["--html", "--write-baseline"])
def test_output_flag_naming_an_input_is_refused(ranks, flag):
    """`check --html rank0.sqlite rank1.sqlite`: the shell glob put a trace where the output path goes."""
    before = digest(ranks[0])
    _refused(_check(flag, str(ranks[0]), str(ranks[1])), "is a SQLite database")  # rank0 became the output path
    _refused(_check(str(ranks[0]), flag, str(ranks[0])), "is an input")
    assert digest(ranks[0]) == before


def test_github_summary_naming_an_input_is_refused(ranks, monkeypatch):
    before = digest(ranks[0])
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(ranks[0]))
    _refused(_check("--github-summary", str(ranks[0])), "is an input")
    assert digest(ranks[0]) == before


def test_input_reached_through_a_symlink_or_hard_link_is_refused(ranks, tmp_path):
    (tmp_path / "link.html").symlink_to(ranks[0])
    os.link(ranks[1], tmp_path / "hard.html")
    _refused(_check("--html", str(tmp_path / "link.html"), str(ranks[0])), "is an input")
    _refused(_check("--html", str(tmp_path / "hard.html"), str(ranks[1])), "is an input")
    (tmp_path / "dangling.html").symlink_to(tmp_path / "nowhere" / "x")  # not an input: written as a new file
    assert _check("--html", str(tmp_path / "dangling.html"), str(ranks[0])).code in (0, 2)


def test_input_given_as_a_folder_is_protected(ranks):
    _refused(_check("--html", str(ranks[1]), str(ranks[0].parent)), "is an input")


def test_other_nsys_exports_are_refused(ranks, tmp_path):
    report = tmp_path / "old.nsys-rep"
    report.write_bytes(b"\x00nsys report")
    _refused(_check("--html", str(report), str(ranks[0])), "nsys report")
    _refused(_check("--write-baseline", str(ranks[1]), str(ranks[0])), "SQLite database")  # not an input here
    export = tmp_path / "cap.parquetdir"
    export.mkdir()
    (export / "StringIds.parquet").write_bytes(b"PAR1")
    _refused(_check("--html", str(export), str(ranks[0])), "is a folder (an nsys export)")
    _refused(_check("--html", str(export / "report.html"), str(ranks[0])), "inside an nsys export folder")
    plain = tmp_path / "renamed"
    plain.mkdir()
    (plain / "StringIds.arrow").write_bytes(b"ARROW1")
    _refused(_check("--write-baseline", str(plain / "b.json"), str(ranks[0])), "inside an nsys export folder")


def test_config_and_baseline_files_are_inputs_too(ranks, tmp_path):
    config = tmp_path / "nsys-rules.toml"
    config.write_text('fail-on = "never"\n')
    _refused(_check("--config", str(config), "--html", str(config), str(ranks[0])), "is an input")
    baseline = tmp_path / "known.json"
    assert _check("--write-baseline", str(baseline), str(ranks[0])).code == 0
    _refused(_check("--baseline", str(baseline), "--html", str(baseline), str(ranks[0])), "is an input")


def test_write_baseline_may_update_the_baseline_it_reads(ranks, tmp_path):
    baseline = tmp_path / "known.json"
    assert _check("--write-baseline", str(baseline), str(ranks[0])).code == 0
    run = _check("--baseline", str(baseline), "--write-baseline", str(baseline), "--format", "json", str(ranks[0]))
    assert run.code == 0, run.stderr
    assert '"nsys-rules-baseline"' in baseline.read_text()


def test_two_outputs_on_one_path_are_refused(ranks, tmp_path):
    _refused(_check("--html", str(tmp_path / "x"), "--write-baseline", str(tmp_path / "x"), str(ranks[0])),
             "is also the --html output")


def test_fifo_as_output_is_refused_without_blocking(ranks, tmp_path, monkeypatch):
    fifo = tmp_path / "summary"
    os.mkfifo(fifo)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(fifo))
    _refused(_check("--github-summary", str(ranks[0])), "not a regular file")


def test_outputs_replace_a_plain_file_whole_and_leave_no_temporary_file(ranks, tmp_path, monkeypatch):
    html = tmp_path / "out" / "report.html"
    html.parent.mkdir()
    html.write_text("old report")
    os.chmod(html, 0o640)
    summary = tmp_path / "out" / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run = _check("--html", str(html), "--write-baseline", str(tmp_path / "out" / "b.json"), "--github-summary",
                 str(ranks[0]))
    assert run.code == 0, run.stderr
    assert html.read_text().startswith("<!DOCTYPE html>") and oct(html.stat().st_mode & 0o777) == "0o640"
    assert summary.read_text().startswith("earlier step\n## nsys-rules:")
    assert folder_listing(html.parent) == ["b.json", "report.html", "summary.md"]


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_failed_write_keeps_the_old_file_and_removes_the_temporary_one(tmp_path, monkeypatch, failure):
    from nsys_rules import outpaths
    from nsys_rules.errors import UsageError

    target = tmp_path / "report.html"
    target.write_text("old")

    def broken_replace(src, dst):
        raise failure

    monkeypatch.setattr(outpaths.os, "replace", broken_replace)
    with pytest.raises(UsageError if isinstance(failure, OSError) else KeyboardInterrupt):
        outpaths.write_atomic(target, "new", "HTML report")
    assert target.read_text() == "old" and folder_listing(tmp_path) == ["report.html"]


def test_explain_output_never_replaces_a_file(tmp_path):
    trace = tmp_path / "t.sqlite"
    shutil.copyfile(EXAMPLE, trace)
    run = run_cli_inprocess("explain", "--all", "--no-plugins", "--output", str(trace))
    _refused(run, "SQLite database")
    assert digest(trace) == digest(EXAMPLE)
    good = run_cli_inprocess("explain", "--all", "--no-plugins", "--output", str(tmp_path / "pages"))
    assert good.code == 0 and "index.md" in folder_listing(tmp_path / "pages")
    assert not [n for n in folder_listing(tmp_path / "pages") if n.endswith(".tmp")]


def test_a_report_still_prints_when_the_outputs_are_fine(ranks, tmp_path):
    data = check_run(_check("--format", "json", "--html", str(tmp_path / "r.html"), str(ranks[0])))
    assert data is not None and data["summary"]["exit_code"] == 0
