"""The rule API: what a rule or a plugin imports, in one place, for built-in and third-party rules alike.

Rules (the built-in pack included) and plugins import from here and from its two namespaces::

    from nsys_rules.api import Finding, Location, Rule, RuleContext, Severity, hookimpl, metric
    from nsys_rules.api.analysis import merge_intervals, point_in   # pure helpers over arrays
    from nsys_rules.api.loaders import ColumnarExport, Trace        # for a plugin that reads a new format

The names in ``__all__`` keep their meaning across minor releases; every other module of
``nsys_rules`` is internal and may change without notice. ``docs/api.md`` lists them, group by group.
A rule gets its trace, options and window in a :class:`RuleContext` (``ctx.frame(table)`` is the
window's rows, GPU rows by the time of their launching call; ``ctx.launch_calls(table)`` the launching
API call of each row; ``ctx.steps`` and ``ctx.budget`` the step model and where its time goes;
``host_sites`` and ``call_site`` the Python function and line behind host time and CUDA calls) and
reports with ``ctx.finding(...)``. A trace is read through its typed frames: no SQL reaches a rule.

Moved names: the plumbing this module used to export (interval arithmetic, per-group statistics, API
name sets, ... in :mod:`nsys_rules.api.analysis`; ``Trace``, ``Export``, ``ColumnarExport``,
``InputError`` in :mod:`nsys_rules.api.loaders`) and the test kit (:mod:`nsys_rules.testing`) are
still found here for one release, each with a :class:`DeprecationWarning` naming its new place.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from nsys_rules.advice import (fusion_advice, graph_capture_advice, nvtx_range_advice, pinned_memory_advice,
                               profiler_range_advice, resident_data_advice, running_value_advice, scalar_readback_names)
from nsys_rules.api import analysis, loaders  # noqa: F401 - the namespaces, imported with the API
from nsys_rules.errors import MissingData, UsageError
from nsys_rules.findings import Finding, Location, Metric, Severity, SourceLine, metric
from nsys_rules.hooks import hookimpl
from nsys_rules.job_rule import JobContext, JobRule, step_list
from nsys_rules.loop import gpu_launches, gpu_op_frames, loop_span, spread, step_count
from nsys_rules.model.activity import KERNEL, MEMCPY, MEMSET, REPLAY, gpu_ops, kernel_symbols
from nsys_rules.model.budget import LABELS, Budget, part_of_class, require_visible_kernels
from nsys_rules.model.trace_view import TraceView
from nsys_rules.model.commands import command_evidence, debug_build, program_command, recapture_command
from nsys_rules.model.framework import Framework, framework
from nsys_rules.model.gpu_metrics import BudgetMetrics, PartActivity, measure_kernels
from nsys_rules.model.job.model import Job
from nsys_rules.model.launches import launch_api_rows, launch_times, launching_rows
from nsys_rules.model.python_sites import PythonSite, call_site, host_sites, python_stacks
from nsys_rules.model.regime_causes import StepFacts, compiles_only, kernels_after, library_of, step_facts, step_lengths
from nsys_rules.model.step_kinds import StepKind, step_kinds
from nsys_rules.model.steps import Regime, StepModel
from nsys_rules.model.windows import Window, steady_state_window
from nsys_rules.model.workload import looks_like_training
from nsys_rules.report import Report
from nsys_rules.rule import Renamed, Rule, RuleContext
from nsys_rules.textsafe import shell_join, shell_word
from nsys_rules.units import counted, human_bytes, human_ns, parse_size, pct, plain_number
from nsys_rules.userfiles import read_small_text

__all__ = [
    # -- rules, findings and plugins: what a rule is, what it reports, how a plugin registers it --------------
    "Rule", "RuleContext", "TraceView", "Renamed", "MissingData", "UsageError",
    "Finding", "Severity", "Location", "SourceLine", "Metric", "metric",
    "hookimpl", "Report", "JobRule", "JobContext", "Job", "step_list",
    # -- the context: the window a rule judges, the steps of the loop, where a step's time goes --------------
    "Window", "steady_state_window", "StepModel", "Regime", "StepFacts", "step_facts", "kernels_after", "library_of",
    "compiles_only", "step_lengths", "StepKind", "step_kinds",
    "Budget", "LABELS", "part_of_class", "require_visible_kernels", "BudgetMetrics", "PartActivity",
    "measure_kernels", "looks_like_training",
    # -- GPU work and the calls that launched it ------------------------------------------------------------
    "gpu_ops", "kernel_symbols", "KERNEL", "MEMCPY", "MEMSET", "REPLAY", "gpu_op_frames", "gpu_launches",
    "loop_span", "spread", "step_count", "launch_times", "launching_rows", "launch_api_rows",
    # -- the program: its framework, its command, its Python call sites -------------------------------------
    "Framework", "framework", "command_evidence", "debug_build", "program_command",
    "recapture_command", "python_stacks", "host_sites", "call_site", "PythonSite",
    # -- advice in the program's own terms, units and phrasing ----------------------------------------------
    "graph_capture_advice", "fusion_advice", "pinned_memory_advice", "profiler_range_advice", "nvtx_range_advice",
    "scalar_readback_names", "running_value_advice", "resident_data_advice",
    "pct", "counted", "human_ns", "human_bytes", "plain_number", "parse_size", "shell_word", "shell_join", "read_small_text",
    # -- the read-only trace view rules see (branch wt-memo adds it here: one name) -------------------------
]

#: Names this module used to export, now in a namespace (one release of forwarding, with a warning each).
_MOVED = {**{name: "nsys_rules.api.analysis" for name in analysis.__all__},
          **{name: "nsys_rules.api.loaders" for name in ("Trace", "Export", "ColumnarExport", "InputError")}}

#: Test-kit names this module used to export: now in :mod:`nsys_rules.testing` (this release still forwards them).
_MOVED_TO_TESTING = frozenset({"TraceBuilder", "GpuSpec", "run_rule", "run_rules", "only_finding", "metric_values",
                               "skip_reason", "JobPlan", "write_job", "run_job_rules"})


def __getattr__(name: str) -> Any:
    """Forward a moved name to its new place, with a deprecation warning naming it (removed in the next release).

    The test kit runs the engine, which sits above the rule API, so it is loaded by name only when an
    old plugin test asks for it; the analysis helpers and the loader types moved to namespaces.
    """
    if name in _MOVED_TO_TESTING:
        warnings.warn(f"nsys_rules.api.{name} moved to nsys_rules.testing.{name}; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module("nsys_rules.testing"), name)
    if name in _MOVED:
        warnings.warn(f"nsys_rules.api.{name} moved to {_MOVED[name]}.{name}; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module 'nsys_rules.api' has no attribute {name!r}")
