"""step-uploads: the same host data copied to the GPU every step (offloaded weights), kept resident where it fits."""

from __future__ import annotations

import pytest

from nsys_rules.findings import Severity
from nsys_rules.testing import GpuSpec, TraceBuilder, assert_rule_conventions, run_rule
from nsys_rules.testing import metric_values as values
from nsys_rules.rules.step_uploads import RULE
from tests.rules.scenarios import foreign_words, program

T0 = 100_000_000
PERIOD = 4_000_000


def offload_loop(b: TraceBuilder, steps: int = 10, *, copies: int = 8, nbytes: int = 16 << 20, copy_ns: int = 300_000,
                 src: str = "pinned", vary: bool = False) -> None:
    """Each step copies ``copies`` layers' weights host-to-device, one after the other, and runs a GEMV on each."""
    for i in range(steps):
        s = T0 + i * PERIOD
        b.nvtx("decode_step", s, s + PERIOD - 10_000)
        t = s + 10_000
        for j in range(copies):
            size = nbytes * (1 + (i % 3 == 0 and j == 0)) if vary else nbytes
            b.memcpy(t, copy_ns, size, src=src, launch_at=s + 1_000 + j * 1_000)
            b.kernel("gemv_bf16", start=t + copy_ns, duration=20_000, launch_at=s + 1_500 + j * 1_000)
            t += copy_ns + 20_000


def test_conventions():
    assert_rule_conventions(RULE)


def test_weights_copied_every_step_are_kept_resident(tmp_path):
    b = program("pytorch")
    offload_loop(b)
    [f] = run_rule("step-uploads", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert f.severity is Severity.WARNING and f.budget_part == "copy"
    assert m["htod_bytes_per_step"] == 8 * (16 << 20) and m["htod_copies_per_step"] == 8
    assert m["repeating_steps"] == 10
    # The saving is what keeping them resident gives back: the budget's copy part, the copies' time.
    assert f.estimated_savings_ns == m["copy_time"] > 0
    assert m["copy_time"] <= m["copy_gpu_time"] == 10 * 8 * 300_000
    assert "fit" in f.message and f.recommendation.startswith("Keep them resident")
    assert "model.to(\"cuda\")" in f.recommendation and not foreign_words("pytorch", f.recommendation)


@pytest.mark.parametrize("kind,word", [("jax", "jax.device_put"), ("cuda", "cudaMalloc")])
def test_resident_data_in_the_programs_framework(tmp_path, kind, word):
    b = program(kind)
    offload_loop(b)
    [f] = run_rule("step-uploads", b.write(tmp_path / "t.sqlite"))
    assert word in f.recommendation and not foreign_words(kind, f.message + f.recommendation)


def test_pageable_uploads_are_also_told_to_pin(tmp_path):
    b = program("pytorch")
    offload_loop(b, src="pageable")
    [f] = run_rule("step-uploads", b.write(tmp_path / "t.sqlite"))
    assert values(f)["pageable_share"] == 100 and "pin_memory()" in f.recommendation


def test_uploads_that_do_not_fit_are_prefetched(tmp_path):
    b = program("pytorch", gpus=(GpuSpec(total_memory=200 << 20),))  # a 200 MiB GPU: 128 MiB a step does not fit
    offload_loop(b)
    [f] = run_rule("step-uploads", b.write(tmp_path / "t.sqlite"))
    assert f.key == "too-large" and "prefetch" in f.recommendation and "torch.cuda.Stream" in f.recommendation


def test_an_input_batch_per_step_is_not_resident_data(tmp_path):
    b = program("pytorch")
    offload_loop(b, copies=2, nbytes=8 << 20)  # two tensors a step (images, labels): a batch, not weights
    assert run_rule("step-uploads", b.write(tmp_path / "t.sqlite")) == []


def test_one_large_buffer_a_step_counts(tmp_path):
    b = program("pytorch")
    offload_loop(b, copies=1, nbytes=300 << 20, copy_ns=2_000_000)
    [f] = run_rule("step-uploads", b.write(tmp_path / "t.sqlite"))
    assert values(f)["htod_copies_per_step"] == 1
    assert run_rule("step-uploads", b.write(tmp_path / "u.sqlite"), options={"min_bytes": 400 << 20}) == []


def test_uploads_that_change_size_do_not_repeat(tmp_path):
    b = program("pytorch")
    offload_loop(b, vary=True)  # every third step copies more: only 6 of 10 steps repeat
    path = b.write(tmp_path / "t.sqlite")
    assert run_rule("step-uploads", path) == []
    assert len(run_rule("step-uploads", path, options={"min_steps_pct": 60.0})) == 1


def test_the_share_boundary(tmp_path):
    b = program("pytorch")
    offload_loop(b)
    path = b.write(tmp_path / "t.sqlite")
    share = values(run_rule("step-uploads", path)[0])["copy_share"]
    assert run_rule("step-uploads", path, options={"min_share_pct": share + 0.1}) == []
    [f] = run_rule("step-uploads", path, options={"warn_share_pct": share + 0.1})
    assert f.severity is Severity.INFO


def test_bad_percent_is_refused(tmp_path):
    from nsys_rules.errors import UsageError

    b = program("pytorch")
    offload_loop(b, steps=3)
    with pytest.raises(UsageError, match="fit_pct"):
        run_rule("step-uploads", b.write(tmp_path / "t.sqlite"), options={"fit_pct": 120.0})
