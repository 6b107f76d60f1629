"""The steady-state profile behind the markdown/HTML reports and ``diff``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nsys_rules.inputs import open_trace
from nsys_rules.analysis.intervals import busy_by_group
from nsys_rules.model.overview import build_profile, classify_kernels, step_index
from nsys_rules.testing import TraceBuilder
from nsys_rules.model.windows import steady_state_window

GEMV = "gemv_bf16(const __nv_bfloat16 *, const __nv_bfloat16 *, __nv_bfloat16 *, int, int)"
NORM = "rmsnorm(__nv_bfloat16 *, int)"


def stepped_trace(path: Path, *, steps: int = 6, gemv_ns: int = 100_000, gap_ns: int = 20_000,
                  host_gap_ns: int = 50_000, slow_step: int | None = None) -> Path:
    """``steps`` NVTX 'step' ranges, each: GEMV, a gap, RMSNorm; then the host idles ``host_gap_ns``."""
    b = TraceBuilder()
    t = 1_000_000
    for s in range(steps):
        start = t
        k = t + 10_000
        dur = gemv_ns * (5 if s == slow_step else 1)
        b.kernel(GEMV, k, dur)
        k += dur + gap_ns
        b.kernel(NORM, k, 10_000)
        k += 10_000
        b.nvtx("step", start, k + 5_000)
        t = k + 5_000 + host_gap_ns
    return b.write(path)


def profile_of(path: Path, flagged=()) -> dict:
    trace = open_trace(path)
    try:
        return build_profile(trace, steady_state_window(trace), flagged)
    finally:
        trace.close()


def test_busy_counts_overlap_once_per_group():
    start = np.array([0, 5, 20, 100, 100])
    end = np.array([10, 15, 30, 110, 105])
    group = np.array([0, 0, 0, 1, 1])
    busy = busy_by_group(start, end, group)
    assert busy[0] == 25  # [0,15] + [20,30]
    assert busy[1] == 10  # nested interval adds nothing


def test_step_index_by_launch_time():
    steps = ((100, 200), (300, 400))
    idx = step_index(np.array([50, 100, 250, 399, 500]), steps)
    assert idx.tolist() == [-1, 0, -1, 1, -1]


def test_fallback_classes_when_taxonomy_is_absent():
    import pandas as pd

    from nsys_rules.model import overview

    names = pd.Series(["gemv_bf16", "flash_fwd_kernel", "rmsnorm", "mystery"])
    assert overview._fallback_classify(names).tolist() == ["gemv", "attention", "norm", "other"]
    assert classify_kernels(names).tolist()[:3] == ["gemv", "attention", "norm"]


def test_profile_per_step_numbers(tmp_path):
    p = profile_of(stepped_trace(tmp_path / "t.sqlite"))
    assert p["steps"] == 6 and p["step_range"] == "step"
    assert p["gpu_time_per_step_ns"] == pytest.approx(110_000)
    by_class = {c["class"]: c for c in p["classes"]}
    assert by_class["gemv"]["per_step_ns"] == pytest.approx(100_000)
    assert by_class["norm"]["per_step_ns"] == pytest.approx(10_000)
    assert sum(c["share"] for c in p["classes"]) == pytest.approx(1.0)
    rows = p["timeline"]["rows"]
    assert len(rows) == 6
    # Middle steps: the GPU period runs from this step's first kernel to the next step's first.
    assert rows[2]["wall_ns"] == 10_000 + 100_000 + 20_000 + 10_000 + 5_000 + 50_000  # 195 us period
    assert rows[2]["busy_ns"] == 110_000
    assert rows[2]["idle_ns"] == rows[2]["wall_ns"] - 110_000
    assert p["kernels"][0]["name"] == GEMV and p["kernels"][0]["count"] == 6


def test_distribution_of_a_flagged_kernel_shows_its_tail(tmp_path):
    p = profile_of(stepped_trace(tmp_path / "t.sqlite", steps=8, slow_step=5), flagged=[GEMV])
    (dist,) = p["distributions"]
    assert dist["count"] == 8
    assert dist["p50_ns"] == pytest.approx(100_000)
    assert dist["max_ns"] == pytest.approx(500_000)
    assert sum(dist["counts"]) == 8 and dist["counts"][-1] == 1
    assert len(dist["edges_ns"]) == len(dist["counts"]) + 1


def test_profile_without_steps_uses_the_window(tmp_path):
    b = TraceBuilder()
    for i in range(4):
        b.kernel(GEMV, 1_000_000 + i * 200_000, 100_000)
    p = profile_of(b.write(tmp_path / "t.sqlite"))
    assert p["steps"] == 0 and p["timeline"]["rows"] == []
    assert p["gpu_time_ns"] == 400_000
    assert p["busy_per_step_ns"] == pytest.approx(400_000)
    assert p["step_time_ns"] == pytest.approx(700_000)


def test_typical_step_close_up_is_the_median_step(tmp_path):
    p = profile_of(stepped_trace(tmp_path / "t.sqlite", steps=8, slow_step=5))
    detail = p["timeline"]["typical"]
    assert detail["index"] != 5 and detail["step"] == detail["index"] + 1  # the slow step is not typical
    assert detail["ops"] == [[0, 100_000, "gemv"], [120_000, 10_000, "norm"]]
    assert detail["wall_ns"] == 195_000 and not detail["truncated"]


def test_steps_are_numbered_from_1_everywhere(tmp_path, capsys):
    # The slow step is the sixth: the chart's bar, its tooltip and step-outliers' message all say "step 6".
    from nsys_rules.cli import main

    path = stepped_trace(tmp_path / "t.sqlite", steps=8, slow_step=5)
    p = profile_of(path)
    rows = p["timeline"]["rows"]
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert max(rows, key=lambda r: r["wall_ns"])["step"] == 6
    assert 1 <= p["timeline"]["typical"]["step"] <= 8 and p["timeline"]["typical"]["step"] != 6
    assert main(["check", "--format", "html", "--fail-on", "never", str(path)]) == 0
    page = capsys.readouterr().out
    assert "<title>step 6: wall 595 us" in page and "step 0:" not in page
    assert main(["check", "--format", "json", "--fail-on", "never", "--select", "step-outliers", str(path)]) == 0
    [outlier] = json.loads(capsys.readouterr().out)["findings"]
    assert "step 6 " in outlier["message"]
