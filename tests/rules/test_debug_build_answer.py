"""On a debug build the whole report says so: no advice sends the user back to the debug binary, and no
advice tunes the debug build's kernels (the debug-build error made into a fact of the trace's answer)."""

from __future__ import annotations

import pytest

from nsys_rules.answer import DEBUG_BUILD_ADVICE
from nsys_rules.testing import TraceBuilder
from tests.conftest import run_cli, validate_report
from tests.rules.test_gemv_dominance import decode

S = 1_000_000_000
DEBUG = ["target/debug/bench_serving", "request", "--output-len", "8"]
RELEASE = ["target/release/bench_serving", "request", "--output-len", "8"]


def program(tmp_path, command: list[str]):
    """Two seconds of start-up, then a GEMV-bound decode loop: capture-scope and gemv-dominance both fire."""
    b = TraceBuilder(command=command)
    b.api("cudaFree", S // 10, S // 10)
    decode(b, steps=12, t0=2 * S)
    return b.write(tmp_path / "t.sqlite")


def check(path, *args: str) -> dict:
    proc = run_cli("check", "--format", "json", "--fail-on", "never", *args, str(path))
    assert proc.returncode == 0, proc.stderr
    return validate_report(proc.stdout)


def by_rule(data: dict) -> dict[str, dict]:
    return {f["rule"]: f for f in data["findings"]}


def test_a_debug_build_report_never_names_the_debug_binary_nor_tunes_it(tmp_path):
    data = check(program(tmp_path, DEBUG))
    found = by_rule(data)
    assert found["debug-build"]["severity"] == "error"
    assert "cargo dev-profile" in data["traces"][0]["debug_build"]
    for f in data["findings"]:
        if f["rule"] != "debug-build":
            assert "target/debug" not in f["recommendation"], f
    scope = found["capture-scope"]["recommendation"]
    assert "target/release/bench_serving request --output-len 8" in scope
    assert "--filter-time" not in scope and "--delay" not in scope  # the debug build's times
    gemv = found["gemv-dominance"]
    assert gemv["recommendation"] == DEBUG_BUILD_ADVICE and gemv["severity"] == "info"
    assert "estimated_savings_ns" not in gemv


def test_the_release_build_keeps_its_advice(tmp_path):
    data = check(program(tmp_path, RELEASE))
    found = by_rule(data)
    assert "debug-build" not in found and "debug_build" not in data["traces"][0]
    assert "--filter-time" in found["capture-scope"]["recommendation"]
    assert found["gemv-dominance"]["recommendation"] != DEBUG_BUILD_ADVICE
    assert "weight_bytes" in found["gemv-dominance"]["recommendation"]


def test_without_the_debug_build_rule_the_advice_stays(tmp_path):
    # The answer follows the error the user sees: ignore the rule and nothing is rewritten (the
    # capture command still names the release build: that is what the recorded command runs).
    data = check(program(tmp_path, DEBUG), "--ignore", "debug-build")
    assert "debug_build" not in data["traces"][0]
    assert by_rule(data)["gemv-dominance"]["recommendation"] != DEBUG_BUILD_ADVICE


@pytest.mark.parametrize("fmt,needle", [("table", "judged on a debug build"), ("markdown", "judged on a debug build")])
def test_human_formats_say_it_beside_the_trace(tmp_path, fmt, needle):
    proc = run_cli("check", "--format", fmt, "--fail-on", "never", str(program(tmp_path, DEBUG)),
                   env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    head = proc.stdout.split("steady state:")[0]
    assert needle in head


def test_the_h200_rust_debug_trace(h200):
    path = h200 / "rust_debug_build.sqlite"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    data = check(path)
    found = by_rule(data)
    assert found["debug-build"]["severity"] == "error" and data["traces"][0].get("debug_build")
    assert all("target/debug" not in f["recommendation"] for f in data["findings"] if f["rule"] != "debug-build")
    assert found["gemv-dominance"]["recommendation"] == DEBUG_BUILD_ADVICE
