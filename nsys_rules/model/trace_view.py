"""What a rule sees of a trace: :class:`TraceView`, a read-only protocol (``ctx.trace``).

A rule reads the trace's tables and the facts of its capture; it never builds a model fact from
the trace itself. The facts built from a trace (its framework, its GPU operations, the Python stacks,
the command that captures it again, ...) are properties and methods of the rule's context
(:class:`nsys_rules.rule.RuleContext`), built once per trace and shared by every rule. The
:class:`~nsys_rules.model.trace.Trace` itself (its memo, its export, its loading) stays with the engine.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Protocol

import pandas as pd

from nsys_rules.model.trace import CaptureInfo, ExportInfo, GpuInfo


class TraceView(Protocol):
    """A trace as rules read it: its tables, row counts, capture facts, GPUs and label; nothing to change."""

    @property
    def label(self) -> str:
        """How reports name the trace (its path as given)."""
        ...

    @property
    def capture(self) -> CaptureInfo:
        """How the trace was captured: graph trace mode, what was traced, the command, its environment."""
        ...

    @property
    def export_info(self) -> ExportInfo:
        """Which nsys wrote the export, and its export schema version."""
        ...

    @property
    def gpus(self) -> Mapping[int, GpuInfo]:
        """The capture host's GPUs by the kernels' ``deviceId``."""
        ...

    @property
    def tables_present(self) -> tuple[str, ...]:
        """Canonical tables the export can provide."""
        ...

    def has(self, name: str) -> bool:
        """Whether the export has a usable source table for canonical table ``name``."""
        ...

    def row_count(self, name: str) -> int:
        """Rows of canonical table ``name`` in the file (0 when absent), without loading it."""
        ...

    def frame(self, name: str, columns: Iterable[str] | None = None) -> pd.DataFrame:
        """The whole capture's canonical frame ``name`` (shared: a rule that writes into it gets its own copy)."""
        ...

    def api_names(self) -> pd.Series:
        """Base API names (``_v<digits>`` removed) aligned with ``frame("api")``."""
        ...

    def gpu(self, device_id: int) -> GpuInfo | None:
        """The GPU whose id is the kernels' ``deviceId``; None when the export does not describe it."""
        ...
