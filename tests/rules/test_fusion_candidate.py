"""fusion-candidate: elementwise and reduction kernels a real share of the steps' GPU time."""

from __future__ import annotations

import pytest

from nsys_rules.testing import TraceBuilder, run_rule
from nsys_rules.testing import metric_values as values
from tests.rules.scenarios import foreign_words, program

T0 = 100_000_000


def gemm_steps(b: TraceBuilder, *, gemm_ns: int = 600_000, pointwise_ns: int = 200_000, steps: int = 6) -> None:
    """Steps of one GEMM and a chain of pointwise kernels after it."""
    for i in range(steps):
        s = T0 + i * 1_000_000
        b.nvtx("prefill_step", s, s + 990_000)
        b.kernel("cutlass_80_tensorop_gemm_kernel", start=s + 10_000, duration=gemm_ns, launch_at=s + 1_000)
        for j in range(4):
            b.kernel("vectorized_elementwise_kernel", start=s + 10_000 + gemm_ns + j * pointwise_ns // 4,
                     duration=pointwise_ns // 4, launch_at=s + 2_000 + j)


def test_pointwise_chain_after_gemms_is_a_candidate(tmp_path):
    b = TraceBuilder()
    gemm_steps(b)
    [f] = run_rule("fusion-candidate", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert f.severity.value == "info" and f.budget_part == "elementwise+reduce"
    assert m["elementwise_reduce_time"] == 6 * 200_000 and m["share_of_busy_time"] == pytest.approx(25.0)
    # Each step's chain of four 50 us kernels fused into one costs about its longest member: 150 of 200 us removed.
    assert m["chains"] == 6 and m["fusible_share"] == pytest.approx(75.0)
    assert f.estimated_savings_ns == 900_000 and f.savings_range == (450_000, 1_200_000)
    assert "epilogue" in f.recommendation and "torch" not in f.recommendation  # a CUDA program: its own kernels


@pytest.mark.parametrize("kind,word", [("pytorch", "torch.compile"), ("jax", "jax.jit"), ("cuda", "CUBLASLT_EPILOGUE")])
def test_the_fusion_is_advised_in_the_programs_framework(tmp_path, kind, word):
    b = program(kind)
    gemm_steps(b)
    [f] = run_rule("fusion-candidate", b.write(tmp_path / "t.sqlite"))
    assert word in f.recommendation and not foreign_words(kind, f.recommendation)


def test_a_compiled_pytorch_program_is_told_about_graph_breaks_not_to_compile(tmp_path):
    b = program("pytorch")
    gemm_steps(b)
    b.kernel("triton_poi_fused_add_mul_0", start=T0 + 6_000_000, duration=1_000)  # Inductor ran: torch.compile
    [f] = run_rule("fusion-candidate", b.write(tmp_path / "t.sqlite"))
    assert "graph_breaks" in f.recommendation and "already runs torch.compile" in f.recommendation


@pytest.mark.parametrize("share,fires", [(14.0, True), (16.0, False)])
def test_min_share_boundary(tmp_path, share, fires):
    b = TraceBuilder()
    gemm_steps(b, gemm_ns=850_000, pointwise_ns=150_000)  # 15 %
    found = run_rule("fusion-candidate", b.write(tmp_path / "t.sqlite"), options={"min_share_pct": share})
    assert bool(found) is fires


def test_gemv_steps_with_a_real_elementwise_share_are_a_candidate_too(tmp_path):
    # Issue 37: not only when GEMM is the largest part (a decode step's GEMVs, an eager loop's pointwise kernels).
    b = TraceBuilder()
    for i in range(6):
        s = T0 + i * 1_000_000
        b.nvtx("decode_step", s, s + 990_000)
        b.kernel("gemv_bf16_kernel", start=s + 10_000, duration=600_000, launch_at=s + 1_000)
        b.kernel("vectorized_elementwise_kernel", start=s + 610_000, duration=150_000, launch_at=s + 2_000)
        b.kernel("vectorized_elementwise_kernel", start=s + 760_000, duration=150_000, launch_at=s + 3_000)
    [f] = run_rule("fusion-candidate", b.write(tmp_path / "t.sqlite"))
    assert values(f)["share_of_busy_time"] == pytest.approx(100 / 3, abs=0.1)
    assert "beside GEMV kernels (67 %)" in f.message


def test_elementwise_kernels_with_a_gemm_between_each_are_no_chain(tmp_path):
    # A kernel between each pair breaks every chain: nothing runs back to back to fuse into one kernel.
    b = TraceBuilder()
    for i in range(6):
        s = T0 + i * 1_000_000
        b.nvtx("decode_step", s, s + 990_000)
        for j in range(3):
            t = s + 10_000 + j * 300_000
            b.kernel("gemv_bf16_kernel", start=t, duration=200_000, launch_at=s + 1_000 + 2 * j)
            b.kernel("vectorized_elementwise_kernel", start=t + 200_000, duration=90_000, launch_at=s + 2_000 + 2 * j)
    assert run_rule("fusion-candidate", b.write(tmp_path / "t.sqlite")) == []


def test_a_chain_is_adjacent_on_its_own_stream_whatever_runs_on_another(tmp_path):
    # Two streams: stream 7 runs three 60 us elementwise kernels back to back while stream 9's short GEMM kernels
    # start between them in time. On stream 7 they are one chain: fused, 120 of its 180 us per step go.
    b = TraceBuilder()
    for i in range(6):
        s = T0 + i * 1_000_000
        b.nvtx("decode_step", s, s + 990_000)
        for j in range(3):
            b.kernel("vectorized_elementwise_kernel", start=s + 10_000 + j * 60_000, duration=60_000,
                     launch_at=s + 1_000 + j, stream=7)
            b.kernel("cutlass_80_tensorop_gemm_kernel", start=s + 40_000 + j * 60_000, duration=2_000,
                     launch_at=s + 1_500 + j, stream=9)
    [f] = run_rule("fusion-candidate", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert m["chains"] == 6 and m["fusible_share"] == pytest.approx(100 * 120 / 180)


def test_a_small_elementwise_share_beside_gemvs_is_not(tmp_path):
    b = TraceBuilder()
    for i in range(6):
        s = T0 + i * 1_000_000
        b.nvtx("decode_step", s, s + 990_000)
        b.kernel("gemv_bf16_kernel", start=s + 10_000, duration=850_000, launch_at=s + 1_000)
        b.kernel("vectorized_elementwise_kernel", start=s + 860_000, duration=100_000, launch_at=s + 2_000)
    assert run_rule("fusion-candidate", b.write(tmp_path / "t.sqlite")) == []


@pytest.mark.parametrize("name,per_step,fires", [("vectorized_elementwise_kernel", 1, False),
                                                 ("nvfuser_pointwise_f0_c1_r0_g0", 3, False),
                                                 ("vectorized_elementwise_kernel", 3, True)])
def test_no_chain_to_fuse_is_no_candidate(tmp_path, name, per_step, fires):
    # One elementwise kernel a step (a softmax benchmark) fuses with nothing; nvFuser's kernels are fused already.
    b = TraceBuilder()
    for i in range(6):
        s = T0 + i * 1_000_000
        b.nvtx("step", s, s + 990_000)
        b.kernel("cutlass_80_tensorop_gemm_kernel", start=s + 10_000, duration=300_000, launch_at=s + 1_000)
        for j in range(per_step):
            b.kernel(name, start=s + 310_000 + j * 100_000, duration=90_000, launch_at=s + 2_000 + j)
    assert bool(run_rule("fusion-candidate", b.write(tmp_path / "t.sqlite"))) is fires


def test_a_host_bound_loop_is_told_but_claims_no_saving(tmp_path):
    # The same kernels in 4 ms steps: the GPU is busy 20 % of them, so fused time would not shorten the step.
    b = TraceBuilder()
    for i in range(6):
        s = T0 + i * 4_000_000
        b.nvtx("step", s, s + 3_990_000)
        b.kernel("cutlass_80_tensorop_gemm_kernel", start=s + 10_000, duration=600_000, launch_at=s + 1_000)
        for j in range(4):
            b.kernel("vectorized_elementwise_kernel", start=s + 2_000_000 + j * 50_000, duration=50_000,
                     launch_at=s + 1_990_000 + j)
    [f] = run_rule("fusion-candidate", b.write(tmp_path / "t.sqlite"))
    assert f.estimated_savings_ns == 0 and "host-bound" in f.message
    assert values(f)["gpu_busy_share_of_steps"] == pytest.approx(20.0, abs=2)  # of the steps on the GPU clock
