"""The built-in rule pack, installed as ``nsys_rules.rules``.

It registers through the same ``register_rules`` hook as third-party plugins, and its rules
over all ranks of a job through ``register_job_rules``.
"""

from __future__ import annotations

from nsys_rules.hooks import hookimpl

from . import graph_trace_hidden
from . import gemv_dominance
from . import kernel_tail
from . import debug_build
from . import sync_stall, alloc_churn
from . import pageable_memcpy, sync_memcpy, sync_memset, gpu_idle_gaps, gpu_low_utilization  # nsys analyze parity
from . import launch_bound, launch_blocking, queue_delay, capture_scope, step_outliers, module_loading, fusion_candidate
from . import fp32_gemm
from . import rank_straggler, exposed_comm, rank_imbalance  # job rules: all ranks together

#: Built-in rule modules, one rule each; order is the order of ``nsys-rules rules``.
MODULES = [graph_trace_hidden, gemv_dominance, kernel_tail, debug_build, sync_stall, alloc_churn]
MODULES += [pageable_memcpy, sync_memcpy, sync_memset, gpu_idle_gaps, gpu_low_utilization, launch_bound,
            launch_blocking, queue_delay, capture_scope, step_outliers, module_loading, fusion_candidate, fp32_gemm]


#: Built-in job rule modules (over all ranks of a job), in ``nsys-rules rules`` order after the others.
JOB_MODULES = [rank_straggler, exposed_comm, rank_imbalance]


@hookimpl
def register_rules() -> list[type]:
    """Every built-in rule class."""
    return [m.RULE for m in MODULES]


@hookimpl
def register_job_rules() -> list[type]:
    """Every built-in job rule class."""
    return [m.RULE for m in JOB_MODULES]
