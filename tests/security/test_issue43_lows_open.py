"""Issue 43's low items of the command side: diff --max-memory, profile's output names and program word, the
config file found above the working folder, a newline in --command-file, fullwidth formula prefixes in CSV.
(Plugin process state and Report.exit_code: tests/security/test_plugin_containment.py.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nsys_rules.capture import default_name
from nsys_rules.cli import main
from nsys_rules.testing import TraceBuilder
from nsys_rules.textsafe import csv_cell
from tests.cli.fake_tools import FakeTools, tools
from tests.fuzz.harness import run_cli_inprocess

PY = sys.executable
PY_NAME = default_name([PY, "-c", "pass"])


@pytest.fixture
def fake(tmp_path, monkeypatch) -> FakeTools:
    return tools(tmp_path, monkeypatch)


def _steps(path: Path) -> Path:
    b = TraceBuilder()
    for i in range(20):
        b.nvtx("step", i * 100_000, i * 100_000 + 90_000, registered=False)
        b.kernel("gemv", i * 100_000 + 10_000, 20_000 + (i % 3) * 1_000)
    return b.write(path)


def test_diff_takes_max_memory(tmp_path):
    """README promised `diff --max-memory`; diff refused the flag (exit 2). Now it bounds each trace's read."""
    base, new = _steps(tmp_path / "a.sqlite"), _steps(tmp_path / "b.sqlite")
    b = TraceBuilder()
    for i in range(20):
        b.nvtx("step", i * 100_000, i * 100_000 + 90_000, registered=False)
        b.kernel("gemv", i * 100_000 + 10_000, 21_000 + (i % 5) * 1_000)
    new = b.write(tmp_path / "b.sqlite")
    ok = run_cli_inprocess("diff", str(base), str(new), "--max-memory", "2G")
    assert ok.code in (0, 1), ok.stderr
    tight = run_cli_inprocess("diff", str(base), str(new), "--max-memory", "1K")
    assert tight.code == 3 and tight.stdout == "" and tight.stderr.count("\n") == 1, tight.stderr
    bad = run_cli_inprocess("diff", str(base), str(new), "--max-memory", "lots")
    assert bad.code == 2


def test_profile_never_replaces_an_existing_report(fake, capsys):
    """profile -o NAME ran nsys with --force-overwrite over an existing NAME.sqlite; the default name did too."""
    Path("keep.sqlite").write_bytes(b"an earlier capture")
    rc = main(["profile", "-o", "keep", "--", PY, "-c", "pass"])
    err = capsys.readouterr().err
    assert rc == 2 and "keep.sqlite exists" in err and Path("keep.sqlite").read_bytes() == b"an earlier capture"
    assert not [c for c in fake.calls() if c[:1] == ["profile"]]  # nothing ran
    first = main(["profile", "--", PY, "-c", "pass"])
    second = main(["profile", "--", PY, "-c", "pass"])
    err = capsys.readouterr().err
    assert first == second == 0, err
    assert f"this capture is target/profiling/{PY_NAME}-2" in err
    outputs = [c[c.index("-o") + 1] for c in fake.calls() if c[:1] == ["profile"]]
    assert outputs == [f"target/profiling/{PY_NAME}", f"target/profiling/{PY_NAME}-2"]


