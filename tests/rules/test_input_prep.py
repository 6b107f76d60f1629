"""input-prep: one block of host work per step that the GPU waits through, and the framework's own advice."""

from __future__ import annotations

import pytest

from nsys_rules.api import Severity
from nsys_rules.testing import TraceBuilder, metric_values, only_finding, run_rule

T0 = 100_000_000


def _loop(b: TraceBuilder, *, prep_ns: int, steps: int = 12, kernels: int = 20, kernel_ns: int = 100_000,
          kernel: str = "void at::native::vectorized_elementwise_kernel<4>()", readback: bool = True) -> int:
    """A training loop: ``prep_ns`` of host work (the next batch), an upload, ``kernels`` launches, a readback.

    Returns the step time.
    """
    t = T0
    step = 0
    for i in range(steps):
        start = t
        t += prep_ns  # tokenizing, augmenting: host code, no CUDA call
        b.memcpy(t + 20_000, 10_000, 1 << 20, kind="HtoD", src="pageable", launch_at=t)
        t += 30_000
        for _ in range(kernels):
            b.kernel(kernel, start=t + 10_000, duration=kernel_ns, launch_at=t)
            t += kernel_ns + 5_000
        if readback:
            b.memcpy(t + 10_000, 2_000, 4, kind="DtoH", src="device", dst="pinned", launch_at=t)
            b.sync(t + 1_000, 12_000)
            t += 20_000
        b.nvtx(f"train_step {i}", start, t)
        step = t - start
    return step


def test_a_block_of_host_work_before_each_step_is_input_preparation(tmp_path):
    b = TraceBuilder()
    step = _loop(b, prep_ns=40_000_000)
    f = only_finding(run_rule("input-prep", b.write(tmp_path / "t.sqlite")))
    m = metric_values(f)
    assert f.severity is Severity.WARNING and f.budget_part == "host_prep"
    # The readback released the host into the block: launching before waiting would hide a step's GPU
    # work (20 x 0.1 ms) of it, which stays sync-stall's; the rest is the input pipeline's.
    assert m["host_block_per_step"] == pytest.approx(40_000_000 - 2_000_000, rel=0.02)
    assert m["step_share"] == pytest.approx(100 * 38e6 / step, abs=1.5)
    assert m["htod_bytes_per_step"] == 1 << 20 and m["htod_pageable_share"] == 100
    assert "DataLoader" in f.recommendation and "pin_memory" in f.recommendation and "PyTorch" in f.message


def test_launch_gaps_spread_through_the_step_are_not_input_preparation(tmp_path):
    b = TraceBuilder()
    _loop(b, prep_ns=200_000, kernels=40, kernel_ns=50_000)  # 0.2 ms: the loop's own launch pace, no block
    assert run_rule("input-prep", b.write(tmp_path / "t.sqlite")) == []


def test_the_share_boundary(tmp_path):
    # A 1.2 ms block in a ~7.5 ms step (no readback) is reported; a floor above its share silences it,
    # a warning threshold above it makes it information (a part of 20 % or more would make its owner a
    # warning whatever the threshold: issue 27's coverage).
    b = TraceBuilder()
    _loop(b, prep_ns=1_200_000, kernels=60, readback=False)  # ~16 % of a ~7.5 ms step: under the owner's 20 %
    path = b.write(tmp_path / "t.sqlite")
    share = metric_values(only_finding(run_rule("input-prep", path)))["step_share"]
    assert run_rule("input-prep", path, options={"min_share_pct": share + 1}) == []
    f = only_finding(run_rule("input-prep", path, options={"warn_share_pct": share + 1}))
    assert f.severity is Severity.INFO


def test_jax_gets_jax_advice_and_no_pytorch(tmp_path):
    b = TraceBuilder()
    _loop(b, prep_ns=8_000_000, kernel="loop_add_fusion")
    for i in range(3):
        b.nvtx(f"XlaModule:#hlo_module=jit_train_step,program_id={i}#", T0 - 5_000_000 + i * 1_000_000,
               duration=500_000)
    f = only_finding(run_rule("input-prep", b.write(tmp_path / "t.sqlite")))
    assert "prefetch_to_device" in f.recommendation and "float(loss)" in f.recommendation  # the readback waits
    assert "torch" not in f.recommendation.lower() and "DataLoader" not in f.recommendation


def test_a_cuda_program_gets_thread_and_stream_advice(tmp_path):
    b = TraceBuilder()
    _loop(b, prep_ns=8_000_000, kernel="gemv_bf16_kernel")
    f = only_finding(run_rule("input-prep", b.write(tmp_path / "t.sqlite")))
    assert "another thread" in f.recommendation and "torch" not in f.recommendation.lower()


