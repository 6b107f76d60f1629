"""nsys's own diagnostics: the ``DIAGNOSTIC_EVENT`` rows of an export, their text resolved.

nsys writes what went wrong during a capture into the report (``nsys export`` keeps it as
``DIAGNOSTIC_EVENT`` since about nsys 2024.2): severity (``ENUM_DIAGNOSTIC_SEVERITY_LEVEL``:
1 info, 2 warning, 3 error, 4 verbose), source (1 injection, 2 daemon, 3 analysis) and a text,
a ``StringIds`` reference in SQLite exports and the string itself in some folder exports.
Older exports carry no such table; :func:`read_diagnostics` then returns None, and the trace
model says the verdict rests on the trace's own checks alone. This module only reads; the
meaning of each message is :mod:`nsys_rules.model.diagnostics`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsys_rules.loaders.export import Export

#: The table nsys writes its diagnostics into.
DIAGNOSTIC_TABLE = "DIAGNOSTIC_EVENT"
#: ``severity`` values (``ENUM_DIAGNOSTIC_SEVERITY_LEVEL``).
INFO, WARNING, ERROR = 1, 2, 3
#: Rows read at most: real exports write a few dozen (one per process and library).
MAX_ROWS = 10_000


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One diagnostic row: ``severity`` (1 info, 2 warning, 3 error), ``source`` (1 injection, 2 daemon,
    3 analysis; 0 unknown) and its text."""

    severity: int
    source: int
    text: str


def read_diagnostics(export: Export) -> list[Diagnostic] | None:
    """The export's diagnostic rows in a stable order (sorted: exports may store rows in any order), or None
    when the export has no ``DIAGNOSTIC_EVENT`` table (nsys before 2024 wrote none)."""
    if DIAGNOSTIC_TABLE not in export.table_names:
        return None
    rows = export.rows(DIAGNOSTIC_TABLE, ("severity", "source", "text"), limit=MAX_ROWS)
    ids = [r[2] for r in rows if _is_int(r[2])]
    names: dict[int, str] = {}
    if ids:
        resolved = export.resolve_strings(np.asarray(ids, np.int64), "DIAGNOSTIC_EVENT.text")
        names = {int(i): ("" if v is None or v != v else str(v)) for i, v in zip(ids, resolved, strict=True)}
    out = []
    for severity, source, text in rows:
        value = names.get(int(text), "") if _is_int(text) else ("" if text is None else str(text))
        out.append(Diagnostic(_small_int(severity), _small_int(source), value))
    return sorted(out)


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _small_int(value: object) -> int:
    """A severity or source as an int (0 for NULL or anything that is not a whole number)."""
    try:
        return int(value)  # type: ignore[call-overload]  # sqlite gives int, folder exports numpy ints
    except (TypeError, ValueError):
        return 0
