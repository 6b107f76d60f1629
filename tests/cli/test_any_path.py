"""Paths are bytes: every command works on a path the OS accepts that is not UTF-8.

A Linux file name is any bytes but ``/`` and NUL; Python holds a non-UTF-8 byte (``b"\\xff"``) as
a lone surrogate (``"\\udcff"``). Each export format is opened under such a folder, the findings
are those of the same export under a plain path, and every output shows the byte as ``\\xff``
(on a strict UTF-8 terminal too, where writing the surrogate would fail).
"""

from __future__ import annotations

import json
import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nsys_rules.cli import main
from nsys_rules.testing import TraceBuilder
from nsys_rules.textsafe import html_safe, shell_word, terminal_safe
from tests.cli.fake_tools import tools
from tests.conftest import ROOT, validate_report
from tests.rules.scenarios import eager_steps
from tests.unit._folders import folder_from_sqlite

#: A folder name that is not UTF-8, as Python holds it.
BAD_NAME = os.fsdecode(b"bad\xffdir")
SHOWN = "bad\\xffdir"
FORMATS = ("sqlite", "parquetdir", "arrowdir")
#: bash reads the suggested shell words back (found before a test empties PATH).
BASH = shutil.which("bash") or "/bin/bash"


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    """One small export in the three formats, under a plain folder (key ``plain-FORMAT``) and a non-UTF-8 one."""
    plain = tmp_path_factory.mktemp("plain")
    builder = TraceBuilder()
    eager_steps(builder, steps=6, per_step=8)
    sqlite = builder.write(plain / "t.sqlite")
    # pyarrow names files in UTF-8 only: the folders are written under the plain path, then copied.
    folder_from_sqlite(sqlite, plain / "t.parquetdir", "parquet")
    folder_from_sqlite(sqlite, plain / "t.arrowdir", "arrow")
    bad = tmp_path_factory.mktemp("paths") / BAD_NAME
    shutil.copytree(plain, bad)
    paths = {f"plain-{k}": plain / f"t.{k}" for k in FORMATS}
    paths.update({k: bad / f"t.{k}" for k in FORMATS})
    return paths


def _strict_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """``nsys-rules`` as a user on a UTF-8 terminal runs it: a surrogate written as is would fail."""
    env = dict(os.environ, PYTHONIOENCODING="utf-8:strict")
    return subprocess.run([sys.executable, "-m", "nsys_rules", *args], capture_output=True, env=env,
                          cwd=cwd or ROOT, timeout=300)


def _findings(report: dict) -> list[tuple]:
    return sorted((f["rule"], f["severity"], f.get("estimated_savings_ns")) for f in report["findings"])


def test_text_from_a_non_utf8_path_shows_the_byte():
    path = f"/data/{BAD_NAME}/t.sqlite"
    assert terminal_safe(path) == f"/data/{SHOWN}/t.sqlite"
    assert html_safe(path) == f"/data/{SHOWN}/t.sqlite"
    word = shell_word(path)
    assert word == f"$'/data/{SHOWN}/t.sqlite'"
    # bash gives back the path's own bytes from the word: it can be pasted.
    shown = subprocess.run([BASH, "-c", f"printf %s {word}"], capture_output=True, check=True, timeout=60).stdout
    assert shown == os.fsencode(path)


@pytest.mark.parametrize("kind", FORMATS)
def test_check_reads_every_format_under_a_non_utf8_folder(exports, kind, capsys):
    rc = main(["check", "--format", "json", str(exports[kind])])
    bad = validate_report(capsys.readouterr().out)
    rc_plain = main(["check", "--format", "json", str(exports[f"plain-{kind}"])])
    plain = validate_report(capsys.readouterr().out)
    assert rc == rc_plain == 0
    # Strict JSON has no lone surrogate: the path shows the byte as \xff, and path_bytes keeps it exactly.
    assert bad["traces"][0]["path"] == terminal_safe(str(exports[kind]))
    assert base64.b64decode(bad["traces"][0]["path_bytes"]) == os.fsencode(exports[kind])
    assert _findings(bad) == _findings(plain) and len(bad["findings"]) >= 2
    assert bad["summary"] == plain["summary"]


