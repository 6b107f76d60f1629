"""Pure functions over arrays and frames: no trace, no rule context, no state.

What belongs here takes numpy arrays or pandas frames and returns numbers, masks or frames,
the same for every caller: interval arithmetic (:mod:`.intervals`, :mod:`.points`), statistics
per group (:mod:`.grouped`), the launch join's keys (:mod:`.keys`), API calls and NVTX ranges
by what they are (:mod:`.names`), kernel classes by name (:mod:`.taxonomy`), blocking calls
(:mod:`.host`), per-device time (:mod:`.device_time`), flagged rows cut into groups
(:mod:`.flagged`), and the column helpers (:mod:`.spliced`). What a trace *is* (its steps, its
budget, its GPU activity) is built once per trace in :mod:`nsys_rules.model`; what serves one
family of rules lives with that family under ``rules/``.
"""
