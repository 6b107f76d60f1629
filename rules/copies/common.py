"""The shared base of the copy and memset rules: rows flagged by their launching call, grouped, reported alike.

pageable-memcpy, sync-memcpy and sync-memset flag GPU rows by the API call that launched them
and report the same evidence per group: rows, bytes, host time in the calls, GPU time, share
of the judged time, and savings only for rows launched inside the steady steps. Only the
flagging and the words differ, so :class:`FlaggedCallRule` runs the check and the rules say
what to flag and how to phrase it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Iterator

import numpy as np
import pandas as pd

from nsys_rules.api import Finding, Framework, Location, metric, Metric, pct, Rule, RuleContext, Severity
from nsys_rules.api.analysis import FlaggedGroup, split_flagged

COPY_KINDS = {1: "HtoD", 2: "DtoH", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
MEMORY_KINDS = {0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed", 5: "device static",
                6: "managed static"}


def in_steps(ctx: RuleContext, rows: pd.DataFrame) -> np.ndarray:
    """Per row, whether it was launched inside the steady steps (else it belongs to loading or tear-down)."""
    span = ctx.steps.host_span if ctx.steps is not None else None
    if span is None:
        return np.zeros(len(rows), bool)
    launch = rows["launch_start"].to_numpy() if "launch_start" in rows else rows["start"].to_numpy()
    return (launch >= span[0]) & (launch <= span[1])


def launched_in_steps(ctx: RuleContext, rows: pd.DataFrame) -> bool:
    """Whether most ``rows`` were launched inside the steady steps (else they belong to loading or tear-down)."""
    inside = in_steps(ctx, rows)
    return bool(len(inside)) and bool(inside.mean() >= 0.5)


@dataclass(frozen=True)
class FlaggedCalls:
    """One finding's worth of flagged rows, the calls that launched them, and their totals."""

    #: Metric names of the row count and of the GPU time (the rules' JSON keys).
    count_metric: ClassVar[str] = "rows"
    gpu_metric: ClassVar[str] = "gpu_time"

    group: FlaggedGroup
    api: str
    stream: int
    host_ns: int  # host time in the launching calls
    gpu_ns: int  # GPU time of the rows
    nbytes: int
    judged_ns: int  # the window's length
    in_loop: bool  # launched inside the steady steps

    @property
    def count(self) -> int:
        """Rows in the group."""
        return len(self.group.rows)

    @property
    def share(self) -> float:
        """Host time in the calls as a percent of the judged time."""
        return pct(self.host_ns, self.judged_ns)

    def metrics(self) -> dict[str, Metric]:
        """The evidence the copy and memset rules report."""
        return {self.count_metric: metric(self.count, "count"), "bytes": metric(self.nbytes, "B"),
                "host_time": metric(self.host_ns, "ns"), self.gpu_metric: metric(self.gpu_ns, "ns"),
                "share_of_judged_time": metric(self.share, "%")}

    def location(self) -> Location:
        """Process, device, stream, API and the flagged time range."""
        rows = self.group.rows
        return Location(pid=int(rows["pid"].iloc[0]), device=int(rows["device_id"].iloc[0]), stream=int(self.stream),
                        api=self.api, start_ns=self.group.start, end_ns=self.group.end)

    @property
    def key(self) -> str:
        """Fingerprint key (the row ordinal added in per-row mode)."""
        raise NotImplementedError


@dataclass(frozen=True)
class CopyGroup(FlaggedCalls):
    """Flagged copies of one direction."""

    count_metric: ClassVar[str] = "copies"
    gpu_metric: ClassVar[str] = "gpu_copy_time"

    direction: str = ""
    src: str = "?"  # memory kinds of the first copy's ends
    dst: str = "?"

    #: "outside-steps" for the copies launched outside the steady steps when the loop has copies of
    #: the same direction too (the weight load beside the per-step inputs); "" otherwise.
    phase: str = ""

    @property
    def key(self) -> str:
        """Fingerprint key: the direction, the phase when split (plus the row ordinal in per-row mode)."""
        return f"{self.direction}{'/' + self.phase if self.phase else ''}{self.group.key_suffix}"


@dataclass(frozen=True)
class MemsetGroup(FlaggedCalls):
    """Flagged memsets of one API, memory kind and stream."""

    count_metric: ClassVar[str] = "memsets"

    kind: str = "?"  # memory kind

    @property
    def key(self) -> str:
        """Fingerprint key: memory kind and stream (plus the row ordinal in per-row mode)."""
        return f"{self.kind}/{self.stream}{self.group.key_suffix}"


