"""Every usage or config error exits 2 with one short line; Ctrl-C exits 130 with one line and leaves nothing.

The cases are bad values for the flags and config keys (each once ended in exit 4, an internal
error, a hang or a silent success), and interrupts at start-up and during a ``.nsys-rep`` export.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import EXAMPLE, ROOT
from tests.fuzz.harness import run_cli_inprocess, strict_json

E = str(EXAMPLE)
LONG = "n" * 100_000

FLAG_CASES = {
    "--set nan": ["check", "--set", "kernel-tail.min_share_pct=nan", E],
    "--set -inf (sarif)": ["check", "--format", "sarif", "--set", "kernel-tail.min_share_pct=-inf", E],
    "--set inf int": ["check", "--set", "kernel-tail.min_count=1e999", E],
    "--set huge size": ["check", "--set", "gemv-dominance.weight_bytes=1e999", E],
    "--set nan size": ["check", "--set", "gemv-dominance.weight_bytes=nan", E],
    "--max-memory nan": ["check", "--max-memory", "nan", E],
    "--max-memory inf": ["check", "--max-memory", "inf", E],
    "--max-memory 1e-9": ["check", "--max-memory", "1e-9", E],
    "--max-memory 1e999G": ["check", "--max-memory", "1e999G", E],
    "stats --max-memory nan": ["stats", "--report", "cuda_gpu_kern_sum", "--max-memory", "nan", E],
    "--rule-timeout nan": ["check", "--rule-timeout", "nan", E],
    "--select ALL,typo": ["check", "--select", "ALL,kernel-tial", E],
    "--select empty": ["check", "--select", ",", E],
    "--filter-nvtx empty": ["check", "--filter-nvtx", "", E],
    "--filter-time empty": ["check", "--filter-time", " ", E],
    "--filter-nvtx 100 kB": ["check", "--filter-nvtx", LONG, E],
    "stats --filter-nvtx 100 kB": ["stats", "--report", "nvtx_sum", "--filter-nvtx", LONG + "x", E],
    "--config /dev/zero": ["check", "--config", "/dev/zero", E],
    "--baseline /dev/zero": ["check", "--baseline", "/dev/zero", E],
    "model_config /dev/zero": ["check", "--set", "debug-build.model_config=/dev/zero", E],
    "diff --gate nan": ["diff", "--gate", "nan", E, E],
    "diff --gate inf": ["diff", "--gate", "inf", E, E],
    "diff --config /dev/zero": ["diff", "--config", "/dev/zero", E, E],
    "diff --host-spread -1": ["diff", "--host-spread", "-1", E, E],
    "diff --host-spread nan": ["diff", "--host-spread", "nan", E, E],
    "diff three traces without --new": ["diff", E, E, E],
    "explain --output a file": ["explain", "--all", "--output", E],
    "explain --output unreachable": ["explain", "--all", "--output", "/proc/self/nope/x"],
}


def _usage_error(run) -> None:
    assert run.code == 2, (run.code, run.stderr[-500:])
    assert run.stdout == "" and "Traceback" not in run.stderr and "internal error" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nsys-rules: ") and len(lines[0]) < 600, run.stderr[:800]


@pytest.mark.parametrize("case", sorted(FLAG_CASES))
def test_bad_flag_is_one_line_and_exit_2(case):
    if "/dev/zero" in " ".join(FLAG_CASES[case]) and not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    _usage_error(run_cli_inprocess(*FLAG_CASES[case][:1], "--no-plugins", *FLAG_CASES[case][1:])
                 if FLAG_CASES[case][0] not in ("stats",) else run_cli_inprocess(*FLAG_CASES[case]))


CONFIG_CASES = {
    "max-memory nan": "max-memory = nan\n",
    "max-memory inf": "max-memory = inf\n",
    "max-memory 1e999": "max-memory = 1e999\n",
    "rule-timeout text": 'rule-timeout = "soon"\n',
    "rule-timeout 0": "rule-timeout = 0\n",
    "option nan": "[rules.kernel-tail]\nmin_share_pct = nan\n",
    "option inf": "[rules.kernel-tail]\nmin_share_pct = inf\n",
    "option 1e400": "[rules.kernel-tail]\nmin_share_pct = 1e400\n",
    "size option 1e999": '[rules.gemv-dominance]\nweight_bytes = "1e999"\n',
    "select ALL and a typo": 'select = ["ALL", "kernel-tial"]\n',
}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_bad_config_value_is_one_line_and_exit_2(tmp_path, case):
    config = tmp_path / "nsys-rules.toml"
    config.write_text(CONFIG_CASES[case])
    _usage_error(run_cli_inprocess("check", "--no-plugins", "--config", str(config), E))


def test_fifo_config_and_baseline_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    _usage_error(run_cli_inprocess("check", "--no-plugins", "--config", str(fifo), E))
    _usage_error(run_cli_inprocess("check", "--no-plugins", "--baseline", str(fifo), E))


def test_huge_baseline_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from nsys_rules import userfiles

    big = tmp_path / "known.json"
    big.write_text('{"findings": []}' + " " * 4096)
    monkeypatch.setattr(userfiles, "TEXT_LIMIT", 1024)
    run = run_cli_inprocess("check", "--no-plugins", "--baseline", str(big), E)
    _usage_error(run)
    assert "over the 1,024-byte limit" in run.stderr


def test_long_value_is_cut_in_the_error_line():
    run = run_cli_inprocess("check", "--no-plugins", "--filter-nvtx", LONG, E)
    assert "characters" in run.stderr and len(run.stderr) < 400


def test_json_and_sarif_stay_valid_when_a_plugin_option_is_nan(monkeypatch):
    """A plugin's own default can be NaN; the outputs write null instead of invalid JSON."""
    from dataclasses import dataclass

    from nsys_rules.commands import check as check_cmd
    from nsys_rules.hooks import hookimpl
    from nsys_rules.plugin_manager import build_registry
    from nsys_rules.rule import Rule

    @dataclass(frozen=True)
    class Options:
        """A NaN default."""

        level: float = float("nan")

    class Nan(Rule):
        """Finds nothing."""

        name = "nan-default"
        requires = ("kernels",)

        def check(self, ctx):
            return []

    Nan.Options = Options

    class Plugin:
        @hookimpl
        def register_rules(self):
            return [Nan]

    monkeypatch.setattr(check_cmd, "registry_for", lambda a: build_registry(autoload=False, extra=(("n", Plugin()),)))
    for fmt in ("json", "sarif"):
        run = run_cli_inprocess("check", "--format", fmt, "--fail-on", "never", E)
        assert run.code == 0, run.stderr
        doc = strict_json(run.stdout)
        text = json.dumps(doc)
        assert '"level": null' in text


