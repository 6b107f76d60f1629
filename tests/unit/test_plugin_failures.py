"""Broken plugins are reported, never fatal: errors[] and exit 4, and the rest still runs.

Each test installs a throw-away plugin for real: a module plus a ``*.dist-info`` folder with an
``entry_points.txt`` in a temp dir on the path, which ``importlib.metadata`` finds exactly as
it finds a pip-installed distribution (in-process through ``sys.path``, in the CLI
subprocess through ``PYTHONPATH``).
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from nsys_rules.plugin_manager import BUILTIN, build_registry
from nsys_rules.testing import TraceBuilder
from tests.conftest import run_cli, validate_report

GOOD_RULE = '''
from dataclasses import dataclass
from nsys_rules.hooks import hookimpl
from nsys_rules.rule import Rule


@dataclass(frozen=True)
class Options:
    """No options."""


class Always(Rule):
    """Always one finding."""

    name = "{rule}"
    title = "always fires"
    requires = ("kernels",)
    Options = Options

    def check(self, ctx):
        yield ctx.finding("one finding", "nothing to do")


@hookimpl
def register_rules():
    return [Always]
'''


def install_plugin(root: Path, dist: str, module: str, source: str) -> Path:
    """Write ``module.py`` and a dist-info whose entry point (group nsys_rules) names it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    info = root / f"{dist.replace('-', '_')}-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[nsys_rules]\n{dist} = {module}\n", encoding="utf-8")
    return root


@pytest.fixture
def trace(tmp_path):
    b = TraceBuilder(graph_trace_mode="Graph")
    for i in range(3):
        b.graph_launch(i * 1_000_000, 500_000)  # graph-trace-hidden (built-in) fires an error
        b.kernel("k", start=i * 1_000_000 + 600_000, duration=100_000)
    return b.write(tmp_path / "t.sqlite")


def _env(*dirs: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([*map(str, dirs), os.environ.get("PYTHONPATH", "")]),
            "NSYS_RULES_DISABLE_PLUGIN_AUTOLOAD": ""}


def _builtin_count() -> int:
    return len(build_registry(autoload=False).rules)


def test_misspelled_hook_is_an_error(tmp_path, monkeypatch):
    src = "from nsys_rules.hooks import hookimpl\n\n@hookimpl\ndef register_rule():\n    return []\n"
    root = install_plugin(tmp_path / "p", "typo-plugin", "typo_plugin", src)
    monkeypatch.syspath_prepend(str(root))
    registry = build_registry(autoload=True)
    errors = [e for e in registry.errors if e.plugin == "typo-plugin"]
    assert len(errors) == 1 and "register_rule" in errors[0].error and "register_rules" in errors[0].error
    assert len([n for n in registry.rules if registry.rule_plugin[n] == BUILTIN]) == _builtin_count()


def test_two_misspelled_plugins_are_both_named(tmp_path, monkeypatch):
    for i, hook in enumerate(("register_rule", "register_formatter")):
        src = f"from nsys_rules.hooks import hookimpl\n\n@hookimpl\ndef {hook}():\n    return []\n"
        monkeypatch.syspath_prepend(str(install_plugin(tmp_path / f"p{i}", f"typo-{i}", f"typo_{i}", src)))
    assert sorted(e.plugin for e in build_registry(autoload=True).errors) == ["typo-0", "typo-1"]


def test_misspelled_hook_exits_4_and_the_rest_runs(tmp_path, trace):
    src = "from nsys_rules.hooks import hookimpl\n\n@hookimpl\ndef register_rulez():\n    return []\n"
    root = install_plugin(tmp_path / "p", "typo-plugin", "typo_plugin", src)
    proc = run_cli("check", "--format", "json", str(trace), env=_env(root))
    assert proc.returncode == 4, proc.stderr
    report = validate_report(proc.stdout)
    assert [e["plugin"] for e in report["errors"]] == ["typo-plugin"]
    assert "graph-trace-hidden" in [f["rule"] for f in report["findings"]]
    assert report["summary"]["exit_code"] == 4
    assert run_cli("rules", env=_env(root)).returncode == 4


