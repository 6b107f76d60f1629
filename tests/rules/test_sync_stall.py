"""sync-stall: built scenarios (firing, quiet, thresholds) and the real H200 traces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsys_rules.inputs import open_trace
from nsys_rules.testing import TraceBuilder, run_rule, run_rules
from nsys_rules.analysis.intervals import merge_intervals as busy_union
from nsys_rules.api.analysis import blocking_calls, copy_directions
from nsys_rules.rules.sync_stall.measure import idle_after
from nsys_rules.testing import metric_values as values
from tests.rules.scenarios import foreign_words, program

PERIOD = 1_000_000  # one decode step, ns
GPU = 800_000  # kernel time per step
T0 = 10_000_000


def decode_loop(b: TraceBuilder, steps: int = 10, *, sync_api: str | None = "cudaStreamSynchronize_v3020",
                readback_api: str | None = "cudaMemcpyAsync_v3020", tid: int = 4242, nvtx_tid: int = 4242,
                gpu: int = GPU, period: int = PERIOD, t0: int = T0) -> None:
    """A decode loop: launch the step's kernel, queue a 4-byte readback, wait for it, repeat.

    Per step the host blocks from +10 us until the readback lands (gpu + 22 us), and the GPU idles
    from then until the next step's kernel starts at +20 us of the next period.
    """
    for i in range(steps):
        s = t0 + i * period
        b.nvtx("decode_step", s, s + period - 10_000, tid=nvtx_tid)
        b.kernel("gemv_bf16(const __nv_bfloat16 *)", start=s + 20_000, duration=gpu, launch_at=s + 1_000, tid=tid)
        done = s + 20_000 + gpu + 2_000
        if readback_api:
            b.memcpy(s + 20_000 + gpu, 2_000, 4, kind="DtoH", src="device", dst="pinned", api=readback_api,
                     launch_at=s + 5_000, tid=tid)
        if sync_api:
            b.sync(s + 10_000, done - (s + 10_000), api=sync_api, tid=tid)



def test_per_step_readback_sync_is_a_warning(tmp_path):
    b = TraceBuilder()
    decode_loop(b, steps=10)
    [f] = run_rule("sync-stall", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert f.rule == "sync-stall" and f.severity.value == "warning"
    assert m["blocking_calls"] == 10 and m["calls_per_step"] == 1.0
    assert m["blocked_time"] == 10 * (GPU + 12_000)
    assert m["per_call_p50"] == GPU + 12_000 and m["per_call_max"] == GPU + 12_000
    assert m["readback_waits"] == 10 and m["confirmed_by_sync_table"] == 10
    # Bubble: from the sync's end (+822 us) to the next step's kernel (+1020 us); the last one ends at the loop's end.
    gap = PERIOD + 20_000 - (20_000 + GPU + 2_000)
    assert m["bubble_p50"] == gap
    assert m["bubble_time"] == 9 * gap + (PERIOD - 10_000 - (20_000 + GPU + 2_000))
    # Steady time on the GPU clock: from the first step's kernel to the last readback's end.
    steady = 9 * PERIOD + GPU + 2_000
    assert m["steady_time"] == steady
    assert m["gpu_idle_time"] == steady - 10 * (GPU + 2_000)
    # Savings: the bubbles after each sync inside the loop (the last one runs past the loop's end).
    assert f.estimated_savings_ns == 9 * gap == m["after_sync_idle"]
    assert f.budget_part == "after_sync"
    assert f.location.api == "cudaStreamSynchronize"
    assert "pinned" in f.recommendation and "event" in f.recommendation


def test_driver_api_syncs_are_found(tmp_path):
    # nsys analyze only knows cudaDeviceSynchronize/cudaStreamSynchronize; the driver calls block just the same.
    b = TraceBuilder()
    decode_loop(b, steps=8, sync_api="cuStreamSynchronize", readback_api="cuMemcpyDtoHAsync_v2")
    [f] = run_rule("sync-stall", b.write(tmp_path / "t.sqlite"))
    assert f.severity.value == "warning" and f.location.api == "cuStreamSynchronize"
    assert values(f)["blocking_calls"] == 8 and values(f)["readback_waits"] == 8


def test_fix_speaks_the_programs_api(tmp_path):
    driver = TraceBuilder(command=["./engine"])
    decode_loop(driver, steps=5, sync_api="cuStreamSynchronize", readback_api="cuMemcpyDtoHAsync_v2")
    [f] = run_rule("sync-stall", driver.write(tmp_path / "d.sqlite"))
    assert "cuEventRecord" in f.recommendation and "torch" not in f.recommendation
    torch = program("pytorch")
    decode_loop(torch, steps=5)
    [f] = run_rule("sync-stall", torch.write(tmp_path / "p.sqlite"))
    # A PyTorch program gets the PyTorch recipe; kernels that are not a model's get generic words.
    assert "non_blocking=True" in f.recommendation and "capture the loop body in a CUDA graph" in f.recommendation
    plain = TraceBuilder(command=["/usr/bin/python3", "decode.py"])  # Python without a framework: CUDA's terms
    decode_loop(plain, steps=5)
    [f] = run_rule("sync-stall", plain.write(tmp_path / "q.sqlite"))
    assert "cudaMemcpyAsync" in f.recommendation and "torch" not in f.recommendation
    model = program("pytorch")
    decode_loop(model, steps=5)
    for i in range(5):  # a forward pass: matrix products with norm kernels
        model.kernel("rms_norm_kernel(float *)", start=T0 + i * PERIOD + 850_000, duration=5_000)
    [f] = run_rule("sync-stall", model.write(tmp_path / "m.sqlite"))
    assert "capture the decode step in a CUDA graph" in f.recommendation and "tokens" in f.recommendation


def training_loop(b: TraceBuilder, steps: int = 8) -> None:
    """A training loop: forward, backward and optimizer kernels, then the loss (4 bytes) read back every step."""
    for i in range(steps):
        s = T0 + i * PERIOD
        b.nvtx("train_step", s, s + PERIOD - 10_000)
        b.kernel("fwd_gemm_kernel", start=s + 20_000, duration=GPU // 2, launch_at=s + 1_000)
        b.kernel("linear_backward_kernel", start=s + 20_000 + GPU // 2, duration=GPU // 2, launch_at=s + 2_000)
        done = s + 20_000 + GPU + 2_000
        b.memcpy(s + 20_000 + GPU, 2_000, 4, kind="DtoH", src="device", dst="pinned", launch_at=s + 5_000)
        b.sync(s + 10_000, done - (s + 10_000))


@pytest.mark.parametrize("kind,words", [("pytorch", ("`.item()` every N steps", "loss.detach()")),
                                        ("jax", ("float()", "every N steps", "jax.lax.scan")),
                                        ("cuda", ("every N steps", "cudaMemcpyAsync"))])
def test_a_training_loop_reading_its_loss_every_step_is_told_to_log_every_n_steps(tmp_path, kind, words):
    b = program(kind)
    training_loop(b)
    [f] = run_rule("sync-stall", b.write(tmp_path / "t.sqlite"))
    assert "every training step" in f.message and "of 4 B" in f.message
    assert f.recommendation.startswith("Read the per-step value back less often")
    assert all(w in f.recommendation for w in words), f.recommendation
    assert not foreign_words(kind, f.message + f.recommendation)


def test_a_readback_every_step_outside_training_is_not_called_a_loss(tmp_path):
    b = program("pytorch")
    decode_loop(b, steps=8)
    [f] = run_rule("sync-stall", b.write(tmp_path / "t.sqlite"))
    assert "training" not in f.message and "less often" not in f.recommendation


@pytest.mark.parametrize("kind,word", [("pytorch", "torch.cuda.synchronize()"), ("jax", "jax.block_until_ready"),
                                       ("cuda", "cudaEventRecord")])
def test_a_device_wide_sync_is_replaced_in_the_programs_terms(tmp_path, kind, word):
    b = program(kind)
    decode_loop(b, steps=6, readback_api=None, sync_api="cudaDeviceSynchronize_v3020")
    [f] = run_rule("sync-stall", b.write(tmp_path / "t.sqlite"))
    assert word in f.recommendation and not foreign_words(kind, f.recommendation)


def test_graph_replay_loop_is_told_to_overlap_replays(tmp_path):
    b = TraceBuilder()
    for i in range(6):
        s = T0 + i * PERIOD
        b.nvtx("decode_step", s, s + PERIOD - 10_000)
        b.graph_launch(s + 20_000, GPU, launch_at=s + 1_000, traced_as_graph=False)
        b.kernel("gemv", start=s + 20_000, duration=GPU, api=None, graph_node_id=1)
        b.sync(s + 10_000, GPU + 12_000)
    [f] = run_rule("sync-stall", b.write(tmp_path / "t.sqlite"))
    assert "already replays as a CUDA graph" in f.recommendation
    # Node-mode capture: the launch call's host time (node tracing inflates it) is reported with the bubble.
    assert values(f)["graph_launch_call_p50"] == b.launch_duration


@pytest.mark.parametrize("api", ["cudaDeviceSynchronize_v3020", "cudaEventSynchronize_v3020", "cuCtxSynchronize",
                                 "cuEventSynchronize"])
def test_every_sync_api_counts(tmp_path, api):
    b = TraceBuilder()
    decode_loop(b, steps=5, sync_api=api, readback_api=None)
    [f] = run_rule("sync-stall", b.write(tmp_path / "t.sqlite"))
    assert values(f)["blocking_calls"] == 5 and values(f)["readback_waits"] == 0
    assert f.location.api == api.split("_v")[0]


def test_no_sync_is_quiet(tmp_path):
    b = TraceBuilder()
    decode_loop(b, steps=10, sync_api=None)
    assert run_rule("sync-stall", b.write(tmp_path / "t.sqlite")) == []


def test_one_final_sync_is_not_a_stall(tmp_path):
    b = TraceBuilder()
    decode_loop(b, steps=10, sync_api=None)
    b.sync(T0 + 10 * PERIOD + 50_000, 5_000_000, api="cudaDeviceSynchronize_v3020", kind="context")
    assert run_rule("sync-stall", b.write(tmp_path / "t.sqlite")) == []


def test_syncs_while_loading_are_left_out(tmp_path):
    b = TraceBuilder()
    for i in range(6):  # model load: copy weights, sync, before the first step
        b.kernel("init_weights", start=1_000_000 + i * 100_000, duration=50_000)
        b.sync(1_000_000 + i * 100_000 + 10_000, 60_000)
    decode_loop(b, steps=10, sync_api=None)
    assert run_rule("sync-stall", b.write(tmp_path / "t.sqlite")) == []


def test_min_calls_boundary(tmp_path):
    b = TraceBuilder()
    decode_loop(b, steps=4)
    path = b.write(tmp_path / "t.sqlite")
    assert len(run_rule("sync-stall", path, options={"min_calls": 4})) == 1
    assert run_rule("sync-stall", path, options={"min_calls": 5}) == []


def test_warn_share_boundary(tmp_path):
    b = TraceBuilder()
    decode_loop(b, steps=6)
    path = b.write(tmp_path / "t.sqlite")
    [f] = run_rule("sync-stall", path)
    share = 100 * f.estimated_savings_ns / values(f)["steady_time"]  # the GPU time at stake decides
    plain = {"structural_block_pct": 100.0}  # leave the per-step round-trip rule out of this boundary
    assert run_rule("sync-stall", path, options={**plain, "warn_share_pct": share - 1e-3})[0].severity.value == "warning"
    assert run_rule("sync-stall", path, options={**plain, "warn_share_pct": share + 1e-3})[0].severity.value == "info"


def test_a_round_trip_every_step_that_parks_the_host_is_a_warning(tmp_path):
    # Tiny bubbles (1 % of the step) but the host sits in the sync most of every step.
    b = TraceBuilder()
    decode_loop(b, steps=10, gpu=980_000, period=1_000_000)
    path = b.write(tmp_path / "t.sqlite")
    [f] = run_rule("sync-stall", path)
    m = values(f)
    assert 100 * f.estimated_savings_ns / m["steady_time"] < 5 and m["blocked_share_of_steady_time"] > 50
    assert f.severity.value == "warning" and "critical path" in f.message
    [g] = run_rule("sync-stall", path, options={"structural_block_pct": 100.0})
    assert g.severity.value == "info"


def test_short_syncs_are_info(tmp_path):
    # The host syncs every step but the GPU is long done: 2 us waits that cause no bubble (the GPU
    # went idle before the sync began), so nothing to save.
    b = TraceBuilder()
    for i in range(10):
        s = T0 + i * PERIOD
        b.nvtx("decode_step", s, s + PERIOD - 10_000)
        b.kernel("small", start=s + 20_000, duration=50_000, launch_at=s + 1_000)
        b.sync(s + 500_000, 2_000)
    [f] = run_rule("sync-stall", b.write(tmp_path / "t.sqlite"))
    assert f.severity.value == "info" and values(f)["blocked_time"] == 20_000 and f.estimated_savings_ns == 0


def test_gpu_bound_loop_savings_are_the_idle_gaps(tmp_path):
    # The host waits almost the whole step, but the GPU is busy 99 % of it: overlap can only win the gaps.
    b = TraceBuilder()
    decode_loop(b, steps=10, gpu=970_000)
    [f] = run_rule("sync-stall", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert f.severity.value == "warning"
    assert f.estimated_savings_ns == m["gpu_idle_time"] < m["blocked_time"] / 10


def test_host_bound_loop_saves_only_the_waits(tmp_path):
    # The host needs the whole step for its own work (Python before each launch); the GPU's 50 us
    # kernel is done long before the 12 us readback wait. After each sync the GPU idles ~940 us, but
    # that is the host's own pace, which it keeps without the sync: only the waits come back.
    b = TraceBuilder()
    for i in range(10):
        s = T0 + i * PERIOD
        b.nvtx("decode_step", s, s + PERIOD - 10_000)
        b.kernel("small", start=s + 150_000, duration=50_000, launch_at=s + 140_000)
        b.memcpy(s + 200_000, 2_000, 4, kind="DtoH", src="device", dst="pinned", api="cudaMemcpyAsync_v3020",
                 launch_at=s + 195_000)
        b.sync(s + 198_000, 12_000)
    [f] = run_rule("sync-stall", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert m["bubble_p50"] > 900_000 and m["per_call_p50"] == 12_000
    assert f.estimated_savings_ns == m["recoverable_time"] <= m["blocked_time"] == 10 * 12_000
    assert f.estimated_savings_ns >= 9 * 12_000  # every wait inside the loop
    assert f.severity.value == "info" and "host-bound" in f.message


def test_synchronous_device_to_host_copy_is_a_readback(tmp_path):
    b = TraceBuilder()
    for i in range(5):
        s = T0 + i * PERIOD
        b.nvtx("decode_step", s, s + PERIOD - 10_000)
        b.kernel("gemv", start=s + 20_000, duration=GPU, launch_at=s + 1_000)
        # cudaMemcpy (not Async) to the host blocks until the kernel and the copy are done.
        b.memcpy(s + 20_000 + GPU, 2_000, 4, kind="DtoH", src="device", dst="pageable", api="cudaMemcpy_v3020",
                 launch_at=s + 10_000)
        # A synchronous host-to-device copy is not a readback.
        b.memcpy(s + 900_000, 2_000, 4, kind="HtoD", src="pageable", dst="device", api="cudaMemcpy_v3020",
                 launch_at=s + 890_000)
    [f] = run_rule("sync-stall", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert m["blocking_calls"] == 5 and m["readback_waits"] == 5 and f.location.api == "cudaMemcpy"


def test_worker_thread_syncs_inside_main_thread_steps(tmp_path):
    # The step range is pushed on the main thread; a worker launches and syncs: the window spans all threads.
    b = TraceBuilder()
    decode_loop(b, steps=10, tid=4300, nvtx_tid=4242)
    [f] = run_rule("sync-stall", b.write(tmp_path / "t.sqlite"))
    assert f.severity.value == "warning" and f.location.tid == 4300 and values(f)["blocking_calls"] == 10


# -- pure functions ----------------------------------------------------------------------------
def test_idle_after_busy_and_gaps():
    union = busy_union(np.array([0, 50, 200]), np.array([100, 120, 300]))
    assert union[0].tolist() == [0, 200] and union[1].tolist() == [120, 300]
    assert idle_after(np.array([10, 120, 150, 200, 310]), union, 1000).tolist() == [0, 80, 50, 0, 690]


def test_copy_direction_uses_the_memcpy_row_before_the_name():
    api = pd.DataFrame({"start": [0, 10, 20], "end": [5, 15, 25], "pid": [1, 1, 1], "tid": [1, 1, 1],
                        "correlation_id": [1, 2, 3]})
    memcpy = pd.DataFrame({"pid": [1, 1], "correlation_id": [1, 2], "copy_kind": [1, 2], "bytes": [64, 4]})
    names = pd.Series(["cudaMemcpy", "cudaMemcpy", "cuMemcpyDtoH"])
    calls = blocking_calls(api, names, copy_directions(api, memcpy))
    # HtoD copy 1 is not a readback, DtoH copy 2 is, and the driver's DtoH copy is by its name.
    assert calls["correlation_id"].tolist() == [2, 3] and set(calls["kind"]) == {"readback"}


# -- real traces -------------------------------------------------------------------------------
def _by_rule(path):
    result = run_rules(["sync-stall"], path)
    assert not result.errors and not result.skipped
    return result.findings


def test_driver_syncs_on_engine_trace(h200):
    path = h200 / "engine_driver_churn_sync.sqlite"
    trace = open_trace(path)
    try:  # over the whole capture: 51 cuStreamSynchronize calls block 81.6 ms (nsys analyze sees 0.28 ms)
        api = trace.frame("api", ["start", "end", "pid", "tid", "correlation_id"])
        calls = blocking_calls(api, trace.api_names(), copy_directions(api, None))
        driver = calls[calls["api"] == "cuStreamSynchronize"]
        assert len(driver) == 51
        assert (driver["end"] - driver["start"]).sum() == pytest.approx(81.6e6, rel=2e-3)
    finally:
        trace.close()
    [f] = _by_rule(path)
    m = values(f)
    # Steady state: the 48 measured steps after 3 warm-up steps and the harness's barrier sync, one
    # driver sync each, 76.9 ms.
    assert f.severity.value == "warning" and f.location.api == "cuStreamSynchronize"
    assert m["blocking_calls"] == 48 and m["calls_per_step"] == 1.0
    assert m["readback_waits"] == 48 and m["confirmed_by_sync_table"] == 48
    assert m["blocked_time"] == pytest.approx(76.9e6, rel=1e-3)
    assert m["blocked_share_of_steady_time"] > 80
    # GPU-bound: a 13 us bubble per step, so overlap wins little, far less than the blocked time.
    assert 5e3 < m["bubble_p50"] < 30e3
    assert f.estimated_savings_ns < 0.1 * m["blocked_time"]


@pytest.mark.parametrize("name", ["decode_graph_hostsync.sqlite", "engine_worker_thread.sqlite"])
def test_per_step_syncs_warn_on_real_traces(h200, name):
    [f] = _by_rule(h200 / name)
    m = values(f)
    assert f.severity.value == "warning"
    assert 0.9 <= m["calls_per_step"] <= 1.1 and m["readback_waits"] >= 0.9 * m["blocking_calls"]


@pytest.mark.parametrize("name", ["decode_graph_node.sqlite", "decode_graph_profilerapi.sqlite"])
def test_benign_syncs_stay_quiet_on_real_traces(h200, name):
    # decode_graph_node syncs only while loading; decode_graph_profilerapi has one final sync after the loop.
    assert all(f.severity.value == "info" for f in _by_rule(h200 / name))


def _futex_readback_loop(b: TraceBuilder, *, wake_ns: int = 150_000, steps: int = 10) -> None:
    """JAX's ``float(loss)``: a 4-byte cuMemcpyDtoHAsync, no CUDA sync; the main thread (tid = pid) sleeps in a futex
    from just after its launch until ``wake_ns`` after the copy lands, then works 2 ms before the next step."""
    from nsys_rules.testing.builder import PID
    for i in range(steps):
        s = T0 + i * 3 * PERIOD
        b.nvtx("step", s, s + 3 * PERIOD - 10_000, tid=PID)
        b.kernel("loop_add_fusion", start=s + 20_000, duration=GPU, launch_at=s + 1_000, tid=PID)
        landed = s + 20_000 + GPU + 2_000
        b.memcpy(landed - 2_000, 2_000, 4, kind="DtoH", src="device", dst="pinned", api="cuMemcpyDtoHAsync_v2",
                 launch_at=s + 5_000, tid=PID)
        b.osrt("futex", s + 12_000, landed + wake_ns - (s + 12_000), tid=PID)
        b.osrt("futex", s + 30_000, 50_000, tid=77)  # a helper thread's short wait: no readback's


def test_an_os_wait_woken_by_a_readback_is_a_sync_without_a_sync_call(tmp_path):
    b = TraceBuilder()
    _futex_readback_loop(b)
    [f] = run_rule("sync-stall", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert m["host_waits_on_readbacks"] == 10 and m["readback_waits"] == 10
    assert m["per_call_p50"] == pytest.approx(GPU + 22_000 + 150_000 - 12_000, abs=1_000)  # the whole wait
    assert "futex on cuMemcpyDtoHAsync" in f.message and "device-to-host readback of 4 B" in f.message
    assert f.estimated_savings_ns > 0 and f.budget_part == "after_sync+host_prep"


def test_an_os_wait_that_outlives_the_readback_by_far_is_not_one(tmp_path):
    b = TraceBuilder()
    _futex_readback_loop(b, wake_ns=5_000_000)  # woke 5 ms after the copy: something else woke it
    assert run_rule("sync-stall", b.write(tmp_path / "t.sqlite")) == []
