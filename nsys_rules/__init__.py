"""nsys-rules: rules over NVIDIA Nsight Systems SQLite exports.

The public surface for rule and plugin authors lives in :mod:`nsys_rules.api`
(``Rule``, ``Finding``, ``Severity``, ``hookimpl``) and :mod:`nsys_rules.testing`
(``TraceBuilder``).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
