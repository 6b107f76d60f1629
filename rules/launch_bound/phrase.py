"""How launch-bound says what it found: the GPU's busy share, the launch gaps, where the host's time went, the fix."""

from __future__ import annotations

from nsys_rules.api import counted, plain_number
from nsys_rules.api import Budget, Framework, Metric, graph_capture_advice, metric
from nsys_rules.rules.launch_bound.judge import LaunchVerdict
from nsys_rules.rules.launch_bound.measure import DeviceLaunches


def metrics(found: DeviceLaunches, verdict: LaunchVerdict) -> dict[str, Metric]:
    """The finding's evidence."""
    prof = found.profile
    return {"gpu_busy_share": metric(100 * verdict.busy_share, "%"),
            "kernels": metric(prof.kernels, "count"),
            "median_kernel_duration": metric(prof.median_kernel_ns, "ns"),
            "launch_calls": metric(prof.launch_calls, "count"),
            "launch_api_time_per_kernel": metric(prof.launch_api_per_kernel, "ns"),
            "launch_gaps": metric(prof.starved_gaps, "count"),
            "launch_gap_time": metric(prof.starved_ns, "ns"),
            "steady_time": metric(verdict.judged, "ns")}


def host_split(budget: Budget, fw: Framework | None = None) -> str:
    """Where the launching thread's time went while the GPU waited: in CUDA calls or in its own code."""
    detail = budget.part("launch_wait").detail
    own = ("framework, scheduling" if fw is not None and fw.name == "cuda" and fw.language != "python"
           else "Python, framework, scheduling")
    text = (f" While the GPU waited, the host was inside CUDA calls {detail.get('launch_api_ns', 0) / 1e6:.1f} "
            f"ms and in its own code ({own}) {detail.get('host_ns', 0) / 1e6:.1f} ms.")
    host = budget.evidence.get("host")
    if host:
        text += (f" Per step the launching thread spends {host['outside_cuda_ns_p50'] / 1e3:.0f} us outside "
                 f"any CUDA call ({100 * host['outside_share_p50']:.0f} % of the step, p50)"
                 f"{_beside_budget(host['outside_cuda_ns_p50'], detail.get('median_step_host_ns'))}.")
    return text


def _beside_budget(outside_ns: float, budget_host_ns: int | None) -> str:
    """Why the thread's time outside CUDA calls differs from the budget's host-code time, said beside it (issue 42:
    3291 us here, 2.190 ms in the budget, with no word on the difference)."""
    if budget_host_ns is None or abs(outside_ns - budget_host_ns) < 0.05 * max(outside_ns, 1):
        return ""
    return (f", against {budget_host_ns / 1e3:.0f} us of host code in the budget's median step, which counts only "
            "the host time that left the GPU idle" + ("; the rest ran while the GPU was busy" if outside_ns > budget_host_ns
                                                      else ""))


def message(found: DeviceLaunches, verdict: LaunchVerdict, steps: int, window_source: str, budget: Budget | None,
            fw: Framework | None = None) -> str:
    """The busy share, the kernels and their launch cost, the gaps; ``budget`` when the device runs the loop."""
    prof = found.profile
    per_step = f", {prof.kernels / steps:.0f} kernels per step" if steps else ""
    text = (f"The loop's streams kept GPU {found.device} busy {100 * verdict.busy_share:.1f} % of the steady state "
            f"({verdict.judged / 1e6:.1f} ms, {window_source}): {_kernels(found)}"
            f"{per_step}, median {prof.median_kernel_ns / 1e3:.1f} us, launch API time "
            f"{prof.launch_api_per_kernel / 1e3:.1f} us per kernel. The GPU ran dry before the next launch "
            f"{counted(prof.starved_gaps, 'time')}, idling {prof.starved_ns / 1e6:.1f} ms."
            f"{host_split(budget, fw) if budget else ''}")
    if found.graph_loop and found.replayed:
        text += (f" The loop already replays CUDA graphs ({found.graph_launches} launches): the GPU waits for the host "
                 "between the replays.")
    elif found.graph_loop:
        text += (f" The loop already replays CUDA graphs ({found.graph_launches} launches); these kernels run between the "
                 "replays.")
    return text


def _kernels(found: DeviceLaunches) -> str:
    """The profile's kernels, and how they were launched."""
    kernels = found.profile.kernels
    if not found.replayed:
        return f"{kernels} kernels launched one by one"
    alone = kernels - found.replayed
    return (f"{kernels} kernels ({found.replayed} replayed from graphs, {alone} launched one by one)" if alone
            else f"{kernels} kernels, all replayed from graphs")


def recommendation(found: DeviceLaunches, verdict: LaunchVerdict, graph_gap_ns: int, fw: Framework) -> str:
    """Replay the step from a CUDA graph (in ``fw``'s terms); in a loop that already replays graphs, move the work in."""
    if found.graph_loop and fw.name == "jax":
        # XLA runs a scan or fori_loop as a while loop the host steps through, one command buffer per
        # iteration: the host work between replays is the loop itself.
        return ("In JAX the replays are XLA command buffers, and the host steps through what lies between them: "
                "each iteration of a `jax.lax.scan`/`fori_loop`/`while_loop` inside the jitted step is its own "
                "command buffer, and host callbacks (`jax.debug.print`, `jax.pure_callback`) split the step "
                "further. Unroll the step's loops (`jax.lax.scan(..., unroll=True)`, or an unroll factor) so one "
                "command buffer runs them, drop callbacks from the step, and keep several steps in one jitted "
                "call.")
    if found.graph_loop:
        return ("Move the work between replays into the graph (sampling, stopping checks, input "
                "updates: capture them with the step, or use static input buffers), or keep it on the "
                "device.")
    return ("Replay the steady-state step from a CUDA graph, one launch for all its kernels: "
            f"{graph_capture_advice(fw)}; about {plain_number(graph_gap_ns / 1e3, 6)} us per kernel is left, and fusing small "
            "kernels cuts the count further.")
