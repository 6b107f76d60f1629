"""nsys-rules: rules over NVIDIA Nsight Systems exports.

In a notebook or a script, :func:`check` runs the rules and returns the report (docs/python.md)::

    import nsys_rules
    r = nsys_rules.check("trace.sqlite")
    r.to_frame()            # ranked findings as a pandas DataFrame; r.to_frame("budget"): the step budget

Rule and plugin authors import from :mod:`nsys_rules.api` (``Rule``, ``RuleContext``, ``Finding``,
``Severity``, ``hookimpl``, the step model and budget) and its namespaces :mod:`nsys_rules.api.analysis`
and :mod:`nsys_rules.api.loaders`; the test kit (``TraceBuilder``, ``run_rule``, ``run_rules``) is
:mod:`nsys_rules.testing` (docs/plugins.md, "Testing a plugin"). The other modules are internal.
"""

from __future__ import annotations

# No import here: `python -m nsys_rules` and the console script run this module before nsys_rules.__main__
# sets its Ctrl-C handler, so every statement here widens the window where an interrupt is Python's own (issue 42:
# a `from typing import Any` here put this file in 33 of 713 interrupted start-ups' tracebacks, under load).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

#: The Python API (nsys_rules.notebook, the commands' floor), imported by name on first use: every floor imports
#: ``__version__`` from this package, so it cannot import the API at load time, and ``import nsys_rules``
#: stays cheap, as the command line needs it to be.
_LAZY = ("check", "CheckReport", "StepBudget", "BudgetPart", "TraceSummary")  # a literal: no call to interrupt

__all__ = ["__version__", "check", "CheckReport", "StepBudget", "BudgetPart", "TraceSummary"]


def __getattr__(name: str) -> Any:
    """``nsys_rules.check`` and the report types, loaded from :mod:`nsys_rules.notebook` when first asked for."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module("nsys_rules.notebook"), name)
    raise AttributeError(f"module 'nsys_rules' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
