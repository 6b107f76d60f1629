"""The built-in rule pack, installed as ``nsys_rules.rules``.

It registers through the same ``register_rules`` hook as third-party plugins, and its rules
over all ranks of a job through ``register_job_rules``.
"""

from __future__ import annotations

from nsys_rules.api import hookimpl

from nsys_rules.rules import (capture_scope, device_copies, fp32_gemm, fusion_candidate, graph_trace_hidden, input_prep,
                              launch_blocking, module_loading, recompile, step_outliers, step_uploads)
from nsys_rules.rules.alloc_churn import alloc_churn
from nsys_rules.rules.copies import pageable_memcpy, sync_memcpy, sync_memset  # nsys analyze parity
from nsys_rules.rules.gaps import gpu_idle_gaps, gpu_low_utilization  # nsys analyze parity
from nsys_rules.rules.gemv import debug_build, gemv_dominance
from nsys_rules.rules.kernel_tail import kernel_tail
from nsys_rules.rules.launch_bound import launch_bound
from nsys_rules.rules.queue_delay import queue_delay
from nsys_rules.rules.ranks import exposed_comm, rank_imbalance, rank_straggler  # job rules: all ranks together
from nsys_rules.rules.sync_stall import sync_stall

#: Built-in rule modules, one rule each; order is the order of ``nsys-rules rules``.
MODULES = [graph_trace_hidden, gemv_dominance, kernel_tail, debug_build, input_prep, sync_stall, alloc_churn]
MODULES += [pageable_memcpy, sync_memcpy, sync_memset, gpu_idle_gaps, gpu_low_utilization, launch_bound,
            launch_blocking, queue_delay, capture_scope, step_outliers, module_loading, recompile, fusion_candidate,
            fp32_gemm, step_uploads, device_copies]


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
