"""alloc-churn: built scenarios (firing, quiet, thresholds) and the real H200 traces."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.testing import TraceBuilder, run_rule, run_rules
from nsys_rules.rules.alloc_churn.measure import caching_disabled, context_init_rows
from nsys_rules.testing import metric_values as values
from tests.rules.scenarios import foreign_words, program

PERIOD = 1_000_000
T0 = 200_000_000


def loop(b: TraceBuilder, steps: int = 10, *, allocs_per_step: int = 4, alloc_ns: int = 10_000,
         malloc: str = "cudaMalloc_v3020", free: str = "cudaFree_v3020", t0: int = T0) -> None:
    """A decode loop whose steps allocate and free ``allocs_per_step`` buffers each."""
    for i in range(steps):
        s = t0 + i * PERIOD
        b.nvtx("decode_step", s, s + PERIOD - 10_000)
        b.kernel("gemv", start=s + 100_000, duration=500_000, launch_at=s + 1_000)
        for j in range(allocs_per_step):
            b.api(malloc, s + 10_000 + j * 40_000, alloc_ns)
            b.api(free, s + 600_000 + j * 40_000, alloc_ns)


def start_up(b: TraceBuilder) -> None:
    """Context creation (cudaFree(0), 130 ms) and one-time weight allocation, before the loop."""
    b.api("cudaFree_v3020", 1_000_000, 130_000_000)
    for i in range(40):
        b.api("cudaMalloc_v3020", 140_000_000 + i * 200_000, 100_000)
    b.api("cudaHostAlloc_v3020", 150_000_000, 900_000)



def test_caching_off_churn_is_a_warning_with_its_cause(tmp_path):
    b = TraceBuilder(environment={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    start_up(b)
    loop(b, steps=10, allocs_per_step=4, alloc_ns=10_000)
    [f] = run_rule("alloc-churn", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert f.rule == "alloc-churn" and f.severity.value == "warning"
    assert m["alloc_calls"] == 80 and m["calls_per_step"] == 8.0
    assert m["alloc_time"] == 80 * 10_000
    # The saving is the GPU idle time while the thread allocates: per step the three mallocs before the
    # kernel starts and the four frees after it ended (70 us), not the malloc under the running kernel.
    # The steady steps on the GPU run from the first kernel to the last one's end: the first step's
    # mallocs come before, the last step's frees after.
    assert f.estimated_savings_ns == m["gpu_idle_in_allocation"] == 40_000 + 8 * 70_000 + 30_000
    assert f.budget_part == "allocation" and f.savings_range == (630_000, 630_000)  # capped by the part
    # Steady time on the GPU clock: from the first step's kernel to the last one's end.
    assert m["steady_time"] == 9 * PERIOD + 500_000
    assert m["alloc_share_of_steady_time"] == pytest.approx(100 * 800_000 / m["steady_time"])
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING" in f.message and "PYTORCH_NO_CUDA_MEMORY_CACHING" in f.recommendation


def test_start_up_allocation_is_not_churn(tmp_path):
    b = TraceBuilder()
    start_up(b)
    loop(b, steps=10, allocs_per_step=0)
    assert run_rule("alloc-churn", b.write(tmp_path / "t.sqlite")) == []


def copy_loop(b: TraceBuilder, n: int = 10, *, t0: int = 140_000_000, every: int = 100_000) -> None:
    """No NVTX and no kernels (so no steps): each iteration allocates, copies, frees."""
    for i in range(n):
        t = t0 + i * every
        b.api("cudaMalloc_v3020", t, 5_000)
        b.memcpy(t + 30_000, 10_000, 4096, launch_at=t + 20_000)
        b.api("cudaFree_v3020", t + 50_000, 5_000)


def test_whole_capture_judges_the_loop_between_first_and_last_launch(tmp_path):
    # The window is the whole capture; the 130 ms cudaFree(0), the first malloc (before the first
    # launch) and the last free (after the last launch) are left out: 18 calls remain.
    b = TraceBuilder()
    b.api("cudaFree_v3020", 1_000_000, 130_000_000)
    copy_loop(b, 10)
    [f] = run_rule("alloc-churn", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert m["alloc_calls"] == 18 and m["alloc_time"] == 18 * 5_000 and m["loop_spread"] == 1.0
    assert "calls_per_step" not in m


def test_whole_capture_load_burst_is_not_churn(tmp_path):
    # 30 allocations right after the first launch, then a long loop without any: a burst, not churn.
    b = TraceBuilder()
    b.memcpy(100_030_000, 10_000, 4096, launch_at=100_000_000)
    for i in range(30):
        b.api("cudaMalloc_v3020", 100_100_000 + i * 10_000, 5_000)
    for i in range(10):
        b.memcpy(110_000_000 + i * 1_000_000, 10_000, 4096, launch_at=109_990_000 + i * 1_000_000)
    assert run_rule("alloc-churn", b.write(tmp_path / "t.sqlite")) == []


def test_min_spread_boundary(tmp_path):
    # Calls in the first half of the loop only: 5 of its 10 parts.
    b = TraceBuilder()
    copy_loop(b, 6, every=100_000)
    for i in range(6):  # the loop goes on without allocations
        b.memcpy(140_700_000 + i * 100_000, 10_000, 4096, launch_at=140_690_000 + i * 100_000)
    path = b.write(tmp_path / "t.sqlite")
    spread_value = values(run_rule("alloc-churn", path, options={"min_spread_pct": 0.0})[0])["loop_spread"]
    assert 0.3 <= spread_value <= 0.7
    assert len(run_rule("alloc-churn", path, options={"min_spread_pct": 100 * spread_value, "min_calls": 5})) == 1
    assert run_rule("alloc-churn", path, options={"min_spread_pct": 100 * spread_value + 5, "min_calls": 5}) == []


def test_stream_ordered_pool_churn_is_info(tmp_path):
    b = TraceBuilder()
    start_up(b)
    loop(b, steps=20, allocs_per_step=1, alloc_ns=700, malloc="cuMemAllocAsync", free="cuMemFreeAsync")
    [f] = run_rule("alloc-churn", b.write(tmp_path / "t.sqlite"))
    assert f.severity.value == "info" and values(f)["calls_per_step"] == 2.0
    assert f.location.api in ("cuMemAllocAsync", "cuMemFreeAsync")
    assert "pool" in f.recommendation and "ReleaseThreshold" in f.recommendation


def test_pinned_host_churn(tmp_path):
    b = TraceBuilder()
    loop(b, steps=10, allocs_per_step=1, alloc_ns=200_000, malloc="cudaHostAlloc_v3020", free="cudaFreeHost_v3020")
    [f] = run_rule("alloc-churn", b.write(tmp_path / "t.sqlite"))
    assert f.severity.value == "warning" and "pinned" in f.recommendation


def test_min_calls_per_step_boundary(tmp_path):
    b = TraceBuilder()
    loop(b, steps=10, allocs_per_step=1)  # 2 calls per step
    path = b.write(tmp_path / "t.sqlite")
    assert len(run_rule("alloc-churn", path, options={"min_calls_per_step": 2.0})) == 1
    assert run_rule("alloc-churn", path, options={"min_calls_per_step": 2.01}) == []


def test_a_handful_of_calls_in_a_long_loop_is_not_churn(tmp_path):
    b = TraceBuilder()
    loop(b, steps=30, allocs_per_step=0)
    for i in range(5):  # 5 calls over 30 steps: a cache growing now and then
        b.api("cudaMalloc_v3020", T0 + i * 6 * PERIOD + 20_000, 300_000)
    assert run_rule("alloc-churn", b.write(tmp_path / "t.sqlite")) == []


def test_min_calls_boundary(tmp_path):
    b = TraceBuilder()
    loop(b, steps=3, allocs_per_step=2)  # 12 calls
    path = b.write(tmp_path / "t.sqlite")
    assert len(run_rule("alloc-churn", path, options={"min_calls": 12})) == 1
    assert run_rule("alloc-churn", path, options={"min_calls": 13}) == []


def test_warn_share_boundary(tmp_path):
    b = TraceBuilder()
    loop(b, steps=10, allocs_per_step=2, alloc_ns=5_000)
    path = b.write(tmp_path / "t.sqlite")
    m = values(run_rule("alloc-churn", path)[0])
    share = 100 * m["gpu_idle_in_allocation"] / m["steady_time"]  # the GPU time at stake decides
    assert run_rule("alloc-churn", path, options={"warn_share_pct": share - 1e-3})[0].severity.value == "warning"
    assert run_rule("alloc-churn", path, options={"warn_share_pct": share + 1e-3})[0].severity.value == "info"


def test_memory_usage_events_add_bytes(tmp_path):
    b = TraceBuilder()
    loop(b, steps=10, allocs_per_step=1)
    for i in range(10):
        b.memory_event(T0 + i * PERIOD + 10_500, 1 << 20)
        b.memory_event(T0 + i * PERIOD + 600_500, 1 << 20, allocate=False)
    [f] = run_rule("alloc-churn", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert m["allocation_events"] == 10 and m["bytes_allocated"] == 10 << 20 and m["bytes_allocated_per_step"] == 1 << 20


def test_context_init_rows_is_per_process():
    names = np.array(["cudaFree", "cudaMalloc", "cudaFree", "cudaMalloc", "cudaFree"])
    pids = np.array([1, 1, 1, 2, 2])
    starts = np.array([0, 10, 20, 5, 30])
    assert context_init_rows(names, pids, starts).tolist() == [True, False, False, False, False]


def test_caching_disabled_values():
    assert caching_disabled({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    assert not caching_disabled({"PYTORCH_NO_CUDA_MEMORY_CACHING": "0"})
    assert not caching_disabled({})


# -- real traces -------------------------------------------------------------------------------
def _findings(path):
    result = run_rules(["alloc-churn"], path)
    assert not result.errors and not result.skipped
    return result.findings


def test_nocache_trace_churns(h200):
    [f] = _findings(h200 / "decode_hostsync_nocache.sqlite")
    m = values(f)
    assert f.severity.value == "warning" and m["calls_per_step"] > 400
    assert m["alloc_share_of_steady_time"] > 15 and "PYTORCH_NO_CUDA_MEMORY_CACHING" in f.recommendation
    assert m["bytes_allocated"] > 0


def test_driver_pool_churn_is_cheap(h200):
    [f] = _findings(h200 / "engine_driver_churn_sync.sqlite")
    m = values(f)
    # One cuMemAllocAsync and one cuMemFreeAsync in each of the 48 measured steps, about 3 us per step.
    assert f.severity.value == "info" and m["alloc_calls"] == 96 and m["calls_per_step"] == 2.0
    assert m["alloc_time"] < 1e6 and m["alloc_share_of_steady_time"] < 1


@pytest.mark.parametrize("name", ["decode_eager.sqlite", "moe_eager.sqlite", "engine_contention.sqlite",
                                  "rust_debug_build.sqlite"])
def test_load_time_allocation_stays_quiet(h200, name):
    assert _findings(h200 / name) == []


# -- known causes, in the program's framework --------------------------------------------------
def empty_cache_loop(b: TraceBuilder, steps: int = 10, every: int = 1, *, frees: bool = True) -> None:
    """A decode loop that allocates a 256 MB scratch block and, every ``every`` steps, empties the cache (cudaFree)."""
    for i in range(steps):
        s = T0 + i * PERIOD
        b.nvtx("decode_step", s, s + PERIOD - 10_000)
        b.kernel("gemv", start=s + 200_000, duration=500_000, launch_at=s + 1_000)
        if i % every == 0:
            b.api("cudaMalloc_v3020", s + 10_000, 120_000)
            if frees:
                b.api("cudaFree_v3020", s + 720_000, 250_000)


@pytest.mark.parametrize("every", [1, 3])
def test_cuda_frees_with_the_caching_allocator_on_name_empty_cache(tmp_path, every):
    b = program("pytorch")
    start_up(b)
    empty_cache_loop(b, steps=12, every=every)
    [f] = run_rule("alloc-churn", b.write(tmp_path / "t.sqlite"))
    assert "cudaFree" in f.message and "empty_cache" in f.message
    assert f.recommendation.startswith("Stop calling `torch.cuda.empty_cache()` in the loop")
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING is not set" in f.message


@pytest.mark.parametrize("kind", ["jax", "cuda"])
def test_frees_in_other_programs_get_no_pytorch_words(tmp_path, kind):
    b = program(kind)
    start_up(b)
    empty_cache_loop(b, steps=12)
    [f] = run_rule("alloc-churn", b.write(tmp_path / "t.sqlite"))
    assert not foreign_words(kind, f.message + f.recommendation)
    assert "empty_cache" not in f.message and "Take allocation out of the loop" in f.recommendation


def test_growth_without_frees_is_fragmentation_with_expandable_segments(tmp_path):
    b = program("pytorch")
    start_up(b)
    empty_cache_loop(b, steps=12, frees=False)
    [f] = run_rule("alloc-churn", b.write(tmp_path / "t.sqlite"))
    assert "keeps growing" in f.message and "expandable_segments:True" in f.recommendation


def test_the_platform_allocator_of_jax_is_named(tmp_path):
    b = program("jax", environment={"XLA_PYTHON_CLIENT_ALLOCATOR": "platform", "XLA_FLAGS": ""})
    start_up(b)
    loop(b, steps=10)
    [f] = run_rule("alloc-churn", b.write(tmp_path / "t.sqlite"))
    assert "XLA_PYTHON_CLIENT_ALLOCATOR=platform" in f.message and "Unset XLA_PYTHON_CLIENT_ALLOCATOR" in f.recommendation
    assert not foreign_words("jax", f.message + f.recommendation)
