"""Judging our own committed captures: the rules of ../shared/tools/verdicts.py, for the tests.

An expectation names rules that must reach a severity (``must``), rules that must stay at info
or below (``must_not``), and regular expressions a rule's messages must match (``message_re``)
or must not match (``message_not_re``); ``must_any`` lists rule choices one of which must hold,
``any_finding_not_re`` a pattern no finding's message or recommendation may match.
"""

from __future__ import annotations

import contextlib
import copy
import io
import lzma
import re
import shutil
from pathlib import Path
from typing import Any, Iterable

import pytest

from nsys_rules.cli import main
from tests.conftest import validate_report

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


#: ``check --format json`` reports of this test session, by the file they were made from (a packed
#: capture, or a trace with its size and mtime): several modules judge the same captures (their
#: verdicts, the answer's properties), and one run of the tool per capture is enough.
_REPORTS: dict[tuple[Path, int, int], dict[str, Any]] = {}


def _key(path: Path) -> tuple[Path, int, int]:
    st = path.stat()
    return path.resolve(), st.st_size, st.st_mtime_ns


def check_packed(folder: Path, names: Iterable[str], work: Path) -> dict[str, dict[str, Any]]:
    """``check --format json`` of each ``folder/NAME.xz`` capture, unpacked into ``work``, schema-validated."""
    return {name: packed_report(folder / f"{name}.xz", work) for name in names}


def packed_report(packed: Path, work: Path) -> dict[str, Any]:
    """``check --format json`` of one ``.xz`` capture, unpacked into ``work`` (once a session)."""
    key = _key(packed)
    if key not in _REPORTS:
        trace = work / packed.name[:-3]
        with lzma.open(packed) as src, trace.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        _REPORTS[key] = _run_check(trace)
    return copy.deepcopy(_REPORTS[key])


def check_json(trace: Path) -> dict[str, Any]:
    """``check --format json`` of one trace (exit 0 required), schema-validated (once a session)."""
    key = _key(trace)
    if key not in _REPORTS:
        _REPORTS[key] = _run_check(trace)
    return copy.deepcopy(_REPORTS[key])


def _run_check(trace: Path) -> dict[str, Any]:
    # In this process (``nsys_rules.cli.main``, output captured), as the fuzz harness runs it: a
    # subprocess costs half a second of imports, ~45 times a session; the CLI tests run the console script.
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", "--format", "json", "--fail-on", "never", str(trace)])
    if code == 3 and "nothing to judge" in err.getvalue():
        # A capture with no CUDA activity is refused with one line (exit 3): no report to judge causes in.
        pytest.skip(err.getvalue().strip())
    assert code == 0, err.getvalue()
    return validate_report(out.getvalue())
