"""step-outliers: slow steady steps and what overlapped them."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.rules.step_outliers import slow_steps
from nsys_rules.testing import TraceBuilder, run_rule
from nsys_rules.testing import metric_values as values
from tests.rules.scenarios import foreign_words, program, sync_loop

T0 = 100_000_000
PERIOD = 1_000_000


def loop(b: TraceBuilder, steps: int = 24, *, kernel_ns: int = 800_000, slow: dict[int, int] | None = None) -> None:
    """One NVTX step per period: a kernel launched at the step's start; ``slow`` maps a step to extra kernel time.

    The stream runs one kernel at a time: a slow kernel delays the next step's.
    """
    gpu_free = 0
    for i in range(steps):
        s = T0 + i * PERIOD
        b.nvtx("step", s, s + PERIOD - 1_000)
        start = max(s + 20_000, gpu_free)
        duration = kernel_ns + (slow or {}).get(i, 0)
        b.kernel("gemv_kernel", start=start, duration=duration, launch_at=s + 1_000, stream=7)
        gpu_free = start + duration


def test_quiet_when_steps_are_alike(tmp_path):
    b = TraceBuilder()
    loop(b)
    assert run_rule("step-outliers", b.write(tmp_path / "t.sqlite")) == []


def test_side_stream_copy_every_eight_steps_is_named(tmp_path):
    # A 1 GiB copy on another stream every 8 steps: the loop's kernel waits 400 us behind it.
    b = TraceBuilder()
    sync_loop(b, side_copy={i: 400_000 for i in range(24) if i % 8 == 4})
    [f] = run_rule("step-outliers", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert m["slow_steps"] == 3 and m["steps"] == 24
    assert "stream 14" in f.message and "device-to-device" in f.message and "1.00 GiB" in f.message
    assert f.key == "contention" and f.budget_part.startswith("contention")
    assert "(every 8 steps)" in f.message
    # Savings are the slow steps' excess over the median step: 400 us each.
    assert f.estimated_savings_ns == m["excess_time"] == 3 * 400_000
    assert f.severity.value == "warning"  # 1.2 ms of ~22 ms of steps: over 5 %


@pytest.mark.parametrize("kind,word", [("pytorch", "torch.cuda.Stream(priority=0)"),
                                       ("cuda", "cudaStreamCreateWithPriority")])
def test_side_work_priority_in_the_programs_framework(tmp_path, kind, word):
    b = program(kind)
    sync_loop(b, side_copy={i: 400_000 for i in range(24) if i % 8 == 4})
    [f] = run_rule("step-outliers", b.write(tmp_path / "t.sqlite"))
    assert word in f.recommendation and not foreign_words(kind, f.recommendation)


def test_lazy_load_in_one_step_is_module_loading(tmp_path):
    b = TraceBuilder()
    sync_loop(b, host_work={12: ("cuLibraryLoadData", 3_000_000)}, new_kernel={12: "new_expert_gemm(float *)"})
    [f] = run_rule("step-outliers", b.write(tmp_path / "t.sqlite"))
    assert f.key == "module loading" and "new_expert_gemm" in f.message and "module load" in f.message
    assert f.severity.value == "warning"  # 3 ms over ~22 ms of steps
    assert "module_loading" in f.budget_part


def test_slower_kernels_are_named_as_such(tmp_path):
    b = TraceBuilder()
    sync_loop(b, slower={5: 900_000, 17: 900_000})
    [f] = run_rule("step-outliers", b.write(tmp_path / "t.sqlite"))
    assert f.key == "kernels" and values(f)["slow_steps"] == 2
    assert f.estimated_savings_ns == 2 * 900_000


def test_too_few_steps_are_not_judged(tmp_path):
    b = TraceBuilder()
    sync_loop(b, steps=6, slower={3: 900_000})
    assert run_rule("step-outliers", b.write(tmp_path / "t.sqlite")) == []
    assert len(run_rule("step-outliers", b.write(tmp_path / "u.sqlite"), options={"min_steps": 6})) == 1


def test_without_steps_it_skips_with_the_reason(tmp_path):
    from nsys_rules.testing import skip_reason

    b = TraceBuilder()
    for i in range(10):
        b.kernel("k", start=T0 + i * 10_000, duration=5_000)
    assert "no steady steps" in skip_reason("step-outliers", b.write(tmp_path / "t.sqlite"))


@pytest.mark.parametrize("extra,slow", [(0.09, False), (0.11, True)])
def test_deviation_threshold_needs_ten_percent(extra, slow):
    steps = np.full(40, 1_000_000.0)
    steps[::8] *= 1 + extra
    found, _ = slow_steps(steps, 1.5, 1.3)
    assert bool(len(found)) is slow


def test_ratio_threshold_catches_a_noisy_loop():
    rng = np.random.default_rng(0)
    steps = rng.normal(1_000_000, 80_000, 200)
    steps[7] = 1_600_000  # 1.6x: slow by ratio even where the spread is wide
    found, _ = slow_steps(steps, 1.5, 1.3)
    assert 7 in found


def test_another_processs_work_gets_advice_about_that_process_not_stream_priorities(tmp_path):
    # Every 8th step is 400 us slower while another process (pid 9999) runs a kernel on the same GPU.
    b = program("pytorch")
    slower = {i: 400_000 for i in range(24) if i % 8 == 4}
    sync_loop(b, slower=slower)
    step = 800_000 + 5_000 + 2_000 + 100_000  # roughly; the foreign kernel overlaps each slow step's kernel
    for i in slower:
        b.kernel("other_job_gemm", start=T0 + i * step + 200_000, duration=500_000, pid=9999, tid=9999, stream=3)
    [f] = run_rule("step-outliers", b.write(tmp_path / "t.sqlite"))
    assert f.key == "contention" and "of process 9999" in f.message
    assert "MPS" in f.recommendation and "priority" not in f.recommendation.replace("stream priorities inside", "")
