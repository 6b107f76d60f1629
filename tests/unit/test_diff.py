"""``diff``: per-step comparison, verdict on direction, the regression gate."""

from __future__ import annotations

import pytest

from nsys_rules.diff import compare, side_summary
from nsys_rules.inputs import open_trace
from tests.unit.test_overview import GEMV, stepped_trace


def side(path):
    trace = open_trace(path)
    try:
        return side_summary(trace)
    finally:
        trace.close()


def test_same_trace_passes_with_no_change(tmp_path):
    s = side(stepped_trace(tmp_path / "a.sqlite"))
    result = compare(s, s)
    assert result.gpu_change_pct == 0
    assert not result.regressed
    assert result.verdict["kind"] == "none"
    assert result.movers == []


def test_slower_kernels_fail_the_gate_and_blame_kernel_time(tmp_path):
    base = side(stepped_trace(tmp_path / "a.sqlite", gemv_ns=100_000))
    new = side(stepped_trace(tmp_path / "b.sqlite", gemv_ns=130_000, steps=9))
    result = compare(base, new, gate_pct=5)
    assert result.gpu_change_pct == pytest.approx(100 * 30_000 / 110_000)
    assert result.regressed
    assert result.verdict["kind"] == "kernel-time"
    top = result.movers[0]
    assert top.name == GEMV and top.delta_ns == pytest.approx(30_000) and top.pct == pytest.approx(30.0)
    gemv = next(c for c in result.classes if c.name == "gemv")
    assert gemv.base_ns == pytest.approx(100_000) and gemv.new_ns == pytest.approx(130_000)
    # A generous gate lets the same change pass.
    assert not compare(base, new, gate_pct=50).regressed


def test_longer_gaps_only_pass_the_gate_and_blame_the_host(tmp_path):
    base = side(stepped_trace(tmp_path / "a.sqlite", host_gap_ns=50_000))
    new = side(stepped_trace(tmp_path / "b.sqlite", host_gap_ns=400_000, gap_ns=60_000))
    result = compare(base, new)
    assert abs(result.gpu_change_pct) < 0.01
    assert not result.regressed
    assert result.verdict["kind"] == "gaps-only"
    assert result.verdict["idle_delta_per_step_ns"] > 300_000


def test_faster_kernels_never_fail(tmp_path):
    base = side(stepped_trace(tmp_path / "a.sqlite", gemv_ns=200_000))
    new = side(stepped_trace(tmp_path / "b.sqlite", gemv_ns=100_000))
    result = compare(base, new, gate_pct=0)
    assert result.gpu_change_pct < -40
    assert not result.regressed
    assert "faster" in result.verdict["text"]


def test_new_kernel_appears_as_new(tmp_path):
    from nsys_rules.testing import TraceBuilder

    base_path = stepped_trace(tmp_path / "a.sqlite")
    b = TraceBuilder()
    t = 1_000_000
    for _ in range(5):
        b.kernel(GEMV, t + 10_000, 100_000)
        b.kernel("extra_copy_kernel(float *)", t + 120_000, 50_000)
        b.nvtx("step", t, t + 180_000)
        t += 230_000
    result = compare(side(base_path), side(b.write(tmp_path / "b.sqlite")))
    extra = next(k for k in result.kernels if k.name.startswith("extra_copy_kernel"))
    assert extra.base_ns == 0 and extra.pct is None and extra.new_ns == pytest.approx(50_000)
    assert result.movers[0] == extra  # +50 us beats the removed 10 us RMSNorm
    assert result.to_json()["movers"][0]["change_pct"] is None
