"""fp32-gemm: single-precision matrix products on CUDA cores of a GPU that has tensor cores for them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from nsys_rules.api import plain_number
from nsys_rules.api import Finding, Framework, LABELS, Location, metric, pct, Rule, RuleContext, Severity
from nsys_rules.api.analysis import flag_names

#: FP32 GEMM kernels that run on CUDA cores (FFMA): cuBLAS's <arch>_sgemm_* and xmma f32 kernels
#: with f32 inputs (complex cf32 ones too: cuDNN's FFT convolutions run their products there),
#: CUTLASS's SIMT kernels (a name holding "gemm" and "simt" or "ffma").
SIMT_GEMM = ("sgemm", "gemm_f32f32_f32f32_f32", "cgemm", "gemm_cf32cf32_f32f32_cf32")
SIMT_MARK = ("simt", "ffma")
#: Tensor-core kernels name their input type (tf32, f16, bf16) or their MMA shape (s1688, s16816,
#: hmma, tensorop); GEMVs are memory-bound either way.
TENSOR_CORE = ("tf32", "tensorop", "hmma", "s1688", "s16816", "bf16", "f16", "half", "gemv")
#: Double precision (DGEMM, CUTLASS SIMT on double): TF32 and FP16 advice does not apply.
DOUBLE = ("dgemm", "zgemm", "double", "f64")
#: With GPU metrics: below this percent of tensor-pipe activity while the FP32 GEMMs run, they are confirmed on CUDA
#: cores; the GEMM part of a trace whose tensor pipes stay below LOW_TENSOR_PCT while its GEMMs run gets precision and
#: shape advice, its saving estimated as reaching TENSOR_TARGET_PCT (well-shaped bf16 GEMMs on H100/H200 keep the
#: tensor pipes 70-90 % active). Constants, not options: the JSON of traces without metrics stays as it was.
CUDA_CORE_PCT = 5.0
LOW_TENSOR_PCT = 40.0
TENSOR_TARGET_PCT = 70.0


#: cuDNN's convolution engines (forward, data and weight gradients; implicit GEMM, Winograd, FFT):
#: an FP32 one runs on CUDA cores where TF32 would let cuDNN pick a tensor-core kernel.
CONV_MARK = ("fprop", "dgrad", "wgrad", "convolve", "winograd", "fft2d_", "conv2d", "convolution")
#: FP32 in a cuDNN kernel name: a template argument (``<float``) or xmma's operand types.
FLOAT_MARK = ("<float", "f32f32", "cf32")


def is_fp32_conv(name: str) -> bool:
    """Whether a kernel name is a cuDNN convolution computed in FP32 on CUDA cores (see :data:`CONV_MARK`)."""
    low = name.lower()
    return (any(s in low for s in CONV_MARK) and any(s in low for s in FLOAT_MARK)
            and not any(s in low for s in TENSOR_CORE) and not any(s in low for s in DOUBLE))


def is_fp32_cuda_core(name: str) -> bool:
    """An FP32 GEMM or convolution on CUDA cores: what TF32 or lower precision would move to tensor cores."""
    return is_simt_gemm(name) or is_fp32_conv(name)


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
    FFMA kernels, CUTLASS SIMT) and cuDNN convolutions in FP32 (implicit-GEMM `fprop`/`dgrad`/
    `wgrad` FFMA kernels, `dgrad_engine<float>`, Winograd and FFT kernels on floats) taking at
    least `min_share_pct` percent of the steady state on a GPU of compute capability 7.0 or newer
    (tensor cores; TF32 from 8.0). Named causes: `NVIDIA_TF32_OVERRIDE=0` in the profiled
    environment (TF32 off for every library), and in PyTorch the switch for the kernels found:
    `torch.backends.cudnn.allow_tf32` for convolutions (on by default, so the program turned it off),
    `torch.backends.cuda.matmul.allow_tf32` for matrix products (off by default).
    Why it hurts: since Ampere, TF32 tensor cores run FP32 GEMMs at about 8x the CUDA cores' peak
    (A100: 156 vs 19.5 TFLOPS; H100: 495 vs 67), and BF16/FP16 at twice that again. PyTorch keeps
    FP32 matmuls off tensor cores by default.
    With GPU metrics in the trace (`nsys profile --gpu-metrics-devices=all`), the tensor pipes'
    activity while those kernels run confirms it (about 0 %: CUDA cores), and GEMMs of any precision
    that keep the tensor pipes under 40 % active while they run (prefill, training) get their own
    finding with precision and shape advice.
    Evidence: time, launches and share of the steady state in those kernels, the top kernels, the
    GPU and its compute capability; measured tensor activity (and DRAM traffic) when the trace has
    GPU metrics.
    Next optimizations: in the program's framework, PyTorch `torch.backends.cudnn.allow_tf32 = True`
    for convolutions (with `channels_last`), `torch.backends.cuda.matmul.allow_tf32 = True` (or
    `torch.set_float32_matmul_precision("high")`) for matrix products, or mixed precision with
    `torch.autocast`; JAX the default precision or `jax_default_matmul_precision="tensorfloat32"`
    instead of `HIGHEST`, or bf16 inputs; TensorFlow `enable_tensor_float_32_execution(True)` or a
    mixed-precision policy; a CUDA program cuBLAS `cublasSetMathMode(handle,
    CUBLAS_TF32_TENSOR_OP_MATH)` or compute type `CUBLAS_COMPUTE_32F_FAST_TF32`, cuDNN's default or
    tensor-op math type. On compute capability 7.x (no TF32): FP16 mixed precision.
    GEMMs with low measured tensor activity: bf16/fp16 (FP8 on Hopper) inputs, M/N/K multiples
    of 64 (at least 8), enough tiles to fill every SM; skinny, memory-bound ones: more tokens per
    GEMM, fused projections.
    Options: `min_share_pct`, `warn_share_pct`, `speedup`.
    Requires: the kernel table; the GPU's compute capability (`TARGET_INFO_GPU`).
    False positives: code that needs full FP32 accuracy (TF32 keeps 10 mantissa bits); check the
    results after the switch. Small or skinny GEMMs gain less than the estimate. Tensor activity
    is unmixed from 100 us samples: a GEMM part too short to separate is not judged.
    """

    name = "fp32-gemm"
    title = "FP32 matrix products on CUDA cores, not tensor cores"
    default_severity = Severity.WARNING
    requires = ("kernels",)
    columns = {"kernels": ("start", "end", "name", "device_id")}
    window = "steady"
    Options = Options
    needs_release_build = True  # tunes measured kernel/host times: a debug build's are not the program's

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        kernels = ctx.frame("kernels")
        if kernels.empty:
            return
        fp32 = self._fp32(ctx, kernels)
        if fp32 is not None:
            yield fp32
        low = self._low_tensor(ctx, kernels, fp32)
        if low is not None:
            yield low

    def _fp32(self, ctx: RuleContext, kernels: Any) -> Finding | None:
        opts = ctx.options
        budget = ctx.budget
        simt = flag_names(kernels["name"], is_fp32_cuda_core)
        if budget is not None and simt.any():
            # The budget's device only, as a mask: no copy of every kernel row for the usual trace without any.
            simt &= kernels["device_id"].to_numpy() == budget.device
        if not simt.any():
            return None
        rows = kernels.loc[simt]
        device = int(rows["device_id"].iloc[0])
        gpu = ctx.trace.gpu(device)
        cc = gpu.compute_capability if gpu is not None else None
        if cc is None or cc[0] < 7:
            return None  # no tensor cores, or none that this trace can show
        durations = (rows["end"] - rows["start"]).to_numpy(np.int64)
        spent = int(durations.sum())
        steady_ns = budget.total_ns if budget is not None else max(1, int(kernels["end"].max() - kernels["start"].min()))
        share = pct(spent, steady_ns)
        if share < opts.min_share_pct:
            return None
        tf32 = cc[0] >= 8
        # The saving comes out of the GEMM part of the step: never more than that part holds.
        gemm_part = budget.ns("gemm") if budget is not None else 0
        ceiling = gemm_part if gemm_part > 0 else spent
        saving = min(spent * (1 - 1 / opts.speedup), ceiling)
        by_name = (rows.assign(d=durations).groupby("name", observed=True)["d"].sum()
                   .sort_values(ascending=False).head(3))
        top = ", ".join(f"{name} {pct(t, spent):.0f} %" for name, t in by_name.items())
        gpu_name = gpu.name if gpu is not None else f"GPU {device}"
        conv = flag_names(rows["name"], is_fp32_conv)
        conv_ns = int(durations[conv].sum())
        kinds = Kinds(conv=conv_ns > 0, matmul=bool((~conv).any()),
                      tf32_off=str(ctx.trace.capture.environment.get("NVIDIA_TF32_OVERRIDE", "")).strip() == "0")
        fw = ctx.framework
        numbers = {"fp32_gemm_time": metric(spent, "ns"), "fp32_conv_time": metric(conv_ns, "ns"),
                   "share_of_steady_time": metric(share, "%"),
                   "launches": metric(len(rows), "count"), "steady_time": metric(steady_ns, "ns"),
                   "compute_capability": metric(cc[0] + cc[1] / 10, "ratio")}
        measured = ""
        tensor = ctx.measure_kernels([str(n) for n in rows["name"].astype(object).unique()],
                                 "fp32 gemm") if budget is not None and budget.metrics is not None else None
        level = tensor.level("tensor_active") if tensor is not None else None
        if level is not None:
            numbers["tensor_active"] = metric(level, "%")
            measured = (f" Measured: the tensor pipes are {level:.1f} % active while they run (GPU metrics), so they "
                        "run on CUDA cores." if level < CUDA_CORE_PCT else
                        f" Measured: the tensor pipes are {level:.0f} % active while they run (GPU metrics): part of "
                        "this work already reaches tensor cores (a kernel whose name does not say TF32), so the saving "
                        "may be smaller.")
        return ctx.finding(
            f"FP32 GEMM and convolution kernels on CUDA cores take {spent / 1e6:.2f} ms, {share:.1f} % of the "
            f"{steady_ns / 1e6:.1f} ms steady state on {gpu_name} (compute capability {cc[0]}.{cc[1]}), "
            f"{len(rows)} launches{_conv_words(conv_ns, spent)}; top: {top}. Tensor cores run them several times "
            f"faster ({'TF32' if tf32 else 'FP16 mixed precision'}); at {plain_number(opts.speedup, 6)}x about "
            f"{saving / 1e6:.2f} ms comes back.{measured}{_cause(fw, kinds, tf32)} Program: {fw.label}.",
            _recommendation(fw, kinds, tf32),
            severity=Severity.WARNING if share >= opts.warn_share_pct else Severity.INFO,
            budget_part="gemm", estimated_savings_ns=saving,
            savings_range=(min(spent / 2, ceiling), min(spent * 7 / 8, ceiling)),
            metrics=numbers,
            location=Location(device=device, kernel=str(by_name.index[0])))

    def _low_tensor(self, ctx: RuleContext, kernels: Any, fp32: Finding | None) -> Finding | None:
        """With GPU metrics: GEMMs (not the FP32 ones above) that keep the tensor pipes little busy while they run."""
        opts = ctx.options
        budget = ctx.budget
        metrics = budget.metrics if budget is not None else None
        if budget is None or metrics is None or not metrics.measured:
            return None
        gemm = metrics.part("gemm")
        level = gemm.level("tensor_active") if gemm is not None else None
        gemm_ns = budget.ns("gemm")
        if gemm is None or level is None or level >= LOW_TENSOR_PCT or not gemm_ns:
            return None
        share = pct(gemm_ns, budget.total_ns)
        if share < opts.min_share_pct:
            return None
        if fp32 is not None and fp32.metrics["fp32_gemm_time"].value >= gemm_ns / 2:
            return None  # mostly the FP32 GEMMs above: their finding says it
        gpu = ctx.trace.gpu(budget.device) if budget.device is not None else None
        cc = gpu.compute_capability if gpu is not None else None
        if cc is not None and cc[0] < 7:
            return None  # no tensor cores
        saving = gemm_ns * (1 - level / TENSOR_TARGET_PCT)
        dram = gemm.dram_pct
        words = gemm.to_json().get("bound_words", "")
        memory_side = dram is not None and dram >= 2 * level
        shape = ("They move more DRAM bytes than they feed the tensor cores: skinny products (few tokens per "
                 "GEMM) are memory-bound: put more tokens in each GEMM (bigger batches or micro-batches, longer "
                 "prefill chunks), fuse the small projections (Q/K/V, gate/up) into one GEMM. " if memory_side else
                 "Neither DRAM nor the tensor pipes are near their peaks: the GEMMs are too small or badly shaped for "
                 "the GPU: make M, N and K multiples of 64 (at least of 8 for bf16/fp16, 16 for fp8: pad the vocabulary "
                 "and hidden sizes), give each GEMM enough tiles to fill every SM (tile and wave quantization: "
                 "batch more tokens per GEMM, or use a grouped/batched GEMM for many small ones). ")
        precision = ("Check the precision too: bf16/fp16 inputs (`torch.autocast(\"cuda\", dtype=torch.bfloat16)`), TF32 "
                     "for the FP32 ones (`torch.backends.cuda.matmul.allow_tf32 = True`)"
                     + (", FP8 on Hopper and newer (Transformer Engine) for the large ones" if cc and cc[0] >= 9 else "")
                     + ".")
        return ctx.finding(
            f"GEMM kernels keep the tensor pipes {level:.0f} % active while they run (GPU metrics, "
            f"±{gemm.stderr.get('tensor_active', 0.0):.1f} points), well below what well-shaped GEMMs reach "
            f"({TENSOR_TARGET_PCT:.0f} % and more): {LABELS['gemm']} take {gemm_ns / 1e6:.2f} ms, {share:.1f} % of the "
            f"{budget.total_ns / 1e6:.1f} ms steady state" + (f"; they are {words}" if words else "") + ". At "
            f"{TENSOR_TARGET_PCT:.0f} % tensor activity about {saving / 1e6:.2f} ms comes back.",
            shape + precision,
            title="GEMMs with low tensor-core activity (measured)", key="low-tensor",
            severity=Severity.WARNING if share >= opts.warn_share_pct else Severity.INFO,
            budget_part="gemm", estimated_savings_ns=saving,
            metrics={"gemm_time": metric(gemm_ns, "ns"), "share_of_steady_time": metric(share, "%"),
                     "tensor_active": metric(level, "%"), **({"dram_pct": metric(dram, "%")} if dram is not None else {}),
                     "steady_time": metric(budget.total_ns, "ns")},
            location=Location(device=budget.device))


