"""The launch join of the trace's own GPU frames, taken from the GPU activity table once it is built.

The activity table (:mod:`nsys_rules.model.activity`) joins every GPU operation to its launching
API call. Where a frame's rows sit in it in frame order, each with its launching call (the kernels
of the usual trace), a block of frame rows is a block of the table's rows: its launch times and API
rows are views of the table's (:class:`FrameView`), nothing kept per frame. Otherwise its rows keep
their frame row, so the join of a whole frame is a scatter of that result, not another search of the
API ids, kept per trace (4 bytes a row) for the frame's launch times and every rule's ``launch_calls``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nsys_rules.model.trace import Trace
from nsys_rules.model import activity
from nsys_rules.model.launches import launch_times
from nsys_rules.analysis.spliced import Spliced


@dataclass(frozen=True, eq=False)
class FrameView:
    """Where the rows of one GPU frame sit in the trace's activity table (:func:`frame_view`)."""

    #: The activity table.
    ops: activity.GpuOps
    #: Positions of the table's rows from other frames, sorted (a few copies among many kernels).
    others: np.ndarray
    #: For each of them, the frame rows placed before it (``others - arange``: never decreasing).
    before: np.ndarray

    def rows(self, lo: int, hi: int) -> slice | None:
        """The table's rows holding frame rows [lo, hi): a slice, or None when another frame's row lies among them."""
        first = int(np.searchsorted(self.before, lo, side="right"))  # other rows before frame row lo
        last = int(np.searchsorted(self.before, hi - 1, side="right")) if hi > lo else first
        return slice(lo + first, hi + first) if first == last else None

    def whole(self, values: np.ndarray, dtype: type | None = None) -> np.ndarray:
        """An activity field at the frame's rows, in frame order, as ``dtype`` (the field itself when no other
        frame has rows and the type is its own)."""
        if not len(self.others) and (dtype is None or values.dtype == dtype):
            return values
        out = np.empty(len(values) - len(self.others), values.dtype if dtype is None else dtype)
        done = 0  # frame rows placed so far: the blocks between the other rows, straight into the result
        for k, pos in enumerate((*self.others.tolist(), len(values))):
            out[done:pos - k] = values[done + k:pos]
            done = pos - k
        return out


def frame_view(trace: Trace, table: str, rows: int) -> FrameView | None:
    """The :class:`FrameView` of the trace's frame ``table`` of ``rows`` rows, or None: before the activity
    table is built, when its rows are not there in frame order each with its launching call, or when
    more than a few rows of other frames lie among them (then blocks of its rows are rarely blocks
    of the table's)."""
    kind = next((k for k, name in activity.KIND_TABLES.items() if name == table), None)
    ops, in_order = activity.built_gpu_ops(trace)
    if kind is None or ops is None or kind not in in_order:
        return None
    view = trace.memo(("launch_rows.frame_view", table), lambda: (ops, _view(ops, kind)),
                      lambda hit: hit[0] is ops)[1]
    return view if view is not None and len(ops) - len(view.others) == rows else None


def _view(ops: activity.GpuOps, kind: int) -> FrameView | None:
    """The :class:`FrameView` of the rows of ``kind`` in ``ops``; None when too many other rows lie among them."""
    kinds = ops.kind
    if isinstance(kinds, Spliced) and kinds.base is not None and kinds.base.strides == (0,) and (
            not kinds.rows or kinds.base[0] == kind) and not (kinds.values == kind).any():
        others = kinds.at  # one kind with the others spliced in: their positions are known
    else:
        others = (np.zeros(0, np.int64) if getattr(kinds, "strides", None) == (0,) and len(kinds) and
                  kinds[0] == kind else np.flatnonzero(kinds != kind))
    return None if len(others) > _MAX_OTHERS else FrameView(ops, others, others - np.arange(len(others)))


#: Up to this many rows of other frames among a frame's rows (a few copies or memsets among kernels).
_MAX_OTHERS = 4096

def shared_api_rows(trace: Trace, gpu: pd.DataFrame) -> np.ndarray | None:
    """The launching API row of each row of one of the trace's own GPU frames (-1: none), read-only;
    None for any other frame, or before the GPU activity table is built (the join costs less than
    the whole table)."""
    name = trace.own_frame_name(gpu)
    if name is None:
        return None
    if activity.built_gpu_ops(trace)[0] is None:
        return None  # nothing kept: asked again once the table is built, the join is a gather of it

    def build() -> tuple[pd.DataFrame, np.ndarray | None]:
        rows = activity.frame_api_rows(trace, name)
        if rows is None or len(rows) != len(gpu):
            return gpu, None  # the frame does not line up with the table: no shared rows (asked once)
        rows.flags.writeable = False
        return gpu, rows

    return trace.memo(("launch_rows.shared_api_rows", name), build, lambda hit: hit[0] is gpu)[1]


def frame_launch_times(trace: Trace, gpu: pd.DataFrame) -> np.ndarray:
    """:func:`~nsys_rules.model.launches.launch_times` of ``gpu``, from :func:`shared_api_rows` where it
    has them (one gather instead of a search per row; cached alike)."""
    return launch_times(trace, gpu, shared_api_rows(trace, gpu))
