"""The config file a run read is never a secret: ``-v`` names it on stderr, the JSON report as ``tool.config``.

A ``nsys-rules.toml`` in a parent folder (a shared checkout, a home folder) is found from the working
folder upwards; one that sets ``fail-on = "never"`` once turned a failing check green with no trace of why.
"""

from __future__ import annotations

from tests.conftest import EXAMPLE, validate_report
from tests.fuzz.harness import run_cli_inprocess

E = str(EXAMPLE)


def _exit_without_the_file(tmp_path) -> int:
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    return run_cli_inprocess("check", "--no-plugins", "--format", "json", "--config", str(empty), E).code


def test_a_parent_folders_config_is_named_in_the_json_and_with_v(tmp_path, monkeypatch):
    config = tmp_path / "nsys-rules.toml"
    config.write_text('fail-on = "info"\n')  # the example's findings are info and warning: exit 1, not 0
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    run = run_cli_inprocess("check", "--no-plugins", "--format", "json", E)
    data = validate_report(run.stdout)
    assert data["schema_version"] == "1.5"
    assert data["tool"]["config"] == str(config)
    assert run.code == 1 and data["summary"]["exit_code"] == 1 and _exit_without_the_file(tmp_path) == 0
    loud = run_cli_inprocess("check", "--no-plugins", "--format", "json", "-v", E)
    assert loud.code == 1
    assert f"nsys-rules: config file: {config}\n" in loud.stderr
    assert loud.stdout == run.stdout


def test_a_pyproject_table_is_named_too(tmp_path, monkeypatch):
    project = tmp_path / "pyproject.toml"
    project.write_text('[project]\nname = "x"\n\n[tool.nsys-rules]\nfail-on = "warning"\n')
    monkeypatch.chdir(tmp_path)
    data = validate_report(run_cli_inprocess("check", "--no-plugins", "--format", "json", E).stdout)
    assert data["tool"]["config"] == str(project)


def test_no_config_is_null_and_v_says_none(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = run_cli_inprocess("check", "--no-plugins", "--format", "json", "-v", "--fail-on", "never", E)
    assert validate_report(run.stdout)["tool"]["config"] is None
    assert "nsys-rules: config file: none" in run.stderr


def test_an_explicit_config_is_named_as_given(tmp_path):
    config = tmp_path / "mine.toml"
    config.write_text("noise-floor = 1\n")
    data = validate_report(run_cli_inprocess("check", "--no-plugins", "--format", "json", "--fail-on", "never",
                                             "--config", str(config), E).stdout)
    assert data["tool"]["config"] == str(config)


def test_v_names_relative_path_entries_left_out_of_the_nsys_search(tmp_path, monkeypatch):
    import os

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", os.pathsep.join([".", os.environ.get("PATH", "/usr/bin")]))
    run = run_cli_inprocess("check", "--no-plugins", "--format", "json", "-v", "--fail-on", "never", E)
    assert run.code == 0
    assert "nsys-rules: PATH holds relative folder(s) '.': not searched for nsys" in run.stderr
    quiet = run_cli_inprocess("check", "--no-plugins", "--format", "json", "--fail-on", "never", E)
    assert quiet.stderr == ""