@dataclass(frozen=True)
class Kinds:
    """What the FP32 kernels are, and whether the environment turned TF32 off."""

    conv: bool  # cuDNN convolutions among them
    matmul: bool  # matrix products (cuBLAS, CUTLASS) among them
    tf32_off: bool  # NVIDIA_TF32_OVERRIDE=0 in the profiled environment


def _conv_words(conv_ns: int, spent: int) -> str:
    return f" ({pct(conv_ns, spent):.0f} % of that time in cuDNN convolutions)" if conv_ns else ""


def _cause(fw: Framework, kinds: Kinds, tf32: bool) -> str:
    """The switch that keeps them off tensor cores, where the trace or the framework's defaults name it."""
    if not tf32:
        return ""
    if kinds.tf32_off:
        return (" The profiled environment sets `NVIDIA_TF32_OVERRIDE=0`, which turns TF32 off in cuBLAS and cuDNN "
                "for the whole process.")
    if not fw.is_torch:
        return ""
    out = []
    if kinds.conv:
        out.append("cuDNN runs convolutions in FP32 when `torch.backends.cudnn.allow_tf32` is False (PyTorch's "
                   "default is True: the program turned it off, or the `torch.backends.cudnn.conv.fp32_precision` "
                   "of PyTorch 2.9+ is \"ieee\")")
    if kinds.matmul:
        out.append("matrix products stay in FP32 while `torch.backends.cuda.matmul.allow_tf32` is False (PyTorch's "
                   "default) and `torch.set_float32_matmul_precision` is \"highest\"")
    return " In PyTorch " + "; ".join(out) + "." if out else ""


