"""kernel-tail: tails, gates and their boundaries, shape variation, API tails, real H200 traces."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.analysis.grouped import group_ids, group_quantiles
from nsys_rules.rules.kernel_tail.tails import (clean_range_name, periodic_tail, positional_tail, slow_runs, step_index,
                                       tail_table)
from nsys_rules.testing import TraceBuilder, run_rule
from nsys_rules.testing import metric_values as values

PERIOD = 2_000_000
T0 = 10_000_000
KERNEL = "tile_kernel(float *, int)"


def loop(b: TraceBuilder, durations: list[list[int]], *, name: str = KERNEL, grid=(132, 1, 1),
         grids: list[tuple[int, int, int]] | None = None) -> list[tuple[int, int]]:
    """One NVTX step per row of ``durations``; returns (start, duration) of every kernel."""
    out = []
    for i, row in enumerate(durations):
        s = T0 + i * PERIOD
        b.nvtx("decode_step", s, s + PERIOD - 10_000)
        t = s + 20_000
        for n, d in enumerate(row):
            b.kernel(name, start=t, duration=d, grid=grids[n] if grids else grid)
            out.append((t, d))
            t += d + 2_000
    return out


def moe_like(steps: int = 20, per_step: int = 10, base: int = 20_000, slow: int = 200_000) -> list[list[int]]:
    """10 % slow invocations at a position that changes from step to step (not shape variation)."""
    return [[slow if n == (3 * i) % per_step else base for n in range(per_step)] for i in range(steps)]



def kernel_findings(findings):
    return [f for f in findings if f.title != "Host API tail"]


def test_systematic_tail_is_a_warning(tmp_path):
    b = TraceBuilder()
    kernels = loop(b, moe_like())
    [f] = kernel_findings(run_rule("kernel-tail", b.write(tmp_path / "t.sqlite")))
    m = values(f)
    assert f.rule == "kernel-tail" and f.severity.value == "warning"
    assert m["count"] == 200 and m["p50"] == 20_000 and m["max"] == 200_000
    assert m["max_over_p50"] == pytest.approx(10.0) and m["p99_over_p50"] == pytest.approx(10.0)
    assert m["tail_cost"] == 20 * 180_000
    total = 180 * 20_000 + 20 * 200_000
    assert m["tail_share_of_gpu_time"] == pytest.approx(100 * 20 * 180_000 / total)
    assert m["positional_tail_cost"] >= 0.9 * m["tail_cost"]  # the position does not explain it
    assert f.estimated_savings_ns == pytest.approx(20 * 180_000)
    # Worst instance: the first 200 us kernel (ties keep launch order), with its step and NVTX range.
    first_slow = next(start for start, d in kernels if d == 200_000)
    assert f.location.start_ns == first_slow and f.location.end_ns == first_slow + 200_000
    assert "decode_step" in f.message and "step 1/20" in f.message
    assert f.location.kernel == KERNEL


def test_uniform_kernels_are_quiet(tmp_path):
    b = TraceBuilder()
    loop(b, [[20_000 + (n % 3) * 100 for n in range(10)] for _ in range(20)])
    assert kernel_findings(run_rule("kernel-tail", b.write(tmp_path / "t.sqlite"))) == []


def test_share_boundaries(tmp_path):
    b = TraceBuilder()
    loop(b, moe_like())
    path = b.write(tmp_path / "t.sqlite")
    share = 20 * 180_000 / (180 * 20_000 + 20 * 200_000)
    [f] = kernel_findings(run_rule("kernel-tail", path, options={"warn_share_pct": 100 * share}))
    assert f.severity.value == "warning"
    [f] = kernel_findings(run_rule("kernel-tail", path, options={"warn_share_pct": 100 * share * 1.001}))
    assert f.severity.value == "info"
    assert kernel_findings(run_rule("kernel-tail", path, options={"min_share_pct": 100 * share, "warn_share_pct": 99.0}))
    assert kernel_findings(run_rule("kernel-tail", path, options={"min_share_pct": 100 * share * 1.001})) == []


def test_small_tail_of_a_small_kernel_is_not_reported(tmp_path):
    b = TraceBuilder()
    rows = moe_like(base=1_000, slow=10_000)  # ratio 10, but 180 us of tail...
    for row in rows:
        row.append(1_000_000)  # ...next to 20 ms of other kernel time: 0.88 % of GPU time
    loop(b, rows, grids=[(132, 1, 1)] * 10 + [(1, 1, 1)])
    assert kernel_findings(run_rule("kernel-tail", b.write(tmp_path / "t.sqlite"))) == []


@pytest.mark.parametrize("slow,fires", [(40_000, False), (40_400, True)])
def test_outlier_ratio_boundary(tmp_path, slow, fires):
    rows = [[20_000] * 10 for _ in range(20)]
    rows[7][4] = slow  # one outlier: max/p50 = 2.0 (not above) or 2.02; p99/p50 stays 1
    b = TraceBuilder()
    loop(b, rows)
    found = kernel_findings(run_rule("kernel-tail", b.write(tmp_path / "t.sqlite"), options={"min_share_pct": 0.0}))
    assert bool(found) is fires
    if fires:
        assert "Outlier invocations: 1 of 200" in found[0].message


@pytest.mark.parametrize("slow,fires", [(30_000, False), (31_000, True)])
def test_tail_ratio_boundary(tmp_path, slow, fires):
    # 100 invocations, the top 3 at 1.5x (p99/p50 = 1.5, not above) or 1.55x.
    rows = [[20_000] * 10 for _ in range(10)]
    for i, n in ((1, 2), (4, 7), (8, 5)):
        rows[i][n] = slow
    b = TraceBuilder()
    loop(b, rows)
    found = kernel_findings(run_rule("kernel-tail", b.write(tmp_path / "t.sqlite"), options={"min_share_pct": 0.0}))
    assert bool(found) is fires
    if fires:
        assert values(found[0])["p99_over_p50"] == pytest.approx(slow / 20_000)


def test_shape_variation_is_info_not_a_tail(tmp_path):
    # Two matrices share the kernel and grid: positions 6 and 7 of every step are the big one.
    b = TraceBuilder()
    loop(b, [[18_000] * 6 + [60_000, 60_000] for _ in range(20)])
    [f] = kernel_findings(run_rule("kernel-tail", b.write(tmp_path / "t.sqlite")))
    m = values(f)
    assert f.severity.value == "info" and "shape variation" in f.title
    assert m["p99_over_p50"] == pytest.approx(60 / 18) and m["positional_tail_cost"] == 0
    assert f.estimated_savings_ns == 0 and f.minor  # nothing to gain: under the noise floor
    # Still an action, not "nothing to fix": judge each shape on its own, with the program's NVTX call.
    assert "nothing to fix" not in f.recommendation.lower() and "nvtxRangePushA" in f.recommendation


def test_groups_split_by_launch_configuration(tmp_path):
    # One name, two grids with very different but steady durations: no tail in either group.
    b = TraceBuilder()
    grids = [(1, 1, 1), (64, 1, 1)] * 5
    loop(b, [[20_000, 200_000] * 5 for _ in range(20)], grids=grids)
    assert kernel_findings(run_rule("kernel-tail", b.write(tmp_path / "t.sqlite"))) == []


def test_max_findings_limits_the_list(tmp_path):
    b = TraceBuilder()
    for k in range(3):
        loop(b, moe_like(), name=f"tile_kernel_{k}(int)")
    path = b.write(tmp_path / "t.sqlite")
    assert len(kernel_findings(run_rule("kernel-tail", path))) == 3
    [f] = kernel_findings(run_rule("kernel-tail", path, options={"max_findings": 1}))
    assert "2 more kernel group(s)" in f.message


def test_moe_kernels_get_routing_advice(tmp_path):
    b = TraceBuilder()
    loop(b, moe_like(), name="moe_expert_gemv(const float *, int)")
    [f] = kernel_findings(run_rule("kernel-tail", b.write(tmp_path / "t.sqlite")))
    assert "grouped GEMM" in f.recommendation


def test_api_tail_is_info_and_skips_waiting_calls(tmp_path):
    b = TraceBuilder()
    loop(b, [[20_000] * 4 for _ in range(20)])
    for i in range(20):
        s = T0 + i * PERIOD + 1_000_000
        # 4 x 395 us above p50 = 4 % of 40 ms (not in the first step: a big first allocation there is warm-up)
        b.api("cudaMalloc_v3020", s, 400_000 if i % 5 == 4 else 5_000)
        b.api("cudaStreamSynchronize_v3020", s + 500_000, 900_000 if i % 2 else 10_000)  # waits: not judged
    path = b.write(tmp_path / "t.sqlite")
    assert [f for f in run_rule("kernel-tail", path) if f.title == "Host API tail"] == []
    [f] = [f for f in run_rule("kernel-tail", path, options={"api_min_share_pct": 3.0}) if f.title == "Host API tail"]
    assert f.severity.value == "info" and f.location.api == "cudaMalloc"
    assert values(f)["tail_cost"] == 4 * 395_000
    assert [f for f in run_rule("kernel-tail", path, options={"api": False, "api_min_share_pct": 0.0})
            if f.title == "Host API tail"] == []


def test_shape_variation_without_step_ranges(tmp_path):
    # No NVTX: the same sequence of 8 launches repeats; positions 6 and 7 are the big matrix.
    b = TraceBuilder()
    t = T0
    for _ in range(20):
        for d in [18_000] * 6 + [60_000, 60_000]:
            b.kernel(KERNEL, start=t, duration=d, grid=(132, 1, 1))
            t += d + 2_000
        t += 300_000
    [f] = kernel_findings(run_rule("kernel-tail", b.write(tmp_path / "t.sqlite"), filter_time="0/"))
    assert f.severity.value == "info" and "shape variation" in f.title


def test_slow_phase_is_named(tmp_path):
    # The last quarter of the run is 3x slower: consecutive, so a phase, and still a warning.
    b = TraceBuilder()
    loop(b, [[20_000] * 10 for _ in range(15)] + [[60_000] * 10 for _ in range(5)])
    [f] = kernel_findings(run_rule("kernel-tail", b.write(tmp_path / "t.sqlite"), filter_time="0/"))
    assert f.severity.value == "warning" and "consecutive" in f.message and "clock" in f.recommendation


def test_periodic_tail_and_runs():
    d = np.array([1.0, 5.0, 1.0] * 20)
    cost, period, held_out = periodic_tail(d, 8)
    assert cost == 0.0 and period == 3 and held_out == 0.0
    rng = np.random.default_rng(1)
    noisy = np.where(rng.random(400) < 0.1, 10.0, 1.0)  # a real tail: no period explains it out of sample
    cost, _, held_out = periodic_tail(noisy, 64)
    assert held_out > 0.5
    deterministic = np.array([[200.0 if n == (3 * i) % 10 else 20.0 for n in range(10)] for i in range(20)]).ravel()
    assert periodic_tail(deterministic, 64)[2] > 0.5  # the hot position moves every step: not a shape
    assert slow_runs(np.array([False, True, True, False, True])) == 2 and slow_runs(np.zeros(3, bool)) == 0
    assert clean_range_name("aten::linear, seq = 47220, op_id = 997426") == "aten::linear"
    assert clean_range_name("x" * 100).endswith("...")


def test_group_ids():
    a, b = np.array([5, 5, 7, 5, 7]), np.array([1, 2, 1, 1, 1])
    assert list(group_ids([a, b])) == [0, 1, 2, 0, 2]
    huge = np.array([0, 2**35, 0, 2**35])  # keys that would overflow a naive fold
    assert list(group_ids([huge, huge, np.array([1, 1, 1, 2])])) == [0, 1, 0, 2]


def test_group_quantiles_match_numpy():
    rng = np.random.default_rng(3)
    group = rng.integers(0, 5, 500)
    values_ = rng.exponential(10.0, 500)
    counts, q = group_quantiles(group, values_, (0.5, 0.95, 0.99, 1.0))
    for g in range(5):
        sel = values_[group == g]
        assert counts[g] == len(sel)
        assert q[:, g] == pytest.approx(np.percentile(sel, [50, 95, 99, 100]))


def test_tail_table_and_positions():
    group = np.array([0, 0, 0, 0, 1, 1])
    dur = np.array([10.0, 10.0, 10.0, 40.0, 5.0, 5.0])
    t = tail_table(group, dur)
    assert list(t["tail_cost"]) == [30.0, 0.0] and t.loc[0, "max_p50"] == 4.0
    assert t.loc[0, "tail_score"] == pytest.approx(40.0 / 1e3 * np.log2(5) * 4.0)
    steps = ((0, 100), (200, 300))
    launch = np.array([10, 20, 210, 220, 50, 250])
    assert list(step_index(launch, steps)) == [0, 0, 1, 1, 0, 1]
    assert list(step_index(np.array([150, 400]), steps)) == [-1, -1]
    # group 0: position 0 = 10, 10; position 1 = 10, 40 -> median 25, so 15 above it.
    pos = positional_tail(group, step_index(launch, steps), launch, dur, t["p50"].to_numpy())
    assert pos.loc[0, "positional"] == 15.0 and pos.loc[0, "plain_in_steps"] == 30.0 and pos.loc[0, "steps_seen"] == 2


def test_real_moe_tail_and_quiet_graph_decode(h200):
    [f] = kernel_findings(run_rule("kernel-tail", h200 / "engine_moe_tail.sqlite"))
    m = values(f)
    assert f.severity.value == "warning" and "moe_expert_gemv" in f.location.kernel
    assert m["p50"] == pytest.approx(37_568, rel=0.01) and m["max"] == pytest.approx(667_649, rel=0.01)
    assert 15 < m["max_over_p50"] < 20 and 15 < m["p99_over_p50"] < 20
    assert 55 < m["tail_share_of_gpu_time"] < 70
    assert all(f.severity.value == "info" for f in run_rule("kernel-tail", h200 / "decode_graph_profilerapi.sqlite"))
    assert kernel_findings(run_rule("kernel-tail", h200 / "decode_graph_profilerapi.sqlite")) == []


def test_real_bimodal_gemv_is_shape_variation(h200):
    [f] = kernel_findings(run_rule("kernel-tail", h200 / "rust_release_build.sqlite"))
    assert f.severity.value == "info" and "shape variation" in f.title
    assert "grid (512, 1, 1)" in f.message


@pytest.mark.parametrize("big_bytes,by_size", [(8 << 20, True), (8 << 10, False)])
def test_a_copy_call_tail_of_larger_copies_is_their_size_not_contention(tmp_path, big_bytes, by_size):
    # Every 5th step copies 8 MB (400 us) where the others copy 8 KB (5 us): the slow calls are the big copies.
    # With the same 8 KB in every call, the slow ones have no size to explain them: contention advice stays.
    b = TraceBuilder()
    loop(b, [[20_000] * 4 for _ in range(20)])
    for i in range(20):
        s = T0 + i * PERIOD + 1_000_000
        slow = i % 5 == 4
        b.launch_duration = 400_000 if slow else 5_000  # a pageable copy: the call lasts as long as the copy
        b.memcpy(s + 10_000, 380_000 if slow else 4_000, big_bytes if slow else 8 << 10, kind="HtoD", src="pageable",
                 stream=9, launch_at=s)
    path = b.write(tmp_path / "t.sqlite")
    found = [f for f in run_rule("kernel-tail", path, options={"api_min_share_pct": 3.0}) if f.title == "Host API tail"]
    [f] = [f for f in found if f.location.api == "cudaMemcpyAsync"]
    assert ("their time follows the copy size" in f.message) is by_size
    assert ("allocator" in f.recommendation) is not by_size
