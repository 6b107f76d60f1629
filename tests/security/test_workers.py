"""Issue 43 item 6: workers that die lose only their trace; concurrent job-summary appends are whole.

``--jobs N``: a worker killed (SIGKILL as the OOM killer sends it, a segfault in an extension) broke the
process pool and every other trace's report was lost. Runs side by side appending ``--github-summary`` to
one file (read + temporary file + rename) kept 4-5 sections of 6.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nsys_rules.outpaths import append_atomic
from nsys_rules.testing import TraceBuilder
from tests.conftest import ROOT, validate_report
from tests.unit.test_plugin_failures import _env, install_plugin

KILLER = '''
import ctypes, os, signal
from dataclasses import dataclass
from nsys_rules.hooks import hookimpl
from nsys_rules.rule import Rule


@dataclass(frozen=True)
class Options:
    """No options."""


class Killer(Rule):
    """Ends its own worker process on traces whose name says how."""

    name = "killer"
    title = "ends its worker"
    requires = ("kernels",)
    Options = Options

    def check(self, ctx):
        label = os.path.basename(ctx.trace.label)
        if label.startswith("sigkill"):
            os.kill(os.getpid(), signal.SIGKILL)
        if label.startswith("segfault"):
            ctypes.string_at(0)
        yield ctx.finding("survived", "nothing")


@hookimpl
def register_rules():
    return [Killer]
'''


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("workers")
    b = TraceBuilder(graph_trace_mode="Graph")
    for i in range(3):
        b.graph_launch(i * 1_000_000, 500_000)
        b.kernel("k", start=i * 1_000_000 + 600_000, duration=100_000)
    first = b.write(folder / "fine0.sqlite")
    for name in ("fine1", "fine2", "fine3", "sigkill", "segfault"):
        shutil.copy(first, folder / f"{name}.sqlite")
    return folder


@pytest.mark.parametrize("how", ["sigkill", "segfault"])
@pytest.mark.parametrize("jobs", ["2", "4"])
def test_a_dead_worker_loses_only_its_trace(traces, tmp_path, how, jobs):
    root = install_plugin(tmp_path / "plugin", "killer-plugin", "killer_plugin", KILLER)
    env = {**os.environ, **_env(root), "PYTHONPATH": os.pathsep.join([str(root), str(ROOT)])}
    paths = [str(traces / f"fine{i}.sqlite") for i in range(4)]
    paths.insert(1, str(traces / f"{how}.sqlite"))
    proc = subprocess.run([sys.executable, "-m", "nsys_rules", "check", "--format", "json", "--fail-on", "never",
                           "--jobs", jobs, *paths], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 4, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-3000:]
    report = validate_report(proc.stdout)
    (error,) = report["errors"]
    assert error["trace"] == paths[1] and "worker process died" in error["error"]
    survived = {f["location"]["trace"] for f in report["findings"] if f["rule"] == "killer"}
    assert survived == {p for p in paths if "fine" in p}  # every other trace was analyzed and reported


SECTION = 300_000  # bytes per appended section: larger than a pipe buffer and a page


def _append(args: tuple[str, int]) -> None:
    path, n = args
    for k in range(5):
        append_atomic(Path(path), f"<{n}:{k}>" + ("x" * SECTION) + f"</{n}:{k}>\n", "summary")


def test_concurrent_summary_appends_are_all_kept_whole(tmp_path):
    """Six processes append five 300 kB sections each to one file: all 30 sections are there, none torn."""
    path = tmp_path / "summary.md"
    path.write_text("before\n", encoding="utf-8")
    with multiprocessing.get_context("fork").Pool(6) as pool:
        pool.map(_append, [(str(path), n) for n in range(6)])
    text = path.read_text(encoding="utf-8")
    assert text.startswith("before\n")
    lines = text.splitlines()[1:]
    assert len(lines) == 30
    for line in lines:
        head = line[:line.index(">") + 1]
        assert line == head + "x" * SECTION + "</" + head[1:], line[:60]
    assert sorted(line[:line.index(">") + 1] for line in lines) == sorted(f"<{n}:{k}>" for n in range(6) for k in range(5))


def test_summary_append_refuses_what_is_not_a_regular_file(tmp_path):
    from nsys_rules.errors import UsageError

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="cannot append to summary"):  # ENXIO: a FIFO without a reader
        append_atomic(fifo, "x", "summary")