# -- Ctrl-C ----------------------------------------------------------------------------------
def test_interrupt_while_the_commands_load_is_one_line(monkeypatch):
    import importlib

    from nsys_rules import cli

    real = importlib.import_module

    def interrupted(name, package=None):
        if name.startswith(".commands."):
            raise KeyboardInterrupt
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", interrupted)
    run = run_cli_inprocess("check", E)
    assert run.code == 130 and run.stderr == "nsys-rules: interrupted\n"
    assert cli.main is not None


@pytest.mark.parametrize("delay", [0.15, 0.3, 0.4, 0.5, 0.6, 0.8])
def test_interrupt_at_start_up_prints_no_traceback(delay):
    proc = subprocess.Popen([sys.executable, "-m", "nsys_rules", "check", "--no-plugins", E], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert proc.returncode in (0, 130) and (proc.returncode == 0 or err == "nsys-rules: interrupted\n"), (proc.returncode, err)


def test_interrupt_during_nsys_rep_export_leaves_no_temporary_folder(tmp_path):
    """A slow `nsys export` interrupted: exit 130, one line, and the export folder is gone."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nsys"
    fake.write_text("#!/bin/sh\nsleep 30\n")
    fake.chmod(0o755)
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"not really a report")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ.get('PATH', '')}", TMPDIR=str(tmpdir))
    proc = subprocess.Popen([sys.executable, "-m", "nsys_rules", "check", "--no-plugins", str(report)], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    # The export has begun when its folder is there. Not any entry: tempfile.gettempdir() first probes TMPDIR
    # with a file of a random name (jtbvh682) that it removes at once; a Ctrl-C sent when that file shows can
    # land before the removal, and the file stays (seen once in a full run on 2 busy cores).
    while not any(n.startswith("nsys-rules-") for n in os.listdir(tmpdir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any(n.startswith("nsys-rules-") for n in os.listdir(tmpdir)), "the export never started"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err == "nsys-rules: interrupted\n", (proc.returncode, err)
    assert os.listdir(tmpdir) == []
