"""One capture exported three ways (``nsys export --type=sqlite|parquetdir|arrowdir``): the same answers.

``../shared/traces/formats/pq_small.tar.xz`` holds an H200 eager-decode capture as ``pq_small.sqlite``,
``pq_small.parquetdir/`` and ``pq_small.arrowdir/``, all written by nsys 2025.3.2 from one report.
``check`` must give the same findings (rule, severity, fingerprint; and the whole JSON envelope once
the trace path is set aside) and ``stats`` the same bytes for every report, on all three.
"""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from nsys_rules.cli import main
from nsys_rules.stats import REPORTS

from ..conftest import SHARED, need_shared

SAMPLE = SHARED / "traces" / "formats" / "pq_small.tar.xz"
FORMATS = ("sqlite", "parquetdir", "arrowdir")


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    need_shared(SAMPLE)
    folder = tmp_path_factory.mktemp("formats")
    with tarfile.open(SAMPLE) as tar:
        try:
            tar.extractall(folder, filter="data")
        except TypeError:  # Python before 3.10.12 / 3.11.4: no extraction filters (the sample is ours)
            tar.extractall(folder)
    paths = {kind: folder / f"pq_small.{kind}" for kind in FORMATS}
    assert all(p.exists() for p in paths.values()), sorted(p.name for p in folder.iterdir())
    return paths


def _cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(list(args))
    return code, out.getvalue()


def test_check_gives_the_same_findings_from_all_three_formats(exports):
    reports = {}
    for kind, path in exports.items():
        code, text = _cli("check", "--format", "json", "--fail-on", "never", str(path))
        assert code == 0, text
        reports[kind] = json.loads(text.replace(str(path), "TRACE"))
    keys = {kind: sorted((f["rule"], f["severity"], f["fingerprint"]) for f in r["findings"])
            for kind, r in reports.items()}
    assert len(keys["sqlite"]) >= 5  # the capture has real findings: launch-bound, low utilization, idle gaps...
    assert keys["parquetdir"] == keys["sqlite"] and keys["arrowdir"] == keys["sqlite"]
    # Not only the keys: messages, metrics, skipped rules, trace metadata, windows, damage.
    assert reports["parquetdir"] == reports["sqlite"] and reports["arrowdir"] == reports["sqlite"]
    assert reports["sqlite"]["traces"][0]["tables"]["kernels"] > 10_000


@pytest.mark.parametrize("report", [name + (f":{v}" if v else "") for name, module in REPORTS.items()
                                    for v in ("", *module.VARIANTS)])
def test_stats_are_the_same_bytes_from_all_three_formats(exports, report):
    outputs = {}
    for kind, path in exports.items():
        code, text = _cli("stats", "--report", report, "--format", "csv", "--percentiles", str(path))
        assert code == 0
        outputs[kind] = text
    # A header and rows; the capture copies nothing (memops) and sampled no GPU metrics (gpu_metric_sum: empty).
    assert outputs["sqlite"].count("\n") >= 2 or report.startswith(("cuda_gpu_mem", "gpu_metric_sum"))
    assert outputs["parquetdir"] == outputs["sqlite"] and outputs["arrowdir"] == outputs["sqlite"]
