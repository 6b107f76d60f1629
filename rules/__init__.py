"""The built-in rule pack, installed as ``nsys_rules.rules``.

It registers through the same ``register_rules`` hook as third-party plugins.
"""

from __future__ import annotations

from nsys_rules.hooks import hookimpl

from . import graph_trace_hidden

#: Built-in rule modules, one rule each; order is the order of ``nsys-rules rules``.
MODULES = [graph_trace_hidden]


@hookimpl
def register_rules() -> list[type]:
    """Every built-in rule class."""
    return [m.RULE for m in MODULES]
