"""Advice in the program's own terms: the knobs each framework has for the fixes several rules share.

A recommendation is only as good as the knob it names, and a knob of another framework is worse
than none: ``torch.compile`` means nothing to a JAX program, ``jax.jit`` nothing to a Rust
engine. Several rules give the same kinds of advice (capture the step in a CUDA graph, fuse
small kernels, pin host memory, mark the step with NVTX, limit the capture to the loop, read a
value back less often, keep data on the GPU), so the words live here, one function per fix,
each taking the program's :class:`~nsys_rules.model.framework.Framework` (``framework(trace)``)
and returning a phrase to put in a sentence: no leading capital, no final period.

Every function answers for every framework: PyTorch (eager or torch.compile), the serving
engines built on it (vLLM, SGLang) and TensorRT-LLM, JAX/XLA, TensorFlow, and a program using
CUDA directly (C++, Rust or Python without a framework), which gets the CUDA API's own names.
"""

from __future__ import annotations

from nsys_rules.model.framework import Framework


def graph_capture_advice(fw: Framework) -> str:
    """How the program replays a step's kernels from a CUDA graph, one launch instead of one per kernel."""
    if fw.name == "vllm":
        return ("keep vLLM's CUDA graphs on (no `--enforce-eager`) and make them cover the batch sizes you serve "
                "(`compilation_config={\"cudagraph_capture_sizes\": [...]}`)")
    if fw.name == "sglang":
        return ("keep SGLang's CUDA graphs on (no `--disable-cuda-graph`) and raise `--cuda-graph-max-bs` to the batch "
                "sizes you serve")
    if fw.name == "tensorrt-llm":
        return ("turn on TensorRT-LLM's CUDA graphs (`cuda_graph_config=CudaGraphConfig(batch_sizes=[...])` in the "
                "LLM API's PyTorch backend, `cuda_graph_mode` in the C++ runtime's extended performance knobs)")
    if fw.is_torch and fw.compiled:
        return ("compile with `torch.compile(mode=\"reduce-overhead\")`: CUDA graphs over the compiled step (keep its "
                "input shapes static or bucketed, or it captures again)")
    if fw.is_torch:
        return ("capture the step with `torch.cuda.graph(g)` into a `torch.cuda.CUDAGraph` over static input tensors "
                "and `g.replay()` it (or `torch.cuda.make_graphed_callables`), or use "
                "`torch.compile(mode=\"reduce-overhead\")`")
    if fw.name == "jax":
        return ("XLA replays a jitted function's kernels as CUDA graphs (command buffers) by itself: put the whole "
                "step under one `jax.jit` (several steps with `jax.lax.scan` or `jax.lax.fori_loop`) instead of "
                "calling many small jitted functions from Python, and leave `--xla_gpu_enable_command_buffer` in "
                "`XLA_FLAGS` at its default")
    if fw.name == "tensorflow":
        return ("compile the step with `tf.function(jit_compile=True)` (XLA: fewer, fused kernels) and run several "
                "steps per call (Keras `compile(steps_per_execution=...)`)")
    return ("capture the step once with `cudaStreamBeginCapture`/`cudaStreamEndCapture`, `cudaGraphInstantiate` it, "
            "then `cudaGraphLaunch` it every step (`cudaGraphExecUpdate` for changed parameters)")


