"""sync-memcpy: synchronous memcpy calls that block the host (nsys `cuda_memcpy_sync`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nsys_rules.api import human_bytes, Framework, Renamed, Severity, pinned_memory_advice, scalar_readback_names
from nsys_rules.rules.copies.common import CopyGroup, FlaggedCallRule, copy_groups

HTOD, DTOD = 1, 8
#: Runtime `cudaMemcpy*` and driver `cuMemcpy*` calls; the Async ones are excluded separately.
COPY_API = re.compile(r"^cu(?:da)?Memcpy")
RUNTIME_COPY_API = re.compile(r"^cudaMemcpy")


@dataclass(frozen=True)
class Options:
    """Options of sync-memcpy."""

    window: str = field(default="full", metadata={"help": "'full' (whole capture, as nsys analyze) or 'steady'"})
    report: str = field(default="group", metadata={
        "help": "'all': one finding per flagged copy; 'group': one per direction; "
                "'auto': per copy while a group has at most max_findings copies"})
    max_findings: int = field(default=5, metadata={"help": "copies per group reported one by one in 'auto' mode"})
    max_small_htod_bytes: int = field(default=64_000, metadata={
        "help": "host-to-device copies of at most this many bytes are not flagged (nsys: 64000; the driver "
                "returns before they reach the GPU)"})
    include_driver_api: bool = field(default=True, metadata={
        "help": "also flag driver `cuMemcpy*` calls without Async (nsys only matches `cudaMemcpy*`)"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "warning when the host time of the flagged calls reaches this percent of the judged time"})


def flag_sync_copies(copies: pd.DataFrame, api_raw: np.ndarray, *, max_small_htod_bytes: int = 64_000,
                     include_driver_api: bool = True) -> np.ndarray:
    """Mask of copies launched by a synchronous memcpy call, nsys's exceptions applied.

    Exceptions: device-to-device copies within one device (asynchronous to the host even
    through `cudaMemcpy`) and small host-to-device copies (staged and returned at once).
    """
    names = pd.Series(api_raw, dtype=object).fillna("")
    pattern = COPY_API if include_driver_api else RUNTIME_COPY_API
    sync = names.str.contains(pattern).to_numpy() & ~names.str.contains("Async").to_numpy()
    kind = copies["copy_kind"].to_numpy()
    same_device = copies["src_device_id"].fillna(-1).to_numpy() == copies["dst_device_id"].fillna(-2).to_numpy()
    in_device = (kind == DTOD) & same_device
    small_htod = (kind == HTOD) & (copies["bytes"].to_numpy() <= max_small_htod_bytes)
    return sync & ~in_device & ~small_htod


class SyncMemcpy(FlaggedCallRule):
    """Synchronous memcpy calls: the host waits for the copy and everything queued before it.

    What it detects: copies launched by `cudaMemcpy`/`cudaMemcpy2D`/... (or the driver's
    `cuMemcpyDtoH`/`cuMemcpyHtoD`/...) without `Async`, except device-to-device copies inside
    one device and host-to-device copies of at most 64,000 bytes, as nsys's `cuda_memcpy_sync`.
    Why it hurts: the call returns only when the stream has drained up to and including the
    copy, so the host cannot queue the next work and the GPU idles while it restarts.
    Evidence: count, bytes, host time blocked and GPU copy time per direction (the main API and stream named);
    the time range of the flagged copies.
    Next optimizations: use `cudaMemcpyAsync` on the work stream with pinned host memory and
    synchronize only where the value is consumed (an event); keep results on the GPU when the
    host does not need them (e.g. sample on the GPU instead of copying logits back).
    Options: `window`, `report`, `max_findings`, `max_small_htod_bytes`, `include_driver_api`,
    `warn_share_pct`.
    Requires: the memcpy and API tables (`--trace=cuda`).
    False positives: a copy at the very end of a run (the final result) is not a stall worth
    fixing; judge with `window=steady`.
    """

    name = "sync-memcpy"
    title = "Synchronous memcpy blocks the host"
    default_severity = Severity.INFO
    requires = ("memcpy", "api")
    columns = {"memcpy": ("start", "end", "pid", "correlation_id", "device_id", "stream_id", "bytes", "copy_kind",
                          "src_kind", "dst_kind", "src_device_id", "dst_device_id"),
               "api": ("start", "end", "correlation_id", "pid", "name")}
    window = "full"
    aliases = ("cuda_memcpy_sync",)
    Options = Options
    renamed_options = {"warning_share": Renamed("warn_share_pct", 100)}

    table = "memcpy"
    grouping = staticmethod(copy_groups)

    def flag(self, rows: pd.DataFrame, api_raw: np.ndarray, opts: Any) -> np.ndarray:
        return flag_sync_copies(rows, api_raw, max_small_htod_bytes=opts.max_small_htod_bytes,
                                include_driver_api=opts.include_driver_api)

    def message(self, group: CopyGroup, opts: Any) -> str:
        cg = group
        what = (f"A synchronous {cg.direction} copy ({cg.src} -> {cg.dst}, {human_bytes(cg.nbytes)})" if cg.group.single else
                f"{cg.count} synchronous {cg.direction} copies ({cg.src} -> {cg.dst}, {cg.nbytes / 1e6:.3f} MB in all)")
        return (f"{what} with {cg.api} on stream {cg.stream} blocked the host {cg.host_ns / 1e6:.3f} ms "
                f"({cg.share:.2f} % of the judged {cg.judged_ns / 1e6:.1f} ms) for {cg.gpu_ns / 1e6:.3f} ms of copying.")

    def recommendation(self, group: CopyGroup, fw: Framework) -> str:
        if fw.name == "cuda" or fw.name == "tensorrt-llm":
            return (f"Replace {group.api} with `cudaMemcpyAsync` on the work stream from pinned host memory and wait "
                    "on an event only where the host consumes the data; keep data on the GPU when the host does not "
                    "need it.")
        if group.direction == "DtoH":
            return (f"These are reads of GPU results ({scalar_readback_names(fw)}): keep the values on the GPU when "
                    "the host does not need them, read them less often, or start the copy early and wait only where "
                    "the value is used.")
        return (f"Copy asynchronously from pinned memory: {pinned_memory_advice(fw)}; keep data on the GPU when the "
                "host does not need it.")


RULE = SyncMemcpy
