"""gpu-idle-gaps: interval helpers, the 100 us default, overhead, start-up phase."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.findings import Severity
from nsys_rules.analysis.device_time import chunk_utilization, merge_low_chunks
from nsys_rules.analysis.intervals import idle_gaps, merge_intervals
from nsys_rules.testing import TraceBuilder, run_rule
from nsys_rules.testing import metric_values as values

T0 = 100_000_000



def busy_steps(b: TraceBuilder, steps: int, *, gap: int, t0: int = T0, kernel_ns: int = 900_000) -> int:
    """Steps of one long kernel each, ``gap`` ns of idle GPU between them; returns the end."""
    t = t0
    for _ in range(steps):
        b.nvtx("decode_step", t - 10_000, t + kernel_ns + 1_000)  # the launch call (5 us ahead) is in the step
        b.kernel("gemv", start=t, duration=kernel_ns)
        t += kernel_ns + gap
    return t


def test_merge_and_gaps_ignore_overlap():
    s, e = merge_intervals(np.array([0, 5, 20]), np.array([10, 8, 30]))
    assert s.tolist() == [0, 20] and e.tolist() == [10, 30]
    starts, lengths = idle_gaps(np.array([0, 5, 20]), np.array([10, 8, 30]))
    assert starts.tolist() == [10] and lengths.tolist() == [10]


def test_chunk_utilization_matches_a_direct_sum():
    rng = np.random.default_rng(1)
    s = np.sort(rng.integers(0, 10_000, 200))
    e = s + rng.integers(1, 300, 200)
    lo, hi = int(s.min()), int(e.max())
    starts, lengths, used = chunk_utilization(s, e, lo, hi, 30)
    for a, n, u in zip(starts, lengths, used, strict=True):
        direct = (np.minimum(e, a + n) - np.maximum(s, a)).clip(0).sum()
        assert u == pytest.approx(100 * direct / n)
    assert lengths.sum() == hi - lo


def test_low_chunks_merge_with_a_duration_weighted_average():
    merged = merge_low_chunks(np.array([0, 10, 20, 30]), np.array([10, 10, 10, 5]), np.array([10.0, 60, 20, 40]), 50)
    assert merged == [(0, 10, 10.0), (20, 15, pytest.approx((20 * 10 + 40 * 5) / 15))]



@pytest.mark.parametrize("gap,flagged", [(99_999, False), (100_000, True)])
def test_default_threshold_is_100_us(tmp_path, gap, flagged):
    b = TraceBuilder()
    busy_steps(b, 3, gap=gap)
    found = run_rule("gpu-idle-gaps", b.write(tmp_path / "t.sqlite"))
    assert bool(found) is flagged
    if flagged:  # one finding per process, device and phase, holding both gaps
        assert len(found) == 1 and values(found[0])["gaps"] == 2 and values(found[0])["idle_time"] == 2 * gap


def test_many_run_gaps_group_into_one_warning(tmp_path):
    b = TraceBuilder()
    busy_steps(b, 12, gap=300_000)  # 25 % of the time idle while the program runs
    found = run_rule("gpu-idle-gaps", b.write(tmp_path / "t.sqlite"))
    assert len(found) == 1
    f = found[0]
    assert f.severity == Severity.WARNING and values(f)["gaps"] == 11 and values(f)["idle_time"] == 11 * 300_000
    # Idle time is a symptom: the saving belongs to its cause (sync-stall, launch-bound...), which the
    # report folds this finding into; alone it claims nothing.
    assert f.location.start_ns == T0 + 900_000 and f.estimated_savings_ns is None
    assert len(run_rule("gpu-idle-gaps", b.write(tmp_path / "t.sqlite"), options={"report": "all"})) == 11


def test_gap_under_profiler_overhead_is_dropped_but_not_under_dlopen(tmp_path):
    b = TraceBuilder()
    end = busy_steps(b, 2, gap=1_000_000)
    gap_start = end - 1_000_000 - 900_000 - 1_000_000
    b.overhead("CUPTI Buffer flush", gap_start + 10, 10)
    assert run_rule("gpu-idle-gaps", b.write(tmp_path / "t.sqlite")) == []
    b2 = TraceBuilder()
    busy_steps(b2, 2, gap=1_000_000)
    b2.overhead("dlopen(libcudnn.so.9)", gap_start + 10, 10)
    assert len(run_rule("gpu-idle-gaps", b2.write(tmp_path / "u.sqlite"))) == 1


def test_start_up_gaps_are_info(tmp_path):
    b = TraceBuilder()
    b.kernel("init_weights", start=T0 - 60_000_000, duration=1_000_000)  # loading, long before the steps
    busy_steps(b, 6, gap=50_000)
    found = run_rule("gpu-idle-gaps", b.write(tmp_path / "t.sqlite"))
    assert len(found) == 1
    # Start-up idle is not step time: nothing to gain (under the noise floor) when no capture-scope
    # finding is there to hold it.
    assert found[0].severity == Severity.INFO and found[0].estimated_savings_ns == 0 and found[0].minor
    assert "steady state" in found[0].message


def test_steady_window_leaves_start_up_out(tmp_path):
    b = TraceBuilder()
    b.kernel("init_weights", start=T0 - 60_000_000, duration=1_000_000)
    busy_steps(b, 6, gap=200_000)
    path = b.write(tmp_path / "t.sqlite")
    full = run_rule("gpu-idle-gaps", path, options={"report": "all"})
    steady = run_rule("gpu-idle-gaps", path, options={"report": "all", "window": "steady"})
    assert len(full) == 6 and len(steady) == 5
    assert all(f.location.start_ns > T0 for f in steady) and all(values(f)["idle_time"] == 200_000 for f in steady)


@pytest.mark.parametrize("ops,severity", [(9, Severity.INFO), (10, Severity.WARNING)])
def test_a_handful_of_gpu_operations_is_no_running_program(tmp_path, ops, severity):
    # One long gap between a few copies (a trace whose kernels were lost keeps only these): no run to stall.
    b = TraceBuilder()
    for i in range(ops):
        b.memcpy(T0 + i * 10_000 + (1_000_000_000 if i >= ops // 2 else 0), 5_000, 1 << 20)
    [f] = run_rule("gpu-idle-gaps", b.write(tmp_path / "t.sqlite"))
    assert f.severity == severity and values(f)["gaps"] == 1
