"""module-loading: code compiled or loaded in the steady loop."""

from __future__ import annotations

import pytest

from nsys_rules.testing import TraceBuilder, run_rule, skip_reason
from nsys_rules.testing import metric_values as values
from tests.rules.scenarios import foreign_words, program, sync_loop


def test_a_load_every_step_is_reported_with_the_compile_time(tmp_path):
    # Every step builds a new attention kernel: 2 ms of host time, then a 1 ms load, then the kernel.
    b = program("pytorch")
    sync_loop(b, steps=12, host_work={i: ("cuLibraryLoadData", 1_000_000) for i in range(12)},
              new_kernel={i: "cudnn_generated_fort_native_sdpa_sm90(float *)" for i in range(12)})
    [f] = run_rule("module-loading", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert m["steps_loading"] == 12 and m["load_calls"] == 12 and m["load_call_time"] == 12_000_000
    assert f.budget_part == "module_loading" and f.severity.value == "warning"
    # The GPU waits for the loads of every step but the first (the steps tile the GPU from the first kernel).
    assert f.estimated_savings_ns == m["gpu_idle_loading"] >= 11 * 1_000_000
    assert "cuDNN" in f.message and "enable_cudnn_sdp" in f.recommendation


def test_a_load_in_one_step_is_left_to_step_outliers(tmp_path):
    b = TraceBuilder()
    sync_loop(b, steps=24, host_work={12: ("cuLibraryLoadData", 1_000_000)})
    assert run_rule("module-loading", b.write(tmp_path / "t.sqlite")) == []


def test_min_step_pct_boundary(tmp_path):
    b = TraceBuilder()
    sync_loop(b, steps=20, host_work={i: ("cuModuleLoadData", 200_000) for i in (3, 9, 15)})
    path = b.write(tmp_path / "t.sqlite")
    assert len(run_rule("module-loading", path, options={"min_step_pct": 15.0})) == 1
    assert run_rule("module-loading", path, options={"min_step_pct": 16.0}) == []


def test_without_steps_it_skips_with_the_reason(tmp_path):
    b = TraceBuilder()
    for i in range(10):
        b.kernel("k", start=1_000_000 + i * 10_000, duration=5_000)
    assert "no steady steps" in skip_reason("module-loading", b.write(tmp_path / "t.sqlite"))


@pytest.mark.parametrize("kind,word", [("pytorch", "enable_cudnn_sdp"), ("jax", "JAX_LOG_COMPILES"),
                                       ("cuda", "plan cache")])
def test_cudnn_runtime_fusion_is_fixed_in_the_programs_framework(tmp_path, kind, word):
    b = program(kind)
    sync_loop(b, steps=12, host_work={i: ("cuLibraryLoadData", 1_000_000) for i in range(12)},
              new_kernel={i: "cudnn_generated_fort_native_sdpa_sm90(float *)" for i in range(12)})
    [f] = run_rule("module-loading", b.write(tmp_path / "t.sqlite"))
    assert word in f.recommendation and not foreign_words(kind, f.recommendation)


@pytest.mark.parametrize("kind,compiled,word", [("pytorch", True, "mark_dynamic"), ("cuda", False, "do_not_specialize")])
def test_triton_compiles_are_torch_compile_only_in_a_compiled_torch_program(tmp_path, kind, compiled, word):
    b = program(kind)
    name = "triton_poi_fused_add_{}" if compiled else "triton_softmax_kernel_{}"
    sync_loop(b, steps=12, host_work={i: ("cuModuleLoadData", 1_000_000) for i in range(12)},
              new_kernel={i: name.format(i) for i in range(12)})
    [f] = run_rule("module-loading", b.write(tmp_path / "t.sqlite"))
    assert word in f.recommendation and not foreign_words(kind, f.recommendation)
