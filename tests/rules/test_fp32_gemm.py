"""fp32-gemm: FP32 GEMMs on CUDA cores of a GPU with tensor cores."""

from __future__ import annotations

import pytest

from nsys_rules.rules.fp32_gemm import is_fp32_conv, is_simt_gemm
from nsys_rules.testing import GpuSpec, TraceBuilder, run_rule
from nsys_rules.testing import metric_values as values
from tests.rules.scenarios import foreign_words, program

T0 = 100_000_000
SIMT = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel"


def steps(b: TraceBuilder, gemm: str = SIMT, *, gemm_ns: int = 500_000, steps: int = 6) -> None:
    """Steps of 1 ms: one GEMM, one elementwise kernel, then idle."""
    for i in range(steps):
        s = T0 + i * 1_000_000
        b.nvtx("train_step", s, s + 1_000_000)
        b.kernel(gemm, start=s + 10_000, duration=gemm_ns, launch_at=s + 1_000)
        b.kernel("vectorized_elementwise_kernel", start=s + 10_000 + gemm_ns, duration=50_000, launch_at=s + 2_000)


def test_simt_gemms_on_hopper_are_told_to_use_tf32(tmp_path):
    b = TraceBuilder()
    steps(b)
    [f] = run_rule("fp32-gemm", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert f.severity.value == "warning" and f.budget_part == "gemm"
    assert m["fp32_gemm_time"] == 6 * 500_000 and m["launches"] == 6 and m["compute_capability"] == 9.0
    assert m["share_of_steady_time"] == pytest.approx(100 * 3_000_000 / m["steady_time"])
    assert f.estimated_savings_ns == 2_000_000  # 3x faster: two thirds of the time come back
    assert f.savings_range == (1_500_000, 2_625_000)
    # A program without a framework (the builder's default command) gets cuBLAS's own switch.
    assert "CUBLAS_TF32_TENSOR_OP_MATH" in f.recommendation and "allow_tf32" not in f.recommendation


CONV = ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize32x32x8_stage3_warpsize1x2x1_g1_ffma_"
        "aligna4_alignc4_execute_kernel__5x_cudnn")


@pytest.mark.parametrize("kind,words", [
    ("pytorch", ("torch.backends.cuda.matmul.allow_tf32", "autocast")),
    ("jax", ("jax_default_matmul_precision", "Precision.HIGHEST")),
    ("cuda", ("CUBLAS_TF32_TENSOR_OP_MATH",))])
def test_matmuls_get_the_switch_of_their_framework(tmp_path, kind, words):
    b = program(kind)
    steps(b)
    [f] = run_rule("fp32-gemm", b.write(tmp_path / "t.sqlite"))
    assert all(w in f.recommendation for w in words), f.recommendation
    assert not foreign_words(kind, f.recommendation + f.message)
    assert "cudnn" not in f.recommendation.lower()  # no convolution here: no cuDNN switch


@pytest.mark.parametrize("kind,words,absent", [
    ("pytorch", ("torch.backends.cudnn.allow_tf32", "channels_last"), ("matmul.allow_tf32",)),
    ("jax", ("jax_default_matmul_precision",), ("torch", "cudnn.allow_tf32")),
    ("cuda", ("CUDNN_TENSOR_OP_MATH",), ("torch", "CUBLAS_TF32_TENSOR_OP_MATH"))])
def test_fp32_convolutions_get_the_cudnn_switch_not_the_matmul_one(tmp_path, kind, words, absent):
    b = program(kind)
    steps(b, CONV)
    [f] = run_rule("fp32-gemm", b.write(tmp_path / "t.sqlite"))
    assert values(f)["fp32_conv_time"] == values(f)["fp32_gemm_time"] == 6 * 500_000
    assert all(w in f.recommendation for w in words) and not any(a in f.recommendation for a in absent)
    if kind == "pytorch":  # the cause in the message: PyTorch's default is on, so the program turned it off
        assert "cudnn.allow_tf32" in f.message


def test_tf32_turned_off_by_the_environment_is_named(tmp_path):
    b = program("pytorch", environment={"NVIDIA_TF32_OVERRIDE": "0", "TORCH_CUDA_ARCH_LIST": "9.0"})
    steps(b)
    [f] = run_rule("fp32-gemm", b.write(tmp_path / "t.sqlite"))
    assert "NVIDIA_TF32_OVERRIDE=0" in f.message and "NVIDIA_TF32_OVERRIDE=0" in f.recommendation


def test_turing_gets_fp16_mixed_precision_not_tf32(tmp_path):
    b = program("pytorch", gpus=(GpuSpec(name="NVIDIA GeForce RTX 2080", compute_capability=(7, 5)),))
    steps(b, "volta_sgemm_128x64_nn")
    [f] = run_rule("fp32-gemm", b.write(tmp_path / "t.sqlite"))
    assert "no TF32" in f.recommendation and "float16" in f.recommendation and "allow_tf32" not in f.recommendation


def test_gpu_without_tensor_cores_is_quiet(tmp_path):
    b = TraceBuilder(gpus=(GpuSpec(name="NVIDIA GeForce GTX 1050", compute_capability=(6, 1)),))
    steps(b, "maxwell_sgemm_128x64_nn")
    assert run_rule("fp32-gemm", b.write(tmp_path / "t.sqlite")) == []


