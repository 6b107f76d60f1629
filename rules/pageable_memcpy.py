"""pageable-memcpy: asynchronous copies from or to pageable host memory (nsys `cuda_memcpy_async`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from nsys_rules.findings import Finding, Location, Severity
from nsys_rules.rule import Rule, RuleContext, metric

from ._common import pct
from ._gpu_activity import launch_api_rows, split_flagged

PAGEABLE = 0
COPY_KINDS = {1: "HtoD", 2: "DtoH", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
MEMORY_KINDS = {0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed", 5: "device static",
                6: "managed static"}
#: nsys matches `cudaMemcpy%Async%`; the driver API's `cuMemcpy*Async` copies behave the same.
ASYNC_COPY_API = re.compile(r"^cu(?:da)?Memcpy.*Async")


@dataclass(frozen=True)
class Options:
    """Options of pageable-memcpy."""

    window: str = field(default="full", metadata={"help": "'full' (whole capture, as nsys analyze) or 'steady'"})
    report: str = field(default="auto", metadata={
        "help": "'all': one finding per flagged copy; 'group': one per API, direction and stream; "
                "'auto': per copy while a group has at most max_findings copies"})
    max_findings: int = field(default=5, metadata={"help": "copies per group reported one by one in 'auto' mode"})
    min_bytes: int = field(default=0, metadata={"help": "ignore copies smaller than this (nsys: 0)"})
    include_driver_api: bool = field(default=True, metadata={
        "help": "also flag driver `cuMemcpy*Async` calls (nsys only matches `cudaMemcpy*Async`)"})
    warning_share: float = field(default=0.05, metadata={
        "help": "warning when the host time of the flagged calls reaches this share of the judged time"})


def flag_pageable_async(copies: pd.DataFrame, api_raw: np.ndarray, *, min_bytes: int = 0,
                        include_driver_api: bool = True) -> np.ndarray:
    """Mask of copies with a pageable end launched by an asynchronous memcpy call."""
    names = pd.Series(api_raw, dtype=object).fillna("")
    pattern = ASYNC_COPY_API if include_driver_api else re.compile(r"^cudaMemcpy.*Async")
    by_api = names.str.contains(pattern).to_numpy()
    pageable = (copies["src_kind"].to_numpy() == PAGEABLE) | (copies["dst_kind"].to_numpy() == PAGEABLE)
    return by_api & pageable & (copies["bytes"].to_numpy() >= min_bytes)


class PageableMemcpy(Rule):
    """Asynchronous memcpy calls whose host side is pageable memory.

    What it detects: copies launched with `cudaMemcpy*Async` (or the driver's `cuMemcpy*Async`)
    whose source or destination is pageable host memory (the memcpy row's memory kind 0),
    as nsys's `cuda_memcpy_async` rule does.
    Why it hurts: the driver must stage pageable memory through a pinned bounce buffer, so the
    "async" call blocks the host until the copy is staged and cannot overlap with kernels;
    in a decode loop every such copy is a hidden host stall.
    Evidence: count, bytes, GPU copy time and host time of the flagged calls per API,
    direction and stream; the time range of the flagged copies.
    Next optimizations: allocate the host buffer pinned (`cudaMallocHost`/`cudaHostAlloc`,
    `torch.empty(..., pin_memory=True)` / `tensor.pin_memory()`, or `cudaHostRegister` an
    existing buffer) and keep the copy async; for per-step inputs reuse one pinned staging buffer.
    Options: `window`, `report`, `max_findings`, `min_bytes`, `include_driver_api`, `warning_share`.
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

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        copies = ctx.frame("memcpy")
        api = launch_api_rows(ctx.trace, copies)
        mask = flag_pageable_async(copies, api["api_raw"].to_numpy(), min_bytes=opts.min_bytes,
                                   include_driver_api=opts.include_driver_api)
        if not mask.any():
            return
        rows = copies.loc[mask].reset_index(drop=True)
        api = api.loc[mask].reset_index(drop=True)
        rows["api"] = api["api_raw"].to_numpy()
        rows["host_ns"] = (api["api_end"] - api["api_start"]).to_numpy()
        rows["direction"] = [COPY_KINDS.get(int(k), str(k)) for k in rows["copy_kind"].to_numpy()]
        lo, hi = ctx.window_bounds()
        judged = max(1, hi - lo)
        for group in split_flagged(rows, ["api", "direction", "stream_id"], opts.report, opts.max_findings):
            g = group.rows
            host = int(g["host_ns"].clip(lower=0).sum())
            gpu = int((g["end"] - g["start"]).sum())
            nbytes = int(g["bytes"].sum())
            api_name, direction, stream = group.key
            share = pct(host, judged)
            severity = Severity.WARNING if host >= opts.warning_share * judged else Severity.INFO
            src = MEMORY_KINDS.get(int(g["src_kind"].iloc[0]), "?")
            dst = MEMORY_KINDS.get(int(g["dst_kind"].iloc[0]), "?")
            what = (f"A {direction} copy ({src} -> {dst}, {nbytes} B)" if group.single else
                    f"{len(g)} {direction} copies ({src} -> {dst}, {nbytes / 1e6:.3f} MB in all)")
            yield ctx.finding(
                f"{what} launched with {api_name} on stream {stream} "
                f"{'uses' if group.single else 'use'} pageable host memory, so the driver stages it and the call "
                f"blocks the host. Host time in these calls {host / 1e6:.3f} ms ({share:.2f} % of the "
                f"judged {judged / 1e6:.1f} ms), GPU copy time {gpu / 1e6:.3f} ms.",
                "Pin the host buffer (`cudaMallocHost`/`cudaHostAlloc`, `cudaHostRegister` on an existing buffer, "
                "or `pin_memory=True` in PyTorch) and keep the copy asynchronous; reuse one pinned staging buffer "
                "for per-step inputs.",
                severity=severity,
                metrics={"copies": metric(len(g), "count"), "bytes": metric(nbytes, "B"),
                         "host_time": metric(host, "ns"), "gpu_copy_time": metric(gpu, "ns"),
                         "share_of_judged_time": metric(share, "%")},
                location=Location(pid=int(g["pid"].iloc[0]), device=int(g["device_id"].iloc[0]), stream=int(stream),
                                  api=str(api_name), start_ns=group.start, end_ns=group.end),
                estimated_savings_ns=host, key=f"{direction}/{stream}{group.key_suffix}")


RULE = PageableMemcpy
