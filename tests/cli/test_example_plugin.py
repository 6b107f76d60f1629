"""The example plugin (plugins/nsys-rules-nvtx-coverage) seen from the core's CLI.

CI installs the plugin next to the core; a fresh clone that only installed the core skips
these tests with the reason.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json

import pytest

from nsys_rules.plugins import AUTOLOAD_ENV
from nsys_rules.testing import TraceBuilder
from tests.conftest import run_cli, validate_report

DIST = "nsys-rules-nvtx-coverage"
RULE = "nvtx-coverage"

try:
    metadata.distribution(DIST)
    INSTALLED = True
except metadata.PackageNotFoundError:
    INSTALLED = False

pytestmark = pytest.mark.skipif(not INSTALLED, reason=f"{DIST} is not installed "
                                "(`pip install -e plugins/nsys-rules-nvtx-coverage`; .ci/run does)")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    b = TraceBuilder()
    for i in range(10):
        t = i * 10_000_000
        if i >= 6:
            b.nvtx("step", t, t + 5_000_000)
        b.kernel("work_kernel", start=t + 100_000, duration=1_000_000)
    return b.write(tmp_path_factory.mktemp("plugin") / "t.sqlite")


def _rule_names(*args: str, env: dict[str, str] | None = None) -> list[str]:
    proc = run_cli("rules", "--format", "json", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    return [r["name"] for r in json.loads(proc.stdout)]


def test_rules_lists_the_plugin_rule_after_the_builtins():
    proc = run_cli("rules", "--format", "json")
    rows = json.loads(proc.stdout)
    plugin_rows = [r for r in rows if r["name"] == RULE]
    assert len(plugin_rows) == 1 and plugin_rows[0]["plugin"] == RULE
    builtin_positions = [i for i, r in enumerate(rows) if r["plugin"] == "nsys-rules (built-in)"]
    assert max(builtin_positions) < rows.index(plugin_rows[0])


def test_check_runs_the_plugin_rule(trace):
    proc = run_cli("check", "--format", "json", "--select", RULE, str(trace))
    assert proc.returncode == 0, proc.stderr  # an info finding stays under the default --fail-on error
    report = validate_report(proc.stdout)
    assert [r["name"] for r in report["rules"]] == [RULE]
    assert any(p["name"] == RULE and DIST in p["version"] for p in report["tool"]["plugins"])
    (finding,) = report["findings"]
    assert finding["rule"] == RULE
    assert finding["metrics"]["uncovered_share"]["value"] == pytest.approx(0.6)


def test_full_check_includes_the_plugin_rule(trace):
    report = validate_report(run_cli("check", "--format", "json", str(trace)).stdout)
    assert RULE in [r["name"] for r in report["rules"]]


def test_no_plugins_flag_hides_it(trace):
    assert RULE not in _rule_names("--no-plugins")
    proc = run_cli("check", "--format", "json", "--no-plugins", str(trace))
    assert RULE not in [r["name"] for r in validate_report(proc.stdout)["rules"]]


def test_autoload_env_var_hides_it(trace):
    assert RULE not in _rule_names(env={AUTOLOAD_ENV: "1"})
    assert RULE in _rule_names(env={AUTOLOAD_ENV: "0"})  # "0" means autoload stays on
    proc = run_cli("check", "--select", RULE, str(trace), env={AUTOLOAD_ENV: "1"})
    assert proc.returncode == 2 and RULE in proc.stderr  # unknown rule: usage error, one line


def test_explain_renders_its_docs():
    proc = run_cli("explain", RULE)
    assert proc.returncode == 0
    assert "## What it detects" in proc.stdout and "`min_uncovered_share`" in proc.stdout
