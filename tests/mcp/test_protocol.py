"""``nsys-rules mcp`` through the protocol: the tool list, each tool's result against its schema, the resources.

One server for the module, confined with ``--root`` to a folder holding the committed example trace
(``examples/rust_release_build.sqlite``: a Rust decode loop whose host syncs every step), so these
tests need no ``../shared``.
"""

from __future__ import annotations

import json
import shutil

import jsonschema
import pytest

from nsys_rules.testing import TraceBuilder
from tests.conftest import EXAMPLE, ROOT, run_cli
from tests.mcp.conftest import mcp_server

TOOLS = {"check", "explain", "finding", "diff", "verify", "stats", "profile"}
TRACE = "traces/rust.sqlite"
NO_STEPS = "traces/kernels_only.sqlite"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mcp-root")
    (folder / "traces").mkdir()
    shutil.copyfile(EXAMPLE, folder / TRACE)
    b = TraceBuilder()
    for i in range(5):
        b.kernel("k", start=i * 1_000_000, duration=100_000)  # kernels and nothing else: no loop, no steps
    b.write(folder / NO_STEPS)
    return folder


@pytest.fixture(scope="module")
def server(root):
    with mcp_server("--root", str(root), cwd=root) as s:
        yield s


def test_the_tools_are_listed_with_object_schemas_in_and_out(server):
    assert set(server.tools) == TOOLS
    for tool in server.tools.values():
        assert tool.input_schema["type"] == "object" and tool.output_schema["type"] == "object"
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        assert tool.description
    assert server.tools["check"].annotations.read_only_hint is True
    assert server.tools["profile"].annotations.read_only_hint is False


def test_check_pages_the_report_with_a_summary_first(server):
    first = server.call("check", {"trace": TRACE, "limit": 2})
    assert list(first)[0] == "summary"
    report = first["report"]
    assert first["page"] == {"offset": 0, "limit": 2, "returned": 2, "total": 5, "next_offset": 2}
    assert report["summary"]["findings"] == 5 and len(report["findings"]) == 2
    assert report["findings"][0]["rule"] == "sync-stall" and report["findings"][0]["estimated_savings_ns"] == 810834
    assert "fix first: sync-stall (warning, ec9d8a4ee083b242): saves ~811 us" in first["summary"]
    assert "findings 1-2 of 5" in first["summary"]
    rest = server.call("check", {"trace": TRACE, "offset": 2, "limit": 50})
    assert rest["page"]["returned"] == 3 and rest["page"]["next_offset"] is None
    fingerprints = [f["fingerprint"] for f in report["findings"] + rest["report"]["findings"]]
    assert len(set(fingerprints)) == 5


def test_check_is_the_cli_report(server, root):
    proc = run_cli("check", "--format", "json", str(root / TRACE), cwd=root)
    assert proc.returncode == 0, proc.stderr
    cli = json.loads(proc.stdout)
    got = server.call("check", {"trace": TRACE, "limit": 50})["report"]
    assert got["findings"] == cli["findings"]
    assert got["traces"] == cli["traces"] and got["summary"] == cli["summary"]


def test_check_with_rules_runs_only_those(server):
    got = server.call("check", {"trace": TRACE, "rules": ["kernel-tail"]})
    assert [f["rule"] for f in got["report"]["findings"]] == ["kernel-tail"]
    assert [r["name"] for r in got["report"]["rules"]] == ["kernel-tail"]


def test_finding_gives_evidence_windows_and_the_recapture_command(server):
    got = server.call("finding", {"trace": TRACE, "fingerprint": "e592b5c8a3ba2735"})
    assert got["finding"]["rule"] == "kernel-tail"
    assert got["windows"][0]["what"] == "the finding"
    start, end = got["windows"][0]["start_ns"], got["windows"][0]["end_ns"]
    assert start == 489460696 and end > start and got["windows"][0]["filter_time"] == f"{start}ns/{end}ns"
    assert got["recapture"].startswith("nsys profile ") and "--export=sqlite" in got["recapture"]
    stall = server.call("finding", {"trace": TRACE, "fingerprint": "ec9d8a4ee083b242"})
    assert stall["steps"] and stall["savings_per_step_ns"] == pytest.approx(810834 / stall["steps"], abs=0.1)


def test_a_fingerprint_not_in_the_trace_is_a_usage_error_naming_those_there(server):
    error = server.error("finding", {"trace": TRACE, "fingerprint": "0123456789abcdef"})
    assert error.code == -32602 and error.data["exit_code"] == 2
    assert "sync-stall ec9d8a4ee083b242" in error.message


def test_explain_is_the_rule_page(server):
    got = server.call("explain", {"rule": "sync-stall"})
    assert got["rule"] == "sync-stall" and got["markdown"].startswith("# sync-stall:")
    assert "## What it detects" in got["markdown"] or "What it detects" in got["markdown"]


def test_stats_pages_the_nsys_rows(server):
    got = server.call("stats", {"trace": TRACE, "report": "cuda_api_sum", "limit": 3})
    assert got["columns"][0] == "Time (%)" and got["columns"][-1] == "Name"
    assert got["page"]["returned"] == 3 and got["page"]["total"] > 3
    times = [row["Total Time (ns)"] for row in got["rows"]]
    assert times == sorted(times, reverse=True)
    assert server.error("stats", {"trace": TRACE, "report": "no_such_sum"}).data["exit_code"] == 2