def _recommendation(fw: Framework, kinds: Kinds, tf32: bool) -> str:
    """The switch to tensor cores in the program's framework: TF32 where the GPU has it (8.0 and up), else FP16."""
    env = " First remove `NVIDIA_TF32_OVERRIDE=0` from the environment." if kinds.tf32_off else ""
    if not tf32:
        if fw.is_torch:
            return ("This GPU has FP16 tensor cores but no TF32: use mixed precision, "
                    "`torch.autocast(\"cuda\", dtype=torch.float16)` with a `torch.amp.GradScaler` for training.")
        if fw.name == "jax":
            return ("This GPU has FP16 tensor cores but no TF32: compute in float16 (cast parameters and inputs, keep "
                    "FP32 master weights).")
        if fw.name == "tensorflow":
            return ("This GPU has FP16 tensor cores but no TF32: "
                    "`tf.keras.mixed_precision.set_global_policy(\"mixed_float16\")`.")
        return ("This GPU has FP16 tensor cores but no TF32: use mixed precision (cuBLAS `cublasGemmEx` with FP16 "
                "inputs and FP32 accumulation; cuDNN convolutions on FP16 tensors).")
    if fw.is_torch:
        steps = []
        if kinds.conv:
            steps.append("for the convolutions `torch.backends.cudnn.allow_tf32 = True` (PyTorch 2.9+: "
                         "`torch.backends.cudnn.conv.fp32_precision = \"tf32\"`), with the model and inputs in "
                         "`torch.channels_last` so cuDNN picks NHWC tensor-core kernels")
        if kinds.matmul:
            steps.append("for the matrix products `torch.backends.cuda.matmul.allow_tf32 = True` (or "
                         "`torch.set_float32_matmul_precision(\"high\")`)")
        text = ("Run them on tensor cores: " + "; ".join(steps) + "; or mixed precision with "
                "`torch.autocast(\"cuda\", dtype=torch.bfloat16)` around the forward pass.")
        if fw.name in ("vllm", "sglang"):
            text += " For serving, run the model in bf16 (`--dtype bfloat16`)."
        return text + env + " TF32 keeps 10 mantissa bits: check the results."
    if fw.name == "jax":
        return ("Run them on tensor cores: JAX's default precision already uses TF32, so something asks for full FP32 "
                "(`precision=jax.lax.Precision.HIGHEST` on a `jnp.dot`/`lax.conv`, or "
                "`jax_default_matmul_precision` set to \"highest\"/\"float32\"): use the default or "
                "`jax.config.update(\"jax_default_matmul_precision\", \"tensorfloat32\")`, or bf16 inputs with "
                "`preferred_element_type=jnp.float32`." + env + " TF32 keeps 10 mantissa bits: check the results.")
    if fw.name == "tensorflow":
        return ("Run them on tensor cores: `tf.config.experimental.enable_tensor_float_32_execution(True)` (TF's default: "
                "the program turned it off), or `tf.keras.mixed_precision.set_global_policy(\"mixed_bfloat16\")`."
                + env + " TF32 keeps 10 mantissa bits: check the results.")
    steps = []
    if kinds.matmul:
        steps.append("cuBLAS `cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH)` or the compute type "
                     "`CUBLAS_COMPUTE_32F_FAST_TF32` (cuBLASLt: `CUBLAS_COMPUTE_32F_FAST_TF32` in the matmul descriptor)")
    if kinds.conv:
        steps.append("cuDNN convolutions with the default or tensor-op math type (`CUDNN_DEFAULT_MATH` / "
                     "`CUDNN_TENSOR_OP_MATH`, not `CUDNN_FMA_MATH`)")
    return ("Run them on tensor cores: " + "; ".join(steps) + "; or BF16/FP16 inputs with FP32 accumulation." + env
            + " TF32 keeps 10 mantissa bits: check the results.")


RULE = Fp32Gemm
