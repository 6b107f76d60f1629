"""recompile: one-off compiles and graph re-captures inside the measured loop, and earlier regimes that compile every step."""

from __future__ import annotations

import pytest

from nsys_rules.api import Severity
from nsys_rules.testing import TraceBuilder, metric_values, only_finding, run_rule

T0 = 100_000_000
STEP = 1_000_000


def _loop(b: TraceBuilder, steps: int = 20, *, compile_at: dict[int, int] | None = None,
          capture_at: dict[int, int] | None = None, kernel: str = "void at::native::gemv_kernel<float>()") -> None:
    """A decode loop (NVTX ``step={i}``); ``compile_at``/``capture_at``: step -> host ns spent compiling/capturing first."""
    t = T0
    for i in range(steps):
        start = t
        extra = (compile_at or {}).get(i, 0)
        if extra:
            b.api("cuModuleLoadData", t + extra - 200_000, 150_000)
            t += extra
        extra = (capture_at or {}).get(i, 0)
        if extra:
            b.api("cudaStreamBeginCapture_v10000", t, 5_000)
            b.api("cudaStreamEndCapture_v10000", t + extra - 300_000, 5_000)
            b.api("cudaGraphInstantiateWithFlags_v11040", t + extra - 200_000, 150_000)
            t += extra
        for k in range(4):
            launch = t + k * 20_000
            b.kernel(kernel, start=launch + 10_000, duration=150_000, launch_at=launch)
        t += STEP
        b.nvtx(f"step={i}", start, t - 1_000)


def test_a_one_off_recompile_in_the_loop_is_named_with_torch_compile_advice(tmp_path):
    b = TraceBuilder()
    _loop(b, compile_at={10: 40_000_000}, kernel="triton_poi_fused_add_mul_0")
    f = only_finding(run_rule("recompile", b.write(tmp_path / "t.sqlite")))
    assert f.severity is Severity.WARNING
    m = metric_values(f)
    assert m["steps"] == 1 and m["module_loads"] == 1
    assert m["extra_time"] == pytest.approx(40_000_000, rel=0.05)
    assert "step 11" in f.message and "torch.compile" in f.message
    assert "mark_dynamic" in f.recommendation and "TORCH_LOGS=recompiles" in f.recommendation


def test_a_graph_recapture_in_the_loop_gets_capture_advice(tmp_path):
    b = TraceBuilder()
    _loop(b, capture_at={12: 20_000_000})
    f = only_finding(run_rule("recompile", b.write(tmp_path / "t.sqlite")))
    assert metric_values(f)["graph_captures"] == 3
    assert "captured again" in f.message and "bucket" in f.recommendation


def test_jax_gets_jax_advice_only(tmp_path):
    b = TraceBuilder()
    _loop(b, compile_at={10: 40_000_000}, kernel="loop_add_fusion")
    for i in range(3):
        b.nvtx(f"XlaModule:#hlo_module=jit_step,program_id={i}#", T0 - 10_000_000 + i * 1_000_000, duration=500_000)
    f = only_finding(run_rule("recompile", b.write(tmp_path / "t.sqlite")))
    assert "JAX" in f.message and "JAX_LOG_COMPILES" in f.recommendation
    assert "torch" not in f.recommendation.lower()


def test_quiet_without_compiles_and_below_the_floor(tmp_path):
    b = TraceBuilder()
    _loop(b)
    assert run_rule("recompile", b.write(tmp_path / "quiet.sqlite")) == []
    b = TraceBuilder()
    _loop(b, compile_at={10: 100_000})  # 0.1 ms in a 20 ms loop: under min_share_pct
    assert run_rule("recompile", b.write(tmp_path / "small.sqlite")) == []


def test_loads_in_every_step_are_module_loadings_not_a_recompile(tmp_path):
    b = TraceBuilder()
    _loop(b, compile_at={i: 2_000_000 for i in range(20)})
    assert run_rule("recompile", b.write(tmp_path / "t.sqlite")) == []


def test_an_earlier_regime_that_compiles_every_step(tmp_path):
    # 12 steps each building a new kernel (50 ms), then 12 steady steps of 1 ms.
    b = TraceBuilder()
    _loop(b, steps=24, compile_at={i: 50_000_000 for i in range(12)})
    f = only_finding(run_rule("recompile", b.write(tmp_path / "t.sqlite")))
    assert "earlier regime" in f.message and f.severity is Severity.WARNING
    assert metric_values(f)["steps"] >= 10


def test_a_first_use_load_is_lazy_loading_and_information(tmp_path):
    # The step's extra time is the load call itself: nothing was compiled, a kernel was loaded at first use.
    b = TraceBuilder()
    t = T0
    for i in range(20):
        start = t
        if i == 9:
            b.api("cuLibraryLoadData", t, 8_000_000)
            t += 8_100_000
        for k in range(4):
            b.kernel("void at::native::gemv_kernel<float>()", start=t + k * 20_000 + 10_000, duration=150_000,
                     launch_at=t + k * 20_000)
        t += STEP
        b.nvtx(f"step={i}", start, t - 1_000)
    f = only_finding(run_rule("recompile", b.write(tmp_path / "t.sqlite")))
    assert f.severity is Severity.INFO and "lazy loading" in f.message
    assert "CUDA_MODULE_LOADING=EAGER" in f.recommendation