def test_profile_is_a_dry_run_and_running_is_refused_without_the_flag(server):
    got = server.call("profile", {"command": ["python3", "bench.py", "--steps", "8"]})
    assert got["ran"] is False and got["command"][-4:] == ["python3", "bench.py", "--steps", "8"]
    assert "--export=sqlite" in got["command"] and got["shell"].endswith("python3 bench.py --steps 8")
    error = server.error("profile", {"command": ["python3", "bench.py"], "dry_run": False})
    assert error.data["exit_code"] == 2 and "--allow-profile" in error.message


def test_resources_hold_the_schemas_and_the_rule_pages(server):
    report = json.loads(server.read("nsys-rules://schema/report.json"))
    assert report == json.loads(run_cli("schema").stdout)
    assert json.loads(server.read("nsys-rules://schema/diff.json"))["title"].startswith("nsys-rules diff")
    index = server.read("nsys-rules://rules/index.md")
    assert "[sync-stall](nsys-rules://rules/sync-stall.md)" in index
    assert server.read("nsys-rules://rules/kernel-tail.md").startswith("# kernel-tail:")
    listed = server.portal.call(server.client.list_resources)
    assert {"nsys-rules://schema/report.json", "nsys-rules://rules/sync-stall.md"} <= {str(r.uri) for r in listed.resources}


def test_arguments_against_the_input_schema_are_usage_errors(server):
    for name, arguments in [("check", {}), ("check", {"trace": TRACE, "limit": 500}), ("check", {"trace": 5}),
                            ("diff", {"before": [], "after": [TRACE]}), ("nope", {})]:
        error = server.error(name, arguments)
        assert error.code == -32602 and error.data["exit_code"] == 2, (name, error.message)
    assert server.call("explain", {"rule": "kernel-tail"})["rule"] == "kernel-tail"  # still serving


def test_verify_without_steps_on_a_side_still_judges_the_cause(server):
    got = server.call("verify", {"before": TRACE, "after": NO_STEPS, "fingerprint": "ec9d8a4ee083b242"})
    assert got["cause"]["status"] == "gone" and got["step"] is None and got["diff"] is None
    assert got["promise_verdict"] == "unproven" and got["realized_pct"] is None
    assert got["promise"]["savings_ns"] == 810834 and "no step comparison" in got["summary"]
    error = server.error("diff", {"before": [TRACE], "after": [NO_STEPS]})
    assert error.data["exit_code"] == 2 and "no steps" in error.message


def test_the_readme_configuration_starts_the_server(root):
    import re
    import shutil as sh
    import sys
    from pathlib import Path

    block = next(b for b in re.findall(r"```json\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
                 if "mcpServers" in b)
    entry = json.loads(block)["mcpServers"]["nsys-rules"]
    command = sh.which(entry["command"], path=str(Path(sys.executable).parent)) or sh.which(entry["command"])
    if command is None:
        pytest.skip("the nsys-rules console script is not installed beside this Python")
    args = [str(root) if a == "/path/to/traces" else a for a in entry["args"]]
    from tests.mcp.conftest import McpServer, StdioServerParameters, anyio, Client

    params = StdioServerParameters(command=command, args=args, cwd=str(root))
    with anyio.from_thread.start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(Client(params, read_timeout_seconds=120)) as client:
            assert set(McpServer(portal, client, []).tools) == TOOLS


def test_profile_runs_a_capture_only_on_a_server_started_with_allow_profile(tmp_path):
    from tests.cli.fake_tools import FAKE_NSYS
    import sys

    nsys = tmp_path / "bin" / "nsys"
    nsys.parent.mkdir()
    nsys.write_text(f"#!{sys.executable}\n{FAKE_NSYS.read_text()}")
    nsys.chmod(0o755)
    root = tmp_path / "root"
    root.mkdir()
    env = {"NSYS_RULES_NSYS": str(nsys), "FAKE_NSYS_LOG": str(tmp_path / "calls.jsonl")}
    program = [sys.executable, "-c", "pass"]
    with mcp_server("--root", str(root), "--allow-profile", cwd=root, env=env) as allowed:
        dry = allowed.call("profile", {"command": program})
        assert dry["ran"] is False and dry["verdict"] == "ok" and dry["command"][0] == str(nsys)
        assert not (tmp_path / "calls.jsonl").exists()  # a dry run runs nothing
        ran = allowed.call("profile", {"command": program, "dry_run": False})
        assert ran["ran"] is True and ran["exit_code"] == 0, ran["summary"]
        [trace] = ran["traces"]
        assert trace.startswith(str(root / "nsys-rules-captures")) and trace.endswith(".sqlite")
        assert allowed.call("check", {"trace": trace})["report"]["traces"][0]["path"] == trace


def test_check_with_filter_time_judges_that_window_only(server):
    whole = server.call("check", {"trace": TRACE, "limit": 50})["report"]
    window = whole["traces"][0]["window"]["steady"]
    start, end = window["start_ns"], window["end_ns"]
    half = f"{start}ns/{start + (end - start) // 2}ns"
    cut = server.call("check", {"trace": TRACE, "filter_time": half, "rules": ["sync-stall"]})["report"]
    [stall] = cut["findings"]
    assert 0 < stall["estimated_savings_ns"] < 810834  # half the steady state, a part of the saving
    error = server.error("check", {"trace": TRACE, "filter_time": "soon"})
    assert error.data["exit_code"] == 2 and "soon" in error.message
