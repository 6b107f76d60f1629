"""``nsys-rules rules``: every registered rule with its plugin and default severity."""

from __future__ import annotations

import argparse
import json
import sys

from nsys_rules.commands.common import add_plugin_flags, registry_for
from nsys_rules.formatters.fitted import fitted_table
from nsys_rules.formatters.layout import output_width


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("rules", help="list the registered rules")
    p.add_argument("--format", choices=("table", "json"), default="table")
    add_plugin_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    registry = registry_for(args)
    rows = [{"name": name, "title": cls.title, "severity": cls.default_severity.value,
             "plugin": registry.rule_plugin[name], "aliases": list(cls.aliases), "requires": list(cls.requires)}
            for name, cls in registry.rules.items()]
    if args.format == "json":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        # Laid out for the terminal or the pipe (80 columns): the titles cut to fit, or a block per rule.
        table = fitted_table(["rule", "severity", "plugin", "title"],
                             [[r["name"], r["severity"], r["plugin"], r["title"]] for r in rows], output_width(), name=3)
        sys.stdout.write("\n".join(table) + "\n")
        for e in registry.errors:
            sys.stderr.write(f"plugin error: {e.plugin}: {e.error}\n")
    return 4 if registry.errors else 0
