"""The step model on the marks real programs leave: numbered ranges, nested ranges, per-step calls, syncs over graphs."""

from __future__ import annotations

import pytest

from nsys_rules.analysis.names import range_family
from nsys_rules.inputs import open_trace
from nsys_rules.model.steps import step_model
from nsys_rules.testing import TraceBuilder

T0 = 100_000_000
STEP = 2_000_000


def model_of(b: TraceBuilder, tmp_path):
    return step_model(open_trace(b.write(tmp_path / "t.sqlite")))


@pytest.mark.parametrize("name,family", [
    ("train_step 3", "train_step #"), ("step=12", "step=#"), ("iter 7", "iter #"), ("Epoch 1 Step 30", "Epoch # Step #"),
    ("shape=[4,128] step=3", "shape=# step=#"), ("iter_12", "iter_#"), ("step12", "step#"),
    ("fp16_gemm", "fp16_gemm"), ("decode_step", "decode_step"),
])
def test_range_family_replaces_counters(name, family):
    assert range_family(name) == family


def _layered_steps(b: TraceBuilder, steps: int, step_name: str | None, layers: int = 4) -> None:
    for i in range(steps):
        s = T0 + i * STEP
        if step_name is not None:
            b.nvtx(step_name.format(i=i), s, s + STEP - 100_000)
        for j in range(layers):
            at = s + j * 450_000
            b.nvtx(f"layer {j}", at, at + 440_000)
            b.kernel("gemm_kernel", start=at + 50_000, duration=300_000, launch_at=at + 1_000)


@pytest.mark.parametrize("pattern", ["train_step {i}", "step={i}", "Epoch 0 Step {i}", "iter{i}"])
def test_numbered_step_ranges_are_one_step_range(tmp_path, pattern):
    b = TraceBuilder()
    _layered_steps(b, 10, pattern)
    model = model_of(b, tmp_path)
    assert model.source == "nvtx" and model.count == 10
    assert model.name == range_family(pattern.format(i=0))
    assert "'" + model.name + "'" in model.description


def test_position_numbers_inside_a_step_are_not_a_counter(tmp_path):
    # "layer 0".."layer 3" repeat in every step: numbered positions, not iterations. Without a step
    # range they must not become a per-layer step.
    b = TraceBuilder()
    _layered_steps(b, 10, None)
    model = model_of(b, tmp_path)
    assert not (model.source == "nvtx" and model.name == "layer #")


def test_the_outer_range_is_the_step_and_inner_ranges_are_its_parts(tmp_path):
    b = TraceBuilder()
    for i in range(4):
        s = T0 + i * 10_000_000
        b.nvtx("prefill_step", s, s + 9_000_000)
        for j in range(6):
            at = s + j * 1_400_000
            b.nvtx("mlp", at, at + 1_300_000)
            b.kernel("gemm_kernel", start=at + 100_000, duration=1_000_000, launch_at=at + 1_000)
    model = model_of(b, tmp_path)
    assert (model.source, model.name) == ("nvtx", "prefill_step")
    assert model.count >= 3


def _alloc_loop(b: TraceBuilder, steps: int, kernels: int = 6) -> None:
    """An engine without NVTX: cudaMallocAsync at the top of each iteration, cudaFreeAsync at its end."""
    for i in range(steps):
        s = T0 + i * STEP
        b.api("cudaMallocAsync_v11020", s, 5_000)
        for k in range(kernels):
            at = s + 10_000 + k * 200_000
            b.kernel(f"layer_kernel_{k % 3}", start=at + 20_000, duration=150_000, launch_at=at)
        b.api("cudaFreeAsync_v11020", s + 1_500_000, 5_000)


def test_a_call_made_once_per_iteration_marks_the_steps(tmp_path):
    b = TraceBuilder()
    _alloc_loop(b, 12)
    model = model_of(b, tmp_path)
    assert model.source == "call" and "Async" in model.name
    assert 10 <= model.count <= 11  # the calls cut 11 whole steps; warm-up may take one


def test_a_sync_per_token_is_coarser_than_the_graph_launches_of_a_token(tmp_path):
    # Each token replays 4 graphs (a scanned layer stack), then the host reads the token back.
    b = TraceBuilder()
    for i in range(10):
        s = T0 + i * STEP
        for g in range(4):
            launch = s + g * 100_000
            corr = b.graph_launch(launch + 30_000, 60_000, launch_at=launch, traced_as_graph=False)
            b.kernel("layer_kernel", start=launch + 30_000, duration=60_000, correlation_id=corr)
        done = s + 500_000
        b.memcpy(done, 2_000, 4, kind="DtoH", src="device", dst="pinned", launch_at=s + 410_000)
        b.sync(s + 420_000, done + 3_000 - (s + 420_000))
    model = model_of(b, tmp_path)
    assert model.source == "marker" and model.count >= 8
