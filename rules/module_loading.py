"""module-loading: GPU code loaded or compiled inside the steady loop, step after step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from nsys_rules.api import (compiles_only, Finding, Framework, library_of, Location, metric, MissingData, pct,
                            Renamed, Rule, RuleContext, Severity, step_lengths)
from nsys_rules.api.analysis import in_set, MODULE_LOADS, point_in


@dataclass(frozen=True)
class Options:
    """Options of module-loading."""

    min_step_pct: float = field(default=10.0, metadata={
        "help": "percent of the steady steps that must load code: a load in one step is an outlier (step-outliers)"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "percent of the steady state the GPU idles while code is compiled or loaded, for a warning"})


def loads_per_step(starts: np.ndarray, host: np.ndarray) -> np.ndarray:
    """Module-load calls starting inside each step."""
    index = point_in(starts, host[:, 0], host[:, 1])
    return np.bincount(index[index >= 0], minlength=len(host))


class ModuleLoading(Rule):
    """GPU code is compiled or loaded in the steady loop, not once at start-up.

    What it detects: module-load calls (`cuLibraryLoadData`, `cuModuleLoadData`, ...) inside at
    least `min_step_pct` percent of the steady steps, and the GPU idle time the budget gives to
    loading (a gap that ends in a load spent its host time building that module: cuDNN runtime
    fusion, NVRTC, Triton). The kernels launched right after each load name the generator.
    Why it hurts: with lazy loading every new kernel costs a load the first time it runs; a loop
    whose shapes change every step (a KV cache growing by one token under cuDNN's runtime-fused
    attention, torch.compile recompiling for new sizes) builds new kernels every step, and the
    GPU waits for the compiler.
    Evidence: steps that load code, load calls and their time, GPU idle while compiling/loading
    (the budget's module_loading part), the kernels that follow the loads.
    Next optimizations: make the shapes static or bucketed (a static KV cache, padding to a few
    lengths) and warm up every shape before the loop, in the program's framework: PyTorch can
    switch the attention backend away from runtime-compiled kernels
    (`torch.backends.cuda.enable_cudnn_sdp(False)`) and mark dynamic dimensions for torch.compile;
    JAX pads to fixed shapes (`JAX_LOG_COMPILES=1` names what compiles again); a CUDA program keeps
    one cuDNN execution plan per shape bucket; `CUDA_MODULE_LOADING=EAGER` moves plain lazy loads
    to start-up.
    Options: `min_step_pct`, `warn_share_pct`.
    Requires: a step model and the API table; kernels to name what was loaded.
    False positives: a loop that meets each shape once by design (a benchmark sweep) loads by
    design; in production the cache would be warm.
    """

    name = "module-loading"
    title = "Code compiled or loaded inside the steady loop"
    default_severity = Severity.WARNING
    requires = ("api",)
    optional = ("kernels",)
    columns = {"api": ("start", "end", "name", "pid", "tid"), "kernels": ("start", "end", "name")}
    window = "steady"
    Options = Options
    renamed_options = {"min_step_share": Renamed("min_step_pct"), "warn_share": Renamed("warn_share_pct")}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        model, budget = ctx.steps, ctx.budget
        if model is None or budget is None:
            reason = ctx.window.model.reason if ctx.window.model is not None else "no step model"
            raise MissingData(f"no steady steps to judge ({reason})",
                              "mark the loop's steps with an NVTX range, or capture around the loop")
        api = ctx.trace.frame("api", ["start", "end", "name", "pid", "tid"])
        loading = in_set(ctx.trace.api_names(), MODULE_LOADS)
        if model.pid is not None:
            loading &= api["pid"].to_numpy() == model.pid
        starts = api["start"].to_numpy(np.int64)[loading]
        ends = api["end"].to_numpy(np.int64)[loading]
        per_step = loads_per_step(starts, model.host)
        durations = step_lengths(model.gpu_durations, model.host)  # as recompile counts them
        if compiles_only(durations[per_step > 0], float(np.median(durations)), model.count):
            return  # a few steps that each compile for many steps' time: recompile names them one by one
        steps_loading = int((per_step > 0).sum())
        if steps_loading < max(2, opts.min_step_pct / 100 * model.count):
            return
        inside = point_in(starts, model.host[:, 0], model.host[:, 1]) >= 0
        calls, call_ns = int(inside.sum()), int((ends[inside] - starts[inside]).sum())
        idle = budget.ns("module_loading")
        steady = budget.total_ns
        followers = ctx.kernels_after(starts[inside])
        source = library_of(followers)
        source = "" if source == "gemm" else source  # a GEMM library's lazy load: the generic advice
        share = pct(idle, steady)
        fw = ctx.framework
        triton = ("Triton kernels are compiled (torch.compile recompiling for new shapes)" if fw.is_torch and fw.compiled
                  else "Triton kernels are compiled (XLA's Triton fusions for new shapes)" if fw.name == "jax"
                  else "Triton kernels are compiled for new shapes")
        what = {"cudnn": "cuDNN builds runtime-fused kernels (its generated kernels follow the loads)",
                "triton": triton}.get(source, "new kernels are loaded lazily")
        named = f" Kernels right after the loads: {', '.join(followers[:3])}." if followers else ""
        message = (f"{steps_loading} of {model.count} steady steps load GPU code ({calls} load calls, "
                   f"{call_ns / 1e6:.2f} ms in the calls): {what}. The GPU waits {idle / 1e6:.1f} ms for it, "
                   f"{share:.1f} % of the {steady / 1e6:.1f} ms steady state ({idle / model.count / 1e6:.2f} ms per "
                   f"step).{named} Program: {fw.label}.")
        severity = Severity.WARNING if share >= opts.warn_share_pct else Severity.INFO
        yield ctx.finding(message, _advice(source, fw), severity=severity, budget_part="module_loading",
                          estimated_savings_ns=idle,
                          metrics={"steps_loading": metric(steps_loading, "count"), "load_calls": metric(calls, "count"),
                                   "load_call_time": metric(call_ns, "ns"), "gpu_idle_loading": metric(idle, "ns"),
                                   "steady_time": metric(steady, "ns")},
                          location=Location(pid=model.pid, api="cuLibraryLoadData" if calls else None),
                          key=source or "lazy")


def _advice(source: str, fw: Framework) -> str:
    """The fix for the code generator behind the loads, in the program's framework."""
    if source == "cudnn":
        if fw.is_torch:
            return ("The attention shapes change every step (a cache growing by one token), so cuDNN builds a new fused "
                    "kernel each time: use a static KV cache (`cache_implementation=\"static\"` in transformers) or "
                    "bucketed lengths, or pick another SDPA backend (`torch.backends.cuda.enable_cudnn_sdp(False)`, "
                    "flash/memory-efficient attention).")
        if fw.name == "jax":
            return ("XLA hands a fused computation (attention, a GEMM fusion) to cuDNN, which builds a kernel for each "
                    "new shape: pad the inputs to a few fixed lengths (buckets) and run each once before the loop, so "
                    "every shape is compiled at start-up; `JAX_LOG_COMPILES=1` names the functions compiled again.")
        return ("cuDNN's runtime-fused engines build a kernel for every new shape: build one execution plan per shape "
                "bucket at start-up and keep it (the cuDNN frontend's plan cache), and pad inputs to those shapes.")
    if source == "triton":
        if fw.is_torch and fw.compiled:
            return ("torch.compile recompiles for new shapes: mark the growing dimension dynamic "
                    "(`torch._dynamo.mark_dynamic`), pad to a few buckets, or use a static cache; check "
                    "`TORCH_LOGS=recompiles`.")
        if fw.name == "jax":
            return ("XLA compiles new Triton fusions for each new shape: pad the inputs to a few fixed shapes and run "
                    "each once before the loop; `JAX_LOG_COMPILES=1` names the functions compiled again.")
        return ("Triton compiles a kernel for each new specialization (shapes, constexpr values) and autotunes it: "
                "run every shape once before the loop, narrow the autotune configs, or keep varying sizes out of "
                "specialization (`do_not_specialize`).")
    return ("Warm up every kernel and shape before the loop, or load modules eagerly with "
            "`CUDA_MODULE_LOADING=EAGER` so the loads happen at start-up.")


RULE = ModuleLoading
