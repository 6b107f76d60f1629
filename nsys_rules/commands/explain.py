"""``nsys-rules explain RULE``: the rule's documentation and options."""

from __future__ import annotations

import argparse
from pathlib import Path

from nsys_rules.settings import resolve_rule_name
from nsys_rules.docs import rule_markdown, write_rule_docs
from nsys_rules.errors import UsageError
from nsys_rules.outpaths import guard_output_folder
from nsys_rules.commands.common import add_plugin_flags, registry_for
from nsys_rules.textsafe import output_safe
from nsys_rules.containment import report_stream


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("explain", help="show a rule's documentation and options")
    p.add_argument("rule", nargs="?", help="rule name (or an NVIDIA analyze rule name)")
    p.add_argument("--all", action="store_true", help="every registered rule (plugins included unless --no-plugins)")
    p.add_argument("--output", metavar="DIR", help="write <rule>.md pages and index.md into DIR instead of stdout")
    add_plugin_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    registry = registry_for(args)
    if args.all == bool(args.rule):
        raise UsageError("explain needs one rule name or --all, not both")
    if args.all:
        rules = dict(registry.rules)
    else:
        name = resolve_rule_name(args.rule, registry.rules, registry.aliases(), "explain")
        rules = {name: registry.rules[name]}
    if args.output:
        guard_output_folder("--output", Path(args.output))  # never a file (a trace, a config), never an export
        for path in write_rule_docs(rules, registry.rule_plugin, Path(args.output)):
            report_stream().write(f"{path}\n")
    else:
        text = "\n".join(rule_markdown(rule, registry.rule_plugin[name]) for name, rule in rules.items())
        report_stream().write(output_safe(text, "markdown"))  # a plugin's docstring printed to a terminal or CI log
    return 4 if registry.errors else 0
