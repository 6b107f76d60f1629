"""fp32-gemm: single-precision matrix products on CUDA cores of a GPU that has tensor cores for them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from nsys_rules.api import Finding, Location, Rule, RuleContext, Severity, flag_names, metric, pct

#: FP32 GEMM kernels that run on CUDA cores (FFMA): cuBLAS's <arch>_sgemm_* and xmma f32 kernels
#: with f32 inputs, CUTLASS's SIMT kernels (a name holding "gemm" and "simt" or "ffma").
SIMT_GEMM = ("sgemm", "gemm_f32f32_f32f32_f32")
SIMT_MARK = ("simt", "ffma")
#: Tensor-core kernels name their input type (tf32, f16, bf16) or their MMA shape (s1688, s16816,
#: hmma, tensorop); GEMVs are memory-bound either way.
TENSOR_CORE = ("tf32", "tensorop", "hmma", "s1688", "s16816", "bf16", "f16", "half", "gemv")
#: Double precision (DGEMM, CUTLASS SIMT on double): TF32 and FP16 advice does not apply.
DOUBLE = ("dgemm", "zgemm", "double", "f64")


def is_simt_gemm(name: str) -> bool:
    """Whether a kernel name is an FP32 GEMM on CUDA cores (see :data:`SIMT_GEMM`).

    Substring tests on the lower-cased name, not regular expressions: a pattern like ``gemm.*simt``
    backtracks over every "gemm" of a long hostile name (20 ms per 4 KB name, 70 s for 3,200 of them).
    """
    low = name.lower()
    simt = any(s in low for s in SIMT_GEMM) or ("gemm" in low and any(s in low for s in SIMT_MARK))
    return simt and not any(s in low for s in TENSOR_CORE) and not any(s in low for s in DOUBLE)


@dataclass(frozen=True)
class Options:
    """Options of fp32-gemm."""

    min_share_pct: float = field(default=2.0, metadata={
        "help": "percent of the steady-state time in FP32 CUDA-core GEMMs below which nothing is reported"})
    warn_share_pct: float = field(default=10.0, metadata={
        "help": "percent of the steady-state time in FP32 CUDA-core GEMMs at or above which the finding is a "
                "warning"})
    speedup: float = field(default=3.0, metadata={
        "help": "how many times faster the same GEMMs typically run on tensor cores (the point estimate of the "
                "saving; the range runs from 2x to 8x, the ratio of the peaks)"})


class Fp32Gemm(Rule):
    """FP32 matrix products on CUDA cores where the GPU has tensor cores that could run them.

    What it detects: GEMM kernels in FP32 on CUDA cores (cuBLAS `*_sgemm_*`, xmma `f32f32_f32f32`
    FFMA kernels, CUTLASS SIMT) taking at least `min_share_pct` percent of the steady state on a GPU
    of compute capability 7.0 or newer (tensor cores; TF32 from 8.0).
    Why it hurts: since Ampere, TF32 tensor cores run FP32 GEMMs at about 8x the CUDA cores' peak
    (A100: 156 vs 19.5 TFLOPS; H100: 495 vs 67), and BF16/FP16 at twice that again. PyTorch keeps
    FP32 matmuls off tensor cores by default.
    Evidence: time, launches and share of the steady state in those kernels, the top kernels, the
    GPU and its compute capability.
    Next optimizations: PyTorch `torch.backends.cuda.matmul.allow_tf32 = True` (or
    `torch.set_float32_matmul_precision("high")`), or mixed precision with `torch.autocast`; JAX
    `jax.config.update("jax_default_matmul_precision", "tensorfloat32")`; cuBLAS
    `cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH)` or compute type
    `CUBLAS_COMPUTE_32F_FAST_TF32`. On compute capability 7.x (no TF32): FP16 mixed precision.
    Options: `min_share_pct`, `warn_share_pct`, `speedup`.
    Requires: the kernel table; the GPU's compute capability (`TARGET_INFO_GPU`).
    False positives: code that needs full FP32 accuracy (TF32 keeps 10 mantissa bits); check the
    results after the switch. Small or skinny GEMMs gain less than the estimate.
    """

    name = "fp32-gemm"
    title = "FP32 matrix products on CUDA cores, not tensor cores"
    default_severity = Severity.WARNING
    requires = ("kernels",)
    columns = {"kernels": ("start", "end", "name", "device_id")}
    window = "steady"
    Options = Options

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        kernels = ctx.frame("kernels")
        if kernels.empty:
            return
        budget = ctx.budget
        simt = flag_names(kernels["name"], is_simt_gemm)
        if budget is not None and simt.any():
            # The budget's device only, as a mask: no copy of every kernel row for the usual trace without any.
            simt &= kernels["device_id"].to_numpy() == budget.device
        if not simt.any():
            return
        rows = kernels.loc[simt]
        device = int(rows["device_id"].iloc[0])
        gpu = ctx.trace.gpu(device)
        cc = gpu.compute_capability if gpu is not None else None
        if cc is None or cc[0] < 7:
            return  # no tensor cores, or none that this trace can show
        durations = (rows["end"] - rows["start"]).to_numpy(np.int64)
        spent = int(durations.sum())
        steady_ns = budget.total_ns if budget is not None else max(1, int(kernels["end"].max() - kernels["start"].min()))
        share = pct(spent, steady_ns)
        if share < opts.min_share_pct:
            return
        tf32 = cc[0] >= 8
        # The saving comes out of the GEMM part of the step: never more than that part holds.
        gemm_part = budget.ns("gemm") if budget is not None else 0
        ceiling = gemm_part if gemm_part > 0 else spent
        saving = min(spent * (1 - 1 / opts.speedup), ceiling)
        by_name = (rows.assign(d=durations).groupby("name", observed=True)["d"].sum()
                   .sort_values(ascending=False).head(3))
        top = ", ".join(f"{name} {pct(t, spent):.0f} %" for name, t in by_name.items())
        gpu_name = gpu.name if gpu is not None else f"GPU {device}"
        yield ctx.finding(
            f"FP32 GEMM kernels on CUDA cores take {spent / 1e6:.2f} ms, {share:.1f} % of the "
            f"{steady_ns / 1e6:.1f} ms steady state on {gpu_name} (compute capability {cc[0]}.{cc[1]}), "
            f"{len(rows)} launches; top: {top}. Tensor cores run them several times faster "
            f"({'TF32' if tf32 else 'FP16 mixed precision'}); at {opts.speedup:g}x about "
            f"{saving / 1e6:.2f} ms comes back.",
            _recommendation(tf32),
            severity=Severity.WARNING if share >= opts.warn_share_pct else Severity.INFO,
            budget_part="gemm", estimated_savings_ns=saving,
            savings_range=(min(spent / 2, ceiling), min(spent * 7 / 8, ceiling)),
            metrics={"fp32_gemm_time": metric(spent, "ns"), "share_of_steady_time": metric(share, "%"),
                     "launches": metric(len(rows), "count"), "steady_time": metric(steady_ns, "ns"),
                     "compute_capability": metric(cc[0] + cc[1] / 10, "ratio")},
            location=Location(device=device, kernel=str(by_name.index[0])))


def _recommendation(tf32: bool) -> str:
    """The switch to tensor cores: TF32 where the GPU has it (compute capability 8 and up), else FP16."""
    return ("Run them on tensor cores: in PyTorch `torch.backends.cuda.matmul.allow_tf32 = True` (or "
            "`torch.set_float32_matmul_precision(\"high\")`), or mixed precision with "
            "`torch.autocast(\"cuda\", dtype=torch.bfloat16)`; in JAX "
            "`jax.config.update(\"jax_default_matmul_precision\", \"tensorfloat32\")`; with cuBLAS "
            "`cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH)` or the compute type "
            "`CUBLAS_COMPUTE_32F_FAST_TF32`. TF32 keeps 10 mantissa bits: check the results."
            if tf32 else
            "This GPU has FP16 tensor cores but no TF32: use mixed precision (PyTorch "
            "`torch.autocast(\"cuda\", dtype=torch.float16)` with a `GradScaler` for training; cuBLAS "
            "`cublasGemmEx` with FP16 inputs and FP32 accumulation).")


RULE = Fp32Gemm
