"""How queue-delay says what it found: the stream's queue against its run time, and what to do about it."""

from __future__ import annotations

from nsys_rules.api import pct
from nsys_rules.rules.queue_delay.judge import QueueVerdict
from nsys_rules.rules.queue_delay.measure import StreamQueue


def message(queue: StreamQueue, verdict: QueueVerdict) -> str:
    """The queue and run times, the GPU's busy share, and the cause."""
    prof, span = queue.profile, queue.span
    head = (f"Kernels on stream {queue.stream} (GPU {queue.device}) waited a median {prof.median_queue / 1e3:.1f} us "
            f"(p90 {prof.p90_queue / 1e3:.1f} us) in the queue for a median run of "
            f"{prof.median_kernel / 1e3:.1f} us ({prof.ratio:.1f}x, {prof.kernels} kernels); the GPU was "
            f"busy {100 * queue.busy_share:.1f} % of {span / 1e6:.1f} ms")
    if verdict.held_back:
        return head + (f", and it idled {prof.idle_while_queued / 1e6:.2f} ms "
                       f"({pct(prof.idle_while_queued, span):.1f} %) while these kernels waited: "
                       "something outside this process's trace held them back.")
    return head + ": the host runs ahead and the GPU is the bottleneck."


def recommendation(verdict: QueueVerdict) -> str:
    """The next optimization for the cause (a held-back or a GPU-bound queue: the rule reports no other)."""
    if verdict.held_back:
        return ("Check for another process or context on the same GPU (`nvidia-smi`, or profile it with "
                "`nsys profile --trace=cuda` system-wide) and give the latency-critical work the GPU alone "
                "or a higher stream priority (`cudaStreamCreateWithPriority`); remove cross-stream waits "
                "that are not needed.")
    return ("Host-side work will not shorten this: speed up the kernels that dominate GPU time "
            "(see gemv-dominance, kernel-tail) or do more work per kernel (batching, fusion).")
