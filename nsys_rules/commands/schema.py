"""``nsys-rules schema``: print the JSON Schema of ``check --format json`` (``--diff``: of ``diff --format json``)."""

from __future__ import annotations

import argparse
import json

from nsys_rules.formatters.json_out import report_schema
from nsys_rules.containment import report_stream


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("schema", help="print the JSON Schema of the JSON report")
    p.add_argument("--diff", action="store_true", help="the schema of `diff --format json` instead")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "diff", False):
        from nsys_rules.diff import diff_schema

        report_stream().write(json.dumps(diff_schema(), indent=2) + "\n")
        return 0
    report_stream().write(json.dumps(report_schema(), indent=2) + "\n")
    return 0
