"""Which rules run and with which options: selection, per-rule overrides and the window each rule judges."""

from __future__ import annotations

from typing import Any

from nsys_rules.settings import Settings, build_options, option_setting, resolve_rule_name
from nsys_rules.errors import UsageError
from nsys_rules.registry import Registry
from nsys_rules.rule import Rule


def select_rules(registry: Registry, settings: Settings) -> list[type[Rule]]:
    """The rules to run, in registry order: ``select`` (default all) minus ``ignore``; aliases accepted."""
    aliases = registry.aliases()
    names = list(registry.rules)
    if settings.select and not any(s.upper() == "ALL" for s in settings.select):
        names = [resolve_rule_name(s, registry.rules, aliases, "--select") for s in settings.select]
    ignored = {resolve_rule_name(s, registry.rules, aliases, "--ignore") for s in settings.ignore}
    return [registry.rules[n] for n in dict.fromkeys(names) if n not in ignored]


def effective_options(rule: type[Rule], settings: Settings) -> Any:
    """``rule.Options`` with the configured overrides applied (:func:`nsys_rules.settings.build_options`)."""
    overrides = settings.rule_options.get(rule.name, {})
    if any(key in rule.renamed_options for key in overrides):  # set from code (run_rule(options=...)), not --set
        overrides = dict(option_setting(rule, key, value, "options") for key, value in overrides.items())
    return build_options(rule, overrides, "options")


def rule_window_kind(rule: type[Rule], options: Any) -> str:
    """``steady`` or ``full``: an ``Options.window`` field wins over the class default."""
    kind = getattr(options, "window", rule.window)
    if kind not in ("steady", "full"):
        raise UsageError(f"{rule.name}.window must be 'steady' or 'full', not {kind!r}")
    return kind