def test_a_capture_that_writes_no_export_does_not_check_an_older_one(fake, capsys, monkeypatch):
    """The older report of the same name was checked as if this capture had written it."""
    assert main(["profile", "--", PY, "-c", "pass"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("FAKE_NSYS_NO_EXPORT", "nothing")
    rc = main(["profile", "--", PY, "-c", "pass"])
    err = capsys.readouterr().err
    assert rc == 3 and f"wrote no export (looked for target/profiling/{PY_NAME}-2.sqlite)" in err


def test_a_program_starting_with_a_dash_is_refused(fake, capsys):
    """`profile -- -o x` reached nsys as its own option (the 'program' was never run)."""
    rc = main(["profile", "--", "--output=elsewhere", "python", "x.py"])
    err = capsys.readouterr().err
    assert rc == 2 and "starts with '-'" in err and "--nsys-arg" in err
    assert not fake.calls()


def test_a_newline_in_the_command_file_name_prints_one_line(fake, capsys):
    name = "flags\nnsys-rules: all good.txt"
    rc = main(["profile", "--dry-run", "-o", "x", "--command-file", name, "--", PY, "x.py"])
    err = capsys.readouterr().err
    assert rc == 0 and Path(name).is_file()
    line = next(line for line in err.splitlines() if "the command file" in line)
    assert "command file flags\\x0ansys-rules: all good.txt (reuse" in line
    assert not any(line.startswith("nsys-rules: all good") for line in err.splitlines())


def test_a_config_file_above_the_working_folder_is_named(tmp_path, monkeypatch):
    """A parent folder's nsys-rules.toml set fail-on silently (only -v named it); now one stderr line says so."""
    trace = _steps(tmp_path / "t.sqlite")
    (tmp_path / "nsys-rules.toml").write_text('fail-on = "info"\n', encoding="utf-8")
    inner = tmp_path / "sub"
    inner.mkdir()
    monkeypatch.chdir(inner)
    run = run_cli_inprocess("check", "--no-plugins", "--format", "json", str(trace))
    assert f"config file: {tmp_path / 'nsys-rules.toml'} (found in a parent folder" in run.stderr
    monkeypatch.chdir(tmp_path)  # in the working folder itself: its own config, nothing to say
    run = run_cli_inprocess("check", "--no-plugins", "--format", "json", str(trace))
    assert "config file" not in run.stderr


@pytest.mark.parametrize("cell", ["＝SUM(A1)", "＋1", "－1", "＠cmd", "=1", "+1", "-1", "@x"])
def test_csv_formula_prefixes_fullwidth_too(cell):
    assert csv_cell(cell) == "'" + cell
    assert csv_cell("plain") == "plain"


def test_a_rule_changing_the_folder_in_a_dask_worker_thread_is_put_back(tmp_path, monkeypatch):
    """--dask local runs rules in a worker thread, where the rule boundary leaves process state alone: a rule's
    os.chdir sent the worker's next trace (a relative path) elsewhere. The task puts the folder back."""
    import os
    import threading
    from dataclasses import dataclass

    from nsys_rules import parallel
    from nsys_rules.hooks import hookimpl
    from nsys_rules.plugin_manager import build_registry
    from nsys_rules.rule import Rule
    from nsys_rules.settings import Settings

    @dataclass(frozen=True)
    class WandererOptions:
        """No options."""

    class Wanderer(Rule):
        """Changes the working folder."""

        name = "wanderer"
        title = "changes the working folder"
        requires = ("kernels",)
        Options = WandererOptions

        def check(self, ctx):  # type: ignore[no-untyped-def]
            os.chdir("/")
            yield ctx.finding("moved", "nothing")

    class Plugin:
        @staticmethod
        @hookimpl
        def register_rules():  # type: ignore[no-untyped-def]
            return [Wanderer]

    monkeypatch.setattr(parallel, "_REGISTRIES", {True: build_registry(autoload=False, extra=(("wander", Plugin),))})
    _steps(tmp_path / "a.sqlite")
    _steps(tmp_path / "b.sqlite")
    monkeypatch.chdir(tmp_path)
    results = []
    worker = threading.Thread(target=lambda: results.extend(
        parallel.analyze_job(parallel.Job(name, Settings())) for name in ("a.sqlite", "b.sqlite")))
    worker.start()
    worker.join(120)
    assert [r.error for r in results] == [None, None]  # the second relative path still opened
    assert Path.cwd() == tmp_path
    assert all("wanderer" in {f.rule for f in r.result.findings} for r in results)
