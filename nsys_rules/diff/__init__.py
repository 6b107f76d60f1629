"""``nsys-rules diff``: the runs of BASE and NEW compared per step (see :mod:`.result`).

:mod:`.sides` measures one trace (its summary and per-step series), :mod:`.same` says whether two
traces are runs of one program and step, :mod:`.result` compares them with intervals.
"""

from nsys_rules.diff.result import (DEFAULT_GATE_PCT, DEFAULT_HOST_SPREAD_PCT, DIFF_SCHEMA_VERSION, Change,
                                    DiffResult, compare, diff_schema)
from nsys_rules.diff.sides import Run, run_of, side_summary

__all__ = ["DEFAULT_GATE_PCT", "DEFAULT_HOST_SPREAD_PCT", "DIFF_SCHEMA_VERSION", "Change", "DiffResult", "Run",
           "compare", "diff_schema", "run_of", "side_summary"]
