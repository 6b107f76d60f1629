"""What the whole-capture GPU time rules share: the columns they read, GPU work per device, the steady state.

gpu-idle-gaps and gpu-low-utilization both judge each process's GPU work per device over the
whole capture (as ``nsys analyze`` does) and tell start-up apart from the steady state.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pandas as pd

from nsys_rules.api import RuleContext
from nsys_rules.api.analysis import device_intervals

#: The GPU operations per process and device (kernel names for the steady window's kernel
#: pattern), and the API and NVTX rows that place the steady state.
GPU_TIME_COLUMNS = {"kernels": ("start", "end", "pid", "device_id", "correlation_id", "name"),
                    "memcpy": ("start", "end", "pid", "device_id", "correlation_id"),
                    "memset": ("start", "end", "pid", "device_id", "correlation_id"),
                    "graph_trace": ("start", "end", "pid", "device_id", "correlation_id"),
                    "api": ("start", "end", "correlation_id", "pid", "name"),
                    "nvtx": ("start", "end", "name")}

#: Bounds that hold every timestamp: where the steady state is unknown, nothing is before or after it.
UNBOUNDED = (-(2**62), 2**62)


def per_device(ops: pd.DataFrame | list[pd.DataFrame]) -> Iterator[tuple[object, object, np.ndarray, np.ndarray]]:
    """(pid, device, starts, ends) of the operations of each process and device.

    ``ops``: one frame of GPU operations, or several (kernels, memcpys, memsets) read as one.
    """
    return device_intervals(ops if isinstance(ops, list) else [ops])


def steady_start(ctx: RuleContext) -> int:
    """Where the steady state begins (what starts before it is start-up); the lowest time when unknown."""
    window = ctx.steady_window
    return window.start if window.start is not None and window.kind != "none" else UNBOUNDED[0]


def steady_gpu_span(ctx: RuleContext) -> tuple[int, int]:
    """The steady state on the GPU clock (its steps' GPU work), else the steady window; unbounded when unknown."""
    window = ctx.steady_window
    gpu_span = window.model.gpu_span if window.model is not None else None
    if gpu_span is not None:  # a model with steps
        return gpu_span
    bounds = window.bounds
    if bounds is None or window.kind == "none":
        return UNBOUNDED
    return int(bounds[0]), int(bounds[1])
