"""Conventions every registered rule follows (built-in pack and installed plugins).

- :func:`nsys_rules.testing.assert_rule_conventions`, the check plugin authors run in their own
  tests: the engine registers the rule, a title, every docstring section of ``DOC_SECTIONS``
  (``nsys-rules explain`` renders them), Options with help and defaults, shares as ``*_pct`` percents;
- every built-in rule has its own tests file, ``tests/rules/test_<module>.py``
  (plugins ship their tests in their own distribution);
- every hook spec is documented like pytest's: what it returns and when it is called.

Parametrized by rule name, so a failure names the rule.
"""

from __future__ import annotations

import inspect
import sys

import pytest

from nsys_rules import hooks
from nsys_rules.docs import rule_markdown
from nsys_rules.plugin_manager import BUILTIN, build_registry
from nsys_rules.testing import assert_rule_conventions
from tests.conftest import ROOT

REGISTRY = build_registry(autoload=True)
ALL = sorted(REGISTRY.rules)
BUILTINS = sorted(n for n in ALL if REGISTRY.rule_plugin[n] == BUILTIN)


def test_registry_loaded_cleanly():
    assert REGISTRY.errors == []
    assert BUILTINS, "no built-in rule registered"


@pytest.mark.parametrize("name", ALL)
def test_rule_follows_the_conventions(name):
    rule = REGISTRY.rules[name]
    assert_rule_conventions(rule)
    assert "(not documented)" not in rule_markdown(rule)


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_rule_has_a_tests_file(name):
    module = sys.modules[REGISTRY.rules[name].__module__].__name__.rsplit(".", 1)[-1]
    path = ROOT / "tests" / "rules" / f"test_{module}.py"
    assert path.is_file(), f"{name}: no tests file {path.relative_to(ROOT)} (firing, quiet and threshold cases)"
    assert name in path.read_text(encoding="utf-8"), f"{path.relative_to(ROOT)} never names rule {name!r}"


@pytest.mark.parametrize("spec", [n for n, f in inspect.getmembers(hooks, inspect.isfunction)
                                  if n.startswith("register_")])
def test_hook_is_documented(spec):
    doc = inspect.getdoc(getattr(hooks, spec)) or ""
    assert ":return:" in doc and "Called" in doc, f"hook {spec} must say what it returns and when it is called"
    reference = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    assert f"### `{spec}(" in reference, f"docs/plugins.md has no reference entry for hook {spec}"
