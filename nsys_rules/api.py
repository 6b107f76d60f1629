"""Everything a plugin may import, in one place: the rule API, findings, hooks, the shared analyses, test helpers.

Plugins (and their tests) import from here and only from here::

    from nsys_rules.api import Finding, Location, Rule, RuleContext, Severity, hookimpl, metric

The names in ``__all__`` keep their meaning across minor releases; every other module of
``nsys_rules`` is internal and may change without notice. A rule gets its trace, options and
window in a :class:`RuleContext` (``ctx.frame(table)`` is the window's rows, GPU rows by the
time of their launching call; ``ctx.launch_calls(table)`` the launching API call of each row;
``ctx.steps`` and ``ctx.budget`` the step model and where its time goes) and reports with
``ctx.finding(...)``. The analysis functions below are the ones the built-in rules use, so a
plugin gets the same launch join, interval arithmetic and per-group statistics.
"""

from __future__ import annotations

from .analysis.budget import Budget
from .analysis.grouped import GroupStats, group_ids, group_quantiles, group_stats
from .analysis.intervals import Coverage, busy_ns, coverage, idle_gaps, merge_intervals, overlap_length, point_in, union
from .analysis.launches import find_keys, launch_api_rows, launch_key, launch_times, launching_rows, sorted_keys
from .analysis.names import (ALLOC_APIS, ANY_KERNEL_LAUNCH_APIS, GRAPH_LAUNCH_APIS, KERNEL_LAUNCH_APIS, MODULE_LOAD_APIS,
                             SYNC_APIS, flag_names, in_set, is_library_range)
from .analysis.steps import StepModel
from .errors import InputError, MissingData
from .findings import Finding, Location, Metric, Severity, metric
from .hooks import hookimpl
from .job.rule import JobContext, JobRule
from .job.testing import JobPlan, run_job_rules, write_job
from .loaders.export import ColumnarExport, Export
from .report import Report
from .rule import Renamed, Rule, RuleContext
from .testing import GpuSpec, TraceBuilder, metric_values, only_finding, run_rule, run_rules, skip_reason
from .trace import Trace
from .windows import Window

__all__ = [
    # rules and what they get
    "Rule", "RuleContext", "Renamed", "Window", "StepModel", "Budget", "Trace", "MissingData", "InputError",
    # findings
    "Finding", "Severity", "Location", "Metric", "metric",
    # hooks and the other things plugins register
    "hookimpl", "JobRule", "JobContext", "Report", "Export", "ColumnarExport",
    # the launch join
    "launch_times", "launching_rows", "launch_api_rows", "launch_key", "sorted_keys", "find_keys",
    # intervals
    "merge_intervals", "union", "busy_ns", "idle_gaps", "overlap_length", "point_in", "Coverage", "coverage",
    # statistics per group
    "group_ids", "group_quantiles", "group_stats", "GroupStats",
    # API calls and NVTX ranges by what they are
    "KERNEL_LAUNCH_APIS", "GRAPH_LAUNCH_APIS", "ANY_KERNEL_LAUNCH_APIS", "SYNC_APIS", "ALLOC_APIS", "MODULE_LOAD_APIS",
    "in_set", "flag_names", "is_library_range",
    # testing
    "TraceBuilder", "GpuSpec", "run_rule", "run_rules", "only_finding", "metric_values", "skip_reason", "JobPlan",
    "write_job", "run_job_rules",
]
