"""The step budget: every part on a built trace, and parts that always add up."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsys_rules.model.budget import step_budget
from nsys_rules.model.steps import step_model
from nsys_rules.inputs import open_trace
from nsys_rules.testing import TraceBuilder
from tests.rules.scenarios import sync_loop

T0 = 100_000_000


def budget_of(path: Path):
    trace = open_trace(path)
    model = step_model(trace)
    return model, step_budget(trace, model)


def parts(budget) -> dict[str, int]:
    return {p.name: p.ns for p in budget.parts if p.ns}


def assert_adds_up(budget) -> None:
    assert sum(p.ns for p in budget.parts) == budget.total_ns == int(budget.step_ns.sum())
    per_step = sum(v for v in budget.per_step.values())
    assert (per_step == budget.step_ns).all()


def test_busy_time_by_kernel_class_and_copies(tmp_path):
    b = TraceBuilder()
    for i in range(6):
        s = T0 + i * 1_000_000
        b.nvtx("step", s, s + 990_000)
        b.kernel("gemv_bf16_kernel", start=s + 10_000, duration=300_000, launch_at=s + 1_000)
        b.kernel("vectorized_elementwise_kernel", start=s + 310_000, duration=100_000, launch_at=s + 2_000)
        b.memcpy(s + 410_000, 50_000, 4096, launch_at=s + 3_000)
    model, budget = budget_of(b.write(tmp_path / "t.sqlite"))
    got = parts(budget)
    assert model.count == 6
    assert got["gemv"] == 6 * 300_000 and got["elementwise"] == 6 * 100_000 and got["copy"] == 6 * 50_000
    assert_adds_up(budget)


def test_overlapping_own_work_counts_once_compute_first(tmp_path):
    # Two loop streams: an all-reduce overlapping a GEMM is hidden behind it.
    b = TraceBuilder()
    for i in range(6):
        s = T0 + i * 1_000_000
        b.nvtx("step", s, s + 990_000)
        b.kernel("cutlass_gemm_kernel", start=s + 10_000, duration=400_000, launch_at=s + 1_000, stream=7)
        b.kernel("ncclDevKernel_AllReduce", start=s + 210_000, duration=400_000, launch_at=s + 2_000, stream=9)
    _, budget = budget_of(b.write(tmp_path / "t.sqlite"))
    got = parts(budget)
    assert budget.loop_streams == (7, 9)
    assert got["gemm"] == 6 * 400_000 and got["communication"] == 6 * 200_000  # only the exposed part
    assert_adds_up(budget)


def test_side_stream_work_while_the_loop_waits_is_contention(tmp_path):
    b = TraceBuilder()
    sync_loop(b, steps=16, side_copy={i: 300_000 for i in range(16) if i % 4 == 2})
    _, budget = budget_of(b.write(tmp_path / "t.sqlite"))
    assert budget.loop_streams == (7,)
    assert parts(budget)["contention"] == 4 * 300_000
    assert_adds_up(budget)


def test_idle_after_a_sync_is_the_bubble(tmp_path):
    b = TraceBuilder()
    sync_loop(b, steps=8, host_ns=100_000)
    _, budget = budget_of(b.write(tmp_path / "t.sqlite"))
    got = parts(budget)
    # After each readback lands the host samples 100 us, then launches; the kernel starts 5 us later:
    # the GPU waits 105 us at each of the 7 boundaries inside the steady steps, all of it the bubble.
    assert got["after_sync"] == 7 * 105_000
    assert "launch_wait" not in got
    assert_adds_up(budget)


def test_allocation_and_module_loading_gaps(tmp_path):
    b = TraceBuilder()
    sync_loop(b, steps=12, host_work={4: ("cudaMalloc_v3020", 300_000), 8: ("cuLibraryLoadData", 500_000)})
    _, budget = budget_of(b.write(tmp_path / "t.sqlite"))
    got = parts(budget)
    assert got["allocation"] == 300_000 and got["module_loading"] == 500_000
    assert_adds_up(budget)


def test_launch_wait_splits_api_and_host_time(tmp_path):
    # Eager launches: each kernel's call starts 8 us after the previous kernel ended and takes 3 us.
    b = TraceBuilder(launch_duration=3_000)
    for i in range(6):
        s = T0 + i * 1_000_000
        b.nvtx("step", s, s + 500_000)
        for j in range(20):
            k = s + 10_000 + j * 20_000
            b.kernel("small_kernel", start=k + 12_000, duration=10_000, launch_at=k + 8_000)
    _, budget = budget_of(b.write(tmp_path / "t.sqlite"))
    wait = budget.part("launch_wait")
    # Per gap of 10 us: the host runs its own code 8 us, then 3 us in the launch call, minus the 1 us
    # the kernel took to start after the call returned... measured exactly:
    assert wait.detail["launch_api_ns"] + wait.detail["host_ns"] == wait.ns
    assert wait.detail["host_ns"] > wait.detail["launch_api_ns"] > 0
    # The median step's split adds up to the median step's wait (what the reports show).
    assert wait.detail["median_step_launch_api_ns"] + wait.detail["median_step_host_ns"] == wait.median_step_ns
    assert wait.detail["median_step_host_ns"] > wait.detail["median_step_launch_api_ns"] > 0
    assert_adds_up(budget)


def test_gaps_inside_a_graph_replay(tmp_path):
    b = TraceBuilder()
    for i in range(6):
        s = T0 + i * 1_000_000
        b.nvtx("step", s, s + 990_000)
        corr = b.graph_launch(s + 5_000, 0, launch_at=s + 1_000, traced_as_graph=False)
        for j in range(4):  # four nodes, 10 us apart on the GPU
            b.kernel("node_kernel", start=s + 20_000 + j * 60_000, duration=50_000, correlation_id=corr,
                     graph_node_id=100 + j)
    _, budget = budget_of(b.write(tmp_path / "t.sqlite"))
    assert parts(budget)["graph_internal"] == 6 * 3 * 10_000
    assert_adds_up(budget)


def test_queued_work_waiting_on_a_dependency_is_other_idle(tmp_path):
    b = TraceBuilder()
    for i in range(6):
        s = T0 + i * 1_000_000
        b.nvtx("step", s, s + 990_000)
        b.kernel("a_kernel", start=s + 10_000, duration=100_000, launch_at=s + 1_000)
        b.kernel("b_kernel", start=s + 400_000, duration=100_000, launch_at=s + 2_000)  # queued long before
    _, budget = budget_of(b.write(tmp_path / "t.sqlite"))
    assert parts(budget)["idle_other"] >= 6 * 290_000
    assert_adds_up(budget)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 400_000), st.integers(1_000, 300_000), st.integers(0, 3)),
                min_size=4, max_size=12),
       st.integers(0, 200_000))
def test_parts_always_add_up(tmp_path_factory, steps, host_ns):
    b = TraceBuilder()
    side = {i: extra for i, (extra, _, kind) in enumerate(steps) if kind == 1 and extra}
    slower = {i: extra for i, (extra, _, kind) in enumerate(steps) if kind == 2}
    work = {i: ("cudaMalloc_v3020" if kind == 3 else "cuLibraryLoadData", load)
            for i, (_, load, kind) in enumerate(steps) if kind in (0, 3)}
    sync_loop(b, steps=len(steps), host_ns=host_ns, side_copy=side, slower=slower, host_work=work)
    path = b.write(tmp_path_factory.mktemp("p") / "t.sqlite")
    model, budget = budget_of(path)
    assert budget is not None and model.count >= 3
    assert_adds_up(budget)
    assert all(p.ns >= 0 for p in budget.parts)
    assert np.all(budget.step_ns >= 0)


def test_no_steps_no_budget(tmp_path):
    b = TraceBuilder()
    b.kernel("k", start=T0, duration=1_000)
    model, budget = budget_of(b.write(tmp_path / "t.sqlite"))
    assert model.source == "none" and budget is None and model.reason


@pytest.mark.parametrize("name", ["cub::DeviceScan::InclusiveScan", "Thunk:#hlo_op=fusion.3#", "ncclRecv",
                                  "aten::linear"])
def test_library_ranges_are_never_steps(tmp_path, name):
    b = TraceBuilder()
    for i in range(8):
        s = T0 + i * 1_000_000
        b.nvtx(name, s, s + 900_000)
        b.kernel("k", start=s + 10_000, duration=800_000, launch_at=s + 1_000)
    model, _ = budget_of(b.write(tmp_path / "t.sqlite"))
    assert model.source != "nvtx" and "library" in model.reason


def test_evidence_host_time_outside_cuda_calls(tmp_path):
    b = TraceBuilder(launch_duration=3_000)
    for i in range(6):
        s = T0 + i * 1_000_000
        b.nvtx("step", s, s + 900_000)
        for j in range(10):  # 10 launches of 3 us each: 30 us inside CUDA calls per 900 us step
            b.kernel("k", start=s + j * 80_000 + 10_000, duration=5_000, launch_at=s + j * 80_000)
    _, budget = budget_of(b.write(tmp_path / "t.sqlite"))
    host = budget.evidence["host"]
    assert host["inside_cuda_ns_p50"] == 30_000 and host["outside_cuda_ns_p50"] == 870_000


def test_evidence_prefill_and_decode_phases(tmp_path):
    b = TraceBuilder()
    t = T0
    for _request in range(3):
        start = t
        b.nvtx("prefill", t, t + 500_000)
        b.kernel("cutlass_gemm_kernel", start=t + 10_000, duration=400_000, launch_at=t + 1_000)
        t += 500_000
        b.nvtx("decode", t, t + 8 * 100_000)
        for token in range(8):
            k = t + token * 100_000
            b.kernel("gemv_kernel", start=k + 5_000, duration=40_000, launch_at=k + 1_000)
            b.kernel("argmax_kernel", start=k + 50_000, duration=10_000, launch_at=k + 2_000)
        t += 8 * 100_000
        b.nvtx("request", start, t)
        t += 10_000
    _, budget = budget_of(b.write(tmp_path / "t.sqlite"))
    phases = budget.evidence["phases"]
    assert phases["tokens_per_decode_range_p50"] == 8
    assert phases["time_to_first_token_ns_p50"] == 400_000
    # From the first token's GEMV to the last token's argmax, over 8 tokens.
    assert phases["time_per_output_token_ns_p50"] == (7 * 100_000 + 60_000 - 5_000) // 8


def test_a_block_of_host_work_between_steps_is_host_prep_not_launch_overhead(tmp_path):
    # 10 ms of host work before each step's first launch, no sync: the block moves out of launch_wait.
    b = TraceBuilder()
    t = T0
    for i in range(8):
        start = t
        t += 10_000_000
        for _ in range(10):
            b.kernel("void at::native::vectorized_elementwise_kernel<4>()", start=t + 10_000, duration=100_000,
                     launch_at=t)
            t += 120_000
        b.nvtx(f"train_step {i}", start, t)
    _, budget = budget_of(b.write(tmp_path / "t.sqlite"))
    got = parts(budget)
    assert got["host_prep"] == pytest.approx(7 * 10_000_000, rel=0.02)  # every step but the first has the block before it
    assert got.get("launch_wait", 0) < 7 * 400_000  # what stays is the launch pace between kernels
    assert_adds_up(budget)


def test_short_host_work_after_a_sync_stays_the_syncs(tmp_path):
    # A readback loop whose host works 100 us after each sync: a step's GPU work hides it, so it is after_sync.
    b = TraceBuilder()
    sync_loop(b, steps=8, host_ns=100_000)
    _, budget = budget_of(b.write(tmp_path / "t.sqlite"))
    assert "host_prep" not in parts(budget) and parts(budget)["after_sync"] > 0
    assert_adds_up(budget)


def test_long_gaps_chunked_find_the_same_gaps_as_one_pass(monkeypatch):
    # Issue 39: the gaps' lengths are measured a chunk at a time (no 8-byte array per gap at the budget's peak);
    # chunk edges must neither lose nor repeat a gap.
    from nsys_rules.model import budget_shape

    rng = np.random.default_rng(7)
    starts = np.cumsum(rng.integers(10, 5_000, 10_001))
    ends = starts + rng.integers(0, 3_000, len(starts))
    expected = np.flatnonzero(ends - starts >= 2_000)
    monkeypatch.setattr(budget_shape, "GAP_CHUNK", 1_000)
    found = budget_shape._long_gaps(starts, ends, 2_000)
    assert found.tolist() == expected.tolist() and 2_000 < len(found) < 5_000
    assert budget_shape._long_gaps(starts[:0], ends[:0], 2_000).tolist() == []
