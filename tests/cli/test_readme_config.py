"""The README's configuration example, run as written: it does what the README says it does.

Its ``[tool.nsys-rules.severity] kernel-tail = "error"`` makes kernel-tail's findings errors, so a
real tail fails the gate; a kernel-tail finding under the noise floor (one that saves 0 ns) stays
minor, info, as every finding under the floor does, and never fails a CI gate as an "error".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from nsys_rules.cli import main
from nsys_rules.testing import TraceBuilder
from tests.conftest import ROOT
from tests.rules.test_kernel_tail import loop, moe_like

README = ROOT / "README.md"
EXAMPLE = ROOT / "examples" / "rust_release_build.sqlite"


def readme_config(folder: Path) -> Path:
    """The README's TOML example as the ``pyproject.toml`` of ``folder``."""
    [block] = [b for b in re.findall(r"```toml\n(.*?)```", README.read_text(), re.S) if "[tool.nsys-rules]" in b]
    assert 'kernel-tail = "error"' in block  # the example this test is about
    path = folder / "pyproject.toml"
    path.write_text(block)
    return path


def _check(trace: Path, capsys) -> tuple[int, dict]:
    rc = main(["check", "--format", "json", str(trace)])
    return rc, json.loads(capsys.readouterr().out)


def test_the_readme_config_makes_a_real_tail_an_error(tmp_path, monkeypatch, capsys):
    b = TraceBuilder()
    loop(b, moe_like())  # 10 % of the invocations 10x slower: 3.6 ms of 40 ms steps
    trace = b.write(tmp_path / "tail.sqlite")
    readme_config(tmp_path)
    monkeypatch.chdir(tmp_path)
    rc, report = _check(trace, capsys)
    tails = [f for f in report["findings"] if f["rule"] == "kernel-tail" and f["title"] != "Host API tail"]
    assert [(f["severity"], f.get("minor", False)) for f in tails] == [("error", False)]
    assert tails[0]["estimated_savings_ns"] == 20 * 180_000
    assert rc == 1 and report["summary"]["exit_code"] == 1


def test_the_readme_config_leaves_a_tail_that_saves_nothing_minor(tmp_path, monkeypatch, capsys):
    readme_config(tmp_path)
    monkeypatch.chdir(tmp_path)
    rc, report = _check(EXAMPLE, capsys)
    tails = [f for f in report["findings"] if f["rule"] == "kernel-tail"]
    assert tails and all(f["estimated_savings_ns"] == 0 for f in tails)
    assert all(f["severity"] == "info" and f["minor"] for f in tails)  # was "error": a 0 ns saving failing CI
    assert report["summary"]["by_severity"]["error"] == 0
    # fail-on = "warning" (the example's): the exit code is the warning's, shown in the table.
    assert rc == 1 and report["summary"]["by_severity"]["warning"] >= 1
    monkeypatch.setenv("COLUMNS", "200")  # the table layout (piped, 80 columns: the compact one)
    main(["check", str(EXAMPLE)])
    table = capsys.readouterr().out
    assert "minor: " in table and "kernel-tail" in table.split("minor: ", 1)[1].splitlines()[0]
    assert re.search(r"^│ \d+\s+│ warning", table, re.M)


def test_the_quickstart_says_what_a_newcomer_needs():
    """The venv step comes first, and the fuzz budgets it names are the ones the tests run."""
    from tests.fuzz.test_fuzz_inputs import COUNTS, LONG_COUNTS

    text = README.read_text()
    quick = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = re.search(r"```bash\n(.*?)```", quick, re.S).group(1).splitlines()
    assert commands[0].startswith("python3 -m venv .venv && . .venv/bin/activate")
    assert "python -m pytest" in commands[-1]
    assert re.search(r"about \d+ minutes on 2 cores", quick)
    assert f"({sum(COUNTS.values())} damaged inputs)" in quick and f"({sum(LONG_COUNTS.values()):,}," in quick
    assert "NSYS_RULES_FUZZ=long" in quick and "Three tests render the HTML report in a" in quick
