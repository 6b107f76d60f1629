"""How sync-stall says what it found: the message and the next optimization, in the program's own API family."""

from __future__ import annotations

import numpy as np

from nsys_rules.api import human_bytes, plain_number
from nsys_rules.api import Framework, PythonSite, running_value_advice, scalar_readback_names
from nsys_rules.api.analysis import DEVICE_SYNC_APIS
from nsys_rules.rules.sync_stall.judge import SyncVerdict
from nsys_rules.rules.sync_stall.measure import SyncEvidence


def message(ev: SyncEvidence, verdict: SyncVerdict, llm: bool, fw: Framework, training: bool = False) -> str:
    """What the host waited in, how long, and what the GPU lost after each wait (the readback in ``fw``'s calls).

    ``training``: the loop trains (backward or optimizer kernels), so a small readback every step is its loss.
    """
    apis = ", ".join(f"{int(r['size'])} {api_name} ({r['sum'] / 1e6:.2f} ms)" for api_name, r in ev.by_api.head(4).iterrows())
    rate = f" ({plain_number(ev.per_step, 2)} per step over {ev.steps} steps)" if ev.per_step is not None else ""
    readback = ""
    if ev.readbacks:
        pattern = f" ({scalar_readback_names(fw)})" if fw.name != "cuda" else ""
        size = f" of {human_bytes(ev.readback_bytes)}" if ev.readback_bytes else ""
        every = (" once per step: the loss (or a metric) read back in every training step"
                 if ev.scalar_every_step() and training and not llm else "")
        readback = (f" {ev.readbacks} of them wait on a device-to-host readback{size}"
                    f"{' queued just before' if ev.queued_readbacks else ''}{pattern}{every}.")
    check = "" if ev.confirmed is None else f" The SYNCHRONIZATION table confirms {ev.confirmed} of the calls."
    # Say why the saving is below the bubbles when the host's own pace limits it.
    host_bound = (f" Most of each bubble is the host's own work before its next launch, which it needs with or "
                  f"without the sync (it waited only {ev.recoverable / 1e6:.2f} ms in them): the loop is host-bound."
                  if verdict.host_bound else "")
    why = (f" Although the GPU loses little here, the host is parked in a sync {ev.share:.0f} % of every step: "
           "any host work the loop adds per step lands on the GPU's critical path."
           if verdict.by_structure_only else "")
    savings = verdict.savings
    text = (
        f"{len(ev.calls)} blocking calls in the steady state{rate}: {apis}. The host waits {ev.blocked / 1e6:.2f} ms "
        f"in total ({ev.share:.1f} % of the {ev.steady_ns / 1e6:.1f} ms steady state on the busiest thread), "
        f"p50 {ev.p50 / 1e3:.1f} us and max {ev.longest / 1e3:.1f} us per call.{readback} After each sync the GPU idles "
        f"{np.median(ev.bubbles) / 1e3:.1f} us (p50; {ev.bubble_total / 1e6:.2f} ms in total) before new work arrives"
        f"{_beside_budget(ev)}: "
        f"removing the round trip saves about {savings / 1e6:.2f} ms ({verdict.savings_pct(ev):.1f} % of the "
        f"steady state).{host_bound}{why}{check}"
        + (f" {ev.dropped} set-up or final sync call(s) outside the loop were left out." if ev.dropped else ""))
    if ev.graph_launch_p50 is not None:
        # Node-level graph tracing costs host time per node inside the launch call, and the launch
        # sits between the sync and the GPU's next work: the traced bubble is longer than the real one.
        text += (f" Each graph launch takes {ev.graph_launch_p50 / 1e3:.0f} us on the host in this node-traced capture, "
                 "inflating the bubble; an untraced run has a shorter one.")
    return text


def _beside_budget(ev: SyncEvidence) -> str:
    """Why the bubbles' total differs from the budget's after-sync part, said beside it (issue 42: every host-time
    figure that differs from the budget's says why in the same sentence)."""
    if not ev.after_sync or ev.after_sync == ev.gpu_idle or abs(ev.after_sync - ev.bubble_total) < 0.05 * ev.after_sync:
        return ""  # equal to the GPU's whole idle time: no budget (then after_sync is that idle time), nothing to say
    if ev.after_sync > ev.bubble_total:
        return (f", counted from each call's return (the budget's after-sync idle, {ev.after_sync / 1e6:.2f} ms, "
                "also counts the wait from the GPU's last work to that return)")
    return (f", counted over every call (the budget's after-sync idle, {ev.after_sync / 1e6:.2f} ms, counts only the "
            "gaps of the loop's GPU that a sync opened)")


def site_words(sites: list[PythonSite]) -> str:
    """Where in the program the blocking calls are made (empty without Python stacks)."""
    if not sites:
        return ""
    first = sites[0]
    under = f", through `{first.inner.function}` ({first.inner.short_where})" if first.inner is not None else ""
    words = (f" The calls are made at `{first.frame.function}` ({first.frame.short_where}){under}: "
             f"{100 * first.share:.0f} % of them")
    if len(sites) > 1:
        words += f"; then `{sites[1].frame.function}` ({sites[1].frame.short_where}) {100 * sites[1].share:.0f} %"
    source = {"backtraces": "nsys's Python backtraces at the calls"}.get(first.source, f"Python {first.source}")
    return f"{words} (from {source})."