@pytest.mark.parametrize("fmt", ["table", "compact", "markdown", "sarif", "html"])
def test_every_format_writes_the_path_escaped_on_a_strict_terminal(exports, fmt, tmp_path):
    done = _strict_cli("check", "--format", fmt, str(exports["parquetdir"]))
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    out = done.stdout.decode("utf-8")  # valid UTF-8: no raw byte, no surrogate
    assert b"\xff" not in done.stdout and "\udcff" not in out
    shown = "bad%FFdir" if fmt == "sarif" else SHOWN  # SARIF names the trace by a file:// URI
    assert shown in out


def test_outputs_written_into_a_non_utf8_folder(exports, capsys):
    folder = exports["sqlite"].parent
    rc = main(["check", str(exports["sqlite"]), "--html", str(folder / "r.html"),
               "--write-baseline", str(folder / "base.json")])
    capsys.readouterr()
    assert rc == 0
    assert "<html" in (folder / "r.html").read_text() and json.loads((folder / "base.json").read_text())
    done = _strict_cli("check", str(exports["sqlite"]), "--baseline", str(folder / "base.json"))
    assert done.returncode == 0
    err = done.stderr.decode("utf-8")
    assert f"already in the baseline {folder}/base.json".replace(BAD_NAME, SHOWN) in err


@pytest.mark.parametrize("kind", FORMATS)
def test_stats_and_diff_under_a_non_utf8_folder(exports, kind, capsys):
    assert main(["stats", "--format", "csv", str(exports[kind])]) == 0
    bad = capsys.readouterr().out
    assert main(["stats", "--format", "csv", str(exports[f"plain-{kind}"])]) == 0
    assert bad == capsys.readouterr().out and "cuda_gpu_kern_sum" in bad or bad.count("\n") > 5
    done = _strict_cli("diff", str(exports["sqlite"]), str(exports[kind]))
    out = done.stdout.decode("utf-8")
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert f"NEW  {exports[kind]}".replace(BAD_NAME, SHOWN) in out


def test_missing_file_under_a_non_utf8_folder_is_one_line(exports):
    done = _strict_cli("check", str(exports["sqlite"].parent / "absent.sqlite"))
    assert done.returncode == 3
    assert done.stderr.decode("utf-8").strip().endswith(f"{SHOWN}/absent.sqlite: no such file; check the path")


def test_profile_and_doctor_in_a_non_utf8_folder(tmp_path, monkeypatch, capsys):
    home = tmp_path / BAD_NAME
    home.mkdir()
    fake = tools(home, monkeypatch)  # the fake nsys, its bin folder and the work folder under the odd name
    program = fake.add_script("prog", "print('decoding')", home / "progs")
    rc = main(["profile", "--dry-run", "-o", str(home / "out"), "--", str(program), "--x"])
    out, _ = capsys.readouterr()
    assert rc == 0
    words = subprocess.run([BASH, "-c", f"printf '%s\\n' {out.strip()}"], capture_output=True, check=True, timeout=60).stdout
    assert words.split(b"\n")[-4:-1] == [os.fsencode(home / "out"), os.fsencode(program), b"--x"]
    # The capture: run from the odd folder, by the nsys in it, the export written under it. (The program
    # itself lies in a plain folder: the fake nsys records the command as text, which SQLite keeps in UTF-8.)
    plain_program = fake.add_script("prog", "print('decoding')", tmp_path / "progs")
    rc = main(["profile", "--format", "json", "--fail-on", "never", "-o", str(home / "run"), "--", str(plain_program)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    [trace] = validate_report(out)["traces"]
    assert trace["tables"]["kernels"] > 0
    assert main(["doctor", "--nsys", str(fake.nsys)]) == 0
    assert f"{SHOWN}/bin/nsys" in capsys.readouterr().out.replace("\n", "")
