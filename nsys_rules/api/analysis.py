"""Pure helpers over arrays that the built-in rules share, for rules that want the same arithmetic.

Interval arithmetic, per-group statistics, the launch keys, API calls and NVTX ranges by what they
are, kernel classes, flagged rows cut into findings, blocking calls and per-device time: what
:mod:`nsys_rules.analysis` holds, the functions the built-in rules import. None of them takes a
trace or a context: they work on the frames ``ctx.frame(...)`` returns (numpy arrays and pandas
columns), so they are tested without one.

These names keep their meaning across minor releases, as :mod:`nsys_rules.api`'s do; until the
next release, :mod:`nsys_rules.api` still forwards them, with a deprecation warning.
"""

from __future__ import annotations

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
from nsys_rules.model.commands import CommandEvidence
from nsys_rules.model.host_evidence import LOADER_FRAME, BlockEvidence
from nsys_rules.model.python_sites import PythonFrame, PythonStacks, call_site_rows, is_library_file
from nsys_rules.model.regime_causes import GRAPH_CAPTURE_APIS

__all__ = [
    # intervals: merged, covered, idle, rising
    "merge_intervals", "union", "busy_ns", "busy_within", "idle_gaps", "gaps_at_least", "overlap_length", "point_in",
    "rising", "Coverage", "coverage",
    # statistics per group (codes, sorted keys, durations, quantiles)
    "group_ids", "group_quantiles", "group_stats", "key_int", "GroupStats", "code_durations", "column_codes",
    "first_rows", "masked_durations", "duration_sum", "packed_lexsort", "packed_sort", "quantiles", "segment_sums",
    # the launch keys (a GPU row to its launching call)
    "launch_key", "sorted_keys", "find_keys", "keys_rising", "first_of_each_call",
    # API calls and NVTX ranges by what they are; blocking calls and their threads
    "KERNEL_LAUNCH_APIS", "GRAPH_LAUNCH_APIS", "ANY_KERNEL_LAUNCH_APIS", "SYNC_APIS", "DEVICE_SYNC_APIS", "ALLOC_APIS",
    "MODULE_LOAD_APIS", "MODULE_LOADS", "PROFILER_START_APIS", "GRAPH_CAPTURE_APIS", "in_set", "flag_names",
    "is_library_range", "category_codes", "rows_with_codes", "is_any_launch", "is_waiting_call", "blocking_calls",
    "busiest_thread", "copy_directions",
    # kernel classes
    "CLASSES", "DEFAULT_TAXONOMY", "base_name", "classify", "category_classes",
    # flagged rows cut into findings (the nsys analyze parity rules)
    "REPORT_MODES", "FlaggedGroup", "split_flagged",
    # per-device time
    "GPU_OP_TABLES", "device_intervals", "chunk_utilization", "merge_low_chunks",
    # Python call sites, row by row; the recorded command's evidence (what ``command_evidence`` returns)
    "PythonStacks", "PythonFrame", "call_site_rows", "is_library_file", "CommandEvidence",
    # host evidence: the regular expression that names loader code, what blocks of host time held
    "LOADER_FRAME", "BlockEvidence",
]
