"""gpu-low-utilization: chunk numbers, regions and the in-use threshold."""

from __future__ import annotations

import pytest

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


def test_low_utilization_region_is_reported_with_nvidia_numbers(tmp_path):
    b = TraceBuilder()
    busy_steps(b, 10, gap=100_000, kernel_ns=900_000)  # dense: 90 % busy
    end = busy_steps(b, 10, gap=900_000, kernel_ns=100_000, t0=T0 + 10_000_000)  # sparse: 10 % busy
    found = run_rule("gpu-low-utilization", b.write(tmp_path / "t.sqlite"), options={"chunks": 20})
    assert len(found) == 1
    f = found[0]
    assert T0 + 9_000_000 <= f.location.start_ns <= T0 + 11_000_000  # the sparse half, not the dense one
    assert values(f)["in_use"] == pytest.approx(10.0, abs=5)
    assert f.location.end_ns == end - 900_000


@pytest.mark.parametrize("threshold,flagged", [(10.0, False), (11.0, True)])
def test_in_use_threshold_boundary(tmp_path, threshold, flagged):
    b = TraceBuilder()
    busy_steps(b, 10, gap=900_000, kernel_ns=100_000)  # 10 % in every chunk of 1 ms
    found = run_rule("gpu-low-utilization", b.write(tmp_path / "t.sqlite"),
                     options={"chunks": 9, "max_in_use_pct": threshold})
    assert bool(found) is flagged


def test_busy_gpu_is_quiet(tmp_path):
    b = TraceBuilder()
    busy_steps(b, 10, gap=10_000)
    assert run_rule("gpu-low-utilization", b.write(tmp_path / "t.sqlite")) == []