@pytest.mark.parametrize("name", ["sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x16", "ampere_tf32_s1688gemm_128x128",
                                  "cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4", "nvjet_sm90_tst_128x8_64x12",
                                  "gemv2T_kernel_val<int, int, float, float, float, float, 128, 16>"])
def test_tensor_core_and_gemv_kernels_are_quiet(tmp_path, name):
    b = TraceBuilder()
    steps(b, name)
    assert run_rule("fp32-gemm", b.write(tmp_path / "t.sqlite")) == []


@pytest.mark.parametrize("gemm_ns,fires", [(15_000, False), (25_000, True)])
def test_min_share_boundary(tmp_path, gemm_ns, fires):
    b = TraceBuilder()
    steps(b, gemm_ns=gemm_ns)  # 1.5 % or 2.5 % of a ~1 ms step
    assert bool(run_rule("fp32-gemm", b.write(tmp_path / "t.sqlite"))) is fires


@pytest.mark.parametrize("name,simt", [
    ("ampere_sgemm_128x64_nn", True), ("void cutlass::Kernel<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>(T1::Params)", True),
    ("sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_ffma", True), ("ampere_dgemm_64x32_nn", False),
    ("cutlass_simt_dgemm_128x128_8x2_nn", False), ("ampere_bf16_s16816gemm_bf16_128x128", False),
    ("void at::native::vectorized_elementwise_kernel<4, float>", False), ("my_simt_tiled_gemm_kernel", True),
    ("gemm_kernel_ffma_128x64", True), ("simt_reduce_kernel", False), ("gemm_1_" * 600 + "x", False),
    ("gemm_1_" * 600 + "simt", True)])
def test_names(name, simt):
    assert is_simt_gemm(name) is simt


# -- with GPU metrics (nsys --gpu-metrics-devices) --------------------------------------------------
BF16_GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"


def sampled(b: TraceBuilder, gemm: str, tensor: float, dram: float = 10.0, n: int = 6) -> None:
    b.sample_gpu_metrics({gemm: {"tensor_active": tensor, "dram_read": dram, "sm_issue": 40},
                          "vectorized_elementwise_kernel": {"tensor_active": 0, "dram_read": 60, "sm_issue": 20}},
                         T0 - 1_000_000, T0 + (n + 1) * 1_000_000, idle={"tensor_active": 0, "dram_read": 0, "sm_issue": 0})


def test_measured_idle_tensor_pipes_confirm_cuda_cores(tmp_path):
    b = TraceBuilder()
    steps(b)
    sampled(b, SIMT, tensor=0)
    [f] = run_rule("fp32-gemm", b.write(tmp_path / "t.sqlite"))
    assert values(f)["tensor_active"] == pytest.approx(0, abs=0.5)
    assert "so they run on CUDA cores" in f.message


def test_measured_tensor_activity_says_part_of_it_already_uses_them(tmp_path):
    b = TraceBuilder()
    steps(b)
    sampled(b, SIMT, tensor=30)
    [f] = run_rule("fp32-gemm", b.write(tmp_path / "t.sqlite"))
    assert values(f)["tensor_active"] == pytest.approx(30, abs=1.0)
    assert "already reaches tensor cores" in f.message


@pytest.mark.parametrize("tensor,fires", [(25, True), (39, True), (45, False), (82, False)])
def test_gemms_with_low_measured_tensor_activity(tmp_path, tensor, fires):
    b = TraceBuilder()
    steps(b, BF16_GEMM)
    sampled(b, BF16_GEMM, tensor=tensor)
    found = run_rule("fp32-gemm", b.write(tmp_path / "t.sqlite"))
    if not fires:
        assert found == []
        return
    [f] = found
    m = values(f)
    assert f.title == "GEMMs with low tensor-core activity (measured)" and f.budget_part == "gemm"
    assert m["tensor_active"] == pytest.approx(tensor, abs=1.0) and m["gemm_time"] == 6 * 500_000
    assert f.severity.value == "warning"  # half the steady state
    assert f.estimated_savings_ns == pytest.approx(6 * 500_000 * (1 - m["tensor_active"] / 70), rel=1e-6)
    assert "multiples of 64" in f.recommendation and "bf16" in f.recommendation and "FP8" in f.recommendation


def test_low_tensor_gemms_that_move_dram_get_batching_advice(tmp_path):
    b = TraceBuilder()
    steps(b, BF16_GEMM)
    sampled(b, BF16_GEMM, tensor=12, dram=70)
    [f] = run_rule("fp32-gemm", b.write(tmp_path / "t.sqlite"))
    assert "more tokens in each GEMM" in f.recommendation and "memory-bound" in f.message


def test_low_tensor_gemms_without_metrics_are_not_judged(tmp_path):
    b = TraceBuilder()
    steps(b, BF16_GEMM)
    assert run_rule("fp32-gemm", b.write(tmp_path / "t.sqlite")) == []


@pytest.mark.parametrize("name,conv", [
    (CONV, True), ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int)", True),
    ("void cudnn::winograd_nonfused::winogradWgradData4x4<float, float>(Params)", True),
    ("void fft2d_r2c_32x32<float, false, 0u, false>(float2 *, const float *)", True),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64", False),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16", False),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>()", False),
    ("void cudnn::detail::dgrad_engine<double, 512, 6, 5, 3, 3, 3, false>(int, int)", False)])
def test_conv_names(name, conv):
    assert is_fp32_conv(name) is conv
