"""Kernel taxonomy: classes of real kernel names, the skinny-tile rule, and extension from config."""

from __future__ import annotations

import pandas as pd
import pytest

from nsys_rules.analysis.taxonomy import CLASSES, Taxonomy, base_name, class_times, classify, skinny_tile

# Names as nsys exports them (demangled or short), from our H200 traces and the public corpus.
CASES = {
    "nvjet_sm90_tst_256x8_64x6_4x1_v_bz_TNT": "gemv",  # cuBLASLt tile with N = 8: batch-1 decode
    "nvjet_sm90_tst_64x16_64x16_4x1_v_bz_splitK_TNT": "gemv",
    "nvjet_sm90_tst_8x64_64x16_2x1_v_bz_TNN": "gemv",  # the skinny side can be M (operands swapped)
    "nvjet_sm90_tst_64x24_64x16_4x1_v_bz_TNT": "gemm",
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT": "gemm",  # prefill
    "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN": "gemm",
    "gemv_bf16(const __nv_bfloat16 *, const __nv_bfloat16 *, __nv_bfloat16 *, int, int)": "gemv",
    "moe_expert_gemv(const __nv_bfloat16 *, const __nv_bfloat16 *, __nv_bfloat16 *, int, int, int)": "gemv",
    "gemv2T_kernel_val": "gemv",
    "volta_sgemm_128x64_nn": "gemm",
    "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas":
        "gemm",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0": "attention",
    "flash_fwd_kernel": "attention",
    "rmsnorm(__nv_bfloat16 *, int)": "norm",
    "vectorized_layer_norm_kernel": "norm",
    "silu_mul(const __nv_bfloat16 *, __nv_bfloat16 *, int)": "elementwise",
    "void at::native::vectorized_elementwise_kernel<(int)8, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char *, (unsigned long)3>>(int, T2, T3)": "elementwise",
    # The functor name (direct_copy_kernel_cuda) must not decide: the kernel is an elementwise one.
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)"
    "::[lambda() (instance 3)]>(int, T1, T2)": "elementwise",
    "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<c10::BFloat16, at::native::ArgMaxOps<float>, "
    "unsigned int, long, (int)4, (int)4>>(T3)": "reduce",
    "softmax_warp_forward": "reduce",
    "void cublasLt::splitKreduce_kernel<(int)32, (int)16, int, float>(cublasLt::cublasSplitKParams<T6>)": "reduce",
    "CatArrayBatchedCopy_contig": "memory",
    "transposeCoalesced": "memory",
    "ncclDevKernel_SendRecv": "communication",
    "ncclKernel_AllReduce_RING_LL_Sum_bfloat16": "communication",
    "void at::native::<unnamed>::distribution_elementwise_grid_stride_kernel<float, (int)4>(int, T3)": "elementwise",
    "Fan1": "other",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x8x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas":
        "gemv",
    "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn": "gemm",
    "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x16_64x4_tn_align8": "gemv",
    "trt_ampere_h16816gemm_64x64_ldg8_relu_stages_64x5_tn_v1": "gemm",
    "volta_sgemm_32x32_sliced1x4_tn": "gemm",
    "sm50_xmma_pooling_fw_4d_FP16FP32NHWC_Average_FastDiv_CAlign8_execute_kernel_trt": "reduce",
    "max_pool_forward_nchw": "reduce",
    "nvfuser_inner_persistent_f0_c1_r0_g2": "reduce",
    "cupy_true_divide__float32_float32_float32": "elementwise",
    "cupy_multiply__float_float32_float32": "elementwise",
    "im2col4d_kernel": "memory",
    "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>(const T1 *, int)": "memory",
    "void vllm::paged_attention_v2_kernel<__nv_bfloat16, 128>(float *, int)": "attention",
    "void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(T1 *, int)": "norm",
    "fused_moe_kernel": "gemm",
    "void flashinfer::BatchDecodeWithPagedKVCacheKernel<128>(int)": "attention",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(T1::Params)": "gemm",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x16_64x4_tn_align8>(T1::Params)": "gemv",
    "void at::device_kernel<at::native::MulFunctor<float>>(int)": "other",
}


@pytest.mark.parametrize("name,label", list(CASES.items()))
def test_classify_one(name, label):
    assert classify(pd.Series([name])).iloc[0] == label


def test_classify_categorical_keeps_index_and_handles_null():
    names = pd.Series(pd.Categorical(["gemv_bf16", None, "rmsnorm", "gemv_bf16"]), index=[10, 11, 12, 13])
    out = classify(names)
    assert list(out.index) == [10, 11, 12, 13]
    assert list(out) == ["gemv", "other", "norm", "gemv"]
    assert list(out.cat.categories) == list(CLASSES)


def test_extra_patterns_win_over_builtins():
    names = pd.Series(["w4a16_decode_kernel", "rmsnorm", "nvjet_sm90_tst_256x8_64x6_4x1_v_bz_TNT"])
    assert list(classify(names)) == ["other", "norm", "gemv"]
    out = classify(names, {"gemv": ["w4a16_decode"], "other": ["^nvjet_sm90_tst_256x8"]})
    assert list(out) == ["gemv", "norm", "other"]


def test_bad_extra_pattern_or_class_is_a_clear_error():
    with pytest.raises(ValueError, match="bad kernel pattern"):
        classify(pd.Series(["x"]), {"gemv": ["("]})
    with pytest.raises(ValueError, match="unknown kernel class"):
        classify(pd.Series(["x"]), {"matvec": ["x"]})


def test_skinny_tile_limit_is_configurable():
    name = "nvjet_sm90_tst_64x32_64x16_4x1_v_bz_splitK_TNT"
    assert skinny_tile(name) == 32
    assert Taxonomy().classify_one(name) == "gemm"
    assert Taxonomy(skinny_tile_max=32).classify_one(name) == "gemv"


def test_base_name():
    assert base_name("void at::native::<unnamed>::reduce_kernel<512>(T3)") == "reduce_kernel"
    assert base_name("gemv_bf16(const __nv_bfloat16 *, int)") == "gemv_bf16"
    assert base_name("nvjet_sm90_tst_256x8_64x6_4x1_v_bz_TNT") == "nvjet_sm90_tst_256x8_64x6_4x1_v_bz_TNT"


def test_class_times_sums_durations_per_class():
    names = pd.Series(["gemv_bf16", "rmsnorm", "gemv_bf16", "flash_fwd_kernel"])
    totals = class_times(names, pd.Series([10, 3, 20, 7]))
    assert totals["gemv"] == 30 and totals["norm"] == 3 and totals["attention"] == 7 and totals["gemm"] == 0
    assert totals.index[0] == "gemv" and set(totals.index) == set(CLASSES)
