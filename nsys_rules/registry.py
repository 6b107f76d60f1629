"""What the plugins registered: rules, formats and loaders, each with the plugin that brought it.

Built by :func:`nsys_rules.plugin_manager.build_registry`; read by the engine, the commands and the
formatters (which only need this type, not the plugin manager).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from nsys_rules.records import RunError
from nsys_rules.rule import Rule

#: The plugin name of the built-in rule pack (and of the built-in formats and loaders).
BUILTIN = "nsys-rules (built-in)"


@dataclass
class Registry:
    """Everything the plugins registered."""

    rules: dict[str, type[Rule]] = field(default_factory=dict)
    rule_plugin: dict[str, str] = field(default_factory=dict)
    formatters: dict[str, Callable[..., str]] = field(default_factory=dict)
    loaders: dict[str, Callable[..., Any]] = field(default_factory=dict)
    plugins: list[dict[str, str]] = field(default_factory=list)
    errors: list[RunError] = field(default_factory=list)

    def aliases(self) -> dict[str, str]:
        """Alias (e.g. NVIDIA's rule name) -> rule name."""
        return {alias: name for name, cls in self.rules.items() for alias in cls.aliases}
