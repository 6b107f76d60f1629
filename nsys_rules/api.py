"""The rule API: everything a rule or a plugin may import, in one place, for built-in and third-party rules alike.

Rules (the built-in pack included) and plugins import from here and only from here::

    from nsys_rules.api import Finding, Location, Rule, RuleContext, Severity, hookimpl, metric

The names in ``__all__`` keep their meaning across minor releases; every other module of
``nsys_rules`` is internal and may change without notice. A rule gets its trace, options and
window in a :class:`RuleContext` (``ctx.frame(table)`` is the window's rows, GPU rows by the
time of their launching call; ``ctx.launch_calls(table)`` the launching API call of each row;
``ctx.steps`` and ``ctx.budget`` the step model and where its time goes; ``host_sites`` and
``call_site`` the Python function and line behind host time and CUDA calls) and reports with
``ctx.finding(...)``. The functions below are the ones the built-in rules use, so a plugin gets
the same launch join, interval arithmetic, per-group statistics and kernel classes. A trace is
read through its typed frames: no SQL reaches a rule.

The test kit (``TraceBuilder``, ``run_rule``, ...) is :mod:`nsys_rules.testing`; its names are
still found here for one release, with a deprecation warning.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from nsys_rules.advice import (fusion_advice, graph_capture_advice, nvtx_range_advice, pinned_memory_advice,
                               profiler_range_advice, resident_data_advice, running_value_advice, scalar_readback_names)
from nsys_rules.analysis.device_time import GPU_OP_TABLES, chunk_utilization, device_intervals, merge_low_chunks
from nsys_rules.analysis.flagged import REPORT_MODES, FlaggedGroup, split_flagged
from nsys_rules.analysis.grouped import (GroupStats, code_durations, column_codes, duration_sum, first_rows, group_ids,
                                         group_quantiles, group_stats, key_int, masked_durations, packed_lexsort,
                                         packed_sort, quantiles, segment_sums)
from nsys_rules.analysis.host import blocking_calls, busiest_thread, copy_directions
from nsys_rules.analysis.intervals import (Coverage, busy_ns, busy_within, coverage, gaps_at_least, idle_gaps,
                                           merge_intervals, overlap_length, point_in, rising, union)
from nsys_rules.analysis.keys import find_keys, first_of_each_call, keys_rising, launch_key, sorted_keys
from nsys_rules.analysis.names import (ALLOC_APIS, ANY_KERNEL_LAUNCH_APIS, DEVICE_SYNC_APIS, GRAPH_LAUNCH_APIS,
                                       KERNEL_LAUNCH_APIS, MODULE_LOAD_APIS, MODULE_LOADS, PROFILER_START_APIS, SYNC_APIS,
                                       category_codes, flag_names, in_set, is_any_launch, is_library_range,
                                       is_waiting_call, rows_with_codes)
from nsys_rules.analysis.taxonomy import CLASSES, base_name, category_classes, classify
from nsys_rules.analysis.taxonomy import DEFAULT as DEFAULT_TAXONOMY
from nsys_rules.errors import InputError, MissingData, UsageError
from nsys_rules.findings import Finding, Location, Metric, Severity, SourceLine, metric
from nsys_rules.hooks import hookimpl
from nsys_rules.job_rule import JobContext, JobRule, step_list
from nsys_rules.loaders.columnar import ColumnarExport
from nsys_rules.loaders.export import Export
from nsys_rules.loop import gpu_launches, gpu_op_frames, loop_span, spread, step_count
from nsys_rules.model.activity import KERNEL, MEMCPY, MEMSET, REPLAY, gpu_ops, kernel_symbols
from nsys_rules.model.budget import LABELS, Budget, part_of_class, require_visible_kernels
from nsys_rules.model.commands import (CommandEvidence, command_evidence, debug_build, program_command,
                                       recapture_command)
from nsys_rules.model.framework import Framework, framework
from nsys_rules.model.gpu_metrics import BudgetMetrics, PartActivity, measure_kernels
from nsys_rules.model.job.model import Job
from nsys_rules.model.host_evidence import LOADER_FRAME, BlockEvidence, block_evidence, readback_waits
from nsys_rules.model.launches import launch_api_rows, launch_times, launching_rows
from nsys_rules.model.python_sites import (PythonFrame, PythonSite, PythonStacks, call_site, call_site_rows,
                                           host_sites, is_library_file, python_stacks)
from nsys_rules.model.regime_causes import GRAPH_CAPTURE_APIS, StepFacts, kernels_after, library_of, step_facts
from nsys_rules.model.steps import Regime, StepModel
from nsys_rules.model.trace import Trace
from nsys_rules.model.windows import Window, steady_state_window
from nsys_rules.model.workload import looks_like_training
from nsys_rules.report import Report
from nsys_rules.rule import Renamed, Rule, RuleContext
from nsys_rules.textsafe import shell_join, shell_word
from nsys_rules.units import human_ns, parse_size, pct, plain_number
from nsys_rules.userfiles import read_small_text

__all__ = [
    # rules and what they get
    "Rule", "RuleContext", "Renamed", "Window", "steady_state_window", "StepModel", "Regime", "Budget", "Trace",
    "MissingData", "InputError", "UsageError",
    # the program's framework (advice in its own terms); what each step holds
    "Framework", "framework", "looks_like_training", "StepFacts", "step_facts", "GRAPH_CAPTURE_APIS", "kernels_after",
    "library_of",
    # the fixes several rules share, in the program's framework's own terms (nsys_rules.advice)
    "graph_capture_advice", "fusion_advice", "pinned_memory_advice", "profiler_range_advice", "nvtx_range_advice",
    "scalar_readback_names", "running_value_advice", "resident_data_advice",
    # findings
    "Finding", "Severity", "Location", "SourceLine", "Metric", "metric",
    # hooks and the other things plugins register; jobs (all ranks together)
    "hookimpl", "JobRule", "JobContext", "Job", "step_list", "Report", "Export", "ColumnarExport",
    # the launch join
    "launch_times", "launching_rows", "launch_api_rows", "launch_key", "sorted_keys", "find_keys", "keys_rising",
    "first_of_each_call",
    # GPU work: every operation as one table, the window's operations, the loop, per-device time
    "gpu_ops", "kernel_symbols", "KERNEL", "MEMCPY", "MEMSET", "REPLAY", "GPU_OP_TABLES", "gpu_op_frames",
    "gpu_launches", "loop_span", "spread", "step_count", "device_intervals", "chunk_utilization", "merge_low_chunks",
    # the step budget's parts; what the GPU metrics measured during them (Budget.metrics)
    "LABELS", "part_of_class", "require_visible_kernels", "BudgetMetrics", "PartActivity", "measure_kernels",
    # intervals
    "merge_intervals", "union", "busy_ns", "busy_within", "idle_gaps", "gaps_at_least", "overlap_length", "point_in",
    "rising", "Coverage", "coverage",
    # statistics per group
    "group_ids", "group_quantiles", "group_stats", "key_int", "GroupStats", "code_durations", "column_codes", "first_rows",
    "masked_durations", "duration_sum", "packed_lexsort", "packed_sort", "quantiles", "segment_sums",
    # API calls and NVTX ranges by what they are; blocking calls
    "KERNEL_LAUNCH_APIS", "GRAPH_LAUNCH_APIS", "ANY_KERNEL_LAUNCH_APIS", "SYNC_APIS", "DEVICE_SYNC_APIS", "ALLOC_APIS",
    "MODULE_LOAD_APIS", "MODULE_LOADS", "PROFILER_START_APIS", "in_set", "flag_names", "is_library_range",
    "category_codes", "rows_with_codes", "is_any_launch", "is_waiting_call", "blocking_calls", "busiest_thread",
    "copy_directions",
    # kernel classes
    "CLASSES", "DEFAULT_TAXONOMY", "base_name", "classify", "category_classes",
    # flagged rows cut into findings (the nsys analyze parity rules)
    "REPORT_MODES", "FlaggedGroup", "split_flagged",
    # Python call sites (nsys Python sampling and backtraces at CUDA calls)
    "python_stacks", "PythonStacks", "host_sites", "call_site", "call_site_rows", "PythonSite", "PythonFrame",
    "is_library_file",
    # what the host threads did while the GPU waited through blocks of host time (the evidence of a cause)
    "BlockEvidence", "block_evidence", "LOADER_FRAME", "readback_waits",
    # the recorded command (a debug build, the release command), and words safe to paste into a shell
    "CommandEvidence", "command_evidence", "debug_build", "program_command", "recapture_command", "shell_word",
    "shell_join",
    # units and files
    "pct", "human_ns", "plain_number", "parse_size", "read_small_text",
]

#: Test-kit names this module used to export: now in :mod:`nsys_rules.testing` (this release still forwards them).
_MOVED_TO_TESTING = frozenset({"TraceBuilder", "GpuSpec", "run_rule", "run_rules", "only_finding", "metric_values",
                               "skip_reason", "JobPlan", "write_job", "run_job_rules"})


def __getattr__(name: str) -> Any:
    """Forward a test-kit name to :mod:`nsys_rules.testing`, with a deprecation warning (removed in the next release).

    The kit runs the engine, which sits above the rule API, so the API no longer imports it; it is
    loaded by name only when an old plugin test asks for it.
    """
    if name in _MOVED_TO_TESTING:
        warnings.warn(f"nsys_rules.api.{name} moved to nsys_rules.testing.{name}; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module("nsys_rules.testing"), name)
    raise AttributeError(f"module 'nsys_rules.api' has no attribute {name!r}")