def fusion_advice(fw: Framework) -> str:
    """How the program fuses chains of small elementwise and reduction kernels (and GEMM epilogues)."""
    if fw.name == "vllm":
        return ("vLLM fuses them through its compilation (`torch.compile` and custom fused ops): do not run with "
                "`--enforce-eager`, and check the fusion passes of `compilation_config` (`pass_config`) for this model")
    if fw.name == "sglang":
        return "SGLang fuses them with `--enable-torch-compile` (beside its own fused kernels from sgl-kernel)"
    if fw.name == "tensorrt-llm":
        return ("TensorRT-LLM fuses them when the engine is built with its fusion options (the fused-MLP and GEMM "
                "plugin options of `trtllm-build`) or in the PyTorch backend with `torch_compile_config`")
    if fw.is_torch and fw.compiled:
        return ("the program already runs torch.compile: find the graph breaks that split the fusions "
                "(`TORCH_LOGS=graph_breaks`) and try `mode=\"max-autotune\"` for GEMM epilogue fusion")
    if fw.is_torch:
        return ("`torch.compile` the model or step (Inductor fuses pointwise chains and norms; `mode=\"max-autotune\"` "
                "also fuses GEMM epilogues), or fused modules for the common pairs (bias + activation, residual + norm)")
    if fw.name == "jax":
        return ("XLA fuses elementwise chains within one jitted computation: put the whole step under one `jax.jit` "
                "rather than jitting pieces called from Python, keep shapes static, and write what it leaves between "
                "the GEMMs as one kernel with Pallas (`jax.experimental.pallas`)")
    if fw.name == "tensorflow":
        return "compile the step with `tf.function(jit_compile=True)`: XLA fuses the elementwise chains"
    return ("fold them into the GEMM's epilogue (cuBLASLt `CUBLASLT_EPILOGUE_BIAS`/`CUBLASLT_EPILOGUE_GELU_BIAS`, "
            "CUTLASS epilogues) or write one kernel per chain (bias + activation, residual + norm)")


def pinned_memory_advice(fw: Framework) -> str:
    """How the program puts host buffers that it copies to or from the GPU in pinned (page-locked) memory."""
    if fw.is_torch:
        return ("pin the host tensors once (`tensor.pin_memory()`, `DataLoader(pin_memory=True)` for batches) and copy "
                "with `.to(\"cuda\", non_blocking=True)`")
    if fw.name == "jax":
        return ("keep the host arrays in pinned memory (`jax.device_put(x, SingleDeviceSharding(device, "
                "memory_kind=\"pinned_host\"))`) or put batches on the device ahead of the step from a background thread "
                "(`flax.jax_utils.prefetch_to_device`), so the staging overlaps the step before")
    if fw.name == "tensorflow":
        return ("let `tf.data` stage the copies ahead: "
                "`dataset.apply(tf.data.experimental.prefetch_to_device(\"/gpu:0\"))`")
    return ("allocate the host buffer pinned (`cudaMallocHost`/`cudaHostAlloc`, or `cudaHostRegister` an existing "
            "one) and keep the copy asynchronous (`cudaMemcpyAsync`)")


def profiler_range_advice(fw: Framework) -> str:
    """How the program calls cudaProfilerStart/cudaProfilerStop around its measured loop (for ``-c cudaProfilerApi``)."""
    if fw.name == "vllm":
        return ("vLLM's own switch: `--profiler-config.profiler cuda` (vLLM 0.13 and later) with "
                "`vllm bench serve --profile`, or `torch.cuda.profiler.start()`/`stop()` around `llm.generate`")
    if fw.name == "tensorrt-llm":
        return "TensorRT-LLM's own switch: `TLLM_PROFILE_START_STOP=<first>-<last>` (the iterations to capture)"
    if fw.is_torch:
        return "`torch.cuda.profiler.start()`/`torch.cuda.profiler.stop()`"
    if fw.name in ("jax", "tensorflow"):
        lib = "JAX" if fw.name == "jax" else "TensorFlow"
        return (f"{lib} has no call of its own: cuda-python's `cuda.bindings.runtime.cudaProfilerStart()`/"
                "`cudaProfilerStop()`, or capture an NVTX range instead (`nsys profile --capture-range=nvtx "
                "--nvtx-capture=measured` with `NSYS_NVTX_PROFILER_REGISTER_ONLY=0` in the environment, around "
                "`nvtx.annotate(\"measured\")` from the `nvtx` package)")
    if fw.language == "python":
        return ("`cupy.cuda.profiler.start()`/`stop()`, or cuda-python's `cuda.bindings.runtime.cudaProfilerStart()`/"
                "`cudaProfilerStop()`")
    if fw.language == "rust":
        return "`cudaProfilerStart()`/`cudaProfilerStop()` through the program's CUDA bindings, or its own capture flag"
    return "`cudaProfilerStart()`/`cudaProfilerStop()` from `cuda_profiler_api.h`, or the program's own capture flag"


