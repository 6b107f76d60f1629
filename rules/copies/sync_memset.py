"""sync-memset: synchronous memset calls on host-visible memory (nsys `cuda_memset_sync`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nsys_rules.api import human_bytes, Framework, Renamed, Severity
from nsys_rules.rules.copies.common import FlaggedCallRule, MemsetGroup, memset_groups

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


class SyncMemset(FlaggedCallRule):
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

    table = "memset"
    grouping = staticmethod(memset_groups)

    def flag(self, rows: pd.DataFrame, api_raw: np.ndarray, opts: Any) -> np.ndarray:
        return flag_sync_memsets(rows, api_raw, memory_kinds=tuple(opts.memory_kinds),
                                 include_driver_api=opts.include_driver_api)

    def message(self, group: MemsetGroup, opts: Any) -> str:
        g = group
        what = (f"A synchronous memset of {human_bytes(g.nbytes)} of {g.kind} memory" if g.group.single else
                f"{g.count} synchronous memsets of {g.kind} memory ({g.nbytes / 1e6:.3f} MB in all)")
        return (f"{what} with {g.api} on stream {g.stream} blocked the host {g.host_ns / 1e6:.3f} ms "
                f"({g.share:.2f} % of the judged {g.judged_ns / 1e6:.1f} ms); GPU time {g.gpu_ns / 1e6:.3f} ms.")

    def recommendation(self, group: MemsetGroup, fw: Framework) -> str:
        # The CUDA call itself, whatever the framework: frameworks clear device memory asynchronously.
        return (f"Replace {group.api} with `cudaMemsetAsync` on the work stream, or clear the buffer inside a kernel "
                "that already runs.")


RULE = SyncMemset
