"""How alloc-churn says what it found: the calls per API, the time they take, and the fix for their kind."""

from __future__ import annotations

from nsys_rules.api import counted, human_bytes, pct
from nsys_rules.rules.alloc_churn.measure import CACHING_OFF, XLA_ALLOCATOR, ChurnEvidence


def message(ev: ChurnEvidence) -> str:
    """The calls per API, their time and share, the bytes, the cause in the environment, the GPU's idle time."""
    detail = ", ".join(f"{int(r['calls'])} {name} ({r['total'] / 1e6:.2f} ms, p50 {r['p50'] / 1e3:.1f} us, "
                       f"max {r['max'] / 1e3:.1f} us)" for name, r in ev.table.head(4).iterrows())
    rate = f" ({ev.per_step:.1f} per step over {ev.steps} steps)" if ev.per_step is not None else ""
    volume = ""
    if ev.usage is not None and ev.usage[0]:
        n = ev.usage[0]
        volume = (f" Memory-usage events show {n} allocation{'' if n == 1 else 's'} of {human_bytes(ev.usage[1])} "
                  "in the window.")
    cause = _cause_words(ev)
    text = (f"{len(ev.calls)} allocation/free calls in the steady state{rate}: {detail}. They take "
            f"{ev.total / 1e6:.2f} ms, {ev.share:.1f} % of the {ev.steady_ns / 1e6:.1f} ms steady state on the busiest "
            f"thread; mostly {ev.top_kind} memory.{volume}{cause}")
    if ev.has_budget:
        text += (f" The GPU idles {ev.gpu_idle / 1e6:.2f} ms ({pct(ev.gpu_idle, ev.steady_ns):.1f} % of the steady state) "
                 "while the launching thread is in these calls.")
    return text


def _cause_words(ev: ChurnEvidence) -> str:
    """The known cause, said in the message (see ``measure.known_cause``)."""
    if ev.cause == "caching-off":
        return (f" The profiled environment sets {CACHING_OFF}={ev.caching_setting}: "
                "PyTorch's caching allocator is off, so every tensor is a cudaMalloc and a cudaFree.")
    if ev.cause == "xla-platform":
        return (f" The profiled environment sets {XLA_ALLOCATOR}=platform: XLA allocates and frees every buffer "
                "from the driver instead of its preallocated pool.")
    if ev.cause == "empty-cache":
        where = (f"in {ev.free_steps} of the {ev.steps} steps" if ev.steps else "again and again")
        return (f" PyTorch's caching allocator is on ({CACHING_OFF} is not set), and it returns memory to the "
                f"driver only when emptied, yet the loop calls cudaFree {counted(ev.device_frees, 'time')}, {where}: "
                "`torch.cuda.empty_cache()` runs in the loop (or an allocation failed and the allocator released "
                "its cache to retry), and every cudaFree synchronizes the device.")
    if ev.cause == "growth":
        return (f" PyTorch's caching allocator is on and frees nothing, yet it calls cudaMalloc {ev.device_mallocs} "
                "times in the loop: its pool keeps growing (new tensor sizes, or fragmented blocks it cannot reuse).")
    return ""


def recommendation(ev: ChurnEvidence) -> str:
    """The fix: the known cause removed, or allocation out of the loop for the kind of memory the calls take."""
    total, steps = ev.total, ev.steps
    fw = ev.framework
    if ev.cause == "caching-off":
        return (f"Unset {CACHING_OFF} (or set it to 0) so PyTorch's caching allocator reuses freed blocks; the "
                "steady state then makes no cudaMalloc/cudaFree calls. If it was set to debug memory errors, use "
                "`compute-sanitizer` or `PYTORCH_CUDA_ALLOC_CONF` options instead.")
    if ev.cause == "xla-platform":
        return (f"Unset {XLA_ALLOCATOR} (XLA's default BFC allocator keeps a preallocated pool and makes no driver "
                "calls in the steady state); if memory is short, lower `XLA_PYTHON_CLIENT_MEM_FRACTION` instead.")
    if ev.cause == "empty-cache":
        return ("Stop calling `torch.cuda.empty_cache()` in the loop: the caching allocator keeps freed blocks for "
                "the next step, and emptying it sends them back with cudaFree (a device-wide sync) only to cudaMalloc "
                "them again. Call it only between phases that really need the memory elsewhere; if the frees come "
                "from allocation retries under memory pressure, reduce the peak (smaller batch, activation "
                "checkpointing) or set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` against fragmentation.")
    if ev.cause == "growth":
        done = " (already set: the sizes themselves keep changing)" if "expandable_segments:true" in ev.alloc_conf.lower() \
            else ""
        return ("Let the caching allocator grow in place: `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`"
                f"{done} maps more memory into existing segments instead of allocating new ones and reuses them "
                "across sizes; run the largest shapes once in warm-up so the pool reaches its peak before the loop.")
    per_step = f" ({total / steps / 1e3:.1f} us per step)" if steps else ""
    if ev.top_kind == "stream-ordered":
        return ("These are stream-ordered pool allocations, cheap while the pool keeps its memory: the time to "
                f"win is {total / 1e6:.2f} ms{per_step}. Allocate the per-step buffers once before the loop and "
                "reuse them, and keep freed memory in the pool (`cudaMemPoolSetAttribute(pool, "
                "cudaMemPoolAttrReleaseThreshold, UINT64_MAX)` / `cuMemPoolSetAttribute`) so no call reaches "
                "the driver.")
    if ev.top_kind == "pinned host":
        how = ("`torch.empty(..., pin_memory=True)` staging tensors before the loop, filled with `copy_`" if fw.is_torch
               else "`cudaHostAlloc`/`cudaMallocHost` before the loop, or a pinned-memory pool")
        return (f"Allocate pinned staging buffers once ({how}) and reuse them; pinning and unpinning host pages every "
                f"step costs {total / 1e6:.2f} ms{per_step} here.")
    if fw.is_torch:
        return ("Take allocation out of the loop: PyTorch's caching allocator should serve the steady state without "
                "driver calls, so find what bypasses or empties it (a library allocating with cudaMalloc itself, "
                "`torch.cuda.empty_cache()`, `PYTORCH_CUDA_ALLOC_CONF` settings) and allocate its buffers once; "
                f"`cudaFree` also synchronizes the device. Time to win: {total / 1e6:.2f} ms{per_step}.")
    if fw.name == "jax":
        return ("Take allocation out of the loop: XLA's default allocator keeps a preallocated pool, so check the "
                "environment for `XLA_PYTHON_CLIENT_PREALLOCATE=false` or another allocator setting, and for "
                "libraries called from the step that allocate with cudaMalloc themselves. Time to win: "
                f"{total / 1e6:.2f} ms{per_step}.")
    return ("Take allocation out of the loop: allocate workspaces once and reuse them, or use a caching "
            "allocator / stream-ordered pool (`cudaMallocAsync` with `cudaMemPoolAttrReleaseThreshold` set high); "
            f"`cudaFree` also synchronizes the device. Time to win: {total / 1e6:.2f} ms{per_step}.")