def readback_fix(top_api: str, fw: Framework, llm: bool = True) -> str:
    """The asynchronous-readback recipe in the API family (the driver's, the runtime's) or framework the program uses."""
    if top_api.startswith("cu") and not top_api.startswith("cuda"):  # driver API
        how = ("`cuMemcpyDtoHAsync` into a pinned `cuMemHostAlloc` buffer, `cuEventRecord` after it, and "
               "`cuEventSynchronize` (or `cuEventQuery`) on that event one step later")
    elif fw.is_torch:
        how = ("`host = torch.empty(n, dtype=..., pin_memory=True)` once, then per step "
               "`host.copy_(t, non_blocking=True); ev = torch.cuda.Event(); ev.record()` and `ev.synchronize()` "
               "one step later, instead of `.item()`/`.cpu()`/`.tolist()`")
    elif fw.name == "jax":
        how = ("`x.copy_to_host_async()` as soon as the step is dispatched and `float(x)`/`jax.device_get(x)` "
               "one step later, so the host does not wait right after dispatching")
    elif fw.name == "tensorflow":
        how = "the value read with `.numpy()` one step later, after the next step is dispatched"
    else:
        how = ("`cudaMemcpyAsync` into a pinned `cudaMallocHost` buffer, `cudaEventRecord` after it, and "
               "`cudaEventSynchronize` (or `cudaEventQuery`) on that event one step later")
    loop = {"jax": " (`jax.lax.while_loop`)", "tensorflow": " (`tf.while_loop`)"}.get(fw.name, "")
    tail = ("; better still, sample on the GPU and keep the tokens on the device" if llm else
            f"; better still, make the decision on the device (a device-side flag or loop{loop}) so no value crosses "
            "per step")
    return (f"make the per-step readback asynchronous: {how}, so the host enqueues step N+1 while the GPU runs "
            f"step N{tail}")


def recommendation(ev: SyncEvidence, fw: Framework, llm: bool = True, training: bool = False) -> str:
    """The next optimizations, first the one for the API the host waits in longest, in the terms of ``fw``."""
    top_api = ev.top_api
    steps: list[str] = []
    if ev.readbacks and ev.scalar_every_step() and training and not llm:
        # A training loop reading its loss (or a metric) every step: read it less often.
        steps.append(f"read the per-step value back less often: {running_value_advice(fw)}")
    if ev.readbacks:
        steps.append(readback_fix(top_api, fw, llm))
    if top_api in DEVICE_SYNC_APIS:
        steps.append(device_sync_fix(top_api, fw))
    elif not ev.readbacks:
        steps.append(stream_sync_fix(top_api, fw))
    if fw.name == "jax":
        steps.append("keep several steps on the device in one jitted call (`jax.lax.scan` or `jax.lax.fori_loop` "
                     "over the steps), so the host does not wait between steps")
    elif ev.graph_launches:
        steps.append("the step already replays as a CUDA graph, so the host round trip between replays is what is "
                     "left: launch replay N+1 before waiting on replay N's result (double-buffer its output), or "
                     "put several steps in one graph")
    else:
        what = "the decode step" if llm else "the loop body"
        steps.append(f"capture {what} in a CUDA graph and keep the loop on the device (one launch per step, "
                     "no host round trip between steps)")
    threads = ev.calls[["pid", "tid"]].drop_duplicates()
    where = "" if len(threads) == 1 else f" ({len(threads)} threads block; start with the busiest)"
    text = "; ".join(steps)
    return text[0].upper() + text[1:] + "." + where


def device_sync_fix(top_api: str, fw: Framework) -> str:
    """What replaces a device-wide synchronization, in the program's framework."""
    if fw.is_torch:
        return (f"drop the per-step `torch.cuda.synchronize()` (the device-wide `{top_api}`), or wait on a "
                "`torch.cuda.Event` recorded on the one stream whose result is needed (`event.synchronize()`, "
                "`stream.wait_event(event)`)")
    if fw.name == "jax":
        return (f"drop the per-step `jax.block_until_ready`/`jax.effects_barrier()` (the device-wide `{top_api}`): "
                "wait only on the array whose value is needed, where it is needed")
    return (f"replace the device-wide `{top_api}` with an event recorded on the one stream whose result "
            "is needed (`cudaEventRecord` + `cudaEventSynchronize`/`cudaStreamWaitEvent`), or drop it")


def stream_sync_fix(top_api: str, fw: Framework) -> str:
    """What replaces a per-step stream or event synchronization, in the program's framework."""
    if fw.is_torch:
        return (f"remove the per-step `{top_api}` (`torch.cuda.current_stream().synchronize()` or an "
                "`event.synchronize()`), or wait one step behind on an event recorded for just the data that is needed")
    if fw.name == "jax":
        return (f"remove the per-step wait (`{top_api}`: `jax.block_until_ready` or a value read on the host), or "
                "wait one step behind, after the next step is dispatched")
    return (f"remove the per-step `{top_api}`, or wait on an event recorded for just the data that is "
            "needed, one step behind, instead of draining the stream")
