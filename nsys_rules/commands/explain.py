"""``nsys-rules explain RULE``: the rule's documentation and options."""

from __future__ import annotations

import argparse
import sys

from ..config import resolve_rule_name
from ..docs import rule_markdown
from .common import add_plugin_flags, registry_for


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("explain", help="show a rule's documentation and options")
    p.add_argument("rule", help="rule name (or an NVIDIA analyze rule name)")
    add_plugin_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    registry = registry_for(args)
    name = resolve_rule_name(args.rule, registry.rules, registry.aliases(), "explain")
    sys.stdout.write(rule_markdown(registry.rules[name], registry.rule_plugin[name]))
    return 0