def test_python_samples_name_the_function_of_the_block(tmp_path):
    # Python sampling every 1 ms: inside the 8 ms block the program runs tokenize() under main().
    b = TraceBuilder()
    _loop(b, prep_ns=8_000_000, readback=False)
    step = 8_000_000 + 30_000 + 20 * 105_000
    for i in range(12):
        start = T0 + i * step
        for k in range(8):
            b.python_sample(start + k * 1_000_000 + 500_000,
                            [("tokenize", "/src/train.py", 41), ("main", "/src/train.py", 90)])
    f = only_finding(run_rule("input-prep", b.write(tmp_path / "t.sqlite")))
    assert "`tokenize` (/src/train.py:41)" in f.message and "100 %" in f.message


def _bare_loop(b: TraceBuilder, *, prep_ns: int, steps: int = 12, kernels: int = 20, upload: int = 0,
               prep_calls: tuple[str, ...] = (), osrt: tuple[str, ...] = ()) -> int:
    """A loop whose block of host time is followed by no batch copy (``upload`` bytes: a copy of that size instead);
    ``prep_calls``: CUDA calls that fill the block (each a quarter of it), ``osrt``: OS calls that fill it."""
    t = T0
    for i in range(steps):
        start = t
        for k, name in enumerate(prep_calls):
            b.api(name, t + k * prep_ns // 4, prep_ns // 4 - 1_000)
        for name in osrt:
            b.osrt(name, t + 1_000, prep_ns - 2_000)
        t += prep_ns
        if upload:
            b.memcpy(t + 20_000, 10_000, upload, kind="HtoD", src="pinned", launch_at=t)
        t += 30_000
        for _ in range(kernels):
            b.kernel("void at::native::vectorized_elementwise_kernel<4>()", start=t + 10_000, duration=100_000,
                     launch_at=t)
            t += 105_000
        b.nvtx(f"train_step {i}", start, t)
    return t


def test_a_block_no_batch_copy_follows_is_host_work_of_unknown_cause_with_the_capture_flags(tmp_path):
    b = TraceBuilder()
    _bare_loop(b, prep_ns=8_000_000, upload=4)  # a 4-byte upload (a scalar) is no batch
    f = only_finding(run_rule("input-prep", b.write(tmp_path / "t.sqlite")))
    m = metric_values(f)
    assert m["input_evidence"] == 0 and m["blocks"] == 11 and m["blocks_ending_in_htod_copy"] == 11
    assert f.title == "Host work between steps keeps the GPU waiting"
    assert "not in this capture" in f.message and "input prepared" not in f.message
    assert "--trace=cuda,nvtx,osrt" in f.recommendation and "--sample=process-tree" in f.recommendation
    assert "DataLoader" not in f.recommendation and m["launch_thread_own_code_share"] == pytest.approx(100, abs=1)


def test_the_os_calls_say_the_launching_thread_waited_on_another_thread(tmp_path):
    b = TraceBuilder()
    _bare_loop(b, prep_ns=8_000_000, osrt=("pthread_cond_wait",))
    f = only_finding(run_rule("input-prep", b.write(tmp_path / "t.sqlite")))
    m = metric_values(f)
    assert m["launch_thread_waiting_share"] == pytest.approx(100, abs=1) and m["input_evidence"] == 0
    assert "waiting on another thread" in f.message and "--trace=cuda,nvtx,osrt" not in f.recommendation
    assert "that thread's work" in f.recommendation


def test_a_batch_copy_after_the_block_names_input_preparation_with_its_evidence(tmp_path):
    b = TraceBuilder()
    _bare_loop(b, prep_ns=8_000_000, upload=2 << 20)
    f = only_finding(run_rule("input-prep", b.write(tmp_path / "t.sqlite")))
    m = metric_values(f)
    assert m["input_evidence"] == 1 and m["blocks_ending_in_htod_copy"] == 11
    assert "a host-to-device copy of 2.10 MB ends 11 of the 11 blocks" in f.message and "DataLoader" in f.recommendation


def test_an_allocation_burst_between_steps_is_left_to_alloc_churn(tmp_path):
    # empty_cache() every step: the block is cudaFree/cudaMalloc calls, counted once, by alloc-churn.
    b = TraceBuilder()
    _bare_loop(b, prep_ns=8_000_000, upload=2 << 20, prep_calls=("cudaFree", "cudaFree", "cudaMalloc", "cudaFree"))
    assert run_rule("input-prep", b.write(tmp_path / "t.sqlite")) == []


def test_python_samples_outside_loader_code_name_the_work_not_input(tmp_path):
    b = TraceBuilder()
    step = _bare_loop(b, prep_ns=8_000_000, upload=2 << 20, steps=12)
    per = (step - T0) // 12
    for i in range(12):
        for k in range(8):
            b.python_sample(T0 + i * per + k * 1_000_000 + 500_000,
                            [("log_metrics", "/src/train.py", 77), ("main", "/src/train.py", 90)])
    f = only_finding(run_rule("input-prep", b.write(tmp_path / "t.sqlite")))
    assert metric_values(f)["input_evidence"] == 0 and "running `log_metrics`" in f.message
    assert f.location.source is not None and f.location.source.function == "log_metrics"
