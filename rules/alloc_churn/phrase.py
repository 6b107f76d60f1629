"""How alloc-churn says what it found: the calls per API, the time they take, and the fix for their kind."""

from __future__ import annotations

from nsys_rules.api import pct
from nsys_rules.rules.alloc_churn.measure import CACHING_OFF, ChurnEvidence


def message(ev: ChurnEvidence) -> str:
    """The calls per API, their time and share, the bytes, the cause in the environment, the GPU's idle time."""
    detail = ", ".join(f"{int(r['calls'])} {name} ({r['total'] / 1e6:.2f} ms, p50 {r['p50'] / 1e3:.1f} us, "
                       f"max {r['max'] / 1e3:.1f} us)" for name, r in ev.table.head(4).iterrows())
    rate = f" ({ev.per_step:.1f} per step over {ev.steps} steps)" if ev.per_step is not None else ""
    volume = ""
    if ev.usage is not None and ev.usage[0]:
        volume = f" Memory-usage events show {ev.usage[0]} allocations of {ev.usage[1] / 2**20:.1f} MiB in the window."
    cause = (f" The profiled environment sets {CACHING_OFF}={ev.caching_setting}: "
             "PyTorch's caching allocator is off, so every tensor is a cudaMalloc and a cudaFree."
             if ev.no_cache else "")
    text = (f"{len(ev.calls)} allocation/free calls in the steady state{rate}: {detail}. They take "
            f"{ev.total / 1e6:.2f} ms, {ev.share:.1f} % of the {ev.steady_ns / 1e6:.1f} ms steady state on the busiest "
            f"thread; mostly {ev.top_kind} memory.{volume}{cause}")
    if ev.has_budget:
        text += (f" The GPU idles {ev.gpu_idle / 1e6:.2f} ms ({pct(ev.gpu_idle, ev.steady_ns):.1f} % of the steady state) "
                 "while the launching thread is in these calls.")
    return text


def recommendation(ev: ChurnEvidence) -> str:
    """The fix: caching back on, or allocation out of the loop for the kind of memory the calls take."""
    total, steps = ev.total, ev.steps
    if ev.no_cache:
        return (f"Unset {CACHING_OFF} (or set it to 0) so PyTorch's caching allocator reuses freed blocks; the "
                "steady state then makes no cudaMalloc/cudaFree calls. If it was set to debug memory errors, use "
                "`compute-sanitizer` or `PYTORCH_CUDA_ALLOC_CONF` options instead.")
    per_step = f" ({total / steps / 1e3:.1f} us per step)" if steps else ""
    if ev.top_kind == "stream-ordered":
        return ("These are stream-ordered pool allocations, cheap while the pool keeps its memory: the time to "
                f"win is {total / 1e6:.2f} ms{per_step}. Allocate the per-step buffers once before the loop and "
                "reuse them, and keep freed memory in the pool (`cudaMemPoolSetAttribute(pool, "
                "cudaMemPoolAttrReleaseThreshold, UINT64_MAX)` / `cuMemPoolSetAttribute`) so no call reaches "
                "the driver.")
    if ev.top_kind == "pinned host":
        return ("Allocate pinned staging buffers once (`cudaHostAlloc`/`cudaMallocHost` before the loop, or a "
                "pinned-memory pool) and reuse them; pinning and unpinning host pages every step costs "
                f"{total / 1e6:.2f} ms{per_step} here.")
    return ("Take allocation out of the loop: allocate workspaces once and reuse them, or use a caching "
            "allocator / stream-ordered pool (`cudaMallocAsync` with `cudaMemPoolAttrReleaseThreshold` set high); "
            f"`cudaFree` also synchronizes the device. Time to win: {total / 1e6:.2f} ms{per_step}.")
