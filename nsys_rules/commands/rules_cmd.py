"""``nsys-rules rules``: every registered rule with its plugin and default severity."""

from __future__ import annotations

import argparse
import json
import sys

from tabulate import tabulate

from nsys_rules.commands.common import add_plugin_flags, registry_for
from nsys_rules.textsafe import json_safe, output_safe, terminal_safe
from nsys_rules.containment import report_stream


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
        report_stream().write(output_safe(json.dumps(json_safe(rows), indent=2, allow_nan=False) + "\n", "json"))
    else:
        # Plugin text (titles, names) printed to a terminal or a CI log.
        report_stream().write(output_safe(tabulate([[r["name"], r["severity"], r["plugin"], r["title"]] for r in rows],
                                              headers=["rule", "severity", "plugin", "title"]) + "\n", "table"))
        for e in registry.errors:
            sys.stderr.write(output_safe(terminal_safe(f"plugin error: {e.plugin}: {e.error}", newlines=False) + "\n", "table"))
    return 4 if registry.errors else 0
