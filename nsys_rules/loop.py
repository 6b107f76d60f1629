"""A rule's window seen as GPU work and as a loop: the helpers rules of several families share.

:func:`gpu_op_frames` is the window's GPU operations (what the whole-capture GPU rules read);
:func:`gpu_launches`, :func:`loop_span` and :func:`spread` say where the repeating loop is, which
is where host-side patterns (syncs, allocations) are judged; :func:`step_count` how many steps it has.

Load and tear-down can sit inside a window that has no steps (a whole-capture window, or a
kernel-pattern window that runs to the end of the capture), so rules about the steady loop
restrict themselves to the step span, or, without steps, to the span between the first and the
last GPU launch of the window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from nsys_rules.analysis.device_time import GPU_OP_TABLES
from nsys_rules.errors import MissingData

if TYPE_CHECKING:
    from nsys_rules.rule import RuleContext


def gpu_launches(ctx: "RuleContext") -> np.ndarray:
    """Launch times (start of the launching API call) of the window's GPU work (:data:`GPU_OP_TABLES`), unsorted."""
    out = [ctx.frame(t)["launch_start"].to_numpy(np.int64) for t in GPU_OP_TABLES if ctx.trace.has(t)]
    return np.concatenate(out) if out else np.empty(0, np.int64)


def loop_span(steps: tuple[tuple[int, int], ...], launches: np.ndarray) -> tuple[int, int] | None:
    """First and last instant of the loop: the steps when known, else the first and last GPU launch."""
    if steps:
        return steps[0][0], steps[-1][1]
    if len(launches) >= 2:
        return int(launches.min()), int(launches.max())
    return None


def step_count(ctx: "RuleContext") -> int:
    """Steps of the loop: the step model's steady steps, else the window's steps (0 when none are known)."""
    return ctx.steps.count if ctx.steps is not None else len(ctx.window.steps)


def spread(times: np.ndarray, lo: int, hi: int, slices: int = 10) -> float:
    """Share of ``slices`` equal parts of ``[lo, hi]`` that hold at least one of ``times`` (0..1).

    A burst at load fills one or two parts; calls that recur through the loop fill most of them.
    """
    if hi <= lo or not len(times) or slices < 1:
        return 0.0
    part = np.clip((np.asarray(times, np.int64) - lo) * slices // (hi - lo), 0, slices - 1)
    return len(np.unique(part)) / slices


def gpu_op_frames(ctx: "RuleContext") -> list[pd.DataFrame]:
    """The window's rows of :data:`GPU_OP_TABLES` (start, end, pid, device_id, correlation_id).

    Raises :class:`MissingData` when the trace has none of the tables, so the whole-capture
    GPU rules are skipped with the capture fix, as nsys analyze skips them.
    """
    tables = [t for t in GPU_OP_TABLES if ctx.trace.has(t)]
    if not tables:
        raise MissingData("the trace has no GPU operations (kernel, memcpy, memset or graph-trace tables)",
                          "capture with `nsys profile --trace=cuda`")
    return [ctx.frame(t, ["start", "end", "pid", "device_id", "correlation_id"]) for t in tables]
