"""Judging our own committed captures: the rules of ../shared/tools/verdicts.py, for the tests.

An expectation names rules that must reach a severity (``must``), rules that must stay at info
or below (``must_not``), and regular expressions a rule's messages must match (``message_re``)
or must not match (``message_not_re``); ``must_any`` lists rule choices one of which must hold,
``any_finding_not_re`` a pattern no finding's message or recommendation may match.
"""

from __future__ import annotations

import lzma
import re
import shutil
from pathlib import Path
from typing import Any, Iterable

from tests.conftest import run_cli, validate_report

LEVEL = {"info": 0, "warning": 1, "error": 2}


def verdict_problems(findings: list[dict[str, Any]], expected: dict[str, Any]) -> list[str]:
    """What in ``findings`` breaks ``expected`` (empty when the verdict holds)."""
    worst: dict[str, int] = {}
    for f in findings:
        worst[f["rule"]] = max(worst.get(f["rule"], -1), LEVEL[f["severity"]])
    problems = [f"missing {r}>={floor}" for r, floor in expected.get("must", {}).items()
                if worst.get(r, -1) < LEVEL[floor]]
    problems += [f"false {r}" for r in expected.get("must_not", []) if worst.get(r, -1) > LEVEL["info"]]
    for rule, pattern in expected.get("message_re", {}).items():
        if not any(re.search(pattern, f["message"]) for f in findings if f["rule"] == rule):
            problems.append(f"{rule} message lacks /{pattern}/")
    for rule, pattern in expected.get("message_not_re", {}).items():
        if any(re.search(pattern, f["message"]) for f in findings if f["rule"] == rule):
            problems.append(f"{rule} message has /{pattern}/")
    choices = expected.get("must_any", [])  # several ways to own the cause: one of them must hold whole
    if choices and not any(all(worst.get(r, -1) >= LEVEL[floor] for r, floor in choice.items()) for choice in choices):
        problems.append(f"none of {[sorted(c) for c in choices]} at its severity")
    pattern = expected.get("any_finding_not_re")
    if pattern:  # advice that does not belong to the program's framework
        problems += [f"{f['rule']} says /{pattern}/" for f in findings
                     if re.search(pattern, f["message"]) or re.search(pattern, f.get("recommendation") or "")]
    return problems


def check_packed(folder: Path, names: Iterable[str], work: Path) -> dict[str, dict[str, Any]]:
    """``check --format json`` of each ``folder/NAME.xz`` capture, unpacked into ``work``, schema-validated."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        trace = work / name
        with lzma.open(folder / f"{name}.xz") as packed, trace.open("wb") as unpacked:
            shutil.copyfileobj(packed, unpacked)
        out[name] = check_json(trace)
    return out


def check_json(trace: Path) -> dict[str, Any]:
    """``check --format json`` of one trace (exit 0 required), schema-validated."""
    proc = run_cli("check", "--format", "json", "--fail-on", "never", str(trace))
    assert proc.returncode == 0, proc.stderr
    return validate_report(proc.stdout)
