"""The conventions every rule follows, built-in or plugin, as one check a rule's own test calls.

``tests/meta/test_rule_conventions.py`` runs it over every registered rule; a plugin's tests run it
over the plugin's rules (docs/plugins.md, "Testing a plugin")::

    from nsys_rules.testing import assert_rule_conventions

    def test_conventions():
        assert_rule_conventions(MyRule)
"""

from __future__ import annotations

import dataclasses
import re

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")


def rule_convention_problems(rule: type) -> list[str]:
    """What ``rule`` does against the conventions, one line each (empty: it follows them all).

    - the engine registers it (:func:`nsys_rules.plugin_manager.validate_rule`: a kebab-case
      ``name``, a frozen ``Options`` dataclass whose defaults build, known tables and columns, ...);
    - a ``title``; a docstring with a summary line and every section of :data:`nsys_rules.rule.DOC_SECTIONS`, none
      empty (``nsys-rules explain`` renders them); its Options section names no option it lacks;
    - every ``Options`` field has a default and ``metadata={"help": ...}``;
    - a share or fraction is a percent named ``*_pct`` whose help says "percent" (never a fraction).
    """
    # The rule machinery (pandas) only when a check runs: importing the kit stays light.
    from nsys_rules.docs import doc_sections, missing_sections, options_without_help
    from nsys_rules.plugin_manager import validate_rule
    from nsys_rules.rule import DOC_SECTIONS, Rule

    refused = validate_rule(rule, getattr(rule, "scope", "trace"))
    if refused:
        return [f"the engine refuses it: {refused}"]
    assert issubclass(rule, Rule)  # what validate_rule accepts
    name = rule.name
    problems = []
    if not rule.title:
        problems.append(f"{name}: no title")
    sections = doc_sections(rule)
    if not sections.get("summary"):
        problems.append(f"{name}: the docstring has no summary line (its first line)")
    if missing_sections(rule):
        problems.append(f"{name}: the docstring lacks the sections {missing_sections(rule)} (all of: {list(DOC_SECTIONS)})")
    fields = {f.name: f for f in dataclasses.fields(rule.Options)}
    stale = [n for n in re.findall(r"`([^`]*)`", sections.get("Options", "")) if _IDENTIFIER.fullmatch(n) and n not in fields]
    if stale:
        problems.append(f"{name}: the docstring's Options section names options it does not have: {stale}")
    if options_without_help(rule):
        problems.append(f"{name}: Options fields without metadata help: {options_without_help(rule)}")
    for option, f in fields.items():
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            problems.append(f"{name}.{option}: no default")
        problems += _unit_problems(f"{name}.{option}", str(f.metadata.get("help", "")))
    return problems


def _unit_problems(option: str, help_text: str) -> list[str]:
    """A share of something is a percent: named ``*_pct``, and its help says so."""
    if option.endswith("_pct"):
        out = [] if "percent" in help_text else [f"{option}: a *_pct option's help says 'percent'"]
        if "fraction" in help_text or "(0-1)" in help_text:
            out.append(f"{option}: a *_pct option is a percent, not a fraction: {help_text!r}")
        return out
    short = option.rsplit(".", 1)[1]
    if "share" in short or "fraction" in short:
        return [f"{option}: a share or fraction is a percent named *_pct (e.g. min_share_pct=20 for 20 %)"]
    if "this share" in help_text or "this fraction" in help_text:
        return [f"{option}: a share or fraction is a percent named *_pct: {help_text!r}"]
    return []


def assert_rule_conventions(rule: type) -> None:
    """``AssertionError`` listing every convention ``rule`` breaks (:func:`rule_convention_problems`)."""
    problems = rule_convention_problems(rule)
    if problems:
        raise AssertionError(f"rule {getattr(rule, 'name', rule)!s} breaks the rule conventions "
                             "(docs/plugins.md, 'Writing a rule'):\n" + "\n".join(f"- {p}" for p in problems))
