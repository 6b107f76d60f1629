"""The exit code is explained by what is shown, and every format counts the same findings.

Two real traces: decode_eager (a low-utilization warning of the start-up, folded into capture-scope)
and the public 2-GPU training trace (idle gaps, a warning, once folded into a sync-stall under the
noise floor: ``--fail-on warning`` failed while every finding shown was info).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nsys_rules.cli import main
from tests.conftest import CORPUS, H200, validate_report

DECODE = H200 / "decode_eager.sqlite"
TRAINING = CORPUS / "nsys2026.2.1-wan-train-2gpu-nccl-before.sqlite"
COUNTS = re.compile(r"(\d+) errors?, (\d+) warnings?, (\d+) info shown(?:; (?:(\d+) folded)?(?:, )?(?:(\d+) minor)?)?")


def _need(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path} absent (the shared workspace is not here)")


def _outputs(path: Path, tmp_path: Path, capsys) -> dict:
    """Exit code under --fail-on warning and the text of table, markdown, HTML and JSON."""
    page = tmp_path / "r.html"
    # The table layout: 200 columns (piped without COLUMNS the report is laid out for 80, the compact layout).
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "200")
        rc = main(["check", "--fail-on", "warning", "--html", str(page), str(path)])
    table = capsys.readouterr().out
    assert main(["check", "--fail-on", "warning", "--format", "markdown", str(path)]) == rc
    markdown = capsys.readouterr().out
    assert main(["check", "--fail-on", "warning", "--format", "json", str(path)]) == rc
    report = validate_report(capsys.readouterr().out)
    return {"rc": rc, "table": table, "markdown": markdown, "html": page.read_text(), "json": report}


def _counts(text: str) -> tuple[int, ...]:
    m = COUNTS.search(text)
    assert m, text[-500:]
    return tuple(int(g or 0) for g in m.groups())


def _table_severities(table: str) -> list[str]:
    """The severity column of the findings table, one per numbered row."""
    return re.findall(r"^│ \d+\s+│ (error|warning|info)\s", table, re.M)


def test_decode_eager_counts_what_is_shown_in_every_format(tmp_path, capsys):
    _need(DECODE)
    out = _outputs(DECODE, tmp_path, capsys)
    # launch-bound (warning), capture-scope and gemv-dominance shown; 3 symptoms folded under them; fusion-candidate
    # minor (the steps are host-bound: the fused GPU time is off the critical path, no saving claimed).
    assert _table_severities(out["table"]) == ["warning", "info", "info"]
    assert out["table"].rstrip().splitlines()[-1] == "0 errors, 1 warning, 2 info shown; 3 folded, 1 minor"
    assert _counts(out["markdown"].splitlines()[0]) == (0, 1, 2, 3, 1)
    header = re.search(r"<header>.*?</header>", out["html"]).group()
    assert _counts(header) == (0, 1, 2, 3, 1)
    assert "<div class='v'>3</div><div class='s'>0 error · 1 warning · 2 info · 3 folded · 1 minor</div>" in out["html"]
    report = out["json"]
    # The folded low-utilization warning is judged as its owner (capture-scope, info): no hidden warning.
    assert report["summary"]["by_severity"] == {"error": 0, "warning": 1, "info": 6}
    low = [f for f in report["findings"] if f["rule"] == "gpu-low-utilization"]
    assert [(f["severity"], f["savings_note"]) for f in low] == [("info", "explained by capture-scope (warning on "
                                                                          "its own)")]
    assert out["rc"] == 1  # decided by launch-bound, the warning in the table


def test_a_warning_that_decides_fail_on_is_shown(tmp_path, capsys):
    _need(TRAINING)
    out = _outputs(TRAINING, tmp_path, capsys)
    assert out["rc"] == 1
    shown = _table_severities(out["table"])
    assert shown[0] == "warning" and shown.count("warning") == 1
    errors, warnings, infos, folded, minor = _counts(out["table"].rstrip().splitlines()[-1])
    assert (errors, warnings, infos) == (0, 1, len(shown) - 1)
    assert _counts(out["markdown"].splitlines()[0]) == (errors, warnings, infos, folded, minor)
    assert _counts(re.search(r"<header>.*?</header>", out["html"]).group()) == (errors, warnings, infos, folded, minor)
    report = out["json"]
    assert errors + warnings + infos + folded + minor == report["summary"]["findings"]
    [gaps] = [f for f in report["findings"] if f["severity"] == "warning"]
    assert gaps["rule"] == "gpu-idle-gaps" and not gaps.get("folded_into") and not gaps.get("minor")
    sync = next(f for f in report["findings"] if f["rule"] == "sync-stall")
    assert sync["minor"] and not any(f.get("folded_into") == sync["fingerprint"] for f in report["findings"])
    assert report["summary"]["by_severity"] == {"info": infos + folded + minor, "warning": 1, "error": 0}