def test_plugin_that_fails_to_import_exits_4_and_the_rest_runs(tmp_path, trace):
    broken = install_plugin(tmp_path / "b", "broken-plugin", "broken_plugin", "import no_such_module_anywhere\n")
    good = install_plugin(tmp_path / "g", "good-plugin", "good_plugin", GOOD_RULE.format(rule="always-fires"))
    proc = run_cli("check", "--format", "json", str(trace), env=_env(broken, good))
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr
    report = validate_report(proc.stdout)
    (error,) = report["errors"]
    assert error["plugin"] == "broken-plugin" and "ModuleNotFoundError" in error["error"]
    rules_found = {f["rule"] for f in report["findings"]}
    assert {"graph-trace-hidden", "always-fires"} <= rules_found  # built-ins and the good plugin still ran
    assert [p["name"] for p in report["tool"]["plugins"]].count("good-plugin") == 1


def test_no_plugins_skips_a_broken_plugin(tmp_path, trace):
    broken = install_plugin(tmp_path / "b", "broken-plugin", "broken_plugin", "raise RuntimeError('boom')\n")
    proc = run_cli("check", "--format", "json", "--no-plugins", "--fail-on", "never", str(trace), env=_env(broken))
    assert proc.returncode == 0 and validate_report(proc.stdout)["errors"] == []


def test_hook_that_raises_is_isolated(tmp_path, monkeypatch):
    src = "from nsys_rules.hooks import hookimpl\n\n@hookimpl\ndef register_rules():\n    raise ValueError('bad')\n"
    monkeypatch.syspath_prepend(str(install_plugin(tmp_path / "p", "raising-plugin", "raising_plugin", src)))
    registry = build_registry(autoload=True)
    (error,) = [e for e in registry.errors if e.plugin == "raising-plugin"]
    assert "ValueError: bad" in error.error
    assert len(registry.rules) >= _builtin_count()


def test_duplicate_rule_name_cannot_shadow_a_builtin(tmp_path, monkeypatch):
    source = GOOD_RULE.format(rule="graph-trace-hidden")
    monkeypatch.syspath_prepend(str(install_plugin(tmp_path / "p", "dup-plugin", "dup_plugin", source)))
    registry = build_registry(autoload=True)
    assert registry.rule_plugin["graph-trace-hidden"] == "nsys-rules (built-in)"
    (error,) = [e for e in registry.errors if e.plugin == "dup-plugin"]
    assert "already registered" in error.error


def test_plugin_formatter_is_used(tmp_path, trace):
    src = '''
    from nsys_rules.hooks import hookimpl

    @hookimpl
    def register_formatters():
        return {"count": lambda report: f"{len(report.findings)} findings\\n"}
    '''
    root = install_plugin(tmp_path / "p", "count-format", "count_format", src)
    proc = run_cli("check", "--format", "count", "--select", "graph-trace-hidden", str(trace), env=_env(root))
    assert proc.stdout == "1 findings\n" and proc.returncode == 1


def test_rules_json_lists_plugin_rules(tmp_path):
    root = install_plugin(tmp_path / "g", "good-plugin", "good_plugin", GOOD_RULE.format(rule="always-fires"))
    rows = json.loads(run_cli("rules", "--format", "json", env=_env(root)).stdout)
    assert {"name": "always-fires", "plugin": "good-plugin"}.items() <= next(
        r for r in rows if r["name"] == "always-fires").items()


LOADER = '''
from nsys_rules.hooks import hookimpl
from nsys_rules.loaders.sqlite import SqliteExport
from nsys_rules.model.trace import Trace


def _load(path):
    if path.stat().st_size == 0:
        raise RuntimeError("empty file")
    return Trace(SqliteExport(path), label=str(path))


@hookimpl
def register_loaders():
    return {".db": _load}
'''


def test_plugin_loader_reads_its_suffix_and_its_failure_is_one_line(tmp_path, trace):
    root = install_plugin(tmp_path / "p", "db-loader", "db_loader", LOADER)
    renamed = tmp_path / "t.db"
    renamed.write_bytes(trace.read_bytes())
    proc = run_cli("check", "--format", "json", "--select", "graph-trace-hidden", str(renamed), env=_env(root))
    assert proc.returncode == 1, proc.stderr  # graph-trace-hidden: error finding
    assert validate_report(proc.stdout)["traces"][0]["path"] == str(renamed)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    proc = run_cli("check", str(empty), env=_env(root))
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "loader for .db failed: RuntimeError: empty file" in proc.stderr