def nvtx_range_advice(fw: Framework, name: str = "step") -> str:
    """How the program opens an NVTX range called ``name`` around a piece of its work."""
    if fw.is_torch:
        return f"`with torch.cuda.nvtx.range(\"{name}\"):`"
    if fw.name in ("jax", "tensorflow") or fw.language == "python":
        return f"`with nvtx.annotate(\"{name}\"):` from the `nvtx` package"
    if fw.language == "rust":
        return f"`nvtxRangePushA(\"{name}\")`/`nvtxRangePop()` through NVTX bindings (the `nvtx` crate)"
    return f"`nvtxRangePushA(\"{name}\")`/`nvtxRangePop()` (C++: `nvtx3::scoped_range r{{\"{name}\"}};`)"


def scalar_readback_names(fw: Framework) -> str:
    """The framework's calls that copy a value to the host and wait for it (the per-step readback), for a message."""
    if fw.is_torch:
        return "`.item()`, `float(loss)`, `.cpu()` or `.tolist()`"
    if fw.name == "jax":
        return "`float(loss)`, `jax.device_get` or `np.asarray` on a device array"
    if fw.name == "tensorflow":
        return "`.numpy()` or `float(loss)`"
    return "a synchronous device-to-host copy (or an async copy and a sync)"


def running_value_advice(fw: Framework) -> str:
    """How a training loop stops reading its loss (or another metric) back every step."""
    if fw.is_torch:
        return ("keep the running loss on the device (`running += loss.detach()`) and call `.item()` every N steps, "
                "when you log")
    if fw.name == "jax":
        return ("keep the running loss on the device (`running = running + loss`, or return it from the jitted step) "
                "and call `float()`/`jax.device_get` every N steps, when you log; `jax.block_until_ready` only where a "
                "value is needed")
    if fw.name == "tensorflow":
        return "accumulate the loss in a `tf.keras.metrics.Mean` and read it every N steps, when you log"
    return "accumulate the value in device memory and copy it back every N steps, when you log"


def resident_data_advice(fw: Framework) -> str:
    """How the program keeps data (weights, tables) on the GPU instead of copying it from the host every step."""
    if fw.name == "vllm":
        return ("lower `--cpu-offload-gb` (to 0 where the GPU has room): vLLM copies offloaded weights to the GPU "
                "every step")
    if fw.name == "sglang":
        return ("lower `--cpu-offload-gb` (to 0 where the GPU has room): offloaded weights are copied to the GPU "
                "every step")
    if fw.is_torch:
        return ("move the module or tensors to the GPU once, before the loop (`model.to(\"cuda\")`), and keep them "
                "there; with an offloading library turn offload off or raise its GPU budget (accelerate "
                "`device_map=\"cuda\"` or a larger `max_memory`, no `enable_model_cpu_offload()`/"
                "`enable_sequential_cpu_offload()`, DeepSpeed without `offload_param`)")
    if fw.name == "jax":
        return ("`jax.device_put` them once before the loop and pass the device arrays to the jitted step: numpy "
                "arrays passed to a jitted function are copied to the GPU at every call")
    if fw.name == "tensorflow":
        return ("create them once as `tf.Variable`s or tensors on the GPU: numpy arrays fed to a step are copied at "
                "every call")
    return "copy them once into device buffers before the loop (`cudaMalloc` + `cudaMemcpy`) and reuse those buffers"