def _flagged_rows(rows: pd.DataFrame, calls: pd.DataFrame, mask: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows ``mask`` selects and their launching calls, each renumbered from 0."""
    return rows.loc[mask].reset_index(drop=True), calls.loc[mask].reset_index(drop=True)


def _totals(rows: pd.DataFrame) -> dict[str, int]:
    """Host time in the calls (a negative one, from a damaged export, as 0), GPU time and bytes of ``rows``."""
    return {"host_ns": int(rows["host_ns"].clip(lower=0).sum()), "gpu_ns": int((rows["end"] - rows["start"]).sum()),
            "nbytes": int(rows["bytes"].sum())}


def copy_groups(ctx: RuleContext, copies: pd.DataFrame, calls: pd.DataFrame, mask: np.ndarray, report: str,
                max_findings: int) -> Iterator[CopyGroup]:
    """Group the copies selected by ``mask`` (``calls``: their launching calls, from ``launch_api_rows``)."""
    rows, calls = _flagged_rows(copies, calls, mask)
    rows["api"] = calls["api_raw"].astype(object).fillna("?").to_numpy()
    rows["host_ns"] = (calls["api_end"] - calls["api_start"]).to_numpy()
    rows["direction"] = [COPY_KINDS.get(int(k), str(k)) for k in rows["copy_kind"].to_numpy()]
    lo, hi = ctx.window_bounds()
    judged = max(1, hi - lo)
    # One finding per direction: the cause (pageable memory, a synchronous call) is the same whichever
    # call site or stream issued the copy; the most used API and stream name the group. Where the loop
    # copies in a direction, the same direction's copies outside it (the weight load before it, the
    # final result after it) are a finding of their own: they cost start-up, not the step.
    inside = in_steps(ctx, rows)
    loop_directions = set(rows["direction"].to_numpy()[inside])
    rows["phase"] = np.where(inside | ~rows["direction"].isin(loop_directions).to_numpy(), "", "outside-steps")
    for group in split_flagged(rows, ["direction", "phase"], report, max_findings):
        g = group.rows
        direction, phase = group.key
        in_loop = launched_in_steps(ctx, g) if not phase else False
        yield CopyGroup(group, str(g["api"].value_counts().index[0]), int(g["stream_id"].value_counts().index[0]),
                        judged_ns=judged, in_loop=in_loop, direction=str(direction), phase=str(phase),
                        src=MEMORY_KINDS.get(int(g["src_kind"].iloc[0]), "?"),
                        dst=MEMORY_KINDS.get(int(g["dst_kind"].iloc[0]), "?"), **_totals(g))


def memset_groups(ctx: RuleContext, memsets: pd.DataFrame, calls: pd.DataFrame, mask: np.ndarray, report: str,
                  max_findings: int) -> Iterator[MemsetGroup]:
    """Group the memsets selected by ``mask`` by API, memory kind and stream (``calls``: their launching calls)."""
    rows, calls = _flagged_rows(memsets, calls, mask)
    rows["api"] = calls["api_raw"].to_numpy()
    rows["host_ns"] = (calls["api_end"] - calls["api_start"]).to_numpy()
    lo, hi = ctx.window_bounds()
    judged = max(1, hi - lo)
    for group in split_flagged(rows, ["api", "mem_kind", "stream_id"], report, max_findings):
        api_name, mem_kind, stream = group.key
        yield MemsetGroup(group, str(api_name), int(stream), judged_ns=judged, in_loop=launched_in_steps(ctx, group.rows),
                          kind=MEMORY_KINDS.get(int(mem_kind), str(mem_kind)), **_totals(group.rows))


class FlaggedCallRule(Rule):
    """The check of a rule that flags GPU rows by their launching call and reports them in groups.

    A subclass names its ``table``, says which rows to :meth:`flag` and how to group them
    (``grouping``: :func:`copy_groups` or :func:`memset_groups`), and phrases each group
    (:meth:`message`, :meth:`recommendation`). Severity is a warning when the host time in the
    calls reaches ``warn_share_pct`` of the judged time; rows launched inside the steady steps
    save the host's blocked time beyond the GPU's own (:meth:`saved`), in the budget part
    ``budget_part``, and the others say why they do not (``outside_note``).
    """

    table: ClassVar[str] = ""
    grouping: ClassVar[Callable[..., Iterator[FlaggedCalls]]]
    budget_part: ClassVar[str] = "after_sync"
    outside_note: ClassVar[str] = "outside the steady steps (loading or tear-down): not step time"

    def flag(self, rows: pd.DataFrame, api_raw: np.ndarray, opts: Any) -> np.ndarray:
        """Mask of the rows to report (``api_raw``: each row's launching call)."""
        raise NotImplementedError

    def message(self, group: Any, opts: Any) -> str:
        """What the group's rows are and what they cost."""
        raise NotImplementedError

    def recommendation(self, group: Any, fw: Framework) -> str:
        """The fix for the group's calls, in the terms of the program's framework ``fw``."""
        raise NotImplementedError

    def severity(self, group: FlaggedCalls, opts: Any) -> Severity:
        """Warning when the host time in the calls reaches ``warn_share_pct`` of the judged time."""
        return Severity.WARNING if group.host_ns >= opts.warn_share_pct / 100 * group.judged_ns else Severity.INFO

    def saved(self, group: FlaggedCalls) -> int:
        """What fixing the calls gives back to the step: the host's blocked time beyond the GPU's own work."""
        return max(0, group.host_ns - group.gpu_ns)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        """One finding per group of flagged rows."""
        opts = ctx.options
        rows = ctx.frame(self.table)
        calls = ctx.launch_calls(self.table)
        mask = self.flag(rows, calls["api_raw"].to_numpy(), opts)
        if not mask.any():
            return
        fw = ctx.framework
        for group in self.grouping(ctx, rows, calls, mask, opts.report, opts.max_findings):
            savings: dict[str, Any] = ({"estimated_savings_ns": self.saved(group), "budget_part": self.budget_part}
                                       if group.in_loop else {"savings_note": self.outside_note})
            yield ctx.finding(self.message(group, opts), self.recommendation(group, fw), severity=self.severity(group, opts),
                              metrics=group.metrics(), location=group.location(), key=group.key, **savings)
