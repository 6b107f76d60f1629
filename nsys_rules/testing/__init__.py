"""The test kit for rule and plugin authors: write real nsys-schema exports and run rules on them.

Everything here is public (``__all__``) and kept across minor releases::

    from nsys_rules.testing import TraceBuilder, run_rule, only_finding

``TraceBuilder`` writes a SQLite file with the tables and columns the loader reads; ``run_rule``
runs one rule through the real engine on it; :mod:`.jobs` builds multi-rank jobs;
``assert_rule_conventions`` checks a rule's docstring, names and options as the built-in rules' are.
"""

from __future__ import annotations

from nsys_rules.testing.builder import GPU_METRIC_NAMES, MAIN_TID, PID, GpuSpec, TraceBuilder
from nsys_rules.testing.running import metric_values, only_finding, run_rule, run_rules, skip_reason
from nsys_rules.testing.conventions import assert_rule_conventions, rule_convention_problems
from nsys_rules.testing.jobs import JobPlan, run_job_rules, write_job

__all__ = ["TraceBuilder", "PID", "MAIN_TID", "GpuSpec", "run_rule", "run_rules", "only_finding", "metric_values",
           "skip_reason", "JobPlan", "write_job", "run_job_rules", "assert_rule_conventions", "rule_convention_problems",
           "GPU_METRIC_NAMES"]
