"""Many traces at once: --jobs, --dask, the cross-trace summary and the progress bar."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from nsys_rules.settings import Settings
from nsys_rules.engine import run_check
from nsys_rules.formatters.json_out import envelope
from nsys_rules.inputs import open_trace
from nsys_rules.parallel import Progress, cross_trace_summary, kernel_profile, run_many
from nsys_rules.plugin_manager import build_registry
from nsys_rules.testing import TraceBuilder
from tests import bounded
from tests.conftest import ROOT, run_cli, validate_report

#: Four traces of different kinds (eager, MoE, contention, request): enough to catch order bugs.
SUBSET = ("decode_eager.sqlite", "moe_eager.sqlite", "engine_contention.sqlite", "request_eager.sqlite")


def _rank(tmp_path: Path, name: str, gemv_us: int, steps: int = 12) -> Path:
    """A small decode-like trace: one GEMV and one norm kernel per step; ranks differ in GEMV time."""
    b = TraceBuilder(command=["target/release/server"])
    for step in range(steps):
        t0 = step * 1_000_000
        b.nvtx("decode_step", t0, t0 + 900_000)
        b.kernel("gemv_kernel", start=t0 + 10_000, duration=gemv_us * 1_000)
        b.kernel("rms_norm_kernel", start=t0 + 500_000, duration=20_000)
    return b.write(tmp_path / name)


def _comparable(report) -> dict:  # type: ignore[no-untyped-def]
    data = envelope(report)
    data.pop("cross_trace", None)
    return json.loads(json.dumps(data, default=str))


# -- same findings as a serial run ------------------------------------------------------------
def test_jobs_and_dask_give_the_serial_findings(h200):
    paths = [h200 / n for n in SUBSET]
    registry = build_registry(autoload=False)
    settings = Settings()
    serial = run_check(paths, registry, settings, lambda p: open_trace(p, registry.loaders))
    assert serial.findings, "the subset must produce findings for the comparison to mean something"
    pooled = run_many(paths, registry, settings, jobs=2, autoload_plugins=False)
    assert _comparable(pooled) == _comparable(serial)
    dask_distributed = pytest.importorskip("dask.distributed", reason="dask[distributed] is not installed")
    with dask_distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                       dashboard_address=None) as cluster, dask_distributed.Client(cluster) as client:
        on_dask = run_many(paths, registry, settings, jobs=2, autoload_plugins=False, dask_client=client)
    assert _comparable(on_dask) == _comparable(serial)
    # The summary names one of the traces as slowest, and its kernel time is the largest.
    summary = pooled.cross_trace
    assert summary is not None and len(summary["traces"]) == len(SUBSET)
    kernel_ns = {t["path"]: t["kernel_ns"] for t in summary["traces"]}
    assert summary["slowest"]["kernel_ns"] == max(kernel_ns.values()) == kernel_ns[summary["slowest"]["path"]]


def test_whole_folder_with_jobs_matches_serial_json(h200):
    serial = run_cli("check", str(h200), "--format", "json", "--fail-on", "never", "--no-plugins")
    pooled = run_cli("check", str(h200), "--format", "json", "--fail-on", "never", "--no-plugins", "--jobs", "2")
    assert serial.returncode == pooled.returncode == 0, serial.stderr + pooled.stderr
    a, b = validate_report(serial.stdout), validate_report(pooled.stdout)
    assert a == b
    assert len(a["traces"]) == len(list(h200.glob("*.sqlite")))
    assert a["cross_trace"]["kernels"], "traces of one model share kernels"


# -- the summary ------------------------------------------------------------------------------
def test_cross_trace_summary_finds_the_slow_rank():
    profiles = [
        ("rank0.sqlite", {"kernel_ns": 1000, "span_ns": 5000, "kernels": {"gemv": [600, 10], "norm": [400, 10]}}),
        ("rank1.sqlite", {"kernel_ns": 1600, "span_ns": 6000, "kernels": {"gemv": [1200, 10], "norm": [400, 10]}}),
        ("rank2.sqlite", {"kernel_ns": 1100, "span_ns": 5000, "kernels": {"gemv": [650, 10], "norm": [450, 10],
                                                                          "only_here": [5000, 1]}}),
    ]
    summary = cross_trace_summary(profiles)
    assert summary["slowest"] == {"path": "rank1.sqlite", "kernel_ns": 1600, "median_kernel_ns": 1100.0,
                                  "ratio_to_median": pytest.approx(1600 / 1100)}
    kernels = {k["kernel"]: k for k in summary["kernels"]}
    assert "only_here" not in kernels  # in one trace only: nothing to compare
    gemv = kernels["gemv"]
    assert gemv["slowest"] == "rank1.sqlite" and gemv["median_ns"] == 650 and gemv["excess_ns"] == 550
    assert gemv["per_trace_ns"] == [600, 1200, 650]
    assert summary["kernels"][0]["kernel"] == "gemv"  # largest excess first
    assert kernels["norm"]["slowest"] == "rank2.sqlite" and kernels["norm"]["excess_ns"] == 50


def test_kernel_profile_sums_time_per_kernel(tmp_path):
    trace = open_trace(_rank(tmp_path, "r.sqlite", gemv_us=40, steps=5))
    try:
        prof = kernel_profile(trace)
    finally:
        trace.close()
    assert prof["kernels"]["gemv_kernel"] == [5 * 40_000, 5]
    assert prof["kernels"]["rms_norm_kernel"] == [5 * 20_000, 5]
    assert prof["kernel_ns"] == 5 * 60_000
    assert prof["span_ns"] == 4 * 1_000_000 + 500_000 + 20_000 - 10_000


def test_cli_jobs_reports_per_trace_and_the_summary(tmp_path):
    for i, gemv in enumerate((40, 40, 90)):
        _rank(tmp_path, f"rank{i}.sqlite", gemv)
    proc = run_cli("check", str(tmp_path), "--jobs", "2", "--format", "json", "--no-plugins", "--fail-on", "never")
    assert proc.returncode == 0, proc.stderr
    data = validate_report(proc.stdout)
    assert [Path(t["path"]).name for t in data["traces"]] == ["rank0.sqlite", "rank1.sqlite", "rank2.sqlite"]
    summary = data["cross_trace"]
    assert Path(summary["slowest"]["path"]).name == "rank2.sqlite"
    gemv = next(k for k in summary["kernels"] if k["kernel"] == "gemv_kernel")
    assert gemv["per_trace_ns"] == [12 * 40_000, 12 * 40_000, 12 * 90_000]
    assert gemv["excess_ns"] == 12 * 50_000
    table = run_cli("check", str(tmp_path), "--jobs", "2", "--no-plugins", "--fail-on", "never")
    assert "across 3 traces: slowest" in table.stdout and "rank2.sqlite" in table.stdout


def test_one_trace_has_no_summary(tmp_path):
    proc = run_cli("check", str(_rank(tmp_path, "a.sqlite", 40)), "--jobs", "2", "--format", "json", "--no-plugins",
                   "--fail-on", "never")
    assert proc.returncode == 0, proc.stderr
    assert "cross_trace" not in validate_report(proc.stdout)


def test_unreadable_trace_among_many_is_one_line_exit_3(tmp_path):
    _rank(tmp_path, "good.sqlite", 40)
    (tmp_path / "broken.sqlite").write_bytes(b"not a database at all, just text" * 10)
    proc = run_cli("check", str(tmp_path), "--jobs", "2", "--no-plugins")
    assert proc.returncode == 3
    assert proc.stderr.count("\n") == 1 and "broken.sqlite" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_jobs_value_is_a_usage_error(tmp_path):
    proc = run_cli("check", str(_rank(tmp_path, "a.sqlite", 40)), "--jobs", "-1", "--no-plugins")
    assert proc.returncode == 2 and "--jobs" in proc.stderr


# -- progress ---------------------------------------------------------------------------------
def test_progress_is_silent_off_a_terminal(tmp_path):
    for i in range(2):
        _rank(tmp_path, f"r{i}.sqlite", 40)
    proc = run_cli("check", str(tmp_path), "--jobs", "2", "--no-plugins", "--fail-on", "never")
    assert proc.returncode == 0
    assert proc.stderr == ""


def test_progress_bar_on_a_terminal(tmp_path):
    for i in range(2):
        _rank(tmp_path, f"r{i}.sqlite", 40)
    master, slave = pty.openpty()
    proc = bounded.popen([sys.executable, "-m", "nsys_rules", "check", str(tmp_path), "--jobs", "2", "--no-plugins",
                          "--fail-on", "never"], stdout=subprocess.DEVNULL, stderr=slave, cwd=ROOT,
                         env=dict(os.environ))
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    bounded.finish(proc, 60)
    assert proc.returncode == 0
    text = seen.decode(errors="replace")
    assert "1/2 traces" in text and "2/2 traces" in text
    assert text.endswith("\r\x1b[K")  # the bar is cleared at the end


def test_progress_object_counts_and_clears():
    class Tty:
        def __init__(self) -> None:
            self.text = ""

        def isatty(self) -> bool:
            return True

        def write(self, s: str) -> None:
            self.text += s

        def flush(self) -> None:
            pass

    out = Tty()
    bar = Progress(4, out)  # type: ignore[arg-type]
    for name in ("a", "b", "c", "d"):
        bar.step(f"/x/{name}.sqlite")
    bar.close()
    assert "4/4 traces  d.sqlite" in out.text and "[" + "#" * 24 + "]" in out.text
    silent = Tty()
    silent.isatty = lambda: False  # type: ignore[method-assign]
    bar = Progress(4, silent)  # type: ignore[arg-type]
    bar.step("a")
    bar.close()
    assert silent.text == ""
