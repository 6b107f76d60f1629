"""``nsys-rules rules``: every registered rule with its plugin and default severity."""

from __future__ import annotations

import argparse
import json
import sys

from tabulate import tabulate

from nsys_rules.commands.common import add_plugin_flags, registry_for


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
        sys.stdout.write(tabulate([[r["name"], r["severity"], r["plugin"], r["title"]] for r in rows],
                                  headers=["rule", "severity", "plugin", "title"]) + "\n")
        for e in registry.errors:
            sys.stderr.write(f"plugin error: {e.plugin}: {e.error}\n")
    return 4 if registry.errors else 0
