"""pageable-memcpy: asynchronous copies from or to pageable host memory (nsys `cuda_memcpy_async`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nsys_rules.api import human_bytes, Framework, Renamed, Severity, pinned_memory_advice
from nsys_rules.rules.copies.common import CopyGroup, FlaggedCallRule, FlaggedCalls, copy_groups

PAGEABLE = 0
#: nsys matches `cudaMemcpy%Async%`; the driver API's `cuMemcpy*Async` copies behave the same.
ASYNC_COPY_API = re.compile(r"^cu(?:da)?Memcpy.*Async")


@dataclass(frozen=True)
class Options:
    """Options of pageable-memcpy."""

    window: str = field(default="full", metadata={"help": "'full' (whole capture, as nsys analyze) or 'steady'"})
    report: str = field(default="group", metadata={
        "help": "'all': one finding per flagged copy; 'group': one per direction; "
                "'auto': per copy while a group has at most max_findings copies"})
    max_findings: int = field(default=5, metadata={"help": "copies per group reported one by one in 'auto' mode"})
    min_bytes: int = field(default=0, metadata={"help": "ignore copies smaller than this (nsys: 0)"})
    include_driver_api: bool = field(default=True, metadata={
        "help": "also flag driver `cuMemcpy*Async` calls (nsys only matches `cudaMemcpy*Async`)"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "warning when the host time of the flagged calls reaches this percent of the judged time"})


def flag_pageable_async(copies: pd.DataFrame, api_raw: np.ndarray, *, min_bytes: int = 0,
                        include_driver_api: bool = True) -> np.ndarray:
    """Mask of copies with a pageable end launched by an asynchronous memcpy call."""
    names = pd.Series(api_raw, dtype=object).fillna("")
    pattern = ASYNC_COPY_API if include_driver_api else re.compile(r"^cudaMemcpy.*Async")
    by_api = names.str.contains(pattern).to_numpy()
    pageable = (copies["src_kind"].to_numpy() == PAGEABLE) | (copies["dst_kind"].to_numpy() == PAGEABLE)
    return by_api & pageable & (copies["bytes"].to_numpy() >= min_bytes)


class PageableMemcpy(FlaggedCallRule):
    """Asynchronous memcpy calls whose host side is pageable memory.

    What it detects: copies launched with `cudaMemcpy*Async` (or the driver's `cuMemcpy*Async`)
    whose source or destination is pageable host memory (the memcpy row's memory kind 0),
    as nsys's `cuda_memcpy_async` rule does.
    Why it hurts: the driver must stage pageable memory through a pinned bounce buffer, so the
    "async" call blocks the host until the copy is staged and cannot overlap with kernels;
    in a decode loop every such copy is a hidden host stall.
    Evidence: count, bytes, GPU copy time and host time of the flagged calls per API,
    direction (one finding per direction, the main stream and API named); the time range of the flagged
    copies. Savings count only for copies launched inside the steady steps; loading copies shorten
    start-up, not the step.
    Next optimizations: allocate the host buffer pinned, in the program's framework (PyTorch
    `tensor.pin_memory()` / `DataLoader(pin_memory=True)` with `non_blocking=True` copies; JAX
    `pinned_host` memory or prefetching to the device; `tf.data` prefetching to the GPU;
    `cudaMallocHost`/`cudaHostAlloc` or `cudaHostRegister` in a CUDA program) and keep the copy
    async; for per-step inputs reuse one pinned staging buffer. Copies made before the steady
    state (loading weights) are start-up: the report folds them into capture-scope.
    Options: `window`, `report`, `max_findings`, `min_bytes`, `include_driver_api`, `warn_share_pct`.
    Requires: the memcpy and API tables (`--trace=cuda`).
    False positives: one-off copies during loading are harmless (use `window=steady` to judge
    only the steady state); tiny copies cost little, which the host time shows.
    """

    name = "pageable-memcpy"
    title = "Asynchronous memcpy on pageable host memory"
    default_severity = Severity.INFO
    requires = ("memcpy", "api")
    optional = ()
    columns = {"memcpy": ("start", "end", "pid", "correlation_id", "device_id", "stream_id", "bytes", "copy_kind",
                          "src_kind", "dst_kind"),
               "api": ("start", "end", "correlation_id", "pid", "name")}
    window = "full"
    aliases = ("cuda_memcpy_async",)
    Options = Options
    renamed_options = {"warning_share": Renamed("warn_share_pct", 100)}

    table = "memcpy"
    grouping = staticmethod(copy_groups)
    budget_part = "launch_wait"
    outside_note = "outside the steady steps (loading or tear-down): pinning shortens start-up, not the step"

    def flag(self, rows: pd.DataFrame, api_raw: np.ndarray, opts: Any) -> np.ndarray:
        return flag_pageable_async(rows, api_raw, min_bytes=opts.min_bytes, include_driver_api=opts.include_driver_api)

    def severity(self, group: FlaggedCalls, opts: Any) -> Severity:
        # Loading copies cost start-up time, not step time: information, whatever their share of the capture.
        return super().severity(group, opts) if group.in_loop else Severity.INFO

    def saved(self, group: FlaggedCalls) -> int:
        # In the loop, the host's time in the staging calls is launch wait the GPU may pay.
        return group.host_ns

    def message(self, group: CopyGroup, opts: Any) -> str:
        cg, single = group, group.group.single
        what = (f"A {cg.direction} copy ({cg.src} -> {cg.dst}, {human_bytes(cg.nbytes)})" if single else
                f"{cg.count} {cg.direction} copies ({cg.src} -> {cg.dst}, {cg.nbytes / 1e6:.3f} MB in all)")
        return (f"{what} launched with {cg.api} on stream {cg.stream} "
                f"{'uses' if single else 'use'} pageable host memory, so the driver stages it and the call "
                f"blocks the host. Host time in these calls {cg.host_ns / 1e6:.3f} ms ({cg.share:.2f} % of the "
                f"judged {cg.judged_ns / 1e6:.1f} ms), GPU copy time {cg.gpu_ns / 1e6:.3f} ms.")

    def recommendation(self, group: CopyGroup, fw: Framework) -> str:
        text = pinned_memory_advice(fw)
        text = text[0].upper() + text[1:] + "."
        if group.in_loop:
            text += " Reuse one pinned staging buffer for the per-step inputs."
        return text


RULE = PageableMemcpy
