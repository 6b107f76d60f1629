"""sync-memset: synchronous memset calls on host-visible memory (nsys `cuda_memset_sync`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from nsys_rules.rules.copies.common import MEMORY_KINDS
from nsys_rules.api import Finding, Location, Renamed, Rule, RuleContext, Severity, metric, pct, split_flagged

#: Runtime `cudaMemset*` and driver `cuMemsetD*` calls; the async ones are excluded separately.
SET_API = re.compile(r"^cu(?:da)?Memset")
RUNTIME_SET_API = re.compile(r"^cudaMemset")


@dataclass(frozen=True)
class Options:
    """Options of sync-memset."""

    window: str = field(default="full", metadata={"help": "'full' (whole capture, as nsys analyze) or 'steady'"})
    report: str = field(default="group", metadata={
        "help": "'all': one finding per flagged memset; 'group': one per API, memory kind and stream; "
                "'auto': per memset while a group has at most max_findings"})
    max_findings: int = field(default=5, metadata={"help": "memsets per group reported one by one in 'auto' mode"})
    memory_kinds: tuple = field(default=(1, 4), metadata={
        "help": "memory kinds flagged (1 pinned, 4 managed, as nsys; a plain cudaMemset on device memory "
                "is asynchronous to the host)"})
    include_driver_api: bool = field(default=True, metadata={
        "help": "also flag driver `cuMemsetD*` calls without Async (nsys only matches `cudaMemset*`)"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "warning when the host time of the flagged calls reaches this percent of the judged time"})


def flag_sync_memsets(memsets: pd.DataFrame, api_raw: np.ndarray, *, memory_kinds: tuple = (1, 4),
                      include_driver_api: bool = True) -> np.ndarray:
    """Mask of memsets on the given memory kinds launched by a call without `async` in its name."""
    names = pd.Series(api_raw, dtype=object).fillna("")
    pattern = SET_API if include_driver_api else RUNTIME_SET_API
    sync = names.str.contains(pattern).to_numpy() & ~names.str.lower().str.contains("async").to_numpy()
    kinds = np.isin(memsets["mem_kind"].fillna(-1).to_numpy(), [int(k) for k in memory_kinds])
    return sync & kinds


class SyncMemset(Rule):
    """Synchronous memset calls on pinned or managed memory.

    What it detects: memsets launched by `cudaMemset`/`cudaMemset2D`/... (or the driver's
    `cuMemsetD*`) without `async`, on pinned or managed memory, as nsys's `cuda_memset_sync`.
    Why it hurts: on host-visible memory the call is synchronous: the host waits for the
    stream to drain and for the memset, and the GPU then idles until the host queues more work.
    Evidence: count, bytes, host time and GPU time per API, memory kind and stream; the
    time range of the flagged memsets.
    Next optimizations: use `cudaMemsetAsync` on the work stream, or initialise the buffer in
    a kernel that already runs; zero a device buffer instead of a host-visible one.
    Options: `window`, `report`, `max_findings`, `memory_kinds`, `include_driver_api`, `warn_share_pct`.
    Requires: the memset and API tables (`--trace=cuda`).
    False positives: one-off initialisation during loading (judge with `window=steady`).
    """

    name = "sync-memset"
    title = "Synchronous memset on host-visible memory"
    default_severity = Severity.INFO
    requires = ("memset", "api")
    columns = {"memset": ("start", "end", "pid", "correlation_id", "device_id", "stream_id", "bytes", "mem_kind"),
               "api": ("start", "end", "correlation_id", "pid", "name")}
    window = "full"
    aliases = ("cuda_memset_sync",)
    Options = Options
    renamed_options = {"warning_share": Renamed("warn_share_pct", 100)}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        memsets = ctx.frame("memset")
        api = ctx.launch_calls("memset")
        mask = flag_sync_memsets(memsets, api["api_raw"].to_numpy(), memory_kinds=tuple(opts.memory_kinds),
                                 include_driver_api=opts.include_driver_api)
        if not mask.any():
            return
        rows = memsets.loc[mask].reset_index(drop=True)
        api = api.loc[mask].reset_index(drop=True)
        rows["api"] = api["api_raw"].to_numpy()
        rows["host_ns"] = (api["api_end"] - api["api_start"]).to_numpy()
        lo, hi = ctx.window_bounds()
        judged = max(1, hi - lo)
        for group in split_flagged(rows, ["api", "mem_kind", "stream_id"], opts.report, opts.max_findings):
            g = group.rows
            host = int(g["host_ns"].clip(lower=0).sum())
            gpu = int((g["end"] - g["start"]).sum())
            nbytes = int(g["bytes"].sum())
            api_name, mem_kind, stream = group.key
            kind = MEMORY_KINDS.get(int(mem_kind), str(mem_kind))
            share = pct(host, judged)
            severity = Severity.WARNING if host >= opts.warn_share_pct / 100 * judged else Severity.INFO
            what = (f"A synchronous memset of {nbytes} B of {kind} memory" if group.single else
                    f"{len(g)} synchronous memsets of {kind} memory ({nbytes / 1e6:.3f} MB in all)")
            yield ctx.finding(
                f"{what} with {api_name} on stream {stream} blocked the host {host / 1e6:.3f} ms "
                f"({share:.2f} % of the judged {judged / 1e6:.1f} ms); GPU time {gpu / 1e6:.3f} ms.",
                f"Replace {api_name} with `cudaMemsetAsync` on the work stream, or clear the buffer inside a kernel "
                "that already runs.",
                severity=severity,
                metrics={"memsets": metric(len(g), "count"), "bytes": metric(nbytes, "B"),
                         "host_time": metric(host, "ns"), "gpu_time": metric(gpu, "ns"),
                         "share_of_judged_time": metric(share, "%")},
                location=Location(pid=int(g["pid"].iloc[0]), device=int(g["device_id"].iloc[0]), stream=int(stream),
                                  api=str(api_name), start_ns=group.start, end_ns=group.end),
                key=f"{kind}/{stream}{group.key_suffix}", **_savings(ctx, g, max(0, host - gpu)))


def _savings(ctx: RuleContext, rows: pd.DataFrame, saved: int) -> dict:
    """Host blocking in the loop is after-sync idle the GPU may pay; outside the steps it is not step time."""
    span = ctx.steps.host_span if ctx.steps is not None else None
    launch = rows["launch_start"].to_numpy() if "launch_start" in rows else rows["start"].to_numpy()
    if span is not None and ((launch >= span[0]) & (launch <= span[1])).mean() >= 0.5:
        return {"estimated_savings_ns": saved, "budget_part": "after_sync"}
    return {"savings_note": "outside the steady steps (loading or tear-down): not step time"}


RULE = SyncMemset
