"""The MCP server's pure pieces, without the ``mcp`` SDK: the path policy, the verify verdicts, the command's
usage errors (a missing extra, a bad ``--root``) as one line and exit 2."""

from __future__ import annotations

import contextlib
import io
import os
import sys

import pytest

from nsys_rules.cli import main
from nsys_rules.errors import InputError, UsageError
from nsys_rules.mcp_server.paths import PathPolicy
from nsys_rules.mcp_server.verify import _not_run, cause_status, promise_verdict


def _step(verdict: str, low: float, estimate: float, high: float) -> dict:
    return {"verdict": verdict, "low_ns": low, "estimate_ns": estimate, "high_ns": high}


@pytest.mark.parametrize(("step", "promised", "expected"), [
    (_step("faster", -559_000, -347_000, -139_000), 341_000, "met"),          # the promise within the interval
    (_step("faster", -559_000, -450_000, -400_000), 341_000, "exceeded"),     # even the least saving beats it
    (_step("faster", -200_000, -150_000, -100_000), 341_000, "short"),        # even the most saving falls short
    (_step("slower", 50_000, 80_000, 120_000), 341_000, "not kept"),
    (_step("inconclusive", -600_000, -100_000, 300_000), 341_000, "unproven"),
    (_step("no change", -20_000, 0, 20_000), 341_000, "short"),               # the interval rules the promise out
    (_step("faster", -559_000, -347_000, -139_000), None, "no promise"),
    (_step("faster", -559_000, -347_000, -139_000), 0, "no promise"),
])
def test_promise_verdict(step, promised, expected):
    assert promise_verdict(step, promised) == expected


def test_cause_status():
    finding = {"rule": "sync-stall"}
    assert cause_status(341_000, None, None) == "gone"
    assert cause_status(341_000, finding, 100_000) == "smaller"
    assert cause_status(341_000, finding, 300_000) == "unchanged"
    assert cause_status(341_000, finding, 500_000) == "larger"
    assert cause_status(None, finding, None) == "unchanged"


def test_a_rule_that_did_not_run_on_after_is_named_with_why():
    report = {"skipped": [{"rule": "sync-stall", "reason": "no CUDA API table", "fix": "capture with --trace=cuda"}],
              "errors": [{"rule": "kernel-tail", "error": "ValueError: boom"}]}
    assert _not_run(report, "sync-stall") == "skipped: no CUDA API table; capture with --trace=cuda"
    assert _not_run(report, "kernel-tail") == "failed: ValueError: boom"
    assert _not_run(report, "queue-delay") == ""


def test_the_path_policy_confines_to_the_root(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "t.sqlite").write_bytes(b"x")
    (tmp_path / "outside.sqlite").write_bytes(b"x")
    os.symlink(tmp_path / "outside.sqlite", root / "link.sqlite")
    policy = PathPolicy.confined_to(str(root))
    assert policy.trace("sub/t.sqlite") == (root / "sub" / "t.sqlite").resolve()
    assert policy.trace(str(root / "sub" / "t.sqlite")) == (root / "sub" / "t.sqlite").resolve()
    for bad, words in [("sub/../sub/t.sqlite", "'..'"), (str(tmp_path / "outside.sqlite"), "outside"),
                       ("link.sqlite", "symbolic links resolved"), ("", "give the path"), ("a\0b", "no path"),
                       ("x" * 5000, "no path"), (str(tmp_path / "missing.sqlite"), "outside")]:
        with pytest.raises(UsageError, match=words):
            policy.trace(bad)
    with pytest.raises(InputError, match="no such file"):
        policy.trace("sub/missing.sqlite")
    assert PathPolicy().trace(str(tmp_path / "outside.sqlite")) == (tmp_path / "outside.sqlite").resolve()


def _run(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(args))
    return code, err.getvalue()


def test_a_root_that_is_no_folder_is_a_usage_error(tmp_path):
    code, err = _run("mcp", "--root", str(tmp_path / "nope"))
    assert code == 2 and err.count("\n") == 1 and "is not a folder" in err


def test_a_bad_timeout_is_a_usage_error():
    code, err = _run("mcp", "--timeout", "soon")
    assert code == 2 and "--timeout" in err


def test_without_the_mcp_extra_the_command_says_how_to_install_it(monkeypatch):
    # An import of mcp (or of any of its modules another test imported) now fails as when it is not installed.
    for name in ["mcp", *[m for m in sys.modules if m.startswith("mcp.")]]:
        monkeypatch.setitem(sys.modules, name, None)
    for name in [m for m in sys.modules if m.startswith("nsys_rules.mcp_server.server")]:
        monkeypatch.delitem(sys.modules, name)
    code, err = _run("mcp")
    assert code == 2 and "pip install 'nsys-rules[mcp]'" in err and err.count("\n") == 1
