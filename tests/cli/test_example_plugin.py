"""The example plugin (plugins/nsys-rules-nvtx-coverage) seen from the core's CLI.

The README's test setup installs the plugin next to the core (so does CI); a checkout that only
installed the core skips these tests with the reason.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json

import pytest

from nsys_rules.plugin_manager import AUTOLOAD_ENV
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
                                "(`pip install -e plugins/nsys-rules-nvtx-coverage`; the README's test setup does)")


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
    assert "## What it detects" in proc.stdout and "`min_uncovered_pct`" in proc.stdout


def sql_coverage(path) -> tuple[int, int, int, int]:
    """Independent reference in plain SQL: (GPU time, unannotated GPU time, ops, unannotated ops).

    A GPU op (kernel/memcpy/memset) joins its launching runtime call on pid + correlationId and
    is covered when a push/pop range of the launching thread, or a start/end range of the process,
    contains the call's start.
    """
    import sqlite3

    db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        gpu = " UNION ALL ".join(f"SELECT start, end, correlationId AS c, globalPid AS gp FROM {t}" for t in (
            "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET") if t in tables)
        covered = ("EXISTS (SELECT 1 FROM NVTX_EVENTS n WHERE n.start <= l.rs AND COALESCE(n.end, 9e18) >= l.rs AND "
                   "((n.eventType = 59 AND n.globalTid = l.gt) OR (n.eventType = 60 AND n.globalTid >> 24 = l.gt >> 24)))")
        row = db.execute(f"""
            WITH gpu AS ({gpu}),
            l AS (SELECT g.start AS gs, g.end AS ge, r.start AS rs, r.globalTid AS gt FROM gpu g
                  JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = g.c AND r.globalTid >> 24 = g.gp >> 24)
            SELECT SUM(ge - gs), SUM(CASE WHEN {covered} THEN 0 ELSE ge - gs END), COUNT(*),
                   SUM(CASE WHEN {covered} THEN 0 ELSE 1 END) FROM l""").fetchone()
        return tuple(int(v or 0) for v in row)
    finally:
        db.close()


@pytest.mark.parametrize("name", ["decode_graph_default.sqlite", "moe_eager.sqlite", "engine_worker_thread.sqlite"])
def test_numbers_match_plain_sql_on_real_traces(h200, name):
    path = h200 / name
    gpu_time, uncovered, ops, uncovered_ops = sql_coverage(path)
    proc = run_cli("check", "--format", "json", "--select", RULE, "--set", f"{RULE}.min_uncovered_pct=0",
                   "--set", f"{RULE}.min_gpu_time_ns=0", str(path))
    (finding,) = validate_report(proc.stdout)["findings"]
    values = {k: m["value"] for k, m in finding["metrics"].items()}
    assert (values["gpu_time"], values["uncovered_gpu_time"], values["gpu_ops"], values["uncovered_ops"]) == (
        gpu_time, uncovered, ops, uncovered_ops)
    assert values["unlinked_ops"] == 0


def test_the_readmes_test_example_passes_as_written(tmp_path):
    import re
    import textwrap

    from tests.conftest import ROOT

    readme = (ROOT / "plugins" / DIST / "README.md").read_text(encoding="utf-8")
    step = readme[readme.index("4. **Tests.**"):]
    source = textwrap.dedent(re.search(r"```python\n(.*?)```", step, re.S).group(1))
    namespace: dict = {}
    exec(compile(source, "README.md", "exec"), namespace)  # noqa: S102 - the README's own example
    tests = sorted(name for name in namespace if name.startswith("test_"))
    assert tests == ["test_conventions", "test_fires"]
    namespace["test_conventions"]()
    namespace["test_fires"](tmp_path)
