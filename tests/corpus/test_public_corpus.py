"""Every public export in ../shared/corpus/public runs through `check --format json` cleanly.

76 files from nsys 2020.3 to 2026.2 (51 real exports, 22 converted reports, 3 big converted
reports xz-compressed in big/): exit 0 or 1, JSON valid against the shipped schema, no rule
or plugin error, no traceback, every skipped rule with its reason and fix, and the export's
nsys version detected (from metadata, or inferred for exports older than 2022.1).
The big ones are unpacked into a temp dir once per session and run as a subprocess, the way
users run them, measuring the child's peak RSS (budget: 350 MB, the 102 MB one included).
"""

from __future__ import annotations

import json
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nsys_rules import cli
from nsys_rules.report import CUDA_TABLES
from nsys_rules.inputs import open_trace
from tests.answer_properties import savings_problems, severity_problems
from tests.conftest import CORPUS, validate_report

PEAK_RSS_LIMIT = 350 * 2**20


def _cases() -> list:
    if not CORPUS.exists():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{CORPUS} is absent (no shared corpus beside "
                                                                   "the checkout)"))]
    files = sorted(CORPUS.glob("*.sqlite")) + sorted((CORPUS / "converted").glob("*.sqlite"))
    return [pytest.param(p, id=str(p.relative_to(CORPUS))) for p in files]


def _big_cases() -> list:
    if not CORPUS.exists():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{CORPUS} is absent"))]
    return [pytest.param(p, id=p.name) for p in sorted((CORPUS / "big").glob("*.sqlite.xz"))]


def _manifest() -> dict[str, dict]:
    path = CORPUS / "manifest.json"
    return {item["name"]: item for item in json.loads(path.read_text())} if path.exists() else {}


MANIFEST = _manifest()


def check_report(report: dict, path: Path) -> None:
    """What every corpus report must satisfy beyond the schema."""
    assert report["errors"] == [], f"{path.name}: {report['errors']}"
    assert report["summary"]["exit_code"] in (0, 1)
    (trace,) = report["traces"]
    for skipped in report["skipped"]:
        assert skipped["reason"] and skipped.get("fix"), f"{path.name}: skip without reason/fix: {skipped}"
    ran = {r["name"] for r in report["rules"]} - {s["rule"] for s in report["skipped"]}
    assert {f["rule"] for f in report["findings"]} <= ran
    # The version: from export metadata, or inferred (and then nsys_version is null = unknown).
    assert trace["nsys_version"] or trace.get("nsys_version_inferred"), f"{path.name}: no version at all"
    assert savings_problems(report) == []  # savings within what the step budget can give back
    assert severity_problems(report) == []  # no folded or minor finding above what is shown
    known = MANIFEST.get(path.name)
    if known and known.get("nsys_version"):
        assert trace["nsys_version"] == known["nsys_version"]
        if known.get("export_schema"):
            assert trace["export_schema_version"] == known["export_schema"]


@pytest.mark.parametrize("path", _cases())
def test_check_json_is_clean(path, capsys):
    code = cli.main(["check", "--format", "json", str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, err
    if code == 3:
        # A capture without any CUDA activity has nothing to judge: exit 3 and one stderr line, as the
        # trace's own tables confirm.
        assert out == "" and err.count("\n") == 1 and "no CUDA activity" in err, err
        trace = open_trace(path)
        try:
            assert not any(trace.row_count(t) for t in CUDA_TABLES if trace.has(t))
        finally:
            trace.close()
        return
    assert code in (0, 1), f"{path.name}: exit {code}: {err.strip()[:500]}"
    report = validate_report(out)
    assert report["summary"]["exit_code"] == code
    check_report(report, path)


@pytest.fixture(scope="session")
def unpacked_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("corpus-big")


def unpack(xz_path: Path, into: Path) -> Path:
    """Decompress ``x.sqlite.xz`` into ``into`` once (streamed, so memory stays flat)."""
    target = into / xz_path.name[: -len(".xz")]
    if not target.exists():
        partial = target.with_suffix(".part")
        with lzma.open(xz_path) as src, open(partial, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        partial.rename(target)
    return target


#: Starts nsys-rules from a small fresh interpreter and writes its peak RSS (KiB) to the file named first:
#: a child forked straight from the test process starts with that process's peak (Linux keeps ru_maxrss
#: across fork and exec), which grows with every test before this one.
_LAUNCHER = """
import os, subprocess, sys
proc = subprocess.Popen([sys.executable, "-m", "nsys_rules", *sys.argv[2:]])
_, status, usage = os.wait4(proc.pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_with_rss(*args: str, timeout: float | None = None) -> tuple[int, str, str, int]:
    """``nsys-rules ARGS`` as a child process: exit code, stdout, stderr and the child's peak RSS (bytes)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
            tempfile.TemporaryDirectory() as work:
        rss_file = os.path.join(work, "rss")
        proc = subprocess.run([sys.executable, "-c", _LAUNCHER, rss_file, *args], stdout=out, stderr=err,
                              timeout=timeout)
        out.seek(0)
        err.seek(0)
        with open(rss_file) as f:
            rss_kib = int(f.read())
        return proc.returncode, out.read(), err.read(), rss_kib * 1024


@pytest.mark.skipif(not hasattr(os, "wait4"), reason="peak RSS needs os.wait4 (Linux/macOS)")
@pytest.mark.parametrize("xz_path", _big_cases())
def test_big_report_is_clean_and_fits_in_memory(xz_path, unpacked_dir):
    path = unpack(xz_path, unpacked_dir)
    code, out, err, rss = run_with_rss("check", "--format", "json", str(path))
    assert "Traceback" not in err and "internal error" not in err, err
    assert code in (0, 1), f"{path.name}: exit {code}: {err.strip()[:500]}"
    report = validate_report(out)
    check_report(report, path)
    size = path.stat().st_size
    assert rss < PEAK_RSS_LIMIT, f"{path.name} ({size / 2**20:.0f} MB): peak RSS {rss / 2**20:.0f} MB"
