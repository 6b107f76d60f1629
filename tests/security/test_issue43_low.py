"""Issue 43's low items of the loading side: rows dropped as damage are said (stats too), and a run that
exports a ``.nsys-rep`` bounds the export in time and leaves no temporary folder when SIGTERM stops it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsys_rules import nsys_run
from nsys_rules.nsys_locate import nsys_version
from nsys_rules.testing import TraceBuilder
from tests import bounded
from tests.fuzz.harness import check_run, run_cli_inprocess

#: A fake nsys whose ``export`` writes its pid beside itself and then hangs (a damaged report, a broken
#: install); ``--version`` hangs too.
HANGING_NSYS = """
import os, sys, time
if sys.argv[1:2] in (["export"], ["--version"]):
    open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "export.pid"), "w").write(str(os.getpid()))
    time.sleep(120)
"""


def _steps(b: TraceBuilder, base: int = 0) -> TraceBuilder:
    for i in range(20):
        b.nvtx("step", base + i * 100_000, base + i * 100_000 + 90_000, registered=False)
        b.kernel("gemv", base + i * 100_000 + 10_000, 20_000)
    return b


def test_stats_says_which_rows_it_left_out(tmp_path):
    """Two kernels that end before they start: check noted them, stats dropped them silently. Now stats says so
    on stderr (its report stays what nsys prints: the 20 sound kernels)."""
    b = _steps(TraceBuilder())
    b.kernel("broken", 5_000_000, -3_000)
    b.kernel("broken", 5_100_000, -3_000)
    trace = b.write(tmp_path / "negative.sqlite")
    run = run_cli_inprocess("stats", "-r", "cuda_gpu_kern_sum", "--format", "csv", str(trace))
    check_run(run, json_output=False)
    assert run.code == 0 and "nsys-rules: note: kernels: 2 row(s) ending before they start dropped" in run.stderr
    rows = run.stdout.strip().splitlines()
    assert len(rows) == 2 and ",20," in rows[1] and "broken" not in run.stdout, run.stdout


def test_times_past_2_53_are_damage_not_missing_ranges(tmp_path):
    """Every NVTX range past 2^53 ns: they are dropped as damage, and the step model said "no NVTX ranges in the
    trace" (add ranges, it told a user who had them). Now it says they were dropped; stats notes it too."""
    trace = _steps(TraceBuilder(), base=2**53).write(tmp_path / "far.sqlite")
    run = run_cli_inprocess("check", "--no-plugins", "--format", "json", str(trace))
    report = check_run(run)
    assert report is not None
    assert any("nvtx: 20 row(s) with an impossible timestamp" in line for line in report["traces"][0]["damage"])
    text = json.dumps(report)
    assert "no NVTX ranges in the trace" not in text
    assert "every one of the trace's 20 NVTX rows was dropped as damage" in text
    stats = run_cli_inprocess("stats", "-r", "nvtx_sum", str(trace))
    check_run(stats, json_output=False)
    assert "note: nvtx: 20 row(s) with an impossible timestamp (beyond 2^53 ns) dropped" in stats.stderr


def _hanging_nsys(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nsys = bin_dir / "nsys"
    nsys.write_text(f"#!{sys.executable}\n{HANGING_NSYS}")
    nsys.chmod(0o755)
    return nsys


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc")
def test_sigterm_during_a_report_export_leaves_no_folder(tmp_path):
    nsys = _hanging_nsys(tmp_path)
    temp = tmp_path / "tmp"
    temp.mkdir()
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"report")
    env = {**os.environ, "TMPDIR": str(temp), "NSYS_RULES_NSYS": str(nsys)}
    proc = bounded.popen([sys.executable, "-m", "nsys_rules", "check", "--no-plugins", str(report)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pid_file = nsys.parent / "export.pid"
    deadline = time.monotonic() + 60
    while not pid_file.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_file.exists(), bounded.finish(proc, 10)
    time.sleep(0.2)  # the pid is written first thing: let the export's folder exist a moment
    assert [p.name[:11] for p in temp.iterdir()] == ["nsys-rules-"]
    proc.send_signal(signal.SIGTERM)
    bounded.finish(proc, 30)
    assert proc.returncode == -signal.SIGTERM  # ended by the signal, as the sender expects
    assert list(temp.iterdir()) == []  # the export's folder is gone
    assert not _running(int(pid_file.read_text()))  # and so is the export


def test_a_hung_export_is_stopped_at_its_time_limit(tmp_path, monkeypatch):
    nsys = _hanging_nsys(tmp_path)
    temp = tmp_path / "tmp"
    temp.mkdir()
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"report")
    monkeypatch.setenv("NSYS_RULES_NSYS", str(nsys))
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setenv("COLUMNS", "")
    monkeypatch.setattr("tempfile.tempdir", None)  # tempfile reads TMPDIR again
    monkeypatch.setattr(nsys_run, "EXPORT_SECONDS", 1.0)
    start = time.monotonic()
    run = run_cli_inprocess("check", "--no-plugins", str(report))
    assert time.monotonic() - start < 30
    check_run(run, json_output=False)
    assert run.code == 3 and "`nsys export` did not finish within 1 s" in run.stderr, run.stderr
    assert list(temp.iterdir()) == []


def test_the_export_time_limit_grows_with_the_report(tmp_path):
    report = tmp_path / "big.nsys-rep"
    with open(report, "wb") as fh:
        fh.truncate(500 * 2**20)  # sparse: 500 MB long, nothing stored
    assert nsys_run.export_time_limit(report) == nsys_run.EXPORT_SECONDS + 500 * nsys_run.EXPORT_SECONDS_PER_MB
    assert nsys_run.export_time_limit(tmp_path / "absent.nsys-rep") == nsys_run.EXPORT_SECONDS


def test_nsys_version_is_bounded_in_time(tmp_path):
    nsys = _hanging_nsys(tmp_path)
    start = time.monotonic()
    with pytest.raises(OSError, match="did not answer within 1 s"):
        nsys_version(nsys, timeout=1)
    assert time.monotonic() - start < 10
