"""Unordered exports: every answer is the same on a trace whose rows are stored in random order.

nsys 2025.6 and later may export rows in any order (timestamps included); the tool sorts what it
needs itself. Each real trace (the 17 h200 traces and the public corpus) is rewritten by
:func:`tests.trace_edit.shuffled_copy` into a temporary folder and both are checked: the JSON
reports are identical byte for byte but for the path, and so are the exit codes.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from nsys_rules.cli import main
from tests.conftest import CORPUS, H200, validate_report
from tests.trace_edit import shuffled_copy

TRACES = sorted(H200.glob("*.sqlite")) + sorted(CORPUS.glob("*.sqlite")) + sorted((CORPUS / "converted").glob("*.sqlite"))


def check(trace: Path) -> tuple[int, str]:
    """Exit code and JSON text of ``check --format json`` on ``trace``, in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", "--format", "json", "--fail-on", "never", str(trace)])
    return code, out.getvalue()


@pytest.mark.skipif(not TRACES, reason="../shared (the h200 traces, the public corpus) is not here")
@pytest.mark.parametrize("trace", TRACES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_shuffled_rows_give_the_same_json(trace: Path, tmp_path: Path) -> None:
    shuffled = shuffled_copy(trace, tmp_path / trace.name, seed=38)
    code, text = check(trace)
    shuffled_code, shuffled_text = check(shuffled)
    assert shuffled_code == code
    assert shuffled_text.replace(str(shuffled), str(trace)) == text
    if text:
        report = validate_report(text)
        verdicts = {t["validity"]["verdict"] for t in report["traces"]}
        assert verdicts <= {"trusted", "caveats", "untrustworthy"}
