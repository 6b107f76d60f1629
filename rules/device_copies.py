"""device-copies: device-to-device copies that are a real share of every step: buffers copied instead of updated in place."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from nsys_rules.api import Finding, Framework, Location, MissingData, Rule, RuleContext, Severity, metric, pct
from nsys_rules.api.analysis import point_in

DTOD = 8  # CUPTI copyKind of a device-to-device copy


@dataclass(frozen=True)
class Options:
    """Options of device-copies."""

    min_share_pct: float = field(default=5.0, metadata={
        "help": "percent of the steady state the steps' GPU spends in device-to-device copies to report"})
    warn_share_pct: float = field(default=10.0, metadata={
        "help": "percent of the steady state in device-to-device copies at or above which the finding is a warning"})
    min_steps_pct: float = field(default=50.0, metadata={
        "help": "percent of the steady steps that must make device-to-device copies for them to be the loop's own"})

    def __post_init__(self) -> None:
        for name in ("min_share_pct", "warn_share_pct", "min_steps_pct"):
            value = getattr(self, name)
            if not 0 <= value <= 100:
                raise ValueError(f"{name} must be a percent (0-100), not {value!r}")


@dataclass(frozen=True)
class CopiesFound:
    """The device-to-device copies of the steady steps."""

    steps: int
    steps_copying: int  # steps that made at least one
    copies: int  # in all steps
    bytes_total: int
    gpu_ns: int  # their summed time on the GPU
    largest: int  # bytes of the largest copy


def device_copies(copies: pd.DataFrame, steps: tuple[tuple[int, int], ...]) -> CopiesFound:
    """Device-to-device copies per step: ``copies`` has ``launch_start``, ``start``, ``end``, ``bytes``,
    ``copy_kind``; a copy belongs to the step its call was made in."""
    dtod = copies[copies["copy_kind"].to_numpy() == DTOD]
    if dtod.empty or not steps:
        return CopiesFound(len(steps), 0, 0, 0, 0, 0)
    lo = np.array([a for a, _ in steps], np.int64)
    hi = np.array([b for _, b in steps], np.int64)
    step = point_in(dtod["launch_start"].to_numpy(np.int64), lo, hi)
    inside = step >= 0
    nbytes = dtod["bytes"].to_numpy(np.int64)[inside]
    gpu = (dtod["end"].to_numpy(np.int64) - dtod["start"].to_numpy(np.int64))[inside]
    return CopiesFound(len(steps), len(np.unique(step[inside])), int(inside.sum()), int(nbytes.sum()),
                        int(gpu.sum()), int(nbytes.max()) if len(nbytes) else 0)


class DeviceCopies(Rule):
    """Device-to-device copies that are a real share of every step: buffers copied instead of updated in place.

    What it detects: device-to-device copies launched in the steady steps (in at least
    `min_steps_pct` percent of them) whose GPU time is at least `min_share_pct` percent of the
    steady state: a KV cache or optimizer state copied whole because the step returns a new
    array instead of updating the old one (JAX without buffer donation), `torch.cat` growing a
    cache, `.clone()`/`.contiguous()` of large tensors every step.
    Why it hurts: each copy reads and writes the whole buffer at memory bandwidth, on the step's
    critical path, to produce data the step already had.
    Evidence: copies and bytes per step, the largest copy, their GPU time and its share of the
    steady state, the steps that copy.
    Next optimizations: in the program's framework, JAX: donate the buffers the step overwrites
    (`jax.jit(step, donate_argnums=...)`), so `x.at[i].set(v)` updates them in place, and keep
    the carried state inside one jitted call (`jax.lax.scan`); PyTorch: update preallocated
    buffers in place (`index_copy_`, a static KV cache, `copy_` into a fixed buffer) instead of
    `torch.cat` or `.clone()` each step; a CUDA program: swap buffer pointers instead of copying,
    or write the result where it is needed.
    Options: `min_share_pct`, `warn_share_pct`, `min_steps_pct`.
    Requires: a step model with its budget; the memcpy table (a trace without one copied nothing).
    False positives: a copy the algorithm needs (a snapshot kept for later, a layout change a kernel
    requires) cannot be removed, only made cheaper.
    """

    name = "device-copies"
    title = "Device-to-device copies are a real share of every step"
    default_severity = Severity.WARNING
    requires = ()
    optional = ("memcpy",)  # no memcpy table: nothing was copied
    columns = {"memcpy": ("start", "end", "device_id", "pid", "correlation_id", "bytes", "copy_kind")}
    window = "steady"
    Options = Options
    needs_release_build = True  # tunes measured GPU times: a debug build's are not the program's

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        if not ctx.trace.has("memcpy"):
            return
        model, budget = ctx.steps, ctx.budget
        if model is None or budget is None:
            raise MissingData("no steady steps to judge", "mark the loop's steps with an NVTX range")
        copies = ctx.frame("memcpy")
        if budget.device is not None:
            copies = copies[copies["device_id"].to_numpy() == budget.device]
        found = device_copies(copies, tuple(ctx.window.steps))
        share = pct(found.gpu_ns, budget.total_ns)
        if (not found.copies or share < opts.min_share_pct
                or found.steps_copying < opts.min_steps_pct / 100 * found.steps):
            return
        fw = ctx.framework
        per_step = found.bytes_total / max(found.steps_copying, 1)
        message = (f"{found.steps_copying} of {found.steps} steady steps copy device to device: "
                   f"{per_step / 2**20:.1f} MiB per step in {found.copies / max(found.steps_copying, 1):.1f} copies "
                   f"(largest {found.largest / 2**20:.1f} MiB), {found.gpu_ns / 1e6:.2f} ms of GPU time, {share:.1f} % "
                   f"of the {budget.total_ns / 1e6:.1f} ms steady state: buffers copied whole where an in-place "
                   f"update would do. Program: {fw.label}.")
        yield ctx.finding(
            message, _advice(fw),
            severity=Severity.WARNING if share >= opts.warn_share_pct else Severity.INFO,
            estimated_savings_ns=found.gpu_ns, budget_part="copy",
            metrics={"dtod_bytes_per_step": metric(int(per_step), "B"),
                     "dtod_copies": metric(found.copies, "count"),
                     "largest_copy": metric(found.largest, "B"),
                     "dtod_gpu_time": metric(found.gpu_ns, "ns"), "dtod_share": metric(share, "%"),
                     "steps_copying": metric(found.steps_copying, "count")},
            location=Location(pid=model.pid, device=budget.device), key=fw.name)


def _advice(fw: Framework) -> str:
    if fw.name == "jax":
        return ("Donate the buffers the step overwrites: `jax.jit(step, donate_argnums=(...))` (the cache or state "
                "arguments), so `x.at[i].set(v)` updates them in place instead of copying them; keep the carried "
                "state inside one jitted call (`jax.lax.scan` over the tokens or steps) so it never leaves XLA. Copies "
                "of the same sizes many times a step are often a layer loop's weight slices: `lax.scan` over stacked "
                "weights may copy each layer's slice; pass the layers as a list (a pytree) or try `unroll=True`.")
    if fw.is_torch:
        return ("Update preallocated buffers in place instead of building new ones each step: a static KV cache "
                "written with `index_copy_`/`copy_` (not `torch.cat`), no `.clone()`/`.contiguous()` of large tensors "
                "in the loop; `torch.compile` removes copies it can prove unneeded.")
    return ("Swap buffer pointers between steps instead of copying (double buffering), or have the kernel write its "
            "result where the next step reads it.")


RULE = DeviceCopies
