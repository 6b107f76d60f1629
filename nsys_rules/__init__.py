"""nsys-rules: rules over NVIDIA Nsight Systems exports.

Rule and plugin authors import everything from :mod:`nsys_rules.api` (``Rule``, ``RuleContext``,
``Finding``, ``Severity``, ``hookimpl``, the shared analyses and the test helpers such as
``TraceBuilder``); the other modules are internal.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
