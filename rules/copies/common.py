"""Flagged memcpy rows turned into finding-sized groups, shared by pageable-memcpy and sync-memcpy.

Both rules flag copies by their launching API call and report the same evidence per group
(API, direction, stream): copies, bytes, host time in the calls, GPU copy time, share of the
judged time. Only the flagging and the words differ, so those stay in the rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pandas as pd

from nsys_rules.api import FlaggedGroup, Location, RuleContext, Metric, metric, pct, split_flagged

COPY_KINDS = {1: "HtoD", 2: "DtoH", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
MEMORY_KINDS = {0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed", 5: "device static",
                6: "managed static"}


@dataclass(frozen=True)
class CopyGroup:
    """One finding's worth of flagged copies and its totals."""

    group: FlaggedGroup
    api: str
    direction: str
    stream: int
    host_ns: int
    gpu_ns: int
    nbytes: int
    src: str
    dst: str
    judged_ns: int

    @property
    def count(self) -> int:
        """Copies in the group."""
        return len(self.group.rows)

    @property
    def share(self) -> float:
        """Host time in the calls as a percent of the judged time."""
        return pct(self.host_ns, self.judged_ns)

    def metrics(self) -> dict[str, Metric]:
        """The evidence both copy rules report."""
        return {"copies": metric(self.count, "count"), "bytes": metric(self.nbytes, "B"),
                "host_time": metric(self.host_ns, "ns"), "gpu_copy_time": metric(self.gpu_ns, "ns"),
                "share_of_judged_time": metric(self.share, "%")}

    def location(self) -> Location:
        """Process, device, stream, API and the flagged time range."""
        rows = self.group.rows
        return Location(pid=int(rows["pid"].iloc[0]), device=int(rows["device_id"].iloc[0]), stream=int(self.stream),
                        api=self.api, start_ns=self.group.start, end_ns=self.group.end)

    def in_loop(self, ctx: RuleContext) -> bool:
        """Whether the copies were launched inside the steady steps (else they belong to loading or tear-down)."""
        span = ctx.steps.host_span if ctx.steps is not None else None
        if span is None:
            return False
        launch = self.group.rows["launch_start"].to_numpy() if "launch_start" in self.group.rows else \
            self.group.rows["start"].to_numpy()
        return bool(((launch >= span[0]) & (launch <= span[1])).mean() >= 0.5)

    @property
    def key(self) -> str:
        """Fingerprint key: the direction (plus the row ordinal in per-row mode)."""
        return f"{self.direction}{self.group.key_suffix}"


def copy_groups(ctx: RuleContext, copies: pd.DataFrame, api: pd.DataFrame, mask: np.ndarray, report: str,
                max_findings: int) -> Iterator[CopyGroup]:
    """Group the copies selected by ``mask`` (``api``: their launching calls, from ``launch_api_rows``)."""
    rows = copies.loc[mask].reset_index(drop=True)
    calls = api.loc[mask].reset_index(drop=True)
    rows["api"] = calls["api_raw"].astype(object).fillna("?").to_numpy()
    rows["host_ns"] = (calls["api_end"] - calls["api_start"]).to_numpy()
    rows["direction"] = [COPY_KINDS.get(int(k), str(k)) for k in rows["copy_kind"].to_numpy()]
    lo, hi = ctx.window_bounds()
    judged = max(1, hi - lo)
    # One finding per direction: the cause (pageable memory, a synchronous call) is the same whichever
    # call site or stream issued the copy; the most used API and stream name the group.
    for group in split_flagged(rows, ["direction"], report, max_findings):
        g = group.rows
        (direction,) = group.key
        api_name = g["api"].value_counts().index[0]
        stream = g["stream_id"].value_counts().index[0]
        yield CopyGroup(group, str(api_name), str(direction), int(stream),
                        int(g["host_ns"].clip(lower=0).sum()), int((g["end"] - g["start"]).sum()), int(g["bytes"].sum()),
                        MEMORY_KINDS.get(int(g["src_kind"].iloc[0]), "?"), MEMORY_KINDS.get(int(g["dst_kind"].iloc[0]), "?"),
                        judged)
