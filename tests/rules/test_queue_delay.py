"""queue-delay: GPU-bound queues (info), queues while the GPU idles (warning), quiet and thresholds."""

from __future__ import annotations

import pytest

from nsys_rules.findings import Severity
from nsys_rules.rules.queue_delay.measure import queue_profile
from nsys_rules.analysis.intervals import merge_intervals
from nsys_rules.testing import TraceBuilder, run_rule
from nsys_rules.testing import metric_values as values

T0 = 100_000_000



def queued_steps(b: TraceBuilder, *, steps: int = 10, per_step: int = 20, kernel_ns: int = 20_000,
                 gap_ns: int = 0, launch_ahead: bool = True) -> None:
    """Each step's kernels are launched together at the step start (host runs ahead) or just in time."""
    step_ns = per_step * (kernel_ns + gap_ns) + 100_000
    for i in range(steps):
        s = T0 + i * step_ns
        b.nvtx("decode_step", s, s + step_ns - 1_000)
        for j in range(per_step):
            k = s + 5_000 + j * (kernel_ns + gap_ns)
            at = s + j * 2_000 if launch_ahead else k - 5_000
            b.kernel("gemv", start=k, duration=kernel_ns, launch_at=at)


def test_gpu_bound_queue_is_info(tmp_path):
    b = TraceBuilder()
    queued_steps(b)
    (f,) = run_rule("queue-delay", b.write(tmp_path / "t.sqlite"))
    v = values(f)
    # Queueing on a busy GPU is how asynchronous launching looks: nothing to gain, under the noise floor.
    assert f.severity == Severity.INFO and f.estimated_savings_ns == 0 and f.minor
    assert v["kernels"] == 200 and v["median_kernel"] == 20_000
    assert v["median_queue"] > 5 * 20_000 and v["idle_while_queued"] == 0
    assert "bottleneck" in f.message


def test_queue_while_gpu_idles_is_a_warning(tmp_path):
    b = TraceBuilder()
    queued_steps(b, kernel_ns=10_000, gap_ns=40_000)  # 80 % of the time the GPU idles with work queued
    (f,) = run_rule("queue-delay", b.write(tmp_path / "t.sqlite"))
    v = values(f)
    assert f.severity == Severity.WARNING
    assert v["idle_while_queued"] == pytest.approx(10 * 19 * 40_000, rel=0.02)
    assert f.estimated_savings_ns == v["idle_while_queued"]


def test_a_queue_behind_its_own_stream_on_an_idle_gpu_is_not_reported(tmp_path):
    # Launched ahead, the GPU neither busy (40 %) nor idle while they wait (each kernel waits behind the
    # one before it, with short gaps under the launch latency): asynchronous launching, nothing to change.
    b = TraceBuilder()
    queued_steps(b, kernel_ns=20_000, gap_ns=5_000, per_step=20)
    path = b.write(tmp_path / "t.sqlite")
    assert run_rule("queue-delay", path) == []
    # The same queue on a GPU the rule calls busy from 40 % is the GPU-bound case: reported, with an action.
    [f] = run_rule("queue-delay", path, options={"gpu_bound_pct": 10.0})
    assert "bottleneck" in f.message and "nothing to fix" not in f.recommendation.lower()


def test_just_in_time_launches_are_quiet(tmp_path):
    b = TraceBuilder()
    queued_steps(b, launch_ahead=False)
    assert run_rule("queue-delay", b.write(tmp_path / "t.sqlite")) == []


@pytest.mark.parametrize("ratio,fires", [(1e9, False), (1.0, True)])
def test_ratio_threshold(tmp_path, ratio, fires):
    b = TraceBuilder()
    queued_steps(b)
    assert bool(run_rule("queue-delay", b.write(tmp_path / "t.sqlite"), options={"min_ratio": ratio})) is fires


def test_queue_profile_numbers():
    import numpy as np

    k_start = np.array([100, 200, 300])
    k_end = np.array([150, 250, 350])
    api_end = np.array([0, 0, 0])
    prof = queue_profile(k_start, k_end, api_end, merge_intervals(k_start, k_end), min_queue_ns=10)
    assert prof.median_queue == 200 and prof.median_kernel == 50 and prof.ratio == 4
    # idle while waiting: [10, 100) + [150, 200) + [250, 300) = 190
    assert prof.idle_while_queued == 190
