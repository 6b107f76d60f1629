"""The CLI end to end, through a subprocess."""

from __future__ import annotations

import json

from tests.conftest import EXAMPLE, run_cli, validate_report


def test_check_example_prints_ranked_table():
    proc = run_cli("check", str(EXAMPLE))
    assert proc.returncode in (0, 1), proc.stderr
    assert "rust_release_build.sqlite" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_check_json_validates_against_schema():
    proc = run_cli("check", "--format", "json", "--fail-on", "never", str(EXAMPLE))
    assert proc.returncode == 0, proc.stderr
    data = validate_report(proc.stdout)
    assert data["traces"][0]["nsys_version"] == "2025.3.2.0"
    assert data["summary"]["exit_code"] == 0
    assert {r["name"] for r in data["rules"]} >= {"graph-trace-hidden"}


def test_schema_command_prints_the_shipped_schema():
    proc = run_cli("schema")
    assert proc.returncode == 0
    schema = json.loads(proc.stdout)
    assert "findings" in schema["required"]


def test_fail_on_info_exits_1_with_findings(tmp_path):
    from nsys_rules.testing import TraceBuilder

    b = TraceBuilder(graph_trace_mode="Node")
    for i in range(3):
        b.graph_launch(1_000_000 * (i + 1), 100_000, traced_as_graph=False)
    path = b.write(tmp_path / "t.sqlite")
    proc = run_cli("check", "--select", "graph-trace-hidden", "--fail-on", "info", str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    proc = run_cli("check", "--select", "graph-trace-hidden", "--fail-on", "warning", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_unknown_flag_exits_2_with_one_line():
    proc = run_cli("check", "--no-such-flag", str(EXAMPLE))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1


def test_unknown_rule_suggests_the_closest():
    proc = run_cli("check", "--select", "graph-trace-hiden", str(EXAMPLE))
    assert proc.returncode == 2
    assert "graph-trace-hidden" in proc.stderr


def test_text_file_named_sqlite_exits_3(tmp_path):
    bad = tmp_path / "x.sqlite"
    bad.write_text("not a trace\n")
    proc = run_cli("check", str(bad))
    assert proc.returncode == 3
    assert proc.stderr.count("\n") == 1 and "not a SQLite file" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_file_and_empty_folder_exit_3(tmp_path):
    assert run_cli("check", str(tmp_path / "nope.sqlite")).returncode == 3
    assert run_cli("check", str(tmp_path)).returncode == 3


def test_rules_and_explain():
    proc = run_cli("rules")
    assert proc.returncode == 0 and "graph-trace-hidden" in proc.stdout
    proc = run_cli("explain", "graph-trace-hidden")
    assert proc.returncode == 0
    assert "## What it detects" in proc.stdout and "min_launches" in proc.stdout


def test_config_unknown_key_is_exit_2_with_suggestion(tmp_path):
    (tmp_path / "nsys-rules.toml").write_text('fail_on = "warning"\n')
    proc = run_cli("check", str(EXAMPLE), cwd=tmp_path)
    assert proc.returncode == 2
    assert "fail-on" in proc.stderr


def test_config_sets_rule_options_and_severity(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.nsys-rules]\nselect = ["graph-trace-hidden"]\n'
        '[tool.nsys-rules.rules.graph-trace-hidden]\nmin_launches = 5\n')
    proc = run_cli("check", "--format", "json", str(EXAMPLE), cwd=tmp_path)
    data = validate_report(proc.stdout)
    assert data["rules"][0]["options"]["min_launches"] == 5
    proc = run_cli("check", "--set", "graph-trace-hidden.min_launches=x", str(EXAMPLE), cwd=tmp_path)
    assert proc.returncode == 2 and "expects int" in proc.stderr


def test_nsys_rep_without_nsys_on_path_exits_3(tmp_path):
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00" * 64)
    proc = run_cli("check", str(rep), env={"PATH": str(tmp_path)})
    assert proc.returncode == 3
    assert "nsys export --type=sqlite" in proc.stderr and proc.stderr.count("\n") == 1


def test_nsys_rep_is_exported_into_a_temp_dir(tmp_path):
    """With `nsys` on PATH the report is exported elsewhere; nothing appears beside it."""
    import os
    import sys as _sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nsys"
    # A stand-in for `nsys export --type=sqlite ... -o OUT IN`: copies the example to OUT.
    fake.write_text(f"#!{_sys.executable}\nimport shutil, sys\nargs = sys.argv\n"
                    f"shutil.copy({str(EXAMPLE)!r}, args[args.index('-o') + 1])\n")
    fake.chmod(0o755)
    data = tmp_path / "data"
    data.mkdir()
    rep = data / "run.nsys-rep"
    rep.write_bytes(b"report")
    proc = run_cli("check", "--format", "json", "--fail-on", "never", str(rep),
                   env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stderr
    report = validate_report(proc.stdout)
    assert report["traces"][0]["path"] == str(rep)
    assert report["traces"][0]["tables"]["kernels"] == 3584
    assert sorted(p.name for p in data.iterdir()) == ["run.nsys-rep"]
